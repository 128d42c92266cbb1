//! The line grammar: which trainer, death and failed-reserve line (either dialect) a log line is.

use super::Reported;

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
    // `highwater rerun` right-aligns the number (`step     1/100 | …`).
    if let Some(rest) = line.strip_prefix("step ").map(str::trim_start)
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
