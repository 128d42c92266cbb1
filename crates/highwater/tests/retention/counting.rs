//! A counting global allocator: live bytes, live allocations, and the sizes of the large
//! blocks still alive.
//!
//! Counting is process-wide (every thread), so it is only switched on in a child process that
//! runs nothing but one measurement (see [`super::child`]): burn-ndarray, when a crate in the
//! build enables its `multi-threads` feature (burn's defaults do), allocates matmul outputs on
//! rayon workers, which a per-thread count would miss. Off, the allocator costs the other tests
//! of this binary one relaxed atomic load per call.
//!
//! Blocks of at least [`LARGE`] bytes are remembered (address and size, in a fixed table of
//! atomics: nothing here allocates) so a snapshot can list the sizes of the large blocks still
//! alive — the tensor buffers. Autodiff's own bookkeeping (nodes, steps, checkpoint actions,
//! hash maps of a few dozen entries) stays well under [`LARGE`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering::Relaxed};

/// Blocks at least this big are tracked one by one (every tensor in the graphs is ≥ 8 KiB).
pub(crate) const LARGE: usize = 4096;
const SLOTS: usize = 1024;

struct Counter;

#[global_allocator]
static GLOBAL: Counter = Counter;

static ON: AtomicBool = AtomicBool::new(false);
static BYTES: AtomicIsize = AtomicIsize::new(0);
static COUNT: AtomicIsize = AtomicIsize::new(0);
static OVERFLOW: AtomicBool = AtomicBool::new(false);
/// Live large blocks allocated while counting: address (0 = free slot) and size.
static ADDR: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static SIZE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

fn on_alloc(ptr: *mut u8, size: usize) {
    if ptr.is_null() {
        return;
    }
    BYTES.fetch_add(size as isize, Relaxed);
    COUNT.fetch_add(1, Relaxed);
    if size >= LARGE {
        let claimed = ADDR.iter().zip(&SIZE).find(|(a, _)| {
            a.compare_exchange(0, ptr as usize, Relaxed, Relaxed)
                .is_ok()
        });
        match claimed {
            Some((_, s)) => s.store(size, Relaxed),
            None => OVERFLOW.store(true, Relaxed),
        }
    }
}

fn on_free(ptr: *mut u8, size: usize) {
    BYTES.fetch_sub(size as isize, Relaxed);
    COUNT.fetch_sub(1, Relaxed);
    if size >= LARGE
        && let Some((a, s)) = ADDR
            .iter()
            .zip(&SIZE)
            .find(|(a, _)| a.load(Relaxed) == ptr as usize)
    {
        s.store(0, Relaxed);
        a.store(0, Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the bookkeeping only touches static
// atomics and never allocates.
unsafe impl GlobalAlloc for Counter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if ON.load(Relaxed) {
            on_alloc(ptr, layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if ON.load(Relaxed) {
            on_alloc(ptr, layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ON.load(Relaxed) {
            on_free(ptr, layout.size());
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !ON.load(Relaxed) {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Forget the old block before `System` may hand its address to another thread.
        on_free(ptr, layout.size());
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if new.is_null() {
            on_alloc(ptr, layout.size());
        } else {
            on_alloc(new, new_size);
        }
        new
    }
}

/// What the process added to the heap between [`Counting::start`] and [`Counting::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Net bytes.
    pub bytes: isize,
    /// Net allocations.
    pub count: isize,
    /// Sizes of the large blocks allocated since the start and still alive, ascending.
    pub large: Vec<usize>,
}

impl Snapshot {
    /// Net bytes not in large blocks: autodiff's bookkeeping.
    pub(crate) fn small_bytes(&self) -> isize {
        self.bytes - self.large.iter().sum::<usize>() as isize
    }

    /// One line for the parent process: `bytes count size size …`.
    pub(crate) fn to_line(&self) -> String {
        let mut s = format!("{} {}", self.bytes, self.count);
        for l in &self.large {
            s += &format!(" {l}");
        }
        s
    }

    /// Reads [`Snapshot::to_line`].
    pub(crate) fn from_line(line: &str) -> Snapshot {
        let mut it = line.split_whitespace();
        let mut int = || it.next().and_then(|w| w.parse::<isize>().ok());
        let (bytes, count) = (int().expect("bytes"), int().expect("count"));
        let mut large = vec![];
        while let Some(l) = int() {
            large.push(l as usize);
        }
        Snapshot {
            bytes,
            count,
            large,
        }
    }
}

/// Process-wide counting, from zero, until [`Counting::finish`] (or drop).
pub(crate) struct Counting(());

impl Counting {
    pub(crate) fn start() -> Counting {
        assert!(!ON.load(Relaxed), "counting is already on");
        BYTES.store(0, Relaxed);
        COUNT.store(0, Relaxed);
        OVERFLOW.store(false, Relaxed);
        for (a, s) in ADDR.iter().zip(&SIZE) {
            a.store(0, Relaxed);
            s.store(0, Relaxed);
        }
        ON.store(true, Relaxed);
        Counting(())
    }

    /// Stops counting and returns the net growth since [`Counting::start`].
    pub(crate) fn finish(self) -> Snapshot {
        ON.store(false, Relaxed);
        assert!(
            !OVERFLOW.load(Relaxed),
            "more than {SLOTS} large blocks alive: enlarge the table"
        );
        let mut large: Vec<usize> = ADDR
            .iter()
            .zip(&SIZE)
            .filter(|(a, _)| a.load(Relaxed) != 0)
            .map(|(_, s)| s.load(Relaxed))
            .collect();
        large.sort_unstable();
        Snapshot {
            bytes: BYTES.load(Relaxed),
            count: COUNT.load(Relaxed),
            large,
        }
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        ON.store(false, Relaxed);
    }
}
