//! Incident files mutated from the real ones (`repro/incident/*.toml`), under proptest: each
//! parses to an incident that no log contradicts, or is refused with its file, a line inside it
//! and a bounded reason; never a panic. Edits are of two kinds: raw ones that break the TOML
//! (deleted spans, stray tokens, repeated or swapped lines) and value swaps that keep it
//! well-formed, so that the checks behind the parser are reached too.

use std::cell::Cell;
use std::path::Path;
use std::sync::OnceLock;

use highwater::Incident;
use highwater::forensics::AttemptPhase;
use highwater::incident::IncidentError;
use highwater::limits::MAX_TENSOR_BYTES;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// 600 cases, a few seconds' worth; failures are printed with their input, not saved (the
/// inputs are the real files and the edits, which the message shows).
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 600,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The real incident files, read once.
fn real() -> &'static [(String, String)] {
    static FILES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/incident");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("repro/incident")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .map(|p| {
                let text = std::fs::read_to_string(&p).expect("an incident file");
                (p.display().to_string(), text)
            })
            .collect();
        files.sort();
        assert!(files.len() >= 7, "the wave's seven logs: {}", files.len());
        files
    })
}

/// Tokens that break TOML or reach a check: quotes, brackets, tables, huge and negative
/// numbers, the phase names, NUL, a lone carriage return, a multi-byte character.
const TOKENS: [&str; 20] = [
    "\"",
    "[",
    "]",
    "[[failures]]\n",
    "=",
    "\n",
    "0",
    "-1",
    "18446744073709551616",
    "#",
    "\"init\"",
    "\"run\"",
    "true",
    "{step}",
    "\0",
    "\r",
    "é",
    "after_step = 1\n",
    "count = 0\n",
    "bytes = 2\n",
];

/// Right-hand sides a key may be given: counts at and past the integer types' ends, step
/// lists of every length the files use and more, both booleans, the phases, strings.
const VALUES: [&str; 22] = [
    "0",
    "1",
    "2",
    "3",
    "100",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "-1",
    "1125899906842625",
    "[]",
    "[100]",
    "[300, 400]",
    "[1, 2, 3]",
    "true",
    "false",
    "\"init\"",
    "\"run\"",
    "\"\"",
    "\"step {step}\"",
    "\"no step\"",
    "1.5",
];

#[derive(Debug, Clone)]
enum Edit {
    /// Delete `len` bytes at `at` (both taken modulo the text, snapped to characters).
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        token: usize,
    },
    /// Give the `nth` `key = value` line (modulo their number) another value.
    Value {
        nth: usize,
        value: usize,
    },
    DuplicateLine {
        nth: usize,
    },
    SwapLines {
        a: usize,
        b: usize,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        1 => (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        1 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, token)| Edit::Insert { at, token }),
        3 => (any::<usize>(), 0..VALUES.len()).prop_map(|(nth, value)| Edit::Value { nth, value }),
        1 => any::<usize>().prop_map(|nth| Edit::DuplicateLine { nth }),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines { a, b }),
    ]
}

/// The char boundary at or before `at`, modulo the text.
fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    match *edit {
        Edit::Delete { at, len } => {
            let from = boundary(text, at);
            let to = boundary(text, (from + len).min(text.len()));
            return format!("{}{}", &text[..from], &text[to..]);
        }
        Edit::Insert { at, token } => {
            let at = boundary(text, at);
            return format!("{}{}{}", &text[..at], TOKENS[token], &text[at..]);
        }
        Edit::Value { nth, value } => {
            let keyed: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].contains(" = "))
                .collect();
            if let Some(&i) = keyed.get(nth % keyed.len().max(1)) {
                let key = lines[i].split(" = ").next().unwrap_or_default().to_string();
                lines[i] = format!("{key} = {}", VALUES[value]);
            }
        }
        Edit::DuplicateLine { nth } if !lines.is_empty() => {
            let i = nth % lines.len();
            lines.insert(i, lines[i].clone());
        }
        Edit::SwapLines { a, b } if !lines.is_empty() => {
            let n = lines.len();
            lines.swap(a % n, b % n);
        }
        _ => {}
    }
    lines.join("\n") + "\n"
}

/// What an accepted incident must be: something a log could say.
fn assert_possible(i: &Incident) {
    let deaths = i.died_at.len() as u64;
    let attempts = u64::from(i.attempts);
    assert!(attempts >= 1 && deaths <= attempts, "{i:?}");
    assert!(!(i.completed && i.truncated), "{i:?}");
    if i.completed {
        assert_eq!(deaths, attempts - 1, "{i:?}");
    } else if !i.truncated {
        assert_eq!(deaths, attempts, "{i:?}");
    }
    if let Some(death) = &i.death {
        assert!(deaths > 0 && death.contains("{step}"), "{i:?}");
    }
    for (n, f) in i.failures.iter().enumerate() {
        assert!(f.count >= 1, "{i:?}");
        assert!(
            f.bytes.is_none_or(|b| b >= 1 && MAX_TENSOR_BYTES.allows(b)),
            "{i:?}"
        );
        assert!(
            f.phase == AttemptPhase::Run || f.after_step.is_none(),
            "{i:?}"
        );
        let again = i.failures[..n]
            .iter()
            .any(|g| g.phase == f.phase && g.bytes == f.bytes);
        assert!(!again, "a group repeated: {i:?}");
    }
    assert!(
        !i.log.trim().is_empty() && !i.arm.trim().is_empty(),
        "{i:?}"
    );
}

/// A refusal names the file, a line inside it and a reason of bounded length.
fn assert_clear(e: &IncidentError, text: &str) {
    let shown = e.to_string();
    assert!(shown.starts_with("fuzz.toml:"), "{shown}");
    assert!(shown.len() < 1_000, "{} bytes: {shown:.200}", shown.len());
    let lines = text.lines().count().max(1) + 1;
    assert!(
        (1..=lines).contains(&e.line()),
        "line {} of {lines}: {shown}",
        e.line()
    );
}

#[test]
fn every_real_incident_parses() {
    for (path, text) in real() {
        let i = Incident::parse(path, text).unwrap_or_else(|e| panic!("{e}"));
        assert_possible(&i);
    }
}

/// Every mutated file parses to something possible or is refused clearly; over the run, some
/// are accepted, some refused by the TOML parser and some by the checks behind it, so that each
/// path is exercised.
#[test]
fn mutated_incidents_parse_or_are_refused_clearly() {
    // `TestRunner::run` takes a `Fn`: the tallies are cells.
    let (accepted, syntax, invalid) = (Cell::new(0), Cell::new(0), Cell::new(0));
    let mut runner = TestRunner::new(config());
    let cases = (any::<usize>(), prop::collection::vec(edit(), 1..4));
    runner
        .run(&cases, |(file, edits)| {
            let (_, text) = &real()[file % real().len()];
            let mutated = edits.iter().fold(text.clone(), |t, e| apply(&t, e));
            match Incident::parse("fuzz.toml", &mutated) {
                Ok(i) => {
                    assert_possible(&i);
                    accepted.set(accepted.get() + 1);
                }
                Err(e) => {
                    assert_clear(&e, &mutated);
                    match e {
                        IncidentError::Syntax { .. } => syntax.set(syntax.get() + 1),
                        IncidentError::Invalid { .. } => invalid.set(invalid.get() + 1),
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    let (accepted, syntax, invalid) = (accepted.get(), syntax.get(), invalid.get());
    assert!(
        accepted > 0 && syntax > 0 && invalid > 0,
        "accepted {accepted}, syntax errors {syntax}, refused by a check {invalid}"
    );
}

proptest! {
    #![proptest_config(config())]

    /// A value swap that keeps the file well-formed is either accepted or refused by a check
    /// at the edited key's own line, or by one of the outcome's checks.
    #[test]
    fn a_swapped_value_is_blamed_at_its_line(
        file in any::<usize>(),
        nth in any::<usize>(),
        value in 0..VALUES.len(),
    ) {
        let (_, text) = &real()[file % real().len()];
        let mutated = apply(text, &Edit::Value { nth, value });
        let refused = Incident::parse("fuzz.toml", &mutated);
        if let Err(IncidentError::Invalid { line, field, .. }) = refused {
            let edited = edited_line(text, &mutated);
            prop_assert!(blamed_rightly(field, line, edited, &mutated), "{field} at {line}");
        }
    }
}

/// The 1-based line where `mutated` first differs from `text`.
fn edited_line(text: &str, mutated: &str) -> Option<usize> {
    let differs = mutated.lines().zip(text.lines()).position(|(a, b)| a != b);
    differs.map(|i| i + 1)
}

/// The outcome's checks blame one of the keys that decide it; a phase turned `init` is blamed
/// at its group's `after_step`; every other check, at the edited line.
fn blamed_rightly(field: &str, line: usize, edited: Option<usize>, mutated: &str) -> bool {
    let outcome = ["attempts", "died_at", "completed", "truncated", "death"].contains(&field);
    let edited_phase = edited
        .and_then(|l| mutated.lines().nth(l - 1))
        .is_some_and(|t| t.starts_with("phase"));
    outcome || (field == "failures.after_step" && edited_phase) || Some(line) == edited
}
