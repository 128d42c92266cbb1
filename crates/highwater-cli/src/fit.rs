//! `highwater fit MODEL`: will it fit? The model trained dry (burn's own code over the dry
//! CubeCL runtime) on a card of the size asked.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use dryrun::{Atlas, CardProfile, OnRefusal};
use highwater::RunReport;
use highwater::limits::MAX_SEARCH_BATCH;
use highwater::recipe::written_name;
use situ::band::{Band, ColdBand, cold_band, dry_band};
use situ::dry::{BatchSearch, DryOutcome, DryPlan, Model};

use crate::args::{BurnArg, CapArg, CardArg, FitArgs};
use crate::input::{quoted_line, read_input};
use crate::quiet::{quiet_device_threads, quietly};
use basics::bytes::show;
use basics::text_table::{Align, Rule, render};

pub(crate) fn fit(a: FitArgs) -> Result<()> {
    let origin = a.model.display().to_string();
    let text = read_input(&a.model, "model")?;
    match (a.burn, highwater::network::is_network(&text)) {
        (Some(BurnArg::V022) | None, true) => {
            quiet_device_threads();
            crate::fit022::fit(&a, &origin, &text)
        }
        (Some(BurnArg::V022), false) => bail!(
            "{origin} is a wave recipe: its SiTU step (the fused kernel among its arms) exists on \
             burn 0.21 only, the incident's version; add --burn 0.21"
        ),
        _ => fit_on_burn_021(a, &origin, &text),
    }
}

/// `fit` under burn 0.21: the atlas's kernel choices, the bands, the batch search.
fn fit_on_burn_021(a: FitArgs, origin: &str, text: &str) -> Result<()> {
    let origin = origin.to_string();
    let mut model = parse_model(&origin, text)?;
    let (backend, checkpointing) = model.backend();
    model = model.with_backend(
        a.backend.map_or(backend, Into::into),
        a.checkpointing.map_or(checkpointing, Into::into),
    );
    if let Some(batch) = a.batch {
        model = model.with_batch(batch).map_err(anyhow::Error::msg)?;
    }
    let card = Arc::new(card(&a.card, &a.chip)?);
    let plan = DryPlan {
        steps: a.steps,
        seed: a.seed,
        capacity: capacity(&a, &model, &card)?,
        on_refusal: OnRefusal::Refuse,
        log_every: a.log_every.unwrap_or(a.steps),
        tie_break: dryrun::TieBreak::First,
        schedule: dryrun::Schedule::default(),
    };
    // No atlas (a folder that is not there) is an empty one: every problem is then decided by
    // the miss policy, and banded.
    let atlas = if a.autotune.exists() {
        Atlas::read(&a.autotune)?
    } else {
        Atlas::default()
    };
    quiet_device_threads();
    let (backend, checkpointing) = model.backend();
    let header = format!(
        "{origin} | {} | checkpointing {} | dry on {} ({} for the pools) | {} steps",
        written_name(&backend),
        written_name(&checkpointing),
        card.gpu,
        show(plan.capacity),
        a.steps
    );
    let schedules = situ::band::schedules(backend);
    let band = |m: &Model| {
        quietly(|| {
            dry_band(&plan, &atlas, schedules, |p, dir| {
                m.dry_run(p, card.clone(), dir)
            })
        })
    };
    if a.largest_batch {
        // At the prediction, and at the band's top: the batch that fits whatever the GPU picks.
        // Both searches try mostly the same batches: each batch's band is run once.
        let mut bands = std::collections::HashMap::<u64, Band>::new();
        let mut searches = Vec::new();
        for bound in [Bound::Predicted, Bound::Most] {
            let search = situ::dry::largest_batch(MAX_SEARCH_BATCH.max, |batch| {
                if let Some(b) = bands.get(&batch) {
                    return Ok(bound.of(b.clone()));
                }
                let m = model.with_batch(batch).map_err(anyhow::Error::msg)?;
                let b = band(&m)?;
                bands.insert(batch, b.clone());
                Ok::<_, anyhow::Error>(bound.of(b))
            })?;
            searches.push(search);
        }
        let [at_prediction, at_most] = <[BatchSearch; 2]>::try_from(searches).expect("two");
        if a.json {
            let mut json = search_json(&origin, &plan, &at_prediction);
            json["at_most"] = search_json(&origin, &plan, &at_most);
            println!("{json}");
        } else {
            println!("{header}\n{}", search_text(&at_prediction));
            if at_most.largest.as_ref().map(|l| l.0) != at_prediction.largest.as_ref().map(|l| l.0)
            {
                println!(
                    "had every problem the atlas lacks taken its hungriest kernel: {}",
                    search_text(&at_most)
                );
            }
        }
    } else {
        let band = band(&model)?;
        // The first run on the card, which autotunes as it trains.
        let cold = quietly(|| {
            cold_band(&plan, schedules, |p, dir| {
                model.dry_run(p, card.clone(), dir)
            })
        })?;
        let outcome = &band.predicted;
        let report = outcome.report(&origin, &plan);
        if a.json {
            println!("{}", json(&report, &band, &cold, schedules)?);
        } else {
            println!("{header} | batch {}", model.batch());
            for line in text_answer(&report, &band, &cold, schedules) {
                println!("{line}");
            }
        }
    }
    Ok(())
}

/// The model file read as `fit` reads it, its error naming the line it quotes; a file read as
/// a wave recipe for want of a network table says so when it has no recipe's table either, as
/// a network file whose table is misspelt has not.
fn parse_model(origin: &str, text: &str) -> Result<Model> {
    Model::parse(origin, text).map_err(|e| {
        let quoted = quoted_line(text, e.line());
        let read_as = match highwater::network::has_no_model_table(text) {
            false => String::new(),
            true => format!(
                ", read as a wave recipe: it has none of the network tables ({}; {})",
                highwater::network::FAMILIES
                    .map(|f| format!("[{f}]"))
                    .join(", "),
                highwater::network::see_format()
            ),
        };
        anyhow!(e).context(format!("invalid model {origin}{quoted}{read_as}"))
    })
}

/// `fit`'s answer as text, line by line: the steps' table, the verdicts warm and cold, and what
/// the band was explored over.
fn text_answer(
    report: &RunReport,
    band: &Band,
    cold: &ColdBand,
    schedules: &[dryrun::Schedule],
) -> Vec<String> {
    let mut lines = Vec::new();
    if !report.reserved.is_empty() {
        lines.push(steps_table(report, band, cold));
    }
    lines.push(verdict(&band.predicted, report));
    lines.push(cold_verdict(cold));
    lines.extend(decided(band));
    lines.extend(explored(band, schedules));
    lines
}

/// `fit --json`: the prediction's report, the band's edges per step, warm and cold, its widest
/// and what it was explored over.
fn json(
    report: &RunReport,
    band: &Band,
    cold: &ColdBand,
    schedules: &[dryrun::Schedule],
) -> Result<serde_json::Value> {
    let mut json = serde_json::to_value(report)?;
    let (warm, first) = (band.reserved(), cold.reserved());
    let edge = |of: Vec<Option<u64>>| serde_json::to_value(of);
    json["reserved_least"] = edge(warm.iter().map(|r| r.0).collect())?;
    json["reserved_most"] = edge(warm.iter().map(|r| r.2).collect())?;
    json["decided_by_miss_policy"] = band.decided.len().into();
    json["cold_reserved_least"] = edge(first.iter().map(|r| r.0).collect())?;
    json["cold_reserved_most"] = edge(first.iter().map(|r| r.1).collect())?;
    json["reserved_band_width"] = band.width().into();
    json["schedules_explored"] = schedules.iter().map(|s| s.to_string()).collect();
    Ok(json)
}

/// Which run of a band a batch search reads.
#[derive(Clone, Copy)]
enum Bound {
    Predicted,
    Most,
}

impl Bound {
    fn of(self, band: Band) -> DryOutcome {
        match self {
            Bound::Predicted => band.predicted,
            Bound::Most => band.top(),
        }
    }
}

/// How many problems the atlas lacked, per tuner, decided by the miss policy.
fn decided(band: &Band) -> Option<String> {
    let mut per_tuner = std::collections::BTreeMap::<&str, usize>::new();
    for d in &band.decided {
        *per_tuner.entry(d.problem.tuner.as_str()).or_default() += 1;
    }
    (!per_tuner.is_empty()).then(|| {
        let counts: Vec<String> = per_tuner.iter().map(|(t, n)| format!("{t} {n}")).collect();
        let predicted = band
            .decided
            .iter()
            .filter(|d| d.prediction.neighbour.is_some())
            .count();
        format!(
            "autotune: {} problems not in the atlas ({}): {predicted} given the kernel that won \
             the nearest problem the atlas holds, the rest the first candidate; `reserved` is \
             banded by every such problem on its leanest and on its hungriest kernel",
            band.decided.len(),
            counts.join(", ")
        )
    })
}

/// What burn-fusion's schedules add to the band, where they were explored.
fn explored(band: &Band, schedules: &[dryrun::Schedule]) -> Option<String> {
    let (first, others) = schedules.split_first()?;
    (!others.is_empty()).then(|| {
        format!(
            "burn-fusion: `reserved` is banded over {} schedules of its work against the training \
             thread's (the prediction at {first}; see `dryrun::schedule`): at most {} wide",
            schedules.len(),
            show(band.width())
        )
    })
}

/// What the pools may take: the card's free memory, or under `--cap` the cap less the chip's
/// CUDA context (what the GPU's rerun leaves them once its ballast is held).
fn capacity(a: &FitArgs, model: &Model, card: &CardProfile) -> Result<u64> {
    let cap = match (a.cap, model) {
        (None, _) => return Ok(card.free_at_start),
        (Some(CapArg::Bytes(b)), _) => b,
        (Some(CapArg::RecipeCard), Model::Wave(r)) => r.card.total_bytes - r.card.desktop_bytes,
        (Some(CapArg::RecipeCard), Model::Network(_)) => {
            bail!("--cap card needs a wave recipe's [card]; give a network a byte count")
        }
    };
    pools_under_cap(cap, card.total_bytes, card.free_at_start, &card.gpu)
}

/// What a card that leaves the process `cap` bytes leaves the pools, on a chip of `total` bytes
/// whose CUDA context left `free`: the cap less the context (either burn's `fit`).
pub(crate) fn pools_under_cap(cap: u64, total: u64, free: u64, gpu: &str) -> Result<u64> {
    let context = total - free;
    match cap.checked_sub(context) {
        Some(pools) if cap <= total && pools > 0 => Ok(pools),
        _ => bail!(
            "--cap {cap} cannot be emulated on {gpu}: it must exceed the chip's CUDA context \
             ({context} bytes) and not its total ({total} bytes)"
        ),
    }
}

/// The card: a profile as it is, or the chip's profile with the memory asked.
fn card(arg: &CardArg, chip: &Path) -> Result<CardProfile> {
    Ok(match arg {
        CardArg::Profile(path) => CardProfile::read(path)?,
        CardArg::Bytes(bytes) => CardProfile::read(chip)?.with_memory(*bytes),
    })
}

/// One row per step; "every stream" is what the pools of all threads' streams hold (a loader
/// thread's tensors live in a pool of its own), "reserved" the training thread's pool alone.
fn steps_table(r: &RunReport, band: &Band, cold: &ColdBand) -> String {
    let outcome = &band.predicted;
    let reserved = band.reserved();
    let range = |i: usize| match reserved.get(i) {
        Some((Some(l), _, Some(h))) if band.is_banded() => {
            format!("{} … {}", show(*l), show(*h))
        }
        Some((_, _, None)) if band.is_banded() => "(died)".into(),
        _ => "exact".into(),
    };
    let cold = cold.reserved();
    let first_run = |i: usize| match cold.get(i) {
        Some((Some(l), Some(h))) => format!("{} … {}", show(*l), show(*h)),
        _ => "(died)".into(),
    };
    let rows: Vec<Vec<String>> = (0..r.reserved.len())
        .map(|i| {
            vec![
                (i + 1).to_string(),
                show(r.in_use_after_forward[i]),
                show(r.in_use_after_backward[i]),
                show(r.peak_in_use[i]),
                show(r.reserved[i]),
                range(i),
                first_run(i),
                outcome.steps[i].device_reserved.map_or("–".into(), show),
                r.pages[i].to_string(),
            ]
        })
        .collect();
    render(
        &[
            ("step", Align::Right),
            ("in use after fwd", Align::Right),
            ("after bwd", Align::Right),
            ("peak in use", Align::Right),
            ("reserved", Align::Right),
            ("least … most", Align::Right),
            ("first run", Align::Right),
            ("every stream", Align::Right),
            ("pages", Align::Right),
        ],
        &rows,
        Rule::Dashed,
    )
}

/// The first run on the card: its autotune cache empty, it times every candidate of every
/// problem on the step's real inputs, in the same pool.
fn cold_verdict(cold: &ColdBand) -> String {
    let died = [&cold.least, &cold.most]
        .into_iter()
        .chain(cold.explored.iter().map(|(_, o)| o))
        .filter_map(|o| o.died.as_ref().map(|d| d.step))
        .min();
    let reserved = cold.reserved();
    match (died, reserved.first()) {
        (Some(step), _) => format!(
            "first run on the card (nothing autotuned yet, every candidate timed in the pool): \
             may die in step {step}; later runs, with the cache it fills, are the figures above"
        ),
        (None, Some((Some(l), Some(h)))) => format!(
            "first run on the card (nothing autotuned yet, every candidate timed in the pool): \
             {} … {} reserved after step 1 (column `first run`)",
            show(*l),
            show(*h)
        ),
        _ => "first run on the card: no step ran".into(),
    }
}

/// Fits, or where it dies: the reservation the card refused a page for, and the error.
fn verdict(outcome: &DryOutcome, report: &RunReport) -> String {
    let Some(d) = &outcome.died else {
        return format!(
            "fits: at most {} reserved of the {} the pools may take",
            // Every stream's pools when the device says; the training thread's otherwise.
            show(
                outcome
                    .steps
                    .iter()
                    .zip(&report.reserved)
                    .map(|(m, &r)| m.device_reserved.unwrap_or(r).max(r))
                    .max()
                    .unwrap_or(0)
            ),
            show(report.capacity)
        );
    };
    let error = cut(d.message.lines().next().unwrap_or_default());
    let at = format!("dies in step {} ({})", d.step, written_name(&d.phase));
    match outcome.refused.iter().find(|r| r.step == d.step) {
        None => format!("{at}: {error}"),
        Some(first) => {
            // The first refusal is the death; how many follow it depends on what the dying
            // step still had queued, which varies from run to run.
            let oom = &first.out_of_memory;
            format!(
                "{at}: reserving {} needed a new page of {}, refused with {} of the {} taken\n\
                 error: {error}",
                show(oom.requested),
                show(oom.page),
                show(oom.allocated),
                show(oom.capacity),
            )
        }
    }
}

/// An error's first line, cut to a line's width (an autotune key runs to hundreds of
/// characters).
fn cut(line: &str) -> String {
    const WIDTH: usize = 160;
    match line.char_indices().nth(WIDTH) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

fn search_text(s: &BatchSearch) -> String {
    let tried = s
        .tried
        .iter()
        .map(|(b, fits)| format!("{b} {}", if *fits { "fits" } else { "dies" }))
        .collect::<Vec<_>>()
        .join(", ");
    let largest = match &s.largest {
        Some((batch, o)) => format!(
            "largest batch that fits: {batch} (at most {} reserved, {} in use at the peak)",
            show(o.steps.iter().map(|m| m.reserved).max().unwrap_or(0)),
            show(o.peak_in_use.iter().copied().max().unwrap_or(0)),
        ),
        None => "not even a batch of 1 fits".into(),
    };
    let above = match &s.smallest_failing {
        Some((batch, o)) => match &o.died {
            Some(d) => format!(
                "batch {batch} dies in step {} ({}), refused a page of {}",
                d.step,
                written_name(&d.phase),
                d.failed_pages.first().map_or("–".into(), |&p| show(p))
            ),
            None => format!("batch {batch} dies"),
        },
        None => format!("every batch up to {} fits", MAX_SEARCH_BATCH.max),
    };
    format!("tried: {tried}\n{largest}\n{above}")
}

fn search_json(origin: &str, plan: &DryPlan, s: &BatchSearch) -> serde_json::Value {
    let death = |o: &DryOutcome| {
        o.died.as_ref().map(|d| {
            serde_json::json!({
                "step": d.step,
                "phase": d.phase,
                "message": d.message,
                "failed_pages": d.failed_pages,
            })
        })
    };
    serde_json::json!({
        "model": origin,
        "capacity": plan.capacity,
        "tried": s.tried,
        "largest_batch": s.largest.as_ref().map(|(b, _)| b),
        "largest_report": s.largest.as_ref().map(|(_, o)| o.report(origin, plan)),
        "smallest_failing_batch": s.smallest_failing.as_ref().map(|(b, _)| b),
        "death_above": s.smallest_failing.as_ref().and_then(|(_, o)| death(o)),
    })
}
