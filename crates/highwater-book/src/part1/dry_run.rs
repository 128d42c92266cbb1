//! The dry run as the book's pages use it: a recorded run replayed on the H200's profile with
//! the GPU's kernels, a program of a page's own measured on a dry H200, and the held-out checks
//! (programs nobody fitted, replayed against the H200's runs of them).

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use dryrun::{CardProfile, DryDevice, OnRefusal};
use highwater::conform::{Exactness, NetworkRecord, RerunRecord};
use situ::dry::{DryOutcome, pool_usage};

use crate::BookError;
use crate::load::{Book, MODELS, SWEEP};

mod tables;

pub use tables::{
    SPREAD_RUN, autotune_table, death_table, device_table, held_out_table, leaves,
    ledger_against_dry, misses_table, repeats_summary, spread_table,
};

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
    /// burn-fusion only: bytes reserved are held to the band of its schedules
    /// (`situ::band::schedules`), at most this wide; `reserved` counts the steps outside it.
    pub schedules_band: Option<u64>,
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
            schedules_band: None,
        }
    }

    /// A burn-fusion replay: bytes in use held as [`HeldOut::of`] holds them (the prediction's),
    /// bytes reserved to the band of its schedules: steps with a GPU run outside it are off.
    pub fn banded(check: &situ::band::BandCheck, page: u64) -> HeldOut {
        let mut held = HeldOut::of(&check.in_use, page, None);
        held.reserved.off = check.steps_outside();
        held.reserved_largest = 0;
        held.schedules_band = Some(check.width());
        held
    }

    /// Recorded on burn-fusion.
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
    pub fn held_out(&self) -> Result<Vec<HeldOut>, BookError> {
        let card = self.h200_card()?;
        let mut checks = Vec::new();
        let mut replay = |dir: &str, name: &str, cache: std::path::PathBuf, band: bool| {
            let (record, repeats) = self.with_repeats_in::<NetworkRecord>(dir, name)?;
            let page = situ::band::reserved_tolerance(&card, 0);
            if record.backend == highwater::Backend::Fusion {
                let atlas = dryrun::Atlas::read(&cache)?;
                let (_, check) = situ::band::replay_band(&record, &repeats, card.clone(), &atlas)?;
                checks.push(HeldOut::banded(&check, page));
                return Ok(());
            }
            let (_, e) = situ::dry::replay_network(&record, &repeats, card.clone(), Some(&cache))?;
            let in_band = if band {
                let p = self.from_atlas(name)?;
                Some(p.check.holds() && p.cold_outside.is_empty())
            } else {
                None
            };
            checks.push(HeldOut::of(&e, page, in_band));
            Ok::<_, BookError>(())
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
    pub fn h200_card(&self) -> Result<Arc<CardProfile>, BookError> {
        Ok(Arc::new(self.h200()?))
    }

    /// `repro/results/NAME.json` replayed dry on the H200 with its autotune cache, against the
    /// record and its repeats: the record, the dry outcome, how close they are.
    pub fn replay(&self, name: &str) -> Result<(RerunRecord, DryOutcome, Exactness), BookError> {
        let (record, repeats) = self.rerun_with_repeats(name)?;
        let (outcome, exactness) = self.replay_recorded(&record, &repeats)?;
        Ok((record, outcome, exactness))
    }

    /// [`Book::replay`] of a record and its repeats already read.
    pub fn replay_recorded(
        &self,
        record: &RerunRecord,
        repeats: &[RerunRecord],
    ) -> Result<(DryOutcome, Exactness), BookError> {
        let autotune = self.h200_autotune();
        Ok(situ::dry::replay(
            record,
            repeats,
            self.h200_card()?,
            Some(&autotune),
        )?)
    }

    /// The most bytes in use while burn runs `loss` on a dry H200, over what its inputs hold:
    /// `inputs` makes them (leaves that require grad, say), `loss` is the forward pass. Run
    /// three times, backward included, so that the first runs tune what the cache lacks; the
    /// last is measured.
    pub fn forward_peak<B, I>(
        &self,
        inputs: impl Fn(&DryDevice) -> I,
        loss: impl Fn(I) -> Tensor<B, 1>,
    ) -> Result<u64, BookError>
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::RESULTS;
    use burn::tensor::backend::Backend;
    use highwater::conform::Difference;
    use highwater::{DType, Graph};

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
        let book = Book::repository();
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
        let t = device_table(&Book::repository()).unwrap();
        assert_eq!(t.rows().len(), 4);
        // The checksum that keys the autotune cache: recorded and derived, the same.
        assert_eq!(t.rows()[1][1], t.rows()[1][2]);
        assert_eq!(t.rows()[3][1], t.rows()[3][2], "largest page");
    }

    #[test]
    fn one_configuration_of_the_gpu_records_varies_over_three_runs() {
        let summary = repeats_summary(&Book::repository()).unwrap();
        assert!(summary.contains("runs of each: 3"), "{summary}");
        assert!(summary.ends_with(SPREAD_RUN), "{summary}");
    }

    #[test]
    fn the_dry_run_dies_where_the_capped_gpu_died() {
        let t = death_table(&Book::repository()).unwrap();
        assert_eq!(t.rows().len(), 4);
        assert_eq!(t.rows()[0][1], t.rows()[0][2], "the same step and phase");
    }

    #[test]
    fn the_capped_fused_arms_extra_page_is_one_gate_up_weight() {
        let book = Book::repository();
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
        let t = misses_table(&Book::repository()).unwrap();
        assert_eq!(t.rows().len(), 2);
        for row in t.rows() {
            assert!(row[1].starts_with("0 of "), "{row:?}");
            assert_eq!(row[2], row[4], "GPU and dry, to the byte");
            assert_ne!(row[2], row[3], "the simulator misses");
        }
    }

    #[test]
    fn cold_and_warm_caches_replay_dry_to_the_byte() {
        let t = autotune_table(&Book::repository()).unwrap();
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
        let book = Book::repository();
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
