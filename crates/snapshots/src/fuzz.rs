//! A mutation fuzzer for the crates' parsers, run from their integration tests.
//!
//! It starts from the project's real inputs (recipes, configs, logs, chapters, cache entries),
//! applies a few random edits to one of them (bit flips, deleted or repeated spans, tokens that
//! break parsers: fences, quotes, huge and non-finite numbers, NUL, lone carriage returns) and
//! hands the bytes to a check that must end in a result or a clear error. A panic is caught and
//! counted with the input that caused it (saved under `target/fuzz/`); a case that runs past
//! [`HANG`] aborts the run with its input saved, since it cannot be stopped from outside.
//!
//! Budget: `FUZZ_SECONDS=600` runs each fuzz test for that long; otherwise `FUZZ_CASES`
//! (default: the test's own, a few seconds' worth) cases. Cases are numbered and seeded by their
//! number, so a run is reproducible and a reported case can be replayed with `FUZZ_FROM=N`.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// Seeded by the case number, the same on every machine.
use basics::SplitMix64;

/// Longest a single case may take before the run is called hung.
pub const HANG: Duration = Duration::from_secs(20);

/// What a check says about one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Parsed (and, where the check goes on, ran) to a result.
    Accepted,
    /// Refused with an error the check found clear.
    Refused,
}

/// How long a fuzz test runs.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// This many mutated cases (after the seeds themselves).
    Cases(u64),
    /// As many cases as fit in this long.
    Time(Duration),
}

impl Budget {
    /// `FUZZ_SECONDS`, else `FUZZ_CASES`, else `default_cases`.
    pub fn from_env(default_cases: u64) -> Budget {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        match (var("FUZZ_SECONDS"), var("FUZZ_CASES")) {
            (Some(s), _) => Budget::Time(Duration::from_secs(s)),
            (None, Some(n)) => Budget::Cases(n),
            (None, None) => Budget::Cases(default_cases),
        }
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Tally {
    /// Inputs checked, the seeds included.
    pub cases: u64,
    /// Of those, [`Verdict::Accepted`].
    pub accepted: u64,
    /// Of those, [`Verdict::Refused`].
    pub refused: u64,
    /// `case N (from SEED): message`, with the input saved beside.
    pub panics: Vec<String>,
    /// The longest one case took: a slow case is a hang in the making.
    pub slowest: Duration,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cases: {} accepted, {} refused with an error, {} panics; no abort or hang \
             (either ends the run before this line) (slowest case {:.2} s)",
            self.cases,
            self.accepted,
            self.refused,
            self.panics.len(),
            self.slowest.as_secs_f64()
        )
    }
}

impl Tally {
    /// Fails the test with every panic found, and the input saved for each.
    pub fn assert_no_panics(&self) {
        assert!(self.panics.is_empty(), "{:#?}", self.panics);
    }
}

/// Seeds from disk: every file under `dir` (folders included) whose name ends in `.EXT`, named
/// by path, in path order.
pub fn seeds_in(dir: &Path, ext: &str) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                let bytes = std::fs::read(&path).unwrap();
                found.push((path.display().to_string(), bytes));
            }
        }
    }
    found.sort();
    found
}

/// Fuzzes `check` with mutations of `seeds` (name, bytes) and returns the tally; the caller
/// asserts on it (`tally.panics` empty). The seeds themselves are checked first, unmutated.
pub fn run(
    name: &str,
    seeds: &[(String, Vec<u8>)],
    budget: Budget,
    check: impl Fn(&[u8]) -> Verdict,
) -> Tally {
    assert!(!seeds.is_empty(), "{name}: no seed inputs");
    let first: u64 = std::env::var("FUZZ_FROM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let started = Instant::now();
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let watchdog = Watchdog::start(name, current.clone());
    let mut tally = Tally::default();
    for case in first.. {
        let more = match budget {
            Budget::Cases(n) => case < first + n + seeds.len() as u64,
            Budget::Time(t) => started.elapsed() < t,
        };
        if !more {
            break;
        }
        let (seed_name, input) = input_for(case, seeds);
        watchdog.arm(case, &input);
        let at = Instant::now();
        let verdict = panic::catch_unwind(AssertUnwindSafe(|| check(&input)));
        let took = at.elapsed();
        current.store(u64::MAX, Ordering::SeqCst);
        tally.cases += 1;
        tally.slowest = tally.slowest.max(took);
        match verdict {
            Ok(Verdict::Accepted) => tally.accepted += 1,
            Ok(Verdict::Refused) => tally.refused += 1,
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let saved = save(name, case, &input);
                tally.panics.push(format!(
                    "case {case} (from {seed_name}, saved at {}): {msg}",
                    saved.display()
                ));
            }
        }
    }
    eprintln!("fuzz {name}: {tally}");
    tally
}

/// Case `n`'s input: the seeds as they are first, then a seed with 1–8 random edits.
fn input_for(case: u64, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
    let count = seeds.len() as u64;
    if case < count {
        let (name, bytes) = &seeds[case as usize];
        return (name.clone(), bytes.clone());
    }
    let mut rng = SplitMix64::new(case);
    let (name, seed) = &seeds[rng.below(count) as usize];
    let mut bytes = seed.clone();
    for _ in 0..=rng.below(8) {
        mutate(&mut bytes, &mut rng);
    }
    (name.clone(), bytes)
}

/// Bytes that break parsers when they land in the wrong place.
const TOKENS: &[&str] = &[
    "\n",
    "\n\n",
    "\r",
    "\r\n",
    "\0",
    " ",
    "\t",
    "#",
    "=",
    "\"",
    "'",
    "\\",
    "[",
    "]",
    "[[",
    "{",
    "}",
    ",",
    ":",
    ".",
    "-",
    "0",
    "1",
    "-1",
    "00",
    "1e308",
    "-1e308",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "NaN",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "1000000000000",
    "true",
    "false",
    "é",
    "🦀",
    "\u{fffd}",
    "```",
    "~~~",
    "```cell\n",
    "\n```\n",
    "//| ",
    "//| timeout: 0\n",
    "> ",
    "- ",
    "  ",
    "<!--",
    "-->",
    "<pre>",
    "</div>",
    "<script>",
    "@fig-",
    "@tbl-",
    "&",
    "\u{2028}",
];

fn mutate(bytes: &mut Vec<u8>, rng: &mut SplitMix64) {
    let len = bytes.len() as u64;
    let at = |rng: &mut SplitMix64| rng.below(len + 1) as usize;
    match rng.below(7) {
        0 if len > 0 => {
            let i = rng.below(len) as usize;
            bytes[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = at(rng);
            let token = TOKENS[rng.below(TOKENS.len() as u64) as usize];
            bytes.splice(i..i, token.bytes());
        }
        2 if len > 0 => {
            let i = rng.below(len) as usize;
            let n = (rng.below(64) as usize + 1).min(bytes.len() - i);
            bytes.drain(i..i + n);
        }
        3 if len > 0 => {
            // A span repeated: a section, a key or a line twice.
            let i = rng.below(len) as usize;
            let n = (rng.below(256) as usize + 1).min(bytes.len() - i);
            let span: Vec<u8> = bytes[i..i + n].to_vec();
            let to = at(rng);
            bytes.splice(to..to, span);
        }
        4 => {
            // A number swapped for an extreme one.
            let digits: Vec<usize> = (0..bytes.len())
                .filter(|&i| bytes[i].is_ascii_digit())
                .collect();
            if let Some(&i) = digits.get(rng.below(digits.len() as u64 + 1) as usize) {
                let end = (i..bytes.len())
                    .find(|&j| !bytes[j].is_ascii_digit())
                    .unwrap_or(bytes.len());
                let token = [
                    "0",
                    "18446744073709551615",
                    "4294967296",
                    "1000000000000",
                    "1e308",
                    "nan",
                    "-1",
                ][rng.below(7) as usize];
                bytes.splice(i..end, token.bytes());
            }
        }
        5 if len > 0 => bytes.truncate(rng.below(len) as usize),
        _ => {
            let i = at(rng);
            let n = rng.below(8) as usize + 1;
            let noise: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
            bytes.splice(i..i, noise);
        }
    }
}

/// Where a failing input is kept for replay.
fn save(name: &str, case: u64, input: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{name}-{case}.bin"));
    let _ = std::fs::write(&path, input);
    path
}

/// Aborts the process when a case runs past [`HANG`], after saving its input: a hang cannot be
/// unwound, and a test that never ends is worse than one that fails.
struct Watchdog {
    current: Arc<AtomicU64>,
    input: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Watchdog {
    fn start(name: &str, current: Arc<AtomicU64>) -> Watchdog {
        let input = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (watched, kept, name_) = (current.clone(), input.clone(), name.to_string());
        std::thread::spawn(move || {
            let mut seen = (u64::MAX, Instant::now());
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let case = watched.load(Ordering::SeqCst);
                if case != seen.0 {
                    seen = (case, Instant::now());
                } else if case != u64::MAX && seen.1.elapsed() > HANG {
                    let bytes = kept.lock().map(|b| b.clone()).unwrap_or_default();
                    let saved = save(&name_, case, &bytes);
                    eprintln!(
                        "fuzz {name_}: case {case} ran past {} s: a hang (input saved at {})",
                        HANG.as_secs(),
                        saved.display()
                    );
                    std::process::abort();
                }
                if Arc::strong_count(&watched) == 1 {
                    return;
                }
            }
        });
        Watchdog { current, input }
    }

    fn arm(&self, case: u64, input: &[u8]) {
        if let Ok(mut kept) = self.input.lock() {
            kept.clear();
            kept.extend_from_slice(input);
        }
        self.current.store(case, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_are_counted_with_their_input_and_cases_are_reproducible() {
        let seeds = vec![("one".to_string(), b"count = 3\n".to_vec())];
        let check = |b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            if text.contains("nan") {
                panic!("boom");
            }
            if text.starts_with("count = ") {
                Verdict::Accepted
            } else {
                Verdict::Refused
            }
        };
        let tally = run("self-test", &seeds, Budget::Cases(400), check);
        assert_eq!(tally.cases, 401);
        assert_eq!(
            tally.accepted + tally.refused + tally.panics.len() as u64,
            401
        );
        assert!(!tally.panics.is_empty(), "some mutation inserts nan");
        assert!(tally.panics[0].contains("boom"));
        assert_eq!(input_for(77, &seeds), input_for(77, &seeds));
        assert_ne!(input_for(77, &seeds).1, input_for(78, &seeds).1);
    }
}
