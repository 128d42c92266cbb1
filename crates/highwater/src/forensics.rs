//! Forensics: what a trainer log says about a run that ran out of device memory.
//!
//! [`parse_log`] reads a log's text (the caller opens the file and names it) into a
//! [`LogForensics`]: how many attempts were appended to it, the step each attempt died at,
//! the failed reserves grouped by size and by whether they came before the first step line
//! ([`AttemptPhase::Init`]) or after it ([`AttemptPhase::Run`]), and whether the log is cut short.
//! [`parse_reader`] (a [`LogReader`] underneath, which `parse_log` also is) reads the same from
//! any `BufRead` the caller opened, one line at a time, in memory bounded by what the log says
//! rather than by its length. [`incident_table`] turns several of them into the rows the book
//! prints.
//!
//! # Line formats
//!
//! A line may carry a bracketed prefix (`[2026-09-30T10:00:00Z INFO train] `), which is
//! skipped. Everything else is matched on the rest of the line.
//!
//! **Trainer lines** (the incident's trainer; the header, step and done lines are our
//! documented convention, the death line is the seed's verbatim shape):
//!
//! | line | example | meaning |
//! |---|---|---|
//! | header | `train start: preset=situ.toml seed=1 params=9590670 checkpointing: Disabled backend=Device<Cuda(0)>` | a new attempt (logs are appended) |
//! | step | `step 100 \| loss 3.2100 \| lr 3.0e-4 \| 412 ms/step` | the trainer finished step 100 (printed at step 0 and every 100 steps) |
//! | eval | `eval step 500 \| window 81920 B \| loss 3.05` | not a step line; ignored |
//! | death | `train failed: step 300: device error (loss is not a scalar)` | the attempt died at step 300 |
//! | done | `train done: 2000 steps` | the attempt completed |
//!
//! **Failed reserves**, two shapes, one failure per matching line:
//!
//! 1. The incident's patched runtime (a vendored cubecl-cuda fork), as the seed quotes it:
//!    a panic header `thread 'DSD-0-0' panicked at …/cubecl-cuda/src/compute/server.rs:144:35:`
//!    followed by `failed to reserve 33554432 bytes of device memory: out of device memory
//!    allocating 33554432 bytes`. The first number is the size the *tensor* asked for
//!    ([`Reported::Requested`]).
//! 2. Upstream cubecl-cuda 0.10.0 / cubecl-runtime 0.10.0 (what burn-cuda 0.21 prints):
//!    - the failing call is `let reserved = command.reserve(size).unwrap();` in
//!      `initialize_memory`, `cubecl-cuda-0.10.0/src/compute/server.rs:124` (the `unwrap`
//!      starts at column 46; the same unwrap for peer transfers is at `server.rs:491`);
//!    - the error is `IoError::BufferTooBig { size, backtrace }`, whose Display is
//!      `#[error("can't allocate buffer of size: {size}\n{backtrace}")]`
//!      (`cubecl-runtime-0.10.0/src/server/base.rs:693`), and whose `Debug` — what
//!      `unwrap` prints — forwards to that Display (`base.rs:751-755`);
//!    - `BackTrace`'s Display is `"No backtrace available"` outside cubecl's own tests
//!      (`cubecl-common-0.10.0/src/backtrace.rs:23-29`, the `backtrace` cfg alias is
//!      `all(test, feature = "std")` in its `build.rs`);
//!    - the server thread is named `format!("DS{}-{}-{}", "U"|"D", type_id, index_id)`
//!      (`cubecl-common-0.10.0/src/device/handle/channel.rs:637-645`): `DSD-0-0` is the
//!      downstream service of device 0;
//!    - the panic is caught on that thread and logged as `log::warn!("Task failed: {err:?}")`
//!      (`channel.rs:466-467` and `:480-481`; `Any { .. }` is all it shows), and the process
//!      goes on.
//!
//!    So with the standard panic hook the log reads
//!    ```text
//!    thread 'DSD-0-0' panicked at /root/.cargo/registry/src/index.crates.io-…/cubecl-cuda-0.10.0/src/compute/server.rs:124:46:
//!    called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: 268435456
//!    No backtrace available
//!    ```
//!    The size is the size of the storage allocation that failed. When the pool has to grow,
//!    that is a whole *page*: `cubecl-cuda-0.10.0/src/compute/storage/gpu.rs:181` returns
//!    `BufferTooBig { size, .. }` for the page it asked `cuMemAlloc` for when the driver says
//!    `CUDA_ERROR_OUT_OF_MEMORY` ([`Reported::Page`]: a 32 MiB tensor on a 16 GiB card shows
//!    up as 268435456). The pool's own refusals carry the tensor's size instead:
//!    `cubecl-runtime-0.10.0/src/memory_management/memory_manage.rs:500` (no pool accepts the
//!    size) and `memory_pool/exclusive_pool.rs:160` (above the pool's largest allocation);
//!    their text is the same, so the log alone cannot tell them apart — on a card that is
//!    merely full it is the page.
//!
//! `Task failed: Any { .. }` lines and `note: run with RUST_BACKTRACE=1` lines are not counted
//! (each failure already has its message line).

mod line;
mod reader;
mod table;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use reader::{ForensicsError, LogReader, MAX_LINE_BYTES, MAX_RECORDS, parse_log, parse_reader};
pub use table::{IncidentRow, IncidentTable, incident_table};

/// Where in an attempt a failed reserve came (`init` or `run`, as logs and incident files
/// write it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptPhase {
    /// Before the attempt printed its first step line (model build, autotune sweeps).
    Init,
    /// After it.
    Run,
}

/// What a failure's size measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reported {
    /// The tensor's own size (the incident's patched runtime: `failed to reserve N bytes`).
    Requested,
    /// The page the pool asked the driver for (upstream cubecl 0.10: `can't allocate buffer
    /// of size: N`).
    Page,
}

/// Failed reserves of one size in one phase, over every attempt of a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureGroup {
    /// The size in the message.
    pub bytes: u64,
    /// How many lines said so.
    pub count: u32,
    /// Before or after the attempt's first step line.
    pub phase: AttemptPhase,
    /// For [`AttemptPhase::Run`]: the last step line printed before the group's first failure.
    pub after_step: Option<u32>,
    /// Whether the size is the tensor's or the pool's page.
    pub reported: Reported,
}

/// What one trainer log says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogForensics {
    /// The caller's name for the log (usually its file name).
    pub name: String,
    /// Attempts appended to the log (header lines, plus one if lines came before any header).
    pub attempts: u32,
    /// The step each dying attempt died at, in log order.
    pub died_at: Vec<u32>,
    /// Failed reserves by (size, phase, kind), in order of first appearance.
    pub failures: Vec<FailureGroup>,
    /// The last step line of the log.
    pub last_step: Option<u32>,
    /// The log is cut short: it starts without a header, or its last attempt neither died
    /// nor completed.
    pub truncated: bool,
    /// Lines came before the first header: the log's head is missing.
    pub missing_header: bool,
    /// The last attempt printed its done line.
    pub completed: bool,
}

impl LogForensics {
    /// Failed reserves in `phase`, over all sizes.
    pub fn failure_count(&self, phase: AttemptPhase) -> u32 {
        self.failures
            .iter()
            .filter(|g| g.phase == phase)
            .map(|g| g.count)
            .sum()
    }
}
