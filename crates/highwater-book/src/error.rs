//! The crate's one error type. The loaders fail on an input (a file unreadable, refused or
//! malformed, named); the chapters' helpers fail on those and on what they compute with them
//! (a dry run refused, a figure that would not draw) or on a claim of the chapter's that its
//! inputs no longer bear out. A cell returns it as any error: the build shows it at the cell.

use highwater::InputError;

/// What went wrong computing one of the book's outputs, naming the file where there is one.
#[derive(Debug, thiserror::Error)]
pub enum BookError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file, as the book names it.
        path: String,
        /// Why not.
        source: std::io::Error,
    },
    /// A recipe or incident file refused, with its file, line and field.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A graphrace configuration refused, with its file and line.
    #[error(transparent)]
    Config(#[from] graphrace::ConfigError),
    /// Any other input that does not parse: the file, then the parser's reason.
    #[error("{path}: {reason}")]
    Parse {
        /// The file, as the book names it.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// An input refused by a parser whose message already names the file.
    #[error("{0}")]
    Refused(String),
    /// An autotune cache that could not be read or installed for a dry run.
    #[error(transparent)]
    Autotune(#[from] dryrun::AutotuneError),
    /// A recorded run the dry run cannot replay.
    #[error(transparent)]
    Replay(#[from] situ::dry::ReplayError),
    /// A recorded run the simulator cannot be held to.
    #[error(transparent)]
    Conform(#[from] highwater::conform::ConformError),
    /// A reservation the simulator's pool refused where the chapter needs it to succeed.
    #[error(transparent)]
    Reserve(#[from] highwater::pool::ReserveFailure),
    /// A program of Part II's that the host could not have run.
    #[error(transparent)]
    Capture(#[from] graphrace::CaptureError),
    /// A claim the chapter's prose makes that its inputs no longer bear out: the page would
    /// say something false, so the cell fails instead.
    #[error("{0}")]
    Claim(String),
}

impl From<String> for BookError {
    fn from(claim: String) -> BookError {
        BookError::Claim(claim)
    }
}

impl From<&str> for BookError {
    fn from(claim: &str) -> BookError {
        BookError::Claim(claim.to_string())
    }
}
