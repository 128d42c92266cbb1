//! The models of a [`highwater::network::Network`] file, in burn's own modules, and their
//! training step: models nobody fitted. Nothing in them is transcribed for the simulator; the dry
//! run and the GPU both run exactly this code.
//!
//! Each family is a [`Net`]: built from its shape, it draws a fresh random batch every step (its
//! values change no byte) and returns burn's cross-entropy; [`NetStep`] trains any of them with
//! burn's Adam through its `OptimizerAdaptor`, as `burn-train` drives it. [`with_step`] hands the
//! step of a network file to code generic over the step type (the dry run, the GPU rerun).

use burn::module::{AutodiffModule, Module};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig, Lstm, LstmConfig, PaddingConfig2d, Relu,
};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use highwater::network::{
    Arch, DecoderShape, EncoderShape, LstmShape, MlpShape, Network, ResnetShape, VitShape,
};

use crate::train::{LEARNING_RATE, TrainingStep};

/// A model of one family: built from its shape, it computes the loss of a fresh batch.
pub trait Net<B: Backend>: Module<B> + Sized {
    /// The family's shape (`[resnet]`, …).
    type Shape;
    /// The model, its weights in the persistent pool as a model load puts them.
    fn build(shape: &Self::Shape, device: &B::Device) -> Self;
    /// The loss of `batch` fresh random examples (inputs and labels).
    fn loss(&self, shape: &Self::Shape, batch: usize, device: &B::Device) -> Tensor<B, 1>;
}

fn persistent<B: Backend, M: Send>(device: &B::Device, build: impl Fn() -> M + Send + Sync) -> M {
    B::memory_persistent_allocations(device, (), |()| build())
}

fn cross_entropy<B: Backend>(logits: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let device = logits.device();
    CrossEntropyLossConfig::new()
        .init(&device)
        .forward(logits, targets)
}

fn labels<B: Backend>(shape: [usize; 1], classes: u64, device: &B::Device) -> Tensor<B, 1, Int> {
    Tensor::random(shape, Distribution::Uniform(0.0, classes as f64), device)
}

fn tokens<B: Backend>(
    batch: usize,
    seq: usize,
    vocab: u64,
    device: &B::Device,
) -> Tensor<B, 2, Int> {
    Tensor::random(
        [batch, seq],
        Distribution::Uniform(0.0, vocab as f64),
        device,
    )
}

fn images<B: Backend>(batch: usize, channels: u64, side: u64, device: &B::Device) -> Tensor<B, 4> {
    let [c, s] = [channels, side].map(|n| n as usize);
    Tensor::random([batch, c, s, s], Distribution::Normal(0.0, 1.0), device)
}

/// A decoder-only transformer: embeddings, pre-norm blocks (burn's `TransformerEncoder` under a
/// causal mask is a decoder-only stack), the final norm and the head.
#[derive(Module, Debug)]
pub struct Decoder<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Decoder<B> {
    /// The logits `[batch, seq_len, vocab]` of `tokens` `[batch, seq_len]`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.logits(tokens, true)
    }

    /// The logits, each position attending to those before it (`causal`) or to all of them.
    fn logits(&self, tokens: Tensor<B, 2, Int>, causal: bool) -> Tensor<B, 3> {
        let [batch, seq] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<B, 1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch);
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let input = TransformerEncoderInput::new(x);
        let input = match causal {
            true => input.mask_attn(generate_autoregressive_mask::<B>(batch, seq, &device)),
            false => input,
        };
        self.head
            .forward(self.norm.forward(self.blocks.forward(input)))
    }

    /// Cross-entropy of the logits at every position against fresh random targets.
    fn token_loss(
        &self,
        s: &DecoderShape,
        batch: usize,
        causal: bool,
        device: &B::Device,
    ) -> Tensor<B, 1> {
        let seq = s.seq_len as usize;
        let (input, targets) = (
            tokens::<B>(batch, seq, s.vocab, device),
            tokens::<B>(batch, seq, s.vocab, device),
        );
        let logits = self.logits(input, causal);
        cross_entropy(
            logits.reshape([batch * seq, s.vocab as usize]),
            targets.reshape([batch * seq]),
        )
    }
}

impl<B: Backend> Net<B> for Decoder<B> {
    type Shape = DecoderShape;

    fn build(s: &DecoderShape, device: &B::Device) -> Self {
        let [vocab, seq, d, heads, layers, ff] =
            [s.vocab, s.seq_len, s.d_model, s.n_heads, s.n_layers, s.d_ff].map(|n| n as usize);
        persistent::<B, _>(device, || Decoder {
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

    fn loss(&self, s: &DecoderShape, batch: usize, device: &B::Device) -> Tensor<B, 1> {
        self.token_loss(s, batch, true, device)
    }
}

/// A BERT-style text encoder: the [`Decoder`]'s modules without its causal mask, so every
/// position attends to every other, and a masked-LM head over the vocabulary at every position
/// (as Hugging Face's `BertForMaskedLM` computes it: logits everywhere, the loss read at the
/// masked positions; here every position is a target, which holds the same tensors).
#[derive(Module, Debug)]
pub struct Encoder<B: Backend> {
    stack: Decoder<B>,
}

impl<B: Backend> Net<B> for Encoder<B> {
    type Shape = EncoderShape;

    fn build(s: &EncoderShape, device: &B::Device) -> Self {
        Encoder {
            stack: Decoder::build(s, device),
        }
    }

    fn loss(&self, s: &EncoderShape, batch: usize, device: &B::Device) -> Tensor<B, 1> {
        self.stack.token_loss(s, batch, false, device)
    }
}

/// A convolution and its batch norm.
#[derive(Module, Debug)]
struct ConvNorm<B: Backend> {
    conv: Conv2d<B>,
    norm: BatchNorm<B>,
}

impl<B: Backend> ConvNorm<B> {
    fn new(input: usize, output: usize, kernel: usize, stride: usize, device: &B::Device) -> Self {
        ConvNorm {
            conv: Conv2dConfig::new([input, output], [kernel, kernel])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(
                    kernel / 2,
                    kernel / 2,
                    kernel / 2,
                    kernel / 2,
                ))
                .with_bias(false)
                .init(device),
            norm: BatchNormConfig::new(output).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.norm.forward(self.conv.forward(x))
    }
}

/// A basic residual block: two 3×3 convolutions and the input added back (through a strided
/// 1×1 projection where the shape changes).
#[derive(Module, Debug)]
struct BasicBlock<B: Backend> {
    first: ConvNorm<B>,
    second: ConvNorm<B>,
    projection: Option<ConvNorm<B>>,
    relu: Relu,
}

impl<B: Backend> BasicBlock<B> {
    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let residual = match &self.projection {
            Some(p) => p.forward(x.clone()),
            None => x.clone(),
        };
        let y = self.relu.forward(self.first.forward(x));
        self.relu.forward(self.second.forward(y) + residual)
    }
}

/// A ResNet-style CNN: a 3×3 stem with batch norm and a 2×2 max-pool, stages of basic blocks
/// (each stage after the first doubles the channels and halves the side), global average pool,
/// a linear head.
#[derive(Module, Debug)]
pub struct Resnet<B: Backend> {
    stem: ConvNorm<B>,
    pool: MaxPool2d,
    blocks: Vec<BasicBlock<B>>,
    relu: Relu,
    head: Linear<B>,
}

impl<B: Backend> Net<B> for Resnet<B> {
    type Shape = ResnetShape;

    fn build(s: &ResnetShape, device: &B::Device) -> Self {
        let [c, w, k] = [s.channels, s.width, s.classes].map(|n| n as usize);
        persistent::<B, _>(device, || {
            let mut blocks = Vec::new();
            let mut channels = w;
            for stage in 0..s.stages as usize {
                let out = w << stage;
                for block in 0..s.blocks as usize {
                    let (input, stride) = match (block, stage) {
                        (0, 0) => (channels, 1),
                        (0, _) => (channels, 2),
                        _ => (out, 1),
                    };
                    blocks.push(BasicBlock {
                        first: ConvNorm::new(input, out, 3, stride, device),
                        second: ConvNorm::new(out, out, 3, 1, device),
                        projection: (input != out || stride != 1)
                            .then(|| ConvNorm::new(input, out, 1, stride, device)),
                        relu: Relu::new(),
                    });
                }
                channels = out;
            }
            Resnet {
                stem: ConvNorm::new(c, w, 3, 1, device),
                pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
                blocks,
                relu: Relu::new(),
                head: LinearConfig::new(channels, k).init(device),
            }
        })
    }

    fn loss(&self, s: &ResnetShape, batch: usize, device: &B::Device) -> Tensor<B, 1> {
        let x = images::<B>(batch, s.channels, s.image, device);
        let mut x = self.pool.forward(self.relu.forward(self.stem.forward(x)));
        for block in &self.blocks {
            x = block.forward(x);
        }
        let [b, c, _, _] = x.dims();
        let pooled = x.mean_dim(3).mean_dim(2).reshape([b, c]);
        cross_entropy(
            self.head.forward(pooled),
            labels([batch], s.classes, device),
        )
    }
}

/// A ViT-style encoder: a p×p convolution with stride p makes one token per patch, position
/// embeddings are added, pre-norm transformer blocks, a final norm, the mean over tokens, a
/// linear head.
#[derive(Module, Debug)]
pub struct Vit<B: Backend> {
    patches: Conv2d<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Net<B> for Vit<B> {
    type Shape = VitShape;

    fn build(s: &VitShape, device: &B::Device) -> Self {
        let [c, p, d, heads, layers, ff, k] = [
            s.channels, s.patch, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.classes,
        ]
        .map(|n| n as usize);
        let tokens = (s.image / s.patch).pow(2) as usize;
        persistent::<B, _>(device, || Vit {
            patches: Conv2dConfig::new([c, d], [p, p])
                .with_stride([p, p])
                .init(device),
            positions: EmbeddingConfig::new(tokens, d).init(device),
            blocks: TransformerEncoderConfig::new(d, ff, heads, layers)
                .with_norm_first(true)
                .with_dropout(0.0)
                .init(device),
            norm: LayerNormConfig::new(d).init(device),
            head: LinearConfig::new(d, k).init(device),
        })
    }

    fn loss(&self, s: &VitShape, batch: usize, device: &B::Device) -> Tensor<B, 1> {
        let x = self
            .patches
            .forward(images::<B>(batch, s.channels, s.image, device));
        let [b, d, h, w] = x.dims();
        let x = x.reshape([b, d, h * w]).swap_dims(1, 2);
        let positions = Tensor::<B, 1, Int>::arange(0..(h * w) as i64, device)
            .reshape([1, h * w])
            .repeat_dim(0, b);
        let x = self.blocks.forward(TransformerEncoderInput::new(
            x + self.positions.forward(positions),
        ));
        let pooled = self.norm.forward(x).mean_dim(1).reshape([b, d]);
        cross_entropy(
            self.head.forward(pooled),
            labels([batch], s.classes, device),
        )
    }
}

/// A recurrent language model: an embedding, stacked LSTMs, a head over the vocabulary
/// predicting every position.
#[derive(Module, Debug)]
pub struct LstmModel<B: Backend> {
    tokens: Embedding<B>,
    layers: Vec<Lstm<B>>,
    head: Linear<B>,
}

impl<B: Backend> Net<B> for LstmModel<B> {
    type Shape = LstmShape;

    fn build(s: &LstmShape, device: &B::Device) -> Self {
        let [v, d, h] = [s.vocab, s.d_model, s.hidden].map(|n| n as usize);
        persistent::<B, _>(device, || LstmModel {
            tokens: EmbeddingConfig::new(v, d).init(device),
            layers: (0..s.n_layers)
                .map(|i| LstmConfig::new(if i == 0 { d } else { h }, h, true).init(device))
                .collect(),
            head: LinearConfig::new(h, v).init(device),
        })
    }

    fn loss(&self, s: &LstmShape, batch: usize, device: &B::Device) -> Tensor<B, 1> {
        let seq = s.seq_len as usize;
        let mut x = self
            .tokens
            .forward(tokens::<B>(batch, seq, s.vocab, device));
        for lstm in &self.layers {
            x = lstm.forward(x, None).0;
        }
        let logits = self.head.forward(x);
        cross_entropy(
            logits.reshape([batch * seq, s.vocab as usize]),
            tokens::<B>(batch, seq, s.vocab, device).reshape([batch * seq]),
        )
    }
}

/// A multi-layer perceptron: linear layers with ReLU between them, a linear head.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
    relu: Relu,
    head: Linear<B>,
}

impl<B: Backend> Net<B> for Mlp<B> {
    type Shape = MlpShape;

    fn build(s: &MlpShape, device: &B::Device) -> Self {
        let [i, h, k] = [s.inputs, s.hidden, s.classes].map(|n| n as usize);
        persistent::<B, _>(device, || Mlp {
            layers: (0..s.n_layers)
                .map(|l| LinearConfig::new(if l == 0 { i } else { h }, h).init(device))
                .collect(),
            relu: Relu::new(),
            head: LinearConfig::new(h, k).init(device),
        })
    }

    fn loss(&self, s: &MlpShape, batch: usize, device: &B::Device) -> Tensor<B, 1> {
        let mut x = Tensor::random(
            [batch, s.inputs as usize],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        for layer in &self.layers {
            x = self.relu.forward(layer.forward(x));
        }
        cross_entropy(self.head.forward(x), labels([batch], s.classes, device))
    }
}

/// One training step of a network: a fresh batch, cross-entropy, backward, Adam.
pub struct NetStep<B: AutodiffBackend, M: Net<B> + AutodiffModule<B>> {
    shape: M::Shape,
    batch: usize,
    device: B::Device,
    /// Taken out by the optimizer and put back (burn's optimizers consume the model).
    model: Option<M>,
    optimizer: OptimizerAdaptor<Adam, M, B>,
}

impl<B: AutodiffBackend, M: Net<B> + AutodiffModule<B>> NetStep<B, M> {
    /// A fresh model of `shape` on `device`, with Adam's state empty.
    pub fn new(shape: &M::Shape, batch: u64, device: &B::Device) -> Self
    where
        M::Shape: Clone,
    {
        NetStep {
            shape: shape.clone(),
            batch: batch as usize,
            device: device.clone(),
            model: Some(M::build(shape, device)),
            optimizer: AdamConfig::new().init(),
        }
    }

    /// The model as trained so far.
    pub fn model(&self) -> &M {
        self.model
            .as_ref()
            .expect("the model is back after every step")
    }
}

impl<B: AutodiffBackend, M: Net<B> + AutodiffModule<B>> TrainingStep<B> for NetStep<B, M> {
    fn forward(&mut self) -> Tensor<B, 1> {
        self.model().loss(&self.shape, self.batch, &self.device)
    }

    fn optimize(&mut self, grads: B::Gradients) {
        let model = self
            .model
            .take()
            .expect("the model is back after every step");
        let grads = GradientsParams::from_grads(grads, &model);
        self.model = Some(self.optimizer.step(LEARNING_RATE, model, grads));
    }

    fn parameters(&self) -> Option<usize> {
        Some(self.model().valid().num_params())
    }
}

/// What trains a network's step: code generic over the step type (the dry run, the GPU rerun).
pub trait WithStep<B: AutodiffBackend> {
    /// What it returns.
    type Output;
    /// Trains the step `build` makes on a device.
    fn train<S: TrainingStep<B>>(self, build: impl FnOnce(&B::Device) -> S) -> Self::Output;
}

/// Hands `network`'s training step (its family's [`NetStep`]) to `with`.
pub fn with_step<B: AutodiffBackend, W: WithStep<B>>(network: &Network, with: W) -> W::Output {
    let batch = network.batch;
    match &network.arch {
        Arch::Decoder(s) => with.train(|d| NetStep::<B, Decoder<B>>::new(s, batch, d)),
        Arch::Encoder(s) => with.train(|d| NetStep::<B, Encoder<B>>::new(s, batch, d)),
        Arch::Resnet(s) => with.train(|d| NetStep::<B, Resnet<B>>::new(s, batch, d)),
        Arch::Vit(s) => with.train(|d| NetStep::<B, Vit<B>>::new(s, batch, d)),
        Arch::Lstm(s) => with.train(|d| NetStep::<B, LstmModel<B>>::new(s, batch, d)),
        Arch::Mlp(s) => with.train(|d| NetStep::<B, Mlp<B>>::new(s, batch, d)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::{NoPool, Trainer};
    use burn::backend::{Autodiff, NdArray};

    type B = Autodiff<NdArray<f32>>;

    /// Every family at a toy size: `[family]` lines, the batch, the training table.
    fn tiny(table: &str) -> Network {
        let text = format!(
            "{table}\nbatch = 3\n[training]\nbackend = \"cube\"\ncheckpointing = \"none\"\n\
             steps = 3\nseed = 1\n"
        );
        Network::parse("tiny.toml", &text).unwrap()
    }

    /// Trains `network` three steps on burn-ndarray; checks its parameters against the file's
    /// count and that its loss starts near ln(classes) and stays finite.
    struct Check;

    impl WithStep<B> for Check {
        type Output = (usize, Vec<f64>);
        fn train<S: TrainingStep<B>>(
            self,
            build: impl FnOnce(&burn::backend::ndarray::NdArrayDevice) -> S,
        ) -> Self::Output {
            let device = Default::default();
            let mut trainer = Trainer::new(build(&device));
            let losses = (0..3)
                .map(|_| trainer.step(&NoPool, true).unwrap().loss.unwrap())
                .collect();
            (trainer.program().parameters().unwrap(), losses)
        }
    }

    #[test]
    fn every_family_has_the_parameters_its_file_counts_and_learns() {
        for (table, classes) in [
            (
                "[decoder]\nvocab = 50\nseq_len = 8\nd_model = 24\nn_heads = 4\nn_layers = 2\nd_ff = 48",
                50,
            ),
            (
                "[encoder]\nvocab = 50\nseq_len = 8\nd_model = 24\nn_heads = 4\nn_layers = 2\nd_ff = 48",
                50,
            ),
            (
                "[resnet]\nimage = 16\nchannels = 3\nwidth = 4\nstages = 3\nblocks = 2\nclasses = 10",
                10,
            ),
            (
                "[vit]\nimage = 16\nchannels = 3\npatch = 4\nd_model = 24\nn_heads = 4\nn_layers = 2\nd_ff = 48\nclasses = 10",
                10,
            ),
            (
                "[lstm]\nvocab = 50\nseq_len = 6\nd_model = 12\nhidden = 16\nn_layers = 2",
                50,
            ),
            (
                "[mlp]\ninputs = 20\nhidden = 32\nn_layers = 2\nclasses = 10",
                10,
            ),
        ] {
            let network = tiny(table);
            let (params, losses) = with_step::<B, _>(&network, Check);
            assert_eq!(params as u64, network.arch.params(), "{table}");
            // Random targets: the loss starts near ln(classes) and stays finite.
            let uniform = (classes as f64).ln();
            assert!(
                losses
                    .iter()
                    .all(|l| l.is_finite() && (l - uniform).abs() < 2.0),
                "{table}: {losses:?}"
            );
        }
    }
}
