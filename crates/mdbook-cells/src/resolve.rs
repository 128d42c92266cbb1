//! Stage 3, resolve: each cell's outcome from exactly one place — the cache, a run in this
//! build, or a GPU cell's freeze — and the problems that come with it.

use crate::build::{BuildStats, Built, Got};
use crate::context::Context;
use crate::gpu::GpuMode;
use crate::outcome::{FailureKind, Fault, Outcome, OutputKind, SharedPart, Stored};
use crate::params::Param;
use crate::parse::CellBlock;
use crate::plan::{Plan, PlannedCell};
use crate::types::{Document, Problem, Shown, Source, StoreNote};
use cell_output::{Align, Table};

/// One cell, resolved: what its page shows, where that came from, and what is wrong.
pub(crate) struct Resolution {
    /// What the page shows under its code.
    pub(crate) shown: Shown,
    /// Where that came from.
    pub(crate) source: Source,
    /// Its problems, in the order a reader meets them.
    pub(crate) problems: Vec<Problem>,
}

/// Every cell of the book resolved (in plan order), and what the build took.
pub(crate) struct Resolved {
    /// One per planned cell.
    pub(crate) cells: Vec<Resolution>,
    /// Problems that belong to no cell's lines (a freeze that cannot be written).
    pub(crate) problems: Vec<Problem>,
    /// What the build did, passed on to the report.
    pub(crate) stats: BuildStats,
    /// What it found or did in the output store.
    pub(crate) store: Option<StoreNote>,
}

/// Resolves every planned cell from what the build got for it (or, for a GPU cell that did
/// not run, its freeze), with its problems.
pub(crate) fn resolve(ctx: &Context<'_>, docs: &[Document], plan: &Plan, built: Built) -> Resolved {
    let Built {
        mut got,
        prelude_errors,
        stats,
        store,
    } = built;
    let mut problems = store.problems;
    let mut checks = store.checks;
    let cells = plan
        .cells
        .iter()
        .map(|f| {
            let c = plan.block(f);
            let got = got.remove(f.module.as_str());
            if let (Some(at), Some(got)) = (&f.freeze, &got) {
                problems.extend(ctx.gpu.freeze_output(at, &got.stored));
            }
            let chapter = Chapter {
                source: &docs[f.doc].source,
                shared_errors: prelude_errors.get(&f.doc).map_or(&[], Vec::as_slice),
                params: &plan.params[f.doc],
            };
            let mut resolution = resolve_cell(f, c, &chapter, got, &ctx.gpu);
            if let Some(check) = checks.remove(f.module.as_str()) {
                resolution.problems.push(Problem {
                    file: chapter.source.to_string(),
                    line: c.fence_line,
                    reason: check.to_string(),
                });
            }
            resolution
        })
        .collect();
    Resolved {
        cells,
        problems,
        stats,
        store: store.note,
    }
}

/// A cell's chapter, as its resolution needs it.
struct Chapter<'a> {
    /// The chapter's file, as problems name it.
    source: &'a str,
    /// Compile errors in the code its cells share (prelude, parameters): chapter line and text.
    shared_errors: &'a [(usize, String)],
    /// Its parameters with this build's values.
    params: &'a [Param],
}

/// One cell's resolution, from exactly one of: its errors before it ran, the compile errors in
/// its lines of the chapter's shared code, its outcome in this build (cache or run), or its
/// freeze.
fn resolve_cell(
    f: &PlannedCell,
    c: &CellBlock,
    chapter: &Chapter<'_>,
    got: Option<Got>,
    gpu: &GpuMode,
) -> Resolution {
    let mut problems = Vec::new();
    let (shown, source) = if !f.errors.is_empty() {
        let errors: Vec<String> = f.errors.iter().map(ToString::to_string).collect();
        (failed(Fault::BadCell, errors.join("\n")), Source::NotRun)
    } else if let Some(line) = f.blocked {
        let why = format!("this chapter's parameters (line {line}) are in error: shown there");
        (failed(Fault::ParametersInError, why), Source::NotRun)
    } else if let Some(part) = c.options.shared() {
        let lines = c.code_line..c.code_line + c.code.lines().count();
        let errors: Vec<&str> = (chapter.shared_errors.iter())
            .filter(|(line, _)| lines.contains(line))
            .map(|(_, text)| text.as_str())
            .collect();
        let shown = if !errors.is_empty() {
            failed(Fault::SharedCode(part), errors.join("\n\n"))
        } else if part == SharedPart::Parameters {
            Shown::Output(Stored::of(Outcome::Value {
                kind: OutputKind::Table,
                body: parameters_table(chapter.params),
            }))
        } else {
            Shown::Nothing
        };
        (shown, Source::Shared)
    } else if let Some(got) = got {
        (shown_for(c, got.stored), got.source)
    } else if let Some(at) = &f.freeze {
        let (shown, source, problem) = gpu.frozen(at, chapter.source, c.fence_line);
        problems.extend(problem);
        (shown, source)
    } else {
        let shown = failed(Fault::NotRun, "the cell was not run".into());
        (shown, Source::NotRun)
    };
    if let Shown::Failure {
        fault,
        message,
        expected: false,
        ..
    } = &shown
    {
        let first = message.lines().next().unwrap_or_default();
        problems.push(Problem {
            file: chapter.source.to_string(),
            line: first_line_number(message, chapter.source).unwrap_or(c.fence_line),
            reason: format!("{}: {first}", fault.label()),
        });
    }
    Resolution {
        shown,
        source,
        problems,
    }
}

/// The values a chapter was built with, and what set each.
fn parameters_table(params: &[Param]) -> String {
    let mut table = Table::new(["parameter", "type", "default", "this build", "set by"])
        .align([Align::Left; 5]);
    for p in params {
        let set_by = if p.set_by == "default" {
            "default".to_string()
        } else {
            format!("`{}`", p.set_by)
        };
        table.push([
            format!("`{}`", p.name),
            format!("`{}`", p.ty),
            format!("`{}`", p.default),
            format!("`{}`", p.value),
            set_by,
        ]);
    }
    table.to_html()
}

fn failed(fault: Fault, message: String) -> Shown {
    Shown::Failure {
        fault,
        message,
        stdout: String::new(),
        expected: false,
    }
}

/// What the page shows for a cell that was compiled and run (now or in an earlier build).
fn shown_for(cell: &CellBlock, stored: Stored) -> Shown {
    let expected = cell.options.expect_fail;
    let Outcome::Failed { kind, message } = &stored.outcome else {
        if expected {
            let why = "this cell is marked `expect-fail` but it succeeded";
            return failed(Fault::Succeeded, why.into());
        }
        return Shown::Output(stored);
    };
    let mut message = message.clone();
    if !stored.stderr.is_empty() && *kind != FailureKind::Compile {
        message = format!("{message}\n\nstderr:\n{}", stored.stderr.trim_end());
    }
    Shown::Failure {
        fault: Fault::Ran(*kind),
        message,
        stdout: stored.stdout,
        expected,
    }
}

/// The line a compile error points at (`--> src/x.md:LINE:COL`), if the message has one.
fn first_line_number(message: &str, source: &str) -> Option<usize> {
    let at = message.find(&format!("{source}:"))? + source.len() + 1;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_come_from_the_rendered_location() {
        let msg = "error[E0425]: x\n  --> src/a.md:42:5\n";
        assert_eq!(first_line_number(msg, "src/a.md"), Some(42));
        assert_eq!(first_line_number("boom", "src/a.md"), None);
    }
}
