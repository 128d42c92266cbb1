//! highwater: the memory pool of a burn 0.21 / CubeCL 0.10 training step, simulated on CPU.
//!
//! recipe → ledger (per-call ops, burn's retention rules) → trace (a whole step as pool events)
//! → pool (CubeCL's own `MemoryManagement`) → run (steps, seeds, the step it dies); conform holds
//! the simulator to runs recorded on a GPU; network is a model file (a decoder, a ResNet, a ViT,
//! an LSTM, an MLP), which only burn's
//! own code (the dry run, the GPU) trains. limits bounds what a recipe or a command may ask.
//! forensics reads trainer logs; incident is what the incident's logs said, as data.

pub mod conform;
pub mod ffn;
pub mod forensics;
pub mod incident;
pub mod layout;
pub mod ledger;
pub mod limits;
pub mod memtrace;
pub mod memviz;
pub mod network;
pub mod pool;
pub mod recipe;
pub mod run;
pub mod trace;

pub use forensics::{LogForensics, parse_log};
pub use incident::{Incident, IncidentError};
pub use layout::{DType, Shape};
pub use ledger::{Graph, Ledger, LedgerRow, TensorId};
pub use memtrace::MemTrace;
pub use recipe::{Activation, Backend, Checkpointing, InputError, Optimizer, Recipe, RecipeError};
pub use run::{
    Failure, RunReport, Sink, StepRecord, TraceError, simulate, simulate_many, simulate_traced,
    simulate_with,
};
