//! `highwater fit MODEL --burn 0.22`: will it fit under burn 0.22? The network trained dry on
//! burn 0.22's CUDA device, whose pools are CubeCL 0.11's own (`burn022::dry`).
//!
//! Kernel choices: CubeCL 0.11 keeps its autotune results in a store. A card profile recorded
//! with one (`<card>-cubecl-0.11.db` beside it, as `repro/cards/h100.json` has) gives the dry
//! device the GPU's picks; a problem the store lacks, or every problem on a card without one, is
//! settled by the dry device's miss policy. The answer is banded over that policy: each such
//! problem's leanest candidate, its first, and its hungriest (`TieBreak`), the prediction being
//! the first.

use anyhow::{Result, bail};
use basics::bytes::show;
use basics::text_table::{Align, Rule, render};
use burn022::dry::{DryBand, DryOutcome, DryPlan, dry_band};
use burn022::fused::{self, BandRequest};
use cubecl_cuda_011::dry::CardProfile;
use highwater::network::Network;
use highwater::recipe::written_name;

use crate::args::{CapArg, CardArg, FitArgs};
use crate::fit::pools_under_cap;
use crate::input::quoted_line;
use crate::quiet::quietly;

/// Answers `fit` for a network file under burn 0.22.
pub(crate) fn fit(a: &FitArgs, origin: &str, text: &str) -> Result<()> {
    if a.largest_batch {
        bail!("--largest-batch runs on burn 0.21 only for now: add --burn 0.21");
    }
    let network = network(a, origin, text)?;
    let card = match &a.card {
        CardArg::Profile(path) => CardProfile::read(path)?,
        CardArg::Bytes(bytes) => CardProfile::read(&a.chip)?.with_memory(*bytes),
    };
    let capacity = capacity(a, &card)?;
    let plan = DryPlan {
        seed: a.seed,
        capacity,
        ..DryPlan::on(&card, a.steps)
    };
    let band = if burn022::built_for(network.backend) {
        quietly(|| dry_band(&network, &plan, &card))?
    } else {
        fused_band(a, origin, text, &network, plan)?
    };
    let predicted = band.predicted();
    let report = predicted.report(origin, &band.plan);
    let reserved = band.reserved();
    if a.json {
        let mut json = serde_json::to_value(&report)?;
        json["burn"] = "0.22.1".into();
        json["cubecl"] = "0.11.3".into();
        json["reserved_least"] = reserved
            .iter()
            .map(|b| b.map(|b| b.0))
            .collect::<Vec<_>>()
            .into();
        json["reserved_most"] = reserved
            .iter()
            .map(|b| b.map(|b| b.1))
            .collect::<Vec<_>>()
            .into();
        json["peak_bytes"] = predicted.peak_bytes.into();
        json["autotune"] = match &card.atlas {
            Some(atlas) => format!(
                "{} for what it holds, else the miss policy",
                atlas.display()
            ),
            None => "miss policy (the card has no CubeCL 0.11 store)".into(),
        }
        .into();
        println!("{json}");
        return Ok(());
    }
    println!(
        "{origin} | {} | checkpointing {} | burn 0.22 (CubeCL 0.11) dry on {} ({} for the pools) \
         | {} steps | batch {}",
        written_name(&network.backend),
        written_name(&network.checkpointing),
        card.gpu,
        show(capacity),
        a.steps,
        network.batch
    );
    if !predicted.steps.is_empty() {
        println!("{}", steps_table(predicted, &reserved));
    }
    println!("{}", verdict(predicted, capacity));
    match &card.atlas {
        Some(atlas) => println!(
            "kernel choices: the GPU's, from the card's CubeCL 0.11 store ({}); a problem it \
             lacks was settled by the dry device's policy, which the last column runs leanest \
             and hungriest",
            atlas.display()
        ),
        None => println!(
            "kernel choices: the card has no CubeCL 0.11 store, so every problem autotune meets \
             was settled by the dry device's policy; the last column runs it leanest and hungriest"
        ),
    }
    Ok(())
}

/// The band of a burn-fusion network, from the fused build beside this executable
/// (`burn022::fused`): burn 0.22 switches fusion on for a whole build, and this one is without.
fn fused_band(
    a: &FitArgs,
    origin: &str,
    text: &str,
    network: &Network,
    plan: DryPlan,
) -> Result<DryBand> {
    let (card, total_bytes) = match &a.card {
        CardArg::Profile(path) => (path.clone(), None),
        CardArg::Bytes(bytes) => (a.chip.clone(), Some(*bytes)),
    };
    let request = BandRequest {
        origin: origin.to_string(),
        text: text.to_string(),
        batch: network.batch,
        checkpointing: network.checkpointing,
        card,
        total_bytes,
        plan,
        band: true,
    };
    let binary = std::env::current_exe()?.with_file_name(fused::BINARY);
    Ok(fused::band_from(&binary, &request)?)
}

/// The network file with the command line's batch, backend and checkpointing.
fn network(a: &FitArgs, origin: &str, text: &str) -> Result<Network> {
    let mut network = Network::parse(origin, text).map_err(|e| {
        let quoted = quoted_line(text, e.line());
        anyhow::anyhow!(e).context(format!("invalid model {origin}{quoted}"))
    })?;
    if let Some(batch) = a.batch {
        network = network.with_batch(batch).map_err(anyhow::Error::msg)?;
    }
    if let Some(backend) = a.backend {
        network.backend = backend.into();
    }
    if let Some(checkpointing) = a.checkpointing {
        network.checkpointing = checkpointing.into();
    }
    Ok(network)
}

/// What the pools may take: the card's free memory, or what `--cap` leaves once the chip's
/// CUDA context is out of it.
fn capacity(a: &FitArgs, card: &CardProfile) -> Result<u64> {
    match a.cap {
        None => Ok(card.free_at_start),
        Some(CapArg::Bytes(cap)) => {
            pools_under_cap(cap, card.total_bytes, card.free_at_start, &card.gpu)
        }
        Some(CapArg::RecipeCard) => {
            bail!("--cap card needs a wave recipe's [card]; give a network a byte count")
        }
    }
}

/// One row per step: the prediction's figures and the band's edges.
fn steps_table(predicted: &DryOutcome, band: &[Option<(u64, u64)>]) -> String {
    let rows: Vec<Vec<String>> = predicted
        .steps
        .iter()
        .zip(band)
        .map(|(s, range)| {
            vec![
                s.step.to_string(),
                show(s.in_use_after_forward),
                show(s.in_use_after_backward),
                show(s.reserved),
                match range {
                    Some((least, most)) if least != most => {
                        format!("{} … {}", show(*least), show(*most))
                    }
                    Some(_) => "the same".into(),
                    None => "(died)".into(),
                },
            ]
        })
        .collect();
    render(
        &[
            ("step", Align::Right),
            ("in use after forward", Align::Right),
            ("after backward", Align::Right),
            ("reserved", Align::Right),
            ("reserved, any kernel choice", Align::Right),
        ],
        &rows,
        Rule::Dashed,
    )
}

/// Whether it fits, in one line.
fn verdict(outcome: &DryOutcome, capacity: u64) -> String {
    match &outcome.died {
        None if outcome.refused.is_empty() => format!(
            "fits: the pools' pages peaked at {} of {} ({:.0} %)",
            show(outcome.peak_bytes),
            show(capacity),
            100.0 * outcome.peak_bytes as f64 / capacity.max(1) as f64
        ),
        None => format!(
            "fits: the loss read back every step; the {} pages refused on the way went to work \
             outside the training's tensors (CubeCL's throughput probes, autotune's candidates), \
             which goes on without them on a GPU too",
            outcome.refused.len()
        ),
        Some(death) => {
            let first = outcome.refused.first();
            format!(
                "does not fit: its loss cannot be read in step {} ({}); the first page refused, \
                 {} with {} of {} taken, was in step {} ({})",
                death.step,
                written_name(&death.phase),
                first.map_or("?".into(), |(_, r)| show(r.page)),
                first.map_or("?".into(), |(_, r)| show(r.allocated)),
                show(capacity),
                first.map_or(0, |(at, _)| at.step),
                first.map_or("?".into(), |(at, _)| written_name(&at.phase)),
            )
        }
    }
}
