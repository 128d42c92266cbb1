//! The built book as a reader sees it: every page loaded in headless Chromium, in the light
//! theme and a dark one, with `audit.js` reporting tables wider than the content column,
//! literal backticks in captions, table cells and badges, figure elements drawn with too
//! little contrast to be seen, figures and tables without a number or an evidence label, a
//! glossary out of order, and how many words the page asks a reader to read.

use std::path::{Path, PathBuf};

pub(crate) use snapshots::browser::{Probe, chromium};

/// [`snapshots::browser::probe`], its profile in this test binary's scratch folder.
pub(crate) fn probe(chromium: &str, page: &Path, probe: &Probe<'_>) -> String {
    snapshots::browser::probe(
        chromium,
        page,
        probe,
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    )
}

const AUDIT: &str = include_str!("audit.js");

/// Themes the book is read in: mdbook's default and its most used dark one.
pub(crate) const THEMES: [&str; 2] = ["light", "coal"];

/// What the audit found on one page, and the words of its main text.
#[derive(serde::Deserialize)]
pub(crate) struct Audit {
    pub(crate) findings: Vec<String>,
    pub(crate) words: usize,
}

/// The audit of `page` read in `theme`.
pub(crate) fn audit(chromium: &str, page: &Path, theme: &str) -> Audit {
    // The theme goes in before mdbook's own script reads it; the audit runs last.
    let head = format!("<script>localStorage.setItem('mdbook-theme', '{theme}');</script>");
    let tag = format!("audit-{theme}");
    let json = probe(
        chromium,
        page,
        &Probe {
            head: &head,
            script: AUDIT,
            attr: "audit",
            tag: &tag,
        },
    );
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("audit output {json:?}: {e}"))
}

/// mdbook 0.5 lowercases raw-HTML attributes (`viewBox` → `viewbox`). A real browser must
/// still apply each inlined figure's viewBox: every figure's drawn aspect ratio is compared
/// with its viewBox.
pub(crate) fn svg_figures_keep_their_aspect(chromium: &str, page: &Path) {
    let html = std::fs::read_to_string(page).unwrap();
    assert!(
        html.contains("<figure class=\"cell-figure\"><svg"),
        "no inlined figure"
    );
    let script = r#"<script>
const found = [...document.querySelectorAll('figure.cell-figure svg')].map(s => {
  const v = s.viewBox.baseVal, r = s.getBoundingClientRect();
  return [v ? v.width : 0, v ? v.height : 0, r.width, r.height].join(',');
});
document.body.setAttribute('data-svg-probe', found.join(';'));
</script>"#;
    let found = probe(
        chromium,
        page,
        &Probe {
            head: "",
            script,
            attr: "svg-probe",
            tag: "svg",
        },
    );
    let figures: Vec<Vec<f64>> = found
        .split(';')
        .map(|f| f.split(',').map(|n| n.parse().unwrap()).collect())
        .collect();
    assert!(!figures.is_empty(), "no figure found by the browser");
    for f in figures {
        let (view_w, view_h, drawn_w, drawn_h) = (f[0], f[1], f[2], f[3]);
        assert!(view_w > 0.0 && view_h > 0.0, "viewBox lost: {f:?}");
        assert!(drawn_w > 100.0, "figure not drawn: {f:?}");
        let (want, got) = (view_h / view_w, drawn_h / drawn_w);
        assert!(
            (want - got).abs() / want < 0.05,
            "aspect {got} instead of {want}: {f:?}"
        );
    }
}

/// The book's pages (not the print page, which repeats them, nor mdbook's own).
pub(crate) fn pages(book: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![book.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                dirs.push(path);
            } else if name.ends_with(".html")
                && !["print.html", "404.html", "toc.html"].contains(&name.as_str())
                && !name.contains(".probe-")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Every page of `book`, in every theme, two Chromiums at a time: the findings as
/// `page (theme): finding`, and each chapter's words (read in the first theme), in page order.
pub(crate) fn audit_book(chromium: &str, book: &Path) -> (Vec<String>, Vec<(String, usize)>) {
    let jobs: Vec<(PathBuf, &str)> = pages(book)
        .into_iter()
        .flat_map(|p| THEMES.map(|t| (p.clone(), t)))
        .collect();
    let (even, odd): (Vec<_>, Vec<_>) = jobs.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    type Found = (Vec<String>, Vec<(usize, String, usize)>);
    let run = |half: Vec<(usize, &(PathBuf, &str))>| -> Found {
        let mut found: Found = Default::default();
        for (i, (page, theme)) in half {
            let name = page.strip_prefix(book).unwrap().display().to_string();
            let audit = audit(chromium, page, theme);
            found.0.extend(
                audit
                    .findings
                    .into_iter()
                    .map(|f| format!("{name} ({theme}): {f}")),
            );
            // mdbook's index.html repeats the first chapter: its words are read once.
            if *theme == THEMES[0] && name != "index.html" {
                found.1.push((i, name, audit.words));
            }
        }
        found
    };
    let (mut findings, mut words) = std::thread::scope(|s| {
        let a = s.spawn(|| run(even));
        let mut found = run(odd);
        let (f, w) = a.join().unwrap();
        found.0.extend(f);
        found.1.extend(w);
        found
    });
    findings.sort();
    words.sort();
    (
        findings,
        words.into_iter().map(|(_, page, n)| (page, n)).collect(),
    )
}

/// The audit finds what it is for: a wide table, a literal backtick, invisible figure text, a
/// table and a figure without a number or evidence, a glossary out of order; and it counts
/// the words a reader reads, not those in code, tables, figures or folded sections.
#[test]
fn the_audit_catches_each_defect() {
    let Some(chromium) = chromium() else { return };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-self-test");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.html");
    let cells: String = (0..12)
        .map(|i| format!("<td>column-{i}-with-a-long-name</td>"))
        .collect();
    std::fs::write(
        &page,
        format!(
            "<html><head></head><body style=\"background: white\"><main style=\"width: 600px\">\
             <h1>Glossary</h1><p><strong>Pool.</strong> One two.</p><p><strong>Page.</strong> \
             Three <code>four</code> five.</p>\
             <div class=\"cell\" id=\"tbl-x\"><p class=\"cell-caption\"><span class=\"cell-label\">\
             Table 1.1:</span> wide</p><div class=\"cell-table\">\
             <table style=\"white-space: nowrap\"><tr>{cells}</tr></table></div></div>\
             <div class=\"cell\" id=\"fig-x\"><p class=\"cell-caption\">the `mid` tensor\
             <span class=\"cell-evidence\">measured on a GPU</span></p>\
             <figure class=\"cell-figure\"><svg width=\"400\" height=\"200\">\
             <text x=\"10\" y=\"50\" fill=\"#fefefe\">lost label</text>\
             <text x=\"10\" y=\"90\" fill=\"#222\">kept label</text></svg></figure></div>\
             <pre>not read</pre><details><summary>folded</summary>not read</details>\
             </main></body></html>"
        ),
    )
    .unwrap();
    let audit = audit(chromium, &page, "light");
    found_in_order(
        &audit.findings,
        &[
            "overflow: a table",
            "backtick: p \"the `mid` tensor",
            "invisible: text \"lost label\"",
            "unlabelled: a table says nothing of its evidence (tbl-x)",
            "unnumbered: a figure (fig-x)",
            "glossary: \"Page\" comes after \"Pool\"",
        ],
    );
    // Glossary, Pool., One two., Page., Three four five., Table 1.1:, wide, the `mid` tensor,
    // measured on a GPU.
    assert_eq!(audit.words, 1 + 1 + 2 + 1 + 3 + 2 + 1 + 3 + 4);
}

/// Figures that disagree on one page are found: a band's width narrower than its edges, a
/// log's failed reserves that no table lists, a build report whose counts miss its total; the
/// same figures in agreement are not.
#[test]
fn the_audit_catches_figures_that_disagree() {
    let Some(chromium) = chromium() else { return };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-agreement-test");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.html");
    let table = |rows: &str| {
        format!(
            "<div class=\"cell\" id=\"tbl-t\"><p class=\"cell-caption\"><span class=\"cell-label\">\
             Table 1.1:</span> t <span class=\"cell-evidence\">derived</span></p>\
             <table>{rows}</table></div>"
        )
    };
    let log = "<pre>step 1/100 | died in forward: x | 3 failed reserves, pages 35 MiB, 35 MiB, 6 MiB\n\
               [… more]</pre>";
    let report = |parts: &str| {
        format!(
            "<div class=\"cell-report\"><p><strong>4 cells</strong> in 1 chapter: {parts}; nothing was compiled.</p></div>"
        )
    };
    std::fs::write(
        &page,
        format!(
            "<html><body><main>{}{}{log}{}\
             <p>The band is at most 1.2 GiB wide: 16.32 GiB … 17.3 GiB.</p>{}</main></body></html>",
            table("<tr><td>band 1.17 GiB wide</td><td>16.32 GiB … 17.3 GiB</td></tr>"),
            table("<tr><td>GPU</td><td>34.95 MiB ×3, 6 MiB ×1</td></tr>"),
            report("1 ran in this build, 2 came from this machine's cache (0 stale)"),
            table("<tr><td>sim</td><td>34.95 MiB ×2, 6 MiB ×4</td></tr>"),
        ),
    )
    .unwrap();
    found_in_order(
        &audit(chromium, &page, "light").findings,
        &[
            "width: \"1.17 GiB wide\" beside 16.32 GiB … 17.3 GiB, 0.98 GiB apart",
            "count: \"3 failed reserves\" in a log agrees with no table listing those sizes",
            "sum: the build report's 4 cells are counted as 1 + 2 = 3",
        ],
    );
    // Agreeing, the same page has nothing to report.
    let agreeing = std::fs::read_to_string(&page)
        .unwrap()
        .replace("band 1.17 GiB wide", "band 0.98 GiB wide")
        .replace("34.95 MiB ×2, 6 MiB ×4", "34.95 MiB ×2, 6 MiB ×1")
        .replace("2 came from", "3 came from");
    std::fs::write(&page, agreeing).unwrap();
    let found = audit(chromium, &page, "light").findings;
    assert!(found.is_empty(), "{found:#?}");
}

/// The audit's findings are exactly `expected`, in order, each by its start.
fn found_in_order(found: &[String], expected: &[&str]) {
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (f, e) in found.iter().zip(expected) {
        assert!(f.starts_with(e), "{f:?} is not {e:?}: {found:#?}");
    }
}
