//! PyTorch's caching allocator with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`
//! (`c10/cuda/CUDACachingAllocator.cpp`, Note [Expandable Segments]), reduced to the rules that
//! decide bytes reserved.
//!
//! - **One segment per stream and pool half**, reserved as address space for the whole card;
//!   physical pages are mapped into it as needed: 2 MiB pages for the small half, 20 MiB for
//!   the large ([`SMALL_SEGMENT`], [`LARGE_SEGMENT`]). Bytes reserved are the pages mapped.
//! - **Rounding and halves** as without the option ([`Request`]): 512 B, small up to 1 MiB.
//! - **Best fit** among the mapped free blocks, smallest then lowest address (`get_free_block`),
//!   and **splitting** whenever at least 512 B remain (`should_split` with the option on, in
//!   both halves). A freed block merges with free mapped neighbours (`try_merge_blocks`); the
//!   segment is one run of address space, so blocks that would have been separate segments
//!   merge.
//! - **Mapping** (`find_expandable_block`, `map_block`). When no mapped free block fits, the
//!   lowest unmapped block that, with the free block just below it and the blocks after it,
//!   spans the request is mapped, page by page, as far as the request needs.
//! - **Full device** (`release_cached_blocks` → `unmap_block`). When the pages do not fit under
//!   the limit, every whole page inside a free block is unmapped, then the mapping is tried once
//!   more; then it is out of memory ([`OutOfMemory`]).
//!
//! One stream's use of another stream's block (`record_stream`) is not modelled: Part III
//! replays one stream.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::pool::{LARGE_SEGMENT, MIN_BLOCK, Request, SMALL_SEGMENT, Size};
use crate::program::Stream;
use crate::usage::{OutOfMemory, Usage};

/// Address space of one segment: far more than any card (PyTorch reserves the card's memory
/// and an eighth), in whole pages of either size.
const SEGMENT_SPAN: u64 = LARGE_SEGMENT << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Used,
    Free,
    Unmapped,
}

/// One segment's blocks by offset; they tile `0..SEGMENT_SPAN`.
#[derive(Clone, Debug)]
struct Segment {
    blocks: BTreeMap<u64, (u64, State)>,
    page: u64,
}

impl Segment {
    fn new(page: u64) -> Segment {
        Segment {
            blocks: BTreeMap::from([(0, (SEGMENT_SPAN, State::Unmapped))]),
            page,
        }
    }

    /// Merges the block at `at` with neighbours of its state (never used ones); returns where
    /// the merged block starts.
    fn merge(&mut self, at: u64) -> u64 {
        let (mut at, (mut size, state)) = (at, self.blocks[&at]);
        debug_assert_ne!(state, State::Used);
        if let Some((&prev, &(psize, pstate))) = self.blocks.range(..at).next_back()
            && pstate == state
        {
            self.blocks.remove(&at);
            (at, size) = (prev, psize + size);
        }
        if let Some(&(nsize, nstate)) = self.blocks.get(&(at + size))
            && nstate == state
        {
            self.blocks.remove(&(at + size));
            size += nsize;
        }
        self.blocks.insert(at, (size, state));
        at
    }

    /// The mapped free block that fits `size` best.
    fn best_fit(&self, size: u64) -> Option<u64> {
        self.blocks
            .iter()
            .filter(|(_, (s, state))| *state == State::Free && *s >= size)
            .min_by_key(|(at, (s, _))| (*s, **at))
            .map(|(&at, _)| at)
    }

    /// Where to map for `size` bytes and how many bytes of pages that maps: the lowest
    /// unmapped block whose run of free and unmapped blocks (from the free block just below
    /// it, if any) spans `size`.
    fn expansion(&self, size: u64) -> (u64, u64) {
        for (&at, &(_, state)) in &self.blocks {
            if state != State::Unmapped {
                continue;
            }
            let start = match self.blocks.range(..at).next_back() {
                Some((&prev, &(_, State::Free))) => prev,
                _ => at,
            };
            let (mut spanned, mut pages) = (0, 0);
            for (_, &(s, state)) in self.blocks.range(start..) {
                if state == State::Used || spanned >= size {
                    break;
                }
                if state == State::Unmapped {
                    pages += (size - spanned).min(s).next_multiple_of(self.page);
                }
                spanned += s;
            }
            if spanned >= size {
                return (start, pages);
            }
        }
        unreachable!("the last block is unmapped and spans far more than a card")
    }

    /// Maps the pages [`Segment::expansion`] found from `start`, merging them with the free
    /// blocks of the run; returns the free block made, which spans `size`.
    fn map(&mut self, start: u64, size: u64) -> u64 {
        loop {
            let (s, state) = self.blocks[&start];
            if state == State::Free && s >= size {
                return start;
            }
            let next = if state == State::Free {
                start + s
            } else {
                start
            };
            let (ns, nstate) = self.blocks[&next];
            if nstate == State::Unmapped {
                let map = (size - (next - start)).min(ns).next_multiple_of(self.page);
                self.blocks.insert(next, (map, State::Free));
                if ns > map {
                    self.blocks.insert(next + map, (ns - map, State::Unmapped));
                }
            }
            assert_ne!(
                nstate,
                State::Used,
                "the run spans only free and unmapped blocks"
            );
            self.merge(next);
        }
    }

    /// Unmaps every whole page inside a free block; returns the bytes unmapped.
    fn unmap_free_pages(&mut self) -> u64 {
        let free: Vec<(u64, u64)> = self
            .blocks
            .iter()
            .filter(|(_, (_, state))| *state == State::Free)
            .map(|(&at, &(s, _))| (at, s))
            .collect();
        let mut unmapped = 0;
        for (at, s) in free {
            let (lo, hi) = (
                at.next_multiple_of(self.page),
                (at + s) / self.page * self.page,
            );
            if hi <= lo {
                continue;
            }
            self.blocks.remove(&at);
            if lo > at {
                self.blocks.insert(at, (lo - at, State::Free));
            }
            if at + s > hi {
                self.blocks.insert(hi, (at + s - hi, State::Free));
            }
            self.blocks.insert(lo, (hi - lo, State::Unmapped));
            self.merge(lo);
            unmapped += hi - lo;
        }
        unmapped
    }
}

/// An expandable-segments pool: see the module doc.
#[derive(Clone, Debug)]
pub struct ExpandablePool {
    segments: BTreeMap<(Stream, Size), Segment>,
    usage: Usage,
}

impl ExpandablePool {
    /// An empty pool on a device that lets it map at most `limit` bytes.
    pub fn with_limit(limit: u64) -> ExpandablePool {
        ExpandablePool {
            segments: BTreeMap::new(),
            usage: Usage::under(limit),
        }
    }

    fn base(stream: Stream, class: Size) -> u64 {
        let index = stream as u64 * 2 + class as u64;
        (index + 1) * SEGMENT_SPAN
    }

    /// A block for `bytes` on `stream`, or why the device could not map the pages for one.
    pub fn try_alloc(&mut self, bytes: u64, stream: Stream) -> Result<Range<u64>, OutOfMemory> {
        let request = Request::new(bytes);
        let (size, class) = (request.rounded, request.class);
        let page = match class {
            Size::Small => SMALL_SEGMENT,
            Size::Large => LARGE_SEGMENT,
        };
        let key = (stream, class);
        let seg = self
            .segments
            .entry(key)
            .or_insert_with(|| Segment::new(page));
        let at = match seg.best_fit(size) {
            Some(at) => at,
            None => {
                let mut released = 0;
                if !self.usage.fits(seg.expansion(size).1) {
                    released = self.release_cached();
                }
                let seg = self.segments.get_mut(&key).expect("made above");
                let (start, pages) = seg.expansion(size);
                if !self.usage.fits(pages) {
                    return Err(self.usage.refusal(pages, bytes, released));
                }
                self.usage.reserve(pages);
                seg.map(start, size)
            }
        };
        let seg = self.segments.get_mut(&key).expect("made above");
        let (block, state) = seg.blocks[&at];
        debug_assert!(state == State::Free && block >= size);
        let kept = if block - size >= MIN_BLOCK {
            seg.blocks.insert(at + size, (block - size, State::Free));
            size
        } else {
            block
        };
        seg.blocks.insert(at, (kept, State::Used));
        self.usage.hand_out(kept);
        let base = Self::base(stream, class);
        Ok(base + at..base + at + kept)
    }

    /// The tensor at `addr` was freed: its block merges with its free neighbours.
    pub fn free(&mut self, addr: u64) {
        let key = self
            .segments
            .keys()
            .copied()
            .find(|&(stream, class)| {
                let base = Self::base(stream, class);
                (base..base + SEGMENT_SPAN).contains(&addr)
            })
            .expect("freeing a block we handed out");
        let seg = self.segments.get_mut(&key).expect("found above");
        let at = addr - Self::base(key.0, key.1);
        let (size, state) = seg.blocks[&at];
        assert_eq!(state, State::Used, "block at {addr:#x} freed twice");
        self.usage.take_back(size);
        seg.blocks.insert(at, (size, State::Free));
        seg.merge(at);
    }

    /// Unmaps every whole free page of every segment (`torch.cuda.empty_cache()`); returns the
    /// bytes given back.
    pub fn release_cached(&mut self) -> u64 {
        let released: u64 = self
            .segments
            .values_mut()
            .map(Segment::unmap_free_pages)
            .sum();
        self.usage.give_back(released);
        released
    }

    /// What the pool maps and hands out, with its peaks.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Starts the peaks again from now (`torch.cuda.reset_peak_memory_stats`).
    pub fn reset_peaks(&mut self) {
        self.usage.reset_peaks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Stream::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_segment_grows_by_whole_pages_and_tiles_its_blocks() {
        let mut pool = ExpandablePool::with_limit(u64::MAX);
        let a = pool.try_alloc(12 * MIB, Main).unwrap();
        assert_eq!(pool.usage().reserved(), 20 * MIB, "one 20 MiB page");
        let b = pool.try_alloc(12 * MIB, Main).unwrap();
        assert_eq!(b.start, a.end, "the next block starts where the last ended");
        assert_eq!(
            pool.usage().reserved(),
            40 * MIB,
            "8 MiB were free at the end: one more page"
        );
        // Without the option the two would hold 24 MiB; with it, 40 MiB mapped, 16 free at
        // the end for the next request.
        let c = pool.try_alloc(300, Main).unwrap();
        assert_eq!(
            pool.usage().reserved(),
            42 * MIB,
            "the small half has its own segment"
        );
        pool.free(c.start);
        assert_eq!(pool.usage().allocated(), 24 * MIB);
    }

    #[test]
    fn freed_neighbours_merge_into_one_block_across_former_segments() {
        let mut pool = ExpandablePool::with_limit(u64::MAX);
        let a = pool.try_alloc(12 * MIB, Main).unwrap();
        let b = pool.try_alloc(12 * MIB, Main).unwrap();
        pool.free(a.start);
        pool.free(b.start);
        // 24 MiB from two 12 MiB blocks: without the option they would be two segments that
        // never merge.
        let c = pool.try_alloc(24 * MIB, Main).unwrap();
        assert_eq!(c.start, a.start);
        assert_eq!(pool.usage().reserved(), 40 * MIB);
    }

    #[test]
    fn a_full_device_unmaps_the_free_tail_then_retries() {
        let mut pool = ExpandablePool::with_limit(60 * MIB);
        let a = pool.try_alloc(30 * MIB, Main).unwrap();
        let b = pool.try_alloc(10 * MIB, Side).unwrap();
        assert_eq!(pool.usage().reserved(), 40 * MIB + 20 * MIB);
        pool.free(b.start);
        // Main needs 30 MiB more: its 10 MiB free tail plus one 20 MiB page; the device is
        // full, so Side's free page is unmapped first.
        let c = pool.try_alloc(30 * MIB, Main).unwrap();
        assert_eq!(c.start, a.end);
        assert_eq!(pool.usage().released(), 20 * MIB);
        assert_eq!(pool.usage().reserved(), 60 * MIB);
        let err = pool.try_alloc(MIB * 2, Side).unwrap_err();
        assert_eq!(
            (err.tried, err.reserved, err.allocated),
            (20 * MIB, 60 * MIB, 60 * MIB)
        );
    }

    #[test]
    fn blocks_split_whenever_512_bytes_remain() {
        let mut pool = ExpandablePool::with_limit(u64::MAX);
        let a = pool.try_alloc(19 * MIB, Main).unwrap();
        assert_eq!(a.end - a.start, 19 * MIB, "1 MiB remains and is split off");
        let b = pool.try_alloc(MIB + 512, Main).unwrap();
        assert_eq!(b.start, a.end);
        assert_eq!(
            pool.usage().reserved(),
            40 * MIB,
            "1 MiB + 512 B needed one more page"
        );
    }

    #[test]
    fn unmapped_holes_are_mapped_again_lowest_address_first() {
        let mut pool = ExpandablePool::with_limit(60 * MIB);
        let _a = pool.try_alloc(20 * MIB, Main).unwrap();
        let b = pool.try_alloc(20 * MIB, Main).unwrap();
        let _c = pool.try_alloc(20 * MIB, Main).unwrap();
        pool.free(b.start);
        // Side's first page does not fit: b's page, free, is unmapped to make room.
        let side = pool.try_alloc(16 * MIB, Side).unwrap();
        assert_eq!(
            (pool.usage().released(), pool.usage().reserved()),
            (20 * MIB, 60 * MIB)
        );
        assert!(
            pool.try_alloc(20 * MIB, Main).is_err(),
            "nothing free to unmap"
        );
        pool.free(side.start);
        let again = pool.try_alloc(20 * MIB, Main).unwrap();
        assert_eq!(
            again, b,
            "the hole b left, mapped again, not the segment's end"
        );
    }
}
