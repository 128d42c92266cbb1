//! The wave's reports held to a golden file: every recipe in `repro/recipes/` × seeds 1..3 ×
//! 2000 steps, each [`RunReport`]'s results (death step, per-step peak in use, in use at the
//! phase boundaries, bytes reserved, pages, every failure) compared bit for bit with
//! `tests/fixtures/wave-golden.json`.
//!
//! The simulator skips and compresses work for speed (see `highwater::run`); this test is the
//! proof, on the whole wave, that none of it changes a result. It does not hold
//! `replayed_steps`, which says how much work was done, not what came out.
//!
//! Per-step arrays are stored run-length encoded (`[value, count]` pairs): most steps repeat
//! their predecessor's figures, so the file stays small and a change shows as a readable diff.
//!
//! Regenerate only on purpose (a recipe or a modelling change), never to make a speed-up pass:
//! `HIGHWATER_BLESS=1 cargo test -p highwater --test wave golden`.

use std::path::Path;

use highwater::{Recipe, RunReport, simulate};
use serde_json::{Value, json};

const SEEDS: std::ops::RangeInclusive<u64> = 1..=3;
const STEPS: u64 = 2000;

fn golden_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wave-golden.json")
}

/// `[value, count]` runs of equal consecutive values.
fn rle<T: Copy + PartialEq + Into<u64>>(v: &[T]) -> Value {
    let mut runs: Vec<(u64, u64)> = vec![];
    for &x in v {
        match runs.last_mut() {
            Some((last, n)) if *last == x.into() => *n += 1,
            _ => runs.push((x.into(), 1)),
        }
    }
    json!(runs)
}

/// What the golden file holds of a report: every result, not the work counters.
fn results(name: &str, r: &RunReport) -> Value {
    json!({
        "recipe": name,
        "seed": r.seed,
        "steps": r.steps,
        "died_at": r.died_at,
        "capacity": r.capacity,
        "late_steps": r.late_steps,
        "peak_in_use": rle(&r.peak_in_use),
        "in_use_after_forward": rle(&r.in_use_after_forward),
        "in_use_after_backward": rle(&r.in_use_after_backward),
        "reserved": rle(&r.reserved),
        "pages": rle(&r.pages),
        "failures": r.failures,
    })
}

fn wave() -> Value {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/recipes");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut runs = vec![];
    for name in &names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
        let recipe = Recipe::parse(name, &text).unwrap();
        for seed in SEEDS {
            runs.push(results(name, &simulate(&recipe, seed, STEPS)));
        }
    }
    Value::Array(runs)
}

#[test]
fn wave_reports_match_the_golden_file() {
    let got = wave();
    let path = golden_path();
    if std::env::var_os("HIGHWATER_BLESS").is_some() {
        let mut text = serde_json::to_string_pretty(&got).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (got, want) = (got.as_array().unwrap(), want.as_array().unwrap());
    assert_eq!(got.len(), want.len(), "number of runs");
    for (g, w) in got.iter().zip(want) {
        let run = format!("{} seed {}", w["recipe"], w["seed"]);
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(g),
            keys(w),
            "{run}: the golden file holds other fields than the test"
        );
        for (key, wv) in w.as_object().unwrap() {
            let gv = &g[key];
            if gv == wv {
                continue;
            }
            if let (Some(gs), Some(ws)) = (unrle(gv), unrle(wv)) {
                let step = gs.iter().zip(&ws).position(|(a, b)| a != b);
                let step = step.unwrap_or(gs.len().min(ws.len()));
                panic!(
                    "{run}: `{key}` differs first at step {}: got {:?}, golden {:?} ({} vs {} steps)",
                    step + 1,
                    gs.get(step),
                    ws.get(step),
                    gs.len(),
                    ws.len()
                );
            }
            panic!("{run}: `{key}` differs: got {gv}, golden {wv}");
        }
    }
}

/// The values of a run-length encoded array, if `v` is one.
fn unrle(v: &Value) -> Option<Vec<u64>> {
    let mut out = vec![];
    for run in v.as_array()? {
        let (x, n) = (run.get(0)?.as_u64()?, run.get(1)?.as_u64()?);
        out.extend(std::iter::repeat_n(x, n as usize));
    }
    Some(out)
}
