//! Conformance: the simulator held to runs recorded on a real GPU.
//!
//! One body, two arms: `highwater rerun` (crate `situ`, feature `cuda`) trains a recipe on
//! burn-cuda and writes a [`RerunRecord`]; [`conform`] replays the same recipe through the
//! simulator, configured as that card really was (its pool sized from the total memory the
//! driver reported, its capacity what the process could really take), and compares step by
//! step. The record is plain data, so CI checks every committed run without a GPU.
//!
//! What is compared, and why these tolerances:
//! - bytes in use when the forward ends: what autodiff keeps for backward, plus weights and
//!   optimizer state. This is the ledger's claim, exact up to the pool's bookkeeping: **2 %**.
//! - bytes reserved (pages held) at the end of each step: the pool's claim. A page is coarse
//!   (up to a quarter of the card), so one extra page is a large error: **5 %**.
//! - for a run under a cap: whether it died. The simulator must kill the same arms.
//!
//! The rerun synchronizes after every phase to read the pool, so releases land in program
//! order: the simulation runs without the late-release jitter the incident's trainer needed.

mod exact;
mod judge;
mod known;
mod record;
#[cfg(test)]
mod tests;

pub use exact::{Difference, Exactness, exactness};
pub use judge::{Compared, ConformError, Conformance, conform};
pub use known::{KnownDryDifference, KnownMiss, parse_known_dry, parse_known_misses};
pub use record::{
    DeviceMemory, MeasuredDeath, MeasuredStep, NetworkRecord, Provenance, Recorded, RerunRecord,
    TunedProblem, Versions,
};

/// Live bytes after forward: allowed relative error.
pub const IN_USE_TOLERANCE: f64 = 0.02;
/// Bytes reserved: allowed relative error.
pub const RESERVED_TOLERANCE: f64 = 0.05;
