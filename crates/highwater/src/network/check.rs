//! A network's size checks: unbuildable shapes, tensors too large, the parameter count.

use crate::limits::MAX_TENSOR_BYTES;

use super::{Arch, Network};

impl Network {
    /// What is too large at `batch` (a zero batch counts), and why.
    pub(super) fn oversize(&self, batch: u64) -> Option<String> {
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
}

impl Arch {
    /// A shape that cannot be built: the field, its key and why.
    pub(super) fn inconsistency(&self) -> Option<(&'static str, &'static str, String)> {
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
