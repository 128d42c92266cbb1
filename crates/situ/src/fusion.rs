//! The fused path on burn-fusion (feature `cube`): burn-cuda's default backend is
//! `Fusion<CubeBackend<CudaRuntime>>`, which records operations into a stream and fuses
//! elementwise chains before running them. A custom op joins that stream as a
//! `CustomOpIr` — declared inputs and outputs, so the fuser orders it correctly and never fuses
//! across it — whose execution runs the CubeCL kernels of [`crate::cube`] on the inner backend.
//! (burn 0.21's `custom-cubecl-kernel` example leaves this case as `todo!()`.)

use std::marker::PhantomData;

use burn::tensor::Shape;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Client, Fusion, FusionBackend};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use crate::fused::SituBackend;

/// The fused forward or backward, executed on the inner backend `B` when the stream runs.
#[derive(Debug)]
struct SituOp<B> {
    desc: CustomOpIr,
    cap: f32,
    _b: PhantomData<B>,
}

impl<B: FusionBackend + SituBackend> Operation<B::FusionRuntime> for SituOp<B> {
    fn execute(&self, handles: &mut HandleContainer<B::Handle>) {
        match self.desc.id.as_str() {
            FORWARD => {
                let ([mid], [out]) = self.desc.as_fixed::<1, 1>();
                let mid = handles.get_float_tensor::<B>(mid);
                let h = B::situ_fused_forward(mid, self.cap);
                handles.register_float_tensor::<B>(&out.id, h);
            }
            _ => {
                let ([mid, dh], [out]) = self.desc.as_fixed::<2, 1>();
                let mid = handles.get_float_tensor::<B>(mid);
                let dh = handles.get_float_tensor::<B>(dh);
                let d = B::situ_fused_backward(mid, dh, self.cap);
                handles.register_float_tensor::<B>(&out.id, d);
            }
        }
    }
}

const FORWARD: &str = "situ_fused_forward";
const BACKWARD: &str = "situ_fused_backward";

/// Registers `desc` (its inputs already consumed into IR, so the stream may free or reuse
/// them) to run as [`SituOp`] on the inner backend; returns its one output.
fn register<B: FusionBackend + SituBackend>(
    client: Client<B::FusionRuntime>,
    streams: OperationStreams,
    desc: CustomOpIr,
    cap: f32,
) -> FloatTensor<Fusion<B>> {
    let op = SituOp::<B> {
        desc: desc.clone(),
        cap,
        _b: PhantomData,
    };
    client
        .register(streams, OperationIr::Custom(desc), op)
        .output()
}

impl<R, F, I, BT> SituBackend for Fusion<CubeBackend<R, F, I, BT>>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn situ_fused_forward(mid: FloatTensor<Self>, cap: f32) -> FloatTensor<Self> {
        let streams = OperationStreams::with_inputs([&mid]);
        let client = mid.client.clone();
        let [n, w] = mid.shape.dims::<2>();
        let out = TensorIr::uninit(
            client.create_empty_handle(),
            Shape::new([n, w / 2]),
            mid.dtype,
        );
        let desc = CustomOpIr::new(FORWARD, &[mid.into_ir()], &[out]);
        register::<CubeBackend<R, F, I, BT>>(client, streams, desc, cap)
    }

    fn situ_fused_backward(
        mid: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        cap: f32,
    ) -> FloatTensor<Self> {
        let streams = OperationStreams::with_inputs([&mid, &dh]);
        let client = mid.client.clone();
        let out = TensorIr::uninit(client.create_empty_handle(), mid.shape.clone(), mid.dtype);
        let desc = CustomOpIr::new(BACKWARD, &[mid.into_ir(), dh.into_ir()], &[out]);
        register::<CubeBackend<R, F, I, BT>>(client, streams, desc, cap)
    }
}
