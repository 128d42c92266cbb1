//! A model the GPU never ran, predicted from the card's autotune atlas alone (its own
//! problems taken out), held to what the H200 measured when it did run it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cell_output::{Markdown, Table};
use dryrun::Atlas;
use highwater::conform::NetworkRecord;
use situ::band::{Agreement, Band, BandCheck, ColdBand, replay_band, replay_cold};

use crate::BookError;
use crate::bytes;
use crate::load::{Book, H200_ATLAS, MODELS, SWEEP};

/// One recorded model predicted from the atlas less its own problems, warm and cold.
pub struct FromAtlas {
    /// The first warm run on the H200 (its cache filled by the cold run).
    pub warm: NetworkRecord,
    /// Its first run on the H200, from an empty autotune cache.
    pub cold: NetworkRecord,
    /// The problems the model's cold run tuned on the GPU: what the atlas was stripped of.
    pub own: Atlas,
    /// The warm prediction with its band.
    pub band: Band,
    /// The prediction against the warm runs.
    pub check: BandCheck,
    /// The miss policy's picks against the GPU's.
    pub agreement: Agreement,
    /// The first run predicted dry (every candidate tuned in the pool).
    pub cold_band: ColdBand,
    /// The steps whose GPU figure for the first run lies outside its band: step, GPU, least,
    /// most.
    pub cold_outside: Vec<situ::band::Outside>,
}

impl Book {
    /// `repro/results/models/NAME.json` (with its repeats and its cold run) predicted dry from
    /// the H200's atlas less the problems its own cold run tuned. Kept for the process: the
    /// book's cells run in one, and three of them ask for the same model (the held-out table,
    /// the band's table and its sentence), each prediction several seconds of dry runs.
    pub fn from_atlas(&self, name: &str) -> Result<Arc<FromAtlas>, BookError> {
        static DONE: Mutex<BTreeMap<(PathBuf, String), Arc<FromAtlas>>> =
            Mutex::new(BTreeMap::new());
        let key = (self.path(""), name.to_string());
        if let Some(done) = DONE.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(Arc::clone(done));
        }
        let predicted = Arc::new(self.predict_from_atlas(name)?);
        let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Arc::clone(done.entry(key).or_insert(predicted)))
    }

    fn predict_from_atlas(&self, name: &str) -> Result<FromAtlas, BookError> {
        let (warm, repeats) = self.with_repeats_in::<NetworkRecord>(MODELS, name)?;
        let cold: NetworkRecord = self.json(format!("{MODELS}/cold/{name}.json"))?;
        let own_dir = format!("{MODELS}/autotune/{}", warm.network()?.cache_name());
        let own = Atlas::read(&self.path(own_dir))?;
        let atlas = Atlas::read(&self.path(H200_ATLAS))?.without(&own);
        let card = self.h200_card()?;
        let (band, check) = replay_band(&warm, &repeats, card.clone(), &atlas)?;
        let (cold_band, cold_outside) = replay_cold(&cold, check.reserved_tolerance, card)?;
        Ok(FromAtlas {
            agreement: band.agreement(&own),
            warm,
            cold,
            own,
            band,
            check,
            cold_band,
            cold_outside,
        })
    }
}

impl FromAtlas {
    /// The miss policy against the GPU, in a sentence: how many of the model's problems it
    /// decided, how often it named the GPU's kernel and how often one reserving the same bytes.
    /// Asserts what the text says: same bytes more often than same kernel.
    pub fn agreement_text(&self) -> Markdown {
        let a = self.agreement;
        assert!(
            a.same_bytes > a.same_kernel,
            "the text: same bytes more often than same kernel"
        );
        miss_policy_text(self.check.decided, self.own.entries.len(), a)
    }

    /// Per step: bytes in use (GPU, predicted), bytes reserved warm (GPU, predicted, band) and
    /// cold (GPU, band).
    pub fn table(&self) -> Table {
        let range = |(l, h): (Option<u64>, Option<u64>)| match (l, h) {
            (Some(l), Some(h)) => format!("{} … {}", bytes::show(l), bytes::show(h)),
            _ => "(died)".into(),
        };
        let warm = self.band.reserved();
        let cold = self.cold_band.reserved();
        let mut t = Table::new([
            "step",
            "in use after fwd: GPU / dry",
            "after bwd: GPU / dry",
            "reserved: GPU",
            "dry",
            "band",
            "first run: GPU",
            "band",
        ]);
        for (i, gpu) in self.warm.steps.iter().enumerate() {
            let Some(dry) = self.band.predicted.steps.get(i) else {
                break;
            };
            let pair = |g: u64, d: u64| {
                if g == d {
                    format!("{} (same)", bytes::show(g))
                } else {
                    format!("{} / {}", bytes::show(g), bytes::show(d))
                }
            };
            t.push([
                (i + 1).to_string(),
                pair(gpu.in_use_after_forward, dry.in_use_after_forward),
                pair(gpu.in_use_after_backward, dry.in_use_after_backward),
                bytes::show(gpu.reserved),
                bytes::show(dry.reserved),
                warm.get(i).map_or("–".into(), |&(l, _, h)| range((l, h))),
                self.cold
                    .steps
                    .get(i)
                    .map_or("–".into(), |s| bytes::show(s.reserved)),
                cold.get(i).map_or("–".into(), |&r| range(r)),
            ]);
        }
        t
    }
}

/// [`FromAtlas::agreement_text`] from its figures: `decided` of the model's `own` problems.
pub(super) fn miss_policy_text(decided: usize, own: usize, a: Agreement) -> Markdown {
    // The atlas less the model's own problems was stripped of every one of them, so the miss
    // policy decides all (as `highwater conform --dry --band` does), unless the dry device could
    // not record some: the book's cells may not write a file over a mebibyte, and CubeCL drops,
    // with no error, the cache lines past that size in the device's copy of the atlas.
    let unrecorded = if decided < own {
        format!(
            " The command line decides all {own}: the book's cells may not write files over a \
             mebibyte, and CubeCL silently drops the cache lines of {} tuned problems past that \
             size in the dry device's copy of the atlas, so this build settles them by the run's \
             tie-break.",
            own - decided
        )
    } else {
        String::new()
    };
    Markdown(format!(
        "{decided} of its {own} problems were decided by the miss policy; it named the GPU's kernel \
         for {} and a kernel reserving the same bytes as the GPU's for {}.{unrecorded}",
        a.same_kernel, a.same_bytes
    ))
}

/// A model recorded in [`MODELS`]: its record, the record's name and its own cache's folder.
#[derive(Debug, Clone)]
pub struct RecordedModel {
    /// The record's file stem (`resnet-resnet-cube-none-b128`).
    pub name: String,
    /// Its cold run's cache, under `autotune/` (`resnet-f32`).
    pub own: String,
    /// The record: its warm run (`MODELS/NAME.json`).
    pub warm: NetworkRecord,
}

impl Book {
    /// Every model recorded in [`MODELS`], in name order.
    pub fn recorded_models(&self) -> Result<Vec<RecordedModel>, BookError> {
        let mut models = Vec::new();
        for path in self.files(MODELS, "json")? {
            let record: NetworkRecord = crate::load::json_at(&path)?;
            // Its cold run, repeats and cache are found by its name: the file must carry it.
            if path.file_stem().and_then(|s| s.to_str()) != Some(record.name().as_str()) {
                let name = record.name();
                let e = format!("{}: the record names itself `{name}`", path.display());
                return Err(e.into());
            }
            let network = record.network()?;
            models.push(RecordedModel {
                name: record.name(),
                own: network.cache_name(),
                warm: record,
            });
        }
        Ok(models)
    }

    /// Each recorded model trained dry with only the committed cache of the wave and the
    /// decoder (`repro/cards/h200-autotune`), as a new user's model is: its last step's bytes
    /// reserved against the warm and the cold GPU runs, and how many problems were tuned dry.
    pub fn committed_cache_alone(&self) -> Result<Table, BookError> {
        let card = self.h200_card()?;
        let committed = self.h200_autotune();
        let mut t = Table::new([
            "model",
            "problems tuned dry",
            "reserved, last step: dry",
            "warm GPU",
            "dry − warm",
            "cold GPU",
        ]);
        for m in self.recorded_models()? {
            let (warm, repeats) = (&m.warm, self.repeats_in::<NetworkRecord>(MODELS, &m.name)?);
            let cold: NetworkRecord = self.json(format!("{MODELS}/cold/{}.json", m.name))?;
            let (outcome, _) =
                situ::dry::replay_network(warm, &repeats, card.clone(), Some(&committed))?;
            let last =
                |steps: &[highwater::conform::MeasuredStep]| steps.last().map_or(0, |s| s.reserved);
            let (dry, gpu) = (last(&outcome.steps), last(&warm.steps));
            t.push([
                m.name,
                outcome.autotune_misses.len().to_string(),
                bytes::show(dry),
                bytes::show(gpu),
                bytes::signed(dry as i64 - gpu as i64),
                bytes::show(last(&cold.steps)),
            ]);
        }
        Ok(t)
    }

    /// Per recorded model: its first run's bytes reserved at the last step over its warm run's.
    pub fn first_run_ratios(&self) -> Result<Vec<(String, f64)>, BookError> {
        let last = |r: &NetworkRecord| r.steps.last().map_or(0, |s| s.reserved) as f64;
        let mut ratios = Vec::new();
        for m in self.recorded_models()? {
            let cold: NetworkRecord = self.json(format!("{MODELS}/cold/{}.json", m.name))?;
            ratios.push((m.name, last(&cold) / last(&m.warm)));
        }
        Ok(ratios)
    }

    /// The atlas's coverage of each recorded model (how many of the problems its cold run tuned
    /// the atlas's other sources hold) and the miss policy's accuracy, each problem left out.
    pub fn atlas_coverage(&self) -> Result<(Table, (usize, usize)), BookError> {
        let mut t = Table::new([
            "model",
            "problems it tuned",
            "held by the atlas's other sources",
        ]);
        let sources = self
            .atlas_sources()?
            .into_iter()
            .map(|dir| Ok((Atlas::read(&dir)?, dir)))
            .collect::<Result<Vec<_>, BookError>>()?;
        for m in self.recorded_models()? {
            let own_dir = self.path(format!("{MODELS}/autotune/{}", m.own));
            let own = Atlas::read(&own_dir)?;
            let others = Atlas::merge(
                sources
                    .iter()
                    .filter(|(_, dir)| *dir != own_dir)
                    .map(|(a, _)| a.clone()),
            );
            let held = own.entries.iter().filter(|e| others.holds(e)).count();
            t.push([
                m.name,
                own.entries.len().to_string(),
                format!("{held} of {}", own.entries.len()),
            ]);
        }
        let atlas = Atlas::read(&self.path(H200_ATLAS))?;
        Ok((t, atlas.leave_one_out().total()))
    }

    /// The card against itself: problems more than one of the atlas's sources tuned, and how
    /// many of them different kernels won ([`dryrun::atlas::retuned`]).
    pub fn atlas_retuned(&self) -> Result<dryrun::atlas::Retuned, BookError> {
        let sources = self
            .atlas_sources()?
            .iter()
            .map(|dir| Atlas::read(dir))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(dryrun::atlas::retuned(&sources))
    }

    /// The caches the H200's atlas merges (`scripts/regenerate-gpu`): the wave's and the
    /// decoder's, each recorded model's, each line of the sweep's.
    pub fn atlas_sources(&self) -> Result<Vec<std::path::PathBuf>, BookError> {
        let mut dirs = vec![self.h200_autotune()];
        for under in [format!("{MODELS}/autotune"), SWEEP.to_string()] {
            let mut found: Vec<_> = std::fs::read_dir(self.path(&under))
                .map_err(|e| BookError::from(format!("{under}: {e}")))?
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.is_dir())
                .collect();
            found.sort();
            dirs.extend(found);
        }
        Ok(dirs)
    }
}
