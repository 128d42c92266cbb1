//! A training step on burn 0.22's dry CUDA device: burn's own code over cubecl-cuda 0.11 as the
//! stand-in crate provides it, so every byte the pools hold is decided by burn and CubeCL 0.11,
//! and no GPU is needed.
//!
//! A page the card could not hold is recorded, then refused as the card would refuse it
//! (cubecl-server reclaims, retries once, then the tensor carries the error and the next
//! synchronization reports it: the run dies there, as on the GPU) or granted, so that the run
//! goes on and says how much it would have needed.

use burn::tensor::Device;
use cubecl_cuda::dry::{self, CardProfile, DeviceOptions, OnRefusal, OutOfMemory, TieBreak};
use highwater::conform::{MeasuredDeath, MeasuredStep};
use highwater::network::{Network, Precision};
use highwater::recipe::{Backend, Checkpointing};
use highwater::run::{Failure, RunReport};

use crate::network::network_step;
use crate::train::{Trainer, TrainingStep};

/// How to run dry: how long, and on how much of the card.
#[derive(Debug, Clone)]
pub struct DryPlan {
    /// Training steps.
    pub steps: u64,
    /// Seeds the device before the step is built (values only: no byte depends on it).
    pub seed: u64,
    /// Bytes the pools may take: the card's free memory, or what a smaller card leaves.
    pub capacity: u64,
    /// A page beyond `capacity`: refused as on the card, or granted to measure the need.
    pub on_refusal: OnRefusal,
    /// Read the loss back every this many steps, and at the last (a trainer's log line).
    pub log_every: u64,
    /// How a problem autotune has to time is settled on the dry device.
    pub tie_break: TieBreak,
}

impl DryPlan {
    /// `steps` steps on the whole of `card`, pages past it refused, the loss read at the end.
    pub fn on(card: &CardProfile, steps: u64) -> Self {
        Self {
            steps,
            seed: 1,
            capacity: card.free_at_start,
            on_refusal: OnRefusal::Refuse,
            log_every: steps.max(1),
            tie_break: TieBreak::First,
        }
    }
}

/// A dry run's measurements.
#[derive(Debug, Clone)]
pub struct DryOutcome {
    /// Every step completed (up to the death, excluded).
    pub steps: Vec<MeasuredStep>,
    /// Where the run died, as it would have on the GPU.
    pub died: Option<MeasuredDeath>,
    /// Every page refused (or granted past the card), in order.
    pub refused: Vec<OutOfMemory>,
    /// The most the pools' pages ever took: the card the run needed.
    pub peak_bytes: u64,
    /// The parameters the model trains, as burn counts them.
    pub parameters: Option<usize>,
}

impl DryOutcome {
    /// The run in the simulator's report type, so that plots, tables and `conform` take it.
    pub fn report(&self, origin: &str, plan: &DryPlan) -> RunReport {
        let step = |i: usize| self.steps.get(i).map_or(0, |s| s.step);
        let failures = self
            .refused
            .iter()
            .map(|r| Failure {
                step: self
                    .died
                    .as_ref()
                    .map_or(step(self.steps.len().saturating_sub(1)), |d| d.step),
                requested: r.page,
                page: r.page,
                phase: self
                    .died
                    .as_ref()
                    .map_or(highwater::trace::Phase::Forward, |d| d.phase),
            })
            .collect();
        RunReport {
            recipe: origin.to_string(),
            seed: plan.seed,
            steps: plan.steps,
            died_at: self.died.as_ref().map(|d| d.step),
            peak_in_use: self
                .steps
                .iter()
                .map(|s| s.in_use_after_forward.max(s.in_use_after_backward))
                .collect(),
            in_use_after_forward: self.steps.iter().map(|s| s.in_use_after_forward).collect(),
            in_use_after_backward: self.steps.iter().map(|s| s.in_use_after_backward).collect(),
            reserved: self.steps.iter().map(|s| s.reserved).collect(),
            pages: Vec::new(),
            failures,
            capacity: plan.capacity,
            replayed_steps: self.steps.len() as u64,
            late_steps: 0,
        }
    }
}

/// What keeps a network from running on burn 0.22 here.
#[derive(Debug, thiserror::Error)]
pub enum DryError {
    /// A network file asks for what the 0.22 path does not do yet.
    #[error("{origin}: {what} is not run on burn 0.22 yet (run it with --burn 0.21)")]
    Unsupported {
        /// The network file.
        origin: String,
        /// What it asked for.
        what: String,
    },
}

/// Trains the step `build` makes, on a new dry CUDA device of `card` (its whole memory unless
/// the plan says less), and measures every step.
pub fn dry_train(
    card: CardProfile,
    plan: &DryPlan,
    checkpointing: Checkpointing,
    build: impl FnOnce(&Device) -> Box<dyn TrainingStep>,
) -> DryOutcome {
    let cuda = dry::register(DeviceOptions {
        capacity: plan.capacity,
        on_refusal: plan.on_refusal,
        tie_break: plan.tie_break,
        ..DeviceOptions::card(card)
    });
    let memory = dry::memory(&cuda);
    let mut device = Device::cuda(cuda.index).autodiff();
    if checkpointing == Checkpointing::Balanced {
        device = device.gradient_checkpointing();
    }
    device.seed(plan.seed);
    let program = build(&device);
    let parameters = program.parameters();
    // Every refusal, kept in order as the trainer learns of them after each phase.
    let refused = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = refused.clone();
    let mut trainer = Trainer::new(program, device);
    // A granted page is recorded, not fatal: the run goes on to say what it needed.
    if plan.on_refusal == OnRefusal::Refuse {
        trainer = trainer.watching(Box::new(move || {
            let new = memory.take_refused();
            let pages = new.iter().map(|r| r.page).collect();
            seen.borrow_mut().extend(new);
            pages
        }));
    }
    let mut steps = Vec::new();
    let mut died = None;
    for step in 1..=plan.steps {
        let read_loss = step % plan.log_every.max(1) == 0 || step == plan.steps;
        match trainer.step(read_loss) {
            Ok(measured) => steps.push(measured),
            Err(death) => {
                died = Some(death);
                break;
            }
        }
    }
    let memory = dry::memory(&cuda);
    refused.borrow_mut().extend(memory.take_refused());
    DryOutcome {
        steps,
        died,
        refused: refused.take(),
        peak_bytes: memory.peak(),
        parameters,
    }
}

/// Trains `network` (its batch and checkpointing) dry on `card`.
///
/// # Errors
///
/// A network the 0.22 path does not run yet: burn-fusion (a build-wide switch in burn 0.22,
/// feature `fusion` of this crate) or a precision other than f32.
pub fn dry_network(
    network: &Network,
    plan: &DryPlan,
    card: CardProfile,
) -> Result<DryOutcome, DryError> {
    let unsupported = |what: String| DryError::Unsupported {
        origin: network.origin.clone(),
        what,
    };
    if network.precision != Precision::F32 {
        return Err(unsupported(format!("precision {:?}", network.precision)));
    }
    let fused = network.backend == Backend::Fusion;
    if fused != cfg!(feature = "fusion") {
        return Err(unsupported(format!(
            "backend {:?} in a build {} burn-fusion",
            network.backend,
            if cfg!(feature = "fusion") {
                "with"
            } else {
                "without"
            }
        )));
    }
    Ok(dry_train(card, plan, network.checkpointing, |device| {
        network_step(network, device)
    }))
}
