//! The CUDA backend and what the GPU binaries share (feature `cuda`).

use burn::backend::Autodiff;
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
