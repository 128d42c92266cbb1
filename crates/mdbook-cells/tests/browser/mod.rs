//! The built book as a reader sees it: every page loaded in headless Chromium, in the light
//! theme and a dark one, with `audit.js` reporting tables wider than the content column,
//! literal backticks in captions, table cells and badges, and figure elements drawn with too
//! little contrast to be seen.

use std::path::{Path, PathBuf};
use std::process::Command;

const AUDIT: &str = include_str!("audit.js");

/// Themes the book is read in: mdbook's default and its most used dark one.
pub const THEMES: [&str; 2] = ["light", "coal"];

/// The Chromium binary, or `None` off CI where it is not installed.
pub fn chromium() -> Option<&'static str> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromium (see .ci/run)"
        );
        eprintln!("skipping the Chromium checks: chromium is not installed");
    }
    found
}

/// The audit's findings for `page` read in `theme`.
pub fn audit(chromium: &str, page: &Path, theme: &str) -> Vec<String> {
    let html = std::fs::read_to_string(page).unwrap();
    // The theme goes in before mdbook's own script reads it; the audit runs last.
    let set_theme =
        format!("<head><script>localStorage.setItem('mdbook-theme', '{theme}');</script>");
    let probed =
        html.replacen("<head>", &set_theme, 1)
            .replacen("</body>", &format!("{AUDIT}</body>"), 1);
    let copy = page.with_extension(format!("audit-{theme}.html"));
    std::fs::write(&copy, probed).unwrap();
    let profile = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chromium-audit-{theme}"));
    let output = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,900",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", copy.display()))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_file(&copy);
    let dom = String::from_utf8_lossy(&output.stdout);
    let json = dom
        .split("data-audit=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| {
            panic!(
                "the audit did not run on {}: {}",
                page.display(),
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("audit output {json:?}: {e}"))
}

/// The book's pages (not the print page, which repeats them, nor mdbook's own).
pub fn pages(book: &Path) -> Vec<PathBuf> {
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
                && !name.contains(".audit-")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Every page of `book`, in every theme, two Chromiums at a time; findings as
/// `page (theme): finding`.
pub fn audit_book(chromium: &str, book: &Path) -> Vec<String> {
    let jobs: Vec<(PathBuf, &str)> = pages(book)
        .into_iter()
        .flat_map(|p| THEMES.map(|t| (p.clone(), t)))
        .collect();
    let (even, odd): (Vec<_>, Vec<_>) = jobs.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let run = |half: Vec<(usize, &(PathBuf, &str))>| -> Vec<String> {
        half.into_iter()
            .flat_map(|(_, (page, theme))| {
                let name = page.strip_prefix(book).unwrap().display().to_string();
                audit(chromium, page, theme)
                    .into_iter()
                    .map(move |f| format!("{name} ({theme}): {f}"))
            })
            .collect()
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| run(even));
        let mut found = run(odd);
        found.extend(a.join().unwrap());
        found
    })
}

/// The audit finds what it is for: a wide table, a literal backtick, invisible figure text.
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
             <table style=\"white-space: nowrap\"><tr>{cells}</tr></table>\
             <div class=\"cell\" id=\"fig-x\"><p class=\"cell-caption\">the `mid` tensor</p>\
             <figure class=\"cell-figure\"><svg width=\"400\" height=\"200\">\
             <text x=\"10\" y=\"50\" fill=\"#fefefe\">lost label</text>\
             <text x=\"10\" y=\"90\" fill=\"#222\">kept label</text></svg></figure></div>\
             </main></body></html>"
        ),
    )
    .unwrap();
    let found = audit(chromium, &page, "light");
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("overflow: a table"), "{found:#?}");
    assert!(
        found[1].starts_with("backtick: p \"the `mid` tensor\""),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("invisible: text \"lost label\""),
        "{found:#?}"
    );
}
