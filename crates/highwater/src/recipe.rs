//! Recipes: what was trained, on which card. Read in two stages, as ripgrep reads its
//! arguments: `RecipeFile` is the TOML as written (serde, unknown keys refused), [`Recipe`]
//! is what the simulator may trust (every count non-zero, every size fits in a `u64`, the card
//! holds at least the weights). The library never opens files: callers pass the text and a
//! name for it.

use basics::{GAMMA, line_of, mix};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::layout::DType;
use crate::limits::{self, Limit, MAX_RECIPE_BYTES, MAX_TENSOR_BYTES};

mod file;
#[cfg(test)]
mod tests;
mod validate;

use file::RecipeFile;

/// Which activation the expert FFN runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// `activation::silu(mid)`: the control arm.
    Silu,
    /// SiTU GLU, tensor path: gate_up doubled to `2f`, split, soft-capped, gated.
    SituTensor,
    /// SiTU GLU, one fused kernel: one `[N, f]` output, backward recomputes from its input.
    SituFused,
}

/// burn 0.21's checkpoint strategy (`Autodiff<B, C>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Checkpointing {
    /// `NoCheckpointing`: every op is treated as compute-bound; what it saves stays.
    None,
    /// `BalancedCheckpointing`: memory-bound ops are recomputed during backward.
    Balanced,
}

/// Which burn-cubecl backend runs the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// `CubeBackend<CudaRuntime, ..>`: every op materializes its output.
    Cube,
    /// burn-cuda's default `Cuda` (Fusion over Cube): elementwise chains whose intermediates
    /// nobody keeps are not materialized.
    Fusion,
}

/// The name a recipe value is written with in a recipe file and in records: `situ-tensor`,
/// `balanced`, `fusion` (its serde name).
pub fn written_name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Optimizer whose state lives beside the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// Adam / AdamW: two moments per parameter.
    Adam,
}

impl Optimizer {
    /// Tensors of state per parameter tensor.
    pub fn states_per_param(self) -> u64 {
        match self {
            Optimizer::Sgd => 0,
            Optimizer::Adam => 2,
        }
    }
}

/// What is wrong with a recipe (the one error of every checked input file).
pub type RecipeError = InputError;

/// What is wrong with an input file (a recipe, an incident), and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputError {
    /// Not TOML, or not the file's shape (unknown key, missing key, wrong type), or too long.
    #[error("{origin}:{line}: {reason}")]
    Syntax {
        /// The file (or the name the text was given).
        origin: String,
        /// 1-based.
        line: usize,
        /// The TOML reader's message, its quotes of the input cut.
        reason: String,
    },
    /// Well-formed but impossible.
    #[error("{origin}:{line}: `{field}` {reason}")]
    Invalid {
        /// The file (or the name the text was given).
        origin: String,
        /// 1-based: the offending value's line.
        line: usize,
        /// The key, as written (`model.batch`, `failures.count`).
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
}

impl InputError {
    /// The 1-based line the error points at.
    pub fn line(&self) -> usize {
        match self {
            InputError::Syntax { line, .. } | InputError::Invalid { line, .. } => *line,
        }
    }
}

/// The card: what `cuDeviceTotalMem_v2` reports and what others already hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Card {
    /// Total device memory as the driver reports it; cubecl-cuda sizes its pools from it.
    pub total_bytes: u64,
    /// Held by the desktop (compositor, browser) on a card that also drives displays.
    pub desktop_bytes: u64,
    /// The trainer's own CUDA context, module images and cuBLAS workspace.
    pub cuda_context_bytes: u64,
}

impl Card {
    /// Bytes the pool's pages may take.
    pub fn pool_capacity(&self) -> u64 {
        self.total_bytes - self.desktop_bytes - self.cuda_context_bytes
    }
}

/// The layers we do not model op by op, as lumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestOfModel {
    /// Activations they keep for backward per step.
    pub live_bytes: u64,
    /// Size of one such activation.
    pub tensor_bytes: u64,
    /// Their parameters (elements).
    pub params: u64,
    /// Other persistent buffers (embedding tables, caches).
    pub persistent_bytes: u64,
}

/// The seeded release-lag mechanism (see [`crate::run`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Jitter {
    /// Chance that a step has late releases at all.
    pub step_probability: f64,
    /// Releases made late in such a step.
    pub late_releases: u64,
    /// At most this many reserves may overtake a late release.
    pub max_lag: u64,
}

/// When the trainer waits for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// After every phase (forward, backward, optimizer): releases land in program order.
    #[default]
    Phase,
    /// Once per step, at its end: the host queues a whole step ahead, as a trainer that only
    /// reads its loss now and then does.
    Step,
}

/// How the trainer feeds and paces the step (`[workload]`): what a real training loop does
/// beyond repeating one fixed-shape step. The default is that fixed step, synchronized after
/// every phase, which is what `crate::run` simulates; the other switches run only on burn's own
/// code (the GPU rerun and the dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Dynamic padding: each step's sequence length is drawn, seeded, from
    /// `[seq_len_min, seq_len]` and rounded up to a multiple of `pad_to` (at most `seq_len`).
    pub seq_len_min: u64,
    /// See `seq_len_min`; 1: no rounding.
    pub pad_to: u64,
    /// An evaluation pass (forward only, its own batch shape) after every this many steps; 0:
    /// none.
    pub eval_every: u64,
    /// The evaluation's batch.
    pub eval_batch: u64,
    /// The evaluation's sequence length.
    pub eval_seq_len: u64,
    /// The batches are made on a loader thread, a new one every this many steps (an epoch of a
    /// multi-threaded data loader); 0: the training thread makes them.
    pub loader_every: u64,
    /// When the trainer waits for the device.
    pub sync: SyncMode,
    /// `memory_cleanup` (every free page back to the driver) after every this many steps; 0:
    /// never, as burn never calls it.
    pub cleanup_every: u64,
}

impl Workload {
    /// One fixed-shape step after another, synchronized after every phase.
    pub fn fixed(seq_len: u64, batch: u64) -> Self {
        Workload {
            seq_len_min: seq_len,
            pad_to: 1,
            eval_every: 0,
            eval_batch: batch,
            eval_seq_len: seq_len,
            loader_every: 0,
            sync: SyncMode::Phase,
            cleanup_every: 0,
        }
    }

    /// Whether this is [`Workload::fixed`]: the only workload the simulator models.
    pub fn is_fixed(&self, seq_len: u64) -> bool {
        *self
            == Workload {
                eval_batch: self.eval_batch,
                eval_seq_len: self.eval_seq_len,
                ..Workload::fixed(seq_len, 0)
            }
    }
}

/// Stage two: a recipe the simulator can trust.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recipe {
    /// Where it came from (a file name, or whatever the caller says).
    pub origin: String,
    /// Sequences per step.
    pub batch: u64,
    /// Positions per sequence.
    pub seq_len: u64,
    /// Width of the expert stack's input and output.
    pub d_model: u64,
    /// Hidden width of one expert FFN (`f`).
    pub d_ffn: u64,
    /// Experts in the stack.
    pub n_experts: u64,
    /// Times the stack is looped per forward.
    pub max_iter: u64,
    /// Element type of weights and activations.
    pub dtype: DType,
    /// The expert FFN's activation: the arm.
    pub activation: Activation,
    /// burn's checkpoint strategy.
    pub checkpointing: Checkpointing,
    /// The burn-cubecl backend the step runs on.
    pub backend: Backend,
    /// Whose state sits beside the weights.
    pub optimizer: Optimizer,
    /// Training steps per run.
    pub steps: u64,
    /// One run per seed.
    pub seeds: Vec<u64>,
    /// The trainer reads the loss (a device sync) every this many steps.
    pub loss_read_every: u64,
    /// The card and what others hold on it.
    pub card: Card,
    /// The layers not modelled op by op (`[rest_of_model]`).
    pub rest: RestOfModel,
    /// How often, and how late, releases reach the pool.
    pub jitter: Jitter,
    /// How the trainer feeds and paces the step.
    pub workload: Workload,
}

impl Recipe {
    /// Parses and validates `text`; `origin` names it in errors. Counts that set a run's work
    /// (steps, seeds, expert calls, rest-of-model tensors, late releases and their lag) are
    /// held to [`crate::limits`].
    pub fn parse(origin: &str, text: &str) -> Result<Recipe, RecipeError> {
        let file: RecipeFile = from_toml(origin, text, MAX_RECIPE_BYTES)?;
        Self::validate(origin, text, file)
    }

    /// The arm's name in tables and figures: its activation, and its checkpointing when that is
    /// not none (`situ-tensor`, `situ-tensor / balanced`).
    pub fn arm(&self) -> String {
        match self.checkpointing {
            Checkpointing::None => written_name(&self.activation),
            c => format!("{} / {}", written_name(&self.activation), written_name(&c)),
        }
    }

    /// The sequence length of `step` (1-based) for `seed`: `seq_len` unless the workload pads
    /// dynamically, then a seeded draw (SplitMix64 of seed and step, the same on every machine)
    /// from `[seq_len_min, seq_len]`, rounded up to a multiple of `pad_to`.
    pub fn seq_len_at(&self, seed: u64, step: u64) -> u64 {
        let w = &self.workload;
        if w.seq_len_min >= self.seq_len {
            return self.seq_len;
        }
        let z = mix(seed.wrapping_mul(GAMMA).wrapping_add(step));
        let drawn = w.seq_len_min + z % (self.seq_len - w.seq_len_min + 1);
        drawn
            .div_ceil(w.pad_to)
            .saturating_mul(w.pad_to)
            .min(self.seq_len)
    }

    /// Positions per call: batch × seq_len.
    pub fn tokens(&self) -> u64 {
        self.batch * self.seq_len
    }

    /// Expert FFN calls per step.
    pub fn calls(&self) -> u64 {
        self.n_experts * self.max_iter
    }

    /// Width of the gate_up projection: doubled for the SiTU GLU paths.
    pub fn gate_up_width(&self) -> u64 {
        match self.activation {
            Activation::Silu => self.d_ffn,
            Activation::SituTensor | Activation::SituFused => 2 * self.d_ffn,
        }
    }

    /// Parameters of the expert stack (gate_up and down of every expert; the loop reuses them).
    pub fn expert_params(&self) -> u64 {
        self.n_experts * (self.d_model * self.gate_up_width() + self.d_ffn * self.d_model)
    }

    /// Bytes of weights, gradients and optimizer state: the floor under any step.
    pub fn weight_bytes(&self) -> u64 {
        let params = self.expert_params() + self.rest.params;
        params * self.dtype.size() * (2 + self.optimizer.states_per_param())
            + self.rest.persistent_bytes
    }

    /// A copy with another batch; refused when a tensor's bytes would overflow 64 bits or pass
    /// [`MAX_TENSOR_BYTES`] (so that absurd sizes are refused before any work).
    pub fn with_batch(&self, batch: u64) -> Result<Recipe, String> {
        let widest = batch
            .checked_mul(self.seq_len)
            .and_then(|n| n.checked_mul(self.gate_up_width()))
            .and_then(|e| e.checked_mul(self.dtype.size()));
        match widest {
            _ if batch == 0 => Err("a batch of 0 sequences trains nothing".into()),
            Some(bytes) if MAX_TENSOR_BYTES.allows(bytes) => Ok(Recipe {
                batch,
                ..self.clone()
            }),
            _ => Err(format!(
                "batch {batch} makes the [N, gate_up] activation larger than {MAX_TENSOR_BYTES}"
            )),
        }
    }

    /// A copy with another activation / checkpointing (for side-by-side cells).
    pub fn with(&self, activation: Activation, checkpointing: Checkpointing) -> Recipe {
        Recipe {
            activation,
            checkpointing,
            ..self.clone()
        }
    }
}

/// Reads `text` as the TOML of `T`, for recipes, decoders and incidents alike: refused unread
/// past `limit`; a syntax error names its line and quotes input only through
/// [`limits::quote_message`].
pub(crate) fn from_toml<T: DeserializeOwned>(
    origin: &str,
    text: &str,
    limit: Limit,
) -> Result<T, InputError> {
    if !limit.allows(text.len() as u64) {
        return Err(InputError::Syntax {
            origin: origin.to_string(),
            line: 1,
            reason: format!("the text is {} bytes, above {limit}", text.len()),
        });
    }
    toml::from_str(text).map_err(|e| InputError::Syntax {
        origin: origin.to_string(),
        line: e.span().map_or(1, |s| line_of(text, s.start)),
        reason: limits::quote_message(e.message()),
    })
}
