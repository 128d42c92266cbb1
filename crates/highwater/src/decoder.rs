//! A decoder-only transformer's recipe: the shapes of a small GPT-style language model (token
//! and position embeddings, pre-norm blocks of multi-head causal attention and an MLP, a final
//! norm, a head over the vocabulary, cross-entropy, Adam), for the dry run and the GPU to train.
//! Nothing here is modelled op by op: burn's own modules run it (`situ::decoder`). Read like a
//! [`Recipe`](crate::Recipe): the TOML as written (unknown keys refused), then checked (every
//! size non-zero, heads dividing the width, every tensor's bytes within 64 bits).

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::limits::{MAX_RECIPE_BYTES, MAX_TENSOR_BYTES};
use basics::line_of;

use crate::recipe::{Backend, Checkpointing, RecipeError, from_toml};

/// `[decoder]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecoderFile {
    vocab: Spanned<u64>,
    seq_len: Spanned<u64>,
    d_model: Spanned<u64>,
    n_heads: Spanned<u64>,
    n_layers: Spanned<u64>,
    d_ff: Spanned<u64>,
    batch: Spanned<u64>,
}

/// `[training]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrainingFile {
    backend: Backend,
    checkpointing: Checkpointing,
    steps: Spanned<u64>,
    seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    decoder: DecoderFile,
    training: TrainingFile,
}

/// Whether a recipe file's text is a decoder's (it has a `[decoder]` table) rather than a wave
/// recipe's; text that is not TOML is neither, and the wave parser says why.
pub fn is_decoder(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("decoder"))
}

/// What [`Decoder::with_batch`] found too large.
enum Oversize {
    Batch,
    Parameters,
}

/// A decoder the dry run and the GPU can be trusted to build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decoder {
    /// Where it came from (a file name).
    pub origin: String,
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
    /// Sequences per step.
    pub batch: u64,
    /// The burn-cubecl backend the step runs on.
    pub backend: Backend,
    /// burn's checkpoint strategy.
    pub checkpointing: Checkpointing,
    /// Training steps.
    pub steps: u64,
    /// The seed of the weights and the batches.
    pub seed: u64,
}

impl Decoder {
    /// Parses and checks `text`; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Decoder, RecipeError> {
        let f: File = from_toml(origin, text, MAX_RECIPE_BYTES)?;
        let err = |field: &'static str, v: &Spanned<u64>, reason: String| RecipeError::Invalid {
            origin: origin.to_string(),
            line: line_of(text, v.span().start),
            field,
            reason,
        };
        let nonzero = |field: &'static str, v: &Spanned<u64>| match *v.get_ref() {
            0 => Err(err(field, v, "must be at least 1".into())),
            n => Ok(n),
        };
        let d = &f.decoder;
        let decoder = Decoder {
            origin: origin.to_string(),
            vocab: nonzero("decoder.vocab", &d.vocab)?,
            seq_len: nonzero("decoder.seq_len", &d.seq_len)?,
            d_model: nonzero("decoder.d_model", &d.d_model)?,
            n_heads: nonzero("decoder.n_heads", &d.n_heads)?,
            n_layers: nonzero("decoder.n_layers", &d.n_layers)?,
            d_ff: nonzero("decoder.d_ff", &d.d_ff)?,
            batch: nonzero("decoder.batch", &d.batch)?,
            backend: f.training.backend,
            checkpointing: f.training.checkpointing,
            steps: nonzero("training.steps", &f.training.steps)?,
            seed: f.training.seed,
        };
        if !decoder.d_model.is_multiple_of(decoder.n_heads) {
            return Err(err(
                "decoder.n_heads",
                &d.n_heads,
                format!("does not divide d_model = {}", decoder.d_model),
            ));
        }
        match decoder.oversize(decoder.batch) {
            None => Ok(decoder),
            Some((Oversize::Batch, reason)) => Err(err("decoder.batch", &d.batch, reason)),
            Some((Oversize::Parameters, reason)) => Err(err("decoder.d_model", &d.d_model, reason)),
        }
    }

    /// The same decoder with another batch; refused when one of its tensors would exceed
    /// [`MAX_TENSOR_BYTES`] (so that absurd sizes are refused before any work).
    pub fn with_batch(&self, batch: u64) -> Result<Decoder, String> {
        match self.oversize(batch) {
            Some((_, reason)) => Err(reason),
            None => Ok(Decoder {
                batch,
                ..self.clone()
            }),
        }
    }

    /// What is too large at `batch` (a zero batch counts), and why.
    fn oversize(&self, batch: u64) -> Option<(Oversize, String)> {
        if batch == 0 {
            return Some((
                Oversize::Batch,
                "a batch of 0 sequences trains nothing".into(),
            ));
        }
        let within = |elems: Option<u64>| {
            elems
                .and_then(|e| e.checked_mul(4))
                .is_some_and(|b| MAX_TENSOR_BYTES.allows(b))
        };
        let tokens = batch.checked_mul(self.seq_len);
        let largest = [
            // The logits, [batch · seq_len, vocab].
            tokens.and_then(|t| t.checked_mul(self.vocab)),
            // The attention scores, [batch, heads, seq_len, seq_len].
            tokens.and_then(|t| t.checked_mul(self.n_heads.checked_mul(self.seq_len)?)),
            // The MLP's hidden activation, [batch · seq_len, d_ff].
            tokens.and_then(|t| t.checked_mul(self.d_ff)),
        ];
        if !within(self.params().checked_mul(4)) {
            let reason = format!("the parameters and their Adam state exceed {MAX_TENSOR_BYTES}");
            return Some((Oversize::Parameters, reason));
        }
        if !largest.into_iter().all(within) {
            let reason = format!(
                "batch {batch} makes a tensor (logits, attention scores or MLP activations) \
                 larger than {MAX_TENSOR_BYTES}"
            );
            return Some((Oversize::Batch, reason));
        }
        None
    }

    /// Parameters (f32): embeddings, blocks (attention's four projections, the MLP's two, two
    /// norms), the final norm and the head, each with its bias.
    /// Saturates at `u64::MAX` (a decoder that large is refused by [`Decoder::with_batch`]).
    pub fn params(&self) -> u64 {
        let [v, s, d, f, l] = [
            self.vocab,
            self.seq_len,
            self.d_model,
            self.d_ff,
            self.n_layers,
        ]
        .map(u128::from);
        // u128 holds any product of two u64 fields, not of three: saturate past that.
        let [mul, add] = [u128::saturating_mul, u128::saturating_add];
        let sum = |terms: &[u128]| terms.iter().fold(0, |a, t| add(a, *t));
        let block = sum(&[
            mul(4, add(mul(d, d), d)),
            mul(mul(2, d), f),
            f,
            d,
            mul(4, d),
        ]);
        let total = sum(&[mul(v, d), mul(s, d), mul(l, block), mul(2, d), mul(d, v), v]);
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// Tokens per step.
    pub fn tokens(&self) -> u64 {
        self.batch * self.seq_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECODER: &str = include_str!("../../../repro/models/decoder.toml");

    #[test]
    fn parameters_saturate_instead_of_overflowing() {
        let mut d = Decoder::parse("decoder.toml", DECODER).unwrap();
        let exact = d.params();
        d.d_model = 7_429_491_000_000_000_000;
        assert_eq!(d.params(), u64::MAX);
        d.d_model = 768;
        assert_eq!(d.params(), exact);
    }

    #[test]
    fn the_bundled_decoder_parses() {
        let d = Decoder::parse("decoder.toml", DECODER).unwrap();
        assert_eq!(d.d_model % d.n_heads, 0);
        assert!(d.params() > 10_000_000, "{}", d.params());
    }

    #[test]
    fn heads_that_do_not_divide_the_width_are_refused_at_their_line() {
        let text = DECODER.replace("n_heads = 12", "n_heads = 7");
        let e = Decoder::parse("x.toml", &text).unwrap_err();
        let line = text.lines().position(|l| l.starts_with("n_heads")).unwrap() + 1;
        assert_eq!(e.line(), line);
        assert!(e.to_string().contains("does not divide"), "{e}");
    }

    #[test]
    fn absurd_sizes_are_refused_before_any_work() {
        let text = DECODER.replace("batch = 16", "batch = 18446744073709551615");
        let e = Decoder::parse("x.toml", &text).unwrap_err();
        assert!(e.to_string().contains("`decoder.batch`"), "{e}");
        let e = Decoder::parse(
            "x.toml",
            &DECODER.replace("d_model = 768", "d_model = 4294967292"),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("`decoder.d_model` the parameters"),
            "{e}"
        );
        let d = Decoder::parse("x.toml", DECODER).unwrap();
        assert!(d.with_batch(1 << 40).is_err());
        assert!(d.with_batch(0).is_err());
        assert_eq!(d.with_batch(3).unwrap().tokens(), 3 * d.seq_len);
    }

    #[test]
    fn unknown_keys_and_zeros_name_their_line() {
        let e = Decoder::parse("x.toml", &DECODER.replace("d_ff =", "d_fff =")).unwrap_err();
        assert!(
            matches!(e, RecipeError::Syntax { .. }) && e.line() > 1,
            "{e}"
        );
        let e = Decoder::parse("x.toml", &DECODER.replace("n_layers = 6", "n_layers = 0"));
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("`decoder.n_layers` must be at least 1")
        );
    }
}
