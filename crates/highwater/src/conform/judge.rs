//! The simulator against a recorded run: the worst error of each figure, and the fate.

use serde::Serialize;

use super::{IN_USE_TOLERANCE, MeasuredStep, RESERVED_TOLERANCE, RerunRecord};
use crate::recipe::RecipeError;
use crate::run::{RunReport, simulate};

/// One run, measured against simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conformance {
    /// The record's name.
    pub name: String,
    /// Steps the record completed.
    pub steps: u64,
    /// At the step where the error is largest; `None` when no step completed on both arms
    /// (a run that died in its first step is judged by its fate alone).
    pub in_use_after_forward: Option<Compared>,
    /// Bytes reserved at the end of a step, at the step where the error is largest.
    pub reserved: Option<Compared>,
    /// The step the GPU run died at, if it did.
    pub measured_died_at: Option<u64>,
    /// The step the simulation died at, if it did.
    pub predicted_died_at: Option<u64>,
    /// The simulated run, for figures.
    pub simulated: RunReport,
}

/// A measured figure, the prediction for it, and the relative error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compared {
    /// 1-based.
    pub step: u64,
    /// Bytes on the GPU.
    pub measured: u64,
    /// Bytes simulated.
    pub predicted: u64,
    /// `(predicted - measured) / measured`.
    pub error: f64,
    /// The largest `|error|` that passes.
    pub tolerance: f64,
}

impl Compared {
    /// Within tolerance.
    pub fn passes(&self) -> bool {
        self.error.abs() <= self.tolerance
    }
}

impl Conformance {
    /// Every figure within tolerance and the same fate.
    pub fn passes(&self) -> bool {
        self.in_use_after_forward.is_none_or(|c| c.passes())
            && self.reserved.is_none_or(|c| c.passes())
            && self.measured_died_at.is_some() == self.predicted_died_at.is_some()
    }
}

/// Why a record cannot be checked.
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    /// The recipe text kept in the record does not parse now.
    #[error("the recorded recipe does not parse")]
    Recipe(#[from] RecipeError),
    /// Nothing to compare.
    #[error("the run recorded no step and no death")]
    NoSteps,
}

/// Simulates `record`'s recipe as the recorded card had it and compares, step by step, over
/// the steps both arms completed.
pub fn conform(record: &RerunRecord) -> Result<Conformance, ConformError> {
    let recipe = record.simulated_recipe()?;
    let steps = record.steps_asked.max(1);
    let sim = simulate(&recipe, record.seed, steps);
    let measured = &record.steps;
    if measured.is_empty() && record.died.is_none() {
        return Err(ConformError::NoSteps);
    }
    // (measured, predicted) of one figure at one step, if both arms have it.
    type Pick<'a> = &'a dyn Fn(&MeasuredStep, usize) -> Option<(u64, u64)>;
    let worst = |tolerance: f64, pick: Pick<'_>| {
        measured
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let (meas, pred) = pick(m, i)?;
                Some(Compared {
                    step: m.step,
                    measured: meas,
                    predicted: pred,
                    error: (pred as f64 - meas as f64) / (meas.max(1)) as f64,
                    tolerance,
                })
            })
            .max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()))
    };
    let in_use = worst(IN_USE_TOLERANCE, &|m, i| {
        Some((m.in_use_after_forward, *sim.in_use_after_forward.get(i)?))
    });
    let reserved = worst(RESERVED_TOLERANCE, &|m, i| {
        Some((m.reserved, *sim.reserved.get(i)?))
    });
    Ok(Conformance {
        name: record.name(),
        steps: measured.len() as u64,
        in_use_after_forward: in_use,
        reserved,
        measured_died_at: record.died.as_ref().map(|d| d.step),
        predicted_died_at: sim.died_at,
        simulated: sim,
    })
}
