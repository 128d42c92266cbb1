//! GPU cells for a GPU box without a Rust toolchain: compiled here, run there.
//!
//! `MDBOOK_CELLS_GPU_BUNDLE=DIR mdbook build` (or `gpu-bundle = "DIR"`) compiles the book's GPU
//! cells with the rest, runs only the CPU cells, and writes to `DIR` the compiled cells, this
//! preprocessor's own binary and `bundle.json` (each GPU cell's module, timeout, freeze file and
//! the hash its freeze must carry). On the GPU box, from the book's root (the cells read the
//! book's files): `DIR/mdbook-cells run-bundle DIR` runs them through the same harness as a
//! build and writes their freezes, which then come back with the book. Such a freeze holds the
//! same output and hash as one from `MDBOOK_CELLS_GPU=1 mdbook build`; its badge names the two
//! commands that made it.
//!
//! A bundle build starts by removing the previous bundle, so a build whose GPU cells do not
//! compile leaves none behind to be run by mistake; those cells fail in place, and while
//! bundling a missing or stale freeze is no problem (it is what the bundle is for), so a strict
//! bundle build fails exactly when a GPU cell does not compile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::BundleError;
pub use crate::lines::LineMap;
use crate::lines::map_panic_location;
use crate::outcome::{Fault, Outcome};
use crate::{execute, freeze};

/// The file in a bundle folder that lists its cells.
const MANIFEST: &str = "bundle.json";
/// The compiled cells, in a bundle folder.
const CELLS: &str = "cells";
/// This preprocessor's binary, in a bundle folder.
const RUNNER: &str = "mdbook-cells";

/// A bundle's manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bundle {
    /// What a freeze's badge says made it: the two commands.
    pub command: String,
    /// The book's `output-limit`, which the run applies as a build would.
    pub output_limit: usize,
    /// The GPU cells, in book order.
    pub cells: Vec<BundledCell>,
    /// Where the bundled modules' lines came from, to place a panic in its chapter.
    pub lines: BTreeMap<String, LineMap>,
}

/// One GPU cell in a bundle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BundledCell {
    /// Its module in the compiled cells.
    pub module: String,
    /// The chapter's file and the cell's fence line, for messages.
    pub chapter: String,
    /// The cell's fence line.
    pub line: usize,
    /// Its timeout, in seconds.
    pub timeout_s: u64,
    /// The freeze file, relative to the book root.
    pub freeze: PathBuf,
    /// The hash the freeze carries (see [`freeze`]).
    pub source: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The two commands, as a badge names them; `dir` as the user wrote it.
pub fn command(dir: &Path) -> String {
    let dir = dir.display();
    format!("MDBOOK_CELLS_GPU_BUNDLE={dir} mdbook build; {dir}/{RUNNER} run-bundle {dir}")
}

/// Removes the bundle in `dir`, if any (only its own files: `dir` may hold others).
pub fn clear(dir: &Path) -> Result<(), BundleError> {
    for name in [MANIFEST, CELLS, RUNNER] {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(e)),
            _ => {}
        }
    }
    Ok(())
}

/// Writes the bundle: `binary` (the compiled cells, stripped of symbols where `strip` exists:
/// it travels), this process's own executable, and the manifest.
pub fn write(dir: &Path, binary: &Path, bundle: &Bundle) -> Result<(), BundleError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let cells = dir.join(CELLS);
    std::fs::copy(binary, &cells).map_err(io(&cells))?;
    // Optional: an unstripped binary runs the same, it is only larger.
    let _ = std::process::Command::new("strip").arg(&cells).status();
    let runner = dir.join(RUNNER);
    let me = std::env::current_exe().map_err(io(&runner))?;
    std::fs::copy(&me, &runner).map_err(io(&runner))?;
    let manifest = dir.join(MANIFEST);
    let text = serde_json::to_string_pretty(bundle).expect("a bundle serializes") + "\n";
    std::fs::write(&manifest, text).map_err(io(&manifest))
}

/// What running a bundle did.
#[derive(Debug, Default)]
pub struct BundleRun {
    /// Freeze files written (relative to the root).
    pub frozen: Vec<PathBuf>,
    /// `chapter:line: GPU cell failed: kind: message` for each cell that failed (not frozen).
    pub failed: Vec<String>,
}

/// Runs the bundle in `dir` on this machine's GPU with `root` (the book's root) as the working
/// directory, and writes the freeze of every cell that succeeded. `gpu_name` overrides
/// `nvidia-smi`.
pub fn run(dir: &Path, root: &Path, gpu_name: Option<String>) -> Result<BundleRun, BundleError> {
    if !root.join("book.toml").is_file() {
        return Err(BundleError::NotABook(root.to_path_buf()));
    }
    let manifest = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&manifest).map_err(io(&manifest))?;
    let bundle: Bundle = serde_json::from_str(&text).map_err(|e| BundleError::Manifest {
        path: manifest.clone(),
        reason: e.to_string(),
    })?;
    // The manifest says where each freeze goes: only ever inside the book.
    if let Some(cell) = bundle.cells.iter().find(|c| !inside(&c.freeze)) {
        return Err(BundleError::Manifest {
            path: manifest.clone(),
            reason: format!(
                "the freeze path {} of {}:{} leaves the book (absolute, or with `..`)",
                cell.freeze.display(),
                cell.chapter,
                cell.line
            ),
        });
    }
    let gpu = gpu_name
        .or_else(|| provenance::gpu_field("name"))
        .ok_or(BundleError::NoGpu)?;
    let jobs: Vec<execute::Job> = bundle
        .cells
        .iter()
        .map(|c| execute::Job {
            module: c.module.clone(),
            timeout: Duration::from_secs(c.timeout_s),
        })
        .collect();
    let ran = execute::run_all(
        &dir.join(CELLS),
        root,
        &dir.join("results"),
        &jobs,
        bundle.output_limit,
    )
    .map_err(BundleError::Run)?;
    let mut ran: BTreeMap<String, execute::Ran> = ran.into_iter().collect();
    let mut done = BundleRun::default();
    for cell in &bundle.cells {
        let failed = |kind: &str, message: &str| {
            let first = message.lines().next().unwrap_or_default();
            format!(
                "{}:{}: GPU cell failed: {kind}: {first}",
                cell.chapter, cell.line
            )
        };
        let Some(ran) = ran.remove(&cell.module) else {
            let label = Fault::NotRun.label();
            done.failed
                .push(failed(label, "the harness gave no result"));
            continue;
        };
        let stored = ran.into_stored(|m| map_panic_location(&bundle.lines, m));
        if let Outcome::Failed { kind, message } = &stored.outcome {
            done.failed.push(failed(Fault::Ran(*kind).label(), message));
            continue;
        }
        let path = root.join(&cell.freeze);
        match freeze::record(&path, &cell.source, &gpu, &bundle.command, &stored) {
            Ok(_) => done.frozen.push(cell.freeze.clone()),
            Err(e) => done.failed.push(failed(
                "freeze",
                &format!("cannot write {}: {e}", path.display()),
            )),
        }
    }
    Ok(done)
}

/// Whether a relative path stays under the folder it is taken from.
fn inside(path: &Path) -> bool {
    path.components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    }) && path.components().next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freeze_paths_stay_in_the_book() {
        assert!(inside(Path::new("repro/freeze/a/gpu-1.json")));
        for outside in ["/etc/passwd", "../x.json", "repro/../../x.json", ""] {
            assert!(!inside(Path::new(outside)), "{outside}");
        }
    }
}
