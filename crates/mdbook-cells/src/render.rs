//! Turning a cell and its outcome into the markdown and HTML the chapter shows.

use crate::outcome::{Outcome, OutputKind, Stored};
use crate::parse::{CellBlock, CellOptions, Evidence};
use crate::types::{Label, Labels, Shown};
use cell_output::escape;
use std::fmt::Write as _;

/// A cell as markdown: its code (unless hidden) and what it showed, inside one `div`; a
/// `fold`ed cell shows what it showed first and its code under it, in a closed `<details>`. The
/// anchor comes from `label`, not the options: a duplicate id gets none, so references and
/// the page's ids all lead to the first cell that took it. An unexpected failure says what
/// the page is missing and links the build report at `report` (relative to the page), if the
/// book has one.
pub fn cell(
    block: &CellBlock,
    shown: &Shown,
    label: Option<&Label>,
    fold: bool,
    report: Option<&str>,
) -> String {
    let opts = &block.options;
    let mut out = String::from("\n<div class=\"cell\"");
    if let Some(label) = label {
        let _ = write!(out, " id=\"{}\"", escape(&label.id));
    }
    out.push_str(">\n\n");
    let fence = "`".repeat(longest_backtick_run(&block.code).max(2) + 1);
    let code = format!(
        "{fence}rust,noplayground\n{}{}{fence}\n\n",
        block.code,
        if block.code.ends_with('\n') { "" } else { "\n" }
    );
    let show_code = !opts.hide_code;
    if show_code && !fold {
        out.push_str(&code);
    }
    let caption = opts.caption.as_deref().map(|c| {
        let text = format!("{}{}", one_line(c), evidence_tags(&opts.evidence));
        match label {
            Some(l) => format!("<span class=\"cell-label\">{}:</span> {text}", l.name),
            None => text,
        }
    });
    if let (true, Shown::Frozen { badge, stale, .. }) = (opts.hide_output, shown) {
        // Hidden output still says where it was recorded (a later cell may read it).
        out.push_str(&frozen_badge(badge, *stale));
    } else if !opts.hide_output
        || matches!(
            shown,
            Shown::Failure {
                expected: false,
                ..
            }
        )
    {
        out.push_str(&shown_html(shown, caption.as_deref()));
    }
    if let Shown::Failure {
        expected: false, ..
    } = shown
    {
        out.push_str(&missing_note(label, report));
    }
    if let (Some(why), Shown::Output(_)) = (&opts.varies, shown) {
        let _ = writeln!(
            out,
            "<p class=\"cell-varies\">This output varies from run to run: {}.</p>",
            one_line(why.trim_end_matches('.'))
        );
    }
    if show_code && fold {
        // Blank lines around the fence: markdown inside an HTML block needs them to render.
        let _ = write!(
            out,
            "\n<details class=\"cell-code\"><summary>The cell's code ({} lines)</summary>\n\n{code}</details>\n",
            block.code.lines().count()
        );
    }
    out.push_str("\n</div>\n\n");
    out
}

/// Under an unexpected failure: what the page lacks because of it, and where the build's
/// problems are listed.
fn missing_note(label: Option<&Label>, report: Option<&str>) -> String {
    let what = label.map_or("This cell's output".to_string(), |l| l.name.clone());
    let report = report.map_or(String::new(), |href| {
        format!(
            " The <a href=\"{}\">build report</a> lists every problem of this build.",
            escape(href)
        )
    });
    format!(
        "<p class=\"cell-missing\">{what} is missing from this page: the cell failed in this \
         build (the error above).{report}</p>\n"
    )
}

/// The note at the end of a chapter with cells: the command that takes them away.
pub fn export_note(command: &str) -> String {
    format!(
        "\n<div class=\"cell-export\">This page's cells as a program of your own: <code>{}</code> \
         writes them as a cargo project; <code>cargo run</code> there runs them.</div>\n",
        escape(command)
    )
}

/// A labelled cell's output placed again on another page (or further down its own) by
/// `{{#cell ID}}`: no code, no anchor (the id stays the original's), and a caption whose label
/// links back to the original.
pub fn embedded(shown: &Shown, opts: &CellOptions, label: &Label, from_html: &str) -> String {
    let depth = from_html.matches('/').count();
    let target = if label.html_path == from_html {
        format!("#{}", label.id)
    } else {
        format!("{}{}#{}", "../".repeat(depth), label.html_path, label.id)
    };
    let caption = format!(
        "<span class=\"cell-label\"><a href=\"{}\">{}</a>:</span> {}{}",
        escape(&target),
        escape(&label.name),
        opts.caption.as_deref().map(one_line).unwrap_or_default(),
        evidence_tags(&opts.evidence)
    );
    format!(
        "\n<div class=\"cell cell-embed\">\n\n{}\n</div>\n\n",
        shown_html(shown, Some(&caption))
    )
}

/// A caption's evidence, one tag per kind, after its text.
fn evidence_tags(evidence: &[Evidence]) -> String {
    evidence
        .iter()
        .map(|e| {
            format!(
                " <span class=\"cell-evidence\" data-evidence=\"{}\">{}</span>",
                e.name(),
                e.label()
            )
        })
        .collect()
}

/// The badge over a frozen output: where, when and how it was recorded, and whether it is stale.
fn frozen_badge(badge: &str, stale: bool) -> String {
    let (class, warning) = if stale {
        (
            "cell-badge cell-stale",
            " — stale: the cell or its inputs changed since",
        )
    } else {
        ("cell-badge", "")
    };
    format!(
        "<div class=\"{class}\">{}{warning}</div>\n",
        one_line(badge)
    )
}

fn pre(class: &str, text: &str) -> String {
    format!(
        "<pre class=\"{class}\">{}</pre>\n",
        pre_text(text.trim_end_matches('\n'))
    )
}

fn caption_p(caption: Option<&str>) -> String {
    caption
        .map(|c| format!("<p class=\"cell-caption\">{c}</p>\n"))
        .unwrap_or_default()
}

fn shown_html(shown: &Shown, caption: Option<&str>) -> String {
    let mut out = String::new();
    match shown {
        Shown::Nothing => {}
        Shown::Note(note) => {
            let _ = writeln!(out, "<div class=\"cell-note\">{}</div>", one_line(note));
        }
        Shown::Frozen {
            stored,
            badge,
            stale,
        } => {
            out.push_str(&frozen_badge(badge, *stale));
            out.push_str(&output_html(stored, caption));
        }
        Shown::Failure {
            fault,
            message,
            stdout,
            expected,
        } => {
            let label = if *expected {
                format!("expected failure ({})", fault.label())
            } else {
                fault.label().to_string()
            };
            if !stdout.is_empty() {
                out.push_str(&pre("cell-stdout", stdout));
            }
            let class = if *expected {
                "cell-error cell-expected"
            } else {
                "cell-error"
            };
            let _ = writeln!(
                out,
                "<div class=\"{class}\"><div class=\"cell-error-label\">{}</div><pre>{}</pre></div>",
                one_line(&label),
                pre_text(message.trim_end())
            );
            out.push_str(&caption_p(caption));
        }
        Shown::Output(stored) => out.push_str(&output_html(stored, caption)),
    }
    out
}

/// What a cell printed, then its value as its kind is shown.
fn output_html(stored: &Stored, caption: Option<&str>) -> String {
    let mut out = String::new();
    if !stored.stdout.is_empty() {
        out.push_str(&pre("cell-stdout", &stored.stdout));
    }
    if !stored.stderr.is_empty() {
        out.push_str(&pre("cell-stderr", &stored.stderr));
    }
    let (kind, body) = match &stored.outcome {
        Outcome::Value { kind, body } => (Some(*kind), body.as_str()),
        // Not shown as an output (a failure is a `Shown::Failure`): only the caption.
        Outcome::Failed { .. } => (None, ""),
    };
    match kind {
        Some(OutputKind::Figure) => {
            let _ = write!(
                out,
                "<figure class=\"cell-figure\">{}",
                without_blank_lines(body)
            );
            if let Some(c) = caption {
                let _ = write!(out, "<figcaption>{c}</figcaption>");
            }
            out.push_str("</figure>\n");
        }
        Some(OutputKind::Table) => {
            out.push_str("<div class=\"cell-table\">\n");
            out.push_str(&caption_p(caption));
            out.push_str(&without_blank_lines(body));
            out.push_str("\n</div>\n");
        }
        Some(OutputKind::Markdown) => {
            let _ = write!(out, "\n{}\n\n", body.trim_end());
            out.push_str(&caption_p(caption));
        }
        Some(OutputKind::Html) => {
            let _ = writeln!(out, "{}", without_blank_lines(body));
            out.push_str(&caption_p(caption));
        }
        Some(OutputKind::Text) => {
            out.push_str(&pre("cell-output", body));
            out.push_str(&caption_p(caption));
        }
        Some(OutputKind::Nothing) | None => out.push_str(&caption_p(caption)),
    }
    out
}

/// A blank line would end a raw-HTML block in CommonMark and turn the rest into markdown.
fn without_blank_lines(html: &str) -> String {
    html.lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Text for one line of HTML (a caption, a badge): escaped, its line breaks made spaces, since
/// markdown would read two of them as the end of the HTML block.
/// Text between backticks is set as code, as markdown would set it.
fn one_line(text: &str) -> String {
    cell_output::escape_inline(&text.replace(['\r', '\n'], " "))
}

/// Text for inside a `<pre>`: escaped, and no line left blank. A blank line would end the
/// raw-HTML block around it (CommonMark), and every later cell of the chapter would land inside
/// the `<pre>`; a space written as `&#32;` shows the same but is not blank to markdown.
fn pre_text(text: &str) -> String {
    // A lone carriage return ends a line too, for markdown.
    escape(&text.replace("\r\n", "\n").replace('\r', "\n"))
        .split('\n')
        .map(|l| if l.trim().is_empty() { "&#32;" } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

fn longest_backtick_run(code: &str) -> usize {
    code.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// Replaces `@fig-…` / `@tbl-…` in prose with links to the labelled cell. Inline code spans
/// are left alone. Unknown ids are returned with their line in `prose` (0-based) so strict
/// mode can fail on them.
pub fn references(prose: &str, labels: &Labels, from_html: &str) -> (String, Vec<(String, usize)>) {
    let depth = from_html.matches('/').count();
    let mut unknown = Vec::new();
    let out = crate::directive::outside_code(prose, '@', |before, at| {
        let word_before = before
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '.' || c == '_');
        let id: String = at[1..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        let id = id.trim_end_matches('-');
        if word_before || !(id.starts_with("fig-") || id.starts_with("tbl-")) {
            return None;
        }
        let text = match labels.get(id) {
            Some(label) => {
                let target = if label.html_path == from_html {
                    format!("#{id}")
                } else {
                    format!("{}{}#{id}", "../".repeat(depth), label.html_path)
                };
                format!("[{}]({target})", label.name)
            }
            None => {
                unknown.push((id.to_string(), before.matches('\n').count()));
                format!("**@{id} (unknown reference)**")
            }
        };
        Some((text, 1 + id.len()))
    });
    (out, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{FailureKind, Fault};
    use std::collections::HashMap;

    fn labels() -> Labels {
        HashMap::from([
            (
                "fig-peak".into(),
                Label {
                    id: "fig-peak".into(),
                    name: "Figure 2.1".into(),
                    html_path: "part-1/walk.html".into(),
                },
            ),
            (
                "tbl-log".into(),
                Label {
                    id: "tbl-log".into(),
                    name: "Table 3".into(),
                    html_path: "forensics.html".into(),
                },
            ),
        ])
    }

    #[test]
    fn references_link_within_and_across_chapters() {
        let (out, unknown) = references(
            "See @fig-peak and @tbl-log; mail a@fig-peak.org; `@fig-peak` stays; @fig-none.",
            &labels(),
            "part-1/walk.html",
        );
        assert_eq!(
            out,
            "See [Figure 2.1](#fig-peak) and [Table 3](../forensics.html#tbl-log); mail a@fig-peak.org; `@fig-peak` stays; **@fig-none (unknown reference)**."
        );
        assert_eq!(unknown, [("fig-none".to_string(), 0)]);
    }

    #[test]
    fn code_fence_outgrows_backticks_in_the_code() {
        let block = crate::parse::split("```cell\nlet s = \"```\";\n```\n").segments;
        let crate::parse::Segment::Cell(block) = &block[0] else {
            panic!()
        };
        let html = cell(block, &Shown::Nothing, None, false, None);
        assert!(html.contains("````rust,noplayground\nlet s"));
    }

    #[test]
    fn a_folded_cell_shows_its_result_then_its_code_in_a_closed_details() {
        let block = crate::parse::split("```cell\nlet x = 1;\nx\n```\n").segments;
        let crate::parse::Segment::Cell(block) = &block[0] else {
            panic!()
        };
        let stored = Stored {
            stdout: "printed\n".into(),
            stderr: String::new(),
            outcome: Outcome::Value {
                kind: OutputKind::Text,
                body: "1".into(),
            },
        };
        let shown = Shown::Output(stored);
        let html = cell(block, &shown, None, true, None);
        let (result, code) = (html.find("printed").unwrap(), html.find("let x").unwrap());
        assert!(result < code, "the result comes first: {html}");
        assert!(html.contains(
            "<summary>The cell's code (2 lines)</summary>\n\n```rust,noplayground\nlet x = 1;\nx\n```\n\n</details>"
        ));
        assert!(!cell(block, &shown, None, false, None).contains("<details"));
    }

    #[test]
    fn a_failure_says_what_the_page_lacks_and_links_the_report() {
        let block = &crate::parse::split("```cell\n//| id: tbl-x\n1\n```\n").segments[0];
        let crate::parse::Segment::Cell(block) = block else {
            panic!("a cell")
        };
        let label = Label {
            id: "tbl-x".into(),
            name: "Table 2.1".into(),
            html_path: "part/a.html".into(),
        };
        let failed = Shown::Failure {
            fault: Fault::Ran(FailureKind::Panic),
            message: "boom".into(),
            stdout: String::new(),
            expected: false,
        };
        let html = cell(
            block,
            &failed,
            Some(&label),
            false,
            Some("../build-report.html"),
        );
        assert!(
            html.contains("Table 2.1 is missing from this page: the cell failed in this build")
                && html.contains("<a href=\"../build-report.html\">build report</a>"),
            "{html}"
        );
        // An expected failure is the cell's content: nothing is missing.
        let expected = Shown::Failure {
            fault: Fault::Ran(FailureKind::Panic),
            message: "boom".into(),
            stdout: String::new(),
            expected: true,
        };
        assert!(!cell(block, &expected, None, false, None).contains("cell-missing"));
    }

    #[test]
    fn failures_with_blank_lines_stay_inside_their_html_block() {
        let shown = Shown::Failure {
            fault: Fault::Ran(FailureKind::Panic),
            message: "boom\n\n  \nstderr:\r\rthread 'main' <x>".into(),
            stdout: "a\n\nb\n".into(),
            expected: false,
        };
        let out = shown_html(&shown, None);
        assert!(
            !out.lines().any(|l| l.trim().is_empty()),
            "a blank line would end the raw-HTML block: {out:?}"
        );
        assert!(out.contains(
            "<pre>boom\n&#32;\n&#32;\nstderr:\n&#32;\nthread &#39;main&#39; &lt;x&gt;</pre>"
        ));
        assert!(out.contains("<pre class=\"cell-stdout\">a\n&#32;\nb</pre>"));
    }

    #[test]
    fn captions_and_badges_stay_on_one_line() {
        let block = crate::parse::split("```cell\n//| caption: a\r\r b <c>\n1\n```\n").segments;
        let crate::parse::Segment::Cell(block) = &block[0] else {
            panic!()
        };
        let stored = Stored::of(Outcome::Value {
            kind: OutputKind::Text,
            body: "1".into(),
        });
        let frozen = Shown::Frozen {
            stored,
            badge: "GPU\n\nH200".into(),
            stale: false,
        };
        let html = cell(block, &frozen, None, false, None);
        assert!(
            html.contains("<p class=\"cell-caption\">a   b &lt;c&gt;</p>"),
            "{html}"
        );
        assert!(html.contains(">GPU  H200</div>"), "{html}");
    }

    #[test]
    fn evidence_follows_the_caption_here_and_where_it_is_placed_again() {
        let md = "```cell\n//| id: tbl-a\n//| caption: a\n//| evidence: gpu, simulated\n1\n```\n";
        let segments = crate::parse::split(md).segments;
        let crate::parse::Segment::Cell(block) = &segments[0] else {
            panic!()
        };
        let shown = Shown::Output(Stored::of(Outcome::Value {
            kind: OutputKind::Text,
            body: "1".into(),
        }));
        let label = Label {
            id: "tbl-a".into(),
            name: "Table 1.1".into(),
            html_path: "a.html".into(),
        };
        let tags = " <span class=\"cell-evidence\" data-evidence=\"gpu\">measured on a GPU</span> \
                    <span class=\"cell-evidence\" data-evidence=\"simulated\">simulated, calibrated</span>";
        let html = cell(block, &shown, Some(&label), false, None);
        assert!(
            html.contains(&format!("Table 1.1:</span> a{tags}</p>")),
            "{html}"
        );
        let html = embedded(&shown, &block.options, &label, "b/c.html");
        assert!(
            html.contains(&format!("../a.html#tbl-a\">Table 1.1</a>:</span> a{tags}")),
            "{html}"
        );
    }

    #[test]
    fn figures_lose_blank_lines_and_text_is_escaped() {
        let stored = Stored {
            stdout: "a < b\n".into(),
            stderr: String::new(),
            outcome: Outcome::Value {
                kind: OutputKind::Figure,
                body: "<svg>\n\n<g/>\n</svg>".into(),
            },
        };
        let out = shown_html(&Shown::Output(stored), Some("cap"));
        assert_eq!(
            out,
            "<pre class=\"cell-stdout\">a &lt; b</pre>\n<figure class=\"cell-figure\"><svg>\n<g/>\n</svg><figcaption>cap</figcaption></figure>\n"
        );
    }
}
