//! Helpers shared by the GPU gate and the bench (feature `cuda`).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_cubecl::CubeBackend;
pub use cubecl::cuda::{CudaDevice, CudaRuntime};

/// burn-cubecl's unfused CUDA backend: every op materializes its output, as the ledger assumes.
pub type Cube = CubeBackend<CudaRuntime, f32, i32, u8>;
/// Its autodiff wrapper under checkpoint strategy `C`.
pub type CubeAd<C> = Autodiff<Cube, C>;

/// Host values → a tensor on `device`.
pub fn tensor<B: Backend>(values: &[f64], shape: [usize; 2], device: &B::Device) -> Tensor<B, 2> {
    let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// A tensor's values on the host, as `f64`.
pub fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    crate::fused::to_f64(t)
}

/// Values that are not finite: outputs are poisoned with NaN before a run, so any left means
/// an element the kernel never wrote.
pub fn unwritten(values: &[f64]) -> usize {
    values.iter().filter(|x| !x.is_finite()).count()
}

/// Leaves NaN in the pool's free slices of these sizes, so that the next allocations of those
/// sizes (the op outputs and gradients) start out poisoned.
pub fn poison_pool(shapes: &[[usize; 2]], device: &CudaDevice) {
    let held: Vec<_> = shapes
        .iter()
        .map(|&s| Tensor::<Cube, 2>::full(s, f32::NAN, device))
        .collect();
    sync(device);
    drop(held);
    sync(device);
}

/// The value of `--out` on the command line, or `default`.
pub fn out_arg(default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.into())
}

/// Waits for the device.
pub fn sync(device: &CudaDevice) {
    Cube::sync(device).expect("device sync");
}

/// Name of a checkpoint strategy, for the records.
pub fn strategy_name<C: CheckpointStrategy>() -> &'static str {
    let name = std::any::type_name::<C>();
    if name.ends_with("BalancedCheckpointing") {
        "balanced"
    } else {
        "none"
    }
}
