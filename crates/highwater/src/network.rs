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
//! every tensor's bytes within [`MAX_TENSOR_BYTES`]), errors naming the file, line and field.

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::limits::{MAX_RECIPE_BYTES, MAX_TENSOR_BYTES};
use basics::line_of;

use crate::recipe::{Backend, Checkpointing, RecipeError, from_toml};

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

/// `[training]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrainingFile {
    backend: Backend,
    checkpointing: Checkpointing,
    #[serde(default)]
    precision: Precision,
    steps: Spanned<u64>,
    seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    // Architecture tables are read as plain tables, then checked key by key (`shape`), so
    // that an error can name the key's line.
    decoder: Option<toml::Table>,
    encoder: Option<toml::Table>,
    resnet: Option<toml::Table>,
    vit: Option<toml::Table>,
    lstm: Option<toml::Table>,
    mlp: Option<toml::Table>,
    training: TrainingFile,
}

/// The architecture tables a network file may hold (exactly one).
pub const FAMILIES: [&str; 6] = ["decoder", "encoder", "resnet", "vit", "lstm", "mlp"];

/// Whether a file's text is a network's (it has one of the [`FAMILIES`]' tables) rather than a
/// wave recipe's; text that is not TOML is neither, and the wave parser says why.
pub fn is_network(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| FAMILIES.iter().any(|f| t.contains_key(*f)))
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

/// The 1-based line of `key = …` in `[family]`, else of the table's header, else 1.
fn key_line(text: &str, family: &str, key: &str) -> usize {
    let Some(table) = text.find(&format!("[{family}]")) else {
        return 1;
    };
    let header = line_of(text, table);
    text[table..]
        .lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(header, |i| header + i)
}

/// Reads one architecture table: its shape (unknown keys refused, every size at least 1) and
/// its batch.
fn shape<T: serde::de::DeserializeOwned>(
    origin: &str,
    text: &str,
    family: &'static str,
    table: &toml::Table,
) -> Result<(T, u64), RecipeError> {
    let mut table = table.clone();
    let syntax = |line, reason: String| RecipeError::Syntax {
        origin: origin.to_string(),
        line,
        reason,
    };
    for (key, value) in &table {
        if value.as_integer() == Some(0) {
            return Err(RecipeError::Invalid {
                origin: origin.to_string(),
                line: key_line(text, family, key),
                field: field_name(family, key),
                reason: "must be at least 1".into(),
            });
        }
    }
    let batch = match table.remove("batch") {
        None => {
            return Err(syntax(
                key_line(text, family, "batch"),
                format!("[{family}]: missing field `batch`"),
            ));
        }
        Some(v) => v
            .as_integer()
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| {
                syntax(
                    key_line(text, family, "batch"),
                    format!("[{family}]: `batch` must be a positive integer"),
                )
            })?,
    };
    let shape = T::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        let message = e.message().to_string();
        // serde names the offending key in backquotes: point at its line.
        let line = message
            .split('`')
            .nth(1)
            .map_or_else(|| key_line(text, family, ""), |k| key_line(text, family, k));
        syntax(
            line,
            format!("[{family}]: {}", crate::limits::quote_message(&message)),
        )
    })?;
    Ok((shape, batch))
}

/// `family.key` as a static name, for errors (the fields are a fixed set).
fn field_name(family: &str, key: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "decoder.vocab",
        "decoder.seq_len",
        "decoder.d_model",
        "decoder.n_heads",
        "decoder.n_layers",
        "decoder.d_ff",
        "encoder.vocab",
        "encoder.seq_len",
        "encoder.d_model",
        "encoder.n_heads",
        "encoder.n_layers",
        "encoder.d_ff",
        "resnet.image",
        "resnet.channels",
        "resnet.width",
        "resnet.stages",
        "resnet.blocks",
        "resnet.classes",
        "vit.image",
        "vit.channels",
        "vit.patch",
        "vit.d_model",
        "vit.n_heads",
        "vit.n_layers",
        "vit.d_ff",
        "vit.classes",
        "lstm.vocab",
        "lstm.seq_len",
        "lstm.d_model",
        "lstm.hidden",
        "lstm.n_layers",
        "mlp.inputs",
        "mlp.hidden",
        "mlp.n_layers",
        "mlp.classes",
    ];
    let full = format!("{family}.{key}");
    NAMES
        .iter()
        .find(|n| **n == full)
        .copied()
        .unwrap_or("network")
}

impl Network {
    /// Parses and checks `text`; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Network, RecipeError> {
        let f: File = from_toml(origin, text, MAX_RECIPE_BYTES)?;
        let invalid = |field: &'static str, at: usize, reason: String| RecipeError::Invalid {
            origin: origin.to_string(),
            line: line_of(text, at),
            field,
            reason,
        };
        let mut tables = Vec::new();
        let mut arch = None;
        let mut batch = None;
        macro_rules! table {
            ($name:ident, $variant:ident) => {
                if let Some(t) = &f.$name {
                    tables.push(stringify!($name));
                    let (shape, b) = shape(origin, text, stringify!($name), t)?;
                    arch = Some(Arch::$variant(shape));
                    batch = Some((concat!(stringify!($name), ".batch"), b));
                }
            };
        }
        table!(decoder, Decoder);
        table!(encoder, Encoder);
        table!(resnet, Resnet);
        table!(vit, Vit);
        table!(lstm, Lstm);
        table!(mlp, Mlp);
        let (Some(arch), Some((batch_field, batch)), [_]) = (arch, batch, tables.as_slice()) else {
            return Err(RecipeError::Syntax {
                origin: origin.to_string(),
                line: 1,
                reason: format!(
                    "a network file has exactly one architecture table ({}); found {}",
                    FAMILIES.map(|f| format!("[{f}]")).join(", "),
                    if tables.is_empty() {
                        "none".to_string()
                    } else {
                        tables.join(" and ")
                    }
                ),
            });
        };
        let t = &f.training;
        if *t.steps.get_ref() == 0 {
            return Err(invalid(
                "training.steps",
                t.steps.span().start,
                "must be at least 1".into(),
            ));
        }
        let network = Network {
            origin: origin.to_string(),
            arch,
            batch,
            backend: t.backend,
            checkpointing: t.checkpointing,
            precision: t.precision,
            steps: *t.steps.get_ref(),
            seed: t.seed,
        };
        let family = network.arch.family();
        let at = |field: &'static str, key: &str, reason: String| RecipeError::Invalid {
            origin: origin.to_string(),
            line: key_line(text, family, key),
            field,
            reason,
        };
        if let Some((field, key, reason)) = network.arch.inconsistency() {
            return Err(at(field, key, reason));
        }
        match network.oversize(network.batch) {
            None => Ok(network),
            Some(reason) => Err(at(batch_field, "batch", reason)),
        }
    }

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

    /// What is too large at `batch` (a zero batch counts), and why.
    fn oversize(&self, batch: u64) -> Option<String> {
        if batch == 0 {
            return Some("a batch of 0 trains nothing".into());
        }
        // Priced at 4 bytes an element whatever the precision: burn keeps some state in f32.
        let within = |elems: Option<u64>| {
            elems
                .and_then(|e| e.checked_mul(4))
                .is_some_and(|b| MAX_TENSOR_BYTES.allows(b))
        };
        if !within(self.arch.params().checked_mul(4)) {
            return Some(format!(
                "the parameters and their Adam state exceed {MAX_TENSOR_BYTES}"
            ));
        }
        if !self
            .arch
            .largest_activations()
            .into_iter()
            .all(|per_example| within(per_example.and_then(|e| e.checked_mul(batch))))
        {
            return Some(format!(
                "batch {batch} makes an activation (logits, attention scores, feature maps or \
                 hidden states) larger than {MAX_TENSOR_BYTES}"
            ));
        }
        None
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

impl Arch {
    /// A shape that cannot be built: the field, its key and why.
    fn inconsistency(&self) -> Option<(&'static str, &'static str, String)> {
        let divides = |field, key, heads: u64, width: u64| {
            (!width.is_multiple_of(heads))
                .then(|| (field, key, format!("does not divide d_model = {width}")))
        };
        match self {
            Arch::Decoder(d) => divides("decoder.n_heads", "n_heads", d.n_heads, d.d_model),
            Arch::Encoder(d) => divides("encoder.n_heads", "n_heads", d.n_heads, d.d_model),
            Arch::Vit(v) => divides("vit.n_heads", "n_heads", v.n_heads, v.d_model).or_else(|| {
                (!v.image.is_multiple_of(v.patch)).then(|| {
                    (
                        "vit.patch",
                        "patch",
                        format!("does not divide image = {}", v.image),
                    )
                })
            }),
            Arch::Resnet(r) => {
                // The stem's pool and every stage after the first halve the side.
                let shrink = 1u64.checked_shl(r.stages.min(64) as u32).unwrap_or(0);
                (r.stages > 32 || shrink == 0 || !r.image.is_multiple_of(shrink)).then(|| {
                    (
                        "resnet.stages",
                        "stages",
                        format!(
                            "halve the side {} times: image = {} must be a multiple of 2^{}",
                            r.stages, r.image, r.stages
                        ),
                    )
                })
            }
            Arch::Lstm(_) | Arch::Mlp(_) => None,
        }
    }

    /// Elements of the largest activations one example makes, each `None` past `u64`.
    fn largest_activations(&self) -> Vec<Option<u64>> {
        let m = u64::checked_mul;
        match self {
            Arch::Decoder(d) | Arch::Encoder(d) => vec![
                // The logits, the attention scores, the MLP's hidden activation.
                m(d.seq_len, d.vocab),
                m(d.n_heads, d.seq_len).and_then(|x| m(x, d.seq_len)),
                m(d.seq_len, d.d_ff),
            ],
            Arch::Vit(v) => {
                let tokens = (v.image / v.patch).checked_pow(2);
                vec![
                    tokens.and_then(|t| m(t, t)?.checked_mul(v.n_heads)),
                    tokens.and_then(|t| m(t, v.d_ff)),
                    m(v.image, v.image).and_then(|x| m(x, v.channels)),
                ]
            }
            Arch::Resnet(r) => vec![
                // The stem's feature map, before the pool.
                m(r.image, r.image).and_then(|x| m(x, r.width)),
                m(r.image, r.image).and_then(|x| m(x, r.channels)),
            ],
            Arch::Lstm(l) => vec![
                m(l.seq_len, l.vocab),
                m(l.seq_len, l.hidden).and_then(|x| m(x, 4)),
            ],
            Arch::Mlp(m_) => vec![Some(m_.inputs), Some(m_.hidden), Some(m_.classes)],
        }
    }

    /// Parameters, as burn counts them (`num_params`): weights and biases, norms' scales and
    /// shifts, and batch norm's running mean and variance (state that lives beside the weights). Saturates at `u64::MAX` (such a network is
    /// refused by [`Network::with_batch`]).
    pub fn params(&self) -> u64 {
        let [mul, add] = [u128::saturating_mul, u128::saturating_add];
        let sum = |terms: &[u128]| terms.iter().fold(0u128, |a, t| add(a, *t));
        let linear = |i: u128, o: u128| add(mul(i, o), o);
        let norm = |d: u128| mul(2, d);
        let block = |d: u128, f: u128| {
            // Attention's four projections, the MLP's two, two norms.
            sum(&[
                mul(4, linear(d, d)),
                linear(d, f),
                linear(f, d),
                mul(2, norm(d)),
            ])
        };
        let total = match self {
            Arch::Decoder(a) | Arch::Encoder(a) => {
                let [v, s, d, f, l] =
                    [a.vocab, a.seq_len, a.d_model, a.d_ff, a.n_layers].map(u128::from);
                sum(&[
                    mul(v, d),
                    mul(s, d),
                    mul(l, block(d, f)),
                    norm(d),
                    linear(d, v),
                ])
            }
            Arch::Vit(a) => {
                let [c, p, d, f, l, k] = [
                    a.channels, a.patch, a.d_model, a.d_ff, a.n_layers, a.classes,
                ]
                .map(u128::from);
                let tokens = u128::from(a.image / a.patch).pow(2);
                sum(&[
                    // The patch embedding: a p×p convolution with a bias.
                    add(mul(mul(c, mul(p, p)), d), d),
                    mul(tokens, d),
                    mul(l, block(d, f)),
                    norm(d),
                    linear(d, k),
                ])
            }
            Arch::Resnet(a) => {
                let [c, w, k] = [a.channels, a.width, a.classes].map(u128::from);
                // 3×3 convolutions without bias, each followed by a batch norm: its scale, shift,
                // running mean and running variance.
                let batch_norm = |o: u128| mul(4, o);
                let conv = |i: u128, o: u128| add(mul(mul(i, o), 9), batch_norm(o));
                let mut total = conv(c, w);
                let mut channels = w;
                for stage in 0..a.stages.min(64) {
                    let out = mul(w, 1u128.checked_shl(stage as u32).unwrap_or(u128::MAX));
                    for block in 0..a.blocks.min(1 << 20) {
                        let input = if block == 0 { channels } else { out };
                        total = sum(&[total, conv(input, out), conv(out, out)]);
                        if block == 0 && stage > 0 {
                            // The 1×1 projection of the residual, with its norm.
                            total = sum(&[total, mul(input, out), batch_norm(out)]);
                        }
                    }
                    channels = out;
                }
                add(total, linear(channels, k))
            }
            Arch::Lstm(a) => {
                let [v, d, h, l] = [a.vocab, a.d_model, a.hidden, a.n_layers].map(u128::from);
                // burn's Lstm: four gates, each an input and a hidden linear with biases.
                let lstm = |i: u128| mul(4, add(linear(i, h), linear(h, h)));
                let stack = add(lstm(d), mul(l.saturating_sub(1), lstm(h)));
                sum(&[mul(v, d), stack, linear(h, v)])
            }
            Arch::Mlp(a) => {
                let [i, h, l, k] = [a.inputs, a.hidden, a.n_layers, a.classes].map(u128::from);
                sum(&[
                    linear(i, h),
                    mul(l.saturating_sub(1), linear(h, h)),
                    linear(h, k),
                ])
            }
        };
        u64::try_from(total).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECODER: &str = include_str!("../../../repro/models/decoder.toml");

    #[test]
    fn parameters_saturate_instead_of_overflowing() {
        let mut d = Network::parse("decoder.toml", DECODER).unwrap();
        let exact = d.arch.params();
        let Arch::Decoder(shape) = &mut d.arch else {
            panic!("a decoder")
        };
        shape.d_model = 7_429_491_000_000_000_000;
        assert_eq!(d.arch.params(), u64::MAX);
        let Arch::Decoder(shape) = &mut d.arch else {
            panic!("a decoder")
        };
        shape.d_model = 768;
        assert_eq!(d.arch.params(), exact);
    }

    #[test]
    fn every_bundled_network_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/models");
        let mut families = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let n = Network::parse(&path.display().to_string(), &text).unwrap();
            assert!(n.arch.params() > 1000, "{}", n.arch.params());
            families.insert(n.arch.family());
        }
        assert!(families.len() >= 4, "{families:?}");
    }

    #[test]
    fn heads_that_do_not_divide_the_width_are_refused_at_their_line() {
        let text = DECODER.replace("n_heads = 12", "n_heads = 7");
        let e = Network::parse("x.toml", &text).unwrap_err();
        let line = text.lines().position(|l| l.starts_with("n_heads")).unwrap() + 1;
        assert_eq!(e.line(), line, "{e}");
        assert!(e.to_string().contains("does not divide"), "{e}");
    }

    #[test]
    fn absurd_sizes_are_refused_before_any_work() {
        let text = DECODER.replace("batch = 16", "batch = 9223372036854775807");
        let e = Network::parse("x.toml", &text).unwrap_err();
        assert!(e.to_string().contains("`decoder.batch`"), "{e}");
        let line = text.lines().position(|l| l.starts_with("batch")).unwrap() + 1;
        assert_eq!(e.line(), line);
        // Past TOML's integers: refused by the reader, at its line.
        let text = DECODER.replace("batch = 16", "batch = 18446744073709551615");
        let e = Network::parse("x.toml", &text).unwrap_err();
        assert_eq!(e.line(), line, "{e}");
        let e = Network::parse(
            "x.toml",
            &DECODER.replace("d_model = 768", "d_model = 4294967292"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("the parameters"), "{e}");
        let d = Network::parse("x.toml", DECODER).unwrap();
        assert!(d.with_batch(1 << 40).is_err());
        assert!(d.with_batch(0).is_err());
        assert_eq!(d.with_batch(3).unwrap().tokens(), 3 * 256);
    }

    #[test]
    fn unknown_keys_zeros_and_two_families_name_their_line() {
        let e = Network::parse("x.toml", &DECODER.replace("d_ff =", "d_fff =")).unwrap_err();
        assert!(
            matches!(e, RecipeError::Syntax { .. }) && e.line() > 1,
            "{e}"
        );
        assert!(e.to_string().contains("d_fff"), "{e}");
        let text = DECODER.replace("n_layers = 6", "n_layers = 0");
        let e = Network::parse("x.toml", &text).unwrap_err();
        assert!(
            e.to_string()
                .contains("`decoder.n_layers` must be at least 1"),
            "{e}"
        );
        let line = text
            .lines()
            .position(|l| l.starts_with("n_layers"))
            .unwrap()
            + 1;
        assert_eq!(e.line(), line);
        let two = format!(
            "{DECODER}\n[mlp]\ninputs = 4\nhidden = 4\nn_layers = 1\nclasses = 2\nbatch = 1\n"
        );
        let e = Network::parse("x.toml", &two).unwrap_err();
        assert!(e.to_string().contains("decoder and mlp"), "{e}");
    }

    #[test]
    fn a_resnet_whose_side_cannot_halve_enough_is_refused() {
        let text = "[resnet]\nimage = 24\nchannels = 3\nwidth = 8\nstages = 4\nblocks = 1\n\
                    classes = 10\nbatch = 2\n[training]\nbackend = \"cube\"\n\
                    checkpointing = \"none\"\nsteps = 1\nseed = 1\n";
        let e = Network::parse("r.toml", text).unwrap_err();
        assert!(e.to_string().contains("`resnet.stages`"), "{e}");
        assert_eq!(e.line(), 5);
        let ok = Network::parse("r.toml", &text.replace("image = 24", "image = 32")).unwrap();
        assert_eq!(ok.precision, Precision::F32);
    }
}
