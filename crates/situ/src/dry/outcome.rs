//! What a dry run is asked ([`DryPlan`]) and what it measured ([`DryOutcome`], its
//! [`Refusal`]s): the types every entry point, the batch search and the replay share, apart from
//! the code that fills them.

use dryrun::{Entry, OnRefusal, OutOfMemory, TieBreak};
use highwater::conform::{MeasuredDeath, MeasuredStep};
use highwater::run::{Failure, RunReport};
use highwater::trace::Phase;

/// How to run dry: how long, and on how much of the card.
#[derive(Debug, Clone)]
pub struct DryPlan {
    /// Training steps.
    pub steps: u64,
    /// Seeds the backend before the step is built (values only: no byte depends on it).
    pub seed: u64,
    /// Bytes the pools may take: the card's free memory, or what an emulated card leaves.
    pub capacity: u64,
    /// A page beyond `capacity`: refused as on the card, or granted to measure the need.
    pub on_refusal: OnRefusal,
    /// Read the loss back every this many steps, and at the last (a trainer's log line).
    pub log_every: u64,
    /// How a problem the autotune cache lacks is settled on the dry device.
    pub tie_break: TieBreak,
    /// Where burn-fusion's work meets the training thread's pool-mode switches and the
    /// server's releases (the default, no lag, on CubeBackend: there is no second thread).
    pub schedule: dryrun::Schedule,
}

/// A page the card refused, placed in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// 1-based.
    pub step: u64,
    /// The phase that asked.
    pub phase: Phase,
    /// The page and what the card had left.
    pub out_of_memory: OutOfMemory,
}

/// A dry run's measurements, in the rerun's terms.
#[derive(Debug, Clone)]
pub struct DryOutcome {
    /// Every step completed: up to the death (excluded) when pages are refused, all of them when
    /// they are granted.
    pub steps: Vec<MeasuredStep>,
    /// Per completed step: the most bytes in use at any moment of it, and the pages held at
    /// its end (what a GPU run cannot read without stopping at every reservation).
    pub peak_in_use: Vec<u64>,
    /// Per completed step: the pages held at its end.
    pub pages: Vec<u32>,
    /// Where the first refused page stopped (or would have stopped) a GPU run.
    pub died: Option<MeasuredDeath>,
    /// Every page refused, in order.
    pub refused: Vec<Refusal>,
    /// The most the pools' pages ever took: the capacity the run needed.
    pub peak_bytes: u64,
    /// Problems autotuned on the dry device because the GPU's cache lacked them.
    pub autotune_misses: Vec<Entry>,
    /// Every reservation its server met, in order ([`dry_network_traced`]; empty otherwise).
    ///
    /// [`dry_network_traced`]: super::dry_network_traced
    pub server_trace: Vec<dryrun::traced::Reservation>,
}

impl DryOutcome {
    /// The run in the simulator's report type, so that plots, tables and `conform` take
    /// either. `origin` names what ran; `capacity` is the plan's.
    pub fn report(&self, origin: &str, plan: &DryPlan) -> RunReport {
        let failures = self
            .refused
            .iter()
            .map(|r| Failure {
                step: r.step,
                requested: r.out_of_memory.requested,
                page: r.out_of_memory.page,
                phase: r.phase,
            })
            .collect();
        RunReport {
            recipe: origin.to_string(),
            seed: plan.seed,
            steps: plan.steps,
            died_at: self.died.as_ref().map(|d| d.step),
            peak_in_use: self.peak_in_use.clone(),
            in_use_after_forward: self.steps.iter().map(|s| s.in_use_after_forward).collect(),
            in_use_after_backward: self.steps.iter().map(|s| s.in_use_after_backward).collect(),
            reserved: self.steps.iter().map(|s| s.reserved).collect(),
            pages: self.pages.clone(),
            failures,
            capacity: plan.capacity,
            replayed_steps: self.steps.len() as u64,
            late_steps: 0,
        }
    }
}
