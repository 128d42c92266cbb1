//! What a build does with the cells marked `gpu`: show their freezes, run them here and freeze
//! their outputs, or compile them into a bundle for a GPU box (see [`crate::freeze`] and
//! [`crate::bundle`]). Every branch that depends on it is here, as methods of the one value
//! that says which: [`GpuMode`], made from the config. Below the stages: it knows freezes and
//! bundles, not the plan.

use crate::bundle::{self, BundledCell};
use crate::config::Config;
use crate::error::{BundleError, Error};
use crate::freeze::{self, FreezeAt};
use crate::lines::LineMap;
use crate::outcome::Stored;
use crate::types::{Problem, Shown, Source};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a build does with the GPU cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GpuMode {
    /// Shows their freezes (no GPU runs asked for, or no GPU here).
    Frozen,
    /// Runs them on this machine's GPU, named so, and freezes their outputs.
    Run(String),
    /// Compiles them into a bundle for a GPU box, in this folder.
    Bundle(PathBuf),
}

impl GpuMode {
    /// The environment wins over `book.toml`; a bundle over GPU runs.
    pub(crate) fn of(config: &Config) -> GpuMode {
        let bundle = std::env::var_os("MDBOOK_CELLS_GPU_BUNDLE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| config.gpu_bundle.clone());
        if let Some(dir) = bundle {
            return GpuMode::Bundle(dir);
        }
        freeze::requested(config.gpu)
            .then(|| {
                config
                    .gpu_name
                    .clone()
                    .or_else(|| provenance::gpu_field("name"))
            })
            .flatten()
            .map_or(GpuMode::Frozen, GpuMode::Run)
    }

    /// Whether GPU cells are compiled in this build (to run here or to be bundled).
    pub(crate) fn compiled(&self) -> bool {
        !matches!(self, GpuMode::Frozen)
    }

    /// Whether a compiled cell with `freeze` (a GPU cell) goes into the bundle instead of being
    /// run or taken from the cache.
    pub(crate) fn bundles(&self, freeze: Option<&FreezeAt>) -> bool {
        matches!(self, GpuMode::Bundle(_)) && freeze.is_some()
    }

    /// Removes the previous bundle, so that a build whose GPU cells do not compile leaves none
    /// behind to be run by mistake.
    pub(crate) fn clear_bundle(&self, root: &Path) -> Result<(), BundleError> {
        match self {
            GpuMode::Bundle(dir) => bundle::clear(&root.join(dir)),
            _ => Ok(()),
        }
    }

    /// Writes the bundle of `cells` (GPU cells that compiled into `binary`; `lines` place their
    /// panics; the book's `output_limit` holds there too), when bundling.
    pub(crate) fn write_bundle(
        &self,
        root: &Path,
        output_limit: usize,
        binary: Option<&Path>,
        lines: &BTreeMap<String, LineMap>,
        cells: Vec<BundledCell>,
    ) -> Result<(), Error> {
        let (GpuMode::Bundle(dir), Some(binary)) = (self, binary) else {
            return Ok(());
        };
        if cells.is_empty() {
            return Ok(());
        }
        let manifest = bundle::Bundle {
            command: bundle::command(dir),
            output_limit,
            lines: lines.clone(),
            cells,
        };
        bundle::write(&root.join(dir), binary, &manifest)?;
        Ok(())
    }

    /// Freezes the output of a GPU cell that ran here and succeeded, unless an identical freeze
    /// exists; a freeze that cannot be written is a problem.
    pub(crate) fn freeze_output(&self, at: &FreezeAt, stored: &Stored) -> Option<Problem> {
        let GpuMode::Run(gpu) = self else {
            return None;
        };
        if stored.is_failure() {
            return None;
        }
        let e = freeze::record(&at.path, &at.source, gpu, freeze::COMMAND, stored).err()?;
        Some(Problem {
            file: at.path.display().to_string(),
            line: 0,
            reason: format!("cannot write the GPU cell's freeze: {e}"),
        })
    }

    /// What the page shows for a GPU cell that did not run in this build: its freeze, with a
    /// problem when it is stale or missing (none while bundling: the bundle remakes it).
    pub(crate) fn frozen(
        &self,
        at: &FreezeAt,
        chapter: &str,
        line: usize,
    ) -> (Shown, Source, Option<Problem>) {
        let bundling = matches!(self, GpuMode::Bundle(_));
        let problem = |reason: String| {
            (!bundling).then(|| Problem {
                file: chapter.to_string(),
                line,
                reason,
            })
        };
        match freeze::read(&at.path) {
            Ok(f) => {
                let stale = f.source != at.source;
                let problem = stale
                    .then(|| {
                        problem(format!(
                            "the GPU cell's frozen output ({}) is stale: its code or inputs \
                             changed since it ran on {} at {}; {}",
                            at.path.display(),
                            f.gpu,
                            f.date,
                            how_to_freeze()
                        ))
                    })
                    .flatten();
                let shown = Shown::Frozen {
                    badge: f.badge(),
                    stored: f.output,
                    stale,
                };
                let source = Source::Frozen {
                    gpu: f.gpu,
                    date: f.date,
                    command: f.command,
                    stale,
                };
                (shown, source, problem)
            }
            Err(why) => {
                let problem = problem(format!(
                    "the GPU cell {why} at {}; {}",
                    at.path.display(),
                    how_to_freeze()
                ));
                let note = Shown::Note(format!(
                    "This cell needs a GPU run; no recorded output exists for it yet ({}).",
                    at.path.display()
                ));
                (note, Source::NeverFrozen, problem)
            }
        }
    }
}

/// How to make a missing or stale freeze.
fn how_to_freeze() -> String {
    format!(
        "run `{}` on a machine with a CUDA GPU, or build a bundle for one without Rust: `{}`",
        freeze::COMMAND,
        bundle::command(Path::new("DIR"))
    )
}
