//! The default mode: the four arms rerun under load, written to `--out`.

use anyhow::{Context, Result};
use graphrace::arms::{ArmsRecord, ArmsSettings};
use graphrace::{Config, Mode};

use crate::Args;
use crate::gpu::{Gpu, driver_version, run_arm};

/// The default mode: every arm replayed at every sessions × stretch, written to `--out`.
pub(crate) fn run_arms(gpu: &Gpu, args: &Args, command: String, name: String) -> Result<()> {
    let hog_buf = gpu.load.alloc_zeros::<u32>(64 << 20)?;
    let arms: [(&'static str, Config); 4] = [
        ("overlap", Config::incident()),
        (
            "serialized",
            Config {
                name: "overlap-off".into(),
                overlap: false,
                ..Config::incident()
            },
        ),
        (
            "eager",
            Config {
                name: "eager".into(),
                mode: Mode::Eager,
                ..Config::incident()
            },
        ),
        (
            "recorded",
            Config {
                name: "record-stream".into(),
                record_stream: true,
                ..Config::incident()
            },
        ),
    ];
    let mut results = vec![];
    for &stretch in &args.side_stretch {
        for &sessions in &args.sessions {
            for (arm, config) in &arms {
                let r = run_arm(gpu, args, arm, config, sessions, stretch, &hog_buf)
                    .with_context(|| format!("arm {arm}, {sessions} sessions, stretch {stretch}"))?
                    .point;
                println!(
                    "stretch {stretch:>4}  {sessions:>3} sessions  {arm:>10}: {:>5.1} % of sessions corrupted, {:>4} of {} replays raced, {:.0} µs/replay",
                    100.0 * r.rate,
                    r.racing_replays,
                    r.replays,
                    r.us_per_replay
                );
                results.push(r);
            }
        }
    }
    let record = ArmsRecord {
        command,
        gpu: name,
        driver: driver_version(),
        date: provenance::utc_now(),
        git_revision: option_env!("GRAPHRACE_GIT_REV").unwrap_or("unknown").into(),
        sm_clock_khz: (gpu.cycles_per_us * 1000.0) as i32,
        settings: ArmsSettings {
            sessions: args.sessions.clone(),
            replays_per_trial: args.replays,
            trials: args.trials,
            side_stretch: args.side_stretch.clone(),
            blocks_per_kernel: args.blocks,
            load: args.load,
            build: "cargo build --release --locked -p graphrace --features cuda".into(),
        },
        results,
    };
    std::fs::write(&args.out, serde_json::to_string_pretty(&record)? + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    Ok(())
}
