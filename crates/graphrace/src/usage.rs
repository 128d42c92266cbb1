//! What a pool holds from the device and hands out, counted as `torch.cuda`'s statistics
//! count it (`memory_allocated`, `memory_reserved`, their peaks), and the error a pool raises
//! when the device cannot give it more. Both layouts of PyTorch's caching allocator keep one
//! [`Usage`] ([`crate::pool::Pool`], [`crate::expandable::ExpandablePool`]), so their figures
//! and refusals are counted the same way.

/// A request the device could not serve, even after the pool gave back its cached segments:
/// what PyTorch's `OutOfMemoryError` reports, as numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "out of memory: tried to allocate {tried} B with {reserved} B reserved ({allocated} B allocated) under a limit of {limit} B"
)]
pub struct OutOfMemory {
    /// The segment the pool asked the device for (PyTorch's "Tried to allocate"): the request
    /// after rounding and [`crate::pool::Request::segment`], not the tensor's bytes.
    pub tried: u64,
    /// The tensor's bytes.
    pub requested: u64,
    /// Bytes in blocks handed out (`allocated_bytes`).
    pub allocated: u64,
    /// Bytes in segments the pool holds, after giving back what it could (`reserved_bytes`).
    pub reserved: u64,
    /// The device limit the pool was under.
    pub limit: u64,
    /// Bytes the give-back returned to the device before the final try.
    pub released: u64,
}

/// Peaks since a pool's last `reset_peaks` (PyTorch's `reset_peak_memory_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peaks {
    /// `max_memory_allocated`.
    pub allocated: u64,
    /// `max_memory_reserved`.
    pub reserved: u64,
}

/// What a pool holds from the device and hands out: see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    allocated: u64,
    reserved: u64,
    limit: u64,
    peaks: Peaks,
    released: u64,
}

impl Usage {
    /// Nothing held yet, on a device that grants at most `limit` bytes.
    pub(crate) fn under(limit: u64) -> Usage {
        Usage {
            allocated: 0,
            reserved: 0,
            limit,
            peaks: Peaks::default(),
            released: 0,
        }
    }

    /// Bytes the pool holds from the device (`memory_reserved`).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Bytes in blocks handed out and not freed (`memory_allocated`): whole blocks, so a
    /// request's rounding and an unsplit remainder count.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The peaks since the pool's last `reset_peaks`.
    pub fn peaks(&self) -> Peaks {
        self.peaks
    }

    /// Bytes free-and-retry gave back to the device over the pool's life.
    pub fn released(&self) -> u64 {
        self.released
    }

    /// Whether the device grants `more` bytes on top of what the pool holds.
    /// The limit the pool is under.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether the pool is under a limit at all (`set_per_process_memory_fraction`).
    pub(crate) fn limited(&self) -> bool {
        self.limit < u64::MAX
    }

    pub(crate) fn fits(&self, more: u64) -> bool {
        self.reserved.saturating_add(more) <= self.limit
    }

    pub(crate) fn reserve(&mut self, bytes: u64) {
        self.reserved += bytes;
        self.peaks.reserved = self.peaks.reserved.max(self.reserved);
    }

    pub(crate) fn give_back(&mut self, bytes: u64) {
        self.reserved -= bytes;
        self.released += bytes;
    }

    pub(crate) fn hand_out(&mut self, bytes: u64) {
        self.allocated += bytes;
        self.peaks.allocated = self.peaks.allocated.max(self.allocated);
    }

    pub(crate) fn take_back(&mut self, bytes: u64) {
        self.allocated -= bytes;
    }

    pub(crate) fn reset_peaks(&mut self) {
        self.peaks = Peaks {
            allocated: self.allocated,
            reserved: self.reserved,
        };
    }

    /// The error for `tried` bytes asked of the device for a tensor of `requested`, after
    /// free-and-retry gave back `released`.
    pub(crate) fn refusal(&self, tried: u64, requested: u64, released: u64) -> OutOfMemory {
        OutOfMemory {
            tried,
            requested,
            allocated: self.allocated,
            reserved: self.reserved,
            limit: self.limit,
            released,
        }
    }
}
