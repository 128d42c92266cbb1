//! `mdbook-cells`: an mdbook preprocessor whose ```` ```cell ```` blocks are Rust that runs.
//!
//! [`process`] is the build, four stages called in turn, one file each, each taking the one
//! before's value (and in a build that lints, `lint` before the pages). Every stage reads the
//! build's `Context`, made once: the book's root, its config, what it does with GPU cells.
//!
//! ```text
//! plan::plan(docs)          -> Plan      parse every chapter, number its figures and tables,
//!                                        key every cell by a hash of its inputs
//! build::build(&plan)       -> Built     each cell's outcome from the cache or the committed
//!                                        store, or compiled (one generated crate) and run now
//!                                        each in a process of its own; the store verified or
//!                                        refreshed
//! resolve::resolve(built)   -> Resolved  what each cell shows: its outcome, a GPU cell's
//!                                        freeze, or why it did not run; with its problems
//! lint::problems(&plan, ..)              a build that lints: rustfmt's check, unused prelude
//!                                        items, clippy over the cells that compiled
//! pages::render_pages(&resolved)         a pure render of every chapter (`render` writes each
//!                                        cell)
//! ```
//!
//! `gpu` holds every branch that depends on what the build does with GPU cells (show their
//! freezes, run them here, or bundle them); the stages ask it. [`Cells`] adapts [`process`] to
//! mdbook's preprocessor protocol. No stage imports a later one, and `lint` imports no stage but
//! `plan` (a test reads the `use` lines).
//!
//! Below the stages: the shared types ([`types`], [`outcome`], [`error`]), the build's
//! `context`, and the parts they use (`parse`, `params`, `shared`, `config`, `gpu`, `cache`,
//! `store`, `key`, `compile`, `execute`, `lines`, `directive`, `report`, `freeze`, `bundle`).
//! Beside them, the commands that work outside a build: [`export`] (a chapter as a cargo
//! project) and [`lint`]'s `mdbook-cells fmt` (every cell as rustfmt writes it). Nothing
//! imports back up.

pub mod bundle;
pub mod cache;
mod compile;
pub mod config;
pub mod error;
mod execute;
pub mod export;
pub mod freeze;
mod key;
mod lines;
pub mod lint;
pub mod outcome;
pub mod parse;
pub mod render;
pub mod store;
pub mod types;

mod build;
mod context;
mod directive;
mod gpu;
mod pages;
mod params;
mod plan;
mod quick;
mod report;
mod resolve;
mod shared;

pub use error::Error;
pub use types::{CellEntry, Compilation, Document, Problem, Report, Source, Status, StoreNote};

use config::Config;
use context::Context;
use outcome::Fault;
use std::path::Path;
use types::Shown;

/// Runs every cell of `docs` (cached where possible) and rewrites their content with the
/// outputs. Failures are rendered in place and listed in the report; the caller decides
/// whether they fail the build.
pub fn process(root: &Path, config: &Config, docs: &mut [Document]) -> Result<Report, Error> {
    let ctx = Context::new(root, config);
    ctx.gpu.clear_bundle(root)?;
    let plan = plan::plan(&ctx, docs);
    let built = build::build(&ctx, docs, &plan)?;
    let resolved = resolve::resolve(&ctx, docs, &plan, built);
    let entries = plan
        .cells
        .iter()
        .zip(&resolved.cells)
        .map(|(f, r)| CellEntry {
            chapter: docs[f.doc].source.clone(),
            line: plan.block(f).fence_line,
            id: plan.block(f).options.id.clone(),
            gpu: plan.block(f).options.gpu,
            source: r.source.clone(),
            status: match &r.shown {
                Shown::Failure { expected: true, .. } => Status::ExpectedFailure,
                Shown::Failure { fault, .. } => Status::Failed(*fault),
                Shown::Note(_) => Status::Failed(Fault::NeverRecorded),
                _ => Status::Ok,
            },
        })
        .collect();
    let mut problems = plan.problems.clone();
    problems.extend(resolved.problems);
    if config.lint == Some(true) {
        let compile_failed = &resolved.stats.compile_failed;
        problems.extend(lint::problems(&ctx, docs, &plan, compile_failed));
    }
    problems.extend(pages::render_pages(&ctx, docs, &plan, &resolved.cells));
    let stats = resolved.stats;
    let report = Report {
        problems,
        cells: stats.cells_run_or_cached,
        cached: stats.cached,
        stored: stats.stored,
        store: resolved.store,
        ran: stats.ran,
        compiled: stats.compiled,
        compile_time: stats.compile_time,
        run_time: stats.run_time,
        entries,
    };
    // Last: the report page shows every problem, its own pages' included.
    for d in 0..docs.len() {
        if docs[d].content.contains(pages::REPORT_MARK) {
            let html = report::render(&report, docs, &docs[d].html_path);
            docs[d].content = docs[d].content.replace(pages::REPORT_MARK, &html);
        }
    }
    Ok(report)
}

/// The mdbook side: reads `[preprocessor.cells]`, runs [`process`] over the book's chapters.
pub struct Cells;

impl mdbook_preprocessor::Preprocessor for Cells {
    fn name(&self) -> &str {
        "cells"
    }

    fn run(
        &self,
        ctx: &mdbook_preprocessor::PreprocessorContext,
        mut book: mdbook_preprocessor::book::Book,
    ) -> mdbook_preprocessor::errors::Result<mdbook_preprocessor::book::Book> {
        let mut config: Config = ctx.config.get("preprocessor.cells")?.unwrap_or_default();
        let src = &ctx.config.book.src;
        config.validate(&ctx.root, src)?;
        let strict = config.strict
            || std::env::var("MDBOOK_CELLS_STRICT").is_ok_and(|v| v == "1" || v == "true");
        // Strict builds hold the cells to the same standard as the project's code.
        config.lint = Some(config.lint.unwrap_or(strict));
        config.store_mode = Some(store::StoreMode::of(config.store_mode).map_err(Error::Config)?);

        let mut docs = Vec::new();
        book.for_each_chapter_mut(|ch| {
            if let Some(path) = &ch.path {
                docs.push(Document {
                    source: src.join(path).display().to_string(),
                    html_path: path.with_extension("html").display().to_string(),
                    number: ch.number.as_ref().map(|n| n.to_string()),
                    title: ch.name.clone(),
                    content: std::mem::take(&mut ch.content),
                });
            }
        });
        let report = process(&ctx.root, &config, &mut docs)?;
        let mut pages = docs.into_iter();
        book.for_each_chapter_mut(|ch| {
            if ch.path.is_some()
                && let Some(doc) = pages.next()
            {
                ch.content = doc.content;
            }
        });

        eprintln!("mdbook-cells: {report}");
        for p in &report.problems {
            eprintln!("mdbook-cells: {p}");
        }
        if strict && !report.problems.is_empty() {
            let list: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
            anyhow::bail!(
                "{} cell(s) failed in strict mode:\n{}",
                list.len(),
                list.join("\n")
            );
        }
        Ok(book)
    }

    fn supports_renderer(&self, renderer: &str) -> mdbook_preprocessor::errors::Result<bool> {
        // `mdbook test` would compile the rendered code blocks as doctests; cells are checked
        // by running them instead.
        Ok(renderer != "test")
    }
}

#[cfg(test)]
mod tests {
    /// The stages, in the order [`super::process`] calls them (`lint` only when the build
    /// lints), each with the parts that are its own: `render` writes the pages' markdown.
    const STAGES: [&[&str]; 5] = [
        &["plan"],
        &["build"],
        &["resolve"],
        &["lint"],
        &["pages", "render"],
    ];

    /// The modules of this crate that `module`'s code (not its comments) names.
    fn imports(module: &str) -> Vec<String> {
        let path = format!("{}/src/{module}.rs", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let mut names: Vec<String> = (text.lines())
            .filter(|l| !l.trim_start().starts_with("//"))
            .flat_map(|l| l.split("crate::").skip(1))
            // `crate::{a, b::c}` names `a` and `b`; `crate::a::…` names `a`. (A group over
            // several lines is not read: rustfmt keeps this crate's `use crate::{…}` on one.)
            .flat_map(|rest| match rest.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .collect(),
                None => vec![rest],
            })
            .map(|rest| {
                (rest.trim().chars())
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .filter(|name| !name.is_empty())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn no_stage_imports_a_later_one_and_no_part_imports_a_stage() {
        let stage_modules: Vec<&str> = STAGES.concat();
        let stage_of = |m: &str| STAGES.iter().position(|s| s.contains(&m));
        for (i, stage) in STAGES.iter().enumerate() {
            for module in *stage {
                let later: Vec<String> = (imports(module).into_iter())
                    .filter(|m| stage_of(m).is_some_and(|j| j > i))
                    .collect();
                assert!(later.is_empty(), "stage {module} imports later {later:?}");
            }
        }
        // `lint` runs after `resolve` but reads no stage but the plan: it never re-enters `build`.
        let lint: Vec<String> = (imports("lint").into_iter())
            .filter(|m| stage_modules.contains(&m.as_str()) && m != "plan")
            .collect();
        assert!(lint.is_empty(), "lint imports {lint:?}");
        let dir = format!("{}/src", env!("CARGO_MANIFEST_DIR"));
        let commands = ["lib", "main", "export"];
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let Some(part) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if path.extension().is_none_or(|e| e != "rs")
                || stage_modules.contains(&part)
                || commands.contains(&part)
            {
                continue;
            }
            let stages: Vec<String> = (imports(part).into_iter())
                .filter(|m| stage_modules.contains(&m.as_str()))
                .collect();
            assert!(stages.is_empty(), "part {part} imports stages {stages:?}");
        }
    }
}
