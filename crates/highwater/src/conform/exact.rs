//! The dry run against a recorded run: every figure of every step, byte for byte.

use serde::Serialize;

use super::{MeasuredDeath, MeasuredStep, Recorded};
use crate::trace::Phase;

/// A recorded run against a prediction that claims to be exact (the dry run: burn's and
/// CubeCL's own code): every figure of every step, byte for byte, and the same fate. Where the
/// GPU itself varied between repeats of the run, the widest spread it showed is the tolerance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exactness {
    /// The record's name.
    pub name: String,
    /// Steps completed: measured, predicted.
    pub completed: (u64, u64),
    /// Runs of this configuration on the GPU (the record and its repeats).
    pub gpu_runs: usize,
    /// The widest the GPU's runs differed on any figure of any step, in bytes: the tolerance.
    pub gpu_spread: u64,
    /// Every figure that differs from the record, in step order.
    pub differences: Vec<Difference>,
    /// Where the GPU run died: step and phase.
    pub measured_death: Option<(u64, Phase)>,
    /// Where the prediction died.
    pub predicted_death: Option<(u64, Phase)>,
}

/// One figure of one step that differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// 1-based.
    pub step: u64,
    /// `in_use_after_forward`, `in_use_after_backward` or `reserved`.
    pub figure: &'static str,
    /// Bytes on the GPU.
    pub measured: u64,
    /// Bytes predicted.
    pub predicted: u64,
}

impl Difference {
    /// `predicted - measured`, in bytes.
    pub fn bytes(&self) -> i64 {
        self.predicted as i64 - self.measured as i64
    }
}

impl Exactness {
    /// Steps compared: those both arms completed.
    pub fn steps_compared(&self) -> u64 {
        self.completed.0.min(self.completed.1)
    }

    /// No figure further from the record than the GPU is from itself, both arms completed the
    /// same steps and died (or not) alike.
    pub fn passes(&self) -> bool {
        self.passes_except(&[])
    }

    /// [`Exactness::passes`], the figures named in `known` aside.
    pub fn passes_except(&self, known: &[String]) -> bool {
        self.differences
            .iter()
            .filter(|d| !known.iter().any(|k| k == d.figure))
            .all(|d| d.bytes().unsigned_abs() <= self.gpu_spread)
            && self.completed.0 == self.completed.1
            && self.measured_death == self.predicted_death
    }
}

/// The three figures of a step, named.
fn figures(s: &MeasuredStep) -> [(&'static str, u64); 3] {
    [
        ("in_use_after_forward", s.in_use_after_forward),
        ("in_use_after_backward", s.in_use_after_backward),
        ("reserved", s.reserved),
    ]
}

/// Compares `record` (and `repeats`, the same configuration run again on the same GPU) with a
/// prediction of the run, step by step, figure by figure.
pub fn exactness<R: Recorded>(
    record: &R,
    repeats: &[R],
    steps: &[MeasuredStep],
    died: Option<&MeasuredDeath>,
) -> Exactness {
    let mut gpu_spread = 0;
    for (i, m) in record.steps().iter().enumerate() {
        for r in repeats.iter().filter_map(|repeat| repeat.steps().get(i)) {
            for ((_, a), (_, b)) in figures(m).into_iter().zip(figures(r)) {
                gpu_spread = gpu_spread.max(a.abs_diff(b));
            }
        }
    }
    let mut differences = Vec::new();
    for (m, p) in record.steps().iter().zip(steps) {
        for ((figure, measured), (_, predicted)) in figures(m).into_iter().zip(figures(p)) {
            if measured != predicted {
                differences.push(Difference {
                    step: m.step,
                    figure,
                    measured,
                    predicted,
                });
            }
        }
    }
    Exactness {
        name: record.name(),
        completed: (record.steps().len() as u64, steps.len() as u64),
        gpu_runs: 1 + repeats.len(),
        gpu_spread,
        differences,
        measured_death: record.died().map(|d| (d.step, d.phase)),
        predicted_death: died.map(|d| (d.step, d.phase)),
    }
}
