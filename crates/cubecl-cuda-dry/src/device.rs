pub use cubecl_server::device::CudaDevice;

/// cubecl-cuda 0.11.3 `device.rs`: the bindings a launch is assumed to hold.
pub const CUDA_MAX_BINDINGS: u32 = 1024;
