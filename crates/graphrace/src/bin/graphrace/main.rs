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

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use basics::text_table::{Align, Rule, render};
use clap::{Parser, Subcommand};
use graphrace::{Captured, Config};

/// A line on stdout, returning the write's error: a reader that leaves early (`| head`) ends
/// the run quietly (see [`main`]) instead of a panic in `println!`.
macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)
    };
}

mod args;
mod check;
mod check_graph;
mod rates;
mod suite;
mod timeline;

use crate::args::OneArgs;
use crate::check_graph::GraphArgs;
use crate::rates::RatesArgs;
use crate::suite::SuiteArgs;

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

/// `header` over `rows`, every column right-aligned, no rule under the header.
fn print_table(header: &[String], rows: &[Vec<String>]) -> std::io::Result<()> {
    let columns: Vec<(&str, Align)> = header.iter().map(|h| (h.as_str(), Align::Right)).collect();
    say!("{}", render(&columns, rows, Rule::None))
}

fn run(cli: Cli) -> Result<()> {
    match &cli.command {
        Some(Command::Check(args)) => check::check(args),
        Some(Command::Timeline(args)) => timeline::timeline(args),
        Some(Command::CheckGraph(args)) => check_graph::check_graph(args),
        Some(Command::Suite(args)) => suite::suite(args),
        None if cli.rates.configs.is_empty() => bail!("no --config given"),
        None => rates::rates(&cli.rates),
    }
}

fn main() -> ExitCode {
    basics::cli::exit_code(run(Cli::parse()))
}
