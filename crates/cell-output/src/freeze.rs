//! A GPU cell's freeze file (`<freeze-dir>/<chapter>/gpu-<n>.json`), as one type for the
//! engine that writes it and the book that reads it (feature `freeze`).
//!
//! mdbook-cells writes a freeze where a GPU ran the cell; a book's library may read one back,
//! say to check the recorded run against a simulator. The type lives here, below both, so the
//! reader need not link the engine, and a field renamed on one side is a compile error on the
//! other. Every field is required and no object takes a field it does not know: a freeze that
//! lacks one fails to read with the field named.

use serde::{Deserialize, Serialize};

/// One GPU cell's recorded output. `O` is how the output is held: the engine parses it into
/// its own outcome type; a reader takes it as it is stored, a [`StoredOutput`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Freeze<O = StoredOutput> {
    /// Hash of what the output depends on: the cell's code, the prelude items it uses, its
    /// options that change a run, the files it reads.
    pub source: String,
    /// The GPU, as `nvidia-smi` names it.
    pub gpu: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// The command that ran it.
    pub command: String,
    /// What the cell produced there.
    pub output: O,
}

impl<O> Freeze<O> {
    /// The badge over the output.
    pub fn badge(&self) -> String {
        format!(
            "GPU output recorded on {} at {} by `{}`",
            self.gpu, self.date, self.command
        )
    }
}

/// A cell's result as stored on disk (in freezes, and in the engine's cache and store): what it
/// printed, the kind of its value by name ([`crate::Output::kind`], or a failure's) and the
/// value's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredOutput {
    /// What it printed to standard output.
    pub stdout: String,
    /// What it printed to standard error.
    pub stderr: String,
    /// `text`, `table`, … or a failure's kind.
    pub kind: String,
    /// The text, markup or failure message.
    pub body: String,
}
