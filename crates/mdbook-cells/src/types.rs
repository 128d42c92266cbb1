//! What goes into a build and what comes out of it: chapters and their figure and table
//! labels, what a page shows for each cell, problems, and the report.

use crate::outcome::{Fault, Stored};
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// The one command that rewrites the store (written at the top of each file). Here, beside
/// [`StoreNote`] which names it, so that the store depends on these types and not back.
pub const REFRESH_COMMAND: &str = "MDBOOK_CELLS_STORE=refresh mdbook build";

/// The longest a cell may be given (a day): a timeout is a bound on a hang, and a larger one
/// would overflow the clock's arithmetic long before it meant anything.
pub const MAX_TIMEOUT_S: u64 = 24 * 60 * 60;

/// A chapter as [`crate::process`] sees it.
#[derive(Debug, Clone)]
pub struct Document {
    /// The chapter's file as messages name it (`src/intro.md`).
    pub source: String,
    /// The page it becomes (`part-1/intro.html`), for links between chapters.
    pub html_path: String,
    /// Its section number (`"2.1."`), used in figure and table labels.
    pub number: Option<String>,
    /// Its title, as the table of contents shows it.
    pub title: String,
    /// Its markdown: cells in, cells with their outputs out.
    pub content: String,
}

/// A numbered figure or table: its id, "Figure 2.3", and the page it is on.
#[derive(Debug, Clone)]
pub struct Label {
    /// The cell's `id` (`fig-…`, `tbl-…`).
    pub id: String,
    /// "Figure 2.3".
    pub name: String,
    /// The page it is on (`part-1/intro.html`).
    pub html_path: String,
}

/// Every `fig-`/`tbl-` id in the book and its label.
pub type Labels = HashMap<String, Label>;

/// A failure strict mode refuses: `chapter.md:LINE: cell failed: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The chapter's file (or a freeze file), as messages name it.
    pub file: String,
    /// 1-based; 0 when the problem is the file's as a whole.
    pub line: usize,
    /// What is wrong, in one line where possible.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: cell failed: {}",
            self.file, self.line, self.reason
        )
    }
}

/// What the page shows under a cell's code.
#[derive(Debug, Clone)]
pub enum Shown {
    /// The cell ran (now or earlier) and this is what it produced.
    Output(Stored),
    /// The cell failed; `expected` when that is its point.
    Failure {
        /// Why.
        fault: Fault,
        /// The failure's text (a compiler diagnostic, a panic message).
        message: String,
        /// What it printed before it failed.
        stdout: String,
        /// Its `expect-fail` says it should fail.
        expected: bool,
    },
    /// A GPU cell's output recorded on a GPU earlier, under a badge; `stale` when the cell or
    /// its inputs changed since.
    Frozen {
        /// The recorded output.
        stored: Stored,
        /// Where, when and how it was recorded.
        badge: String,
        /// The cell or its inputs changed since.
        stale: bool,
    },
    /// A note instead of output (a GPU cell that has never run on a GPU).
    Note(String),
    /// Nothing under the code (a prelude).
    Nothing,
}

/// Where the outcome a page shows for a cell came from, in this build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Compiled and run now, taking this long.
    Ran(Duration),
    /// Compiled now and not run: it did not compile, or it went into a GPU bundle.
    Compiled,
    /// Taken from this machine's output cache (`cache-dir`): the run that made it took this
    /// long, at this time (UTC), when known.
    Cached {
        /// How long the run took.
        ran: Option<Duration>,
        /// When it ran.
        computed: Option<String>,
    },
    /// Served from the committed output store (`store-dir`): computed then (UTC), taking this
    /// long.
    Stored {
        /// How long the run took.
        ran: Duration,
        /// When it ran.
        computed: String,
    },
    /// A GPU cell's output recorded earlier on a GPU.
    Frozen {
        /// The GPU, as `nvidia-smi` named it.
        gpu: String,
        /// When (UTC).
        date: String,
        /// The command that ran it.
        command: String,
        /// The cell or its inputs changed since.
        stale: bool,
    },
    /// A GPU cell with no recorded output to show.
    NeverFrozen,
    /// The chapter's prelude or parameters: code its cells share, not run by itself.
    Shared,
    /// Not run: its options are wrong, or the build could not run it.
    NotRun,
}

/// How a cell ended up, as its page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// It shows its value (or nothing, for a prelude).
    Ok,
    /// It failed, as its `expect-fail` says it should.
    ExpectedFailure,
    /// It failed, or shows a note instead of output: why.
    Failed(Fault),
}

/// One cell of the book, as the build saw it (the execution report's row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellEntry {
    /// The chapter's file.
    pub chapter: String,
    /// The cell's opening fence line.
    pub line: usize,
    /// Its `id`, if it has one.
    pub id: Option<String>,
    /// A GPU cell.
    pub gpu: bool,
    /// Where its outcome came from.
    pub source: Source,
    /// How it ended up.
    pub status: Status,
}

/// What a build did.
#[derive(Debug, Default)]
pub struct Report {
    /// Every unexpected failure, at its chapter line.
    pub problems: Vec<Problem>,
    /// Cells this build ran or took from the cache (bundled GPU cells run elsewhere).
    pub cells: usize,
    /// Of those, taken from the cache.
    pub cached: usize,
    /// Of those, served from the committed store.
    pub stored: usize,
    /// What the build found or did in the store (when the book has one).
    pub store: Option<StoreNote>,
    /// Of those, run.
    pub ran: usize,
    /// What was compiled.
    pub compiled: Compilation,
    /// Compiling it.
    pub compile_time: Duration,
    /// Running the cells that ran.
    pub run_time: Duration,
    /// Every cell of the book, in book order.
    pub entries: Vec<CellEntry>,
}

/// What a build compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compilation {
    /// Nothing: every cell came from the cache or a freeze.
    #[default]
    Nothing,
    /// The crate of the book's cells, with cargo.
    Crate,
    /// Only the cells this build needed, on their own, with rustc (an edit's quick path).
    Alone(usize),
}

/// What a build found or did in the output store, for the report's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreNote {
    /// Read and served from: how many of the book's outputs it lacks (0 when it is complete).
    Served {
        /// Outputs of this build (run, cached or served) that the store does not hold.
        missing: usize,
    },
    /// Not read: every output came from this machine's cache.
    NotRead,
    /// Every cell rerun and held to it.
    Verified,
    /// Rewritten: chapter files written and removed.
    Refreshed {
        /// Files written.
        written: usize,
        /// Files removed.
        removed: usize,
    },
}

impl fmt::Display for StoreNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreNote::Served { missing: 0 } => write!(f, "the store is complete"),
            StoreNote::Served { missing } => write!(
                f,
                "{missing} output(s) computed here are not in the store (`{}` adds them)",
                REFRESH_COMMAND
            ),
            StoreNote::NotRead => write!(f, "every output from this machine's cache"),
            StoreNote::Verified => write!(f, "every cell rerun and held to the store"),
            StoreNote::Refreshed { written, removed } => write!(
                f,
                "store refreshed: {written} file(s) written, {removed} removed"
            ),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cells: {} cached, {} from the store, {} ran (compile {:.1} s{}, run {:.1} s), {} problem(s){}",
            self.cells,
            self.cached,
            self.stored,
            self.ran,
            self.compile_time.as_secs_f64(),
            match self.compiled {
                Compilation::Alone(n) => format!(", {n} cell(s) alone"),
                _ => String::new(),
            },
            self.run_time.as_secs_f64(),
            self.problems.len(),
            self.store
                .as_ref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default()
        )
    }
}
