//! The incident table: one row of words per log, and the table as markdown.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use super::{AttemptPhase, FailureGroup, LogForensics, Reported};

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
        let mut place_of: HashMap<(AttemptPhase, Option<u32>), usize> = HashMap::new();
        let mut seen: HashSet<(usize, u64)> = HashSet::new();
        for g in &log.failures {
            let key = match g.phase {
                AttemptPhase::Init => (AttemptPhase::Init, None),
                AttemptPhase::Run => (AttemptPhase::Run, g.after_step),
            };
            let p = *place_of.entry(key).or_insert_with(|| {
                let place = match key {
                    (AttemptPhase::Init, _) => "before step 0".to_string(),
                    (AttemptPhase::Run, Some(s)) => format!("after step {s}"),
                    (AttemptPhase::Run, None) => "during the run".to_string(),
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
