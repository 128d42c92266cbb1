//! Fixture books run through the library (`process`, no mdbook) with snapshot files of the
//! rendered chapters, and through the real binary under mdbook (strict mode, the project's own
//! book). `UPDATE_SNAPSHOTS=1 cargo test -p mdbook-cells` rewrites the snapshots.

use mdbook_cells::config::Config;
use mdbook_cells::{Compilation, Document, Report, process};
use std::path::{Path, PathBuf};

mod browser;
mod export;
mod fuzz;
mod gpu;
mod hostile;
mod store;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A cache for one test, kept between test runs so the cell crate's dependencies stay built.
fn cache_dir(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cells-{test}"))
}

/// The same, with no stored outputs and no recording for the quick path, so the test starts
/// cold (its first build compiles the crate).
fn fresh_cache(test: &str) -> PathBuf {
    let dir = cache_dir(test);
    let _ = std::fs::remove_dir_all(dir.join("outputs"));
    let _ = std::fs::remove_file(dir.join("quick.json"));
    dir
}

fn config(root: &Path, cache: &Path) -> Config {
    let book: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("book.toml")).unwrap())
            .expect("fixture book.toml");
    let mut config: Config = book["preprocessor"]["cells"].clone().try_into().unwrap();
    config.cache_dir = cache.to_path_buf();
    config
}

/// The chapters under `src/`, in path order, numbered as mdbook would number a flat summary.
fn documents(root: &Path) -> Vec<Document> {
    let mut paths = Vec::new();
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md")
                && path.file_name().is_some_and(|n| n != "SUMMARY.md")
            {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let rel = path.strip_prefix(root.join("src")).unwrap();
            Document {
                source: format!("src/{}", rel.display()),
                html_path: rel.with_extension("html").display().to_string(),
                number: Some(format!("{}.", i + 1)),
                title: rel.display().to_string(),
                content: std::fs::read_to_string(path).unwrap(),
            }
        })
        .collect()
}

fn run(name: &str, test: &str) -> (Vec<Document>, Report) {
    let root = fixture(name);
    let cache = fresh_cache(test);
    let mut docs = documents(&root);
    let report = process(&root, &config(&root, &cache), &mut docs).unwrap();
    (docs, report)
}

fn assert_snapshot(name: &str, docs: &[Document]) {
    for doc in docs {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshots")
            .join(name)
            .join(doc.source.trim_start_matches("src/"));
        snapshots::check(&file, &doc.content);
    }
}

#[test]
fn basic_book_renders_every_kind_of_output_and_caches_it() {
    let (docs, report) = run("basic", "basic");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.cells, report.ran, report.cached), (8, 8, 0));
    assert_snapshot("basic", &docs);

    // A second build finds every output in the cache: nothing compiles, nothing runs.
    let root = fixture("basic");
    let config = config(&root, &cache_dir("basic"));
    let mut again = documents(&root);
    let report = process(&root, &config, &mut again).unwrap();
    assert_eq!((report.ran, report.cached), (0, 8));
    assert_eq!(again[0].content, docs[0].content);

    // Editing one cell reruns that cell only; editing a caption reruns nothing.
    let mut edited = documents(&root);
    edited[0].content = edited[0]
        .content
        .replace("square(12)", "square(13)")
        .replace("Squares & cubes", "Squares");
    let report = process(&root, &config, &mut edited).unwrap();
    assert_eq!((report.ran, report.cached), (1, 7));
    assert!(
        edited[0]
            .content
            .contains("<pre class=\"cell-output\">169</pre>")
    );
    assert!(edited[0].content.contains("Table 1.1:</span> Squares</p>"));

    // A new output limit reruns every cell: it caps the files a cell writes, so it can change
    // what the cell computes.
    let mut limited = config.clone();
    limited.output_limit += 1;
    let report = process(&root, &limited, &mut documents(&root)).unwrap();
    assert_eq!((report.ran, report.cached), (8, 0));
}

#[test]
fn damaged_cache_entries_are_recomputed() {
    let (_, first) = run("basic", "damaged");
    assert_eq!(first.ran, 8);
    let root = fixture("basic");
    let cache = cache_dir("damaged");
    for entry in std::fs::read_dir(cache.join("outputs")).unwrap().take(3) {
        std::fs::write(entry.unwrap().path(), "{\"stdout\":").unwrap();
    }
    let mut docs = documents(&root);
    let report = process(&root, &config(&root, &cache), &mut docs).unwrap();
    assert_eq!((report.ran, report.cached), (3, 5));
    assert!(report.problems.is_empty());
}

#[test]
fn broken_cells_fail_in_place_and_the_rest_renders() {
    let (docs, report) = run("broken", "broken");
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    similar_asserts::assert_eq!(
        problems,
        [
            "src/broken.md:8: cell failed: compile error: error[E0308]: mismatched types",
            "src/broken.md:12: cell failed: bad cell options: line 13: unknown option `hide-cod`; did you mean `hide-code`?",
            "src/broken.md:19: cell failed: panicked: index out of bounds: the len is 2 but the index is 7 at src/broken.md:19",
            "src/broken.md:22: cell failed: timed out: killed after 1 s of CPU time (the cell's timeout)",
            "src/broken.md:29: cell failed: timed out: killed: it used almost no CPU for 1 s (the cell's timeout); is it waiting on something that never comes?",
            "src/broken.md:34: cell failed: the cell process died: the cell process was killed by signal 6",
            "src/broken.md:38: cell failed: expected a failure: this cell is marked `expect-fail` but it succeeded",
            "src/broken.md:43: cell failed: reference to unknown id `@fig-missing`",
        ]
    );
    let page = &docs[0].content;
    assert!(page.contains("<pre class=\"cell-output\">this cell is fine</pre>"));
    assert!(
        page.contains("<pre class=\"cell-output\">the cell after the failures still runs</pre>")
    );
    assert_snapshot("broken", &docs);
}

/// mdbook itself, running the real binary over its protocol.
fn mdbook_build(root: &Path, out: &Path, strict: bool) -> anyhow::Result<()> {
    mdbook_build_with(root, out, strict, |_| Ok(()))
}

/// The same, with `tweak` applied to the book's configuration.
fn mdbook_build_with(
    root: &Path,
    out: &Path,
    strict: bool,
    tweak: impl FnOnce(&mut mdbook_driver::config::Config) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut config = mdbook_driver::config::Config::from_disk(root.join("book.toml"))?;
    tweak(&mut config)?;
    config.set(
        "preprocessor.cells.command",
        env!("CARGO_BIN_EXE_mdbook-cells"),
    )?;
    config.set("preprocessor.cells.strict", strict)?;
    config.set("build.build-dir", out.display().to_string())?;
    // Fixture books keep their caches out of the source tree; the project's own book uses its
    // configured one (shared with `mdbook build`).
    if root.starts_with(fixture("")) {
        let cache = out.with_extension("cells-cache");
        config.set("preprocessor.cells.cache-dir", cache.display().to_string())?;
    }
    mdbook_driver::MDBook::load_with_config(root, config)?.build()
}

#[test]
fn strict_mode_fails_the_build_with_every_failing_line() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("strict-broken");
    let err = mdbook_build(&fixture("broken"), &out, true).unwrap_err();
    let chain = format!("{err:#}");
    assert!(chain.contains("cells"), "{chain}");
    // Without strict mode the same book builds, errors shown in place.
    mdbook_build(&fixture("broken"), &out, false).unwrap();
    let html = std::fs::read_to_string(out.join("broken.html")).unwrap();
    assert!(html.contains("cell-error"));
    assert!(html.contains("the cell after the failures still runs"));
}

/// The book as a reader gets it, strict: every output from this machine's cache or the
/// committed store (whatever neither holds runs). Linting the cells, and rerunning every one of
/// them against the store, is CI's book step (`MDBOOK_CELLS_STRICT=1 MDBOOK_CELLS_STORE=verify
/// mdbook build` in `.ci/run`): both compile the whole cell crate, minutes on two cores.
#[test]
fn the_projects_own_book_builds_in_strict_mode() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("own-book");
    mdbook_build_with(&root, &out, true, |config| {
        config.set("preprocessor.cells.lint", false)?;
        config.set("preprocessor.cells.store-mode", "serve")
    })
    .unwrap();
    assert!(out.join("introduction.html").exists());
    if let Some(chromium) = browser::chromium() {
        browser::svg_figures_keep_their_aspect(chromium, &out.join("reference/cells.html"));
        assert!(
            browser::pages(&out).len() >= 20,
            "the book's pages were not found"
        );
        let (found, words) = browser::audit_book(chromium, &out);
        assert!(
            found.is_empty(),
            "{} defects a reader would see:\n{}",
            found.len(),
            found.join("\n")
        );
        // Every chapter of the summary built, and the whole read within a reader's patience:
        // at most 22 000 words of main text (issue 28: about 29 800 before it).
        let summary = std::fs::read_to_string(root.join("src/SUMMARY.md")).unwrap();
        for chapter in summary
            .split("](")
            .skip(1)
            .filter_map(|s| s.split(')').next())
        {
            let page = chapter.replace(".md", ".html");
            assert!(
                words.iter().any(|(p, _)| *p == page),
                "{chapter} is in the summary but was not built"
            );
        }
        let total: usize = words.iter().map(|(_, n)| n).sum();
        let pages: Vec<String> = words.iter().map(|(p, n)| format!("{n:6} {p}")).collect();
        assert!(
            total <= 22_000,
            "the book asks {total} words of a reader, over 22 000:\n{}",
            pages.join("\n")
        );
    }
}

/// The audit over `book/` as the last `mdbook build` left it, for a writer at work: every
/// finding and each page's words, without the strict build (`cargo test -p mdbook-cells --test
/// books audit_the_last_build -- --ignored --nocapture`).
#[test]
#[ignore = "reads the book last built by `mdbook build`"]
fn audit_the_last_build() {
    let book = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book");
    let chromium = browser::chromium().expect("chromium");
    let (found, words) = browser::audit_book(chromium, &book);
    for (page, n) in &words {
        println!("{n:6} {page}");
    }
    let total: usize = words.iter().map(|(_, n)| n).sum();
    println!("{total:6} words\n{}", found.join("\n"));
    assert!(found.is_empty(), "{} findings", found.len());
}

/// An in-memory chapter for the `&str → String` seam, run with the basic fixture's settings.
fn run_text(test: &str, markdown: &str, tweak: impl FnOnce(&mut Config)) -> (String, Report) {
    run_text_in(&fixture("basic"), test, markdown, tweak)
}

/// A book root of its own under the test's temporary folder, with the basic fixture's
/// settings, for tests whose cells or freezes write into the book; removed when dropped.
fn scratch_book(test: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("book-{test}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = dir.path();
    let cell_output = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cell-output");
    std::fs::write(
        root.join("book.toml"),
        format!(
            "[book]\ntitle = \"{test}\"\n\n[preprocessor.cells]\ntimeout = 20\n\n\
             [preprocessor.cells.dependencies]\ncell-output = {{ path = {:?} }}\n",
            cell_output.display().to_string()
        ),
    )
    .unwrap();
    dir
}

fn run_text_in(
    root: &Path,
    test: &str,
    markdown: &str,
    tweak: impl FnOnce(&mut Config),
) -> (String, Report) {
    let root = root.to_path_buf();
    let mut config = config(&root, &fresh_cache(test));
    tweak(&mut config);
    let mut docs = vec![Document {
        source: "src/inline.md".into(),
        html_path: "inline.html".into(),
        number: None,
        title: "Inline".into(),
        content: markdown.into(),
    }];
    let report = process(&root, &config, &mut docs).unwrap();
    (docs.remove(0).content, report)
}

#[test]
fn output_over_the_limit_is_cut_with_a_note() {
    let (page, report) = run_text(
        "limit",
        "```cell\nprint!(\"{}\", \"x\".repeat(500));\n```\n",
        |c| c.output_limit = 64,
    );
    assert!(report.problems.is_empty());
    let expected = format!(
        "<pre class=\"cell-stdout\">{}\n… output cut at 64 bytes (the cell printed more)</pre>",
        "x".repeat(64)
    );
    assert!(page.contains(&expected), "{page}");
}

#[test]
fn prelude_errors_are_shown_at_the_prelude() {
    let (page, report) = run_text(
        "prelude",
        "```cell\n//| prelude\nfn helper() -> u32 { \"no\" }\n```\n\n```cell\nhelper()\n```\n",
        |_| {},
    );
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            "src/inline.md:3: cell failed: the prelude did not compile: error[E0308]: mismatched types",
            "src/inline.md:6: cell failed: compile error: this chapter's shared code did not compile (its error is shown on its prelude or parameters cell)",
        ]
    );
    assert!(page.contains("--&gt; src/inline.md:3:22"), "{page}");
}

#[test]
fn an_edit_compiles_only_its_cells_alone_and_falls_back_to_the_crate() {
    let cache = fresh_cache("quick");
    let root = fixture("basic");
    // Builds of one chapter whose second cell is `second`, keeping the cache between them.
    let build = |second: &str| {
        let mut docs = vec![Document {
            source: "src/inline.md".into(),
            html_path: "inline.html".into(),
            number: None,
            title: "Inline".into(),
            content: format!("```cell\n1 + 1\n```\n\n```cell\n{second}\n```\n"),
        }];
        let report = process(&root, &config(&root, &cache), &mut docs).unwrap();
        (docs.remove(0).content, report)
    };
    let problems = |report: &Report| -> Vec<String> {
        report.problems.iter().map(|p| p.to_string()).collect()
    };

    // The first build compiles the crate and records cargo's rustc call.
    let (page, report) = build("\"edit 0\".to_string()");
    assert_eq!(report.compiled, Compilation::Crate, "{report}");
    assert!(page.contains("edit 0") && cache.join("quick.json").exists());

    // An edit compiles its cell alone; the other stays cached.
    let (page, report) = build("\"edit 1\".to_string()");
    assert_eq!(
        (report.compiled, report.cached, report.ran),
        (Compilation::Alone(1), 1, 1)
    );
    assert!(page.contains("edit 1"), "{page}");
    assert!(report.to_string().contains("1 cell(s) alone"), "{report}");

    // Its compile errors and panics land on the chapter's lines, as in a full build.
    let (page, report) = build("undefined_name");
    assert_eq!(report.compiled, Compilation::Alone(1));
    assert_eq!(
        problems(&report),
        [
            "src/inline.md:6: cell failed: compile error: error[E0425]: cannot find value `undefined_name` in this scope"
        ]
    );
    assert!(page.contains("--&gt; src/inline.md:6:1"), "{page}");
    let (_, report) = build("panic!(\"boom\")");
    assert_eq!(report.compiled, Compilation::Alone(1));
    assert_eq!(
        problems(&report),
        ["src/inline.md:6: cell failed: panicked: boom at src/inline.md:6"]
    );

    // A recording whose dependencies are gone: the full build takes over and records anew.
    let recording = std::fs::read_to_string(cache.join("quick.json")).unwrap();
    let gone = recording.replace("cell_output=/", "cell_output=/nonexistent/");
    assert_ne!(gone, recording, "the recording names cell-output's library");
    std::fs::write(cache.join("quick.json"), gone).unwrap();
    let (page, report) = build("\"edit 2\".to_string()");
    assert_eq!(report.compiled, Compilation::Crate, "{:?}", report.problems);
    assert!(page.contains("edit 2") && report.problems.is_empty());
    let (_, report) = build("\"edit 3\".to_string()");
    assert_eq!(report.compiled, Compilation::Alone(1));
}

#[test]
fn two_builds_at_once_take_turns_on_the_cache() {
    let root = fixture("basic");
    let cache = fresh_cache("concurrent");
    let pages: Vec<String> = std::thread::scope(|s| {
        let builds: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut docs = documents(&root);
                    let report = process(&root, &config(&root, &cache), &mut docs).unwrap();
                    assert!(report.problems.is_empty(), "{:?}", report.problems);
                    docs[0].content.clone()
                })
            })
            .collect();
        builds.into_iter().map(|b| b.join().unwrap()).collect()
    });
    assert_eq!(pages[0], pages[1]);
    // Whichever build went second found everything the first one stored.
    let mut docs = documents(&root);
    let report = process(&root, &config(&root, &cache), &mut docs).unwrap();
    assert_eq!((report.ran, report.cached), (0, 8));
}

/// Chapters whose names differ only in punctuation each keep their cells; a duplicate id is
/// flagged where it is duplicated, and references still lead to the first cell that took it.
#[test]
fn chapters_that_look_alike_and_duplicate_ids_stay_apart() {
    let root = fixture("basic");
    let config = config(&root, &fresh_cache("alike"));
    let cell = |id: &str, value: &str| {
        format!("```cell\n//| id: {id}\n//| caption: {value}\n\"{value}\"\n```\n")
    };
    let chapter = |source: &str, content: String| Document {
        source: format!("src/{source}"),
        html_path: source.replace(".md", ".html"),
        number: None,
        title: source.into(),
        content,
    };
    let mut docs = vec![
        chapter("a-b.md", cell("fig-one", "from a-b")),
        chapter(
            "a_b.md",
            format!("{}\nSee @fig-one.\n", cell("fig-one", "from a_b")),
        ),
    ];
    let report = process(&root, &config, &mut docs).unwrap();
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            "src/a_b.md:1: cell failed: bad cell options: id `fig-one` is already used by Figure 1 (a-b.html)"
        ]
    );
    assert!(
        docs[0].content.contains(">from a-b</pre>"),
        "{}",
        docs[0].content
    );
    assert!(
        docs[0]
            .content
            .contains("<div class=\"cell\" id=\"fig-one\">")
    );
    assert!(
        !docs[1].content.contains("id=\"fig-one\""),
        "{}",
        docs[1].content
    );
    assert!(
        docs[1]
            .content
            .contains("See [Figure 1](a-b.html#fig-one).")
    );
}

/// Times in the execution report change from build to build; the snapshot keeps their place
/// (and the slowest cells in a fixed order).
fn without_times(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(at) = rest.find(" s") {
        let (before, after) = rest.split_at(at);
        let digits = before.len()
            - before
                .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        let is_time = digits > 3 && before[before.len() - digits..].contains('.');
        out.push_str(&before[..before.len() - if is_time { digits } else { 0 }]);
        if is_time {
            out.push('T');
        }
        out.push_str(" s");
        rest = &after[2..];
    }
    out.push_str(rest);
    let out = out.replace("&lt; T s", "T s").replace("< T s", "T s");
    // The slowest cells' order is the timing's: kept in a fixed order.
    let mut lines: Vec<&str> = out.lines().collect();
    let slowest: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("- <a "))
        .collect();
    let mut sorted: Vec<&str> = slowest.iter().map(|&i| lines[i]).collect();
    sorted.sort();
    for (i, line) in slowest.into_iter().zip(sorted) {
        lines[i] = line;
    }
    lines.join("\n") + "\n"
}

/// Parameters with their values shown, a labelled output placed on another page, and the
/// execution report; a build that sets a parameter reruns exactly the cells that see it.
#[test]
fn parameters_embedding_and_the_report_page() {
    let (mut docs, report) = run("features", "features");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.cells, report.ran, report.cached), (2, 2, 0));
    let report_page = docs
        .iter_mut()
        .find(|d| d.source == "src/report.md")
        .unwrap();
    report_page.content = without_times(&report_page.content);
    assert_snapshot("features", &docs);
    let figures = &docs
        .iter()
        .find(|d| d.source == "src/figures.md")
        .unwrap()
        .content;
    assert!(figures.contains(
        "<td><code>&quot;hello from book.toml&quot;</code></td><td><code>book.toml</code></td>"
    ));
    assert!(figures.contains("hello from book.toml</pre>"));
    let elsewhere = &docs
        .iter()
        .find(|d| d.source == "src/elsewhere.md")
        .unwrap()
        .content;
    assert!(
        elsewhere.contains(
            "<a href=\"figures.html#tbl-squares\">Table 2.1</a>:</span> The first squares"
        )
    );
    assert!(elsewhere.contains("<td style=\"text-align: right\">9</td>"));
    assert!(elsewhere.contains("Written as `{{#cell tbl-squares}}`"));

    // Setting a parameter: the cells of its chapter rerun, with the value shown as set.
    let root = fixture("features");
    let mut config = config(&root, &cache_dir("features"));
    config.parameters.insert("ROWS".into(), 4.into());
    let mut docs = documents(&root);
    let report = process(&root, &config, &mut docs).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.ran, report.cached), (2, 0));
    let elsewhere = &docs[0].content;
    assert!(
        elsewhere.contains("<td style=\"text-align: right\">16</td>"),
        "{elsewhere}"
    );
    let report_page = &docs[2].content;
    assert!(
        report_page.contains(
            "**3 cells** in 1 chapter: 2 ran in this build, 0 came from this machine's cache"
        ),
        "{report_page}"
    );
    assert!(
        docs[1]
            .content
            .contains("<td><code>4</code></td><td><code>book.toml</code></td>")
    );

    // A parameter no chapter declares, a bad value, an embed of nothing: each a problem.
    config.parameters.insert("ROWZ".into(), 4.into());
    config
        .parameters
        .insert("GREETING".into(), "two\nlines".into());
    let mut docs = documents(&root);
    docs[0].content.push_str("\n{{#cell fig-nowhere}}\n");
    let report = process(&root, &config, &mut docs).unwrap();
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(
        problems[0].starts_with("book.toml:0: cell failed: parameter `ROWZ`"),
        "{problems:#?}"
    );
    assert!(problems[0].contains("the book's parameters: ROWS, GREETING"));
    assert!(problems.iter().any(|p| {
        p.starts_with("src/elsewhere.md:9: cell failed: `{{#cell fig-nowhere}}` names no figure")
    }));
    assert!(problems.iter().any(|p| p.contains("src/figures.md:5: cell failed: bad cell options: line 9: book.toml sets `GREETING` to `two\\nlines`")), "{problems:#?}");
    let blocked = "cell failed: not run: this chapter's parameters (line 5) are in error";
    assert!(
        problems[3..].iter().all(|p| p.contains(blocked)),
        "{problems:#?}"
    );
}

/// The features book, built from its cache (after the test that fills it, or from scratch).
fn run_features_again() -> (Vec<Document>, Report) {
    let root = fixture("features");
    let mut docs = documents(&root);
    let report = process(
        &root,
        &config(&root, &cache_dir("features-export")),
        &mut docs,
    )
    .unwrap();
    (docs, report)
}

/// With `lint` (and in every strict build) a cell rustfmt would write otherwise, and clippy's
/// warnings in cells, are problems at the chapter's lines; `mdbook-cells fmt` rewrites the
/// cells in place, after which the same build finds nothing.
#[test]
fn cells_are_held_to_rustfmt_and_clippy_and_fmt_rewrites_them() {
    let chapter = "# Lint\n\n```cell\nlet squares: Vec<u64> = (1..4).map(|n| n*n).collect();\nsquares.len()\n```\n\n```cell\nlet answer = 6 * 7;\nanswer\n```\n";
    let (_, report) = run_text("lint", chapter, |c| c.lint = Some(true));
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            "src/inline.md:4: cell failed: rustfmt would write this cell otherwise (from this \
             line on); `mdbook-cells fmt` rewrites it",
            "src/inline.md:10: cell failed: clippy: warning[clippy::let_and_return]: returning \
             the result of a `let` binding from a block",
        ]
    );

    let book = scratch_book("fmt");
    let root = book.path();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lint.md"), chapter).unwrap();
    let fmt = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdbook-cells"))
            .arg("fmt")
            .current_dir(root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(fmt().ends_with("1 cell(s) rewritten in 1 chapter(s)\n"));
    let formatted = std::fs::read_to_string(root.join("src/lint.md")).unwrap();
    assert!(formatted.contains("(1..4).map(|n| n * n).collect();\nsquares.len()\n```"));
    assert!(
        fmt().ends_with("0 cell(s) rewritten in 0 chapter(s)\n"),
        "a second run changes nothing"
    );
}
