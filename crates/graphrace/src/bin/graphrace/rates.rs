//! Without a subcommand: corruption rates, one row per concurrency, one column per
//! configuration.

use std::io::Write;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::args::{LoadArgs, parse_sessions};
use crate::{captured, load, print_table};

#[derive(Debug, Args)]
pub(crate) struct RatesArgs {
    /// Configuration files (TOML), e.g. repro/graphrace/incident.toml; repeat for more columns.
    #[arg(long = "config", value_name = "PATH", required = true)]
    pub(crate) configs: Vec<PathBuf>,
    /// Concurrent sessions: `N` or `A..B` (inclusive).
    #[arg(long, value_name = "A..B", value_parser = parse_sessions, default_value = "60")]
    pub(crate) sessions: RangeInclusive<u32>,
    /// Step through the sessions range.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) every: u32,
    #[command(flatten)]
    pub(crate) load: LoadArgs,
    /// One JSON object per configuration and concurrency per line.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn rates(args: &RatesArgs) -> Result<()> {
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
