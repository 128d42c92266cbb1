//! Build-time figures for this repository's book, printed (not asserted):
//!   (a) a rebuild with every cell cached, against the same pages built by mdbook without the
//!       engine (goal ≤ 1.15 ×). Two more lines place it: the same pages passed through a
//!       preprocessor that only copies them (what mdbook's protocol costs any preprocessor that
//!       returns these pages), and the bare sources with the preprocessor removed (which also
//!       leaves out rendering the outputs: over half the pages' bytes);
//!   (b) editing one cell, then rebuilding (median of 5; goal ≤ 0.6 s), for a cell of plain
//!       arithmetic and for one that runs burn;
//!   (c) a cold build that verifies the output store: every cell compiled (its dependencies from
//!       scratch) and run, in strict mode (every cell must succeed, pass rustfmt and clippy, and
//!       match its stored output): what CI's book step costs;
//!   (d) a fresh clone's first build: an empty cell cache, every output served from the
//!       committed store (the preprocessor already compiled: its own compile is timed on a
//!       fresh clone with `/usr/bin/time`, see the README).
//! (a), (b) and (d) time what a reader or writer waits for under `mdbook serve`: plain builds.
//!
//! `cargo bench -p mdbook-cells --bench book` (needs `mdbook` on PATH: README command 1).
//! The book is copied to a scratch directory so that `src/` is never touched. The preprocessor
//! runs exactly as `book.toml` configures it (`scripts/mdbook-cells` of this repository).

use mdbook_preprocessor::book::{Book, BookItem};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 5;

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = repo.canonicalize().expect("repository root");
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-book");
    // BENCH_REUSE_CACHE=1 keeps the last run's cell cache (the sources are copied afresh): (a)
    // and (b) in a minute instead of ten, with (c) not measured.
    let reuse = std::env::var("BENCH_REUSE_CACHE").is_ok_and(|v| v == "1");
    if !reuse {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let with_cells = scratch.join("with-cells");
    let without = scratch.join("without-cells");
    for dir in [&with_cells, &without] {
        for item in [
            "book.toml",
            "src",
            "crates",
            "repro",
            "assets",
            "Cargo.toml",
            "Cargo.lock",
            "rust-toolchain.toml",
        ] {
            copy(&repo.join(item), &dir.join(item));
        }
    }
    let manifest = std::fs::read_to_string(without.join("book.toml")).unwrap();
    std::fs::write(without.join("book.toml"), strip_cells(&manifest)).unwrap();
    let command = format!("sh {}", repo.join("scripts/mdbook-cells").display());

    println!("book: {}", repo.display());
    // (d) first, while the scratch book's cell cache is empty.
    let outputs = with_cells.join("target/mdbook-cells/outputs");
    let _ = std::fs::remove_dir_all(&outputs);
    let fresh = mdbook(&with_cells, Some(&command), PLAIN);
    println!(
        "(d) fresh clone, every output from the store: {:>8.2} s (goal: with the preprocessor's \
         own compile, ≤ 180 s)",
        secs(fresh)
    );
    if reuse {
        println!("(c) not measured: the cell cache was kept (BENCH_REUSE_CACHE=1)");
    } else {
        let verify = [
            ("MDBOOK_CELLS_STRICT", "1"),
            ("MDBOOK_CELLS_STORE", "verify"),
        ];
        let cold = mdbook(&with_cells, Some(&command), &verify);
        println!(
            "(c) cold build verifying the store, strict:   {:>8.2} s",
            secs(cold)
        );
    }

    cached_rebuild(&scratch, &with_cells, &without, &command);

    // A cell of plain arithmetic, and one that monomorphizes burn's autodiff over the dry
    // runtime (its binary links most of burn and CubeCL).
    let light = edit_cell(
        &with_cells,
        &command,
        "src/introduction.md",
        "(8 * 512, 2048, 4)",
        |i| format!("(8 * 512, {}, 4)", 2049 + i),
    );
    println!(
        "(b) edit one cell, rebuild (median of {RUNS}):  {:>8.3} s (goal ≤ 0.6 s)",
        secs(light)
    );
    let heavy = edit_cell(
        &with_cells,
        &command,
        "src/part-1/dry-run.md",
        "// The same program for the ledger.",
        |i| format!("// The same program for the ledger ({i})."),
    );
    println!(
        "    the same, a cell that runs burn dry:   {:>8.3} s",
        secs(heavy)
    );
}

/// (a): the cached rebuild against the same pages without the engine, through `cat`, and the
/// bare sources.
fn cached_rebuild(scratch: &Path, with_cells: &Path, without: &Path, command: &str) {
    let manifest = std::fs::read_to_string(without.join("book.toml")).unwrap();
    // The pages the engine hands mdbook, kept: built as plain markdown, and passed through
    // `cat` as a preprocessor.
    let pages = scratch.join("pages.json");
    let tee = scratch.join("tee-pages.sh");
    // To a file, then shown: a failing engine fails the build (a pipe into `tee` would hide it).
    let script = format!(
        "#!/bin/sh\n{command} \"$@\" > '{0}' || exit $?\nexec cat '{0}'\n",
        pages.display()
    );
    std::fs::write(&tee, script).unwrap();
    mdbook(with_cells, Some(&format!("sh {}", tee.display())), PLAIN);
    let same_pages = scratch.join("same-pages");
    let _ = std::fs::remove_dir_all(&same_pages);
    copy(without, &same_pages);
    write_chapters(&pages, &same_pages.join("src"));
    let pass_through = scratch.join("pass-through");
    let _ = std::fs::remove_dir_all(&pass_through);
    copy(without, &pass_through);
    let copier = format!("sh -c 'cat > /dev/null; exec cat \"{}\"'", pages.display());
    // Where the engine runs among mdbook's own preprocessors, and for the same renderer.
    let mut cells = toml::Table::new();
    cells.insert("command".into(), copier.into());
    cells.insert("after".into(), vec!["links".to_string()].into());
    cells.insert("renderers".into(), vec!["html".to_string()].into());
    let table = toml::Table::from_iter([("cells".to_string(), toml::Value::Table(cells))]);
    let section = toml::Table::from_iter([("preprocessor".to_string(), toml::Value::Table(table))]);
    std::fs::write(
        pass_through.join("book.toml"),
        format!("{manifest}\n{}", toml::to_string(&section).unwrap()),
    )
    .unwrap();

    // In turn, run by run, so that a drift of the machine's speed falls on all four alike.
    let mut times = [const { Vec::new() }; 4];
    for _ in 0..RUNS * 2 {
        times[0].push(mdbook(with_cells, Some(command), PLAIN));
        times[1].push(mdbook(&same_pages, None, PLAIN));
        times[2].push(mdbook(&pass_through, None, PLAIN));
        times[3].push(mdbook(without, None, PLAIN));
    }
    let [cached, same, floor, bare] = times.map(|t| secs(median(t.into_iter())));
    println!("(a) rebuild, every cell cached (median):   {cached:>8.3} s");
    println!("    the same pages, without the engine:    {same:>8.3} s");
    println!(
        "    ratio:                                 {:>8.2} × (goal ≤ 1.15 ×)",
        cached / same
    );
    println!(
        "    the same pages through `cat`:          {floor:>8.3} s ({:.2} × the same pages: the protocol's floor)",
        floor / same
    );
    println!(
        "    the bare sources, no preprocessor:     {bare:>8.3} s (the rebuild is {:.2} × this)",
        cached / bare
    );
}

/// The median time of a rebuild after replacing `from` in `chapter` (a cell's code) with
/// `to(i)`, run `i`; the chapter is put back after.
fn edit_cell(
    book: &Path,
    command: &str,
    chapter: &str,
    from: &str,
    to: impl Fn(usize) -> String,
) -> Duration {
    let chapter = book.join(chapter);
    let original = std::fs::read_to_string(&chapter).unwrap();
    assert_eq!(original.matches(from).count(), 1, "the edited cell moved");
    let edits = (0..RUNS).map(|i| {
        std::fs::write(&chapter, original.replace(from, &to(i))).unwrap();
        mdbook(book, Some(command), PLAIN)
    });
    let took = median(edits);
    std::fs::write(&chapter, original).unwrap();
    took
}

/// A plain build: not strict, the store served.
const PLAIN: &[(&str, &str)] = &[
    ("MDBOOK_CELLS_STRICT", "0"),
    ("MDBOOK_CELLS_STORE", "serve"),
];

/// `mdbook build` in `root`, with the cells preprocessor run by `command` if given (an
/// environment override would re-create the preprocessor in the book without it), under the
/// engine's settings in `env`; every cell must succeed in a strict build.
fn mdbook(root: &Path, command: Option<&str>, env: &[(&str, &str)]) -> Duration {
    let start = Instant::now();
    let mut mdbook = Command::new("mdbook");
    mdbook
        .arg("build")
        .current_dir(root)
        .envs(env.iter().copied());
    if let Some(command) = command {
        mdbook.env("MDBOOK_PREPROCESSOR__CELLS__COMMAND", command);
    }
    let out = mdbook
        .output()
        .expect("run mdbook (install it with the README's first command)");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "mdbook build failed in {}:\n{}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Writes each chapter of the book the preprocessor returned (`pages`, mdbook's JSON) to its
/// file under `src`.
fn write_chapters(pages: &Path, src: &Path) {
    let book: Book = serde_json::from_slice(&std::fs::read(pages).unwrap()).unwrap();
    let mut written = 0;
    for item in book.iter() {
        if let BookItem::Chapter(ch) = item
            && let Some(path) = &ch.path
        {
            std::fs::write(src.join(path), &ch.content).unwrap();
            written += 1;
        }
    }
    assert!(written > 0, "no chapter in {}", pages.display());
}

/// The book.toml without its `[preprocessor.cells…]` tables.
fn strip_cells(manifest: &str) -> String {
    let mut keep = true;
    let mut out = String::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            keep = !line.starts_with("[preprocessor.cells");
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn median(times: impl Iterator<Item = Duration>) -> Duration {
    let mut times: Vec<Duration> = times.collect();
    times.sort();
    times[times.len() / 2]
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn copy(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name == "target" {
                continue;
            }
            copy(&entry.path(), &to.join(name));
        }
    } else if from.exists() {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
}
