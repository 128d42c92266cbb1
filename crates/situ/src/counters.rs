//! Path counters: which SiTU path ran, and how far it got.
//!
//! The seed's autopsy could not tell from any log whether the tensor or the fused path had
//! run: the only probe counted *calls*. Here each path counts three things, process-wide:
//!
//! * `entry`: calls into the path ([`crate::situ_glu_tensor`] / [`crate::situ_glu_fused`]);
//! * `fwd`: forward launches — for the fused path, forward *kernel launches* counted at the
//!   launch site (a call that never reaches the kernel does not count); for the tensor path,
//!   the tensor ops it issued (11 per call);
//! * `bwd`: backward launches — for the fused path, backward kernel launches; for the tensor
//!   path, backward passes that made it through the whole op chain (one per call, counted by
//!   an identity op placed at the path's input, whose backward runs last).
//!
//! [`situ_field`] renders them as the one log field a trainer prints:
//! `situ=tensor:12/132/12,fused:0/0/0`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct PathCounters {
    entry: AtomicU64,
    fwd: AtomicU64,
    bwd: AtomicU64,
}

impl PathCounters {
    const fn new() -> Self {
        PathCounters {
            entry: AtomicU64::new(0),
            fwd: AtomicU64::new(0),
            bwd: AtomicU64::new(0),
        }
    }

    pub(crate) fn entry(&self) {
        self.entry.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fwd(&self, launches: u64) {
        self.fwd.fetch_add(launches, Ordering::Relaxed);
    }

    pub(crate) fn bwd(&self) {
        self.bwd.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> PathCounts {
        PathCounts {
            entry: self.entry.load(Ordering::Relaxed),
            fwd: self.fwd.load(Ordering::Relaxed),
            bwd: self.bwd.load(Ordering::Relaxed),
        }
    }
}

pub(crate) static TENSOR: PathCounters = PathCounters::new();
pub(crate) static FUSED: PathCounters = PathCounters::new();

/// One path's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// Calls into the path.
    pub entry: u64,
    /// Forward launches (kernels, or the tensor path's ops).
    pub fwd: u64,
    /// Backward launches (kernels, or the tensor path's completed backwards).
    pub bwd: u64,
}

impl fmt::Display for PathCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.entry, self.fwd, self.bwd)
    }
}

impl std::ops::Sub for PathCounts {
    type Output = PathCounts;
    fn sub(self, o: PathCounts) -> PathCounts {
        PathCounts {
            entry: self.entry - o.entry,
            fwd: self.fwd - o.fwd,
            bwd: self.bwd - o.bwd,
        }
    }
}

/// Both paths' counts at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SituCounts {
    /// The tensor path's.
    pub tensor: PathCounts,
    /// The fused path's.
    pub fused: PathCounts,
}

impl SituCounts {
    /// The counters now (process-wide).
    pub fn now() -> SituCounts {
        SituCounts {
            tensor: TENSOR.get(),
            fused: FUSED.get(),
        }
    }

    /// What happened since `earlier`.
    pub fn since(earlier: SituCounts) -> SituCounts {
        let now = SituCounts::now();
        SituCounts {
            tensor: now.tensor - earlier.tensor,
            fused: now.fused - earlier.fused,
        }
    }
}

impl fmt::Display for SituCounts {
    /// `situ=tensor:E/F/B,fused:E/F/B` — one whitespace-free field for a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "situ=tensor:{},fused:{}", self.tensor, self.fused)
    }
}

/// The log field for the counters now: `situ=tensor:E/F/B,fused:E/F/B`.
pub fn situ_field() -> String {
    SituCounts::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_one_greppable_token() {
        let c = SituCounts {
            tensor: PathCounts {
                entry: 12,
                fwd: 132,
                bwd: 12,
            },
            fused: PathCounts::default(),
        };
        assert_eq!(c.to_string(), "situ=tensor:12/132/12,fused:0/0/0");
        assert!(!c.to_string().contains(char::is_whitespace));
    }
}
