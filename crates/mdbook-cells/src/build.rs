//! Stage 2, build: the book's cells compiled as one crate, and the ones asked for run in one
//! child process.

use crate::compile::{self, CellCrate, CellSource, LineMap};
use crate::config::Config;
use crate::error::Error;
use crate::execute;
use crate::outcome::{FailureKind, Outcome, Stored};
use crate::plan::{Plan, PlannedCell};
use crate::quick::{self, RustcCall};
use crate::types::{Compilation, Document};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Each run cell's outcome and how long it ran, by module.
pub(crate) type Ran = HashMap<String, (Stored, Duration)>;

/// The cell crate, compiled.
pub(crate) struct Build {
    krate: CellCrate,
    /// The cells' binary, unless the crate as a whole failed.
    binary: Option<PathBuf>,
    /// Each cell that did not compile, by module, with why.
    failures: HashMap<String, Stored>,
    /// The compile errors found in what a chapter's cells share (parameters, prelude), by
    /// chapter: each one's chapter line and text.
    pub(crate) prelude_errors: HashMap<usize, Vec<(usize, String)>>,
    /// What was compiled.
    pub(crate) compiled: Compilation,
    /// How long compiling took.
    pub(crate) compile_time: Duration,
}

/// Compiles every runnable cell of the book as one crate (so its module set is stable between
/// builds), except those whose cached outcome is a compile failure (they would fail again).
/// `wanted` are the cells this build needs an outcome for: their compile errors are read.
/// `with_gpu`: the GPU cells' dependencies are in the crate.
pub(crate) fn compile(
    root: &Path,
    config: &Config,
    docs: &[Document],
    plan: &Plan,
    cached_compile_failure: impl Fn(&PlannedCell) -> bool,
    wanted: &[&PlannedCell],
    with_gpu: bool,
) -> Result<Build, Error> {
    let started = Instant::now();
    let cache_dir = root.join(&config.cache_dir);
    let recording = cache_dir.join("quick.json");
    // A few cells of a build that neither lints the crate nor bundles GPU cells: compiled
    // alone, if the last full build left its rustc call for these dependencies.
    let quick = (config.lint != Some(true) && !with_gpu && wanted.len() <= quick::MOST_CELLS)
        .then(|| RustcCall::load(&recording, &plan.environment))
        .flatten()
        .and_then(|call| {
            let sources = cell_sources(docs, plan, |f| wanted.iter().any(|w| w.module == f.module));
            let dir = cache_dir.join("quick");
            let krate = CellCrate::write_sources(&dir, &cache_dir.join("target"), &sources).ok()?;
            let compiled = krate.compile(Some(&call));
            // Anything the cells are not to blame for (a dependency cleaned away): the full
            // build decides.
            compiled.global.is_none().then_some((krate, compiled))
        });
    let (krate, compiled, what) = match quick {
        Some((krate, compiled)) => {
            let alone = krate.line_maps().len();
            (krate, compiled, Compilation::Alone(alone))
        }
        None => {
            let krate = write_crate(
                root,
                config,
                docs,
                plan,
                |f| !cached_compile_failure(f),
                with_gpu,
            )?;
            let compiled = krate.compile(None);
            if compiled.binary.is_some()
                && let Some(call) = RustcCall::recorded(&cache_dir.join("crate"), &plan.environment)
            {
                // Only a speed-up: a build that cannot keep it compiles in full next time.
                let _ = call.save(&recording);
            }
            (krate, compiled, Compilation::Crate)
        }
    };
    let compile_time = started.elapsed();

    let mut failures = HashMap::new();
    let mut prelude_errors = HashMap::new();
    for f in wanted {
        let failure = if let Some(global) = &compiled.global {
            Outcome::failed(FailureKind::Build, global.clone())
        } else if let Some(diags) = compiled.errors.get(&f.module) {
            let (in_prelude, in_cell): (Vec<_>, Vec<_>) = diags.iter().partition(|d| d.in_prelude);
            if !in_prelude.is_empty() {
                let errors = in_prelude.iter().map(|d| (d.line, d.rendered.clone()));
                prelude_errors.insert(f.doc, errors.collect());
            }
            let text: Vec<&str> = if in_cell.is_empty() {
                vec!["this chapter's prelude did not compile (its error is shown there)"]
            } else {
                in_cell.iter().map(|d| d.rendered.as_str()).collect()
            };
            Outcome::failed(FailureKind::Compile, text.join("\n\n"))
        } else {
            continue;
        };
        failures.insert(f.module.clone(), Stored::of(failure));
    }
    Ok(Build {
        krate,
        binary: compiled.binary,
        failures,
        prelude_errors,
        compiled: what,
        compile_time,
    })
}

/// Writes the cell crate: one module for each runnable cell that `include` keeps.
pub(crate) fn write_crate(
    root: &Path,
    config: &Config,
    docs: &[Document],
    plan: &Plan,
    include: impl Fn(&PlannedCell) -> bool,
    with_gpu: bool,
) -> Result<CellCrate, Error> {
    let cache_dir = root.join(&config.cache_dir);
    let sources = cell_sources(docs, plan, include);
    let crate_dir = cache_dir.join("crate");
    CellCrate::write(
        &crate_dir,
        &cache_dir.join("target"),
        &compile::cell_crate_dependencies(root, config, with_gpu),
        &config.profile,
        &sources,
        Some(&root.join("Cargo.lock")),
    )
    .map_err(|source| Error::Crate {
        path: crate_dir.clone(),
        source,
    })
}

/// The code of each runnable cell that `include` keeps, as the crate's modules.
fn cell_sources(
    docs: &[Document],
    plan: &Plan,
    include: impl Fn(&PlannedCell) -> bool,
) -> Vec<CellSource> {
    (plan.cells.iter())
        .filter(|f| f.key.is_some() && include(f))
        .map(|f| {
            let c = plan.block(f);
            CellSource {
                module: f.module.clone(),
                chapter: docs[f.doc].source.clone(),
                prelude: plan.preludes[f.doc].clone(),
                code: c.code.clone(),
                code_line: c.code_line,
                last_line: c.last_code_line(),
            }
        })
        .collect()
}

impl Build {
    /// Why `cell` did not compile, if it did not.
    pub(crate) fn failure(&self, cell: &PlannedCell) -> Option<&Stored> {
        self.failures.get(&cell.module)
    }

    /// The compiled cells' binary.
    pub(crate) fn binary(&self) -> Option<&Path> {
        self.binary.as_deref()
    }

    /// Where the lines of `modules` came from, to place a panic in its chapter.
    pub(crate) fn line_maps<'a>(
        &self,
        modules: impl Iterator<Item = &'a str>,
    ) -> BTreeMap<String, LineMap> {
        modules
            .filter_map(|m| Some((m.to_string(), self.krate.line_maps().get(m)?.clone())))
            .collect()
    }

    /// Runs `jobs` (cells that compiled) from the book's root: each one's outcome and how long
    /// it ran, by module, and how long they all took.
    pub(crate) fn run(
        &self,
        root: &Path,
        config: &Config,
        jobs: &[execute::Job],
    ) -> Result<(Ran, Duration), Error> {
        let (Some(binary), false) = (&self.binary, jobs.is_empty()) else {
            return Ok((HashMap::new(), Duration::ZERO));
        };
        let started = Instant::now();
        let results = root.join(&config.cache_dir).join("results");
        let ran = execute::run_all(binary, root, &results, jobs, config.output_limit)
            .map_err(Error::Run)?;
        let outcomes = ran
            .into_iter()
            .map(|(module, ran)| {
                let elapsed = ran.elapsed;
                let stored = ran.into_stored(|m| self.krate.map_panic_location(m));
                (module, (stored, elapsed))
            })
            .collect();
        Ok((outcomes, started.elapsed()))
    }
}
