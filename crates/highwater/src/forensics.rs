//! Forensics: what a trainer log says about a run that ran out of device memory.
//!
//! [`parse_log`] reads a log's text (the caller opens the file and names it) into a
//! [`LogForensics`]: how many attempts were appended to it, the step each attempt died at,
//! the failed reserves grouped by size and by whether they came before the first step line
//! ([`Phase::Init`]) or after it ([`Phase::Run`]), and whether the log is cut short.
//! [`parse_reader`] (a [`LogReader`] underneath, which `parse_log` also is) reads the same from
//! any `BufRead` the caller opened, one line at a time, in memory bounded by what the log says
//! rather than by its length. [`incident_table`] turns several of them into the rows the book
//! prints.
//!
//! # Line formats
//!
//! A line may carry a bracketed prefix (`[2026-09-30T10:00:00Z INFO train] `), which is
//! skipped. Everything else is matched on the rest of the line.
//!
//! **Trainer lines** (the incident's trainer; the header, step and done lines are our
//! documented convention, the death line is the seed's verbatim shape):
//!
//! | line | example | meaning |
//! |---|---|---|
//! | header | `train start: preset=situ.toml seed=1 params=9590670 checkpointing: Disabled backend=Device<Cuda(0)>` | a new attempt (logs are appended) |
//! | step | `step 100 \| loss 3.2100 \| lr 3.0e-4 \| 412 ms/step` | the trainer finished step 100 (printed at step 0 and every 100 steps) |
//! | eval | `eval step 500 \| window 81920 B \| loss 3.05` | not a step line; ignored |
//! | death | `train failed: step 300: device error (loss is not a scalar)` | the attempt died at step 300 |
//! | done | `train done: 2000 steps` | the attempt completed |
//!
//! **Failed reserves**, two shapes, one failure per matching line:
//!
//! 1. The incident's patched runtime (a vendored cubecl-cuda fork), as the seed quotes it:
//!    a panic header `thread 'DSD-0-0' panicked at …/cubecl-cuda/src/compute/server.rs:144:35:`
//!    followed by `failed to reserve 33554432 bytes of device memory: out of device memory
//!    allocating 33554432 bytes`. The first number is the size the *tensor* asked for
//!    ([`Reported::Requested`]).
//! 2. Upstream cubecl-cuda 0.10.0 / cubecl-runtime 0.10.0 (what burn-cuda 0.21 prints):
//!    - the failing call is `let reserved = command.reserve(size).unwrap();` in
//!      `initialize_memory`, `cubecl-cuda-0.10.0/src/compute/server.rs:124` (the `unwrap`
//!      starts at column 46; the same unwrap for peer transfers is at `server.rs:491`);
//!    - the error is `IoError::BufferTooBig { size, backtrace }`, whose Display is
//!      `#[error("can't allocate buffer of size: {size}\n{backtrace}")]`
//!      (`cubecl-runtime-0.10.0/src/server/base.rs:693`), and whose `Debug` — what
//!      `unwrap` prints — forwards to that Display (`base.rs:751-755`);
//!    - `BackTrace`'s Display is `"No backtrace available"` outside cubecl's own tests
//!      (`cubecl-common-0.10.0/src/backtrace.rs:23-29`, the `backtrace` cfg alias is
//!      `all(test, feature = "std")` in its `build.rs`);
//!    - the server thread is named `format!("DS{}-{}-{}", "U"|"D", type_id, index_id)`
//!      (`cubecl-common-0.10.0/src/device/handle/channel.rs:637-645`): `DSD-0-0` is the
//!      downstream service of device 0;
//!    - the panic is caught on that thread and logged as `log::warn!("Task failed: {err:?}")`
//!      (`channel.rs:466-467` and `:480-481`; `Any { .. }` is all it shows), and the process
//!      goes on.
//!
//!    So with the standard panic hook the log reads
//!    ```text
//!    thread 'DSD-0-0' panicked at /root/.cargo/registry/src/index.crates.io-…/cubecl-cuda-0.10.0/src/compute/server.rs:124:46:
//!    called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: 268435456
//!    No backtrace available
//!    ```
//!    The size is the size of the storage allocation that failed. When the pool has to grow,
//!    that is a whole *page*: `cubecl-cuda-0.10.0/src/compute/storage/gpu.rs:181` returns
//!    `BufferTooBig { size, .. }` for the page it asked `cuMemAlloc` for when the driver says
//!    `CUDA_ERROR_OUT_OF_MEMORY` ([`Reported::Page`]: a 32 MiB tensor on a 16 GiB card shows
//!    up as 268435456). The pool's own refusals carry the tensor's size instead:
//!    `cubecl-runtime-0.10.0/src/memory_management/memory_manage.rs:500` (no pool accepts the
//!    size) and `memory_pool/exclusive_pool.rs:160` (above the pool's largest allocation);
//!    their text is the same, so the log alone cannot tell them apart — on a card that is
//!    merely full it is the page.
//!
//! `Task failed: Any { .. }` lines and `note: run with RUST_BACKTRACE=1` lines are not counted
//! (each failure already has its message line).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{BufRead, Read};

use serde::{Deserialize, Serialize};

/// Where in an attempt a failed reserve came (`init` or `run`, as logs and incident files
/// write it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before the attempt printed its first step line (model build, autotune sweeps).
    Init,
    /// After it.
    Run,
}

/// What a failure's size measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reported {
    /// The tensor's own size (the incident's patched runtime: `failed to reserve N bytes`).
    Requested,
    /// The page the pool asked the driver for (upstream cubecl 0.10: `can't allocate buffer
    /// of size: N`).
    Page,
}

/// Failed reserves of one size in one phase, over every attempt of a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureGroup {
    /// The size in the message.
    pub bytes: u64,
    /// How many lines said so.
    pub count: u32,
    /// Before or after the attempt's first step line.
    pub phase: Phase,
    /// For [`Phase::Run`]: the last step line printed before the group's first failure.
    pub after_step: Option<u32>,
    /// Whether the size is the tensor's or the pool's page.
    pub reported: Reported,
}

/// What one trainer log says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogForensics {
    /// The caller's name for the log (usually its file name).
    pub name: String,
    /// Attempts appended to the log (header lines, plus one if lines came before any header).
    pub attempts: u32,
    /// The step each dying attempt died at, in log order.
    pub died_at: Vec<u32>,
    /// Failed reserves by (size, phase, kind), in order of first appearance.
    pub failures: Vec<FailureGroup>,
    /// The last step line of the log.
    pub last_step: Option<u32>,
    /// The log is cut short: it starts without a header, or its last attempt neither died
    /// nor completed.
    pub truncated: bool,
    /// Lines came before the first header: the log's head is missing.
    pub missing_header: bool,
    /// The last attempt printed its done line.
    pub completed: bool,
}

/// One recognised line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// `train start: …`
    Header,
    /// `step N | …`
    Step(u32),
    /// `train failed: step N: …` (the step, if it names one).
    Death(Option<u32>),
    /// `train done: …`
    Done,
    /// A failed reserve of `bytes`.
    Failure { bytes: u64, reported: Reported },
    /// Anything else.
    Other,
}

const HEADER: &str = "train start:";
const DONE: &str = "train done:";
const DEATH: &str = "train failed:";
/// The incident's patched runtime (seed 000 §1).
const PATCHED: &str = "failed to reserve ";
/// `IoError::BufferTooBig`'s Display, cubecl-runtime-0.10.0/src/server/base.rs:693.
const BUFFER_TOO_BIG: &str = "can't allocate buffer of size: ";

/// Classifies one line of a trainer log.
pub(crate) fn classify(line: &str) -> Line {
    let line = strip_prefix(line.trim());
    if line.starts_with(HEADER) {
        return Line::Header;
    }
    if line.starts_with(DONE) {
        return Line::Done;
    }
    if let Some(rest) = line.strip_prefix(DEATH) {
        let step = rest
            .trim_start()
            .strip_prefix("step ")
            .and_then(leading_u64);
        return Line::Death(step.and_then(|s| u32::try_from(s).ok()));
    }
    if let Some(rest) = line.strip_prefix("step ")
        && let Some(n) = leading_u64(rest)
        && let Ok(n) = u32::try_from(n)
    {
        let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        if after.is_empty() || after.starts_with([' ', '|', '\t', '/']) {
            return Line::Step(n);
        }
    }
    if let Some(at) = line.find(PATCHED)
        && let Some(bytes) = leading_u64(&line[at + PATCHED.len()..])
    {
        return Line::Failure {
            bytes,
            reported: Reported::Requested,
        };
    }
    if let Some(at) = line.find(BUFFER_TOO_BIG)
        && let Some(bytes) = leading_u64(&line[at + BUFFER_TOO_BIG.len()..])
    {
        return Line::Failure {
            bytes,
            reported: Reported::Page,
        };
    }
    Line::Other
}

/// Drops a leading `[…] ` (timestamp / level / target) if there is one.
fn strip_prefix(line: &str) -> &str {
    if line.starts_with('[')
        && let Some(end) = line.find("] ")
    {
        return line[end + 2..].trim_start();
    }
    line
}

/// The decimal number at the start of `s`, if any.
fn leading_u64(s: &str) -> Option<u64> {
    let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    s[..digits].parse().ok()
}

/// Lines longer than this are read by [`LogReader::read`] up to this length; the rest of the
/// line is skipped and counted ([`LogReader::clipped_lines`]). Bounds the line buffer, so a
/// log without newlines (a progress bar redrawn with `\r`) cannot take memory of its size.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The most failure groups, and the most deaths, a [`LogReader`] records before it stops with
/// [`ForensicsError::TooMany`]. A group costs about 100 bytes at the worst moment (its
/// [`FailureGroup`], its index entry, both growing), so reading a log takes under 30 MB
/// whatever its size (`benches/forensics.rs` measures 27.5 MB peak RSS at the cap). Real logs
/// have a handful of sizes; a row of 262 144 of them would be unreadable anyway.
pub const MAX_RECORDS: usize = 1 << 18;

/// Why a streamed log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ForensicsError {
    /// Reading failed.
    #[error("cannot read log {name} after line {line}")]
    Io {
        /// The caller's name for the log.
        name: String,
        /// Lines read before it failed.
        line: u64,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The log holds more records than forensics keeps.
    #[error(
        "{name}:{line}: more than {limit} {what}; forensics keeps at most MAX_RECORDS \
         ({limit}) per log"
    )]
    TooMany {
        /// The caller's name for the log.
        name: String,
        /// The line of the record past the limit.
        line: u64,
        /// `distinct failed reserves (size, phase, message shape)` or `deaths`.
        what: &'static str,
        /// The most kept ([`MAX_RECORDS`] unless the reader was given less).
        limit: usize,
    },
}

/// Reads a trainer log one line at a time. Memory is bounded by the log's distinct failure
/// groups and deaths (at most [`MAX_RECORDS`] each) and one line ([`MAX_LINE_BYTES`]), not by
/// its length: groups are found through a hash index, so a log reads in time linear in its
/// lines.
#[derive(Debug)]
pub struct LogReader {
    f: LogForensics,
    /// The current attempt's last step line.
    step: Option<u32>,
    /// The current attempt died or completed.
    ended: bool,
    /// (size, phase, kind) → index in `f.failures`, which keeps first-appearance order.
    groups: HashMap<(u64, Phase, Reported), usize>,
    limit: usize,
    lines: u64,
    clipped: u64,
}

impl LogReader {
    /// A reader for the log `name` (how tables and errors refer to it), limited to
    /// [`MAX_RECORDS`].
    pub fn new(name: &str) -> Self {
        LogReader {
            f: LogForensics {
                name: name.to_string(),
                attempts: 0,
                died_at: vec![],
                failures: vec![],
                last_step: None,
                truncated: false,
                missing_header: false,
                completed: false,
            },
            step: None,
            ended: false,
            groups: HashMap::new(),
            limit: MAX_RECORDS,
            lines: 0,
            clipped: 0,
        }
    }

    /// The same reader with another cap on groups and deaths.
    pub(crate) fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Takes one line (without its line ending).
    pub fn push(&mut self, raw: &str) -> Result<(), ForensicsError> {
        self.lines += 1;
        let line = classify(raw);
        if line == Line::Other {
            return Ok(());
        }
        if line == Line::Header {
            self.f.attempts += 1;
            self.step = None;
            self.ended = false;
            self.f.completed = false;
            return Ok(());
        }
        if self.f.attempts == 0 {
            self.f.attempts = 1;
            self.f.missing_header = true;
        }
        match line {
            Line::Step(n) => {
                self.step = Some(n);
                self.f.last_step = Some(n);
            }
            Line::Death(n) => {
                if let Some(n) = n.or(self.step) {
                    if self.f.died_at.len() == self.limit {
                        return Err(self.too_many("deaths"));
                    }
                    self.f.died_at.push(n);
                }
                self.ended = true;
            }
            Line::Done => {
                self.ended = true;
                self.f.completed = true;
            }
            Line::Failure { bytes, reported } => {
                let phase = if self.step.is_some() {
                    Phase::Run
                } else {
                    Phase::Init
                };
                let key = (bytes, phase, reported);
                if let Some(&i) = self.groups.get(&key) {
                    self.f.failures[i].count += 1;
                    return Ok(());
                }
                if self.f.failures.len() == self.limit {
                    return Err(
                        self.too_many("distinct failed reserves (size, phase, message shape)")
                    );
                }
                self.groups.insert(key, self.f.failures.len());
                self.f.failures.push(FailureGroup {
                    bytes,
                    count: 1,
                    phase,
                    after_step: self.step,
                    reported,
                });
            }
            Line::Header | Line::Other => {}
        }
        Ok(())
    }

    fn too_many(&self, what: &'static str) -> ForensicsError {
        ForensicsError::TooMany {
            name: self.f.name.clone(),
            line: self.lines,
            what,
            limit: self.limit,
        }
    }

    /// Reads lines from `r` to its end. Bytes that are not UTF-8 (a cut multi-byte character,
    /// a stray binary write) become U+FFFD in their line only, as `String::from_utf8_lossy`
    /// of the whole file would make them: a line that classifies at all is ASCII where it
    /// matters, so one bad byte costs at most its own line. Lines longer than
    /// [`MAX_LINE_BYTES`] are read up to that length.
    pub fn read<R: BufRead>(&mut self, mut r: R) -> Result<(), ForensicsError> {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = (&mut r)
                .take(MAX_LINE_BYTES as u64)
                .read_until(b'\n', &mut buf)
                .map_err(|e| self.io(e))?;
            if n == 0 {
                return Ok(());
            }
            if buf.last() == Some(&b'\n') {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
            } else if n == MAX_LINE_BYTES && self.skip_rest(&mut r)? {
                self.clipped += 1;
            }
            self.push(&String::from_utf8_lossy(&buf))?;
        }
    }

    /// Skips the rest of a line cut at [`MAX_LINE_BYTES`]; whether anything but its line
    /// ending was left.
    fn skip_rest<R: BufRead>(&self, r: &mut R) -> Result<bool, ForensicsError> {
        let next = r.fill_buf().map_err(|e| self.io(e))?;
        match next.first() {
            None => Ok(false),
            Some(b'\n') => {
                r.consume(1);
                Ok(false)
            }
            Some(_) => {
                r.skip_until(b'\n').map_err(|e| self.io(e))?;
                Ok(true)
            }
        }
    }

    fn io(&self, source: std::io::Error) -> ForensicsError {
        ForensicsError::Io {
            name: self.f.name.clone(),
            line: self.lines,
            source,
        }
    }

    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Lines [`read`](Self::read) cut at [`MAX_LINE_BYTES`] (a failure past the cut is not
    /// counted).
    pub fn clipped_lines(&self) -> u64 {
        self.clipped
    }

    /// What the log says.
    pub fn finish(self) -> LogForensics {
        let mut f = self.f;
        f.truncated = f.missing_header || (f.attempts > 0 && !self.ended);
        f
    }
}

/// Reads a trainer log from `r` (the caller opens it; `name` is how tables and errors refer
/// to it), one line at a time: see [`LogReader`].
pub fn parse_reader<R: BufRead>(name: &str, r: R) -> Result<LogForensics, ForensicsError> {
    let mut reader = LogReader::new(name);
    reader.read(r)?;
    Ok(reader.finish())
}

/// Reads a trainer log's text. `name` is how tables and errors refer to it. Unlike
/// [`parse_reader`] there is no cap: the text is in memory already, and it has more lines than
/// the result has groups.
pub fn parse_log(name: &str, text: &str) -> LogForensics {
    let mut reader = LogReader::new(name).with_limit(usize::MAX);
    for line in text.lines() {
        // A vector cannot hold usize::MAX entries, so the limit is never the error.
        reader.push(line).expect("no limit on in-memory text");
    }
    reader.finish()
}

impl LogForensics {
    /// Failed reserves in `phase`, over all sizes.
    pub fn failure_count(&self, phase: Phase) -> u32 {
        self.failures
            .iter()
            .filter(|g| g.phase == phase)
            .map(|g| g.count)
            .sum()
    }
}

/// Bytes in the largest binary unit that divides them exactly (`32 MiB`, `1 GiB`, `81920 B`
/// stays `80 KiB`); sizes in logs are exact, so no rounding.
pub(crate) fn exact_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} B")
}

/// One row of the incident table, as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IncidentRow {
    /// The log's name.
    pub log: String,
    /// `2 (appended)`, `≥1 (truncated)`, `1`.
    pub attempts: String,
    /// `step 400, then step 300`, `survived`, `unknown`.
    pub died_at: String,
    /// `1 GiB ×7, 32 MiB ×104`; page-reported sizes say `(page)`.
    pub failures: String,
    /// `1 GiB before step 0; 32 MiB after step 100`.
    pub placement: String,
}

impl IncidentRow {
    /// The row of one log.
    pub fn of(log: &LogForensics) -> Self {
        let attempts = match (log.missing_header, log.attempts) {
            (true, n) => format!("≥{n} (truncated)"),
            (false, n) if n > 1 => format!("{n} (appended)"),
            (false, n) if log.truncated => format!("{n} (truncated)"),
            (false, n) => n.to_string(),
        };
        let died_at = if !log.died_at.is_empty() {
            log.died_at
                .iter()
                .map(|s| format!("step {s}"))
                .collect::<Vec<_>>()
                .join(", then ")
        } else if log.completed {
            "survived".to_string()
        } else if log.truncated {
            match log.last_step {
                Some(s) => format!("unknown (after step {s})"),
                None => "unknown (before step 0)".to_string(),
            }
        } else {
            "—".to_string()
        };
        let size = |g: &FailureGroup| match g.reported {
            Reported::Requested => exact_bytes(g.bytes),
            Reported::Page => format!("{} (page)", exact_bytes(g.bytes)),
        };
        let failures = if log.failures.is_empty() {
            "none".to_string()
        } else {
            log.failures
                .iter()
                .map(|g| format!("{} ×{}", size(g), g.count))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Sizes per place, places and sizes in order of first appearance; found through
        // hashes, as a log may hold many of both. A place is its words' key: every init
        // failure is "before step 0", whatever its step.
        let mut places: Vec<(String, Vec<String>)> = vec![];
        let mut place_of: HashMap<(Phase, Option<u32>), usize> = HashMap::new();
        let mut seen: HashSet<(usize, u64)> = HashSet::new();
        for g in &log.failures {
            let key = match g.phase {
                Phase::Init => (Phase::Init, None),
                Phase::Run => (Phase::Run, g.after_step),
            };
            let p = *place_of.entry(key).or_insert_with(|| {
                let place = match key {
                    (Phase::Init, _) => "before step 0".to_string(),
                    (Phase::Run, Some(s)) => format!("after step {s}"),
                    (Phase::Run, None) => "during the run".to_string(),
                };
                places.push((place, vec![]));
                places.len() - 1
            });
            // exact_bytes is one-to-one, so sizes dedupe by bytes.
            if seen.insert((p, g.bytes)) {
                places[p].1.push(exact_bytes(g.bytes));
            }
        }
        let placement = if places.is_empty() {
            "—".to_string()
        } else {
            places
                .iter()
                .map(|(p, sizes)| format!("{} {p}", sizes.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        };
        IncidentRow {
            log: log.name.clone(),
            attempts,
            died_at,
            failures,
            placement,
        }
    }
}

/// The incident table: one row per log, in the given order.
pub fn incident_table(logs: &[LogForensics]) -> Vec<IncidentRow> {
    logs.iter().map(IncidentRow::of).collect()
}

/// The incident table as a markdown table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentTable(pub Vec<IncidentRow>);

impl IncidentTable {
    /// The table of `logs`.
    pub fn new(logs: &[LogForensics]) -> Self {
        IncidentTable(incident_table(logs))
    }
}

impl fmt::Display for IncidentTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| log | attempts | died at | reserve failures | where |")?;
        write!(f, "|---|---|---|---|---|")?;
        for r in &self.0 {
            write!(
                f,
                "\n| {} | {} | {} | {} | {} |",
                r.log, r.attempts, r.died_at, r.failures, r.placement
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB32: u64 = 33_554_432;

    #[test]
    fn classifies_the_seed_lines() {
        assert_eq!(
            classify(
                "failed to reserve 33554432 bytes of device memory: out of device memory \
                 allocating 33554432 bytes"
            ),
            Line::Failure {
                bytes: MIB32,
                reported: Reported::Requested
            }
        );
        assert_eq!(
            classify("train failed: step 300: device error (loss is not a scalar)"),
            Line::Death(Some(300))
        );
        assert_eq!(
            classify(
                "thread 'DSD-0-0' panicked at vendor/cubecl-fix/cubecl-cuda/src/compute/server.rs:144:35:"
            ),
            Line::Other
        );
    }

    #[test]
    fn classifies_upstream_cubecl() {
        assert_eq!(
            classify(
                "called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: \
                 268435456"
            ),
            Line::Failure {
                bytes: 268_435_456,
                reported: Reported::Page
            }
        );
        // The caught panic's log line carries no size and is not a second failure.
        assert_eq!(
            classify(
                "[2026-09-30T10:00:00Z WARN  cubecl_common::device::handle::channel] Task failed: Any { .. }"
            ),
            Line::Other
        );
    }

    #[test]
    fn step_lines_and_their_lookalikes() {
        assert_eq!(
            classify("step 100 | loss 3.21 | lr 3.0e-4"),
            Line::Step(100)
        );
        assert_eq!(
            classify("[12:00:01 INFO train] step 0 | loss 9.8"),
            Line::Step(0)
        );
        assert_eq!(classify("step 7"), Line::Step(7));
        assert_eq!(classify("eval step 500 | window 81920 B"), Line::Other);
        assert_eq!(classify("steps 100"), Line::Other);
        assert_eq!(classify("step 12abc"), Line::Other);
        assert_eq!(classify("train start: preset=x.toml"), Line::Header);
        assert_eq!(classify("train done: 2000 steps"), Line::Done);
    }

    #[test]
    fn phases_reset_with_each_attempt() {
        let log = "train start: a\n\
                   failed to reserve 1073741824 bytes of device memory\n\
                   step 0 | loss 9\n\
                   step 100 | loss 8\n\
                   failed to reserve 33554432 bytes of device memory\n\
                   train failed: step 200: device error (loss is not a scalar)\n\
                   train start: b\n\
                   failed to reserve 1073741824 bytes of device memory\n\
                   step 0 | loss 9\n\
                   failed to reserve 33554432 bytes of device memory\n\
                   train failed: step 100: device error (loss is not a scalar)\n";
        let f = parse_log("x.log", log);
        assert_eq!(f.attempts, 2);
        assert_eq!(f.died_at, vec![200, 100]);
        assert!(!f.truncated);
        assert_eq!(f.failure_count(Phase::Init), 2);
        assert_eq!(f.failure_count(Phase::Run), 2);
        // The group keeps the step line before its first failure.
        let run = f.failures.iter().find(|g| g.phase == Phase::Run).unwrap();
        assert_eq!(run.after_step, Some(100));
    }

    #[test]
    fn headless_and_unfinished_logs_are_truncated() {
        let f = parse_log("cut.log", "failed to reserve 1073741824 bytes\n");
        assert!(f.truncated && f.missing_header);
        assert_eq!(f.attempts, 1);
        let f = parse_log("cut.log", "train start: x\nstep 0 | loss 1\n");
        assert!(f.truncated && !f.missing_header);
        let f = parse_log(
            "ok.log",
            "train start: x\nstep 0 | loss 1\ntrain done: 1 steps\n",
        );
        assert!(!f.truncated && f.completed);
        let f = parse_log("empty.log", "");
        assert_eq!((f.attempts, f.truncated), (0, false));
    }

    #[test]
    fn many_distinct_sizes_count_and_keep_their_order() {
        // 20 000 sizes, each failing twice after step 0 and once before it: linear, so cheap.
        const N: u64 = 20_000;
        let mut log = String::from("train start: x\n");
        for i in 0..N {
            log.push_str(&format!("failed to reserve {} bytes\n", 4096 * (i + 1)));
        }
        log.push_str("step 0 | loss 1\n");
        for round in 0..2 {
            for i in 0..N {
                let bytes = 4096 * (i + 1);
                match round {
                    0 => log.push_str(&format!("failed to reserve {bytes} bytes\n")),
                    _ => log.push_str(&format!("can't allocate buffer of size: {bytes}\n")),
                }
            }
        }
        log.push_str("train failed: step 0: device error\n");
        let f = parse_log("many.log", &log);
        assert_eq!(f.failures.len(), 3 * N as usize);
        assert!(f.failures.iter().all(|g| g.count == 1));
        let (init, run) = f.failures.split_at(N as usize);
        assert!(init.iter().all(|g| g.phase == Phase::Init));
        assert!(run.iter().all(|g| g.after_step == Some(0)));
        assert!(
            init.iter()
                .enumerate()
                .all(|(i, g)| g.bytes == 4096 * (i as u64 + 1))
        );
        assert_eq!(run[N as usize].reported, Reported::Page);
        let row = IncidentRow::of(&f);
        // Each size once per place, though it failed in two shapes there.
        let place = |p: &str| row.placement.split("; ").find(|s| s.ends_with(p)).unwrap();
        assert_eq!(place("after step 0").matches(", ").count(), N as usize - 1);
        assert!(row.placement.starts_with("4 KiB, 8 KiB, 12 KiB, "));
        assert_eq!(row.failures.matches(" ×1").count(), 3 * N as usize);
    }

    #[test]
    fn limits_name_themselves() {
        let log = "failed to reserve 1 bytes\nfailed to reserve 2 bytes\n\
                   failed to reserve 1 bytes\nfailed to reserve 3 bytes\n";
        let mut r = LogReader::new("cap.log").with_limit(2);
        let err = r.read(log.as_bytes()).unwrap_err().to_string();
        assert_eq!(
            err,
            "cap.log:4: more than 2 distinct failed reserves (size, phase, message shape); \
             forensics keeps at most MAX_RECORDS (2) per log"
        );
        let deaths = "train failed: step 1: x\n".repeat(3);
        let err = parse_reader_limited(&deaths, 2).unwrap_err().to_string();
        assert!(err.starts_with("d.log:3: more than 2 deaths;"), "{err}");
        // At the limit is fine.
        assert_eq!(parse_reader_limited(&deaths, 3).unwrap().died_at, [1, 1, 1]);
    }

    fn parse_reader_limited(text: &str, limit: usize) -> Result<LogForensics, ForensicsError> {
        let mut r = LogReader::new("d.log").with_limit(limit);
        r.read(text.as_bytes())?;
        Ok(r.finish())
    }

    #[test]
    fn overlong_lines_are_cut_and_counted() {
        let mut log = b"train start: x\n".to_vec();
        // A line of exactly the limit is whole; one past it loses its tail (and the failure
        // in it); the lines after both read as usual.
        log.extend(vec![b'x'; MAX_LINE_BYTES]);
        log.push(b'\n');
        log.extend(vec![b'x'; MAX_LINE_BYTES]);
        log.extend(b" failed to reserve 7 bytes\n");
        log.extend(b"failed to reserve 1024 bytes\ntrain done: 1 steps");
        let mut r = LogReader::new("long.log");
        r.read(log.as_slice()).unwrap();
        assert_eq!((r.lines(), r.clipped_lines()), (5, 1));
        let f = r.finish();
        assert_eq!(f.failures.len(), 1);
        assert_eq!(f.failures[0].bytes, 1024);
        assert!(f.completed && !f.truncated);
    }

    #[test]
    fn exact_sizes() {
        assert_eq!(exact_bytes(1 << 30), "1 GiB");
        assert_eq!(exact_bytes(MIB32), "32 MiB");
        assert_eq!(exact_bytes(81_920), "80 KiB");
        assert_eq!(exact_bytes(1000), "1000 B");
        assert_eq!(exact_bytes(0), "0 B");
    }

    #[test]
    fn rows_say_it_in_words() {
        let log = "train start: a\n\
                   failed to reserve 1073741824 bytes\n\
                   step 0 | loss 9\n\
                   step 100 | loss 8\n\
                   can't allocate buffer of size: 268435456\n\
                   train failed: step 200: device error (loss is not a scalar)\n";
        let row = IncidentRow::of(&parse_log("a.log", log));
        assert_eq!(row.attempts, "1");
        assert_eq!(row.died_at, "step 200");
        assert_eq!(row.failures, "1 GiB ×1, 256 MiB (page) ×1");
        assert_eq!(row.placement, "1 GiB before step 0; 256 MiB after step 100");
    }
}
