//! cubecl-cuda 0.11, dry: the CUDA runtime burn 0.22 reaches through `cubecl::Device::Cuda`,
//! allocating exactly as cubecl-cuda 0.11.3 does and never running a kernel.
//!
//! Put in place of the real crate with `[patch.crates-io]` (this workspace does so; a user's
//! project can with `cargo --config 'patch.crates-io.cubecl-cuda.path="…"'`), a burn 0.22 program
//! runs unchanged on CPU: burn's autodiff, burn-fusion and burn-cubecl make every decision, the
//! shared `cubecl_server::command::Command` reserves, retries, relocates and frees through
//! CubeCL 0.11's own `MemoryManagement`, and this crate supplies only what cubecl-cuda supplies
//! underneath: the driver calls (here bookkeeping: a page is a size charged to the card, a copy
//! is nothing, a launch is nothing), the device's properties (derived from a card recorded on a
//! GPU, as cubecl-cuda derives them from the driver) and its streams.
//!
//! The file layout follows cubecl-cuda 0.11.3's (`runtime.rs`, `device.rs`, `compute/server.rs`,
//! `compute/stream.rs`, `compute/driver.rs`, `compute/storage/{gpu,cpu}.rs`), so each file can be
//! read beside its original; [`dry`] is what has no original: the card, the device's memory
//! books, and how a run registers its devices.
//!
//! Reads return zeros, so value-dependent control flow takes the zero branch.

// The 0.11 crates under their own names (the workspace's keys carry the version).
extern crate cubecl_common_011 as cubecl_common;
extern crate cubecl_core_011 as cubecl_core;
extern crate cubecl_cpp_011 as cubecl_cpp;
extern crate cubecl_environment_011 as cubecl_environment;
extern crate cubecl_server_011 as cubecl_server;
#[macro_use]
extern crate derive_new;

mod compute;
mod device;
pub mod dry;
mod runtime;

pub use compute::CudaServer;
pub use device::*;
pub use runtime::*;
