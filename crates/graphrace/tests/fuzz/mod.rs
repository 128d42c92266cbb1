//! Configuration files, mutated from the book's own (`repro/graphrace/*.toml`): each parses to a
//! configuration that captures and checks, or is refused with its file, line and reason — never
//! a panic or a hang. `FUZZ_SECONDS` / `FUZZ_CASES` set the budget (see `snapshots::fuzz`).

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
