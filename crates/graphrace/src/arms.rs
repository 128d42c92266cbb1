//! What `graphrace-gpu`'s default mode writes (`repro/results/graphrace-h200.json`): the four
//! arms replayed on a GPU under load, at every concurrency and slowdown of the side's store.
//!
//! The binary serializes an [`ArmsRecord`] and the book deserializes the same type, so that a
//! field renamed on one side is a compile error on the other, and a committed file that lacks a
//! field fails to read with the field named. Every field is required and no object takes a
//! field it does not know.

use serde::{Deserialize, Serialize};

/// The recorded file: provenance first, `command` the very first field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmsRecord {
    /// The command that wrote the file.
    pub command: String,
    /// The GPU's name.
    pub gpu: String,
    /// The driver's version.
    pub driver: String,
    /// When (UTC).
    pub date: String,
    /// The repository's revision the binary was built from.
    pub git_revision: String,
    /// SM clock measured at start-up (kHz): the kernels' waits are in its cycles.
    pub sm_clock_khz: i32,
    /// What every arm was run with.
    pub settings: ArmsSettings,
    /// One per arm, sessions and slowdown, slowdown by slowdown, then sessions, then arm.
    pub results: Vec<ArmPoint>,
}

/// What every arm was run with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmsSettings {
    /// The concurrencies: the graph's batch.
    pub sessions: Vec<u32>,
    /// Replays per load test.
    pub replays_per_trial: u32,
    /// Load tests per point.
    pub trials: u32,
    /// The slowdowns of the side's store (`--side-stretch`).
    pub side_stretch: Vec<f64>,
    /// Thread blocks per kernel.
    pub blocks_per_kernel: u32,
    /// A bandwidth hog ran on a third stream.
    pub load: bool,
    /// The command that built the binary.
    pub build: String,
}

/// One measured point: an arm at one concurrency and one slowdown of the side's store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmPoint {
    /// `overlap`, `serialized`, `eager`, `recorded` (`suite` in a suite's run).
    pub arm: String,
    /// The configuration in `repro/graphrace/` the arm runs.
    pub config: String,
    /// Concurrent sessions: the graph's batch.
    pub sessions: u32,
    /// How much the side's store was slowed (`--side-stretch`).
    pub side_stretch: f64,
    /// Sessions whose row was wrong after any replay of their load test.
    pub corrupted: u64,
    /// Sessions observed, over every load test of the point.
    pub observed: u64,
    /// `corrupted / observed`.
    pub rate: f64,
    /// Replays that left a wrong row.
    pub racing_replays: u64,
    /// Replays, over every load test of the point.
    pub replays: u64,
    /// Host-measured wall time per replay (graph or eager walk + check).
    pub us_per_replay: f64,
}

impl ArmPoint {
    /// Sessions corrupted, in percent of those observed.
    pub fn percent(&self) -> f64 {
        100.0 * self.corrupted as f64 / self.observed as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_record_holds_exactly_what_this_type_writes() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../repro/results/graphrace-h200.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let record: ArmsRecord = serde_json::from_str(&text).unwrap();
        let committed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_value(&record).unwrap(), committed);
        assert_eq!(record.results[0].percent(), 75.0);
    }
}
