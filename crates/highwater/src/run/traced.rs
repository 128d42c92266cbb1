//! The trace of a step range: a run that records every pool event of the steps asked for.

use crate::limits::{MAX_STEPS, MAX_TRACE_EVENTS};
use crate::memtrace::MemTrace;
use crate::recipe::Recipe;
use crate::trace::step_trace;

#[cfg(doc)]
use super::simulate;
use super::simulation::{Recording, Simulation};
use super::{NoSink, RunReport};

/// A step range that cannot be traced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The range is empty or starts before step 1.
    #[error(
        "cannot trace steps {first}..={last}: the range must be non-empty and start at 1 or later"
    )]
    Range {
        /// First step asked for.
        first: u64,
        /// Last step asked for.
        last: u64,
    },
    /// The trainer died before the range began: there is nothing to trace.
    #[error(
        "cannot trace steps {first}..={last}: the run died at step {died}, before step {first}"
    )]
    DiedBefore {
        /// First step asked for.
        first: u64,
        /// Last step asked for.
        last: u64,
        /// The step it died at.
        died: u64,
    },
    /// The run or the trace would be too large.
    #[error("cannot trace steps {first}..={last}: {what} {why}")]
    TooLarge {
        /// First step asked for.
        first: u64,
        /// Last step asked for.
        last: u64,
        /// What is too large.
        what: &'static str,
        /// By how much, and which limit.
        why: String,
    },
}

/// Simulates `recipe` with `seed` up to step `*steps.end()` (or its death) and records every
/// pool event of the steps in `steps` (see [`crate::memtrace`]). The run's figures are those
/// of [`simulate`]: tracing only turns off shortcuts that change none of them. The range is
/// checked against [`MAX_STEPS`] and [`MAX_TRACE_EVENTS`] before anything runs.
pub fn simulate_traced(
    recipe: &Recipe,
    seed: u64,
    steps: std::ops::RangeInclusive<u64>,
) -> Result<(RunReport, MemTrace), TraceError> {
    let (first, last) = (*steps.start(), *steps.end());
    if first == 0 || first > last {
        return Err(TraceError::Range { first, last });
    }
    let too_large = |what, why| TraceError::TooLarge {
        first,
        last,
        what,
        why,
    };
    MAX_STEPS
        .check(last)
        .map_err(|why| too_large("the last step", why))?;
    let mut sim = Simulation::new(recipe, seed);
    // Every traced step replays its plan's events, plus at most a page event per reserve.
    let per_step = [1, 2].map(|s| {
        let t = step_trace(recipe, &sim.ledger, s);
        2 * t.events.len() as u64
    });
    let estimate = per_step[0].max(per_step[1]) * (last - first + 1) + sim.init.len() as u64;
    MAX_TRACE_EVENTS
        .check(estimate)
        .map_err(|why| too_large("the trace (estimated events)", why))?;
    sim.rec = Some(Recording {
        first,
        last,
        events: vec![],
    });
    let report = sim.run(last, &mut NoSink);
    let rec = sim.rec.take().expect("the recording is kept to the end");
    if let Some(died) = report.died_at.filter(|&d| d < first) {
        return Err(TraceError::DiedBefore { first, last, died });
    }
    let trace = MemTrace {
        recipe: recipe.origin.clone(),
        seed,
        capacity: report.capacity,
        first_step: first,
        // A death before `first` was refused above.
        last_step: report.died_at.unwrap_or(last),
        died_at: report.died_at,
        labels: sim.labels.labels,
        events: rec.events,
    };
    Ok((report, trace))
}
