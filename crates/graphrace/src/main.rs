//! `graphrace`: the Part II model on the command line.
//!
//! ```text
//! graphrace --config repro/graphrace/incident.toml --sessions 10..100 --every 10 --replays 200
//! graphrace --config repro/graphrace/incident.toml --config repro/graphrace/overlap-off.toml --sessions 60 --json
//! graphrace check --config repro/graphrace/incident.toml --sessions 60
//! graphrace timeline --config repro/graphrace/incident.toml --sessions 60
//! graphrace check-graph --graph repro/results/graphrace-graph-h200.json --config incident
//! graphrace suite
//! ```
//!
//! Without a subcommand it prints corruption rates: one row per concurrency, one column per
//! configuration (or, with `--json`, one object per configuration and concurrency per line).
//! `check` prints the static happens-before report of the captured step (exit status 0 either
//! way: findings are the output, not a failure). `timeline` prints the kernels of the first
//! replay in which something collided, and what collided. `check-graph` runs the check on the
//! graphs CUDA built (dumped on a GPU by `graphrace-gpu --dump-graph`): each race with its
//! witness, and where the driver's ordering differs from the model's. `suite` judges the check
//! against the GPU: every variant of the suite, its races, what the GPU's replays corrupted and
//! the margin they left, then the confusion table.
//!
//! A configuration file that cannot be used exits with status 1 and names the file, the line
//! and the reason; usage errors exit with clap's status 2.

use std::io::{ErrorKind, Write};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use graphrace::driver::{self, DriverGraph, GraphDump};
use graphrace::suite::{Suite, SuiteRecord, Verdict, judge};
use graphrace::{Captured, Config, MAX_SESSIONS, Timing, Workload};

/// The CUDA-graph multi-stream race, modelled: rates, the static check, a racing replay.
#[derive(Debug, Parser)]
#[command(
    name = "graphrace",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    rates: RatesArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The static happens-before check of the captured step: races and latent frees.
    Check(OneArgs),
    /// The first racing replay: every kernel's start and end, and what collided.
    Timeline(OneArgs),
    /// The static check on the graphs CUDA built: races with a witness, and the driver's
    /// ordering against the model's.
    CheckGraph(GraphArgs),
    /// The check judged against the GPU on the suite's variants: the confusion table.
    Suite(SuiteArgs),
}

#[derive(Debug, Args)]
struct SuiteArgs {
    /// The suite's variants.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "repro/graphrace-suite.toml"
    )]
    suite: PathBuf,
    /// The GPU's replays of it (`graphrace-gpu --suite … --out`).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "repro/results/graphrace-suite-h200.json"
    )]
    gpu: PathBuf,
    /// The graphs the GPU built for it (`graphrace-gpu --suite … --dump-graph`).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "repro/results/graphrace-suite-graphs-h200.json"
    )]
    graphs: PathBuf,
    /// Where the configurations are.
    #[arg(long, value_name = "DIR", default_value = "repro/graphrace")]
    configs: PathBuf,
    /// One JSON object per variant per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct GraphArgs {
    /// A dump written by `graphrace-gpu --dump-graph`, e.g.
    /// repro/results/graphrace-graph-h200.json.
    #[arg(long, value_name = "PATH")]
    graph: PathBuf,
    /// Only this configuration's graph.
    #[arg(long, value_name = "NAME")]
    config: Option<String>,
    /// Where the configurations are, to compare with the model's graph of each.
    #[arg(long, value_name = "DIR", default_value = "repro/graphrace")]
    configs: PathBuf,
    /// One JSON object per graph per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RatesArgs {
    /// Configuration files (TOML), e.g. repro/graphrace/incident.toml; repeat for more columns.
    #[arg(long = "config", value_name = "PATH", required = true)]
    configs: Vec<PathBuf>,
    /// Concurrent sessions: `N` or `A..B` (inclusive).
    #[arg(long, value_name = "A..B", value_parser = parse_sessions, default_value = "60")]
    sessions: RangeInclusive<u32>,
    /// Step through the sessions range.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    every: u32,
    #[command(flatten)]
    load: LoadArgs,
    /// One JSON object per configuration and concurrency per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// Graph replays per trial (decode steps each session goes through).
    #[arg(long, value_name = "N", default_value_t = Workload::default().replays,
          value_parser = clap::value_parser!(u32).range(1..))]
    replays: u32,
    /// Independent load tests per point.
    #[arg(long, value_name = "N", default_value_t = Workload::default().trials,
          value_parser = clap::value_parser!(u32).range(1..))]
    trials: u32,
    #[arg(long, value_name = "N", default_value_t = Workload::default().seed)]
    seed: u64,
    /// σ of the per-replay log-normal jitter of kernel durations (the calibrated number).
    #[arg(long, value_name = "X", default_value_t = Timing::default().jitter_sigma,
          value_parser = parse_sigma)]
    sigma: f64,
    /// Slow-down of each of two kernels running at once.
    #[arg(long, value_name = "X", default_value_t = Timing::default().contention,
          value_parser = parse_contention)]
    contention: f64,
}

impl LoadArgs {
    fn workload(&self) -> Workload {
        Workload {
            replays: self.replays,
            trials: self.trials,
            seed: self.seed,
        }
    }

    fn timing(&self) -> Timing {
        Timing {
            jitter_sigma: self.sigma,
            contention: self.contention,
        }
    }
}

#[derive(Debug, Args)]
struct OneArgs {
    /// Configuration file (TOML).
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// Concurrent sessions.
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = parse_one_session)]
    sessions: u32,
    #[command(flatten)]
    load: LoadArgs,
    #[arg(long)]
    json: bool,
}

/// A line on stdout, returning the write's error: a reader that leaves early (`| head`) ends
/// the run quietly (see [`main`]) instead of a panic in `println!`.
macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)
    };
}

fn parse_sessions(s: &str) -> Result<RangeInclusive<u32>, String> {
    let n = |t: &str| {
        let n = t
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("`{t}` is not a positive number of sessions"))?;
        if n > MAX_SESSIONS {
            return Err(format!(
                "{n} sessions is more than the {MAX_SESSIONS} the simulator takes"
            ));
        }
        Ok(n)
    };
    let range = match s.split_once("..") {
        Some((a, b)) => n(a)?..=n(b)?,
        None => n(s)?..=n(s)?,
    };
    if range.is_empty() {
        return Err(format!("`{s}` is an empty range"));
    }
    Ok(range)
}

fn parse_one_session(s: &str) -> Result<u32, String> {
    let range = parse_sessions(s)?;
    if range.start() != range.end() {
        return Err(format!("`{s}`: one number of sessions here"));
    }
    Ok(*range.start())
}

/// σ of a log-normal: finite, not negative (0: every replay takes the nominal durations).
fn parse_sigma(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a finite σ ≥ 0")),
    }
}

/// A slow-down factor: finite, at least 1 (1: two kernels at once run at full speed each).
fn parse_contention(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 1.0 => Ok(x),
        _ => Err(format!("`{s}` is not a finite slow-down ≥ 1")),
    }
}

fn load(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read configuration {}", path.display()))?;
    Config::parse(&path.display().to_string(), &text)
        .with_context(|| format!("invalid configuration {}", path.display()))
}

fn captured(config: &Config, sessions: u32) -> Result<Captured> {
    Captured::new(config, sessions)
        .with_context(|| format!("capturing `{}` at {sessions} sessions", config.name))
}

fn rates(args: &RatesArgs) -> Result<()> {
    let configs = args
        .configs
        .iter()
        .map(|p| load(p))
        .collect::<Result<Vec<_>>>()?;
    let sessions: Vec<u32> = args.sessions.clone().step_by(args.every as usize).collect();
    let workload = args.load.workload();
    let timing = args.load.timing();
    let mut table: Vec<Vec<String>> = vec![];
    for &s in &sessions {
        let mut row = vec![s.to_string()];
        for config in &configs {
            let rate = captured(config, s)?.rate(timing, workload);
            if args.json {
                let line = serde_json::json!({
                    "config": config.name,
                    "sessions": s,
                    "corrupted": rate.corrupted,
                    "observed": rate.observed,
                    "rate": rate.fraction(),
                    "racing_replays": rate.racing_replays,
                    "replays": rate.replays,
                });
                say!("{line}")?;
            } else {
                row.push(format!("{:.1} %", 100.0 * rate.fraction()));
            }
        }
        table.push(row);
    }
    if !args.json {
        say!(
            "sessions corrupted ({} trials × {} replays, seed {})",
            workload.trials,
            workload.replays,
            workload.seed
        )?;
        let mut header = vec!["sessions".to_string()];
        header.extend(configs.iter().map(|c| c.name.clone()));
        print_table(&header, &table)?;
    }
    Ok(())
}

fn check(args: &OneArgs) -> Result<()> {
    let config = load(&args.config)?;
    let captured = captured(&config, args.sessions)?;
    let report = captured.check();
    if args.json {
        say!("{}", serde_json::to_string(&report)?)?;
        return Ok(());
    }
    say!(
        "{} at {} sessions: {} kernels; races: {}, latent hazards: {}",
        config.name,
        args.sessions,
        captured.graph.nodes.len(),
        report.races().count(),
        report.findings.len() - report.races().count()
    )?;
    for f in &report.findings {
        say!("  {f}")?;
    }
    Ok(())
}

fn timeline(args: &OneArgs) -> Result<()> {
    let config = load(&args.config)?;
    let captured = captured(&config, args.sessions)?;
    let Some((draw, replay)) =
        captured.first_racing_replay(args.load.timing(), args.load.workload())
    else {
        if args.json {
            say!("null")?;
        } else {
            say!(
                "{} at {} sessions: no replay collided in {} trials × {} replays",
                config.name,
                args.sessions,
                args.load.trials,
                args.load.replays
            )?;
        }
        return Ok(());
    };
    if args.json {
        say!("{}", serde_json::json!({"draw": draw, "replay": replay}))?;
        return Ok(());
    }
    let g = &captured.graph;
    say!(
        "{} at {} sessions: trial {}, replay {}",
        config.name,
        args.sessions,
        draw.trial,
        draw.replay
    )?;
    let rows: Vec<Vec<String>> = replay
        .spans
        .iter()
        .map(|s| {
            let k = &g.nodes[s.node].kernel;
            vec![
                k.name.clone(),
                k.stream.name().to_string(),
                format!("{:.1}", s.start_us),
                format!("{:.1}", s.end_us),
            ]
        })
        .collect();
    print_table(
        &["kernel", "stream", "start µs", "end µs"].map(String::from),
        &rows,
    )?;
    for c in &replay.collisions {
        say!(
            "collision: {} {} `{}` while {} writes `{}` ({:.1}–{:.1} µs): sessions {}..{}",
            g.nodes[c.victim_node].kernel.name,
            if c.victim.write { "writes" } else { "reads" },
            g.tensor_name(c.victim.tensor),
            g.nodes[c.writer_node].kernel.name,
            g.tensor_name(c.writer.tensor),
            c.window_us.start,
            c.window_us.end,
            c.sessions.start,
            c.sessions.end
        )?;
    }
    Ok(())
}

fn suite(args: &SuiteArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.suite)
        .with_context(|| format!("cannot read suite {}", args.suite.display()))?;
    let suite = Suite::parse(&args.suite.display().to_string(), &text, |name| {
        load(&args.configs.join(format!("{name}.toml"))).map_err(|e| format!("{e:#}"))
    })?;
    let record: SuiteRecord = serde_json::from_str(
        &std::fs::read_to_string(&args.gpu)
            .with_context(|| format!("cannot read {}", args.gpu.display()))?,
    )
    .with_context(|| format!("{} is not a suite record", args.gpu.display()))?;
    let judged = judge(&suite, &record, &GraphDump::read(&args.graphs)?)?;
    if args.json {
        for j in &judged {
            say!("{}", serde_json::to_string(j)?)?;
        }
        return Ok(());
    }
    say!(
        "{} variants on the {} (driver {}, {}): {} trials × {} replays each{}",
        judged.len(),
        record.gpu,
        record.driver,
        record.date,
        record.trials,
        record.replays_per_trial,
        if record.load { ", under load" } else { "" }
    )?;
    let rows: Vec<Vec<String>> = (judged.iter())
        .map(|j| {
            vec![
                j.variant.clone(),
                j.driver_races
                    .map_or(format!("{}*", j.model_races), |n| n.to_string()),
                j.latent.to_string(),
                format!("{}/{}", j.gpu.corrupted, j.gpu.observed),
                j.margin_us.map_or("-".into(), |m| format!("{m:+.1}")),
                format!("{:?}", j.verdict),
            ]
        })
        .collect();
    print_table(
        &[
            "variant",
            "races",
            "latent",
            "corrupted",
            "margin µs",
            "verdict",
        ]
        .map(String::from),
        &rows,
    )?;
    say!("(* not captured: the model's graph)")?;
    let count = |v: Verdict| judged.iter().filter(|j| j.verdict == v).count().to_string();
    print_table(
        &["", "corrupted", "never corrupted"].map(String::from),
        &[
            vec![
                "flagged".into(),
                count(Verdict::FlaggedCorrupted),
                count(Verdict::FlaggedClean),
            ],
            vec![
                "clean".into(),
                count(Verdict::CleanCorrupted),
                count(Verdict::CleanClean),
            ],
        ],
    )?;
    Ok(())
}

fn check_graph(args: &GraphArgs) -> Result<()> {
    let path = &args.graph;
    let dump = GraphDump::read(path)?;
    let graphs: Vec<&DriverGraph> = match &args.config {
        Some(name) => vec![dump.graph(name).with_context(|| {
            let have: Vec<&str> = dump.graphs.iter().map(|g| g.config.as_str()).collect();
            format!(
                "{} has no graph `{name}` (it has: {})",
                path.display(),
                have.join(", ")
            )
        })?],
        None => dump.graphs.iter().collect(),
    };
    for g in graphs {
        let races = driver::check(g);
        // A suite's graphs are named by variant (`incident@36`): the configuration is before `@`.
        let config = g.config.split('@').next().unwrap_or_default();
        let file = args.configs.join(format!("{config}.toml"));
        let model = load(&file)
            .and_then(|config| captured(&config, g.sessions))
            .map(|c| driver::compare(g, &c.graph));
        if args.json {
            let line = serde_json::json!({
                "config": g.config,
                "nodes": g.nodes.len(),
                "edges": g.edges.len(),
                "races": races,
                "against_model": model.as_ref().ok(),
            });
            say!("{line}")?;
            continue;
        }
        say!(
            "{}: the graph CUDA built ({}, driver {}, {}): {} nodes, {} edges; races: {}",
            g.config,
            dump.gpu,
            dump.driver,
            dump.date,
            g.nodes.len(),
            g.edges.len(),
            races.len()
        )?;
        for w in &races {
            for line in w.to_string().lines() {
                say!("  {line}")?;
            }
            let mut steps: Vec<(u32, Vec<String>)> = vec![];
            for slot in &w.schedule {
                match steps.last_mut() {
                    Some((at, names)) if *at == slot.start => names.push(g.node_name(slot.node)),
                    _ => steps.push((slot.start, vec![g.node_name(slot.node)])),
                }
            }
            for (at, names) in steps {
                say!("    step {at}: {}", names.join(" | "))?;
            }
        }
        match model {
            Ok(c) if c.agrees() => say!(
                "  against the model ({}, {} sessions): {} kernels matched, same order; the \
                 driver's nodes no model kernel matched: {}",
                file.display(),
                g.sessions,
                c.matched,
                c.harness.join(", ")
            )?,
            Ok(c) => {
                say!(
                    "  against the model ({}, {} sessions): {} kernels matched; they differ:",
                    file.display(),
                    g.sessions,
                    c.matched
                )?;
                for m in &c.missing {
                    say!("    the model's `{m}` is not in the driver's graph")?;
                }
                for (a, b) in &c.only_driver_orders {
                    say!("    the driver orders `{a}` before `{b}`; the model does not")?;
                }
                for (a, b) in &c.only_model_orders {
                    say!("    the model orders `{a}` before `{b}`; the driver does not")?;
                }
            }
            Err(e) => say!("  not compared with the model: {e:#}")?,
        }
    }
    Ok(())
}

fn print_table(header: &[String], rows: &[Vec<String>]) -> std::io::Result<()> {
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        say!("{}", padded.join("  ").trim_end())
    };
    line(header)?;
    for r in rows {
        line(r)?;
    }
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    match &cli.command {
        Some(Command::Check(args)) => check(args),
        Some(Command::Timeline(args)) => timeline(args),
        Some(Command::CheckGraph(args)) => check_graph(args),
        Some(Command::Suite(args)) => suite(args),
        None if cli.rates.configs.is_empty() => bail!("no --config given"),
        None => rates(&cli.rates),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // `graphrace … | head`: the reader left; not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
    })
}
