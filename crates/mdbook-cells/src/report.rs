//! The execution report (`{{#cell-report}}`): the build's own health at a glance — every cell,
//! where its output came from, how long it ran, how it ended, and every problem.

use crate::types::{CellEntry, Compilation, Document, Report, Source, Status};
use cell_output::{Align, Table, escape};
use std::fmt::Write as _;
use std::time::Duration;

/// How many of the slowest cells the report names.
const SLOWEST: usize = 5;

/// The report as markdown for the page at `from_html`; `docs` give each chapter's title and page.
#[expect(
    clippy::too_many_lines,
    reason = "the report page's sections in page order, sharing one link helper; split, each would need it passed around"
)]
pub(crate) fn render(report: &Report, docs: &[Document], from_html: &str) -> String {
    let depth = from_html.matches('/').count();
    let link = |chapter: &str, anchor: Option<&str>| {
        let doc = docs.iter().find(|d| d.source == chapter);
        let title = doc.map_or(chapter, |d| d.title.as_str());
        let href = doc.map(|d| {
            let anchor = anchor.map(|a| format!("#{a}")).unwrap_or_default();
            if d.html_path == from_html {
                anchor
            } else {
                format!("{}{}{anchor}", "../".repeat(depth), d.html_path)
            }
        });
        match href {
            Some(href) => format!("<a href=\"{}\">{}</a>", escape(&href), escape(title)),
            None => escape(title),
        }
    };
    let count = |f: &dyn Fn(&CellEntry) -> bool| report.entries.iter().filter(|e| f(e)).count();
    let frozen = count(&|e| matches!(e.source, Source::Frozen { .. }));
    let stale = count(&|e| matches!(e.source, Source::Frozen { stale: true, .. }));
    // A chapter's prelude has no output of its own: counted apart, every cell is accounted for.
    let shared = count(&|e| matches!(e.source, Source::Shared));
    let failed = count(&|e| matches!(e.status, Status::Failed(_)));
    let mut out = String::from("\n<div class=\"cell-report\">\n\n");
    let _ = writeln!(
        out,
        "**{} cells** in {}: {} ran in this build, {} came from this machine's cache, {} from \
         the committed store, {} from GPU runs recorded earlier ({} stale), and {} {} code \
         shared by a chapter's cells, with no output of its own; {}, running {}{}. \
         **{} failed, {} problem(s).**\n",
        report.entries.len(),
        plural(chapters(&report.entries).len(), "chapter"),
        report.ran,
        report.cached,
        report.stored,
        frozen,
        stale,
        shared,
        if shared == 1 { "is" } else { "are" },
        match report.compiled {
            Compilation::Nothing => "nothing was compiled".to_string(),
            Compilation::Crate => format!("compiling took {}", seconds(report.compile_time)),
            Compilation::Alone(n) => format!(
                "compiling the {} it needed, alone, took {}",
                plural(n, "cell"),
                seconds(report.compile_time)
            ),
        },
        seconds(report.run_time),
        report
            .store
            .as_ref()
            .map(|n| format!("; {n}"))
            .unwrap_or_default(),
        failed,
        report.problems.len()
    );

    out.push_str("<p class=\"cell-report-heading\"><strong>Problems</strong></p>\n\n");
    if report.problems.is_empty() {
        out.push_str("None: every cell ran or was recorded as its page expects.\n\n");
    }
    for p in &report.problems {
        let _ = writeln!(
            out,
            "- <code>{}:{}</code>: {}",
            escape(&p.file),
            p.line,
            escape(&p.reason)
        );
    }
    out.push('\n');

    let mut timed: Vec<(&CellEntry, Duration)> = report
        .entries
        .iter()
        .filter_map(|e| Some((e, ran_for(&e.source)?)))
        .collect();
    timed.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
    if !timed.is_empty() {
        out.push_str("<p class=\"cell-report-heading\"><strong>Slowest cells</strong></p>\n\n");
        for (e, t) in timed.iter().take(SLOWEST) {
            let _ = writeln!(
                out,
                "- {} ({}, line {}): {}",
                link(&e.chapter, e.id.as_deref()),
                e.id.as_deref().map_or("unlabelled".into(), escape),
                e.line,
                seconds(*t)
            );
        }
        out.push('\n');
    }

    for chapter in chapters(&report.entries) {
        let _ = writeln!(
            out,
            "<p class=\"cell-report-heading\"><strong>{}</strong> <code>{}</code></p>\n",
            link(chapter, None),
            escape(chapter)
        );
        let mut table = Table::new(["line", "id", "output from", "ran for", "status"]).align([
            Align::Right,
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Left,
        ]);
        for e in report.entries.iter().filter(|e| e.chapter == chapter) {
            table.push([
                e.line.to_string(),
                e.id.clone().unwrap_or_default(),
                source(e),
                ran_for(&e.source).map_or("—".into(), seconds),
                status(&e.status),
            ]);
        }
        let _ = writeln!(
            out,
            "<div class=\"cell-table\">\n{}\n</div>\n",
            table.to_html()
        );
    }
    out.push_str("</div>\n");
    out
}

/// The chapters of `entries`, in book order.
fn chapters(entries: &[CellEntry]) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for e in entries {
        if seen.last() != Some(&e.chapter.as_str()) {
            seen.push(&e.chapter);
        }
    }
    seen
}

/// How long the run that made the cell's output took, when it ran in this build or earlier.
fn ran_for(source: &Source) -> Option<Duration> {
    match source {
        Source::Ran(t) | Source::Cached { ran: Some(t), .. } | Source::Stored { ran: t, .. } => {
            Some(*t)
        }
        _ => None,
    }
}

fn source(e: &CellEntry) -> String {
    let gpu = if e.gpu { "GPU cell: " } else { "" };
    let what = match &e.source {
        Source::Ran(_) => "ran in this build".to_string(),
        Source::Compiled => "compiled in this build, not run".to_string(),
        Source::Cached { computed, .. } => match computed {
            Some(date) => format!("cache, computed {date}"),
            None => "cache".to_string(),
        },
        Source::Stored { computed, .. } => format!("store, computed {computed}"),
        Source::Frozen {
            gpu,
            date,
            command,
            stale,
        } => format!(
            "recorded on {gpu} at {date} by `{command}`{}",
            if *stale { " (stale)" } else { "" }
        ),
        Source::NeverFrozen => "never recorded on a GPU".to_string(),
        Source::Shared => "shared by the chapter's cells".to_string(),
        Source::NotRun => "not run".to_string(),
    };
    format!("{gpu}{what}")
}

fn status(status: &Status) -> String {
    match status {
        Status::Ok => "ok".into(),
        Status::ExpectedFailure => "failed, as expected".into(),
        Status::Failed(fault) => format!("FAILED: {}", fault.label()),
    }
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn seconds(t: Duration) -> String {
    if t < Duration::from_millis(10) {
        "< 0.01 s".into()
    } else {
        format!("{:.2} s", t.as_secs_f64())
    }
}
