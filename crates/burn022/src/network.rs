//! The models of a [`highwater::network::Network`] file on burn 0.22, family for family the
//! modules `situ::network` builds on burn 0.21 (a test of each crate counts the same parameters
//! the file does, and `tests/same_architecture.rs` holds the two to the same buffers per step).
//!
//! burn 0.22's tensors carry no backend type: a [`Device`] says where they live and whether
//! autodiff tracks them, so one model type serves every device.

use burn::module::Module;
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
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Distribution, Int, Tensor};
use highwater::network::{
    Arch, DecoderShape, EncoderShape, LstmShape, MlpShape, Network, ResnetShape, VitShape,
};

use crate::train::{Gradients, TrainingStep};

/// Learning rate of Adam (what it is changes no byte).
pub const LEARNING_RATE: f64 = 1e-4;

/// A model of one family: built from its shape, it computes the loss of a fresh batch.
pub trait Net: Module + Sized + 'static {
    /// The family's shape (`[resnet]`, …).
    type Shape: Clone;
    /// The model, its weights in the persistent pool as a model load puts them.
    fn build(shape: &Self::Shape, device: &Device) -> Self;
    /// The loss of `batch` fresh random examples (inputs and labels).
    fn loss(&self, shape: &Self::Shape, batch: usize, device: &Device) -> Tensor<1>;
}

fn persistent<M: Send>(device: &Device, build: impl Fn() -> M + Send + Sync) -> M {
    device.memory_persistent_allocations((), |()| build())
}

fn cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let device = logits.device();
    CrossEntropyLossConfig::new()
        .init(&device)
        .forward(logits, targets)
}

fn labels(shape: [usize; 1], classes: u64, device: &Device) -> Tensor<1, Int> {
    Tensor::random(shape, Distribution::Uniform(0.0, classes as f64), device)
}

fn tokens(batch: usize, seq: usize, vocab: u64, device: &Device) -> Tensor<2, Int> {
    Tensor::random(
        [batch, seq],
        Distribution::Uniform(0.0, vocab as f64),
        device,
    )
}

fn images(batch: usize, channels: u64, side: u64, device: &Device) -> Tensor<4> {
    let [c, s] = [channels, side].map(|n| n as usize);
    Tensor::random([batch, c, s, s], Distribution::Normal(0.0, 1.0), device)
}

/// A decoder-only transformer: embeddings, pre-norm blocks under a causal mask, the final norm
/// and the head.
#[derive(Module, Debug)]
pub struct Decoder {
    tokens: Embedding,
    positions: Embedding,
    blocks: TransformerEncoder,
    norm: LayerNorm,
    head: Linear,
}

impl Decoder {
    /// The logits, each position attending to those before it (`causal`) or to all of them.
    fn logits(&self, tokens: Tensor<2, Int>, causal: bool) -> Tensor<3> {
        let [batch, seq] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch);
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let input = TransformerEncoderInput::new(x);
        let input = match causal {
            true => input.mask_attn(generate_autoregressive_mask(batch, seq, &device)),
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
        device: &Device,
    ) -> Tensor<1> {
        let seq = s.seq_len as usize;
        let (input, targets) = (
            tokens(batch, seq, s.vocab, device),
            tokens(batch, seq, s.vocab, device),
        );
        let logits = self.logits(input, causal);
        cross_entropy(
            logits.reshape([batch * seq, s.vocab as usize]),
            targets.reshape([batch * seq]),
        )
    }
}

impl Net for Decoder {
    type Shape = DecoderShape;

    fn build(s: &DecoderShape, device: &Device) -> Self {
        let [vocab, seq, d, heads, layers, ff] =
            [s.vocab, s.seq_len, s.d_model, s.n_heads, s.n_layers, s.d_ff].map(|n| n as usize);
        persistent(device, || Decoder {
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

    fn loss(&self, s: &DecoderShape, batch: usize, device: &Device) -> Tensor<1> {
        self.token_loss(s, batch, true, device)
    }
}

/// A BERT-style text encoder: the [`Decoder`]'s modules without its causal mask, a masked-LM
/// head at every position.
#[derive(Module, Debug)]
pub struct Encoder {
    stack: Decoder,
}

impl Net for Encoder {
    type Shape = EncoderShape;

    fn build(s: &EncoderShape, device: &Device) -> Self {
        Encoder {
            stack: Decoder::build(s, device),
        }
    }

    fn loss(&self, s: &EncoderShape, batch: usize, device: &Device) -> Tensor<1> {
        self.stack.token_loss(s, batch, false, device)
    }
}

/// A convolution and its batch norm.
#[derive(Module, Debug)]
struct ConvNorm {
    conv: Conv2d,
    norm: BatchNorm,
}

impl ConvNorm {
    fn new(input: usize, output: usize, kernel: usize, stride: usize, device: &Device) -> Self {
        let pad = kernel / 2;
        ConvNorm {
            conv: Conv2dConfig::new([input, output], [kernel, kernel])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                .with_bias(false)
                .init(device),
            norm: BatchNormConfig::new(output).init(device),
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        self.norm.forward(self.conv.forward(x))
    }
}

/// A basic residual block: two 3×3 convolutions and the input added back (through a strided
/// 1×1 projection where the shape changes).
#[derive(Module, Debug)]
struct BasicBlock {
    first: ConvNorm,
    second: ConvNorm,
    projection: Option<ConvNorm>,
    relu: Relu,
}

impl BasicBlock {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let residual = match &self.projection {
            Some(p) => p.forward(x.clone()),
            None => x.clone(),
        };
        let y = self.relu.forward(self.first.forward(x));
        self.relu.forward(self.second.forward(y) + residual)
    }
}

/// A ResNet-style CNN: a 3×3 stem with batch norm and a 2×2 max-pool, stages of basic blocks
/// (each after the first doubles the channels and halves the side), global average pool, a
/// linear head.
#[derive(Module, Debug)]
pub struct Resnet {
    stem: ConvNorm,
    pool: MaxPool2d,
    blocks: Vec<BasicBlock>,
    relu: Relu,
    head: Linear,
}

impl Net for Resnet {
    type Shape = ResnetShape;

    fn build(s: &ResnetShape, device: &Device) -> Self {
        let [c, w, k] = [s.channels, s.width, s.classes].map(|n| n as usize);
        persistent(device, || {
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

    fn loss(&self, s: &ResnetShape, batch: usize, device: &Device) -> Tensor<1> {
        let x = images(batch, s.channels, s.image, device);
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
/// embeddings, pre-norm transformer blocks, a final norm, the mean over tokens, a linear head.
#[derive(Module, Debug)]
pub struct Vit {
    patches: Conv2d,
    positions: Embedding,
    blocks: TransformerEncoder,
    norm: LayerNorm,
    head: Linear,
}

impl Net for Vit {
    type Shape = VitShape;

    fn build(s: &VitShape, device: &Device) -> Self {
        let [c, p, d, heads, layers, ff, k] = [
            s.channels, s.patch, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.classes,
        ]
        .map(|n| n as usize);
        let tokens = (s.image / s.patch).pow(2) as usize;
        persistent(device, || Vit {
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

    fn loss(&self, s: &VitShape, batch: usize, device: &Device) -> Tensor<1> {
        let x = self
            .patches
            .forward(images(batch, s.channels, s.image, device));
        let [b, d, h, w] = x.dims();
        let x = x.reshape([b, d, h * w]).swap_dims(1, 2);
        let positions = Tensor::<1, Int>::arange(0..(h * w) as i64, device)
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
pub struct LstmModel {
    tokens: Embedding,
    layers: Vec<Lstm>,
    head: Linear,
}

impl Net for LstmModel {
    type Shape = LstmShape;

    fn build(s: &LstmShape, device: &Device) -> Self {
        let [v, d, h] = [s.vocab, s.d_model, s.hidden].map(|n| n as usize);
        persistent(device, || LstmModel {
            tokens: EmbeddingConfig::new(v, d).init(device),
            layers: (0..s.n_layers)
                .map(|i| LstmConfig::new(if i == 0 { d } else { h }, h, true).init(device))
                .collect(),
            head: LinearConfig::new(h, v).init(device),
        })
    }

    fn loss(&self, s: &LstmShape, batch: usize, device: &Device) -> Tensor<1> {
        let seq = s.seq_len as usize;
        let mut x = self.tokens.forward(tokens(batch, seq, s.vocab, device));
        for lstm in &self.layers {
            x = lstm.forward(x, None).0;
        }
        let logits = self.head.forward(x);
        cross_entropy(
            logits.reshape([batch * seq, s.vocab as usize]),
            tokens(batch, seq, s.vocab, device).reshape([batch * seq]),
        )
    }
}

/// A multi-layer perceptron: linear layers with ReLU between them, a linear head.
#[derive(Module, Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
    relu: Relu,
    head: Linear,
}

impl Net for Mlp {
    type Shape = MlpShape;

    fn build(s: &MlpShape, device: &Device) -> Self {
        let [i, h, k] = [s.inputs, s.hidden, s.classes].map(|n| n as usize);
        persistent(device, || Mlp {
            layers: (0..s.n_layers)
                .map(|l| LinearConfig::new(if l == 0 { i } else { h }, h).init(device))
                .collect(),
            relu: Relu::new(),
            head: LinearConfig::new(h, k).init(device),
        })
    }

    fn loss(&self, s: &MlpShape, batch: usize, device: &Device) -> Tensor<1> {
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
pub struct NetStep<M: Net> {
    shape: M::Shape,
    batch: usize,
    device: Device,
    /// Taken out by the optimizer and put back (burn's optimizers consume the model).
    model: Option<M>,
    optimizer: ModuleOptimizer,
}

impl<M: Net> NetStep<M> {
    /// A fresh model of `shape` on `device` (an autodiff device), with Adam's state empty.
    pub fn new(shape: &M::Shape, batch: u64, device: &Device) -> Self {
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

impl<M: Net> TrainingStep for NetStep<M> {
    fn forward(&mut self) -> Tensor<1> {
        self.model().loss(&self.shape, self.batch, &self.device)
    }

    fn optimize(&mut self, grads: Gradients) {
        let model = self
            .model
            .take()
            .expect("the model is back after every step");
        let grads = GradientsParams::from_grads(grads, &model);
        self.model = Some(self.optimizer.step(LEARNING_RATE, model, grads));
    }

    fn parameters(&self) -> Option<usize> {
        Some(self.model().num_params())
    }
}

/// `network`'s training step (its family's [`NetStep`]) on `device`.
pub fn network_step(network: &Network, device: &Device) -> Box<dyn TrainingStep> {
    let batch = network.batch;
    match &network.arch {
        Arch::Decoder(s) => Box::new(NetStep::<Decoder>::new(s, batch, device)),
        Arch::Encoder(s) => Box::new(NetStep::<Encoder>::new(s, batch, device)),
        Arch::Resnet(s) => Box::new(NetStep::<Resnet>::new(s, batch, device)),
        Arch::Vit(s) => Box::new(NetStep::<Vit>::new(s, batch, device)),
        Arch::Lstm(s) => Box::new(NetStep::<LstmModel>::new(s, batch, device)),
        Arch::Mlp(s) => Box::new(NetStep::<Mlp>::new(s, batch, device)),
    }
}
