//! Where burn-fusion's work meets the training thread's: the dry run's schedule, chosen rather
//! than left to the host's threads.
//!
//! On a GPU host three threads share the pool. The training thread switches a stream's pool to
//! persistent around each parameter's creation; burn-fusion's thread runs the initializers (and
//! every other operation) later; CubeCL's server thread reserves, binds and releases, later
//! still. Two things follow from how far each runs behind the one before it, and both move
//! pages ([`Schedule`]):
//!
//! - **which reservations land inside a persistent window.** A request made while the pool is
//!   persistent gets an exact page of its own, and from then on every request of that size that
//!   finds no free one does too (cubecl-runtime 0.10's `PersistentPool::has_size`);
//! - **which releases the server has seen.** A slice is free once burn-fusion dropped its last
//!   handle, whenever the server gets to the request: a server further behind reuses more.
//!
//! Dry, burn-fusion and the server share one thread (the dry server runs at burn-fusion's
//! stage), so their order is the training thread's, the same on every host. The server then
//! plays the lag back on purpose: it holds `lag` commands before running them, and the training
//! thread's mode switches either wait their turn behind the held commands or overtake them.

use std::collections::VecDeque;

use cubecl_common::bytes::Bytes;
use cubecl_common::stream_id::StreamId;
use cubecl_runtime::memory_management::{ManagedMemoryHandle, MemoryAllocationMode};
use cubecl_runtime::server::{CopyDescriptor, KernelArguments};

/// How far the dry server runs behind burn-fusion's thread, and burn-fusion's behind the
/// training thread's pool-mode switches. The default is no lag: every command runs when it
/// arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Schedule {
    /// Commands held before they run; whatever burn-fusion released meanwhile is free when
    /// they do. Anything that answers the caller (a read, a sync, the pool's usage) first runs
    /// every held command, as a GPU server's queue is drained before it answers.
    pub lag: u32,
    /// The training thread's mode switches take effect at once, ahead of the held commands
    /// (burn-fusion behind the training thread: its work lands in the window the training
    /// thread is in now); otherwise they wait their turn.
    pub modes_overtake: bool,
}

impl Schedule {
    /// No lag: every command runs when it arrives, in the training thread's order (the
    /// default; on CubeBackend the only schedule there is).
    pub const IN_ORDER: Schedule = Schedule::at(0, false);

    /// The prediction's schedule on burn-fusion: its work 8 commands behind the training thread's
    /// mode switches. Calibrated to the MLP's and the LSTM's records (`repro/results/fusion`),
    /// which replay to the GPU's pages from a depth of 6 and 4 on, and at every depth tried up to
    /// 2 048; with no lag they reserve 16 MB and 54 MB more at step 1.
    pub const PREDICTED: Schedule = Schedule::at(8, true);

    /// The schedules a burn-fusion band explores, the prediction's first: the server with no lag
    /// (burn-fusion's work in the training thread's order), and burn-fusion behind the training
    /// thread by 2, 32 and 128 commands (128: four of burn-fusion's batches of 32). Each moves
    /// which parameters' sizes CubeCL's persistent pool takes, and the outcome is chaotic in the
    /// depth (the decoder's record lands hundreds of megabytes apart at neighbouring depths, on
    /// either side of the GPU), so the band samples the range rather than each depth. Together
    /// they hold every GPU run of the decoder's, the MLP's and the LSTM's records
    /// (`conform_fusion_bands_hold_every_gpu_run_the_same_on_any_host` in highwater-cli's
    /// tests). A server that runs behind with the mode switches in turn (releases seen later,
    /// windows where they were) moved no page on any record, up to 256 commands.
    pub const EXPLORED: [Schedule; 5] = [
        Schedule::PREDICTED,
        Schedule::IN_ORDER,
        Schedule::at(2, true),
        Schedule::at(32, true),
        Schedule::at(128, true),
    ];

    const fn at(lag: u32, modes_overtake: bool) -> Schedule {
        Schedule {
            lag,
            modes_overtake,
        }
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let modes = if self.modes_overtake {
            "modes overtake"
        } else {
            "modes in turn"
        };
        write!(f, "lag {}, {modes}", self.lag)
    }
}

/// A command the server holds back: everything that changes the pool and answers nothing.
pub(crate) enum Held {
    /// `initialize_memory`: a slice reserved and bound to `memory`.
    Reserve {
        memory: ManagedMemoryHandle,
        size: u64,
        stream: StreamId,
    },
    /// A launch: its metadata reserved and its bindings resolved.
    Launch {
        bindings: KernelArguments,
        stream: StreamId,
    },
    /// An upload's copies checked against their handles.
    Write {
        descriptors: Vec<(CopyDescriptor, Bytes)>,
        stream: StreamId,
    },
    /// A pool-mode switch that waits its turn.
    Mode {
        mode: MemoryAllocationMode,
        stream: StreamId,
    },
}

/// The server's held commands, oldest first.
#[derive(Default)]
pub(crate) struct Queue {
    held: VecDeque<Held>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Queue({} held)", self.held.len())
    }
}

impl Queue {
    /// Holds `command`; returns those now due (more than `lag` held), oldest first.
    pub(crate) fn hold(&mut self, command: Held, lag: u32) -> Vec<Held> {
        self.held.push_back(command);
        let due = self.held.len().saturating_sub(lag as usize);
        self.held.drain(..due).collect()
    }

    /// Every held command, oldest first.
    pub(crate) fn drain(&mut self) -> Vec<Held> {
        self.held.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(mode: MemoryAllocationMode) -> Held {
        Held::Mode {
            mode,
            stream: StreamId { value: 0 },
        }
    }

    #[test]
    fn a_queue_releases_commands_in_order_once_more_than_its_lag_are_held() {
        let mut q = Queue::default();
        assert_eq!(q.hold(mode(MemoryAllocationMode::Persistent), 0).len(), 1);
        assert!(q.hold(mode(MemoryAllocationMode::Persistent), 2).is_empty());
        assert!(q.hold(mode(MemoryAllocationMode::Auto), 2).is_empty());
        let due = q.hold(mode(MemoryAllocationMode::Auto), 2);
        assert!(matches!(
            due.as_slice(),
            [Held::Mode {
                mode: MemoryAllocationMode::Persistent,
                ..
            }]
        ));
        assert_eq!(q.drain().len(), 2);
        assert!(q.drain().is_empty());
    }
}
