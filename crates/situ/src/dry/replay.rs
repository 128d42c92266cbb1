//! Replaying a run recorded on the GPU (`highwater rerun`) dry and holding it to the record
//! ([`replay`], [`replay_network`]): the record's plan, the card check, and why a record cannot
//! be replayed; separate from the training it drives.

use std::path::Path;
use std::sync::Arc;

use dryrun::{AutotuneError, CardProfile, OnRefusal, TieBreak};
use highwater::conform::{Exactness, MeasuredStep, NetworkRecord, RerunRecord, exactness};
use highwater::recipe::Recipe;

use super::{DryOutcome, DryPlan, dry_network, dry_network_traced, dry_run};

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
        schedule: dryrun::Schedule::default(),
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
