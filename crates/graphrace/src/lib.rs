//! graphrace: the CUDA-graph multi-stream race of the book's Part II, modelled on CPU.
//!
//! One walk, no IO:
//!
//! ```text
//! Config (repro/graphrace/*.toml)       the switches the incident flipped
//!   → step::decode_step                 what the host issues for one decode step: a Program
//!   → capture::capture                  the Program through the caching allocator: a Graph
//!                                       (addresses, lifetimes, kernels with edges and clocks)
//!   → check::check                      happens-before over the Graph: the race, no replay
//!   → replay::Replayer                  the Graph replayed with seeded jitter: who collided
//!   → rates::Captured::rate / sweep     sessions corrupted per configuration and concurrency
//! ```
//!
//! Everything is seeded and deterministic: the same configuration, sessions, timing and
//! workload give the same rates on every machine.
//!
//! The caching allocator under the capture is PyTorch 2.11's, and stands on its own too:
//!
//! ```text
//! snapshot::read              a PyTorch memory snapshot's bytes (its pickle) → Snapshot
//!   → Snapshot::requests      its requests and frees, steps and streams, as caching::Events
//!   → caching::replay         through pool / expandable under a PYTORCH_CUDA_ALLOC_CONF
//!   → snapshot::verdict       fits or not, the request refused, PyTorch's message figures
//! ```

pub mod arms;
pub mod caching;
pub mod capture;
pub mod check;
pub mod config;
pub mod driver;
pub mod expandable;
pub mod pool;
pub mod program;
pub mod rates;
pub mod replay;
mod rng;
pub mod rounding;
pub mod snapshot;
pub mod step;
pub mod suite;
pub mod usage;

pub use capture::{CaptureError, Graph, capture};
pub use check::{Finding, Report, check};
pub use config::{Config, ConfigError, IndexKeys, Join, Mode};
pub use program::{Program, Stream};
pub use rates::{Captured, MAX_SESSIONS, Rate, Workload, sweep};
pub use replay::{Draw, Replay, Replayer, Timing};
pub use step::{Costs, decode_step, decode_step_with};
