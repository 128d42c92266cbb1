//! The errors that stop a build, or a bundle's run, as a whole. A cell's own failure is not one
//! of them: it is an [`crate::outcome::Outcome`], shown at its lines.

use std::path::PathBuf;

/// Why [`crate::process`] could not build the book at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `[preprocessor.cells]` asks for something the engine refuses.
    #[error("invalid [preprocessor.cells] configuration: {0}")]
    Config(String),
    /// The output cache could not be opened, read or written.
    #[error("cell cache at {path}: {source}")]
    Cache {
        /// The cache folder.
        path: PathBuf,
        /// The failed operation's error.
        source: std::io::Error,
    },
    /// The output store could not be rewritten.
    #[error("output store at {path}: {source}")]
    Store {
        /// The store folder.
        path: PathBuf,
        /// The failed operation's error.
        source: std::io::Error,
    },
    /// The generated crate could not be written.
    #[error("cannot write the cell crate at {path}: {source}")]
    Crate {
        /// The crate's folder.
        path: PathBuf,
        /// The failed write's error.
        source: std::io::Error,
    },
    /// The cells' process could not be started.
    #[error("cannot run the cells: {0}")]
    Run(std::io::Error),
    /// A chapter could not be exported as a project (see [`crate::export`]).
    #[error("cannot export {chapter}: {reason}")]
    Export {
        /// The chapter asked for.
        chapter: String,
        /// Why.
        reason: String,
    },
    /// The GPU cells' bundle could not be written.
    #[error("cannot write the GPU-cell bundle: {0}")]
    Bundle(#[from] BundleError),
}

/// Why a GPU-cell bundle could not be written or run (see [`crate::bundle`]).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file of the bundle could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operation's error.
        source: std::io::Error,
    },
    /// The manifest does not parse, or asks for something a bundle may not do.
    #[error("{path} is not a GPU-cell bundle: {reason}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Nothing names a GPU on this machine.
    #[error(
        "no CUDA GPU here (`nvidia-smi` names none); pass --gpu-name NAME if its tool is elsewhere"
    )]
    NoGpu,
    /// The bundled cells' process could not be started.
    #[error("cannot run the bundled cells: {0}")]
    Run(std::io::Error),
    /// The working directory is not the book's root.
    #[error("{0} is not a book's root (no book.toml): run-bundle runs from there")]
    NotABook(PathBuf),
    /// `freeze-dir` points outside the book.
    #[error(
        "freeze-dir {0} is outside the book: a bundle writes freezes only inside the book it \
         was built from"
    )]
    FreezeOutside(PathBuf),
}
