//! `burn022-rerun`: network files trained on a GPU by burn 0.22, each record written as
//! `<out>/<file stem>-<backend>-<checkpointing>-b<batch>.json`; `--card OUT` records what
//! cubecl-cuda 0.11 read from the driver instead. Built by `scripts/gpu-build-022`, outside this
//! workspace, against the real cubecl-cuda (`gpu/burn-0.22`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use burn022::rerun::{RerunPlan, card_properties, rerun};
use clap::Parser;
use highwater::network::Network;
use highwater::recipe::written_name;

/// The build command the records name.
const BUILD: &str = "scripts/gpu-build-022";

#[derive(Parser)]
struct Args {
    /// Network files to train, one after the other in this process.
    #[arg(value_name = "MODEL")]
    models: Vec<PathBuf>,
    /// Steps per run.
    #[arg(long, default_value_t = 4)]
    steps: u64,
    /// Read the loss back every N steps.
    #[arg(long, default_value_t = 1)]
    log_every: u64,
    /// Seed of the weights and batches.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the records go.
    #[arg(long, default_value = "repro/results/burn-0.22")]
    out: PathBuf,
    /// Record the card's properties (JSON) here instead of training.
    #[arg(long, value_name = "OUT")]
    card: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(out) = &args.card {
        let json = serde_json::to_string_pretty(&card_properties(BUILD))?;
        std::fs::write(out, json + "\n").with_context(|| format!("writing {}", out.display()))?;
        return Ok(());
    }
    std::fs::create_dir_all(&args.out)?;
    let plan = RerunPlan {
        steps: args.steps,
        seed: args.seed,
        log_every: args.log_every,
    };
    for path in &args.models {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {origin}"))?;
        let network = Network::parse(&origin, &text).with_context(|| format!("parsing {origin}"))?;
        let record = rerun(&network, &origin, &text, &plan, BUILD)?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
        let name = format!(
            "{stem}-{}-{}-b{}.json",
            written_name(&network.backend),
            written_name(&network.checkpointing),
            network.batch
        );
        let out = args.out.join(name);
        std::fs::write(&out, serde_json::to_string_pretty(&record)? + "\n")
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!(
            "{origin}: {} steps, died {:?} -> {}",
            record.steps.len(),
            record.died.as_ref().map(|d| d.step),
            out.display()
        );
    }
    Ok(())
}
