//! The output store: every CPU cell's output committed with the book, so that a fresh clone
//! renders without compiling or running a cell (Quarto's `freeze`, for every cell).
//!
//! Each entry is filed under the cell's full cache key (see the `plan` stage): its code, the
//! prelude and parameters it sees, the files it `reads`, the path dependencies' sources,
//! `Cargo.lock`, the dependency list and the pinned toolchain. An entry is served only while
//! every one of those is as it was when the output was computed; anything else reruns the cell.
//! Unlike Quarto's freeze, a stale store cannot pass unseen: a build in [`StoreMode::Verify`]
//! reruns every cell and holds the store to it (an entry missing, one no cell has, or an output
//! that differs is a problem), and only [`StoreMode::Refresh`] writes it.
//!
//! The key names no machine: an output is taken to be the same wherever the same code runs on
//! the same inputs (what CI's verifying build checks, on its own machine). A cell whose output
//! depends on the host (its timing, its core count) says so with `//| varies: …`.
//!
//! One file per chapter, `<store-dir>/<chapter>.json` (`src/` and `.md` dropped), its cells in
//! page order, each named by its id or its place among the chapter's cells: a refresh that
//! changes one output changes one entry, so the diff says which figure moved.

use crate::outcome::Stored;
use crate::types::{Problem, REFRESH_COMMAND, StoreNote};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A rerun is given this many times the run time recorded with its output before it is killed
/// (or the configured timeout, if that is longer): the timeout bounds a hang, and a cell that
/// took 80 s on a quiet machine takes two or three times that while another build shares the
/// cores. Five leaves room for a machine under twice that load.
pub const TIMEOUT_MARGIN: u32 = 5;

/// What a build does with the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreMode {
    /// Serve a cell from the store when the local cache lacks it; never write the store.
    #[default]
    Serve,
    /// Rerun every cell, neither cache nor store consulted, and hold the store to the outputs.
    Verify,
    /// Take each output from this machine's cache, else the store (a `varies` cell's from the
    /// store first, so that its entry does not churn), run what neither has, then rewrite the
    /// store to hold exactly the book's current outputs; an output a rerun reproduced keeps its
    /// entry's date and run time.
    Refresh,
}

impl StoreMode {
    /// The environment (`MDBOOK_CELLS_STORE`) wins over `book.toml`'s `store-mode`.
    pub fn of(config: Option<StoreMode>) -> Result<StoreMode, String> {
        match std::env::var("MDBOOK_CELLS_STORE") {
            Ok(v) if !v.is_empty() => match v.as_str() {
                "serve" => Ok(StoreMode::Serve),
                "verify" => Ok(StoreMode::Verify),
                "refresh" => Ok(StoreMode::Refresh),
                other => Err(format!(
                    "MDBOOK_CELLS_STORE={other}: the store's modes are serve, verify and refresh"
                )),
            },
            _ => Ok(config.unwrap_or_default()),
        }
    }
}

/// One chapter's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChapterFile {
    /// The command that wrote it (the only one that may).
    made_by: String,
    /// The chapter, as messages name it (`src/part-1/wall.md`).
    chapter: String,
    /// Its cells' outputs, in page order.
    cells: Vec<Entry>,
}

/// One cell's stored output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The cell, by its id or as `cell N` (its place among the chapter's cells that run).
    pub cell: String,
    /// Its cache key when the output was computed.
    pub key: String,
    /// When the output was computed (UTC).
    pub computed: String,
    /// How long that run took, in milliseconds: the basis of the cell's timeout.
    pub ran_ms: u64,
    /// What the cell produced.
    #[serde(flatten)]
    pub stored: Stored,
}

impl Entry {
    /// How long the run that computed it took.
    pub fn ran(&self) -> Duration {
        Duration::from_millis(self.ran_ms)
    }
}

/// The store as read at the start of a build.
#[derive(Debug, Default)]
pub struct Store {
    /// Every entry by key.
    by_key: HashMap<String, Entry>,
    /// Every entry's run time by chapter and cell name: a cell whose inputs changed keeps the
    /// timeout basis of its last run.
    ran_by_cell: HashMap<(String, String), u64>,
    /// What each file read holds, by its path relative to the book's root: its chapter and
    /// its cells' names and keys, in order.
    files: BTreeMap<PathBuf, Layout>,
}

impl Store {
    /// Reads every chapter file under `dir` (absolute); a file that cannot be read or is not a
    /// store file is a problem at that file, and its cells run as if it were absent.
    pub fn open(root: &Path, dir: &Path) -> (Store, Vec<Problem>) {
        let mut store = Store::default();
        let mut problems = Vec::new();
        let mut files = Vec::new();
        collect_json(dir, &mut files);
        files.sort();
        for path in files {
            let name = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let parsed = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    serde_json::from_str::<ChapterFile>(&text).map_err(|e| e.to_string())
                });
            let file = match parsed {
                Ok(file) => file,
                Err(why) => {
                    problems.push(Problem {
                        file: name.display().to_string(),
                        line: 0,
                        reason: format!(
                            "not a store file ({why}); its cells run as if it were absent: \
                             `{REFRESH_COMMAND}` rewrites it"
                        ),
                    });
                    continue;
                }
            };
            let layout = Layout {
                chapter: file.chapter.clone(),
                cells: (file.cells.iter())
                    .map(|e| (e.cell.clone(), e.key.clone()))
                    .collect(),
            };
            for entry in file.cells {
                let cell = (file.chapter.clone(), entry.cell.clone());
                store.ran_by_cell.insert(cell, entry.ran_ms);
                store.by_key.insert(entry.key.clone(), entry);
            }
            store.files.insert(name, layout);
        }
        (store, problems)
    }

    /// The entry computed under `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.by_key.get(key)
    }

    /// How long the cell last took when its output was stored: under its current key, else
    /// under its chapter and name (its code or inputs changed since).
    pub fn ran(&self, key: &str, chapter: &str, cell: &str) -> Option<Duration> {
        (self.by_key.get(key).map(|e| e.ran_ms))
            .or_else(|| (self.ran_by_cell.get(&(chapter.into(), cell.into()))).copied())
            .map(Duration::from_millis)
    }

    /// How the store should differ from what it holds, for a book whose chapters' cells (by
    /// name and key, in page order) are `layout`: a reason per file, relative to the root.
    /// A stale key, a chapter renamed, a cell moved or renamed: each needs a refresh, though
    /// no served output is wrong.
    pub fn misfiled(&self, root: &Path, dir: &Path, layout: &[Layout]) -> Vec<(PathBuf, String)> {
        let mut found = Vec::new();
        let mut expected: BTreeMap<PathBuf, &Layout> = BTreeMap::new();
        for chapter in layout.iter().filter(|l| !l.cells.is_empty()) {
            expected.insert(relative(root, &path(root, dir, &chapter.chapter)), chapter);
        }
        for (file, held) in &self.files {
            match expected.get(file) {
                None => found.push((
                    file.clone(),
                    "holds outputs of no chapter of the book".into(),
                )),
                Some(want) if *want != held => {
                    let stale = (held.cells.iter())
                        .filter(|(_, key)| !want.cells.iter().any(|(_, k)| k == key))
                        .count();
                    let why = if stale > 0 {
                        format!("{stale} stored output(s) no cell of the chapter has (stale)")
                    } else {
                        "its cells are named or ordered otherwise than the chapter's".into()
                    };
                    found.push((file.clone(), why));
                }
                Some(_) => {}
            }
        }
        found
    }

    /// Rewrites the store under `root/dir` to hold exactly `chapters` (each chapter's source and
    /// its entries in page order): a file whose content would not change is left as it is, a file
    /// no chapter needs is removed. Returns the files written and removed, relative to `root`.
    pub fn write(
        &self,
        root: &Path,
        dir: &Path,
        chapters: &[(String, Vec<Entry>)],
    ) -> std::io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
        let mut keep = Vec::new();
        let mut written = Vec::new();
        for (chapter, cells) in chapters.iter().filter(|(_, cells)| !cells.is_empty()) {
            let file = ChapterFile {
                made_by: REFRESH_COMMAND.to_string(),
                chapter: chapter.clone(),
                cells: cells.clone(),
            };
            let path = path(root, dir, chapter);
            let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)? + "\n";
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                crate::key::write_atomically(&path, text.as_bytes())?;
                written.push(relative(root, &path));
            }
            keep.push(relative(root, &path));
        }
        // Only the files read as the store's go (in path order): anything else under the folder
        // is left as it is.
        let mut removed = Vec::new();
        for file in self.files.keys().filter(|f| !keep.contains(f)) {
            std::fs::remove_file(root.join(file))?;
            removed.push(file.clone());
        }
        Ok((written, removed))
    }
}

/// A chapter's file as the store lays it out: the chapter and its cells' names and keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The chapter's source (`src/part-1/wall.md`).
    pub chapter: String,
    /// Each stored cell's name and key, in page order.
    pub cells: Vec<(String, String)>,
}

/// The store, read on first use: a build whose every cell is in this machine's cache never
/// reads it (unless it verifies or refreshes it).
pub(crate) struct StoreAccess<'a> {
    root: &'a Path,
    /// The store's folder, relative to the root; `None`: the build uses no store.
    pub(crate) dir: Option<&'a PathBuf>,
    /// What the build does with it.
    pub(crate) mode: StoreMode,
    /// The store as read, and the problems met reading it, once read.
    pub(crate) opened: Option<(Store, Vec<Problem>)>,
}

impl<'a> StoreAccess<'a> {
    /// The store under `dir`, not read yet unless `mode` needs it whole.
    pub(crate) fn new(
        root: &'a Path,
        dir: Option<&'a PathBuf>,
        mode: StoreMode,
    ) -> StoreAccess<'a> {
        let mut access = StoreAccess {
            root,
            dir,
            mode,
            opened: None,
        };
        if mode != StoreMode::Serve {
            access.get();
        }
        access
    }

    /// The store, read now if it was not yet; `None` for a book without one.
    pub(crate) fn get(&mut self) -> Option<&Store> {
        let dir = self.dir?;
        let (root, opened) = (self.root, &mut self.opened);
        Some(
            &opened
                .get_or_insert_with(|| Store::open(root, &root.join(dir)))
                .0,
        )
    }
}

/// What a build found or did in the store, passed on to resolve and the report.
#[derive(Default)]
pub(crate) struct StoreOutcome {
    /// For the report's summary.
    pub(crate) note: Option<StoreNote>,
    /// A cell's stored output missing or differing (verifying), by module.
    pub(crate) checks: HashMap<String, Check>,
    /// Problems of the store as a whole: a file that does not read, entries no cell has.
    pub(crate) problems: Vec<Problem>,
}

/// Why the store fails a cell, verifying.
pub(crate) enum Check {
    /// It holds no output for the cell's current key.
    Missing,
    /// Its output, computed then, differs from this build's so.
    Differs {
        /// When the stored output was computed.
        computed: String,
        /// Where they part.
        why: String,
    },
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::Missing => write!(
                f,
                "the output store holds no output for this cell's current code and inputs (it \
                 is stale): `{}` rewrites it",
                REFRESH_COMMAND
            ),
            Check::Differs { computed, why } => write!(
                f,
                "this build's output differs from the one stored (computed {computed}): {why}; \
                 if it legitimately varies from run to run, say why with `//| varies: …`"
            ),
        }
    }
}

/// The timeout a cell runs under: what it was given, or [`TIMEOUT_MARGIN`] times the run that
/// computed its stored output, whichever is longer (capped at a day).
pub fn timeout(given: Duration, ran: Option<Duration>) -> Duration {
    let basis = ran.map_or(Duration::ZERO, |t| t * TIMEOUT_MARGIN);
    given
        .max(basis)
        .min(Duration::from_secs(crate::types::MAX_TIMEOUT_S))
}

/// Where chapter `chapter`'s outputs are stored.
pub fn path(root: &Path, dir: &Path, chapter: &str) -> PathBuf {
    let chapter = Path::new(chapter);
    let chapter = chapter.strip_prefix("src").unwrap_or(chapter);
    root.join(dir).join(chapter.with_extension("json"))
}

/// The store's name for the `n`-th cell of a chapter that runs (from 1; preludes and
/// parameters cells are not counted): its id, or `cell N`.
pub fn cell_name(id: Option<&str>, n: usize) -> String {
    id.map_or_else(|| format!("cell {n}"), str::to_string)
}

fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// Every `.json` file under `dir`, at any depth.
fn collect_json(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => collect_json(&path, out),
            Ok(kind) if kind.is_file() && path.extension().is_some_and(|e| e == "json") => {
                out.push(path);
            }
            _ => {}
        }
    }
}

/// Where this build's output of a cell and the store's part, as a problem's reason says it: the
/// first line that differs in what it printed or produced.
pub fn difference(stored: &Stored, now: &Stored) -> Option<String> {
    let parts = [
        ("printed", stored.stdout.as_str(), now.stdout.as_str()),
        (
            "printed to stderr",
            stored.stderr.as_str(),
            now.stderr.as_str(),
        ),
    ];
    for (what, was, is) in parts {
        if let Some(at) = first_difference(was, is) {
            return Some(format!("what it {what} differs at line {at}"));
        }
    }
    if stored.outcome == now.outcome {
        return None;
    }
    let (was, is) = (body(&stored.outcome), body(&now.outcome));
    Some(match first_difference(&was, &is) {
        Some(at) if was.trim_end() == is.trim_end() => {
            format!(
                "its output differs in trailing whitespace after line {}",
                at - 1
            )
        }
        Some(at) => {
            let (a, b) = (line(&was, at), line(&is, at));
            let (a, b) = around_first_difference(a, b);
            format!("its output differs at line {at}: stored `{a}`, now `{b}`")
        }
        None => "its output's kind differs".to_string(),
    })
}

fn body(outcome: &crate::outcome::Outcome) -> String {
    match outcome {
        crate::outcome::Outcome::Value { body, .. } => body.clone(),
        crate::outcome::Outcome::Failed { message, .. } => message.clone(),
    }
}

/// The first line (1-based) at which `a` and `b` differ.
fn first_difference(a: &str, b: &str) -> Option<usize> {
    if a == b {
        return None;
    }
    let mut lines = 0;
    for (x, y) in a.lines().zip(b.lines()) {
        lines += 1;
        if x != y {
            return Some(lines);
        }
    }
    Some(lines + 1)
}

fn line(text: &str, at: usize) -> &str {
    text.lines().nth(at - 1).unwrap_or("")
}

/// The two lines cut to where they part: a little before the first character that differs and
/// a little after, `…` where cut.
fn around_first_difference(a: &str, b: &str) -> (String, String) {
    const BEFORE: usize = 24;
    const AFTER: usize = 48;
    let same = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let start = same.saturating_sub(BEFORE);
    let cut = |line: &str| {
        let total = line.chars().count();
        let end = (same + AFTER).min(total);
        let text: String = line.chars().skip(start).take(end - start).collect();
        format!(
            "{}{text}{}",
            if start > 0 { "…" } else { "" },
            if end < total { "…" } else { "" }
        )
    };
    (cut(a), cut(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Outcome, OutputKind};

    fn text(stdout: &str, body: &str) -> Stored {
        Stored {
            stdout: stdout.into(),
            stderr: String::new(),
            outcome: Outcome::Value {
                kind: OutputKind::Text,
                body: body.into(),
            },
        }
    }

    #[test]
    fn a_difference_names_its_first_line_and_where_it_parts() {
        let a = text("", "one\ntwo\nthree");
        assert_eq!(difference(&a, &a), None);
        let why = difference(&a, &text("", "one\nTWO\nthree")).unwrap();
        assert_eq!(why, "its output differs at line 2: stored `two`, now `TWO`");
        // One output longer than the other: the first line only one has.
        let why = difference(&a, &text("", "one\ntwo\nthree\nfour")).unwrap();
        assert!(why.contains("line 4"), "{why}");
        let why = difference(&a, &text("printed", "one\ntwo\nthree")).unwrap();
        assert_eq!(why, "what it printed differs at line 1");
        // A long line is cut to where the two part.
        let row = |n: &str| {
            format!(
                "<tr><td>resnet · CubeBackend</td><td>2 (1.88 KiB)</td><td>{n}</td><td>holds</td></tr>"
            )
        };
        let why = difference(&text("", &row("-2.34 KiB")), &text("", &row("+960 B"))).unwrap();
        assert_eq!(
            why,
            "its output differs at line 1: stored `…td>2 (1.88 KiB)</td><td>-2.34 KiB</td><td>holds</td></tr>`, \
             now `…td>2 (1.88 KiB)</td><td>+960 B</td><td>holds</td></tr>`"
        );
    }

    #[test]
    fn a_timeout_rests_on_the_stored_run_when_that_is_longer() {
        let given = Duration::from_secs(60);
        assert_eq!(timeout(given, None), given);
        assert_eq!(timeout(given, Some(Duration::from_secs(5))), given);
        assert_eq!(
            timeout(given, Some(Duration::from_secs(88))),
            Duration::from_secs(440)
        );
        let day = Duration::from_secs(crate::types::MAX_TIMEOUT_S);
        assert_eq!(timeout(given, Some(day)), day);
    }

    #[test]
    fn chapters_are_filed_under_the_store_without_src() {
        let at = path(
            Path::new("/b"),
            Path::new("repro/outputs"),
            "src/part-1/wall.md",
        );
        assert_eq!(at, Path::new("/b/repro/outputs/part-1/wall.json"));
        assert_eq!(cell_name(Some("tbl-x"), 3), "tbl-x");
        assert_eq!(cell_name(None, 3), "cell 3");
    }
}
