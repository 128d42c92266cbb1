//! The recipe file as written (stage one): serde types that mirror the TOML, apart from
//! [`super::Recipe`] because nothing but validation may read them.

use serde::Deserialize;
use toml::Spanned;

use super::{Activation, Backend, Checkpointing, Optimizer, SyncMode};
use crate::layout::DType;

/// `[model]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelFile {
    pub(super) batch: Spanned<u64>,
    pub(super) seq_len: Spanned<u64>,
    pub(super) d_model: Spanned<u64>,
    pub(super) d_ffn: Spanned<u64>,
    pub(super) n_experts: Spanned<u64>,
    pub(super) max_iter: Spanned<u64>,
    pub(super) dtype: DType,
    pub(super) activation: Activation,
}

/// `[training]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TrainingFile {
    pub(super) checkpointing: Checkpointing,
    pub(super) backend: Backend,
    pub(super) optimizer: Optimizer,
    pub(super) steps: Spanned<u64>,
    pub(super) seeds: Spanned<Vec<u64>>,
    pub(super) loss_read_every: Spanned<u64>,
}

/// `[card]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CardFile {
    pub(super) total_bytes: Spanned<u64>,
    pub(super) desktop_bytes: Spanned<u64>,
    pub(super) cuda_context_bytes: Spanned<u64>,
}

/// `[rest_of_model]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RestFile {
    pub(super) live_bytes: Spanned<u64>,
    pub(super) tensor_bytes: Spanned<u64>,
    pub(super) params: Spanned<u64>,
    pub(super) persistent_bytes: Spanned<u64>,
}

/// `[jitter]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JitterFile {
    pub(super) step_probability: Spanned<f64>,
    pub(super) late_releases: Spanned<u64>,
    pub(super) max_lag: Spanned<u64>,
}

/// `[workload]` as written; every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WorkloadFile {
    pub(super) seq_len_min: Option<Spanned<u64>>,
    pub(super) pad_to: Option<Spanned<u64>>,
    pub(super) eval_every: Option<Spanned<u64>>,
    pub(super) eval_batch: Option<Spanned<u64>>,
    pub(super) eval_seq_len: Option<Spanned<u64>>,
    pub(super) loader_every: Option<Spanned<u64>>,
    pub(super) sync: Option<SyncMode>,
    pub(super) cleanup_every: Option<Spanned<u64>>,
}

/// Stage one: the file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecipeFile {
    pub(super) model: ModelFile,
    pub(super) training: TrainingFile,
    pub(super) card: CardFile,
    pub(super) rest_of_model: RestFile,
    pub(super) jitter: JitterFile,
    #[serde(default)]
    pub(super) workload: WorkloadFile,
}
