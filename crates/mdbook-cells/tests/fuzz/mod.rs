//! The engine's inputs, mutated: chapters (the project's own book and the fixtures), cache
//! entries, freezes and `book.toml` tables. Each must end in a result or a clear error, never a
//! panic or a hang; rendered cells must keep their HTML whole. `FUZZ_SECONDS` / `FUZZ_CASES`
//! set the budget (see `snapshots::fuzz`).

use mdbook_cells::cache::Cache;
use mdbook_cells::config::Config;
use mdbook_cells::freeze;
use mdbook_cells::outcome::{FailureKind, Fault, Outcome, OutputKind, Stored};
use mdbook_cells::parse::{self, Segment};
use mdbook_cells::render;
use mdbook_cells::types::{Label, Labels, Shown};
use snapshots::fuzz::{self, Budget, Verdict};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A rendered cell's own HTML (after its code) holds no blank line: one would end the
/// raw-HTML block and swallow the rest of the chapter.
fn assert_whole(html: &str) {
    // After the opening `<div>` and its deliberate blank line, and after the code if shown.
    let body = html.split_once(">\n\n").map_or(html, |(_, b)| b);
    let body = body.rsplit_once("```\n\n").map_or(body, |(_, b)| b);
    let body = body.trim_end();
    let body = body.strip_suffix("</div>").unwrap_or(body).trim_end();
    if body.is_empty() {
        return;
    }
    // Markdown ends a line at a carriage return too.
    let body = body.replace("\r\n", "\n").replace('\r', "\n");
    if let Some(blank) = body.split('\n').position(|l| l.trim().is_empty()) {
        let context: Vec<&str> = body
            .split('\n')
            .skip(blank.saturating_sub(2))
            .take(3)
            .collect();
        panic!("a blank line inside a cell's HTML, after {context:?}");
    }
}

#[test]
fn fuzz_chapters() {
    let mut seeds = fuzz::seeds_in(&repo().join("src"), "md");
    seeds.extend(fuzz::seeds_in(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
        "md",
    ));
    let labels = Labels::from([(
        "fig-peak".to_string(),
        Label {
            id: "fig-peak".into(),
            name: "Figure 1".into(),
            html_path: "a/b.html".into(),
        },
    )]);
    let tally = fuzz::run("chapters", &seeds, Budget::from_env(400), |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let chapter = parse::split(&text);
        let lines = text.split_inclusive('\n').count() + 1;
        let mut last = 0;
        for m in &chapter.misplaced {
            assert!(m.line >= 1 && m.line <= lines, "{m}");
        }
        for segment in &chapter.segments {
            match segment {
                Segment::Prose(prose) => {
                    render::references(prose, &labels, "a/c.html");
                }
                Segment::Cell(cell) => {
                    assert!(cell.fence_line > last && cell.fence_line <= lines);
                    assert!(cell.code_line > cell.fence_line && cell.last_code_line() <= lines);
                    last = cell.fence_line;
                    // Whatever a cell printed or failed with, its HTML stays whole.
                    let stored = Stored {
                        stdout: cell.code.clone(),
                        stderr: cell.code.clone(),
                        outcome: Outcome::Value {
                            kind: OutputKind::Text,
                            body: cell.code.clone(),
                        },
                    };
                    let failure = Shown::Failure {
                        fault: Fault::Ran(FailureKind::Panic),
                        message: cell.code.clone(),
                        stdout: cell.code.clone(),
                        expected: false,
                    };
                    let frozen = Shown::Frozen {
                        stored: stored.clone(),
                        badge: cell.code.clone(),
                        stale: true,
                    };
                    let note = Shown::Note(cell.code.clone());
                    for shown in [Shown::Output(stored), failure, frozen, note] {
                        for fold in [false, true] {
                            assert_whole(&render::cell(cell, &shown, None, fold, None));
                        }
                    }
                }
            }
        }
        let problems = chapter.misplaced.len()
            + chapter
                .segments
                .iter()
                .filter(|s| matches!(s, Segment::Cell(c) if !c.option_errors.is_empty()))
                .count();
        if problems == 0 {
            Verdict::Accepted
        } else {
            Verdict::Refused
        }
    });
    tally.assert_no_panics();
}

#[test]
fn fuzz_cache_and_freeze_entries() {
    let freeze = repo().join("repro/freeze/part-1/rerun/gpu-1.json");
    let real = std::fs::read(&freeze).unwrap();
    let frozen = freeze::read(&freeze).expect("the book's freeze");
    let mut seeds = vec![
        ("freeze".to_string(), real),
        (
            "cache entry".to_string(),
            serde_json::to_vec(&frozen.output).unwrap(),
        ),
    ];
    for kind in ["figure", "panic", "compile"] {
        let mut stored = frozen.output.clone();
        stored.outcome = Outcome::from_parts(kind, "body".into()).unwrap();
        seeds.push((
            format!("{kind} entry"),
            serde_json::to_vec(&stored).unwrap(),
        ));
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-entries");
    let _ = std::fs::remove_dir_all(&dir);
    let cache = Cache::open(&dir).unwrap();
    let path = dir.join("outputs/entry.json");
    let tally = fuzz::run("entries", &seeds, Budget::from_env(400), |bytes| {
        std::fs::write(&path, bytes).unwrap();
        let from_freeze = freeze::read(&path);
        if let Ok(f) = &from_freeze {
            assert!(!f.output.is_failure(), "{f:?}");
        }
        std::fs::write(&path, bytes).unwrap();
        let from_cache = cache.get("entry");
        // A kind this engine does not write cannot parse: the entry is refused and removed.
        if from_cache.is_none() {
            assert!(!path.exists(), "a refused entry is removed");
        }
        if from_cache.is_some() || from_freeze.is_ok() {
            Verdict::Accepted
        } else {
            Verdict::Refused
        }
    });
    tally.assert_no_panics();
}

#[test]
fn fuzz_book_configs() {
    let seeds = vec![
        (
            "book.toml".to_string(),
            std::fs::read(repo().join("book.toml")).unwrap(),
        ),
        (
            "basic/book.toml".to_string(),
            std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/basic/book.toml"),
            )
            .unwrap(),
        ),
    ];
    let tally = fuzz::run("configs", &seeds, Budget::from_env(400), |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Verdict::Refused;
        };
        let Ok(book) = toml::from_str::<toml::Table>(text) else {
            return Verdict::Refused;
        };
        let Some(cells) = book.get("preprocessor").and_then(|p| p.get("cells")) else {
            return Verdict::Refused;
        };
        let Ok(config) = cells.clone().try_into::<Config>() else {
            return Verdict::Refused;
        };
        match config.validate(Path::new("/book"), Path::new("src")) {
            Ok(()) => {
                assert!((1..=mdbook_cells::types::MAX_TIMEOUT_S).contains(&config.timeout));
                assert!(config.output_limit > 0);
                Verdict::Accepted
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                Verdict::Refused
            }
        }
    });
    tally.assert_no_panics();
}
