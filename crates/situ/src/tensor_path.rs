//! The tensor path and the silu control, written with burn's own tensor ops.

use burn::tensor::{Tensor, TensorPrimitive, activation};

use crate::counters::TENSOR;
use crate::fused::SituBackend;

/// The ops [`situ_glu_tensor`] issues per call, in order — the same list, with the same names,
/// that `highwater::ffn` puts in its ledger for the tensor path.
pub const TENSOR_PATH_OPS: [&str; 11] = [
    "gate = mid[:, :f]",
    "up = mid[:, f:]",
    "g/c",
    "tanh(g/c)",
    "g' = c·tanh(g/c)",
    "u/c",
    "tanh(u/c)",
    "u' = c·tanh(u/c)",
    "sigmoid(g')",
    "sigmoid(g')·g'",
    "h = sigmoid(g')·g'·u'",
];

/// SiTU GLU, tensor path: `mid [N, 2f]` → `h [N, f]`, eleven burn ops ([`TENSOR_PATH_OPS`]).
///
/// Under autodiff every op records what burn 0.21 keeps for its backward (`tanh` and `sigmoid`
/// keep their input, `mul` keeps both sides, scalar ops and slices keep nothing); under
/// `NoCheckpointing` all of it stays alive until backward.
pub fn situ_glu_tensor<B: SituBackend>(mid: Tensor<B, 2>, cap: f32) -> Tensor<B, 2> {
    TENSOR.entry();
    let [n, width] = mid.dims();
    assert!(
        width.is_multiple_of(2),
        "situ_glu: the gate_up width {width} must be even (2f)"
    );
    let f = width / 2;
    // Identity under autodiff whose backward runs after the whole chain's: the `bwd` counter.
    let mid = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(B::situ_tensor_probe(
        mid.into_primitive().tensor(),
    )));
    let gate = mid.clone().slice([0..n, 0..f]);
    let up = mid.slice([0..n, f..width]);
    let g = gate.div_scalar(cap).tanh().mul_scalar(cap);
    let u = up.div_scalar(cap).tanh().mul_scalar(cap);
    let s = activation::sigmoid(g.clone());
    let h = s.mul(g).mul(u);
    TENSOR.fwd(TENSOR_PATH_OPS.len() as u64);
    h
}

/// The control arm: `activation::silu(mid)` on an `[N, f]` gate_up output (burn 0.21 computes
/// it as `mid · sigmoid(mid)`). Not counted: it is not a SiTU path.
pub fn silu_control<B: burn::tensor::backend::Backend>(mid: Tensor<B, 2>) -> Tensor<B, 2> {
    activation::silu(mid)
}
