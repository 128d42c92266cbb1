//! The wave, end to end: recipes from `repro/recipes` through CubeCL's pool.

use std::path::{Path, PathBuf};

use highwater::limits::{
    MAX_EXPERT_CALLS, MAX_LAG, MAX_LATE_RELEASES, MAX_RECIPE_BYTES, MAX_REST_TENSORS, MAX_SEEDS,
    MAX_STEPS,
};
use highwater::{Recipe, RecipeError, RunReport, simulate};

mod forensics;
mod fuzz;
mod golden;
mod incident;
mod pickle;
mod retention;

fn recipes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/recipes")
}

fn load(path: &Path) -> Result<Recipe, RecipeError> {
    let text = std::fs::read_to_string(path).expect("readable recipe");
    Recipe::parse(&path.display().to_string(), &text)
}

fn recipe(name: &str) -> Recipe {
    load(&recipes_dir().join(format!("{name}.toml"))).expect("valid recipe")
}

fn runs(name: &str) -> Vec<RunReport> {
    let r = recipe(name);
    (1..=3).map(|seed| simulate(&r, seed, 2000)).collect()
}

#[test]
fn every_recipe_parses() {
    let mut n = 0;
    for entry in std::fs::read_dir(recipes_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 4, "found {n} recipes");
}

#[test]
fn every_calibrated_number_says_what_it_was_calibrated_to() {
    for entry in std::fs::read_dir(recipes_dir()).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.trim_start().starts_with("# CALIBRATED") {
                // What it was fitted to, or with which other calibrated value.
                let said = lines[i..]
                    .iter()
                    .take(4)
                    .map(|l| l.to_lowercase())
                    .any(|l| l.contains("fitted to") || l.contains("fitted with"));
                assert!(said, "line {}: {l}", i + 1);
            }
        }
    }
}

#[test]
fn bad_fixtures_name_file_line_and_field() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let e = load(&dir.join("bad-zero-batch.toml")).unwrap_err();
    assert!(
        matches!(&e, RecipeError::Invalid { field, line: 2, .. } if *field == "model.batch"),
        "{e}"
    );
    assert!(e.to_string().contains("bad-zero-batch.toml:2:"), "{e}");
    let e = load(&dir.join("bad-activation.toml")).unwrap_err();
    assert!(matches!(&e, RecipeError::Syntax { line: 9, .. }), "{e}");
    assert!(load(&dir.join("wave-small.toml")).is_ok());
}

/// The limits leave every recipe of the book ten times the room it uses.
#[test]
fn every_recipe_is_well_inside_the_limits() {
    for entry in std::fs::read_dir(recipes_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let r = load(&path).unwrap_or_else(|e| panic!("{e}"));
        for (limit, used) in [
            (MAX_STEPS, r.steps),
            (MAX_SEEDS, r.seeds.len() as u64),
            (MAX_EXPERT_CALLS, r.calls()),
            (MAX_REST_TENSORS, r.rest.live_bytes / r.rest.tensor_bytes),
            (MAX_LATE_RELEASES, r.jitter.late_releases),
            (MAX_LAG, r.jitter.max_lag),
            (MAX_RECIPE_BYTES, text.len() as u64),
        ] {
            assert!(
                used * 10 <= limit.max,
                "{}: {used}, {limit}",
                path.display()
            );
        }
    }
}

/// Issue 12, items 14 and 15: a recipe that once panicked (3·10¹⁸ late releases a step) or
/// asked for gigabytes (1-byte tensors) is refused at the field to change, naming the limit;
/// a 50 MB single-line recipe is refused unparsed, and its error stays short.
#[test]
fn unbounded_work_is_refused_before_any_work() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let e = load(&dir.join("bad-tensor-bytes.toml")).unwrap_err();
    assert!(
        matches!(&e, RecipeError::Invalid { field, line: 27, .. }
            if *field == "rest_of_model.tensor_bytes"),
        "{e}"
    );
    assert!(e.to_string().contains("limits::MAX_REST_TENSORS"), "{e}");
    let e = load(&dir.join("bad-late-releases.toml")).unwrap_err();
    assert!(
        matches!(&e, RecipeError::Invalid { field, line: 33, .. }
            if *field == "jitter.late_releases"),
        "{e}"
    );
    assert!(e.to_string().contains("limits::MAX_LATE_RELEASES"), "{e}");

    let text = format!("seeds = \"{}\"", "x".repeat(50 << 20));
    let e = Recipe::parse("big.toml", &text).unwrap_err().to_string();
    assert!(
        e.len() < 200 && e.contains("limits::MAX_RECIPE_BYTES"),
        "{}",
        &e[..e.len().min(300)]
    );
}

#[test]
fn situ_dies_between_100_and_500_at_seed_dependent_steps() {
    let reports = runs("situ");
    let deaths: Vec<u64> = reports
        .iter()
        .map(|r| {
            r.died_at
                .unwrap_or_else(|| panic!("seed {} survived", r.seed))
        })
        .collect();
    for (r, d) in reports.iter().zip(&deaths) {
        assert!((100..=500).contains(d), "seed {} died at {d}", r.seed);
        // The death is a loss read after reserve failures of the arm's own activations.
        let f = r.failures.first().expect("a failure before the death");
        assert!(f.step <= *d && f.step > d - 100, "seed {}: {f:?}", r.seed);
        assert!(f.page >= f.requested, "{f:?}");
    }
    assert!(
        deaths.iter().any(|d| *d != deaths[0]),
        "all died at {}",
        deaths[0]
    );
}

#[test]
fn control_fused_and_balanced_survive_2000_steps() {
    for name in ["small", "situ-fused", "situ-balanced"] {
        for r in runs(name) {
            assert_eq!(r.died_at, None, "{name} seed {} died", r.seed);
            assert!(
                r.failures.is_empty(),
                "{name} seed {}: {:?}",
                r.seed,
                r.failures[0]
            );
            assert_eq!(r.peak_in_use.len(), 2000);
            assert!(r.final_reserved() <= r.capacity);
        }
    }
}

/// The wall's candidates are the control arm with `[workload]` switches: everything above
/// that table is `small.toml`'s, byte for byte, so a refit of the control reaches them too.
#[test]
fn the_walls_candidates_are_the_control_with_one_switch() {
    let small = std::fs::read_to_string(recipes_dir().join("small.toml")).unwrap();
    let body = small.split_once("\n\n").unwrap().1;
    let dir = recipes_dir().join("../wall");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let (above, _) = text
            .split_once("\n[workload]\n")
            .expect("a [workload] table");
        assert!(
            above.trim_end().ends_with(body.trim_end()),
            "{}: not small.toml above [workload]",
            path.display()
        );
        let r = load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !r.workload.is_fixed(r.seq_len),
            "{}: switches nothing",
            path.display()
        );
        n += 1;
    }
    assert!(n >= 4, "found {n} candidates");
}
