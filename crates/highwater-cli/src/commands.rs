//! simulate, ledger, forensics: files in, library calls, text out.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use highwater::forensics::{IncidentTable, LogForensics, LogReader, MAX_LINE_BYTES};
use highwater::limits::MAX_FIGURE_SEEDS;
use highwater::recipe::written_name;
use highwater::{Failure, Recipe, RunReport, Sink, StepRecord, simulate_with};
use highwater_plot::{HighWaterChart, Series};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::args::{Cli, Command, ForensicsArgs, LedgerArgs, SimulateArgs};
use crate::input::load_recipe;
use basics::bytes::show;
use basics::text_table::{Align, Rule, render};

pub(crate) fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(a) => simulate(a),
        Command::Ledger(a) => ledger(a),
        Command::Forensics(a) => forensics(a),
        Command::Conform(a) => crate::conform::conform(a),
        Command::Fit(a) => crate::fit::fit(a),
        Command::Atlas(a) => crate::atlas::atlas(a),
        Command::Order(a) => crate::order::order(a),
        Command::Replay(a) => crate::replay::replay(a),
        #[cfg(feature = "cuda")]
        Command::Rerun(a) => crate::rerun::rerun(a),
    }
}

fn describe(r: &Recipe) -> String {
    format!(
        "{}: {}, checkpointing {}, backend {}, batch {} × seq {}; card {}, pool capacity {}",
        r.origin,
        written_name(&r.activation),
        written_name(&r.checkpointing),
        written_name(&r.backend),
        r.batch,
        r.seq_len,
        show(r.card.total_bytes),
        show(r.card.pool_capacity()),
    )
}

/// Advances a progress bar as the run goes.
struct Progress<'a> {
    bar: &'a ProgressBar,
    steps: u64,
}

impl Sink for Progress<'_> {
    fn step(&mut self, _record: &StepRecord) {
        self.bar.inc(1);
    }
    fn died(&mut self, step: u64) {
        self.bar.inc(self.steps - step);
    }
}

/// One line of `simulate --json`: the CLI's contract, kept apart from the library's type.
#[derive(Serialize)]
struct RunLine<'a> {
    recipe: &'a str,
    seed: u64,
    steps: u64,
    died_at: Option<u64>,
    capacity: u64,
    peak_in_use: &'a [u64],
    reserved: &'a [u64],
    pages: &'a [u32],
    failures: &'a [Failure],
}

fn simulate(a: SimulateArgs) -> Result<()> {
    let recipe = load_recipe(&a.recipe)?;
    if !recipe.workload.is_fixed(recipe.seq_len) {
        bail!(
            "{}: its [workload] varies the step (padding, evaluation, loader threads, syncs or \
             cleanups), which the simulator does not model; burn's own code does: \
             `highwater fit {}` runs it dry",
            a.recipe.display(),
            a.recipe.display()
        );
    }
    let steps = a.steps.unwrap_or(recipe.steps);
    let seeds = match (a.seeds.clone(), a.seed) {
        (Some(s), _) => s.0,
        (None, Some(s)) => vec![s],
        (None, None) => recipe.seeds.clone(),
    };
    // The figure keeps every step of every seed: refused before any work past its limit.
    if a.svg.is_some() && !MAX_FIGURE_SEEDS.allows(seeds.len() as u64) {
        bail!(
            "--svg draws a line per seed: {} seeds, above {MAX_FIGURE_SEEDS}",
            seeds.len()
        );
    }
    let tracing = a.trace.is_some() || a.snapshot.is_some();
    if tracing && seeds.len() != 1 {
        bail!(
            "--trace and --snapshot record one run: {} seeds were asked for (say --seed N)",
            seeds.len()
        );
    }
    let (first, last) = a.trace_steps.unwrap_or((1, steps));
    if tracing && last > steps {
        bail!("--trace-steps ends at step {last}, after the run's last step ({steps})");
    }
    let total = steps.saturating_mul(seeds.len() as u64);
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(total).with_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} steps ({eta})")
                .expect("a valid template")
                .progress_chars("=> "),
        )
    } else {
        ProgressBar::hidden()
    };
    let mut out = std::io::stdout().lock();
    // Each run is reduced, as it ends, to what the table and the figure show: memory stays
    // bounded by the seeds, not by seeds × steps.
    let mut rows = vec![];
    let mut series = vec![];
    for &seed in &seeds {
        bar.set_message(format!("seed {seed}"));
        let report = if tracing {
            // The range is checked against the limits before anything runs.
            let (report, trace) = highwater::simulate_traced(&recipe, seed, first..=last)?;
            write_trace(&a, &trace)?;
            // The run goes on past the traced range, without recording; a run that died
            // within it is over, and reports the steps asked for.
            if steps > last && report.died_at.is_none() {
                simulate_with(&recipe, seed, steps, &mut Progress { bar: &bar, steps })
            } else {
                RunReport { steps, ..report }
            }
        } else {
            simulate_with(&recipe, seed, steps, &mut Progress { bar: &bar, steps })
        };
        if a.json {
            let line = RunLine {
                recipe: &report.recipe,
                seed: report.seed,
                steps: report.steps,
                died_at: report.died_at,
                capacity: report.capacity,
                peak_in_use: &report.peak_in_use,
                reserved: &report.reserved,
                pages: &report.pages,
                failures: &report.failures,
            };
            serde_json::to_writer(&mut out, &line)
                .map_err(std::io::Error::from) // a closed pipe stays an io::Error
                .context("cannot write JSON")?;
            writeln!(out).context("cannot write to stdout")?;
        } else {
            rows.push(summary_row(&report));
        }
        if a.svg.is_some() {
            series.push(series_of(&recipe, &report));
        }
    }
    bar.finish_and_clear();
    if !a.json {
        writeln!(out, "{}", describe(&recipe))?;
        writeln!(out, "{steps} steps per seed\n")?;
        writeln!(out, "{}", summary(&rows))?;
    }
    out.flush().context("cannot write to stdout")?;
    if let Some(path) = a.svg {
        let svg = chart(&recipe, series).to_svg();
        std::fs::write(&path, svg)
            .with_context(|| format!("cannot write the figure to {}", path.display()))?;
    }
    Ok(())
}

/// Writes the files `--trace` and `--snapshot` ask for.
fn write_trace(a: &SimulateArgs, trace: &highwater::MemTrace) -> Result<()> {
    if let Some(path) = &a.trace {
        let cant = || format!("cannot write the trace to {}", path.display());
        let mut w = std::io::BufWriter::new(File::create(path).with_context(cant)?);
        trace.write_json_lines(&mut w).with_context(cant)?;
        w.flush().with_context(cant)?;
    }
    if let Some(path) = &a.snapshot {
        std::fs::write(path, highwater::memviz::snapshot_pickle(trace))
            .with_context(|| format!("cannot write the snapshot to {}", path.display()))?;
    }
    Ok(())
}

/// One seed's row of the summary: outcome, high-water, reserved at the end, failures by size.
fn summary_row(r: &RunReport) -> Vec<String> {
    let outcome = match r.died_at {
        Some(s) => format!("died at step {s}"),
        None => format!("survived {} steps", r.steps),
    };
    // (requested, page) → count, smallest first.
    let mut sizes: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for f in &r.failures {
        *sizes.entry((f.requested, f.page)).or_default() += 1;
    }
    let sizes = sizes
        .iter()
        .map(|((req, page), n)| format!("{} ×{n} (page {})", show(*req), show(*page)))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        r.seed.to_string(),
        outcome,
        show(r.high_water()),
        show(r.final_reserved()),
        r.failures.len().to_string(),
        r.first_failure().map_or("—".into(), |s| s.to_string()),
        if sizes.is_empty() {
            "—".into()
        } else {
            sizes
        },
    ]
}

/// The summary table of [`summary_row`]s.
fn summary(rows: &[Vec<String>]) -> String {
    render(
        &[
            ("seed", Align::Right),
            ("outcome", Align::Left),
            ("peak in use", Align::Right),
            ("reserved", Align::Right),
            ("failures", Align::Right),
            ("first at", Align::Right),
            ("sizes (requested ×count, page)", Align::Left),
        ],
        rows,
        Rule::Dashed,
    )
}

/// One seed's line of the figure: its peak in use per step.
fn series_of(recipe: &Recipe, r: &RunReport) -> Series {
    Series {
        arm: written_name(&recipe.activation),
        label: format!("seed {}", r.seed),
        points: r
            .peak_in_use
            .iter()
            .enumerate()
            .map(|(i, &b)| (u32::try_from(i + 1).unwrap_or(u32::MAX), b))
            .collect(),
        died_at: r.died_at.map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
    }
}

fn chart(recipe: &Recipe, series: Vec<Series>) -> HighWaterChart {
    let file = Path::new(&recipe.origin)
        .file_name()
        .map_or(recipe.origin.clone(), |f| f.to_string_lossy().into_owned());
    HighWaterChart {
        title: format!("{file}: peak bytes in use per step"),
        card_bytes: recipe.card.pool_capacity(),
        series,
    }
}

fn ledger(a: LedgerArgs) -> Result<()> {
    let recipe = load_recipe(&a.recipe)?;
    let recipe = recipe.with(
        a.activation.map_or(recipe.activation, Into::into),
        a.checkpointing.map_or(recipe.checkpointing, Into::into),
    );
    let ledger = highwater::ffn::expert_ledger(&recipe);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", describe(&recipe))?;
    writeln!(
        out,
        "one expert call ({} per step: {} experts × {} iterations)\n",
        recipe.calls(),
        recipe.n_experts,
        recipe.max_iter
    )?;
    writeln!(out, "{ledger}")?;
    out.flush().context("cannot write to stdout")?;
    Ok(())
}

/// Streams each log through a [`LogReader`]: memory is bounded by what a log says (its
/// groups and deaths, capped at `MAX_RECORDS`), not by its size. Bytes that are not UTF-8
/// spoil only their own line; lines cut at `MAX_LINE_BYTES` are noted on stderr.
fn forensics(a: ForensicsArgs) -> Result<()> {
    let logs = a
        .logs
        .iter()
        .map(|path| {
            let name = path.display().to_string();
            let file = File::open(path).with_context(|| format!("cannot read log {name}"))?;
            let mut reader = LogReader::new(&name);
            reader.read(BufReader::with_capacity(1 << 16, file))?;
            if reader.clipped_lines() > 0 {
                eprintln!(
                    "note: {name}: {} line(s) longer than {MAX_LINE_BYTES} bytes \
                     (forensics::MAX_LINE_BYTES) were read up to that length",
                    reader.clipped_lines()
                );
            }
            Ok(reader.finish())
        })
        .collect::<Result<Vec<LogForensics>>>()?;
    let mut out = std::io::stdout().lock();
    if a.json {
        for log in &logs {
            serde_json::to_writer(&mut out, log)
                .map_err(std::io::Error::from) // a closed pipe stays an io::Error
                .context("cannot write JSON")?;
            writeln!(out)?;
        }
    } else {
        writeln!(out, "{}", IncidentTable::new(&logs))?;
    }
    out.flush().context("cannot write to stdout")?;
    Ok(())
}
