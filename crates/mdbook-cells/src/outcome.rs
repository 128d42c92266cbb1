//! What a cell came to: a value of a known kind, or a failure of a known kind. One enum each,
//! so a new kind is one variant whose name, label and caching rule sit beside the others.
//!
//! On disk (the cache, freezes, bundles) a cell's result keeps its flat form
//! `{stdout, stderr, kind, body}` (`cell_output::freeze::StoredOutput`, which a book may read
//! too): a kind this engine does not write is refused on read.

use cell_output::freeze::StoredOutput;
use serde::{Deserialize, Serialize};

/// What a cell may return (`cell_output::Output::kind`, except `error`, a failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// `()`: nothing under the code.
    Nothing,
    /// Plain text, shown preformatted.
    Text,
    /// Markdown, rendered with the chapter.
    Markdown,
    /// Raw HTML.
    Html,
    /// An SVG figure (captioned as a figure).
    Figure,
    /// An HTML table (captioned as a table).
    Table,
}

impl OutputKind {
    const ALL: [OutputKind; 6] = [
        OutputKind::Nothing,
        OutputKind::Text,
        OutputKind::Markdown,
        OutputKind::Html,
        OutputKind::Figure,
        OutputKind::Table,
    ];

    /// The name the harness writes and the cache stores.
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Nothing => "nothing",
            OutputKind::Text => "text",
            OutputKind::Markdown => "markdown",
            OutputKind::Html => "html",
            OutputKind::Figure => "figure",
            OutputKind::Table => "table",
        }
    }
}

/// How a cell may fail: it returned an error, or the engine saw it fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The cell returned `Err`.
    Error,
    /// The cell did not compile.
    Compile,
    /// The cell crate as a whole did not build (a dependency, the manifest).
    Build,
    /// The cell panicked.
    Panic,
    /// The cell ran past its timeout and was killed.
    Timeout,
    /// The cells' process died while the cell ran.
    Died,
    /// The cell's value is over the output limit.
    TooLarge,
}

impl FailureKind {
    const ALL: [FailureKind; 7] = [
        FailureKind::Error,
        FailureKind::Compile,
        FailureKind::Build,
        FailureKind::Panic,
        FailureKind::Timeout,
        FailureKind::Died,
        FailureKind::TooLarge,
    ];

    /// The name the harness writes (`error`, `panic`) and the cache stores.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Error => "error",
            FailureKind::Compile => "compile",
            FailureKind::Build => "build",
            FailureKind::Panic => "panic",
            FailureKind::Timeout => "timeout",
            FailureKind::Died => "died",
            FailureKind::TooLarge => "too-large",
        }
    }

    /// How the page labels it.
    pub fn label(self) -> &'static str {
        match self {
            FailureKind::Error => "returned an error",
            FailureKind::Compile => "compile error",
            FailureKind::Build => "the cell crate did not build",
            FailureKind::Panic => "panicked",
            FailureKind::Timeout => "timed out",
            FailureKind::Died => "the cell process died",
            FailureKind::TooLarge => "output over the limit",
        }
    }

    /// Whether running the same code again fails the same way: such a failure is the cell's
    /// content (worth caching when expected); a timeout or a crash may be the machine's.
    pub fn is_deterministic(self) -> bool {
        matches!(
            self,
            FailureKind::Compile | FailureKind::Panic | FailureKind::Error | FailureKind::TooLarge
        )
    }
}

/// Why a cell shows a failure where its output would be: one reason, typed from where the build
/// finds it to the page and the report that say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Found before it could run: its options, an id another cell took, a chapter's second
    /// prelude or parameters cell, a parameter that cannot be set.
    BadCell,
    /// Its chapter's parameters cell is in error, so none of the chapter's cells run.
    ParametersInError,
    /// The chapter's code its cells share did not compile (shown on that cell).
    SharedCode(SharedPart),
    /// It ran, in this build or an earlier one, and failed so.
    Ran(FailureKind),
    /// It is marked `expect-fail` and succeeded.
    Succeeded,
    /// Nothing ran it and no freeze stands in for it.
    NotRun,
    /// A GPU cell never recorded on a GPU: a note stands where its output would be.
    NeverRecorded,
}

/// Which of a chapter's shared cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedPart {
    /// Its `prelude`.
    Prelude,
    /// Its `parameters`.
    Parameters,
}

impl SharedPart {
    /// The cell's option: `prelude`, `parameters`.
    pub fn name(self) -> &'static str {
        match self {
            SharedPart::Prelude => "prelude",
            SharedPart::Parameters => "parameters",
        }
    }
}

impl Fault {
    /// How the page and the report label it, in a few words.
    pub fn label(self) -> &'static str {
        match self {
            Fault::BadCell => "bad cell options",
            Fault::ParametersInError | Fault::NotRun => "not run",
            Fault::SharedCode(SharedPart::Prelude) => "the prelude did not compile",
            Fault::SharedCode(SharedPart::Parameters) => "the parameters did not compile",
            Fault::Ran(kind) => kind.label(),
            Fault::Succeeded => "expected a failure",
            Fault::NeverRecorded => "no output",
        }
    }
}

/// What a cell came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It returned a value.
    Value {
        /// What the body is.
        kind: OutputKind,
        /// Text, markdown or markup, as the kind says.
        body: String,
    },
    /// It failed.
    Failed {
        /// How.
        kind: FailureKind,
        /// Why, as shown on the page.
        message: String,
    },
}

impl Outcome {
    /// A failure of `kind` saying `message`.
    pub fn failed(kind: FailureKind, message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            kind,
            message: message.into(),
        }
    }

    /// The stored name of its kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Outcome::Value { kind, .. } => kind.name(),
            Outcome::Failed { kind, .. } => kind.name(),
        }
    }

    /// The kind of failure, if it is one.
    pub fn failure(&self) -> Option<FailureKind> {
        match self {
            Outcome::Value { .. } => None,
            Outcome::Failed { kind, .. } => Some(*kind),
        }
    }

    /// The outcome the harness's `kind` line and body stand for, if the kind is known.
    pub fn from_parts(kind: &str, body: String) -> Option<Outcome> {
        if let Some(kind) = OutputKind::ALL.into_iter().find(|k| k.name() == kind) {
            return Some(Outcome::Value { kind, body });
        }
        let kind = FailureKind::ALL.into_iter().find(|k| k.name() == kind)?;
        Some(Outcome::Failed {
            kind,
            message: body,
        })
    }
}

/// What a cell produced: its outcome and what it printed. Kept in the cache, in freezes and in
/// a bundle's results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredOutput", into = "StoredOutput")]
pub struct Stored {
    /// What it printed to standard output.
    pub stdout: String,
    /// What it printed to standard error.
    pub stderr: String,
    /// What it came to.
    pub outcome: Outcome,
}

impl Stored {
    /// A result with nothing printed.
    pub fn of(outcome: Outcome) -> Stored {
        Stored {
            stdout: String::new(),
            stderr: String::new(),
            outcome,
        }
    }

    /// Whether the cell failed.
    pub fn is_failure(&self) -> bool {
        self.outcome.failure().is_some()
    }
}

/// The stored form keeps the kind by name, so that entries written before a kind was added
/// still read.
impl TryFrom<StoredOutput> for Stored {
    type Error = String;

    fn try_from(flat: StoredOutput) -> Result<Stored, String> {
        let kind = flat.kind;
        let outcome = Outcome::from_parts(&kind, flat.body).ok_or_else(|| {
            let shown: String = kind.chars().take(40).collect();
            format!(
                "kind `{}` is not one this engine writes",
                cell_output::escape(&shown)
            )
        })?;
        Ok(Stored {
            stdout: flat.stdout,
            stderr: flat.stderr,
            outcome,
        })
    }
}

impl From<Stored> for StoredOutput {
    fn from(stored: Stored) -> StoredOutput {
        let kind = stored.outcome.kind_name().to_string();
        let body = match stored.outcome {
            Outcome::Value { body, .. } => body,
            Outcome::Failed { message, .. } => message,
        };
        StoredOutput {
            stdout: stored.stdout,
            stderr: stored.stderr,
            kind,
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_by_name_and_unknown_ones_are_refused() {
        let values = OutputKind::ALL.map(|k| k.name());
        let failures = FailureKind::ALL.map(|k| k.name());
        for name in values.iter().chain(&failures) {
            let stored = Stored::of(Outcome::from_parts(name, "b".into()).unwrap());
            let json = serde_json::to_string(&stored).unwrap();
            assert!(json.contains(&format!("\"kind\":\"{name}\"")), "{json}");
            assert_eq!(serde_json::from_str::<Stored>(&json).unwrap(), stored);
        }
        assert!(
            values.iter().all(|v| !failures.contains(v)),
            "names are unique"
        );
        let unknown = r#"{"stdout":"","stderr":"","kind":"<script>","body":""}"#;
        let why = serde_json::from_str::<Stored>(unknown)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("not one this engine writes") && !why.contains('<'),
            "{why}"
        );
    }
}
