//! Configuration files, mutated from the book's own (`repro/graphrace/*.toml`): each parses to a
//! configuration that captures and checks, or is refused with its file, line and reason — never
//! a panic or a hang. `FUZZ_SECONDS` / `FUZZ_CASES` set the budget (see `snapshots::fuzz`).

use graphrace::driver::{self, DumpError, GraphDump};
use graphrace::{Captured, Config};
use snapshots::fuzz::{self, Budget, Verdict};
use std::path::Path;

#[test]
fn fuzz_configs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/graphrace");
    let seeds = fuzz::seeds_in(&dir, "toml");
    let tally = fuzz::run(
        "graphrace-configs",
        &seeds,
        Budget::from_env(500),
        |bytes| {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return Verdict::Refused;
            };
            match Config::parse("fuzz.toml", text) {
                Ok(config) => {
                    let captured = Captured::new(&config, 4).expect("a parsed config captures");
                    captured.check();
                    Verdict::Accepted
                }
                Err(e) => {
                    assert_eq!(e.origin, "fuzz.toml");
                    assert!(
                        e.line >= 1 && e.line <= text.lines().count().max(1) + 1,
                        "{e}"
                    );
                    assert!(!e.reason.is_empty() && e.reason.len() < 1000, "{e}");
                    Verdict::Refused
                }
            }
        },
    );
    tally.assert_no_panics();
}

/// The graph dumped on the H200, mutated: each mutant is refused with its file (and, for
/// syntax, a line inside it) or parses to graphs the check runs on without a panic, and every
/// witness it gives keeps every edge of its graph.
#[test]
fn fuzz_graph_dumps() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/results/graphrace-graph-h200.json");
    let seeds = vec![(file.display().to_string(), std::fs::read(&file).unwrap())];
    let tally = fuzz::run("graphrace-dumps", &seeds, Budget::from_env(300), |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Verdict::Refused;
        };
        match GraphDump::parse("fuzz.json", text) {
            Ok(dump) => {
                for g in &dump.graphs {
                    for w in driver::check(g) {
                        assert!(driver::keeps_every_edge(g, &w.schedule), "{w}");
                    }
                }
                Verdict::Accepted
            }
            Err(DumpError::Syntax { origin, line, .. }) => {
                assert_eq!(origin, "fuzz.json");
                assert!(line >= 1 && line <= text.lines().count().max(1) + 1);
                Verdict::Refused
            }
            Err(e) => {
                assert!(e.to_string().starts_with("fuzz.json: "), "{e}");
                Verdict::Refused
            }
        }
    });
    tally.assert_no_panics();
}
