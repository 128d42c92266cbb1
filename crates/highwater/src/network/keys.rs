//! Every key a network file may hold, described once: what it counts, whether it must be
//! written, what it may be and what it builds. The book's reference page *Model files*
//! ([`FORMAT_PAGE`](super::FORMAT_PAGE)) prints its tables from [`KEYS`] and [`FAMILY_DOCS`],
//! and the parser names its errors' fields from them; the tests hold both to what the parser
//! accepts (the keys serde lists, the defaults it fills in, the names it reads), so the page
//! cannot drift from the code.

/// Whether a key must be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The file must say it.
    Required,
    /// It may be left out; this is its value then, as TOML writes it.
    Default(&'static str),
}

/// What a key's value may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// A whole number at least 1, and what else it must satisfy (empty: nothing else).
    Count(&'static str),
    /// Any whole number a `u64` holds.
    Any,
    /// One of these names, as TOML strings.
    OneOf(&'static [&'static str]),
}

/// One key of a network file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// `table.key`, as errors name it: `vit.patch`, `training.backend`.
    pub field: &'static str,
    /// What it counts (`pixels per side`); a name's keys say what they name.
    pub unit: &'static str,
    /// Required, or its default.
    pub written: Written,
    /// The values accepted.
    pub allowed: Allowed,
    /// What the model or its training is built from it.
    pub sets: &'static str,
    /// What `highwater fit` and `highwater rerun --model` do with it beyond building the model
    /// from it as written; empty when nothing more.
    pub commands: &'static str,
}

impl Key {
    /// The table it sits in: `vit`, `training`.
    pub fn table(&self) -> &'static str {
        self.field.split_once('.').map_or(self.field, |(t, _)| t)
    }

    /// The key as written in its table: `patch`, `backend`.
    pub fn name(&self) -> &'static str {
        self.field.split_once('.').map_or(self.field, |(_, k)| k)
    }
}

/// A family: its table, what `situ::network` builds of burn's modules for it, and what one
/// example of its batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The architecture table's name (one of [`FAMILIES`](super::FAMILIES)).
    pub table: &'static str,
    /// The model, in burn 0.21's modules.
    pub builds: &'static str,
    /// What `batch` counts.
    pub example: &'static str,
}

/// The families, in [`FAMILIES`](super::FAMILIES)' order. Every one draws fresh random inputs
/// and labels each step (their values change no byte), and trains with burn's
/// `CrossEntropyLoss` and `Adam`.
pub const FAMILY_DOCS: [Family; 6] = [
    Family {
        table: "decoder",
        builds: "a decoder-only transformer: token and position `Embedding`s, pre-norm \
                 `TransformerEncoder` blocks (`MultiHeadAttention`, `LayerNorm`, a GELU MLP, no \
                 dropout) under a causal mask, a final `LayerNorm`, a `Linear` head over the \
                 vocabulary at every position",
        example: "sequences",
    },
    Family {
        table: "encoder",
        builds: "a BERT-style text encoder: the decoder's modules without the causal mask (every \
                 position attends to every other), a masked-LM head: logits over the vocabulary \
                 at every position",
        example: "sequences",
    },
    Family {
        table: "resnet",
        builds: "a ResNet-style CNN: a 3×3 `Conv2d` stem with `BatchNorm` and `Relu`, a 2×2 \
                 `MaxPool2d`, stages of basic blocks (two 3×3 `Conv2d` with `BatchNorm`, a \
                 residual add, a strided 1×1 projection where the shape changes), global \
                 average pooling, a `Linear` head",
        example: "images",
    },
    Family {
        table: "vit",
        builds: "a ViT-style encoder: a `Conv2d` whose kernel and stride are the patch (one token \
                 per patch), a position `Embedding`, pre-norm `TransformerEncoder` blocks, a \
                 final `LayerNorm`, the mean over tokens, a `Linear` head",
        example: "images",
    },
    Family {
        table: "lstm",
        builds: "a recurrent language model: a token `Embedding`, stacked `Lstm`s (with biases), \
                 a `Linear` head over the vocabulary at every position",
        example: "sequences",
    },
    Family {
        table: "mlp",
        builds: "a multi-layer perceptron: `Linear` layers with `Relu` between them, a `Linear` \
                 head",
        example: "feature vectors",
    },
];

const HEADS: &str = "divides `d_model`";
const BATCH: &str = "no tensor of the step above `limits::MAX_TENSOR_BYTES`";
const BATCH_COMMANDS: &str = "`--batch N` replaces it; `fit --largest-batch` ignores it and \
                              searches from 1, doubling up to `limits::MAX_SEARCH_BATCH`, then \
                              bisecting";

/// A size key: required, a count.
const fn size(field: &'static str, unit: &'static str, sets: &'static str) -> Key {
    rule(field, unit, "", sets)
}

/// A size key with a rule beyond being at least 1.
const fn rule(
    field: &'static str,
    unit: &'static str,
    rule: &'static str,
    sets: &'static str,
) -> Key {
    Key {
        field,
        unit,
        written: Written::Required,
        allowed: Allowed::Count(rule),
        sets,
        commands: "",
    }
}

/// A family's `batch`.
const fn batch(field: &'static str, unit: &'static str) -> Key {
    Key {
        field,
        unit,
        written: Written::Required,
        allowed: Allowed::Count(BATCH),
        sets: "the examples of one step",
        commands: BATCH_COMMANDS,
    }
}

/// The decoder's keys, under `[decoder]` or `[encoder]`.
macro_rules! transformer {
    ($t:literal) => {
        [
            size(
                concat!($t, ".vocab"),
                "tokens",
                "the token `Embedding`'s rows and the head's outputs",
            ),
            size(
                concat!($t, ".seq_len"),
                "tokens per sequence",
                "the position `Embedding`'s rows; every sequence is this long",
            ),
            size(
                concat!($t, ".d_model"),
                "elements per token",
                "the residual stream's width",
            ),
            rule(
                concat!($t, ".n_heads"),
                "heads",
                HEADS,
                "attention heads per block",
            ),
            size(concat!($t, ".n_layers"), "blocks", "transformer blocks"),
            size(
                concat!($t, ".d_ff"),
                "elements per token",
                "each block's MLP hidden width",
            ),
            batch(concat!($t, ".batch"), "sequences"),
        ]
    };
}

const DECODER: [Key; 7] = transformer!("decoder");
const ENCODER: [Key; 7] = transformer!("encoder");

const RESNET: [Key; 7] = [
    rule(
        "resnet.image",
        "pixels per side",
        "a multiple of 2^stages",
        "the square input images' side",
    ),
    size(
        "resnet.channels",
        "channels",
        "the input's channels (3 for RGB)",
    ),
    size(
        "resnet.width",
        "channels",
        "the stem's and the first stage's channels; each later stage doubles them",
    ),
    rule(
        "resnet.stages",
        "stages",
        "`image` a multiple of 2^stages",
        "stages of basic blocks; the stem's pool and each stage after the first halve the side",
    ),
    size(
        "resnet.blocks",
        "blocks per stage",
        "basic blocks per stage",
    ),
    size("resnet.classes", "classes", "the head's outputs"),
    batch("resnet.batch", "images"),
];

const VIT: [Key; 9] = [
    size(
        "vit.image",
        "pixels per side",
        "the square input images' side",
    ),
    size("vit.channels", "channels", "the input's channels"),
    rule(
        "vit.patch",
        "pixels per side",
        "divides `image`",
        "a patch's side; a step has (image / patch)² tokens per image",
    ),
    size(
        "vit.d_model",
        "elements per token",
        "the residual stream's width",
    ),
    rule("vit.n_heads", "heads", HEADS, "attention heads per block"),
    size("vit.n_layers", "blocks", "transformer blocks"),
    size(
        "vit.d_ff",
        "elements per token",
        "each block's MLP hidden width",
    ),
    size("vit.classes", "classes", "the head's outputs"),
    batch("vit.batch", "images"),
];

const LSTM: [Key; 6] = [
    size(
        "lstm.vocab",
        "tokens",
        "the token `Embedding`'s rows and the head's outputs",
    ),
    size(
        "lstm.seq_len",
        "tokens per sequence",
        "the steps each `Lstm` walks, one position at a time",
    ),
    size(
        "lstm.d_model",
        "elements per token",
        "the embedding's width: the first `Lstm`'s input",
    ),
    size(
        "lstm.hidden",
        "elements per token",
        "each `Lstm`'s hidden state, and the head's input",
    ),
    size("lstm.n_layers", "LSTMs", "`Lstm`s stacked"),
    batch("lstm.batch", "sequences"),
];

const MLP: [Key; 5] = [
    size(
        "mlp.inputs",
        "elements per vector",
        "the first layer's input",
    ),
    size(
        "mlp.hidden",
        "elements per vector",
        "every hidden layer's width",
    ),
    size(
        "mlp.n_layers",
        "layers",
        "hidden layers (`Linear` and `Relu`)",
    ),
    size("mlp.classes", "classes", "the head's outputs"),
    batch("mlp.batch", "feature vectors"),
];

const TRAINING: [Key; 5] = [
    Key {
        field: "training.backend",
        unit: "a burn-cubecl backend",
        written: Written::Required,
        allowed: Allowed::OneOf(&["cube", "fusion"]),
        sets: "`cube`: `CubeBackend`, every op writes its output; `fusion`: burn-cuda's default, \
               burn-fusion over it",
        commands: "`--backend` replaces it",
    },
    Key {
        field: "training.checkpointing",
        unit: "burn's checkpoint strategy",
        written: Written::Required,
        allowed: Allowed::OneOf(&["none", "balanced"]),
        sets: "`NoCheckpointing` or `BalancedCheckpointing` under `Autodiff`",
        commands: "`--checkpointing` replaces it",
    },
    Key {
        field: "training.precision",
        unit: "a float type",
        written: Written::Default("\"f32\""),
        allowed: Allowed::OneOf(&["f32", "bf16"]),
        sets: "the float type of weights, activations and Adam's state",
        commands: "`fit` trains it as written; `rerun --precision` replaces it",
    },
    Key {
        field: "training.steps",
        unit: "steps",
        written: Written::Required,
        allowed: Allowed::Count(""),
        sets: "the training steps the file asks for",
        commands: "checked, not used: `fit` and `rerun` train as many steps as their `--steps` \
                   says",
    },
    Key {
        field: "training.seed",
        unit: "a seed",
        written: Written::Required,
        allowed: Allowed::Any,
        sets: "the seed of the weights and the batches",
        commands: "checked, not used: `fit` and `rerun` seed from their `--seed`",
    },
];

/// Every key of every table, family by family in [`FAMILY_DOCS`]' order, then `[training]`.
pub const KEYS: [Key; 46] = {
    let tables: [&[Key]; 7] = [&DECODER, &ENCODER, &RESNET, &VIT, &LSTM, &MLP, &TRAINING];
    let mut keys = [TRAINING[0]; 46];
    let (mut at, mut t) = (0, 0);
    while t < tables.len() {
        let mut k = 0;
        while k < tables[t].len() {
            keys[at] = tables[t][k];
            at += 1;
            k += 1;
        }
        t += 1;
    }
    assert!(at == keys.len(), "KEYS' length is the tables' keys");
    keys
};

/// The keys of one table (`vit`, `training`), in the order the page lists them.
pub fn keys_of(table: &str) -> impl Iterator<Item = &'static Key> {
    KEYS.iter().filter(move |k| k.table() == table)
}

/// The key `name` of `table`, if the format has one.
pub fn key(table: &str, name: &str) -> Option<&'static Key> {
    keys_of(table).find(|k| k.name() == name)
}
