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
//!
//! [`Trainer`]: crate::train::Trainer
//! [`TrainingStep`]: crate::train::TrainingStep
//! [`OnRefusal`]: dryrun::OnRefusal

mod model;
mod outcome;
mod replay;
mod search;
mod training;

use std::path::Path;
use std::sync::Arc;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::bf16;
use burn_cubecl::{CubeBackend, CubeRuntime};
use burn_fusion::Fusion;
use dryrun::{AutotuneError, CardProfile, DryDevice, DryRuntime};
use highwater::pool::PoolUsage;
use highwater::recipe::Recipe;

use crate::SOFT_CAP;
use crate::network::with_step;
use crate::train::{TrainBackend, WaveStep, client_usage};

pub use model::Model;
pub use outcome::{DryOutcome, DryPlan, Refusal};
pub(crate) use replay::network_plan_for;
pub use replay::{ReplayError, replay, replay_network, replay_network_traced};
pub use search::{BatchSearch, largest_batch};
use training::Dry;
pub use training::dry_train;

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

/// The dry device's pool now (buffers and bytes in use, bytes reserved), once what is queued has
/// run: for measuring a program of one's own between two points.
pub fn pool_usage<B: burn::tensor::backend::Backend<Device = DryDevice>>(
    device: &DryDevice,
) -> Result<PoolUsage, String> {
    B::sync(device).map_err(|e| e.to_string())?;
    Ok(client_usage::<DryRuntime>(device)?.unwrap_or_default())
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
    network_on::<DryRuntime>(network, plan, card, autotune)
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
    network_on::<TracedDry>(network, plan, card, autotune)
}

/// [`dry_network`] on runtime `R`: the dry runtime, or it traced.
fn network_on<R: CubeRuntime<CubeDevice = DryDevice>>(
    network: &highwater::network::Network,
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
) -> Result<DryOutcome, AutotuneError> {
    fn train<B: AutodiffBackend<Device = DryDevice>, R: CubeRuntime<CubeDevice = DryDevice>>(
        network: &highwater::network::Network,
        plan: &DryPlan,
        card: Arc<CardProfile>,
        autotune: Option<&Path>,
    ) -> Result<DryOutcome, AutotuneError> {
        with_step::<B, _>(network, Dry::<R>::new(plan, card, autotune))
    }
    type Cube<R, F> = CubeBackend<R, F, i32, u8>;
    let run = on_precision!(
        network.precision,
        network.backend,
        network.checkpointing,
        (Cube<R, f32>, Fusion<Cube<R, f32>>),
        (Cube<R, bf16>, Fusion<Cube<R, bf16>>),
        train,
        R
    );
    run(network, plan, card, autotune)
}
