//! Pickles read back by Python's own `pickle` (python3, installed by `.ci/run`): the smallest
//! memory snapshot PyTorch's memory_viz renders, with an address past 2³² and every kind of
//! value the writer has.

use highwater::pickle::{Value, to_pickle};
use std::process::Command;

/// Runs python3 with `args`, then the path of a file holding `pickle`; its stdout as JSON.
fn python(test: &str, pickle: &[u8], args: &[&str]) -> serde_json::Value {
    let file = tempfile::Builder::new()
        .prefix(&format!("highwater-pickle-{test}-"))
        .suffix(".pkl")
        .tempfile()
        .unwrap();
    std::fs::write(file.path(), pickle).unwrap();
    let out = Command::new("python3")
        .args(args)
        .arg(file.path())
        .output()
        .expect("python3 runs (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `value` pickled, loaded by python3 and printed back as JSON (tuples become lists).
fn through_python(test: &str, value: &Value) -> serde_json::Value {
    let load = "import json, pickle, sys; print(json.dumps(pickle.load(open(sys.argv[1], 'rb'))))";
    python(test, &to_pickle(value), &["-c", load])
}

#[test]
fn python_reads_a_memory_snapshot_back() {
    let (a, mib) = (0x7f00_0000_0000_u64, 1u64 << 20);
    let frame = |name: &str| {
        Value::List(vec![Value::dict([
            ("filename", Value::str("model/layer0")),
            ("line", Value::Int(0)),
            ("name", Value::str(name)),
        ])])
    };
    let block = |addr: u64, state: &str, frames: Value| {
        Value::dict([
            ("address", addr.into()),
            ("size", mib.into()),
            ("requested_size", mib.into()),
            ("state", Value::str(state)),
            ("frames", frames),
        ])
    };
    let event = |action: &str, addr: u64, t: i64, name: &str| {
        Value::dict([
            ("action", Value::str(action)),
            ("addr", addr.into()),
            ("size", mib.into()),
            ("stream", Value::Int(0)),
            ("time_us", Value::Int(t)),
            ("frames", frame(name)),
        ])
    };
    let snapshot = Value::dict([
        (
            "segments",
            Value::List(vec![Value::dict([
                ("device", Value::Int(0)),
                ("address", a.into()),
                ("total_size", (2 * mib).into()),
                ("allocated_size", mib.into()),
                ("active_size", mib.into()),
                ("requested_size", mib.into()),
                ("stream", Value::Int(0)),
                ("segment_type", Value::str("small")),
                (
                    "segment_pool_id",
                    Value::Tuple(vec![Value::Int(0), Value::Int(0)]),
                ),
                ("is_expandable", false.into()),
                ("frames", Value::List(vec![])),
                (
                    "blocks",
                    Value::List(vec![
                        block(a, "inactive", Value::List(vec![])),
                        block(
                            a + mib,
                            "active_allocated",
                            frame("gelu -> h1 [2048x256 f16]"),
                        ),
                    ]),
                ),
            ])]),
        ),
        (
            "device_traces",
            Value::List(vec![Value::List(vec![
                event("alloc", a, 1_700_000_000_000_000, "matmul -> h0"),
                event("alloc", a + mib, 1_700_000_000_000_010, "gelu -> h1"),
                event("free_requested", a, 1_700_000_000_000_020, "matmul -> h0"),
                event("free_completed", a, 1_700_000_000_000_020, "matmul -> h0"),
            ])]),
        ),
        ("note", Value::None),
        ("ratio", Value::Float(0.25)),
        ("negative", Value::Int(-70_000)),
        ("unicode", Value::str("µs → ✓")),
    ]);
    let back = through_python("snapshot", &snapshot);
    let seg = &back["segments"][0];
    assert_eq!(seg["address"], a);
    assert_eq!(seg["segment_pool_id"], serde_json::json!([0, 0]));
    assert_eq!(seg["is_expandable"], false);
    assert_eq!(seg["blocks"][1]["state"], "active_allocated");
    assert_eq!(
        seg["blocks"][1]["frames"][0]["name"],
        "gelu -> h1 [2048x256 f16]"
    );
    let trace = back["device_traces"][0].as_array().unwrap();
    let actions: Vec<&str> = trace
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["alloc", "alloc", "free_requested", "free_completed"]
    );
    assert_eq!(trace[3]["time_us"], 1_700_000_000_000_020_i64);
    assert_eq!(back["note"], serde_json::Value::Null);
    assert_eq!(back["ratio"], 0.25);
    assert_eq!(back["negative"], -70_000);
    assert_eq!(back["unicode"], "µs → ✓");
}

#[test]
fn every_int_size_reads_back() {
    let ints: Vec<i64> = vec![
        0,
        255,
        256,
        65_535,
        65_536,
        -1,
        i64::from(i32::MIN),
        i64::from(i32::MAX) + 1,
        -(1 << 40),
        (1 << 53) - 1,
        i64::MAX,
        i64::MIN,
    ];
    let back = through_python(
        "ints",
        &Value::List(ints.iter().map(|&n| Value::Int(n)).collect()),
    );
    let got: Vec<i64> = (back.as_array().unwrap().iter())
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(got, ints);
}

/// A simulated trace exported as a memory snapshot passes memory_viz's rules
/// (`check_snapshot.py`), and says what the trace says: its events, its pages, its refusals.
#[test]
fn a_traced_run_exports_as_a_snapshot_memory_viz_takes() {
    use highwater::memtrace::Action;
    let small = highwater::Recipe::parse(
        "small.toml",
        include_str!("../../../../repro/recipes/small.toml"),
    )
    .unwrap();
    // Four times the batch: the card runs out within the first steps, so refusals are exported too.
    let recipe = small.with_batch(32).unwrap();
    let (report, trace) = highwater::simulate_traced(&recipe, 3, 1..=3).unwrap();
    assert!(!report.failures.is_empty(), "the bigger batch fails");
    let checker = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/pickle/check_snapshot.py"
    );
    let snapshot = highwater::memviz::snapshot_pickle(&trace);
    let summary = python("traced-run", &snapshot, &[checker]);
    let count = |a: Action| trace.events.iter().filter(|e| e.action == a).count() as u64;
    let actions = &summary["actions"];
    assert_eq!(
        actions["alloc"],
        count(Action::Live) + count(Action::Reserve)
    );
    assert_eq!(actions["free_completed"], count(Action::Free));
    assert_eq!(
        actions["segment_alloc"],
        count(Action::PageHeld) + count(Action::PageAlloc)
    );
    assert_eq!(actions["oom"], report.failures.len() as u64);
    assert_eq!(summary["segments"], *report.pages.last().unwrap() as u64);
    let frame = &summary["first_frame"];
    assert!(
        frame["name"]
            .as_str()
            .unwrap()
            .contains("in step 3 optimizer"),
        "{frame}"
    );
}
