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
use highwater::recipe::Checkpointing;
use highwater::run::{Failure, RunReport};

use crate::network::network_step;
use crate::train::{Refused, Trainer, TrainingStep};

/// How to run dry: how long, and on how much of the card.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DryPlan {
    /// Training steps.
    pub steps: u64,
    /// Seeds the device before the step is built (values only: no byte depends on it).
    pub seed: u64,
    /// Bytes the pools may take: the card's free memory, or what a smaller card leaves.
    pub capacity: u64,
    /// A page beyond `capacity`: refused as on the card, or granted to measure the need.
    pub on_refusal: OnRefusal,
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
            tie_break: TieBreak::First,
        }
    }
}

/// A dry run's measurements.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DryOutcome {
    /// Every step completed (up to the death, excluded).
    pub steps: Vec<MeasuredStep>,
    /// Where the run died, as it would have on the GPU.
    pub died: Option<MeasuredDeath>,
    /// Every page refused (or granted past the card), in order, with the step and phase after
    /// which it was seen. A page refused to a throughput probe or an autotune candidate is here
    /// too, though it kills nothing, on the GPU as here.
    pub refused: Vec<(Refused, OutOfMemory)>,
    /// The most the pools' pages ever took: the card the run needed.
    pub peak_bytes: u64,
    /// The parameters the model trains, as burn counts them.
    pub parameters: Option<usize>,
}

impl DryOutcome {
    /// The run in the simulator's report type, so that plots, tables and `conform` take it.
    pub fn report(&self, origin: &str, plan: &DryPlan) -> RunReport {
        let failures = self
            .refused
            .iter()
            .map(|(at, r)| Failure {
                step: at.step,
                requested: r.page,
                page: r.page,
                phase: at.phase,
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
    // Every refusal, in order, as the trainer learns of them after each phase.
    let books = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = books.clone();
    let mut trainer = Trainer::new(program, device).watching(Box::new(move || {
        let new = memory.take_refused();
        let pages = new.iter().map(|r| r.page).collect();
        seen.borrow_mut().extend(new);
        pages
    }));
    let mut steps = Vec::new();
    let mut died = None;
    for _ in 0..plan.steps {
        // Every step's loss is read: in CubeCL 0.11 a refused page shows only where its tensor is
        // read, and a trainer that logs every step dies in the step where the GPU would.
        match trainer.step(true) {
            Ok(measured) => steps.push(measured),
            Err(death) => {
                died = Some(death);
                break;
            }
        }
    }
    let memory = dry::memory(&cuda);
    books.borrow_mut().extend(memory.take_refused());
    let placed = trainer.refused().to_vec();
    let refused = books
        .take()
        .into_iter()
        .enumerate()
        .map(|(i, oom)| {
            let at = placed.get(i).copied().unwrap_or(Refused {
                step: plan.steps,
                phase: highwater::trace::Phase::Optimizer,
                page: oom.page,
            });
            (at, oom)
        })
        .collect();
    DryOutcome {
        steps,
        died,
        refused,
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
    if !crate::built_for(network.backend) {
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

/// The tie-breaks a band is run over, the prediction's first.
pub const BAND_POLICIES: [TieBreak; 3] =
    [TieBreak::First, TieBreak::LeastMemory, TieBreak::MostMemory];

/// A network trained dry once per [`BAND_POLICIES`] tie-break: what the step reserves whatever
/// kernel autotune keeps for a problem the card's store does not settle.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DryBand {
    /// The plan of the prediction (the first policy's).
    pub plan: DryPlan,
    /// One run per policy, in [`BAND_POLICIES`]' order: the prediction first.
    pub runs: Vec<DryOutcome>,
}

impl DryBand {
    /// The run the answer is given for.
    pub fn predicted(&self) -> &DryOutcome {
        &self.runs[0]
    }

    /// Per step of the prediction, the least and the most bytes reserved over the policies;
    /// `None` from the step where one of them died.
    pub fn reserved(&self) -> Vec<Option<(u64, u64)>> {
        (0..self.predicted().steps.len())
            .map(|i| {
                let all: Option<Vec<u64>> = self
                    .runs
                    .iter()
                    .map(|run| run.steps.get(i).map(|s| s.reserved))
                    .collect();
                all.map(|v| (*v.iter().min().unwrap_or(&0), *v.iter().max().unwrap_or(&0)))
            })
            .collect()
    }
}

/// Trains `network` dry on `card` once per [`BAND_POLICIES`] tie-break, `plan` otherwise.
///
/// # Errors
///
/// What [`dry_network`] refuses.
pub fn dry_band(
    network: &Network,
    plan: &DryPlan,
    card: &CardProfile,
) -> Result<DryBand, DryError> {
    let runs = BAND_POLICIES
        .iter()
        .map(|&tie_break| {
            let plan = DryPlan {
                tie_break,
                ..plan.clone()
            };
            dry_network(network, &plan, card.clone())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DryBand {
        plan: DryPlan {
            tie_break: BAND_POLICIES[0],
            ..plan.clone()
        },
        runs,
    })
}

/// A GPU record of burn 0.22 replayed dry: the same network file, batch, checkpointing, seed and
/// steps on the record's card, every step's figures side by side.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The record's steps, as the GPU measured them.
    pub gpu: Vec<highwater::conform::MeasuredStep>,
    /// The dry run of the same.
    pub dry: DryOutcome,
}

impl Replay {
    /// Steps where the two differ, each as (step, what, GPU bytes, dry bytes).
    pub fn differences(&self) -> Vec<(u64, &'static str, u64, u64)> {
        let mut out = Vec::new();
        for (g, d) in self.gpu.iter().zip(&self.dry.steps) {
            for (what, a, b) in [
                (
                    "in use after forward",
                    g.in_use_after_forward,
                    d.in_use_after_forward,
                ),
                (
                    "in use after backward",
                    g.in_use_after_backward,
                    d.in_use_after_backward,
                ),
                ("reserved", g.reserved, d.reserved),
            ] {
                if a != b {
                    out.push((g.step, what, a, b));
                }
            }
        }
        out
    }
}

/// Replays `record` (made by `burn022-rerun`) dry on `card`, the record's card as it was recorded.
///
/// # Errors
///
/// A record whose network file does not parse, or that the 0.22 path does not run.
pub fn replay(
    record: &highwater::conform::NetworkRecord,
    card: CardProfile,
    tie_break: TieBreak,
) -> Result<Replay, ReplayError> {
    let mut network = Network::parse(&record.model_path, &record.model_toml)
        .map_err(|e| ReplayError::Model(e.to_string()))?
        .with_batch(record.batch)
        .map_err(ReplayError::Model)?;
    network.backend = record.backend;
    network.checkpointing = record.checkpointing;
    network.precision = record.precision;
    let plan = DryPlan {
        seed: record.seed,
        tie_break,
        ..DryPlan::on(&card, record.steps_asked)
    };
    let dry = dry_network(&network, &plan, card).map_err(ReplayError::Unsupported)?;
    Ok(Replay {
        gpu: record.steps.clone(),
        dry,
    })
}

/// Why a record could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Its network file does not parse.
    #[error("the record's model: {0}")]
    Model(String),
    /// The 0.22 path does not run it.
    #[error(transparent)]
    Unsupported(DryError),
}
