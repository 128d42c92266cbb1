//! burn 0.22: the network files' models ([`network`]), their training step measured phase by
//! phase ([`train`]), and that step on the dry CUDA device ([`dry`]), whose pools are CubeCL
//! 0.11's own through the cubecl-cuda stand-in (`crates/cubecl-cuda-dry`).
//!
//! The burn 0.21 siblings are `situ::network`, `situ::train` and `situ::dry`; the model-file
//! format, the reports and `conform` are one copy, in `highwater`.

extern crate burn_022 as burn;
#[cfg(feature = "cuda")]
extern crate cubecl_011 as cubecl;
#[cfg(feature = "dry")]
extern crate cubecl_cuda_011 as cubecl_cuda;

#[cfg(feature = "dry")]
pub mod dry;
#[cfg(feature = "dry")]
pub mod fused;
pub mod network;
#[cfg(feature = "cuda")]
pub mod rerun;
pub mod train;

/// Whether this build trains `backend` as asked: burn-fusion is a build-wide switch in burn 0.22
/// (this crate's feature `fusion`), so a fused network needs a fused build and CubeBackend one
/// without.
pub fn built_for(backend: highwater::recipe::Backend) -> bool {
    (backend == highwater::recipe::Backend::Fusion) == cfg!(feature = "fusion")
}
