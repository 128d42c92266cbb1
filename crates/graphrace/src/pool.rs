//! The graph's private pool: a caching allocator in the manner of PyTorch's, simplified.
//!
//! - Blocks are tagged with the stream they were allocated on and reused only by allocations on
//!   that stream: stream order makes that safe *for work on that stream*. A use on another
//!   stream is invisible unless recorded ([`Pool::free`] with `recorded = true`).
//! - A freed block is reusable at once by a later allocation (during capture, "later" means
//!   later in host order), best fit, smallest block first, then lowest address; a larger block
//!   is split when the rest is worth keeping, and a freed block merges with free neighbours of
//!   its segment.
//! - Requests up to 1 MiB come from small segments of 2 MiB; larger ones from a segment of the
//!   request rounded up to 2 MiB. A large block is split only if more than 1 MiB remains.
//!   (PyTorch gives requests under 10 MiB a 20 MiB segment; we round every large request to
//!   2 MiB instead, which keeps layouts readable and changes no reuse in the incident's step.)
//! - A block freed with a recorded use on another stream is held back until the capture ends,
//!   as PyTorch defers such frees while a capture is under way.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::program::Stream;

const ALIGN: u64 = 512;
const MIB: u64 = 1 << 20;
/// Requests up to this size come from the small pool.
pub const SMALL_LIMIT: u64 = MIB;
const SMALL_SEGMENT: u64 = 2 * MIB;
const LARGE_ROUND: u64 = 2 * MIB;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size {
    Small,
    Large,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Used,
    /// Freed with a recorded cross-stream use: out of reach until the capture ends.
    Deferred,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    stream: Stream,
    class: Size,
    segment: u32,
    state: State,
}

/// The pool's blocks by address.
#[derive(Clone, Debug, Default)]
pub struct Pool {
    blocks: BTreeMap<u64, Block>,
    next_segment_at: u64,
    segments: u32,
}

impl Pool {
    /// An empty pool: no segment taken from the device yet.
    pub fn new() -> Pool {
        Pool::default()
    }

    /// A block for `bytes` on `stream`; returns the block's address range.
    pub fn alloc(&mut self, bytes: u64, stream: Stream) -> Range<u64> {
        let size = bytes.max(1).next_multiple_of(ALIGN);
        let class = if size <= SMALL_LIMIT {
            Size::Small
        } else {
            Size::Large
        };
        let best = self
            .blocks
            .iter()
            .filter(|(_, b)| {
                b.state == State::Free && b.stream == stream && b.class == class && b.size >= size
            })
            .min_by_key(|(addr, b)| (b.size, **addr))
            .map(|(addr, _)| *addr);
        let addr = best.unwrap_or_else(|| self.new_segment(size, stream, class));
        let block = self.blocks.get_mut(&addr).expect("a free block was found");
        let rest = block.size - size;
        let split = match class {
            Size::Small => rest >= ALIGN,
            Size::Large => rest > SMALL_LIMIT,
        };
        block.state = State::Used;
        if split {
            block.size = size;
            let tail = Block {
                size: rest,
                state: State::Free,
                ..*block
            };
            self.blocks.insert(addr + size, tail);
        }
        addr..addr + self.blocks[&addr].size
    }

    fn new_segment(&mut self, size: u64, stream: Stream, class: Size) -> u64 {
        let bytes = match class {
            Size::Small => SMALL_SEGMENT,
            Size::Large => size.next_multiple_of(LARGE_ROUND),
        };
        let addr = self.next_segment_at;
        self.next_segment_at += bytes;
        self.segments += 1;
        self.blocks.insert(
            addr,
            Block {
                size: bytes,
                stream,
                class,
                segment: self.segments,
                state: State::Free,
            },
        );
        addr
    }

    /// The host dropped the tensor at `addr`. With `recorded`, a use on another stream was
    /// recorded: the block stays out of reach until [`Pool::end_capture`].
    pub fn free(&mut self, addr: u64, recorded: bool) {
        let block = self
            .blocks
            .get_mut(&addr)
            .expect("freeing a block we handed out");
        assert_eq!(block.state, State::Used, "block at {addr:#x} freed twice");
        if recorded {
            block.state = State::Deferred;
            return;
        }
        block.state = State::Free;
        self.merge_around(addr);
    }

    /// The capture is over: deferred blocks come back.
    pub fn end_capture(&mut self) {
        let deferred: Vec<u64> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.state == State::Deferred)
            .map(|(a, _)| *a)
            .collect();
        for addr in deferred {
            self.blocks.get_mut(&addr).expect("listed above").state = State::Free;
            self.merge_around(addr);
        }
    }

    fn merge_around(&mut self, addr: u64) {
        let mut addr = addr;
        if let Some((&prev, p)) = self.blocks.range(..addr).next_back() {
            let b = self.blocks[&addr];
            if p.state == State::Free && p.segment == b.segment && prev + p.size == addr {
                self.blocks.get_mut(&prev).expect("just seen").size += b.size;
                self.blocks.remove(&addr);
                addr = prev;
            }
        }
        let b = self.blocks[&addr];
        if let Some(next) = self.blocks.get(&(addr + b.size)).copied()
            && next.state == State::Free
            && next.segment == b.segment
        {
            self.blocks.get_mut(&addr).expect("just seen").size += next.size;
            self.blocks.remove(&(addr + b.size));
        }
    }

    /// Bytes the pool holds from the device.
    pub fn reserved(&self) -> u64 {
        self.next_segment_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Stream::*;

    #[test]
    fn a_freed_block_goes_to_the_next_fitting_request_on_its_stream() {
        let mut pool = Pool::new();
        let a = pool.alloc(30 * MIB, Main);
        pool.free(a.start, false);
        let other_stream = pool.alloc(20 * MIB, Side);
        assert!(other_stream.start >= a.end, "side never gets main's block");
        let b = pool.alloc(20 * MIB, Main);
        assert_eq!(b.start, a.start, "main reuses its freed block");
        assert_eq!(pool.reserved(), 30 * MIB + 20 * MIB);
    }

    #[test]
    fn a_recorded_free_is_held_until_the_capture_ends() {
        let mut pool = Pool::new();
        let a = pool.alloc(30 * MIB, Main);
        pool.free(a.start, true);
        let b = pool.alloc(20 * MIB, Main);
        assert!(b.start >= a.end);
        pool.end_capture();
        let c = pool.alloc(20 * MIB, Main);
        assert_eq!(c.start, a.start);
    }

    #[test]
    fn best_fit_splits_and_merges_back() {
        let mut pool = Pool::new();
        let big = pool.alloc(8 * MIB, Main);
        let small = pool.alloc(4096, Main);
        assert!(small.start >= big.end, "small and large pools are apart");
        pool.free(big.start, false);
        let a = pool.alloc(3 * MIB, Main);
        assert_eq!(
            a,
            big.start..big.start + 3 * MIB,
            "split: more than 1 MiB remains"
        );
        let b = pool.alloc(4 * MIB + 512 * 1024, Main);
        assert_eq!(b.start, a.end, "the remainder is a block of its own");
        assert_eq!(b.end, big.end, "less than 1 MiB would remain: not split");
        pool.free(a.start, false);
        pool.free(b.start, false);
        assert_eq!(pool.alloc(8 * MIB, Main), big, "the halves merged back");
    }

    #[test]
    fn requests_are_aligned_and_segments_rounded() {
        let mut pool = Pool::new();
        let a = pool.alloc(1000, Side);
        assert_eq!(a.end - a.start, 1024);
        let b = pool.alloc(5 * MIB + 1, Side);
        assert_eq!(b.start, 2 * MIB);
        assert_eq!(pool.reserved(), 2 * MIB + 6 * MIB);
    }
}
