//! `graphrace suite`: the check judged against the GPU on the suite's variants, then the
//! confusion table.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use graphrace::driver::GraphDump;
use graphrace::suite::{Suite, SuiteRecord, Verdict, judge};

use crate::{load, print_table};

#[derive(Debug, Args)]
pub(crate) struct SuiteArgs {
    /// The suite's variants.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "repro/graphrace-suite.toml"
    )]
    pub(crate) suite: PathBuf,
    /// The GPU's replays of it (`graphrace-gpu --suite … --out`).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "repro/results/graphrace-suite-h200.json"
    )]
    pub(crate) gpu: PathBuf,
    /// The graphs the GPU built for it (`graphrace-gpu --suite … --dump-graph`).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "repro/results/graphrace-suite-graphs-h200.json"
    )]
    pub(crate) graphs: PathBuf,
    /// Where the configurations are.
    #[arg(long, value_name = "DIR", default_value = "repro/graphrace")]
    pub(crate) configs: PathBuf,
    /// One JSON object per variant per line.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn suite(args: &SuiteArgs) -> Result<()> {
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
