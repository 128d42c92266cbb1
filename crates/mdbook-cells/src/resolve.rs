//! Stage 3, resolve: each cell's outcome from exactly one place — the cache, a run in this
//! build, or a GPU cell's freeze — and the problems that come with it.

use crate::build;
use crate::bundle::BundledCell;
use crate::cache::{Cache, Entry};
use crate::config::Config;
use crate::error::{BundleError, Error};
use crate::execute::Job;
use crate::gpu::GpuCells;
use crate::outcome::{FailureKind, Outcome, OutputKind, Stored};
use crate::params::Param;
use crate::parse::CellBlock;
use crate::plan::{Plan, PlannedCell};
use crate::render::Shown;
use crate::types::{Compilation, Document, Problem, Source};
use cell_output::{Align, Table};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

/// One cell, resolved: what its page shows, where that came from, and what is wrong.
pub(crate) struct Resolution {
    /// What the page shows under its code.
    pub(crate) shown: Shown,
    /// Where that came from.
    pub(crate) source: Source,
    /// Its problems, in the order a reader meets them.
    pub(crate) problems: Vec<Problem>,
}

/// Every cell of the book resolved (in plan order), and what it took.
pub(crate) struct Resolved {
    /// One per planned cell.
    pub(crate) cells: Vec<Resolution>,
    /// Problems that belong to no cell's lines (a freeze that cannot be written).
    pub(crate) problems: Vec<Problem>,
    /// Cells taken from the cache.
    pub(crate) cached: usize,
    /// Cells run.
    pub(crate) ran: usize,
    /// Cells this build ran or took from the cache.
    pub(crate) cells_run_or_cached: usize,
    /// What was compiled.
    pub(crate) compiled: Compilation,
    /// Compiling it.
    pub(crate) compile_time: Duration,
    /// Running the cells.
    pub(crate) run_time: Duration,
    /// The modules of the cells that do not compile (now or in the build that cached it).
    pub(crate) compile_failed: HashSet<String>,
}

/// A cell's outcome before it is shown: what it came to and from where.
struct Got {
    stored: Stored,
    source: Source,
}

/// Resolves every planned cell: cache hits are taken, the rest compiled and run (GPU cells
/// bundled instead, when bundling), outcomes worth keeping cached.
pub(crate) fn resolve(
    root: &Path,
    config: &Config,
    docs: &[Document],
    plan: &Plan,
    gpu: &GpuCells,
) -> Result<Resolved, Error> {
    let cache_dir = root.join(&config.cache_dir);
    let cache_error = |source| Error::Cache {
        path: cache_dir.clone(),
        source,
    };
    let cache = Cache::open(&cache_dir).map_err(cache_error)?;
    let mut got: HashMap<&str, Got> = HashMap::new();
    let mut misses = Vec::new();
    let mut bundled = Vec::new();
    for f in &plan.cells {
        let Some(key) = &f.key else { continue };
        if gpu.bundles(f) {
            bundled.push(f);
        } else if let Some(entry) = cache.get(key) {
            let source = Source::Cached(entry.ran_ms.map(Duration::from_millis));
            let stored = entry.stored;
            got.insert(&f.module, Got { stored, source });
        } else {
            misses.push(f);
        }
    }
    let cached = got.len();
    let (mut prelude_errors, mut compiled, mut compile_time, mut run_time) = Default::default();
    let mut ran = 0;
    if !misses.is_empty() || !bundled.is_empty() {
        let cached_compile_failure = |f: &PlannedCell| {
            got.get(f.module.as_str())
                .is_some_and(|g| g.stored.outcome.failure() == Some(FailureKind::Compile))
        };
        let wanted: Vec<&PlannedCell> = misses.iter().chain(&bundled).copied().collect();
        let build = build::compile(
            root,
            config,
            docs,
            plan,
            cached_compile_failure,
            &wanted,
            gpu.compiled(),
        )?;
        let mut jobs = Vec::new();
        let mut to_bundle = Vec::new();
        for f in &wanted {
            if let Some(failure) = build.failure(f) {
                let (stored, source) = (failure.clone(), Source::Compiled);
                got.insert(&f.module, Got { stored, source });
                continue;
            }
            let secs = plan.block(f).options.timeout.unwrap_or(config.timeout);
            match &f.freeze {
                Some(at) if gpu.bundles(f) => {
                    let Ok(freeze) = at.path.strip_prefix(root) else {
                        return Err(BundleError::FreezeOutside(at.path.clone()).into());
                    };
                    to_bundle.push(BundledCell {
                        module: f.module.clone(),
                        chapter: docs[f.doc].source.clone(),
                        line: plan.block(f).fence_line,
                        timeout_s: secs,
                        freeze: freeze.to_path_buf(),
                        source: at.source.clone(),
                    });
                }
                _ => jobs.push(Job {
                    module: f.module.clone(),
                    timeout: Duration::from_secs(secs),
                }),
            }
        }
        gpu.write_bundle(root, config, &build, to_bundle)?;
        let (outcomes, took) = build.run(root, config, &jobs)?;
        ran = outcomes.len();
        for f in &misses {
            if let Some((stored, elapsed)) = outcomes.get(&f.module) {
                let (stored, source) = (stored.clone(), Source::Ran(*elapsed));
                got.insert(&f.module, Got { stored, source });
            }
        }
        keep_in_cache(&cache, plan, &misses, &got).map_err(cache_error)?;
        (prelude_errors, compiled) = (build.prelude_errors, build.compiled);
        (compile_time, run_time) = (build.compile_time, took);
    }
    let live: HashSet<String> = plan.cells.iter().filter_map(|f| f.key.clone()).collect();
    cache.retain(&live).map_err(cache_error)?;
    drop(cache);

    let compile_failed = got
        .iter()
        .filter(|(_, g)| g.stored.outcome.failure() == Some(FailureKind::Compile))
        .map(|(module, _)| module.to_string())
        .collect();
    let mut problems = Vec::new();
    let cells = plan
        .cells
        .iter()
        .map(|f| {
            let c = plan.block(f);
            let chapter = &docs[f.doc].source;
            let got = got.remove(f.module.as_str());
            if let (Some(at), Some(got)) = (&f.freeze, &got) {
                problems.extend(gpu.freeze_output(at, &got.stored));
            }
            let shared = Shared {
                errors: prelude_errors.get(&f.doc).map_or(&[], Vec::as_slice),
                params: &plan.params[f.doc],
            };
            resolve_cell(f, c, chapter, got, shared, gpu)
        })
        .collect();
    Ok(Resolved {
        cells,
        problems,
        cached,
        ran,
        cells_run_or_cached: cached + misses.len(),
        compiled,
        compile_time,
        run_time,
        compile_failed,
    })
}

/// Keeps what is worth keeping: outputs, and the failures that are a cell's content (an
/// expected failure that would happen again).
fn keep_in_cache(
    cache: &Cache,
    plan: &Plan,
    misses: &[&PlannedCell],
    got: &HashMap<&str, Got>,
) -> std::io::Result<()> {
    for f in misses {
        let (Some(key), Some(got)) = (&f.key, got.get(f.module.as_str())) else {
            continue;
        };
        let keep = match got.stored.outcome.failure() {
            None => true,
            Some(kind) => plan.block(f).options.expect_fail && kind.is_deterministic(),
        };
        if keep {
            let ran = match got.source {
                Source::Ran(t) => t,
                _ => Duration::ZERO,
            };
            cache.put(key, &Entry::new(got.stored.clone(), ran))?;
        }
    }
    Ok(())
}

/// What a chapter's cells share, as its prelude and parameters cells show it.
struct Shared<'a> {
    /// Compile errors in the shared code: chapter line and text.
    errors: &'a [(usize, String)],
    /// The chapter's parameters with this build's values.
    params: &'a [Param],
}

/// One cell's resolution, from exactly one of: its errors before it ran, the compile errors in
/// its lines of the chapter's shared code, its outcome in this build (cache or run), or its
/// freeze.
fn resolve_cell(
    f: &PlannedCell,
    c: &CellBlock,
    chapter: &str,
    got: Option<Got>,
    shared: Shared,
    gpu: &GpuCells,
) -> Resolution {
    let mut problems = Vec::new();
    let (shown, source) = if !f.errors.is_empty() {
        let shown = failed("bad cell options", f.errors.join("\n"));
        (shown, Source::NotRun)
    } else if let Some(why) = &f.blocked {
        (failed("not run", why.clone()), Source::NotRun)
    } else if c.options.prelude || c.options.parameters {
        let lines = c.code_line..c.code_line + c.code.lines().count();
        let errors: Vec<&str> = (shared.errors.iter())
            .filter(|(line, _)| lines.contains(line))
            .map(|(_, text)| text.as_str())
            .collect();
        let shown = if !errors.is_empty() {
            let what = if c.options.prelude {
                "prelude"
            } else {
                "parameters"
            };
            failed(&format!("the {what} did not compile"), errors.join("\n\n"))
        } else if c.options.parameters {
            Shown::Output(Stored::of(Outcome::Value {
                kind: OutputKind::Table,
                body: parameters_table(shared.params),
            }))
        } else {
            Shown::Nothing
        };
        (shown, Source::Shared)
    } else if let Some(got) = got {
        (shown_for(c, got.stored), got.source)
    } else if let Some(at) = &f.freeze {
        let (shown, source, problem) = gpu.frozen(at, chapter, c.fence_line);
        problems.extend(problem);
        (shown, source)
    } else {
        let shown = failed("not run", "the cell was not run".into());
        (shown, Source::NotRun)
    };
    if let Shown::Failure {
        label,
        message,
        expected: false,
        ..
    } = &shown
    {
        let first = message.lines().next().unwrap_or_default();
        problems.push(Problem {
            file: chapter.to_string(),
            line: first_line_number(message, chapter).unwrap_or(c.fence_line),
            reason: format!("{label}: {first}"),
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

fn failed(label: &str, message: String) -> Shown {
    Shown::Failure {
        label: label.into(),
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
            return failed(
                "expected a failure",
                "this cell is marked `expect-fail` but it succeeded".into(),
            );
        }
        return Shown::Output(stored);
    };
    let label = kind.label();
    let mut message = message.clone();
    if !stored.stderr.is_empty() && *kind != FailureKind::Compile {
        message = format!("{message}\n\nstderr:\n{}", stored.stderr.trim_end());
    }
    Shown::Failure {
        label: if expected {
            format!("expected failure ({label})")
        } else {
            label.into()
        },
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
