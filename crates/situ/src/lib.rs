//! The SiTU GLU on burn 0.21: the activation the simulator (`highwater`) models, run for real.
//!
//! SiTU takes the doubled `gate_up` projection `mid = [N, 2f]`, splits it into a gate half `g`
//! and an up half `u`, soft-caps each as `c·tanh(z/c)` and returns `sigmoid(g')·g'·u'`, an
//! `[N, f]` tensor. It comes in two paths that compute the same function:
//!
//! * [`situ_glu_tensor`], the **tensor path**: eleven burn tensor ops, exactly the op list
//!   `highwater::ffn` puts in its ledger (two slices, `div_scalar`/`tanh`/`mul_scalar` per
//!   branch, `sigmoid`, two `mul`s). Under `NoCheckpointing` autodiff keeps most of their
//!   outputs alive until backward: that is the seed's out-of-memory.
//! * [`situ_glu_fused`], the **fused path**: one forward kernel writing only the `[N, f]`
//!   output, one backward kernel writing `d(mid)` from the saved `mid` and the output gradient,
//!   registered as one custom autodiff op ([`SituBackend`]). On CubeCL both are kernels
//!   (feature `cube`, module `cube`: any CubeCL runtime, CUDA or dry); on burn-ndarray a host
//!   implementation of the same math (module [`reference`](mod@reference)) stands in, so the
//!   autodiff wiring is tested on every machine.
//!
//! [`silu_control`] is the control arm; [`ExpertStack`] is the wave's expert FFN stack
//! (`n_experts` FFNs, looped `max_iter` times) built from the same [`highwater::Recipe`] the
//! simulator reads; [`counters`] says which path ran, as one log field
//! (`situ=tensor:E/F/B,fused:E/F/B`).
//!
//! [`train`]'s step runs on every backend: burn-ndarray in tests, burn-cuda in `rerun`
//! (feature `cuda`), and the dry CubeCL runtime in `dry` (feature `dry`), which gives the GPU's
//! pool figures on a CPU.

/// The training function `$run::<B>` for the burn backend a recipe names: `$cube` (a runtime's
/// `CubeBackend`) or `$fused` (`Fusion` over it), under `Autodiff` with the checkpoint strategy
/// named, then any `$extra` type arguments `$run` takes (the runtime, where `$run` is generic
/// over it too). One match for the GPU rerun and the dry run, the wave and the networks.
#[cfg(feature = "dry")]
macro_rules! on_backend {
    ($backend:expr, $checkpointing:expr, $cube:ty, $fused:ty, $run:ident $(, $extra:ty)*) => {{
        use burn::backend::Autodiff;
        use burn::backend::autodiff::checkpoint::strategy::{
            BalancedCheckpointing, NoCheckpointing,
        };
        use highwater::recipe::{Backend, Checkpointing};
        match ($backend, $checkpointing) {
            (Backend::Cube, Checkpointing::None) => {
                $run::<Autodiff<$cube, NoCheckpointing> $(, $extra)*>
            }
            (Backend::Cube, Checkpointing::Balanced) => {
                $run::<Autodiff<$cube, BalancedCheckpointing> $(, $extra)*>
            }
            (Backend::Fusion, Checkpointing::None) => {
                $run::<Autodiff<$fused, NoCheckpointing> $(, $extra)*>
            }
            (Backend::Fusion, Checkpointing::Balanced) => {
                $run::<Autodiff<$fused, BalancedCheckpointing> $(, $extra)*>
            }
        }
    }};
}

/// [`on_backend!`] for a float precision too: `$f32` and `$bf16` are each a `($cube, $fused)`
/// pair of backend types.
#[cfg(feature = "dry")]
macro_rules! on_precision {
    ($precision:expr, $backend:expr, $checkpointing:expr, ($cube32:ty, $fused32:ty),
     ($cube16:ty, $fused16:ty), $run:ident $(, $extra:ty)*) => {{
        match $precision {
            highwater::network::Precision::F32 => {
                on_backend!($backend, $checkpointing, $cube32, $fused32, $run $(, $extra)*)
            }
            highwater::network::Precision::Bf16 => {
                on_backend!($backend, $checkpointing, $cube16, $fused16, $run $(, $extra)*)
            }
        }
    }};
}

pub mod counters;
mod expert;
mod fused;
pub mod gate;
pub mod network;
pub mod reference;
pub mod results;
mod tensor_path;
pub mod train;

#[cfg(feature = "dry")]
pub mod band;
#[cfg(feature = "cube")]
pub mod cube;
#[cfg(feature = "dry")]
pub mod dry;
#[cfg(feature = "cube")]
mod fusion;
#[cfg(feature = "cuda")]
pub mod gpu;
#[cfg(feature = "cuda")]
pub mod provenance;
#[cfg(feature = "cuda")]
pub mod rerun;

pub use counters::{PathCounts, SituCounts, situ_field};
pub use expert::{Expert, ExpertStack, activation};
pub use fused::{SituBackend, situ_glu_fused};
pub use tensor_path::{TENSOR_PATH_OPS, silu_control, situ_glu_tensor};

/// The soft-cap constant `c` in `c·tanh(z/c)`, for both branches.
///
/// Chosen as 8: an activation of a few units passes almost unchanged (`8·tanh(1/8)` is 0.995),
/// while outliers are bounded by ±8, so the gated product `sigmoid(g')·g'·u'` stays within
/// ±64 whatever the projection emits. The memory story does not depend on it; the gate tests
/// inputs spread across `[-3c, 3c]` so both the linear and the saturated parts of `tanh` are
/// exercised.
pub const SOFT_CAP: f32 = 8.0;
