//! What a run reports: the report, its per-step records and failures, and the sink they go to.

use serde::{Deserialize, Serialize};

use crate::trace::Phase;

/// A reserve the pool could not satisfy, during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// 1-based step.
    pub step: u64,
    /// Bytes the tensor asked for.
    pub requested: u64,
    /// Page size the pool asked of the driver.
    pub page: u64,
    /// Where in the step.
    pub phase: Phase,
}

/// Figures of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepRecord {
    /// 1-based step.
    pub step: u64,
    /// Highest bytes in use (live slices, weights included) during the step.
    pub peak_in_use: u64,
    /// Bytes in use when the forward ends: what autodiff keeps for backward, weights,
    /// optimizer state.
    pub in_use_after_forward: u64,
    /// Bytes in use when the backward ends: gradients waiting for the optimizer too.
    pub in_use_after_backward: u64,
    /// Bytes of pages held at the end of the step.
    pub reserved: u64,
    /// Pages held at the end of the step.
    pub pages: u32,
    /// Reserves that failed during the step.
    pub failures: u32,
    /// Whether the step's releases were on time (false: some came late).
    pub on_time: bool,
    /// Whether the step was replayed event by event (false: proven to repeat).
    pub replayed: bool,
}

/// Receives a run as it goes (ripgrep-style sink), e.g. for a progress bar.
pub trait Sink {
    /// After every step.
    fn step(&mut self, _record: &StepRecord) {}
    /// When the trainer dies.
    fn died(&mut self, _step: u64) {}
}

/// A sink that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSink;
impl Sink for NoSink {}

/// One run of one recipe with one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The recipe's origin.
    pub recipe: String,
    /// The seed of the release jitter.
    pub seed: u64,
    /// Steps asked for.
    pub steps: u64,
    /// The step whose loss read found a dead tensor; `None` if it survived.
    pub died_at: Option<u64>,
    /// Per step, up to the death: [`StepRecord::peak_in_use`].
    pub peak_in_use: Vec<u64>,
    /// Per step: [`StepRecord::in_use_after_forward`].
    pub in_use_after_forward: Vec<u64>,
    /// Per step: [`StepRecord::in_use_after_backward`].
    pub in_use_after_backward: Vec<u64>,
    /// Per step: [`StepRecord::reserved`].
    pub reserved: Vec<u64>,
    /// Per step: [`StepRecord::pages`].
    pub pages: Vec<u32>,
    /// Every failed reserve, in order.
    pub failures: Vec<Failure>,
    /// What the pool could take: card total less desktop and CUDA context.
    pub capacity: u64,
    /// Steps replayed event by event (the rest were proven repeats).
    pub replayed_steps: u64,
    /// Steps with late releases.
    pub late_steps: u64,
}

impl RunReport {
    /// Highest bytes in use over the run.
    pub fn high_water(&self) -> u64 {
        self.peak_in_use.iter().copied().max().unwrap_or(0)
    }

    /// Bytes reserved at the end.
    pub fn final_reserved(&self) -> u64 {
        self.reserved.last().copied().unwrap_or(0)
    }

    /// The first step with a failed reserve.
    pub fn first_failure(&self) -> Option<u64> {
        self.failures.first().map(|f| f.step)
    }
}
