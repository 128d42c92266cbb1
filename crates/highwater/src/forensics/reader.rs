//! The streaming reader: a log, one line at a time, into a `LogForensics` under fixed caps.

use std::collections::HashMap;
use std::io::{BufRead, Read};

use super::line::{Line, classify};
use super::{AttemptPhase, FailureGroup, LogForensics, Reported};

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
    groups: HashMap<(u64, AttemptPhase, Reported), usize>,
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
                    AttemptPhase::Run
                } else {
                    AttemptPhase::Init
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
