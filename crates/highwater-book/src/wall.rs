//! *Walking into the wall*'s records: the H200's runs of each candidate (`scripts/gpu-wall`)
//! and the dry run's predictions of them (`scripts/wall-predict`).

use highwater::conform::RerunRecord;
use highwater::recipe::written_name;
use highwater::{Checkpointing, RunReport};

use crate::load::{Book, BookError, RESULTS, json_at};

/// The wall's records, under [`RESULTS`].
pub const WALL: &str = "wall";

impl Book {
    /// The H200's records in `repro/results/wall/DIR` (`uncapped`, `capped`, `mitigated`),
    /// ordered by candidate, then seed.
    pub fn wall_runs(&self, dir: &str) -> Result<Vec<RerunRecord>, BookError> {
        let mut runs = self
            .files(format!("{RESULTS}/{WALL}/{dir}"), "json")?
            .iter()
            .map(|p| json_at(p))
            .collect::<Result<Vec<_>, _>>()?;
        runs.sort_by_key(|r| (candidate(r), r.seed));
        Ok(runs)
    }

    /// The dry run's prediction `NAME` (`repro/results/wall/predicted/NAME.json`, its `run`).
    pub fn wall_prediction(&self, name: &str) -> Result<RunReport, BookError> {
        #[derive(serde::Deserialize)]
        struct Prediction {
            run: RunReport,
        }
        let p: Prediction = self.json(format!("{RESULTS}/{WALL}/predicted/{name}.json"))?;
        Ok(p.run)
    }
}

/// The candidate a record ran: its recipe's file name (`loader`, `eval`, …), and its
/// checkpointing when that is not none (`loader / balanced`).
pub fn candidate(r: &RerunRecord) -> String {
    let stem = std::path::Path::new(&r.recipe_path)
        .file_stem()
        .map_or("?".into(), |s| s.to_string_lossy().into_owned());
    match r.checkpointing {
        Checkpointing::None => stem,
        c => format!("{stem} / {}", written_name(&c)),
    }
}

/// [`Book::wall_runs`] from the cells' directory.
pub fn runs(dir: &str) -> Result<Vec<RerunRecord>, BookError> {
    Book::here().wall_runs(dir)
}

/// [`Book::wall_prediction`] from the cells' directory.
pub fn predicted(name: &str) -> Result<RunReport, BookError> {
    Book::here().wall_prediction(name)
}
