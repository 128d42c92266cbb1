//! A CubeCL 0.10 runtime that allocates exactly as cubecl-cuda 0.10 does and never computes: the
//! dry run.
//!
//! burn's own code — autodiff, burn-cubecl, burn-fusion — runs over it unchanged
//! (`burn_cubecl::CubeBackend<DryRuntime, …>`), so every retention, in-place, view, fusion and
//! pool decision is burn's and CubeCL's, and the pool's figures are what a GPU's would be. The
//! card comes from a [`CardProfile`] recorded on that GPU; out-of-memory is an event
//! ([`OutOfMemory`]) on the device's [`DeviceMemory`], and the page is then refused as the card
//! would (what follows is what follows on the GPU) or granted, so that a run can go on and say
//! how much it would have needed ([`OnRefusal`]).
//!
//! Kernels are handed to the server and dropped unseen (CubeCL compiles on the server side), and
//! reads return zeros: a program whose control flow or shapes depend on tensor values
//! (`nonzero`, `argwhere`, early stopping on a loss) takes the zero branch.

pub mod atlas;
pub mod autotune;
pub mod card;
pub mod memory;
mod runtime;
pub mod schedule;
mod server;
pub mod traced;

pub use atlas::{Atlas, AutotuneError, Entry, Prediction};
pub use autotune::AutotuneCache;
pub use card::{CardError, CardProfile};
pub use memory::{DeviceMemory, OnRefusal, OutOfMemory};
pub use runtime::{DryDevice, DryRuntime};
pub use schedule::Schedule;
pub use server::{DryServer, TieBreak};
