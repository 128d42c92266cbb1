//! [`Model`]: a network or a wave recipe read from its file, trained dry by whichever entry
//! point fits; separate because it only dispatches, holding none of the training itself.

use std::path::Path;
use std::sync::Arc;

use dryrun::{AutotuneError, CardProfile};
use highwater::recipe::{Backend, Checkpointing, Recipe};

use super::{DryOutcome, DryPlan, dry_network, dry_run};

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
