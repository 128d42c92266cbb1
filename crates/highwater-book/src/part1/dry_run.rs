//! The dry run as the book's pages use it: a recorded run replayed on the H200's profile with
//! the GPU's kernels, a program of a page's own measured on a dry H200, and the held-out checks
//! (programs nobody fitted, replayed against the H200's runs of them).

use std::sync::Arc;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Tensor};
use cell_output::{CellError, Table};
use dryrun::{CardProfile, DryDevice, OnRefusal};
use highwater::conform::{Exactness, MeasuredStep, NetworkRecord, RerunRecord};
use highwater::recipe::written_name;
use highwater::{Backend as LedgerBackend, Checkpointing, DType, Graph, TensorId};
use situ::dry::{DryOutcome, pool_usage};

use crate::bytes;
use crate::load::{Book, MODELS, RESULTS, SWEEP};

/// The network files of `repro/models` recorded on burn-fusion (three warm runs each).
pub const FUSION: &str = "repro/results/fusion";

/// Each burn-fusion record of [`FUSION`] and the atlas sweep's cache its runs started from
/// (`repro/cards/h200-sweep/…`, so they tuned nothing; `repro/results/fusion/README.md`). The
/// sweep's folder, not the whole atlas: a cell may not write a file over a mebibyte, and the
/// atlas's matmul cache is larger.
pub const FUSION_CACHES: [(&str, &str); 2] = [
    ("lstm-lstm-fusion-none-b32", "lstm-h512-b32-fused"),
    ("mlp-mlp-fusion-none-b256", "mlp-h1024-b256-fused"),
];

/// The decoder's records, one per backend, under `repro/results`.
pub const DECODER: [&str; 2] = [
    "decoder-decoder-cube-none-b16",
    "decoder-decoder-fusion-none-b16",
];

/// A program nobody fitted, replayed dry with the GPU's kernels against the H200's runs of it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldOut {
    /// The record's name (`resnet-resnet-cube-none-b128-bf16`).
    pub name: String,
    /// The H200's runs of it: the record and its repeats.
    pub gpu_runs: usize,
    /// The widest those runs differed on any figure, in bytes: what "off" is measured beyond.
    pub gpu_spread: u64,
    /// Bytes in use after forward and after backward: compared, off.
    pub live: Off,
    /// Bytes reserved: compared, off by a page (further than `page` or the GPU's spread).
    pub reserved: Off,
    /// The largest difference in bytes reserved, dry less GPU (0 when none differs). CubeCL
    /// counts bytes reserved by summing slices, whose padding follows the order of frees, so
    /// runs holding the same pages can differ by a few hundred bytes
    /// ([`situ::band::reserved_tolerance`]).
    pub reserved_largest: i64,
    /// Models only: predicted from the atlas less every problem its own first run tuned, do the
    /// GPU's warm runs and its first run lie in the band ([`crate::part1::will_it_fit::FromAtlas`])?
    pub in_band: Option<bool>,
}

/// Figures compared, and how many of them lie further from the GPU than its runs from each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Off {
    /// Figures compared.
    pub compared: u64,
    /// Beyond the GPU's own spread.
    pub off: usize,
}

impl HeldOut {
    /// A replay's exactness as counts: live bytes (two figures a step) off beyond the GPU's
    /// spread, and bytes reserved (one) off beyond it or `page`, whichever is larger: less than
    /// any page more or less would move them ([`situ::band::reserved_tolerance`]).
    pub fn of(e: &Exactness, page: u64, in_band: Option<bool>) -> HeldOut {
        let off = |live: bool| {
            let tolerance = if live {
                e.gpu_spread
            } else {
                e.gpu_spread.max(page)
            };
            e.differences
                .iter()
                .filter(|d| (d.figure != "reserved") == live)
                .filter(|d| d.bytes().unsigned_abs() > tolerance)
                .count()
        };
        let steps = e.steps_compared();
        let reserved_largest = e
            .differences
            .iter()
            .filter(|d| d.figure == "reserved")
            .map(|d| d.bytes())
            .max_by_key(|b| b.unsigned_abs())
            .unwrap_or(0);
        HeldOut {
            name: e.name.clone(),
            gpu_runs: e.gpu_runs,
            gpu_spread: e.gpu_spread,
            live: Off {
                compared: 2 * steps,
                off: off(true),
            },
            reserved: Off {
                compared: steps,
                off: off(false),
            },
            reserved_largest,
            in_band,
        }
    }

    /// Recorded on burn-fusion, whose bytes reserved host timing decides (CubeCL's persistent
    /// pool; `repro/results/conform-dry-known.toml`).
    pub fn on_fusion(&self) -> bool {
        self.name.split('-').any(|part| part == "fusion")
    }

    /// `resnet · CubeBackend · f32` for `resnet-resnet-cube-none-b128`.
    pub fn label(&self) -> String {
        let parts: Vec<&str> = self.name.split('-').collect();
        let backend = if self.on_fusion() {
            "burn-fusion"
        } else {
            "CubeBackend"
        };
        let precision = if parts.contains(&"bf16") {
            "bf16"
        } else {
            "f32"
        };
        format!("{} · {backend} · {precision}", parts[0])
    }
}

impl Book {
    /// Every held-out check: the decoder on both backends (the H200's cache, which holds its
    /// kernels), each model of [`MODELS`] with its own cache and predicted from the atlas less
    /// its own problems, and each burn-fusion record of [`FUSION`] ([`FUSION_CACHES`]).
    pub fn held_out(&self) -> Result<Vec<HeldOut>, CellError> {
        let card = self.h200_card()?;
        let mut checks = Vec::new();
        let mut replay = |dir: &str, name: &str, cache: std::path::PathBuf, band: bool| {
            let (record, repeats) = self.with_repeats_in::<NetworkRecord>(dir, name)?;
            let (_, e) = situ::dry::replay_network(&record, &repeats, card.clone(), Some(&cache))?;
            let in_band = if band {
                let p = self.from_atlas(name)?;
                Some(p.check.holds() && p.cold_outside.is_empty())
            } else {
                None
            };
            let page = situ::band::reserved_tolerance(&card, 0);
            checks.push(HeldOut::of(&e, page, in_band));
            Ok::<_, CellError>(())
        };
        for name in DECODER {
            replay(crate::load::RESULTS, name, self.h200_autotune(), false)?;
        }
        for m in self.recorded_models()? {
            let own = self.path(format!("{MODELS}/autotune/{}", m.own));
            replay(MODELS, &m.name, own, true)?;
        }
        for (name, cache) in FUSION_CACHES {
            replay(FUSION, name, self.path(format!("{SWEEP}/{cache}")), false)?;
        }
        Ok(checks)
    }
}

impl Book {
    /// The H200's card profile, shared as the dry runtime takes it.
    pub fn h200_card(&self) -> Result<Arc<CardProfile>, CellError> {
        Ok(Arc::new(self.h200()?))
    }

    /// `repro/results/NAME.json` replayed dry on the H200 with its autotune cache, against the
    /// record and its repeats: the record, the dry outcome, how close they are.
    pub fn replay(&self, name: &str) -> Result<(RerunRecord, DryOutcome, Exactness), CellError> {
        let (record, repeats) = self.rerun_with_repeats(name)?;
        let autotune = self.h200_autotune();
        let (outcome, exactness) =
            situ::dry::replay(&record, &repeats, self.h200_card()?, Some(&autotune))?;
        Ok((record, outcome, exactness))
    }

    /// The most bytes in use while burn runs `loss` on a dry H200, over what its inputs hold:
    /// `inputs` makes them (leaves that require grad, say), `loss` is the forward pass. Run
    /// three times, backward included, so that the first runs tune what the cache lacks; the
    /// last is measured.
    pub fn forward_peak<B, I>(
        &self,
        inputs: impl Fn(&DryDevice) -> I,
        loss: impl Fn(I) -> Tensor<B, 1>,
    ) -> Result<u64, CellError>
    where
        B: AutodiffBackend<Device = DryDevice>,
        I: Clone,
    {
        let card = self.h200_card()?;
        let capacity = card.free_at_start;
        let autotune = self.h200_autotune();
        let device = DryDevice::new(
            card,
            capacity,
            OnRefusal::Refuse,
            Some(&autotune),
            dryrun::TieBreak::First,
        )?;
        let mut peak = 0;
        for _ in 0..3 {
            let held = inputs(&device);
            let before = pool_usage::<B>(&device)?.in_use;
            device.memory().take_peak_in_use();
            let loss = loss(held.clone());
            pool_usage::<B>(&device)?;
            peak = device.memory().take_peak_in_use() - before;
            drop(loss.backward());
        }
        Ok(peak)
    }
}

/// [`Book::replay`] from the cells' directory.
pub fn replay(name: &str) -> Result<(RerunRecord, DryOutcome, Exactness), CellError> {
    Book::here().replay(name)
}

/// [`Book::forward_peak`] from the cells' directory.
pub fn forward_peak<B, I>(
    inputs: impl Fn(&DryDevice) -> I,
    loss: impl Fn(I) -> Tensor<B, 1>,
) -> Result<u64, CellError>
where
    B: AutodiffBackend<Device = DryDevice>,
    I: Clone,
{
    Book::here().forward_peak(inputs, loss)
}

/// [`Book::h200_card`] from the cells' directory.
pub fn h200_card() -> Result<Arc<CardProfile>, CellError> {
    Book::here().h200_card()
}

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
        assert!(
            h.reserved.off == 0 || h.on_fusion(),
            "the text: bytes reserved to the page but on burn-fusion ({})",
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
            format!(
                "{} of {} ({})",
                h.reserved.off,
                h.reserved.compared,
                bytes::signed(h.reserved_largest)
            ),
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
pub fn device_table(book: &Book) -> Result<Table, CellError> {
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
pub fn misses_table(book: &Book) -> Result<Table, CellError> {
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
pub fn repeats_summary(book: &Book) -> Result<String, CellError> {
    let names: Vec<String> = book
        .rerun_records()?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let mut varied = vec![];
    for name in &names {
        let (record, repeats) = book.rerun_with_repeats(name)?;
        let reserved = |r: &RerunRecord| r.steps.iter().map(|s| s.reserved).collect::<Vec<_>>();
        if repeats.iter().any(|r| reserved(r) != reserved(&record)) {
            varied.push(name.clone());
        }
    }
    assert_eq!(varied, [SPREAD_RUN], "the text names this run");
    let gpu_runs = 1 + book.rerun_with_repeats(&names[0])?.1.len();
    assert_eq!(gpu_runs, 3, "the text: three times");
    Ok(format!(
        "configurations recorded: {}; runs of each: {gpu_runs}; whose runs differ: {}",
        names.len(),
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
pub fn spread_table(book: &Book) -> Result<(Table, u64), CellError> {
    let name = SPREAD_RUN;
    let (record, outcome, e) = book.replay(name)?;
    let (_, repeats) = book.rerun_with_repeats(name)?;
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
pub fn death_table(book: &Book) -> Result<Table, CellError> {
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
            "their size".to_string(),
            bytes::exact(gpu.failed_pages[0]),
            bytes::exact(dry.failed_pages[0]),
        ]))
}

/// `x` [64, 32] and `w` [32, 128], random leaves that require grad: the inputs of the
/// chapter's small program for [`forward_peak`], on a dry device.
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
pub fn autotune_table(book: &Book) -> Result<Table, CellError> {
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
    let gpu_choices = dryrun::AutotuneCache::read(gpu_cache)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use highwater::conform::Difference;

    fn exactness(differences: Vec<Difference>) -> Exactness {
        Exactness {
            name: "lstm-lstm-fusion-none-b32".into(),
            completed: (4, 4),
            gpu_runs: 3,
            gpu_spread: 100,
            differences,
            measured_death: None,
            predicted_death: None,
        }
    }

    fn differing(figure: &'static str, by: u64) -> Difference {
        Difference {
            step: 1,
            figure,
            measured: 1000,
            predicted: 1000 + by,
        }
    }

    #[test]
    fn a_held_out_check_counts_live_bytes_beyond_the_gpus_spread_and_pages_beyond_a_page() {
        let e = exactness(vec![
            differing("in_use_after_forward", 100),
            differing("in_use_after_backward", 101),
            differing("reserved", 50),
            differing("reserved", 500),
            differing("reserved", 4096),
        ]);
        let h = HeldOut::of(&e, 1000, Some(true));
        assert_eq!(
            h.live,
            Off {
                compared: 8,
                off: 1
            }
        );
        assert_eq!(
            h.reserved,
            Off {
                compared: 4,
                off: 1
            }
        );
        assert_eq!(h.reserved_largest, 4096);
        assert!(h.on_fusion());
        assert_eq!((h.gpu_runs, h.gpu_spread, h.in_band), (3, 100, Some(true)));
        assert_eq!(h.label(), "lstm · burn-fusion · f32");
    }

    #[test]
    fn every_burn_fusion_record_is_checked_with_the_cache_its_runs_started_from() {
        let book = Book::at(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let mut recorded: Vec<String> = book
            .files(FUSION, "json")
            .unwrap()
            .iter()
            .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
            .collect();
        recorded.sort();
        let checked: Vec<&str> = FUSION_CACHES.iter().map(|(name, _)| *name).collect();
        assert_eq!(recorded, checked);
        for (name, cache) in FUSION_CACHES {
            let dir = book.path(format!("{SWEEP}/{cache}"));
            assert!(
                !dryrun::Atlas::read(&dir).unwrap().entries.is_empty(),
                "{name}: {cache}"
            );
        }
    }

    #[test]
    fn a_label_names_the_family_the_backend_and_the_precision() {
        let h = HeldOut::of(&exactness(vec![]), 0, None);
        let named = |name: &str| HeldOut {
            name: name.into(),
            ..h.clone()
        };
        assert_eq!(
            named("resnet-resnet-cube-none-b128-bf16").label(),
            "resnet · CubeBackend · bf16"
        );
        assert_eq!(
            named("decoder-decoder-cube-none-b16").label(),
            "decoder · CubeBackend · f32"
        );
        assert_eq!(
            h.live,
            Off {
                compared: 8,
                off: 0
            }
        );
    }

    fn repository() -> Book {
        Book::at(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    #[test]
    fn the_held_out_table_has_a_row_per_check() {
        let e = exactness(vec![differing("reserved", 50)]);
        let checks = [
            HeldOut::of(&e, 1000, None),
            HeldOut {
                name: "resnet-resnet-cube-none-b128-bf16".into(),
                ..HeldOut::of(&exactness(vec![]), 1000, Some(true))
            },
        ];
        let t = held_out_table(&checks);
        assert_eq!(t.rows().len(), 2);
        assert_eq!(t.rows()[0][0], "lstm · burn-fusion · f32");
        assert_eq!(t.rows()[0][2], "0 of 8");
        assert_eq!(t.rows()[0][4], "–");
        assert_eq!(t.rows()[1][4], "holds");
    }

    #[test]
    #[should_panic(expected = "the text: bytes in use are the GPU's")]
    fn the_held_out_table_refuses_live_bytes_off() {
        let e = exactness(vec![differing("in_use_after_forward", 101)]);
        held_out_table(&[HeldOut::of(&e, 1000, None)]);
    }

    #[test]
    fn the_dry_device_derives_the_h200s_properties() {
        let t = device_table(&repository()).unwrap();
        assert_eq!(t.rows().len(), 4);
        // The checksum that keys the autotune cache: recorded and derived, the same.
        assert_eq!(t.rows()[1][1], t.rows()[1][2]);
        assert_eq!(t.rows()[3][1], t.rows()[3][2], "largest page");
    }

    #[test]
    fn one_configuration_of_the_gpu_records_varies_over_three_runs() {
        let summary = repeats_summary(&repository()).unwrap();
        assert!(summary.contains("runs of each: 3"), "{summary}");
        assert!(summary.ends_with(SPREAD_RUN), "{summary}");
    }

    #[test]
    fn the_dry_run_dies_where_the_capped_gpu_died() {
        let t = death_table(&repository()).unwrap();
        assert_eq!(t.rows().len(), 4);
        assert_eq!(t.rows()[0][1], t.rows()[0][2], "the same step and phase");
    }

    #[test]
    fn the_capped_fused_arms_extra_page_is_one_gate_up_weight() {
        let book = repository();
        let (t, spread) = spread_table(&book).unwrap();
        assert_eq!(t.rows().len(), 4, "three GPU runs and the dry one");
        let recipe = book
            .rerun_record(format!("{RESULTS}/{SPREAD_RUN}.json"))
            .unwrap();
        let recipe = recipe.recipe().unwrap();
        assert_eq!(
            spread,
            recipe.d_model * recipe.gate_up_width() * recipe.dtype.size()
        );
    }

    #[test]
    fn the_simulators_two_misses_replay_dry_to_the_byte() {
        let t = misses_table(&repository()).unwrap();
        assert_eq!(t.rows().len(), 2);
        for row in t.rows() {
            assert!(row[1].starts_with("0 of "), "{row:?}");
            assert_eq!(row[2], row[4], "GPU and dry, to the byte");
            assert_ne!(row[2], row[3], "the simulator misses");
        }
    }

    #[test]
    fn cold_and_warm_caches_replay_dry_to_the_byte() {
        let t = autotune_table(&repository()).unwrap();
        assert_eq!(t.rows().len(), 2);
        for row in t.rows() {
            assert_eq!(row[2], row[3], "{row:?}");
        }
        assert!(t.rows()[0][1].starts_with("itself ("));
    }

    #[test]
    fn the_ledger_and_burn_differ_by_a_launchs_metadata_and_on_fusion_by_y() {
        use burn::backend::Autodiff;
        use situ::dry::{DryCube, DryFusion};

        fn loss<B: Backend>([x, w]: [Tensor<B, 2>; 2]) -> Tensor<B, 1> {
            x.matmul(w).slice([32..64, 0..128]).mul_scalar(1.5).sum()
        }
        let mut g = Graph::new(DType::F32);
        let x = g.input("x", [64, 32], true);
        let w = g.param("w", [32, 128]);
        let a = g.matmul("a = x·w", x, w);
        let s = g.slice("s = a[32.., :]", a, 0, 32, 64);
        let y = g.mul_scalar("y = s·1.5", s);
        let loss_id = g.reduce("loss", "sum", y);
        g.output(loss_id);
        let book = repository();
        // As the chapter's cell calls them: `leaves`' backend inferred from `loss`'s.
        let cube = book
            .forward_peak(leaves, loss::<Autodiff<DryCube>>)
            .unwrap();
        let fusion = book
            .forward_peak(leaves, loss::<Autodiff<DryFusion>>)
            .unwrap();
        let t = ledger_against_dry(&g, y, loss_id, cube, fusion);
        assert_eq!(t.rows().len(), 2);
        assert_eq!(t.rows()[0][3], "+32 B");
    }
}
