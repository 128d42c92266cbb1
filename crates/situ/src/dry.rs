//! The recipe's training step on the dry runtime: the same [`Trainer`] that `highwater rerun`
//! runs on burn-cuda, over `dryrun::DryRuntime`, so that every byte the pool holds is decided by
//! burn's and CubeCL's own code and no GPU is needed.
//!
//! A page the card could not hold is recorded, then refused as the card would refuse it (what
//! follows — cubecl's server panicking on its thread, burn going on or failing — is what follows
//! on the GPU) or granted ([`OnRefusal`]), so that the run goes on and reports how much it would
//! have needed. Either way the run dies, as a GPU run would, at the step and phase of the first
//! refusal.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::{BalancedCheckpointing, NoCheckpointing};
use burn_cubecl::CubeBackend;
use burn_fusion::Fusion;
use dryrun::{AutotuneError, CardProfile, DryDevice, DryRuntime, OnRefusal, OutOfMemory, Tuned};
use highwater::conform::{Exactness, MeasuredDeath, MeasuredStep, RerunRecord, exactness};
use highwater::pool::PoolUsage;
use highwater::recipe::{Backend, Checkpointing, Recipe};
use highwater::trace::Phase;

use crate::SOFT_CAP;
use crate::train::{PoolProbe, TrainBackend, Trainer, client_usage, panic_message};

/// burn-cubecl's unfused backend on the dry runtime (every op materializes its output).
pub type DryCube = CubeBackend<DryRuntime, f32, i32, u8>;
/// burn-cuda's default arrangement, `Fusion` over the same, on the dry runtime.
pub type DryFused = Fusion<DryCube>;

/// What to run dry.
#[derive(Debug, Clone)]
pub struct DryPlan {
    /// Overrides (activation, checkpointing, backend) already applied.
    pub recipe: Recipe,
    pub steps: u64,
    pub seed: u64,
    /// Bytes the pools may take: the card's free memory, or what an emulated card leaves.
    pub capacity: u64,
    /// A page beyond `capacity`: refused as on the card, or granted to measure the need.
    pub on_refusal: OnRefusal,
    /// Read the loss back every this many steps, and at the last (a trainer's log line).
    pub log_every: u64,
}

/// A page the card refused, placed in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub step: u64,
    pub phase: Phase,
    pub out_of_memory: OutOfMemory,
}

/// A dry run's measurements, in the rerun's terms.
#[derive(Debug, Clone)]
pub struct DryOutcome {
    /// Every step completed: up to the death (excluded) when pages are refused, all of them when
    /// they are granted.
    pub steps: Vec<MeasuredStep>,
    /// Where the first refused page stopped (or would have stopped) a GPU run.
    pub died: Option<MeasuredDeath>,
    /// Every page refused, in order.
    pub refused: Vec<Refusal>,
    /// The most the pools' pages ever took: the capacity the run needed.
    pub peak_bytes: u64,
    /// Problems autotuned on the dry device because the GPU's cache lacked them.
    pub autotune_misses: Vec<Tuned>,
}

/// Runs `plan` on a new dry device of `card`, tuned from the GPU's autotune cache `autotune`.
pub fn dry_run(
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<DryOutcome, AutotuneError> {
    let device = DryDevice::new(card, plan.capacity, plan.on_refusal, autotune)?;
    type CubeNone = Autodiff<DryCube, NoCheckpointing>;
    type CubeBalanced = Autodiff<DryCube, BalancedCheckpointing>;
    type FusedNone = Autodiff<DryFused, NoCheckpointing>;
    type FusedBalanced = Autodiff<DryFused, BalancedCheckpointing>;
    let run = match (plan.recipe.backend, plan.recipe.checkpointing) {
        (Backend::Cube, Checkpointing::None) => run_on::<CubeNone>,
        (Backend::Cube, Checkpointing::Balanced) => run_on::<CubeBalanced>,
        (Backend::Fusion, Checkpointing::None) => run_on::<FusedNone>,
        (Backend::Fusion, Checkpointing::Balanced) => run_on::<FusedBalanced>,
    };
    Ok(run(plan, &device))
}

fn run_on<B: TrainBackend<Device = DryDevice>>(plan: &DryPlan, device: &DryDevice) -> DryOutcome {
    let probe = DryProbe::<B>::new(device.clone());
    let outcome = |steps, died, probe: DryProbe<B>| DryOutcome {
        steps,
        died,
        refused: probe.refused.take(),
        peak_bytes: device.memory().peak(),
        autotune_misses: device.autotune_misses(),
    };
    let created = catch_unwind(|| Trainer::<B>::new(&plan.recipe, plan.seed, SOFT_CAP, device));
    probe.collect();
    let mut trainer = match created {
        Ok(trainer) => trainer,
        Err(panic) => {
            let death = MeasuredDeath {
                step: 0,
                phase: Phase::Init,
                message: panic_message(&panic),
                failed_pages: probe.pages_of(0),
            };
            return outcome(vec![], Some(death), probe);
        }
    };
    let mut steps = Vec::new();
    let mut died = None;
    for step in 1..=plan.steps {
        probe.step.set(step);
        let read_loss = step.is_multiple_of(plan.log_every) || step == plan.steps;
        let measured = catch_unwind(AssertUnwindSafe(|| trainer.step(&probe, read_loss)))
            .unwrap_or_else(|panic| {
                Err(MeasuredDeath {
                    step,
                    phase: trainer.phase(),
                    message: panic_message(&panic),
                    failed_pages: vec![],
                })
            });
        probe.collect();
        let first = probe
            .refused
            .borrow()
            .iter()
            .find(|r| r.step == step)
            .map(|r| (r.phase, r.out_of_memory));
        let pages = probe.pages_of(step);
        match (measured, first) {
            (Ok(m), None) => steps.push(m),
            (Ok(m), Some((phase, oom))) => {
                died.get_or_insert(MeasuredDeath {
                    step,
                    phase,
                    message: refusal_message(oom),
                    failed_pages: pages,
                });
                if plan.on_refusal == OnRefusal::Refuse {
                    break;
                }
                // Granted pages leave the run intact: it goes on to say what it would need.
                steps.push(m);
            }
            (Err(mut death), _) => {
                death.failed_pages = pages;
                died.get_or_insert(death);
                break;
            }
        }
    }
    outcome(steps, died, probe)
}

/// cubecl-cuda 0.10's message for a refused page (`IoError::BufferTooBig`), with the books.
fn refusal_message(oom: OutOfMemory) -> String {
    format!(
        "can't allocate buffer of size: {} (reserving {} bytes; the pools held {} of {} bytes)",
        oom.page, oom.requested, oom.allocated, oom.capacity
    )
}

/// Reads the dry device's pool and files its refusals under the step and phase running.
struct DryProbe<B> {
    device: DryDevice,
    step: Cell<u64>,
    phase: Cell<Phase>,
    refused: RefCell<Vec<Refusal>>,
    _b: std::marker::PhantomData<B>,
}

impl<B: burn::tensor::backend::Backend<Device = DryDevice>> DryProbe<B> {
    fn new(device: DryDevice) -> Self {
        Self {
            device,
            step: Cell::new(0),
            phase: Cell::new(Phase::Init),
            refused: RefCell::new(Vec::new()),
            _b: std::marker::PhantomData,
        }
    }

    /// The pages refused in `step`, in order.
    fn pages_of(&self, step: u64) -> Vec<u64> {
        let refused = self.refused.borrow();
        refused
            .iter()
            .filter(|r| r.step == step)
            .map(|r| r.out_of_memory.page)
            .collect()
    }

    /// Files what the card refused under the step and phase running. Called where the trainer
    /// has just synchronized the device (after each phase), so nothing is still queued.
    fn collect(&self) {
        let (step, phase) = (self.step.get(), self.phase.get());
        self.refused
            .borrow_mut()
            .extend(
                self.device
                    .memory()
                    .take_refused()
                    .into_iter()
                    .map(|out_of_memory| Refusal {
                        step,
                        phase,
                        out_of_memory,
                    }),
            );
    }
}

impl<B: burn::tensor::backend::Backend<Device = DryDevice>> PoolProbe for DryProbe<B> {
    fn sync(&self) -> Result<(), String> {
        B::sync(&self.device).map_err(|e| e.to_string())
    }

    fn phase(&self, phase: Phase) {
        self.collect();
        self.phase.set(phase);
    }

    fn usage(&self) -> Result<Option<PoolUsage>, String> {
        client_usage::<DryRuntime>(&self.device)
    }
}

/// Why a recorded run cannot be replayed dry.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the recorded recipe does not parse")]
    Recipe(#[from] highwater::recipe::RecipeError),
    #[error(
        "the run was recorded on a card of {recorded} bytes, the profile is of one of {profile} \
         (the pools' page sizes follow the total)"
    )]
    OtherCard { recorded: u64, profile: u64 },
    #[error(transparent)]
    Autotune(#[from] AutotuneError),
}

/// The plan that replays a run recorded by `highwater rerun`: its recipe with the run's
/// overrides, its steps and seed, what its pools could take, its loss reads.
pub fn plan_for(record: &RerunRecord) -> Result<DryPlan, ReplayError> {
    let log_every = record
        .steps
        .iter()
        .find(|s| s.loss.is_some() && s.step < record.steps_asked)
        .map_or(record.steps_asked.max(1), |s| s.step);
    Ok(DryPlan {
        recipe: record.recipe()?,
        steps: record.steps_asked,
        seed: record.seed,
        capacity: record.device.pool_capacity,
        on_refusal: OnRefusal::Refuse,
        log_every,
    })
}

/// Replays `record` dry on `card` and holds it to the record, byte for byte, or within what
/// the GPU varied by across `repeats` of the same run.
pub fn replay(
    record: &RerunRecord,
    repeats: &[RerunRecord],
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<(DryOutcome, Exactness), ReplayError> {
    if card.total_bytes != record.device.total_bytes {
        return Err(ReplayError::OtherCard {
            recorded: record.device.total_bytes,
            profile: card.total_bytes,
        });
    }
    let outcome = dry_run(&plan_for(record)?, card, autotune)?;
    let exactness = exactness(record, repeats, &outcome.steps, outcome.died.as_ref());
    Ok((outcome, exactness))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(on_refusal: OnRefusal, capacity: u64) -> (DryPlan, Arc<CardProfile>) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let card = CardProfile::read(&root.join("repro/cards/h200.json")).unwrap();
        let text = std::fs::read_to_string(root.join("repro/recipes/wave-stack.toml")).unwrap();
        let recipe = Recipe::parse("wave-stack.toml", &text).unwrap();
        let plan = DryPlan {
            recipe,
            steps: 3,
            seed: 1,
            capacity,
            on_refusal,
            log_every: 3,
        };
        (plan, Arc::new(card))
    }

    #[test]
    fn a_granted_run_dies_where_the_card_would_and_says_what_it_needed() {
        let (roomy, card) = plan(OnRefusal::Grant, u64::MAX);
        let need = dry_run(&roomy, card.clone(), None).unwrap();
        assert!(need.died.is_none() && need.refused.is_empty());
        let (tight, _) = plan(OnRefusal::Grant, need.peak_bytes / 2);
        let granted = dry_run(&tight, card.clone(), None).unwrap();
        let death = granted.died.as_ref().expect("half the need is too little");
        assert_eq!(death.step, 1);
        assert_eq!(granted.steps.len(), 3, "granted pages: the run goes on");
        assert_eq!(
            granted.peak_bytes, need.peak_bytes,
            "and needs what the roomy run took"
        );
        let figures = |o: &DryOutcome| -> Vec<(u64, u64, u64)> {
            o.steps
                .iter()
                .map(|s| (s.in_use_after_forward, s.in_use_after_backward, s.reserved))
                .collect()
        };
        assert_eq!(
            figures(&granted),
            figures(&need),
            "granting changes nothing but the books"
        );
        assert!(!granted.refused.is_empty());

        let (refusing, _) = plan(OnRefusal::Refuse, need.peak_bytes / 2);
        let refused = dry_run(&refusing, card, None).unwrap();
        let d = refused.died.as_ref().expect("the card refuses");
        assert_eq!(
            (d.step, refused.steps.len()),
            (1, 0),
            "dies in its first step"
        );
        assert!(
            refused.peak_bytes <= need.peak_bytes / 2,
            "never past the card"
        );
        assert_eq!(d.failed_pages[0], granted.refused[0].out_of_memory.page);
    }
}
