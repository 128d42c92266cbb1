//! *Walking into the wall*'s records: the H200's runs of each candidate (`scripts/gpu-wall`)
//! and the dry run's predictions of them (`scripts/wall-predict`).

use cell_output::Table;
use highwater::conform::{MeasuredDeath, RerunRecord};
use highwater::recipe::written_name;
use highwater::{Checkpointing, RunReport};

use crate::BookError;
use crate::bytes;
use crate::load::{Book, RESULTS, json_at};
use crate::series::{self, Pools};

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

/// *What grows on the H200*: for each candidate on the whole H200, every stream's pools at
/// step 2 and at the end (the training thread's own in brackets where they part by more than
/// 64 MiB), what they grew after step 2, and the steps they grew at (the first twelve).
pub fn grows_table(book: &Book) -> Result<Table, BookError> {
    let mut t = Table::new([
        "candidate",
        "step 2",
        "step 1000",
        "grew after step 2",
        "at steps",
    ]);
    for r in book.wall_runs("uncapped")? {
        let all = series::measured_points(&r, Pools::EveryStream);
        let own = series::measured_points(&r, Pools::Trainer);
        let (second, last) = (all[1].1, all[all.len() - 1].1);
        let grew: Vec<u32> = all
            .windows(2)
            .skip(1)
            .filter(|w| w[1].1 > w[0].1)
            .map(|w| w[1].0)
            .collect();
        // Every stream's pools, and the training thread's own in brackets where they part.
        let note = |i: usize| match (all[i].1, own[i].1) {
            (all, own) if all.abs_diff(own) > 64 << 20 => {
                format!("{} ({})", bytes::show(all), bytes::show(own))
            }
            (all, _) => bytes::show(all),
        };
        let shown: Vec<String> = grew.iter().take(12).map(u32::to_string).collect();
        let at = match grew.len() {
            0 => "never".to_string(),
            n if n > 12 => format!("{} … ({n} steps)", shown.join(", ")),
            _ => shown.join(", "),
        };
        t.push([
            candidate(&r),
            note(1),
            note(all.len() - 1),
            bytes::show(last - second),
            at,
        ]);
    }
    Ok(t)
}

/// The capped H200 run `r`'s death, held to the dry run's prediction for its candidate and seed:
/// an error if it survived or the dry run names another step (the text says the dry run
/// predicts every death step exactly).
pub(crate) fn predicted_death<'r>(
    book: &Book,
    r: &'r RerunRecord,
) -> Result<&'r MeasuredDeath, BookError> {
    let name = candidate(r);
    let refused = |why: String| BookError::Refused(format!("{name} s{}: {why}", r.seed));
    let death = (r.died.as_ref()).ok_or_else(|| refused("survived".into()))?;
    let dry = book.wall_prediction(&format!("{name}-s{}", r.seed))?;
    if dry.died_at != Some(death.step) {
        let dry = dry
            .died_at
            .map_or("no death".into(), |s| format!("step {s}"));
        let step = death.step;
        return Err(refused(format!(
            "died in step {step} on the H200, but the dry run predicts {dry}"
        )));
    }
    Ok(death)
}

/// *Deaths on the capped card*: one row per candidate of the capped H200 runs, each seed's
/// death (step, phase, page refused, failure) merged across seeds ([`merge_seeds`]), and the
/// dry run's step, checked equal to the H200's for every seed, as the text claims.
pub fn deaths_table(book: &Book) -> Result<Table, BookError> {
    let runs = book.wall_runs("capped")?;
    let mut names: Vec<String> = runs.iter().map(candidate).collect();
    names.dedup();
    let mut t = Table::new([
        "candidate",
        "seeds",
        "died on the H200",
        "in phase",
        "dry run's step",
        "page refused",
        "failure",
    ]);
    for name in names {
        let (mut step, mut phase, mut page, mut fail) = (vec![], vec![], vec![], vec![]);
        let mut seeds = Vec::new();
        for r in runs.iter().filter(|r| candidate(r) == name) {
            let gpu = predicted_death(book, r)?;
            let s = r.seed;
            seeds.push(s);
            step.push((s, format!("step {}", gpu.step)));
            phase.push((s, written_name(&gpu.phase)));
            page.push((
                s,
                gpu.failed_pages
                    .first()
                    .map_or("—".into(), |&p| bytes::show(p)),
            ));
            fail.push((s, failure(&gpu.message)));
        }
        t.push([
            name,
            seed_list(&seeds),
            merge_seeds(&step),
            merge_seeds(&phase),
            format!("same, {0} of {0}", seeds.len()),
            merge_seeds(&page),
            merge_seeds(&fail),
        ]);
    }
    Ok(t)
}

/// *What stops it*: each mitigation on the capped H200 (seed 1), its fate on the GPU and as the
/// dry run predicted it, the most every stream's pools held in a completed step, and the
/// headroom that left.
pub fn mitigations_table(book: &Book) -> Result<Table, BookError> {
    let mut t = Table::new([
        "run",
        "on the GPU",
        "predicted dry",
        "most held in a completed step (every stream)",
        "headroom then",
    ]);
    let fate = |died: Option<u64>, steps: usize| {
        died.map_or(format!("survived {steps} steps"), |s| {
            format!("died in step {s}")
        })
    };
    for r in book.wall_runs("mitigated")? {
        let name = format!("{}-s1", candidate(&r).replace(" / ", "-"));
        let dry = book.wall_prediction(&name)?;
        let most = series::measured_points(&r, Pools::EveryStream)
            .iter()
            .map(|p| p.1)
            .max()
            .unwrap_or(0);
        t.push([
            candidate(&r),
            fate(r.died.as_ref().map(|d| d.step), r.steps.len()),
            fate(dry.died_at, dry.reserved.len()),
            bytes::show(most),
            bytes::show(r.device.pool_capacity.saturating_sub(most)),
        ]);
    }
    Ok(t)
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

    #[test]
    fn the_loader_grows_without_end_and_run_ahead_never() {
        let t = grows_table(&Book::repository()).unwrap();
        let row = |name: &str| {
            t.rows()
                .iter()
                .find(|r| r[0] == name)
                .unwrap_or_else(|| panic!("no {name} row"))
                .clone()
        };
        assert_eq!(row("run-ahead")[4], "never", "{:?}", t.rows());
        // The loader grows at each epoch's first step, while its training thread's own pool
        // (in brackets) stays where step 2 left it.
        let loader = row("loader");
        assert!(
            loader[4].split(", ").all(|s| s.ends_with("01")),
            "{loader:?}"
        );
        let own = |cell: &str| cell.split_once(" (").map(|(_, own)| own.to_string());
        assert!(
            own(&loader[1]).is_some() && own(&loader[1]) == own(&loader[2]),
            "{loader:?}"
        );
    }

    #[test]
    fn every_capped_death_is_predicted_dry() {
        let t = deaths_table(&Book::repository()).unwrap();
        // The loader, the evaluation and padding each kill the capped run.
        assert_eq!(t.rows().len(), 3, "{:?}", t.rows());
        for row in t.rows() {
            assert!(row[4].starts_with("same, "), "{row:?}");
        }
    }

    #[test]
    fn only_the_control_survives_the_mitigations() {
        let t = mitigations_table(&Book::repository()).unwrap();
        let survivors: Vec<&str> = t
            .rows()
            .iter()
            .filter(|r| r[1].starts_with("survived"))
            .map(|r| r[0].as_str())
            .collect();
        assert_eq!(survivors, ["small"], "{:?}", t.rows());
    }
}
