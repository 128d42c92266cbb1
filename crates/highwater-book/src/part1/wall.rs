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

/// Seeds as a reader reads them, runs of consecutive seeds joined: `1–5`, `1, 3–4`.
pub fn seed_list(seeds: &[u64]) -> String {
    let mut seeds = seeds.to_vec();
    seeds.sort_unstable();
    seeds.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for s in seeds {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == s => *last = s,
            _ => runs.push((s, s)),
        }
    }
    runs.iter()
        .map(|&(a, b)| match b - a {
            0 => a.to_string(),
            1 => format!("{a}, {b}"),
            _ => format!("{a}–{b}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One value per seed, merged: the value alone where every seed agrees, else each value (in
/// order of its first seed) with its seeds, `3 (seeds 1, 5); 2 (seeds 2–4)`.
pub fn merge_seeds(values: &[(u64, String)]) -> String {
    let mut groups: Vec<(&str, Vec<u64>)> = Vec::new();
    for (seed, value) in values {
        match groups.iter_mut().find(|(v, _)| v == value) {
            Some((_, seeds)) => seeds.push(*seed),
            None => groups.push((value, vec![*seed])),
        }
    }
    if groups.len() == 1 {
        return groups[0].0.to_string();
    }
    groups
        .iter()
        .map(|(value, seeds)| {
            let s = if seeds.len() == 1 { "seed" } else { "seeds" };
            format!("{value} ({s} {})", seed_list(seeds))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What cubecl's message says failed, in a few words: `matmul autotune` where an
/// autotune plan could not run (`MatmulAutotuneKey`), `allocation` where a buffer could not be
/// allocated, else the message's first line.
pub fn failure(message: &str) -> String {
    if let Some(key) = message
        .split("autotune plan for key: ")
        .nth(1)
        .and_then(|k| k.split("AutotuneKey").next())
    {
        return format!("{} autotune", key.trim().to_lowercase());
    }
    if message.contains("can't allocate buffer") {
        return "allocation".into();
    }
    message.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_merge_where_they_agree() {
        assert_eq!(seed_list(&[3, 1, 2, 5, 4]), "1–5");
        assert_eq!(seed_list(&[1, 3, 4, 6, 7, 8]), "1, 3, 4, 6–8");
        let v = |s: u64, x: &str| (s, x.to_string());
        assert_eq!(merge_seeds(&[v(1, "a"), v(2, "a")]), "a");
        assert_eq!(
            merge_seeds(&[v(1, "3"), v(2, "2"), v(3, "2"), v(4, "2"), v(5, "3")]),
            "3 (seeds 1, 5); 2 (seeds 2–4)"
        );
        assert_eq!(
            merge_seeds(&[v(1, "x"), v(2, "y")]),
            "x (seed 1); y (seed 2)"
        );
    }

    #[test]
    fn failures_in_a_few_words() {
        assert_eq!(
            failure(
                "Can't execute the autotune plan for key: ReduceAutotuneKey { elem_input: F32 }"
            ),
            "reduce autotune"
        );
        assert_eq!(
            failure(
                "called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: 9"
            ),
            "allocation"
        );
        assert_eq!(failure("other\nmore"), "other");
    }
}
