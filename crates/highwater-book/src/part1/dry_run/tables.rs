//! *The dry run*'s tables and notes, each read from the records it compares (the held-out
//! checks, the dry device, the simulator's misses, the GPU's spread, the capped death, the
//! ledger against burn, the autotune cache).

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use cell_output::Table;
use dryrun::DryDevice;
use highwater::conform::{MeasuredStep, RerunRecord};
use highwater::recipe::written_name;
use highwater::{Backend as LedgerBackend, Checkpointing, DType, Graph, TensorId};

use super::HeldOut;
use crate::BookError;
use crate::bytes;
use crate::load::{Book, RESULTS};

/// The held-out table: per program, the GPU's runs and their spread, bytes in use and bytes
/// reserved off (beyond the GPU's own spread; reserved: or half the smallest page), the
/// largest difference in bytes reserved, and whether the prediction from other models'
/// kernels holds. Panics where a check contradicts the chapter: bytes in use exact, bytes
/// reserved to the page but on burn-fusion, every band holding.
pub fn held_out_table(checks: &[HeldOut]) -> Table {
    for h in checks {
        assert_eq!(
            h.live.off, 0,
            "the text: bytes in use are the GPU's ({})",
            h.name
        );
        assert_eq!(
            h.reserved.off, 0,
            "the text: bytes reserved to the page, on burn-fusion inside its band ({})",
            h.name
        );
        assert_ne!(
            h.in_band,
            Some(false),
            "the text: the band holds ({})",
            h.name
        );
    }
    let mut t = Table::new([
        "program",
        "GPU runs (spread)",
        "bytes in use off",
        "bytes reserved off by a page (largest difference)",
        "without its kernels",
    ]);
    for h in checks {
        t.push([
            h.label(),
            format!("{} ({})", h.gpu_runs, bytes::show(h.gpu_spread)),
            format!("{} of {}", h.live.off, h.live.compared),
            match h.schedules_band {
                Some(width) => format!(
                    "{} of {} (a band {} wide)",
                    h.reserved.off,
                    h.reserved.compared,
                    bytes::show(width)
                ),
                None => format!(
                    "{} of {} ({})",
                    h.reserved.off,
                    h.reserved.compared,
                    bytes::signed(h.reserved_largest)
                ),
            },
            match h.in_band {
                Some(true) => "holds".to_string(),
                Some(false) => "misses".to_string(),
                None => "–".to_string(),
            },
        ]);
    }
    t
}

/// The dry device's properties, derived from the H200's recorded profile, against the
/// profile's: GPU, checksum (which keys the autotune cache), every property's Debug text, the
/// largest pool page. Panics unless the derived properties are the recorded ones, as the
/// chapter says.
pub fn device_table(book: &Book) -> Result<Table, BookError> {
    let card = book.h200_card()?;
    let derived = card.device_properties();
    assert_eq!(
        derived.checksum(),
        card.properties_checksum,
        "the text says: the same checksum"
    );
    assert_eq!(
        format!("{derived:?}"),
        card.properties_debug,
        "the text says: every property"
    );
    Ok(
        Table::new(["", "on the H200 (recorded)", "derived by the dry runtime"])
            .row([
                "GPU, compute capability".to_string(),
                format!("{}, sm_{}", card.gpu, card.compute_capability),
                "the profile's".into(),
            ])
            .row([
                "properties checksum".to_string(),
                format!("{:#018x}", card.properties_checksum),
                format!("{:#018x}", derived.checksum()),
            ])
            .row([
                "every property (its Debug text)".to_string(),
                format!("{} characters", card.properties_debug.len()),
                "identical".into(),
            ])
            .row([
                "largest pool page (total / 4)".to_string(),
                bytes::show(card.total_bytes / 4),
                bytes::show(derived.memory.max_page_size),
            ]),
    )
}

/// The wave runs the simulator misses (`repro/results/conform-known-misses.toml`), each
/// replayed dry: figures differing, and bytes reserved at the last step on the GPU, in the
/// simulator and dry. Panics unless they are the two Balanced runs on burn-fusion and the dry
/// run lands on both to the byte, tuning nothing.
pub fn misses_table(book: &Book) -> Result<Table, BookError> {
    let known = book.known_misses()?;
    assert!(
        known.len() == 2 && known.iter().all(|k| k.run.ends_with("-fusion-balanced")),
        "the text: both Balanced runs on burn-fusion"
    );
    let mut t = Table::new([
        "run (wave stack)",
        "figures differing",
        "reserved at last step: GPU",
        "simulator",
        "dry run",
    ]);
    for k in &known {
        let (record, outcome, e) = book.replay(&k.run)?;
        assert!(
            e.passes() && e.differences.is_empty(),
            "the text says: to the byte"
        );
        assert!(
            outcome.autotune_misses.is_empty(),
            "the text says: nothing tuned dry"
        );
        let sim = highwater::conform::conform(&record)?;
        let last = record.steps.last().ok_or("no step")?;
        t = t.row([
            format!(
                "{} / {} / {}",
                written_name(&record.activation),
                written_name(&record.checkpointing),
                written_name(&record.backend)
            ),
            format!("{} of {}", e.differences.len(), 3 * e.steps_compared()),
            bytes::exact(last.reserved),
            bytes::exact(*sim.simulated.reserved.last().ok_or("no step")?),
            bytes::exact(outcome.steps.last().ok_or("no step")?.reserved),
        ]);
    }
    Ok(t)
}

/// The one configuration whose H200 runs differ: how many configurations were recorded, how
/// many runs of each, and which differ in bytes reserved at any step. Panics unless that is
/// the capped fused SiTU arm alone, each recorded three times, as the chapter says.
pub fn repeats_summary(book: &Book) -> Result<String, BookError> {
    let records = book.rerun_records()?;
    let (mut varied, gpu_runs) = (vec![], 3);
    for (name, record) in &records {
        let repeats: Vec<RerunRecord> = book.repeats_in(RESULTS, name)?;
        assert_eq!(
            1 + repeats.len(),
            gpu_runs,
            "the text: {name} ran three times"
        );
        let reserved = |r: &RerunRecord| r.steps.iter().map(|s| s.reserved).collect::<Vec<_>>();
        if repeats.iter().any(|r| reserved(r) != reserved(record)) {
            varied.push(name.clone());
        }
    }
    assert_eq!(varied, [SPREAD_RUN], "the text names this run");
    Ok(format!(
        "configurations recorded: {}; runs of each: {gpu_runs}; whose runs differ: {}",
        records.len(),
        varied.join(", ")
    ))
}

/// The capped fused SiTU arm: the one configuration whose H200 runs differ.
pub const SPREAD_RUN: &str = "rerun-situ-fused-situ-fused-cube-none-cap14.75GiB";

/// [`SPREAD_RUN`]'s bytes reserved on the H200's three runs and dry, at the first and last
/// step, and the step at which each first holds more than the least any GPU run held there
/// (the extra page's arrival); with the GPU's own spread on the run, in bytes. Panics unless
/// the dry run lies within that spread, the spread is one `gate_up` weight, and the page
/// arrives in two of the three GPU runs.
pub fn spread_table(book: &Book) -> Result<(Table, u64), BookError> {
    let name = SPREAD_RUN;
    // One read of the record and its repeats, for the replay and for the spread.
    let (record, repeats) = book.rerun_with_repeats(name)?;
    let (outcome, e) = book.replay_recorded(&record, &repeats)?;
    // Per step, the least any GPU run reserved: the pool without the extra page.
    let gpu: Vec<&RerunRecord> = std::iter::once(&record).chain(&repeats).collect();
    let least: Vec<u64> = (0..record.steps.len())
        .map(|i| {
            gpu.iter()
                .filter_map(|r| r.steps.get(i))
                .map(|s| s.reserved)
                .min()
                .unwrap_or(0)
        })
        .collect();
    // The step at which a run first holds more than that, if it ever does.
    let arrival = |steps: &[MeasuredStep]| {
        steps
            .iter()
            .zip(&least)
            .find(|(s, l)| s.reserved > **l)
            .map(|(s, _)| s.step)
    };
    let mut t = Table::new([
        "run",
        "bytes reserved, step 1",
        "at the last step",
        "the page arrives at step",
    ]);
    let labels = ["GPU, recorded", "GPU, repeat 2", "GPU, repeat 3"];
    let rows = labels
        .iter()
        .zip(gpu.iter().map(|r| &r.steps[..]))
        .chain([(&"dry, in this build", &outcome.steps[..])]);
    let mut arrivals = vec![];
    for (label, steps) in rows {
        let at = arrival(steps);
        arrivals.push(at);
        let (first, last) = (
            steps.first().ok_or("no step")?,
            steps.last().ok_or("no step")?,
        );
        t = t.row([
            label.to_string(),
            bytes::exact(first.reserved),
            bytes::exact(last.reserved),
            at.map_or(format!("not within {} steps", last.step), |s| s.to_string()),
        ]);
    }
    assert_eq!(gpu.len(), labels.len(), "a label per GPU run");
    assert!(e.passes(), "the text: within the GPU's own spread");
    let recipe = record.recipe()?;
    let weight = recipe.d_model * recipe.gate_up_width() * recipe.dtype.size();
    assert_eq!(
        e.gpu_spread, weight,
        "the text: one weight-sized slot (gate_up, [d_model, 2f])"
    );
    assert_eq!(
        arrivals[..3].iter().filter(|a| a.is_some()).count(),
        2,
        "the text: two of three runs"
    );
    Ok((t, e.gpu_spread))
}

/// The SiTU tensor path on the capped H200 and dry: where each died, the pages refused in
/// that step, how many of the first agree in size and order, their size. Panics unless both
/// die at the same step and phase, the first five or more refusals agree, and the GPU refuses
/// more.
pub fn death_table(book: &Book) -> Result<Table, BookError> {
    let name = "rerun-situ-situ-tensor-cube-none-cap14.75GiB";
    let (record, outcome, e) = book.replay(name)?;
    let gpu = record.died.as_ref().ok_or("the GPU run died")?;
    let dry = outcome.died.as_ref().ok_or("the dry run died")?;
    assert!(e.passes(), "the text: the same step and phase");
    let common = gpu
        .failed_pages
        .iter()
        .zip(&dry.failed_pages)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        common >= 5 && dry.failed_pages.len() < gpu.failed_pages.len(),
        "the text: the first refusals agree, then the GPU refuses more"
    );
    Ok(Table::new(["", "GPU", "dry"])
        .row([
            "died at (step, phase)".to_string(),
            format!("{}, {}", gpu.step, written_name(&gpu.phase)),
            format!("{}, {}", dry.step, written_name(&dry.phase)),
        ])
        .row([
            "pages refused in that step".to_string(),
            gpu.failed_pages.len().to_string(),
            dry.failed_pages.len().to_string(),
        ])
        .row([
            "the first ones, identical in size and order".to_string(),
            common.to_string(),
            common.to_string(),
        ])
        .row([
            "the first refused page's size".to_string(),
            bytes::exact(gpu.failed_pages[0]),
            bytes::exact(dry.failed_pages[0]),
        ]))
}

/// `x` [64, 32] and `w` [32, 128], random leaves that require grad: the inputs of the
/// chapter's small program for [`forward_peak`](crate::Book::forward_peak), on a dry device.
pub fn leaves<B: Backend<Device = DryDevice>>(device: &DryDevice) -> [Tensor<B, 2>; 2] {
    [[64usize, 32], [32, 128]]
        .map(|shape| Tensor::random(shape, Distribution::Default, device).require_grad())
}

/// The ledger's forward peak of `g` against burn's, dry, on CubeBackend (`cube`) and
/// burn-fusion (`fusion`), with the difference. Panics unless CubeBackend is off by a launch's
/// metadata (32 B) and burn-fusion by that less `y`, the scaled tensor it never writes (its
/// sum's output in its place), as the chapter says.
pub fn ledger_against_dry(
    g: &Graph,
    y: TensorId,
    loss_id: TensorId,
    cube: u64,
    fusion: u64,
) -> Table {
    let mut t = Table::new([
        "backend",
        "ledger: forward peak",
        "dry run",
        "dry less ledger",
    ]);
    for (backend, dry) in [(LedgerBackend::Cube, cube), (LedgerBackend::Fusion, fusion)] {
        let ledger = g.ledger(Checkpointing::None, backend).forward_peak();
        let less = dry as i64 - ledger as i64;
        if backend == LedgerBackend::Cube {
            assert_eq!(less, 32, "the text: a launch's metadata");
        } else {
            let size = |t: TensorId| g.shape(t).bytes(DType::F32) as i64;
            let never_written = 32 + size(loss_id) - size(y);
            assert_eq!(less, never_written, "the text: y is never written");
        }
        t = t.row([
            written_name(&backend),
            bytes::exact(ledger),
            bytes::exact(dry),
            format!("{less:+} B"),
        ]);
    }
    t
}

/// The silu arm recorded from a cold and a warm autotune cache on the H200, replayed dry with
/// no cache and with the GPU's: bytes reserved at the last step, GPU and dry, and figures
/// differing. Panics unless both land to the byte, and the kernels the dry device tuned for
/// itself are all other than the H200's: tensor-core matmuls without TMA (the H200 took TMA
/// ones) and unit reductions.
pub fn autotune_table(book: &Book) -> Result<Table, BookError> {
    let gpu_cache = book.h200_autotune();
    let gpu_cache = gpu_cache.as_path();
    let mut t = Table::new([
        "GPU record",
        "dry run tuned by",
        "bytes reserved, last step: GPU",
        "dry",
        "figures differing",
    ]);
    let mut cold_choices = vec![];
    for (cache, given) in [("cold", None), ("warm", Some(gpu_cache))] {
        let r = book.rerun_record(format!(
            "{RESULTS}/autotune/{cache}/rerun-wave-stack-silu-cube-none.json"
        ))?;
        let (outcome, e) = situ::dry::replay(&r, &[], book.h200_card()?, given)?;
        let (gpu, dry) = (
            r.steps.last().ok_or("no step")?.reserved,
            outcome.steps.last().ok_or("no step")?.reserved,
        );
        assert!(e.differences.is_empty(), "the text: both to the byte");
        let by = if given.is_some() {
            "the GPU's cache".to_string()
        } else {
            format!("itself ({} problems)", outcome.autotune_misses.len())
        };
        t = t.row([
            format!("cache {cache}"),
            by,
            bytes::exact(gpu),
            bytes::exact(dry),
            format!("{} of {}", e.differences.len(), e.steps_compared() * 3),
        ]);
        if given.is_none() {
            cold_choices = outcome.autotune_misses;
        }
    }
    let gpu_choices = dryrun::Atlas::read(gpu_cache)?.entries;
    let other = cold_choices
        .iter()
        .filter(|m| {
            gpu_choices
                .iter()
                .any(|g| g.key == m.key && g.kernel() != m.kernel())
        })
        .count();
    assert!(
        other == cold_choices.len() && other > 0,
        "the text: every choice differs"
    );
    let kinds = |tuner: &str, choices: &[dryrun::Entry]| -> Vec<String> {
        choices
            .iter()
            .filter(|m| m.tuner.contains(tuner))
            .map(|m| m.kernel().to_string())
            .collect()
    };
    let (dry_matmul, gpu_matmul) = (
        kinds("matmul", &cold_choices),
        kinds("matmul", &gpu_choices),
    );
    assert!(
        dry_matmul
            .iter()
            .all(|k| k.contains("cmma") && !k.contains("tma")),
        "the text: tensor cores, no TMA: {dry_matmul:?}"
    );
    assert!(
        gpu_matmul.iter().any(|k| k.contains("tma")),
        "the text: the H200 took TMA kernels"
    );
    let dry_reduce = kinds("reduce", &cold_choices);
    assert!(
        !dry_reduce.is_empty() && dry_reduce.iter().all(|k| k.starts_with("unit")),
        "the text: unit reductions: {dry_reduce:?}"
    );
    Ok(t)
}
