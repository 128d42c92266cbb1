//! The simulator's inputs, mutated from the project's own: recipes (`repro/recipes`, the test
//! fixtures) and the network models (`repro/models`). Each parses to something that runs — a
//! recipe simulates a step, a network prices its tensors — or is refused with its file, line
//! and a bounded reason (a network's naming the page that lists its format); never a panic, an
//! abort or a hang. `FUZZ_SECONDS` / `FUZZ_CASES` set the budget (see `snapshots::fuzz`).

use highwater::network::{FORMAT_PAGE, Network};
use highwater::{Recipe, RecipeError, simulate};
use snapshots::fuzz::{self, Budget, Verdict};
use std::path::Path;

fn files(dir: &str, ext: &str) -> Vec<(String, Vec<u8>)> {
    fuzz::seeds_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), ext)
}

/// A TOML input through `parse`: what `accepted` makes of a parsed value, or `Refused` when
/// the error is clear (see [`assert_clear`]).
fn check_toml<T>(
    bytes: &[u8],
    parse: impl Fn(&str, &str) -> Result<T, RecipeError>,
    accepted: impl FnOnce(T),
) -> Verdict {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Verdict::Refused;
    };
    match parse("fuzz.toml", text) {
        Ok(value) => {
            accepted(value);
            Verdict::Accepted
        }
        Err(e) => {
            assert_clear(&e, text);
            Verdict::Refused
        }
    }
}

/// An error names the file, a line inside it and a reason of bounded length.
fn assert_clear(e: &RecipeError, text: &str) {
    let shown = e.to_string();
    assert!(shown.starts_with("fuzz.toml:"), "{shown}");
    assert!(
        shown.len() < 2_000,
        "{} bytes: {}",
        shown.len(),
        &shown[..200]
    );
    let lines = text.lines().count().max(1) + 1;
    let line = e.line();
    assert!(
        line >= 1 && line <= lines,
        "line {line} of {lines}: {shown}"
    );
}

#[test]
fn fuzz_recipes() {
    let mut seeds = files("../../repro/recipes", "toml");
    seeds.extend(files("tests/fixtures", "toml"));
    let tally = fuzz::run("recipes", &seeds, Budget::from_env(300), |bytes| {
        check_toml(bytes, Recipe::parse, |recipe| {
            let seed = recipe.seeds.first().copied().unwrap_or(1);
            let run = simulate(&recipe, seed, 1);
            assert!(run.peak_in_use.len() <= 1, "one step asked");
        })
    });
    tally.assert_no_panics();
}

#[test]
fn fuzz_network_models() {
    let seeds = files("../../repro/models", "toml");
    // Every refusal also names the page that lists the format.
    let parse = |origin: &str, text: &str| {
        let parsed = Network::parse(origin, text);
        if let Err(e) = &parsed {
            assert!(e.to_string().contains(FORMAT_PAGE), "{e}");
        }
        parsed
    };
    let tally = fuzz::run("networks", &seeds, Budget::from_env(300), |bytes| {
        check_toml(bytes, parse, |n| {
            // What `with_batch` accepts is priced within the limits: no overflow downstream.
            let _ = n.arch.params();
            let _ = n.with_batch(n.batch.saturating_mul(2));
        })
    });
    tally.assert_no_panics();
}

/// Trainer logs, mutated from the fixtures (`tests/fixtures/logs`): read whole or streamed,
/// they give the same forensics and an incident table, or a clear error; never a panic.
#[test]
fn fuzz_trainer_logs() {
    use highwater::forensics::{IncidentTable, parse_log, parse_reader};
    let seeds = files("tests/fixtures/logs", "log");
    let tally = fuzz::run("logs", &seeds, Budget::from_env(300), |bytes| {
        let whole = parse_log("fuzz.log", &String::from_utf8_lossy(bytes));
        match parse_reader("fuzz.log", bytes) {
            Ok(streamed) => {
                assert_eq!(
                    serde_json::to_string(&streamed).unwrap(),
                    serde_json::to_string(&whole).unwrap(),
                    "streamed and whole reads differ"
                );
                IncidentTable::new(&[streamed]).to_string();
                Verdict::Accepted
            }
            Err(e) => {
                assert!(e.to_string().starts_with("fuzz.log"), "{e}");
                Verdict::Refused
            }
        }
    });
    tally.assert_no_panics();
}
