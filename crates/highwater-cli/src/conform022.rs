//! `highwater conform --dry DIR` for records made by burn 0.22 (`burn022-rerun` on a GPU): each
//! replayed dry under burn 0.22 (`burn022::dry::replay`) and held to the record step by step,
//! byte for byte.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use basics::bytes::show;
use basics::text_table::{Align, Rule, render};
use burn022::dry::Replay;
use burn022::fused::{self, BandRequest};
use cubecl_cuda_011::dry::{CardProfile, TieBreak};
use highwater::conform::NetworkRecord;

use crate::args::ConformArgs;
use crate::conform::read_record;
use crate::quiet::{quiet_device_threads, quietly};

/// Whether every record of `files` was made by burn 0.22.
pub(crate) fn all_burn_022(files: &[PathBuf]) -> Result<bool> {
    // Only the provenance is read: a 0.21 rerun record is no network record.
    let mut any = false;
    for path in files {
        let record: serde_json::Value = read_record(path)?;
        if !record["versions"]["burn"]
            .as_str()
            .is_some_and(|v| v.starts_with("0.22"))
        {
            return Ok(false);
        }
        any = true;
    }
    Ok(any)
}

/// Replays `record` dry with the prediction's policy: in this build, or a burn-fusion record in
/// the fused build beside this executable (`burn022::fused`).
fn replay(a: &ConformArgs, card: &CardProfile, record: &NetworkRecord) -> Result<Replay> {
    if burn022::built_for(record.backend) {
        return Ok(quietly(|| {
            burn022::dry::replay(record, card.clone(), TieBreak::First)
        })?);
    }
    let request = BandRequest::replaying(record, &a.card, card);
    let binary = std::env::current_exe()?.with_file_name(fused::BINARY);
    let band = fused::band_from(&binary, &request)?;
    Ok(Replay {
        gpu: record.steps.clone(),
        dry: band.predicted().clone(),
    })
}

/// Replays each record dry and prints, per record, whether every step matched and where not.
pub(crate) fn conform(a: &ConformArgs, files: &[PathBuf]) -> Result<()> {
    let card = CardProfile::read(&a.card)?;
    quiet_device_threads();
    let mut rows = Vec::new();
    let mut missed = 0;
    for path in files {
        let record: NetworkRecord = read_record(path)?;
        let replay =
            replay(a, &card, &record).with_context(|| format!("replaying {}", path.display()))?;
        let differences = replay.differences();
        if a.json {
            println!(
                "{}",
                serde_json::json!({
                    "record": path.display().to_string(),
                    "differences": differences
                        .iter()
                        .map(|(step, what, gpu, dry)| serde_json::json!({
                            "step": step, "figure": what, "gpu": gpu, "dry": dry,
                        }))
                        .collect::<Vec<_>>(),
                    "gpu_steps": replay.gpu.len(),
                    "dry_steps": replay.dry.steps.len(),
                })
            );
        }
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into());
        let verdict = match differences.first() {
            None if replay.gpu.len() == replay.dry.steps.len() => "exact".to_string(),
            None => format!(
                "{} steps on the GPU, {} dry",
                replay.gpu.len(),
                replay.dry.steps.len()
            ),
            Some((step, what, gpu, dry)) => format!(
                "step {step}, {what}: GPU {} dry {} ({:+})",
                show(*gpu),
                show(*dry),
                *dry as i128 - *gpu as i128
            ),
        };
        if verdict != "exact" {
            missed += 1;
        }
        rows.push(vec![
            name,
            replay.gpu.len().to_string(),
            differences.len().to_string(),
            verdict,
        ]);
    }
    if !a.json {
        println!(
            "{}",
            render(
                &[
                    ("record (burn 0.22)", Align::Left),
                    ("steps", Align::Right),
                    ("figures off", Align::Right),
                    ("first difference", Align::Left),
                ],
                &rows,
                Rule::Dashed,
            )
        );
    }
    if missed > 0 {
        bail!(
            "{missed} of {} burn 0.22 records differ from their dry replay",
            files.len()
        );
    }
    Ok(())
}
