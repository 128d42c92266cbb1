//! The fused path: one op forward, one op backward, registered with burn-autodiff as a single
//! custom operation (the pattern of burn 0.21's `examples/custom-cubecl-kernel`).
//!
//! **Declared property: compute-bound.** The op saves its *input* `mid` (a second handle on the
//! buffer the `gate_up` matmul already wrote, no copy) through `prep.checkpoint(&mid)`, and
//! nothing else: not its output, no intermediate. Backward recomputes `g'`, `u'`, `sigmoid(g')`
//! from `mid` in registers. Compute-bound means `BalancedCheckpointing` never tries to re-run it
//! during backward (its output is consumed by the `down` matmul, which keeps it as its own
//! input anyway); memory-bound would buy nothing, since the op's only saved tensor is its input,
//! and recomputing `h` for the `down` matmul's backward would cost a launch for no memory.
//! Under `NoCheckpointing` and `BalancedCheckpointing` alike the op therefore holds exactly one
//! `[N, 2f]` handle (`mid`) until backward and allocates one `[N, f]` output; its backward
//! allocates the `[N, 2f]` gradient.

use burn::backend::NdArray;
use burn::backend::autodiff::{
    Autodiff, NodeId,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use crate::counters::{FUSED, TENSOR};
use crate::reference;

/// A backend that can run the fused SiTU op.
pub trait SituBackend: Backend {
    /// `mid [N, 2f]` → `h [N, f]`, one launch.
    fn situ_fused_forward(mid: FloatTensor<Self>, cap: f32) -> FloatTensor<Self>;
    /// `(mid [N, 2f], dh [N, f])` → `d(mid) [N, 2f]`, one launch.
    fn situ_fused_backward(
        mid: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        cap: f32,
    ) -> FloatTensor<Self>;
    /// Identity; under autodiff its backward counts a completed tensor-path backward.
    fn situ_tensor_probe(x: FloatTensor<Self>) -> FloatTensor<Self> {
        x
    }
}

/// SiTU GLU, fused path: `mid [N, 2f]` → `h [N, f]`.
pub fn situ_glu_fused<B: SituBackend>(mid: Tensor<B, 2>, cap: f32) -> Tensor<B, 2> {
    FUSED.entry();
    let [_, width] = mid.dims();
    assert!(
        width.is_multiple_of(2),
        "situ_glu: the gate_up width {width} must be even (2f)"
    );
    let out = B::situ_fused_forward(mid.into_primitive().tensor(), cap);
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

#[derive(Debug)]
struct FusedBackward;

impl<B: SituBackend> Backward<B, 1> for FusedBackward {
    /// The checkpointed input `mid`, and the cap.
    type State = (NodeId, f32);

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let [parent] = ops.parents;
        let dh = grads.consume::<B>(&ops.node);
        let (mid_id, cap) = ops.state;
        let mid: FloatTensor<B> = checkpointer.retrieve_node_output(mid_id);
        if let Some(node) = parent {
            grads.register::<B>(node.id, B::situ_fused_backward(mid, dh, cap));
        }
    }
}

#[derive(Debug)]
struct TensorProbeBackward;

impl<B: Backend> Backward<B, 1> for TensorProbeBackward {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        TENSOR.bwd();
        if let Some(node) = parent {
            grads.register::<B>(node.id, grad);
        }
    }
}

impl<B: SituBackend, C: CheckpointStrategy> SituBackend for Autodiff<B, C> {
    fn situ_fused_forward(mid: FloatTensor<Self>, cap: f32) -> FloatTensor<Self> {
        match FusedBackward
            .prepare::<C>([mid.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let mid_id = prep.checkpoint(&mid);
                let out = B::situ_fused_forward(mid.primitive, cap);
                prep.finish((mid_id, cap), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::situ_fused_forward(mid.primitive, cap)),
        }
    }

    fn situ_fused_backward(
        mid: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        cap: f32,
    ) -> FloatTensor<Self> {
        // The backward of the backward is not needed: the result is not tracked.
        <Self as AutodiffBackend>::from_inner(B::situ_fused_backward(
            mid.primitive,
            dh.primitive,
            cap,
        ))
    }

    fn situ_tensor_probe(x: FloatTensor<Self>) -> FloatTensor<Self> {
        TensorProbeBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateless(x.primitive)
    }
}

/// The fused op on the host: data round trip through [`reference`] in `f64`. Used by the
/// burn-ndarray backends; one "launch" each way, counted like a kernel.
fn host_forward<B: Backend>(mid: FloatTensor<B>, cap: f32) -> FloatTensor<B> {
    let mid = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(mid));
    let device = mid.device();
    let [n, w] = mid.dims();
    let f = w / 2;
    let x = to_f64(mid);
    let h = reference::forward(&x, n, f, f64::from(cap));
    FUSED.fwd(1);
    Tensor::<B, 2>::from_data(TensorData::new(h, [n, f]), &device)
        .into_primitive()
        .tensor()
}

fn host_backward<B: Backend>(mid: FloatTensor<B>, dh: FloatTensor<B>, cap: f32) -> FloatTensor<B> {
    let mid = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(mid));
    let dh = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(dh));
    let device = mid.device();
    let [n, w] = mid.dims();
    let f = w / 2;
    assert_eq!(dh.dims(), [n, f], "situ backward: dh must be [N, f]");
    let d = reference::backward(&to_f64(mid), &to_f64(dh), n, f, f64::from(cap));
    FUSED.bwd();
    Tensor::<B, 2>::from_data(TensorData::new(d, [n, w]), &device)
        .into_primitive()
        .tensor()
}

/// A tensor's values as `f64`, row-major.
pub(crate) fn to_f64<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("a float tensor converts to f64")
}

macro_rules! host_situ {
    ($($e:ty),*) => {$(
        impl SituBackend for NdArray<$e> {
            fn situ_fused_forward(mid: FloatTensor<Self>, cap: f32) -> FloatTensor<Self> {
                host_forward::<Self>(mid, cap)
            }
            fn situ_fused_backward(
                mid: FloatTensor<Self>,
                dh: FloatTensor<Self>,
                cap: f32,
            ) -> FloatTensor<Self> {
                host_backward::<Self>(mid, dh, cap)
            }
        }
    )*};
}

host_situ!(f32, f64);
