//! Training steps on the dry runtime: the same [`Trainer`] that `highwater rerun` runs on
//! burn-cuda, over `dryrun::DryRuntime`, so that every byte the pool holds is decided by burn's
//! and CubeCL's own code and no GPU is needed. [`dry_train`] takes any [`TrainingStep`] a
//! closure builds; [`dry_run`] (a wave recipe) and [`dry_network`] are built on it, [`Model`]
//! reads either from its file, [`largest_batch`] searches the batch a card allows, and
//! [`replay`] / [`replay_network`] hold a GPU record to its dry replay.
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

use burn::tensor::backend::AutodiffBackend;
use burn_cubecl::CubeBackend;
use burn_fusion::Fusion;
use dryrun::{
    AutotuneError, CardProfile, DryDevice, DryRuntime, Entry, OnRefusal, OutOfMemory, TieBreak,
};
use highwater::conform::{
    Exactness, MeasuredDeath, MeasuredStep, NetworkRecord, RerunRecord, exactness,
};
use highwater::pool::PoolUsage;
use highwater::recipe::{Backend, Checkpointing, Recipe};
use highwater::run::{Failure, RunReport};
use highwater::trace::Phase;

use crate::SOFT_CAP;
use crate::network::{WithStep, with_step};
use crate::train::{
    PoolProbe, TrainBackend, Trainer, TrainingStep, WaveStep, client_usage, panic_message,
};

/// burn-cubecl's unfused backend on the dry runtime (every op materializes its output).
pub type DryCube = CubeBackend<DryRuntime, f32, i32, u8>;
/// burn-cuda's default arrangement, `Fusion` over the same, on the dry runtime.
pub type DryFusion = Fusion<DryCube>;
/// [`DryCube`] in bfloat16.
pub type DryCubeBf16 = CubeBackend<DryRuntime, burn::tensor::bf16, i32, u8>;
/// [`DryFusion`] in bfloat16.
pub type DryFusionBf16 = Fusion<DryCubeBf16>;
/// The dry runtime with its server traced ([`dry_network_traced`]).
pub type TracedDry = dryrun::traced::Traced<DryRuntime>;
type TracedDryCube = CubeBackend<TracedDry, f32, i32, u8>;
type TracedDryFusion = Fusion<TracedDryCube>;
type TracedDryCubeBf16 = CubeBackend<TracedDry, burn::tensor::bf16, i32, u8>;
type TracedDryFusionBf16 = Fusion<TracedDryCubeBf16>;

/// The dry device's pool now (buffers and bytes in use, bytes reserved), once what is queued has
/// run: for measuring a program of one's own between two points.
pub fn pool_usage<B: burn::tensor::backend::Backend<Device = DryDevice>>(
    device: &DryDevice,
) -> Result<PoolUsage, String> {
    B::sync(device).map_err(|e| e.to_string())?;
    Ok(client_usage::<DryRuntime>(device)?.unwrap_or_default())
}

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

/// Runs `recipe`'s wave step (its backend and checkpointing) on a new dry device of `card`,
/// tuned from the GPU's autotune cache `autotune`.
pub fn dry_run(
    recipe: &Recipe,
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<DryOutcome, AutotuneError> {
    fn wave<B: TrainBackend<Device = DryDevice>>(
        recipe: &Recipe,
        plan: &DryPlan,
        card: Arc<CardProfile>,
        autotune: Option<&Path>,
    ) -> Result<DryOutcome, AutotuneError> {
        dry_train::<B, _>(plan, card, autotune, |device| {
            WaveStep::new(recipe, plan.seed, SOFT_CAP, device)
        })
    }
    let run = on_backend!(
        recipe.backend,
        recipe.checkpointing,
        DryCube,
        DryFusion,
        wave
    );
    run(recipe, plan, card, autotune)
}

/// Trains `network` (its batch, backend, checkpointing and precision) on a new dry device of
/// `card`.
pub fn dry_network(
    network: &highwater::network::Network,
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<DryOutcome, AutotuneError> {
    fn train<B: AutodiffBackend<Device = DryDevice>>(
        network: &highwater::network::Network,
        plan: &DryPlan,
        card: Arc<CardProfile>,
        autotune: Option<&Path>,
    ) -> Result<DryOutcome, AutotuneError> {
        with_step::<B, _>(network, Dry::<DryRuntime>::new(plan, card, autotune))
    }
    let run = on_precision!(
        network.precision,
        network.backend,
        network.checkpointing,
        (DryCube, DryFusion),
        (DryCubeBf16, DryFusionBf16),
        train
    );
    run(network, plan, card, autotune)
}

/// [`dry_network`] with the server traced ([`dryrun::traced`]): [`DryOutcome::server_trace`]
/// holds every reservation the server met, in order, with the pool as it saw it just before, to
/// hold to a traced GPU run's (`highwater rerun --trace-server`).
pub fn dry_network_traced(
    network: &highwater::network::Network,
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<DryOutcome, AutotuneError> {
    fn train<B: AutodiffBackend<Device = DryDevice>>(
        network: &highwater::network::Network,
        plan: &DryPlan,
        card: Arc<CardProfile>,
        autotune: Option<&Path>,
    ) -> Result<DryOutcome, AutotuneError> {
        with_step::<B, _>(network, Dry::<TracedDry>::new(plan, card, autotune))
    }
    let run = on_precision!(
        network.precision,
        network.backend,
        network.checkpointing,
        (TracedDryCube, TracedDryFusion),
        (TracedDryCubeBf16, TracedDryFusionBf16),
        train
    );
    run(network, plan, card, autotune)
}

/// A network's training, dry, on runtime `R` (whose client the probe reads).
struct Dry<'a, R> {
    plan: &'a DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&'a Path>,
    _r: std::marker::PhantomData<R>,
}

impl<'a, R> Dry<'a, R> {
    fn new(plan: &'a DryPlan, card: Arc<CardProfile>, autotune: Option<&'a Path>) -> Self {
        Self {
            plan,
            card,
            autotune,
            _r: std::marker::PhantomData,
        }
    }
}

impl<B, R> WithStep<B> for Dry<'_, R>
where
    B: AutodiffBackend<Device = DryDevice>,
    R: cubecl::Runtime<Device = DryDevice>,
{
    type Output = Result<DryOutcome, AutotuneError>;
    fn train<S: crate::train::TrainingStep<B>>(
        self,
        build: impl FnOnce(&DryDevice) -> S,
    ) -> Self::Output {
        dry_train_on::<B, R, _>(self.plan, self.card, self.autotune, build)
    }
}

/// A model the dry run trains from its file: a network, or the wave's expert stack.
#[derive(Debug, Clone)]
pub enum Model {
    /// A network of one of the common families (`repro/models/*.toml`).
    Network(highwater::network::Network),
    /// The wave's expert stack and the rest of its model (`repro/recipes/*.toml`).
    Wave(Recipe),
}

impl Model {
    /// Reads a file's text: a network when it has an architecture table (`[decoder]`,
    /// `[resnet]`, …), else a wave recipe.
    pub fn parse(origin: &str, text: &str) -> Result<Model, highwater::RecipeError> {
        if highwater::network::is_network(text) {
            highwater::network::Network::parse(origin, text).map(Model::Network)
        } else {
            Recipe::parse(origin, text).map(Model::Wave)
        }
    }

    /// Sequences per step.
    pub fn batch(&self) -> u64 {
        match self {
            Model::Network(n) => n.batch,
            Model::Wave(r) => r.batch,
        }
    }

    /// The same model with another batch, or why not.
    pub fn with_batch(&self, batch: u64) -> Result<Model, String> {
        match self {
            Model::Network(n) => n.with_batch(batch).map(Model::Network),
            Model::Wave(r) => r.with_batch(batch).map(Model::Wave),
        }
    }

    /// The backend and checkpointing its file names.
    pub fn backend(&self) -> (Backend, Checkpointing) {
        match self {
            Model::Network(n) => (n.backend, n.checkpointing),
            Model::Wave(r) => (r.backend, r.checkpointing),
        }
    }

    /// The same model on another backend and checkpointing.
    pub fn with_backend(&self, backend: Backend, checkpointing: Checkpointing) -> Model {
        match self {
            Model::Network(n) => Model::Network(highwater::network::Network {
                backend,
                checkpointing,
                ..n.clone()
            }),
            Model::Wave(r) => {
                let mut r = r.with(r.activation, checkpointing);
                r.backend = backend;
                Model::Wave(r)
            }
        }
    }

    /// Trains it dry.
    pub fn dry_run(
        &self,
        plan: &DryPlan,
        card: Arc<CardProfile>,
        autotune: Option<&Path>,
    ) -> Result<DryOutcome, AutotuneError> {
        match self {
            Model::Network(n) => dry_network(n, plan, card, autotune),
            Model::Wave(r) => dry_run(r, plan, card, autotune),
        }
    }
}

/// What the search for the largest batch found.
#[derive(Debug, Clone)]
pub struct BatchSearch {
    /// The largest batch whose steps all fit, and its run; `None` when not even the smallest
    /// does.
    pub largest: Option<(u64, DryOutcome)>,
    /// The smallest batch that does not fit, and its run (where it dies); `None` when every
    /// batch up to the limit fit.
    pub smallest_failing: Option<(u64, DryOutcome)>,
    /// Every batch tried, in order, and whether it fit.
    pub tried: Vec<(u64, bool)>,
}

/// The largest batch in `1..=limit` whose run fits, by doubling from 1 and then bisecting, so
/// about 2·log2 of the answer runs. Assumes what a step holds grows with the batch (true of
/// every model whose tensors scale with it). `run(batch)` is a dry run that refuses pages.
pub fn largest_batch<E>(
    limit: u64,
    mut run: impl FnMut(u64) -> Result<DryOutcome, E>,
) -> Result<BatchSearch, E> {
    let mut tried = Vec::new();
    let mut probe = |batch: u64, tried: &mut Vec<(u64, bool)>| -> Result<_, E> {
        let outcome = run(batch)?;
        let fits = outcome.died.is_none();
        tried.push((batch, fits));
        Ok((fits, outcome))
    };
    let mut fitting: Option<(u64, DryOutcome)> = None;
    let mut failing: Option<(u64, DryOutcome)> = None;
    let mut batch = 1;
    while batch <= limit {
        let (fits, outcome) = probe(batch, &mut tried)?;
        if !fits {
            failing = Some((batch, outcome));
            break;
        }
        fitting = Some((batch, outcome));
        batch = if batch == limit {
            limit + 1
        } else {
            (batch * 2).min(limit)
        };
    }
    while let (Some((lo, _)), Some((hi, _))) = (&fitting, &failing) {
        if hi - lo <= 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        let (fits, outcome) = probe(mid, &mut tried)?;
        if fits {
            fitting = Some((mid, outcome));
        } else {
            failing = Some((mid, outcome));
        }
    }
    Ok(BatchSearch {
        largest: fitting,
        smallest_failing: failing,
        tried,
    })
}

/// Runs the training step that `build` makes, on a new dry device of `card`: the library call
/// for a model of one's own. `B` is the backend it trains on (e.g. `Autodiff<DryFusion>`, what
/// burn-cuda's default becomes here); the backend is seeded before `build` runs. A panic in
/// `build` (its weights did not fit) is a death at step 0.
pub fn dry_train<B, S>(
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
    build: impl FnOnce(&DryDevice) -> S,
) -> Result<DryOutcome, AutotuneError>
where
    B: AutodiffBackend<Device = DryDevice>,
    S: TrainingStep<B>,
{
    dry_train_on::<B, DryRuntime, S>(plan, card, autotune, build)
}

/// [`dry_train`] over runtime `R`: [`DryRuntime`], or it traced.
fn dry_train_on<B, R, S>(
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
    build: impl FnOnce(&DryDevice) -> S,
) -> Result<DryOutcome, AutotuneError>
where
    B: AutodiffBackend<Device = DryDevice>,
    R: cubecl::Runtime<Device = DryDevice>,
    S: TrainingStep<B>,
{
    let device = DryDevice::new(
        card,
        plan.capacity,
        plan.on_refusal,
        autotune,
        plan.tie_break,
    )?;
    let memory = device.memory();
    let probe = DryProbe::<B, R>::new(device.clone());
    let mut peak_in_use = Vec::new();
    let mut pages = Vec::new();
    let outcome = |steps, peak_in_use, pages, died, probe: DryProbe<B, R>| DryOutcome {
        steps,
        peak_in_use,
        pages,
        died,
        refused: probe.refused.take(),
        peak_bytes: memory.peak(),
        autotune_misses: device.autotune_misses(),
        server_trace: dryrun::traced::take_trace(&device),
    };
    let created = catch_unwind(AssertUnwindSafe(|| {
        B::seed(&device, plan.seed);
        Trainer::<B, S>::new(build(&device))
    }));
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
            return Ok(outcome(vec![], peak_in_use, pages, Some(death), probe));
        }
    };
    let mut steps = Vec::new();
    let mut died = None;
    for step in 1..=plan.steps {
        probe.step.set(step);
        memory.take_peak_in_use();
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
        let failed_pages = probe.pages_of(step);
        let mut completed = |m: MeasuredStep| {
            // Bytes in use only grow at a reservation; the phases' reads bound a step without one.
            let phases = m.in_use_after_forward.max(m.in_use_after_backward);
            peak_in_use.push(memory.take_peak_in_use().max(phases));
            pages.push(memory.pages());
            steps.push(m);
        };
        match (measured, first) {
            (Ok(m), None) => completed(m),
            (Ok(m), Some((phase, oom))) => {
                died.get_or_insert(MeasuredDeath {
                    step,
                    phase,
                    message: refusal_message(oom),
                    failed_pages,
                });
                if plan.on_refusal == OnRefusal::Refuse {
                    break;
                }
                // Granted pages leave the run intact: it goes on to say what it would need.
                completed(m);
            }
            (Err(mut death), _) => {
                death.failed_pages = failed_pages;
                died.get_or_insert(death);
                break;
            }
        }
    }
    Ok(outcome(steps, peak_in_use, pages, died, probe))
}

/// cubecl-cuda 0.10's message for a refused page (`IoError::BufferTooBig`), with the books.
fn refusal_message(oom: OutOfMemory) -> String {
    format!(
        "can't allocate buffer of size: {} (reserving {} bytes; the pools held {} of {} bytes)",
        oom.page, oom.requested, oom.allocated, oom.capacity
    )
}

/// Reads the dry device's pool and files its refusals under the step and phase running.
struct DryProbe<B, R> {
    device: DryDevice,
    step: Cell<u64>,
    phase: Cell<Phase>,
    refused: RefCell<Vec<Refusal>>,
    _b: std::marker::PhantomData<(B, R)>,
}

impl<B: burn::tensor::backend::Backend<Device = DryDevice>, R> DryProbe<B, R> {
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

impl<B, R> PoolProbe for DryProbe<B, R>
where
    B: burn::tensor::backend::Backend<Device = DryDevice>,
    R: cubecl::Runtime<Device = DryDevice>,
{
    fn sync(&self) -> Result<(), String> {
        B::sync(&self.device).map_err(|e| e.to_string())
    }

    fn phase(&self, phase: Phase) {
        self.collect();
        self.phase.set(phase);
    }

    fn usage(&self) -> Result<Option<PoolUsage>, String> {
        client_usage::<R>(&self.device)
    }

    /// Every stream's pages on the dry card.
    fn device_reserved(&self) -> Option<u64> {
        Some(self.device.memory().allocated())
    }
}

/// Why a recorded run cannot be replayed dry.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The recipe text kept in the record does not parse now.
    #[error("the recorded recipe does not parse")]
    Recipe(#[from] highwater::recipe::RecipeError),
    /// The card profile is not the recording card's.
    #[error(
        "the run was recorded on a card of {recorded} bytes, the profile is of one of {profile} \
         (the pools' page sizes follow the total)"
    )]
    OtherCard {
        /// The recording card's total bytes.
        recorded: u64,
        /// The profile's.
        profile: u64,
    },
    /// The GPU's autotune cache could not be installed.
    #[error(transparent)]
    Autotune(#[from] AutotuneError),
}

/// What replays a run recorded by `highwater rerun`: its recipe with the run's overrides, and
/// its steps, seed, what its pools could take, its loss reads.
pub(crate) fn plan_for(record: &RerunRecord) -> Result<(Recipe, DryPlan), ReplayError> {
    let plan = recorded_plan(
        &record.steps,
        record.steps_asked,
        record.seed,
        &record.device,
    );
    Ok((record.recipe()?, plan))
}

/// The plan of a recorded run: its steps and seed, its pools' capacity, its loss reads (the
/// first step that read its loss before the last gives the period).
fn recorded_plan(
    steps: &[MeasuredStep],
    steps_asked: u64,
    seed: u64,
    device: &highwater::conform::DeviceMemory,
) -> DryPlan {
    let log_every = steps
        .iter()
        .find(|s| s.loss.is_some() && s.step < steps_asked)
        .map_or(steps_asked.max(1), |s| s.step);
    DryPlan {
        steps: steps_asked,
        seed,
        capacity: device.pool_capacity,
        on_refusal: OnRefusal::Refuse,
        log_every,
        tie_break: TieBreak::First,
    }
}

/// A record replays only on a profile of its card: the pools' page sizes follow the total.
fn same_card(
    card: &CardProfile,
    recorded: &highwater::conform::DeviceMemory,
) -> Result<(), ReplayError> {
    if card.total_bytes == recorded.total_bytes {
        Ok(())
    } else {
        Err(ReplayError::OtherCard {
            recorded: recorded.total_bytes,
            profile: card.total_bytes,
        })
    }
}

/// What replays a network recorded by `highwater rerun --model` on `card`: the network with the
/// run's overrides, and the run's plan.
pub(crate) fn network_plan_for(
    record: &NetworkRecord,
    card: &CardProfile,
) -> Result<(highwater::network::Network, DryPlan), ReplayError> {
    same_card(card, &record.device)?;
    let plan = recorded_plan(
        &record.steps,
        record.steps_asked,
        record.seed,
        &record.device,
    );
    Ok((record.network()?, plan))
}

/// [`replay`] for a network recorded by `highwater rerun --model`.
pub fn replay_network(
    record: &NetworkRecord,
    repeats: &[NetworkRecord],
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<(DryOutcome, Exactness), ReplayError> {
    let (network, plan) = network_plan_for(record, &card)?;
    let outcome = dry_network(&network, &plan, card, autotune)?;
    let exactness = exactness(record, repeats, &outcome.steps, outcome.died.as_ref());
    Ok((outcome, exactness))
}

/// [`replay_network`] with the server traced: the outcome's [`DryOutcome::server_trace`] is every
/// reservation in order, to hold to the GPU's (`highwater rerun --trace-server`).
pub fn replay_network_traced(
    record: &NetworkRecord,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<DryOutcome, ReplayError> {
    let (network, plan) = network_plan_for(record, &card)?;
    Ok(dry_network_traced(&network, &plan, card, autotune)?)
}

/// Replays `record` dry on `card` and holds it to the record, byte for byte, or within what
/// the GPU varied by across `repeats` of the same run.
pub fn replay(
    record: &RerunRecord,
    repeats: &[RerunRecord],
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<(DryOutcome, Exactness), ReplayError> {
    same_card(&card, &record.device)?;
    let (recipe, plan) = plan_for(record)?;
    let outcome = dry_run(&recipe, &plan, card, autotune)?;
    let exactness = exactness(record, repeats, &outcome.steps, outcome.died.as_ref());
    Ok((outcome, exactness))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(on_refusal: OnRefusal, capacity: u64) -> (Recipe, DryPlan, Arc<CardProfile>) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let card = CardProfile::read(&root.join("repro/cards/h200.json")).unwrap();
        let text = std::fs::read_to_string(root.join("repro/recipes/wave-stack.toml")).unwrap();
        let recipe = Recipe::parse("wave-stack.toml", &text).unwrap();
        let plan = DryPlan {
            steps: 3,
            seed: 1,
            capacity,
            on_refusal,
            log_every: 3,
            tie_break: TieBreak::First,
        };
        (recipe, plan, Arc::new(card))
    }

    /// The wave stack with `workload` (TOML lines), trained dry for `steps` on the whole card.
    fn with_workload(workload: &str, steps: u64) -> DryOutcome {
        let (recipe, mut plan, card) = plan(OnRefusal::Refuse, u64::MAX);
        let text = format!(
            "{}\n[workload]\n{workload}\n",
            std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/recipes/wave-stack.toml")
            )
            .unwrap()
        );
        let r = Recipe::parse("wave-stack.toml", &text).unwrap();
        assert_eq!((r.batch, r.d_model), (recipe.batch, recipe.d_model));
        plan.steps = steps;
        plan.log_every = steps;
        dry_run(&r, &plan, card, None).unwrap()
    }

    #[test]
    fn a_loader_thread_per_epoch_adds_a_pool_the_training_thread_never_sees() {
        let o = with_workload("loader_every = 2", 6);
        let own: Vec<u64> = o.steps.iter().map(|m| m.reserved).collect();
        let every: Vec<u64> = o.steps.iter().map(|m| m.device_reserved.unwrap()).collect();
        assert!(
            own[1..].windows(2).all(|w| w[0] == w[1]),
            "the training thread's pool settles: {own:?}"
        );
        // Steps 3 and 5 start an epoch: a new thread, a new stream, a new page that stays.
        assert!(every[2] > every[1] && every[4] > every[3], "{every:?}");
        assert_eq!((every[3], every[5]), (every[2], every[4]), "{every:?}");
        assert_eq!(
            every[4] - every[2],
            every[2] - every[1],
            "one page per epoch: {every:?}"
        );
    }

    #[test]
    fn a_fixed_workload_holds_every_stream_to_the_training_threads_pool() {
        let o = with_workload("sync = \"phase\"", 3);
        for m in &o.steps {
            let every = m.device_reserved.unwrap();
            // The default stream's pages are all there is, with the persistent weights.
            assert!(
                every >= m.reserved && every - m.reserved < 64 << 20,
                "{m:?}"
            );
        }
    }

    #[test]
    fn a_granted_run_dies_where_the_card_would_and_says_what_it_needed() {
        let (recipe, roomy, card) = plan(OnRefusal::Grant, u64::MAX);
        let need = dry_run(&recipe, &roomy, card.clone(), None).unwrap();
        assert!(need.died.is_none() && need.refused.is_empty());
        let (_, tight, _) = plan(OnRefusal::Grant, need.peak_bytes / 2);
        let granted = dry_run(&recipe, &tight, card.clone(), None).unwrap();
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

        let (_, refusing, _) = plan(OnRefusal::Refuse, need.peak_bytes / 2);
        let refused = dry_run(&recipe, &refusing, card, None).unwrap();
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
