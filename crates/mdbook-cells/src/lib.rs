//! `mdbook-cells`: an mdbook preprocessor whose ```` ```cell ```` blocks are Rust that runs.
//!
//! A build goes through four stages, one file each: **plan** (parse every chapter, number its
//! figures and tables, key every cell by a hash of its inputs) → **build** (compile the cells as
//! one generated crate, run those that need it in one child process) → **resolve** (each cell's
//! outcome from exactly one of the cache, this build's run or a GPU cell's freeze, with its
//! problems) → **pages** (a pure render of every chapter). [`gpu`] holds every branch that
//! depends on what the build does with GPU cells. [`process`] is that walk over plain strings;
//! [`Cells`] adapts it to mdbook's preprocessor protocol.
//!
//! Below the stages: the shared types ([`types`], [`outcome`], [`error`]) and the parts they
//! use (`parse`, `params`, `config`, `cache`, `key`, `compile`, `execute`, `render`,
//! `directive`, `report`, `freeze`, `bundle`). Beside them, the commands that work outside a
//! build: [`export`] (a chapter as a cargo project) and [`lint`] (rustfmt and clippy over the
//! cells, `mdbook-cells fmt`). Nothing imports back up.

pub mod bundle;
pub mod cache;
mod compile;
pub mod config;
pub mod error;
mod execute;
pub mod export;
pub mod freeze;
mod key;
pub mod lint;
pub mod outcome;
pub mod parse;
pub mod render;
pub mod types;

mod build;
mod directive;
mod gpu;
mod pages;
mod params;
mod plan;
mod quick;
mod report;
mod resolve;

pub use error::Error;
pub use types::{CellEntry, Compilation, Document, Problem, Report, Source, Status};

use config::Config;
use gpu::GpuCells;
use render::Shown;
use std::path::Path;

/// Runs every cell of `docs` (cached where possible) and rewrites their content with the
/// outputs. Failures are rendered in place and listed in the report; the caller decides
/// whether they fail the build.
pub fn process(root: &Path, config: &Config, docs: &mut [Document]) -> Result<Report, Error> {
    let gpu = GpuCells::of(config);
    gpu.clear_bundle(root)?;
    let plan = plan::plan(root, config, docs, gpu.compiled());
    let resolved = resolve::resolve(root, config, docs, &plan, &gpu)?;
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
                Shown::Failure { label, .. } => Status::Failed(label.clone()),
                Shown::Note(_) => Status::Failed("no output".into()),
                _ => Status::Ok,
            },
        })
        .collect();
    let mut problems = plan.problems.clone();
    problems.extend(resolved.problems);
    if config.lint == Some(true) {
        let chapters: Vec<(String, &[parse::Segment])> = (docs.iter())
            .zip(&plan.chapters)
            .map(|(d, segments)| (d.source.clone(), segments.as_slice()))
            .collect();
        problems.extend(lint::fmt_problems(root, &chapters));
        let broken = resolved.compile_failed.iter().map(String::as_str).collect();
        problems.extend(lint::clippy_problems(
            root,
            config,
            docs,
            &plan,
            &broken,
            gpu.compiled(),
        ));
    }
    problems.extend(pages::render_pages(
        docs,
        &plan,
        &resolved.cells,
        config.fold_code_over,
        &config.preprocessor_command(),
    ));
    let report = Report {
        problems,
        cells: resolved.cells_run_or_cached,
        cached: resolved.cached,
        ran: resolved.ran,
        compiled: resolved.compiled,
        compile_time: resolved.compile_time,
        run_time: resolved.run_time,
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
