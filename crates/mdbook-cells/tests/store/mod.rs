//! The output store: a fresh clone served from it without compiling, a refresh that writes it,
//! and a verifying build that holds it to fresh outputs (stale, differing, orphaned entries).

use super::*;
use mdbook_cells::StoreNote;
use mdbook_cells::store::StoreMode;

/// A chapter of five cells: plain, labelled, one that reads a file it does not declare (so its
/// output can change under an unchanged key), one like it marked `varies`, and one whose
/// compile error is its content.
const CHAPTER: &str = r#"# Stored

```cell
"forty-two".to_string()
```

```cell
//| id: tbl-sizes
//| caption: Sizes
Table::new(["shape", "bytes"]).row(["[2, 2]", "16"])
```

```cell
std::fs::read_to_string("undeclared.txt")?
```

```cell
//| varies: reads a file it does not declare, on purpose
std::fs::read_to_string("undeclared.txt")?.to_uppercase()
```

```cell
//| expect-fail
let n: u32 = "not a number";
```
"#;

/// A refresh that found nothing to write.
const UNCHANGED: StoreNote = StoreNote::Refreshed {
    written: 0,
    removed: 0,
};

/// One build of `chapter` in `root` with the store under `outputs/`, in `mode`, from an empty
/// cache (a fresh clone) unless `keep_cache`.
fn build(root: &Path, chapter: &str, mode: StoreMode, keep_cache: bool) -> (String, Report) {
    let cache = root.join("cache");
    if !keep_cache {
        let _ = std::fs::remove_dir_all(cache.join("outputs"));
    }
    let mut config = config(root, &cache);
    config.store_dir = Some("outputs".into());
    config.store_mode = Some(mode);
    let mut docs = vec![Document {
        source: "src/stored.md".into(),
        html_path: "stored.html".into(),
        number: Some("1.".into()),
        title: "Stored".into(),
        content: chapter.into(),
    }];
    let report = process(root, &config, &mut docs).unwrap();
    (docs.remove(0).content, report)
}

fn problems(report: &Report) -> Vec<String> {
    report.problems.iter().map(|p| p.to_string()).collect()
}

fn store_file(root: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(root.join("outputs/stored.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_refresh_writes_the_store_and_a_fresh_clone_is_served_from_it() {
    let book = scratch_book("store");
    let root = book.path();
    std::fs::write(root.join("undeclared.txt"), "first").unwrap();
    // Refresh: every cell runs once and the store holds each output, named and timed.
    let (page, report) = build(root, CHAPTER, StoreMode::Refresh, false);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        report.store,
        Some(StoreNote::Refreshed {
            written: 1,
            removed: 0
        })
    );
    let file = store_file(root);
    assert_eq!(file["made_by"], "MDBOOK_CELLS_STORE=refresh mdbook build");
    let names: Vec<&str> = (file["cells"].as_array().unwrap().iter())
        .map(|c| c["cell"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cell 1", "tbl-sizes", "cell 3", "cell 4", "cell 5"]);
    assert_eq!(file["cells"][4]["kind"], "compile");
    assert!(
        file["cells"][0]["computed"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    // A refresh that changes nothing writes nothing.
    let (_, report) = build(root, CHAPTER, StoreMode::Refresh, true);
    assert_eq!(report.store, Some(UNCHANGED));

    // A fresh clone: nothing compiled, nothing run, the same page.
    let (served, report) = build(root, CHAPTER, StoreMode::Serve, false);
    assert_eq!(
        (report.stored, report.ran, report.compiled),
        (5, 0, Compilation::Nothing),
        "{report}"
    );
    assert_eq!(served, page);
    assert_eq!(report.store, Some(StoreNote::Served { missing: 0 }));
    // Served once, the outputs are in this machine's cache: the store is not read again.
    let (_, report) = build(root, CHAPTER, StoreMode::Serve, true);
    assert_eq!((report.cached, report.stored), (5, 0));
    assert_eq!(report.store, Some(StoreNote::NotRead));
}

#[test]
fn verifying_holds_the_store_to_fresh_outputs_and_a_refresh_mends_it() {
    let book = scratch_book("store-verify");
    let root = book.path();
    std::fs::write(root.join("undeclared.txt"), "first").unwrap();
    let (_, report) = build(root, CHAPTER, StoreMode::Refresh, false);
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // Verify, all as stored: every cell reran, no problem.
    let (_, report) = build(root, CHAPTER, StoreMode::Verify, true);
    assert_eq!(
        (report.ran, report.cached, report.stored),
        (4, 0, 0),
        "{report}"
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Those reruns reproduced every output: a refresh after them has nothing to write (no
    // new dates or run times to commit).
    let (_, report) = build(root, CHAPTER, StoreMode::Refresh, true);
    assert_eq!(report.store, Some(UNCHANGED));

    // An output that changed under the same key is caught, unless its cell says it varies; a
    // stale entry (a key no cell has) is caught at its file; a cell whose entry is gone is
    // caught at its line.
    std::fs::write(root.join("undeclared.txt"), "second").unwrap();
    let mut file = store_file(root);
    let cells = file["cells"].as_array_mut().unwrap();
    cells[0]["key"] = "0123456789abcdef0123456789abcdef".into();
    std::fs::write(
        root.join("outputs/stored.json"),
        serde_json::to_string_pretty(&file).unwrap(),
    )
    .unwrap();
    let (page, report) = build(root, CHAPTER, StoreMode::Verify, true);
    let found = problems(&report);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("outputs/stored.json:0: cell failed: 1 stored output(s) no cell"));
    assert!(
        found[1].starts_with("src/stored.md:3: cell failed: the output store holds no output")
            && found[1].contains("MDBOOK_CELLS_STORE=refresh mdbook build"),
        "{}",
        found[1]
    );
    assert!(
        found[2].starts_with("src/stored.md:13: cell failed: this build's output differs")
            && found[2].contains("stored `first`, now `second`"),
        "{}",
        found[2]
    );
    // The page shows this build's outputs.
    assert!(page.contains("second"));

    // A refresh makes the store whole again, and only the changed file is written.
    let (_, report) = build(root, CHAPTER, StoreMode::Refresh, true);
    assert_eq!(
        report.store,
        Some(StoreNote::Refreshed {
            written: 1,
            removed: 0
        })
    );
    let (_, report) = build(root, CHAPTER, StoreMode::Verify, true);
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // A damaged store file is a problem at that file; its cells simply run.
    std::fs::write(root.join("outputs/stored.json"), "{\"cells\": [").unwrap();
    let (_, report) = build(root, CHAPTER, StoreMode::Serve, false);
    assert_eq!(report.ran, 4, "{report}");
    let found = problems(&report);
    assert!(
        found.len() == 1
            && found[0].contains("outputs/stored.json:0: cell failed: not a store file"),
        "{found:#?}"
    );
    assert_eq!(report.store, Some(StoreNote::Served { missing: 5 }));

    // A chapter gone from the book: its file goes with a refresh (a file that is not the
    // store's stays, a problem at its name, until someone moves it).
    let gone = serde_json::json!({
        "made_by": "MDBOOK_CELLS_STORE=refresh mdbook build",
        "chapter": "src/gone.md",
        "cells": []
    });
    std::fs::write(root.join("outputs/gone.json"), gone.to_string()).unwrap();
    std::fs::write(root.join("outputs/notes.json"), "{}").unwrap();
    let (_, report) = build(root, CHAPTER, StoreMode::Refresh, true);
    assert_eq!(
        report.store,
        Some(StoreNote::Refreshed {
            written: 1,
            removed: 1
        })
    );
    assert!(!root.join("outputs/gone.json").exists());
    assert!(root.join("outputs/notes.json").exists());
    assert!(problems(&report)[0].contains("outputs/notes.json:0: cell failed: not a store file"));
}

/// A cell that fails when verified (a timeout on a busy machine, a file gone) is one problem,
/// at its own line: its stored entry is not also reported stale.
#[test]
fn a_cell_that_fails_verifying_is_one_problem_not_also_a_stale_entry() {
    let book = scratch_book("store-verify-failed");
    let root = book.path();
    let chapter = "# Stored\n\n```cell\nstd::fs::read_to_string(\"undeclared.txt\")?\n```\n\n\
                   ```cell\n\"after\".to_string()\n```\n";
    std::fs::write(root.join("undeclared.txt"), "first").unwrap();
    let (_, report) = build(root, chapter, StoreMode::Refresh, false);
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    std::fs::remove_file(root.join("undeclared.txt")).unwrap();
    let (page, report) = build(root, chapter, StoreMode::Verify, true);
    let found = problems(&report);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("src/stored.md:3: cell failed:"),
        "{}",
        found[0]
    );
    assert!(page.contains("after"), "{page}");
}

/// A cell's timeout rests on the run that computed its stored output: five times that, when
/// it is longer than the cell's own.
#[test]
fn a_rerun_is_given_a_multiple_of_its_stored_run_time() {
    let book = scratch_book("store-timeout");
    let root = book.path();
    let chapter = "```cell\n//| timeout: 1\nstd::thread::sleep(std::time::Duration::from_millis(1800));\n\"slept\".to_string()\n```\n";
    // With no record, the cell's own second is all it gets.
    let (page, report) = build(root, chapter, StoreMode::Serve, false);
    assert!(page.contains("timed out"), "{page}");
    assert_eq!(report.problems.len(), 1, "{report}");
    // Its stored run took 1.9 s (under other inputs: the store names it by its place in the
    // chapter): the rerun is given 9.5 s.
    let entry = serde_json::json!({
        "made_by": "MDBOOK_CELLS_STORE=refresh mdbook build",
        "chapter": "src/stored.md",
        "cells": [{
            "cell": "cell 1", "key": "0123456789abcdef0123456789abcdef",
            "computed": "2026-12-04T00:00:00Z", "ran_ms": 1900,
            "stdout": "", "stderr": "", "kind": "text", "body": "slept"
        }]
    });
    std::fs::create_dir_all(root.join("outputs")).unwrap();
    std::fs::write(root.join("outputs/stored.json"), entry.to_string()).unwrap();
    let (page, report) = build(root, chapter, StoreMode::Serve, false);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(page.contains("slept"), "{page}");
}

/// A kept panic names its place in its cell, not the chapter's line: prose added above the
/// cell leaves its stored output current, and the page shows the line where the cell is now.
#[test]
fn prose_that_moves_a_panicking_cell_leaves_its_stored_output_current() {
    let book = scratch_book("store-panic");
    let root = book.path();
    let cell = "```cell\n//| expect-fail\nlet n = 0;\nassert!(n > 0, \"n is {n}\");\n```\n";
    let (page, report) = build(
        root,
        &format!("# Stored\n\n{cell}"),
        StoreMode::Refresh,
        false,
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(page.contains("n is 0 at src/stored.md:6"), "{page}");
    let kept = store_file(root)["cells"][0]["body"].clone();
    assert_eq!(kept, "n is 0 at src/stored.md:@cell+1");

    let moved = format!("# Stored\n\nTwo lines\nof prose.\n\n{cell}");
    let (page, report) = build(root, &moved, StoreMode::Serve, false);
    assert_eq!((report.ran, report.stored), (0, 1), "{report}");
    assert!(page.contains("n is 0 at src/stored.md:9"), "{page}");
    let (page, report) = build(root, &moved, StoreMode::Verify, true);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(page.contains("n is 0 at src/stored.md:9"), "{page}");
}
