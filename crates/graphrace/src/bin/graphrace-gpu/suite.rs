//! `--suite`: every variant of a suite replayed, timed kernel by kernel.

use std::path::Path;

use anyhow::{Context, Result};
use graphrace::Finding;
use graphrace::driver::GraphDump;
use graphrace::program::Op;
use graphrace::suite::{Gap, GpuResult, KernelTime, Suite, SuiteRecord};
use graphrace::{Config, Mode, capture, decode_step};

use crate::Args;
use crate::dump::dump_graph;
use crate::gpu::{Gpu, driver_version, run_arm};

/// Every variant of the suite replayed under load, and the driver's graph of each captured one.
pub(crate) fn run_suite(
    gpu: &Gpu,
    args: &Args,
    command: String,
    name: String,
    file: &Path,
) -> Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the suite {}", file.display()))?;
    let suite = Suite::parse(&file.display().to_string(), &text, |config| {
        let path = format!("repro/graphrace/{config}.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        Config::parse(&path, &text).map_err(|e| e.to_string())
    })?;
    let hog_buf = gpu.load.alloc_zeros::<u32>(64 << 20)?;
    let (mut results, mut graphs) = (vec![], vec![]);
    for v in &suite.variants {
        let variant = v.name();
        if v.config.mode == Mode::Captured {
            let mut g = dump_graph(gpu, &v.config, v.sessions, args.blocks)
                .with_context(|| format!("dumping the graph of {variant}"))?;
            g.config = variant.clone();
            graphs.push(g);
        }
        let run = run_arm(gpu, args, "suite", &v.config, v.sessions, 1.0, &hog_buf)
            .with_context(|| format!("replaying {variant}"))?;
        let r = &run.point;
        println!(
            "{variant:>26}: {:>5.1} % of sessions corrupted, {:>4} of {} replays raced, {:.0} µs/replay",
            100.0 * r.rate,
            r.racing_replays,
            r.replays,
            r.us_per_replay
        );
        let gaps = race_gaps(&v.config, v.sessions, &run.timed);
        let kernels = kernel_times(&v.config, v.sessions, &run.timed);
        for g in &gaps {
            println!(
                "{:>26}  {} → {}: gap {:.1} µs at least, {:.1} µs median over {} timed replays",
                "", g.first, g.second, g.min_us, g.median_us, g.replays
            );
        }
        results.push(GpuResult {
            variant,
            gaps,
            kernels,
            corrupted: r.corrupted,
            observed: r.observed,
            racing_replays: r.racing_replays,
            replays: r.replays,
            us_per_replay: r.us_per_replay,
        });
    }
    let (driver, date) = (driver_version(), provenance::utc_now());
    let git_revision: String = option_env!("GRAPHRACE_GIT_REV").unwrap_or("unknown").into();
    let record = SuiteRecord {
        command: command.clone(),
        gpu: name.clone(),
        driver: driver.clone(),
        date: date.clone(),
        git_revision: git_revision.clone(),
        sm_clock_khz: (gpu.cycles_per_us * 1000.0) as i32,
        replays_per_trial: args.replays,
        trials: args.trials,
        load: args.load,
        timed_replays: args.timed,
        results,
    };
    let dump = GraphDump {
        command,
        gpu: name,
        driver,
        date,
        git_revision,
        graphs,
    };
    let graphs_path = args
        .dump_graph
        .as_ref()
        .expect("checked with the arguments");
    for (path, json) in [
        (&args.out, serde_json::to_string_pretty(&record)?),
        (graphs_path, serde_json::to_string_pretty(&dump)?),
    ] {
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Each kernel's median start and end over the timed replays, µs after the replay's first
/// kernel started.
fn kernel_times(config: &Config, sessions: u32, timed: &[Vec<(u64, u64)>]) -> Vec<KernelTime> {
    let program = decode_step(config, sessions);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    (program.ops.iter().enumerate())
        .filter_map(|(at, op)| {
            let Op::Launch(k) = op else { return None };
            let (mut starts, mut ends) = (vec![], vec![]);
            for t in timed {
                let Some(t0) = t.iter().map(|s| s.0).filter(|&s| s > 0).min() else {
                    continue;
                };
                let Some(&(start, end)) = t.get(at) else {
                    continue;
                };
                if start >= t0 && end >= start {
                    starts.push((start - t0) as f64 / 1e3);
                    ends.push((end - t0) as f64 / 1e3);
                }
            }
            Some(KernelTime {
                kernel: k.name.clone(),
                start_us: median(starts)?,
                end_us: median(ends)?,
            })
        })
        .collect()
}

/// For each race the model's check finds in the variant: how long after the first kernel ended
/// the second started, over the timed replays (negative: they overlapped).
fn race_gaps(config: &Config, sessions: u32, timed: &[Vec<(u64, u64)>]) -> Vec<Gap> {
    let program = decode_step(config, sessions);
    let Ok(model) = capture(&program) else {
        return vec![];
    };
    let launch = |kernel: &str| {
        (program.ops.iter()).position(|op| matches!(op, Op::Launch(k) if k.name == kernel))
    };
    let mut gaps = vec![];
    let report = graphrace::check(&model);
    for (a, b) in report.findings.iter().filter_map(Finding::race_pair) {
        let (Some(ia), Some(ib)) = (launch(&a.kernel), launch(&b.kernel)) else {
            continue;
        };
        let mut us: Vec<f64> = (timed.iter())
            .filter_map(|t| {
                let ((_, a_end), (b_start, _)) = (t.get(ia)?, t.get(ib)?);
                (*a_end > 0 && *b_start > 0).then(|| (*b_start as f64 - *a_end as f64) / 1e3)
            })
            .collect();
        if us.is_empty()
            || gaps
                .iter()
                .any(|g: &Gap| g.first == a.kernel && g.second == b.kernel)
        {
            continue;
        }
        us.sort_by(f64::total_cmp);
        gaps.push(Gap {
            first: a.kernel.clone(),
            second: b.kernel.clone(),
            min_us: us[0],
            median_us: us[us.len() / 2],
            replays: us.len() as u32,
        });
    }
    gaps
}
