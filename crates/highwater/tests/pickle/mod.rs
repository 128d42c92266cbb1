//! Memory snapshots read back by Python's own `pickle` and `pickletools` (python3, installed by
//! `.ci/run`): as built, in opcodes memory_viz's reader takes, and by memory_viz's rules.

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

/// A simulated trace that runs out of memory within its first steps (four times the small
/// recipe's batch), so that refusals are exported too.
fn traced_run() -> (highwater::RunReport, highwater::memtrace::MemTrace) {
    let small = highwater::Recipe::parse(
        "small.toml",
        include_str!("../../../../repro/recipes/small.toml"),
    )
    .unwrap();
    let recipe = small.with_batch(32).unwrap();
    let (report, trace) = highwater::simulate_traced(&recipe, 3, 1..=3).unwrap();
    assert!(!report.failures.is_empty(), "the bigger batch fails");
    (report, trace)
}

/// Python's `pickle` reads back the snapshot we built, value for value: serde-pickle writes
/// what the types hold (tuples become lists in JSON on both sides).
#[test]
fn python_reads_the_snapshot_back_as_built() {
    let (_, trace) = traced_run();
    let load = "import json, pickle, sys; print(json.dumps(pickle.load(open(sys.argv[1], 'rb'))))";
    let back = python(
        "as-built",
        &highwater::memviz::snapshot_pickle(&trace),
        &["-c", load],
    );
    let built = serde_json::to_value(highwater::memviz::snapshot(&trace)).unwrap();
    assert_eq!(back, built);
}

/// The pickle holds only opcodes memory_viz's own reader (`unpickle` in PyTorch's
/// `torch/utils/viz/MemoryViz.js`) handles, after a protocol it takes (2 to 4): a new
/// serde-pickle that wrote another would make the file unreadable there, though not in Python.
#[test]
fn the_pickle_uses_only_opcodes_memory_viz_reads() {
    let (_, trace) = traced_run();
    let ops = "import json, pickletools, sys; \
        ops = list(pickletools.genops(open(sys.argv[1], 'rb').read())); \
        print(json.dumps({'proto': ops[0][1], 'ops': sorted({o.name for o, _, _ in ops})}))";
    let seen = python(
        "opcodes",
        &highwater::memviz::snapshot_pickle(&trace),
        &["-c", ops],
    );
    assert_eq!(seen["proto"], 2);
    let reader = [
        "APPEND",
        "APPENDS",
        "BINFLOAT",
        "BINGET",
        "BININT",
        "BININT1",
        "BININT2",
        "BINPUT",
        "BINUNICODE",
        "DICT",
        "EMPTY_DICT",
        "EMPTY_LIST",
        "EMPTY_TUPLE",
        "FRAME",
        "LIST",
        "LONG1",
        "LONG_BINGET",
        "LONG_BINPUT",
        "MARK",
        "MEMOIZE",
        "NEWFALSE",
        "NEWTRUE",
        "NONE",
        "PROTO",
        "SETITEM",
        "SETITEMS",
        "SHORT_BINUNICODE",
        "STOP",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
    ];
    for op in seen["ops"].as_array().unwrap() {
        assert!(reader.contains(&op.as_str().unwrap()), "{op} in {seen}");
    }
}

/// A simulated trace exported as a memory snapshot passes memory_viz's rules
/// (`check_snapshot.py`), and says what the trace says: its events, its pages, its refusals.
#[test]
fn a_traced_run_exports_as_a_snapshot_memory_viz_takes() {
    use highwater::memtrace::Action;
    let (report, trace) = traced_run();
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
