//! A network file: one of the common model families, built from burn's own modules
//! (`situ::network`) and trained by the dry run and the GPU. Nothing here is modelled op by op;
//! the file only says the shapes. One architecture table names the family:
//!
//! * `[decoder]` a decoder-only transformer (token and position embeddings, pre-norm causal
//!   blocks, a head over the vocabulary);
//! * `[encoder]` a BERT-style text encoder: the decoder's stack without the causal mask (every
//!   position attends to every other), a masked-LM head over the vocabulary at every position;
//! * `[resnet]` a ResNet-style CNN (a 3×3 stem, batch norm, max-pool, stages of residual basic
//!   blocks, global average pool, a linear head);
//! * `[vit]` a ViT-style encoder (a convolutional patch embedding, position embeddings, pre-norm
//!   `TransformerEncoder` blocks with `MultiHeadAttention` and `LayerNorm`, a mean-pooled head);
//! * `[lstm]` a recurrent language model (embedding, stacked LSTMs, a head over the vocabulary);
//! * `[mlp]` a plain multi-layer perceptron over feature vectors.
//!
//! `[training]` says the backend, checkpointing, float precision, steps and seed; every family
//! trains with cross-entropy and Adam. Read like a [`Recipe`](crate::Recipe): the TOML as
//! written (unknown keys refused), then checked (every size non-zero, heads dividing the width,
//! every tensor's bytes within [`MAX_TENSOR_BYTES`]), errors naming the file, line and field,
//! and the page that documents the format ([`FORMAT_PAGE`]): a reader who wrote the file wrong
//! learns where every key is listed. [`KEYS`] describes each key once, for that page and for the
//! errors.

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::limits::MAX_TENSOR_BYTES;
use crate::recipe::{Backend, Checkpointing};

mod check;
mod file;
mod keys;
#[cfg(test)]
mod tests;

pub use keys::{Allowed, FAMILY_DOCS, Family, KEYS, Key, Written, key, keys_of};

/// The book's reference page on network files, from the repository's root: every key of every
/// family, its unit, default and limits ([`KEYS`]).
pub const FORMAT_PAGE: &str = "src/reference/model-files.md";

/// How an error of [`Network::parse`] and `highwater fit --help` point to [`FORMAT_PAGE`].
pub fn see_format() -> String {
    format!("see the book's page \"Model files\" ({FORMAT_PAGE})")
}

/// The float type of weights, activations and optimizer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// 32-bit IEEE float, burn's default.
    #[default]
    F32,
    /// bfloat16: f32's range, 8 bits of mantissa.
    Bf16,
}

impl Precision {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        }
    }
}

/// `[decoder]`: a decoder-only transformer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecoderShape {
    /// Tokens in the vocabulary: the head's output width.
    pub vocab: u64,
    /// Positions per sequence.
    pub seq_len: u64,
    /// The residual stream's width.
    pub d_model: u64,
    /// Attention heads per block (they divide `d_model`).
    pub n_heads: u64,
    /// Transformer blocks.
    pub n_layers: u64,
    /// The MLP's hidden width.
    pub d_ff: u64,
}

/// `[encoder]`: a BERT-style text encoder, the decoder's shapes without its causal mask.
pub type EncoderShape = DecoderShape;

/// `[resnet]`: a ResNet-style CNN over square images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResnetShape {
    /// Pixels per side of the input image.
    pub image: u64,
    /// Input channels (3 for RGB).
    pub channels: u64,
    /// The stem's channels; each stage after the first doubles them and halves the side.
    pub width: u64,
    /// Stages of residual blocks.
    pub stages: u64,
    /// Basic blocks (two 3×3 convolutions and a residual add) per stage.
    pub blocks: u64,
    /// Classes: the head's output width.
    pub classes: u64,
}

/// `[vit]`: a ViT-style encoder over square images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitShape {
    /// Pixels per side of the input image.
    pub image: u64,
    /// Input channels.
    pub channels: u64,
    /// Pixels per side of a patch (they divide `image`): a patch is a token.
    pub patch: u64,
    /// The residual stream's width.
    pub d_model: u64,
    /// Attention heads per block (they divide `d_model`).
    pub n_heads: u64,
    /// Transformer blocks.
    pub n_layers: u64,
    /// The MLP's hidden width.
    pub d_ff: u64,
    /// Classes: the head's output width.
    pub classes: u64,
}

/// `[lstm]`: a recurrent language model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LstmShape {
    /// Tokens in the vocabulary.
    pub vocab: u64,
    /// Positions per sequence.
    pub seq_len: u64,
    /// The embedding's width: the first LSTM's input.
    pub d_model: u64,
    /// Each LSTM's hidden state.
    pub hidden: u64,
    /// LSTMs stacked.
    pub n_layers: u64,
}

/// `[mlp]`: linear layers with ReLU between them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlpShape {
    /// Features per input vector.
    pub inputs: u64,
    /// Hidden layers' width.
    pub hidden: u64,
    /// Hidden layers.
    pub n_layers: u64,
    /// Classes: the head's output width.
    pub classes: u64,
}

/// The architecture: which family, with its shapes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    /// A decoder-only transformer.
    Decoder(DecoderShape),
    /// A BERT-style text encoder (bidirectional attention, a masked-LM head).
    Encoder(EncoderShape),
    /// A ResNet-style CNN.
    Resnet(ResnetShape),
    /// A ViT-style encoder.
    Vit(VitShape),
    /// A recurrent language model.
    Lstm(LstmShape),
    /// A multi-layer perceptron.
    Mlp(MlpShape),
}

impl Arch {
    /// The family's table name (`decoder`, `resnet`, …).
    pub fn family(&self) -> &'static str {
        match self {
            Arch::Decoder(_) => "decoder",
            Arch::Encoder(_) => "encoder",
            Arch::Resnet(_) => "resnet",
            Arch::Vit(_) => "vit",
            Arch::Lstm(_) => "lstm",
            Arch::Mlp(_) => "mlp",
        }
    }
}

/// The architecture tables a network file may hold (exactly one).
pub const FAMILIES: [&str; 6] = ["decoder", "encoder", "resnet", "vit", "lstm", "mlp"];

/// Whether a file's text is a network's (it has one of the [`FAMILIES`]' tables) rather than a
/// wave recipe's; text that is not TOML is neither, and the wave parser says why.
pub fn is_network(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| FAMILIES.iter().any(|f| t.contains_key(*f)))
}

/// Whether `text` is TOML with neither an architecture table nor a wave recipe's `[model]` (a
/// network file whose table is misspelt, say): a reader that takes every file without a network
/// table for a recipe should then say that it did, or its errors speak of a recipe's keys.
pub fn has_no_model_table(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| !t.contains_key("model") && !FAMILIES.iter().any(|f| t.contains_key(*f)))
}

/// A network the dry run and the GPU can be trusted to build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Network {
    /// Where it came from (a file name).
    pub origin: String,
    /// The family and its shapes.
    pub arch: Arch,
    /// Examples (sequences, images, vectors) per step.
    pub batch: u64,
    /// The burn-cubecl backend the step runs on.
    pub backend: Backend,
    /// burn's checkpoint strategy.
    pub checkpointing: Checkpointing,
    /// The float type.
    pub precision: Precision,
    /// Training steps.
    pub steps: u64,
    /// The seed of the weights and the batches.
    pub seed: u64,
}

impl Network {
    /// The same network with another batch; refused when one of its tensors would exceed
    /// [`MAX_TENSOR_BYTES`] (so that absurd sizes are refused before any work).
    pub fn with_batch(&self, batch: u64) -> Result<Network, String> {
        match self.oversize(batch) {
            Some(reason) => Err(reason),
            None => Ok(Network {
                batch,
                ..self.clone()
            }),
        }
    }

    /// Examples times positions: the tokens of a step for sequence models, else the batch.
    pub fn tokens(&self) -> u64 {
        match &self.arch {
            Arch::Decoder(d) | Arch::Encoder(d) => self.batch * d.seq_len,
            Arch::Lstm(l) => self.batch * l.seq_len,
            Arch::Vit(v) => self.batch * (v.image / v.patch).pow(2),
            Arch::Resnet(_) | Arch::Mlp(_) => self.batch,
        }
    }

    /// The name of the autotune cache a GPU run of this network fills, by family and precision
    /// (`resnet-f32`): `repro/results/models/autotune/NAME`, as `scripts/gpu-models` keeps it.
    pub fn cache_name(&self) -> String {
        format!(
            "{}-{}",
            self.arch.family(),
            crate::recipe::written_name(&self.precision)
        )
    }

    /// A one-line description: the family and its shapes, the batch, the training.
    pub fn describe(&self) -> String {
        let shape = match &self.arch {
            Arch::Decoder(d) | Arch::Encoder(d) => format!(
                "{} layers, d_model {}, {} heads, d_ff {}, vocab {}, seq {}",
                d.n_layers, d.d_model, d.n_heads, d.d_ff, d.vocab, d.seq_len
            ),
            Arch::Resnet(r) => format!(
                "{} stages x {} blocks, width {}, {}x{}x{} images, {} classes",
                r.stages, r.blocks, r.width, r.channels, r.image, r.image, r.classes
            ),
            Arch::Vit(v) => format!(
                "{} layers, d_model {}, {} heads, d_ff {}, {}x{} images in {}-pixel patches, {} \
                 classes",
                v.n_layers, v.d_model, v.n_heads, v.d_ff, v.image, v.image, v.patch, v.classes
            ),
            Arch::Lstm(l) => format!(
                "{} LSTMs, hidden {}, d_model {}, vocab {}, seq {}",
                l.n_layers, l.hidden, l.d_model, l.vocab, l.seq_len
            ),
            Arch::Mlp(m) => format!(
                "{} hidden layers of {}, {} inputs, {} classes",
                m.n_layers, m.hidden, m.inputs, m.classes
            ),
        };
        format!(
            "{}: {shape} | batch {} | {} | checkpointing: {} | backend: {} | optimizer: adam",
            self.arch.family(),
            self.batch,
            crate::recipe::written_name(&self.precision),
            crate::recipe::written_name(&self.checkpointing),
            crate::recipe::written_name(&self.backend),
        )
    }
}
