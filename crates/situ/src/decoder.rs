//! The decoder-only transformer of a [`highwater::decoder::Decoder`] recipe, in burn's own
//! modules, and its training step: the model nobody fitted. Nothing in it is transcribed for
//! the simulator; the dry run and the GPU both run exactly this code.
//!
//! Tokens and targets are fresh random ids every step (their values change no byte); the loss
//! is burn's cross-entropy over every position; the optimizer is burn's Adam through its
//! `OptimizerAdaptor`, as `burn-train` drives it.

use burn::module::{AutodiffModule, Module};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use highwater::decoder::Decoder as Recipe;

use crate::train::{LEARNING_RATE, TrainingStep};

/// The model: embeddings, pre-norm blocks (burn's `TransformerEncoder` under a causal mask is
/// a decoder-only stack), the final norm and the head.
#[derive(Module, Debug)]
pub struct Decoder<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Decoder<B> {
    /// The model of `recipe`, its weights in the persistent pool as a model load puts them.
    pub fn new(recipe: &Recipe, device: &B::Device) -> Self {
        let [vocab, seq, d, heads, layers, ff] = [
            recipe.vocab,
            recipe.seq_len,
            recipe.d_model,
            recipe.n_heads,
            recipe.n_layers,
            recipe.d_ff,
        ]
        .map(|n| n as usize);
        B::memory_persistent_allocations(device, (), |()| Decoder {
            tokens: EmbeddingConfig::new(vocab, d).init(device),
            positions: EmbeddingConfig::new(seq, d).init(device),
            blocks: TransformerEncoderConfig::new(d, ff, heads, layers)
                .with_norm_first(true)
                .with_dropout(0.0)
                .init(device),
            norm: LayerNormConfig::new(d).init(device),
            head: LinearConfig::new(d, vocab).init(device),
        })
    }

    /// The logits `[batch, seq_len, vocab]` of `tokens` `[batch, seq_len]`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [batch, seq] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<B, 1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch);
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let mask = generate_autoregressive_mask::<B>(batch, seq, &device);
        let x = self
            .blocks
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        self.head.forward(self.norm.forward(x))
    }
}

/// One training step of the decoder: a fresh batch, cross-entropy, backward, Adam.
pub struct DecoderStep<B: AutodiffBackend> {
    recipe: Recipe,
    device: B::Device,
    /// Taken out by the optimizer and put back (burn's optimizers consume the model).
    model: Option<Decoder<B>>,
    optimizer: OptimizerAdaptor<Adam, Decoder<B>, B>,
}

impl<B: AutodiffBackend> DecoderStep<B> {
    /// A fresh decoder for `recipe` on `device`, with Adam's state empty.
    pub fn new(recipe: &Recipe, device: &B::Device) -> Self {
        DecoderStep {
            recipe: recipe.clone(),
            device: device.clone(),
            model: Some(Decoder::new(recipe, device)),
            optimizer: AdamConfig::new().init(),
        }
    }

    /// The model as trained so far.
    pub fn model(&self) -> &Decoder<B> {
        self.model
            .as_ref()
            .expect("the model is back after every step")
    }
}

impl<B: AutodiffBackend> TrainingStep<B> for DecoderStep<B> {
    fn forward(&mut self) -> Tensor<B, 1> {
        let r = &self.recipe;
        let (batch, seq, vocab) = (r.batch as usize, r.seq_len as usize, r.vocab as f64);
        let ids = || {
            Tensor::<B, 2, Int>::random(
                [batch, seq],
                Distribution::Uniform(0.0, vocab),
                &self.device,
            )
        };
        let (tokens, targets) = (ids(), ids());
        let logits = self.model().forward(tokens);
        let loss = CrossEntropyLossConfig::new().init(&self.device);
        loss.forward(
            logits.reshape([batch * seq, r.vocab as usize]),
            targets.reshape([batch * seq]),
        )
    }

    fn optimize(&mut self, grads: B::Gradients) {
        let model = self
            .model
            .take()
            .expect("the model is back after every step");
        let grads = GradientsParams::from_grads(grads, &model);
        self.model = Some(self.optimizer.step(LEARNING_RATE, model, grads));
    }
}

/// The decoder's parameters as burn counts them (a check on [`Recipe::params`]).
pub fn parameters<B: AutodiffBackend>(model: &Decoder<B>) -> usize {
    model.valid().num_params()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::{NoPool, Trainer};
    use burn::backend::{Autodiff, NdArray};

    type B = Autodiff<NdArray<f32>>;

    fn tiny() -> Recipe {
        let text = include_str!("../../../repro/models/decoder.toml")
            .replace("vocab = 32000", "vocab = 50")
            .replace("seq_len = 256", "seq_len = 8")
            .replace("d_model = 768", "d_model = 24")
            .replace("n_heads = 12", "n_heads = 4")
            .replace("n_layers = 6", "n_layers = 2")
            .replace("d_ff = 3072", "d_ff = 48")
            .replace("batch = 16", "batch = 3");
        Recipe::parse("tiny.toml", &text).unwrap()
    }

    #[test]
    fn the_decoder_has_the_parameters_its_recipe_counts_and_learns() {
        let recipe = tiny();
        let device = Default::default();
        let mut trainer = Trainer::new(DecoderStep::<B>::new(&recipe, &device));
        assert_eq!(
            parameters(trainer.program().model()) as u64,
            recipe.params()
        );
        let losses: Vec<f64> = (0..3)
            .map(|_| trainer.step(&NoPool, true).unwrap().loss.unwrap())
            .collect();
        // Random targets: the loss starts near ln(vocab) and stays finite.
        let uniform = (recipe.vocab as f64).ln();
        assert!(
            losses
                .iter()
                .all(|l| l.is_finite() && (l - uniform).abs() < 1.5),
            "{losses:?}"
        );
    }
}
