//! The simulator's inputs, mutated from the project's own: recipes (`repro/recipes`, the test
//! fixtures) and the decoder model (`repro/models`). Each parses to something that runs — a
//! recipe simulates a step, a decoder prices its tensors — or is refused with its file, line
//! and a bounded reason; never a panic, an abort or a hang. `FUZZ_SECONDS` / `FUZZ_CASES` set
//! the budget (see `snapshots::fuzz`).

use highwater::decoder::Decoder;
use highwater::{Recipe, RecipeError, simulate};
use snapshots::fuzz::{self, Budget, Verdict};
use std::path::Path;

fn files(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    seeds.sort();
    seeds
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
    let mut seeds = files("../../repro/recipes");
    seeds.extend(files("tests/fixtures"));
    let tally = fuzz::run("recipes", &seeds, Budget::from_env(300), |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Verdict::Refused;
        };
        match Recipe::parse("fuzz.toml", text) {
            Ok(recipe) => {
                let seed = recipe.seeds.first().copied().unwrap_or(1);
                let run = simulate(&recipe, seed, 1);
                assert!(run.peak_in_use.len() <= 1, "one step asked");
                Verdict::Accepted
            }
            Err(e) => {
                assert_clear(&e, text);
                Verdict::Refused
            }
        }
    });
    assert!(tally.panics.is_empty(), "{:#?}", tally.panics);
}

#[test]
fn fuzz_decoder_models() {
    let seeds = files("../../repro/models");
    let tally = fuzz::run("decoders", &seeds, Budget::from_env(300), |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Verdict::Refused;
        };
        match Decoder::parse("fuzz.toml", text) {
            Ok(_) => Verdict::Accepted,
            Err(e) => {
                assert_clear(&e, text);
                Verdict::Refused
            }
        }
    });
    assert!(tally.panics.is_empty(), "{:#?}", tally.panics);
}

/// Trainer logs, mutated from the fixtures (`tests/fixtures/logs`): read whole or streamed,
/// they give the same forensics and an incident table, or a clear error; never a panic.
#[test]
fn fuzz_trainer_logs() {
    use highwater::forensics::{IncidentTable, parse_log, parse_reader};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    seeds.sort();
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
    assert!(tally.panics.is_empty(), "{:#?}", tally.panics);
}
