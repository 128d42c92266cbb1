//! Stage 4, pages: each chapter rewritten from its plan and its cells' resolutions — prose with
//! its references resolved, cells with their code and outcome. Pure: no files, no processes.

use crate::context::Context;
use crate::directive::{self, Directive};
use crate::export;
use crate::parse::{CellOptions, Segment};
use crate::plan::Plan;
use crate::render;
use crate::resolve::Resolution;
use crate::types::{Document, Problem, Shown};
use std::collections::HashMap;

/// Where `{{#cell-report}}` stood: replaced once the whole build's report is known (see
/// [`crate::process`]). A private-use character, which no chapter or cell output holds.
pub(crate) const REPORT_MARK: &str = "\u{E000}cell-report\u{E000}";

/// Rewrites every chapter's content; returns the problems met, chapter by chapter, in the order
/// a reader meets them.
pub(crate) fn render_pages(
    ctx: &Context<'_>,
    docs: &mut [Document],
    plan: &Plan,
    resolved: &[Resolution],
) -> Vec<Problem> {
    let (fold_code_over, preprocessor) =
        (ctx.config.fold_code_over, ctx.config.preprocessor_command());
    let mut problems = Vec::new();
    // What `{{#cell ID}}` places: the labelled cell's output and caption.
    let embeddable: HashMap<&str, (&Shown, &CellOptions)> = plan
        .cells
        .iter()
        .zip(resolved)
        .filter_map(|(f, r)| {
            let label = f.label.as_ref()?;
            Some((label.id.as_str(), (&r.shown, &plan.block(f).options)))
        })
        .collect();
    let report_page = report_page(docs, plan).map(str::to_string);
    let mut cells = plan.cells.iter().zip(resolved);
    for (d, segments) in plan.chapters.iter().enumerate() {
        let doc = &docs[d];
        let report = (report_page.as_deref()).map(|page| relative_href(&doc.html_path, page));
        for m in &plan.misplaced[d] {
            problems.push(Problem {
                file: doc.source.clone(),
                line: m.line,
                reason: m.message.clone(),
            });
        }
        let mut page = String::with_capacity(doc.content.len());
        let mut line = 0;
        for seg in segments {
            match seg {
                Segment::Prose(text) => {
                    let (text, unknown) = render::references(text, &plan.labels, &doc.html_path);
                    for (id, at) in unknown {
                        problems.push(Problem {
                            file: doc.source.clone(),
                            line: line + at + 1,
                            reason: format!("reference to unknown id `@{id}`"),
                        });
                    }
                    let text = directive::expand(&text, |d, at| match d {
                        Directive::Report => REPORT_MARK.to_string(),
                        Directive::Cell(id) => match (embeddable.get(id), plan.labels.get(id)) {
                            (Some((shown, opts)), Some(label)) => {
                                render::embedded(shown, opts, label, &doc.html_path)
                            }
                            _ => {
                                problems.push(Problem {
                                    file: doc.source.clone(),
                                    line: line + at + 1,
                                    reason: format!(
                                        "`{{{{#cell {id}}}}}` names no figure or table of the book"
                                    ),
                                });
                                format!("**{{{{#cell {id}}}}}: no such figure or table**")
                            }
                        },
                    });
                    page.push_str(&text);
                    line += text_lines(seg);
                }
                Segment::Cell(c) => {
                    let (planned, resolution) = cells.next().expect("one plan entry per cell");
                    debug_assert_eq!(
                        (planned.doc, c.fence_line),
                        (d, plan.block(planned).fence_line)
                    );
                    problems.extend(resolution.problems.iter().cloned());
                    let fold = c
                        .options
                        .fold_code
                        .unwrap_or(c.code.lines().count() > fold_code_over);
                    let label = planned.label.as_ref();
                    let report = report.as_deref();
                    page.push_str(&render::cell(c, &resolution.shown, label, fold, report));
                    line += text_lines(seg);
                }
            }
        }
        let runs = segments.iter().any(
            |s| matches!(s, Segment::Cell(c) if !(c.options.shared().is_some() || c.options.gpu)),
        );
        if runs {
            page.push_str(&render::export_note(&export::command(
                &preprocessor,
                &doc.source,
            )));
        }
        docs[d].content = page;
    }
    problems
}

/// The page that holds `{{#cell-report}}`, if one does.
fn report_page<'a>(docs: &'a [Document], plan: &Plan) -> Option<&'a str> {
    let holds_report = |segments: &[Segment]| {
        segments.iter().any(|seg| {
            let Segment::Prose(text) = seg else {
                return false;
            };
            let mut found = false;
            directive::expand(text, |d, _| {
                found |= d == Directive::Report;
                String::new()
            });
            found
        })
    };
    let d = plan.chapters.iter().position(|s| holds_report(s))?;
    Some(docs[d].html_path.as_str())
}

/// `to` (a page's path in the book) as a link from the page at `from`.
fn relative_href(from: &str, to: &str) -> String {
    format!("{}{to}", "../".repeat(from.matches('/').count()))
}

/// The chapter lines a segment takes.
fn text_lines(segment: &Segment) -> usize {
    match segment {
        Segment::Prose(p) => p.lines().count(),
        // A cell's lines: fence, body, closing fence.
        Segment::Cell(c) => c.code.lines().count() + (c.code_line - c.fence_line) + 1,
    }
}
