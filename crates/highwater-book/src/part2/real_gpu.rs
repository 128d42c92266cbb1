//! *On a real GPU*'s record (`repro/results/graphrace-h200.json`), one point per arm,
//! concurrency and slowdown of the side's store.

use serde::Deserialize;

use crate::json::Json;
use crate::load::{Book, BookError, RESULTS};

/// The GPU repro's record, under the book's root.
pub const GRAPHRACE_H200: &str = "graphrace-h200.json";

/// One measured point: an arm at one concurrency and one slowdown of the side's store.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Point {
    /// `overlap`, `serialized`, `eager`, `recorded`.
    pub arm: String,
    /// The configuration in `repro/graphrace/` the arm runs.
    pub config: String,
    /// Concurrent sessions: the graph's batch.
    pub sessions: u32,
    /// How much the side's store was slowed (`--side-stretch`).
    #[serde(rename = "side_stretch")]
    pub stretch: f64,
    /// Sessions whose row was wrong after any replay of their load test.
    pub corrupted: u64,
    /// Sessions observed, over every load test of the point.
    pub observed: u64,
    /// Replays that left a wrong row.
    #[serde(rename = "racing_replays")]
    pub racing: u64,
    /// Replays, over every load test of the point.
    pub replays: u64,
    /// Host-measured wall time per replay, the check included.
    pub us_per_replay: f64,
}

impl Point {
    /// Sessions corrupted, in percent of those observed.
    pub fn percent(&self) -> f64 {
        100.0 * self.corrupted as f64 / self.observed as f64
    }
}

impl Book {
    /// The GPU repro's record, as a lenient [`Json`] for its provenance.
    pub fn graphrace_gpu(&self) -> Result<Json, BookError> {
        self.json(format!("{RESULTS}/{GRAPHRACE_H200}"))
    }
}

/// The record's points, in its order.
pub fn points(run: &Json) -> Result<Vec<Point>, BookError> {
    let results = run.get("results").cloned().unwrap_or(Json::Null);
    serde_json::from_value(results).map_err(|e| BookError::Parse {
        path: format!("{RESULTS}/{GRAPHRACE_H200}"),
        reason: format!("`results`: {e}"),
    })
}

/// [`Book::graphrace_gpu`] from the cells' directory.
pub fn recorded() -> Result<Json, BookError> {
    Book::here().graphrace_gpu()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_reads_the_record_names() {
        let run = serde_json::json!({"results": [{
            "arm": "overlap", "config": "incident", "sessions": 36, "side_stretch": 1.0,
            "corrupted": 135, "observed": 180, "rate": 0.75, "racing_replays": 1000,
            "replays": 1000, "us_per_replay": 1934.9
        }]});
        let p = &points(&run).unwrap()[0];
        assert_eq!(
            (p.arm.as_str(), p.sessions, p.racing),
            ("overlap", 36, 1000)
        );
        assert_eq!(p.percent(), 75.0);
        assert!(points(&serde_json::json!({})).is_err());
    }
}
