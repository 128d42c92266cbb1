//! PyTorch's caching allocator with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`
//! (`c10/cuda/CUDACachingAllocator.cpp`, Note [Expandable Segments]), reduced to the rules that
//! decide bytes reserved.
//!
//! - **One segment per stream and pool half**, reserved as address space for the whole card;
//!   physical pages are mapped into it as needed: 2 MiB pages for the small half, 20 MiB for
//!   the large ([`SMALL_SEGMENT`], [`LARGE_SEGMENT`]). Bytes reserved are the pages mapped.
//! - **Rounding and halves** as without the option ([`Request`]): 512 B, small up to 1 MiB.
//! - **Best fit** among the mapped free blocks, smallest then lowest address (`get_free_block`),
//!   except that a block is weighed by what it could grow to (its size plus the unmapped run
//!   after it) and passed over for the next one in that order that could grow to less; and
//!   **splitting** whenever at least 512 B remain (`should_split` with the option on, in
//!   both halves). A freed block merges with free mapped neighbours (`try_merge_blocks`); the
//!   segment is one run of address space, so blocks that would have been separate segments
//!   merge.
//! - **Mapping** (`find_expandable_block`, `map_block`). When no mapped free block fits, the
//!   lowest unmapped block that, with the free block just below it and the blocks after it,
//!   spans the request is mapped, page by page, as far as the request needs.
//! - **Full device** (`release_cached_blocks` → `unmap_block`). The limit is checked against
//!   the segment the request would get without the option (`alloc_size`: 2 MiB, 20 MiB, or the
//!   request rounded to 2 MiB), not the pages it maps. When that does not fit, every whole page
//!   inside a free block is unmapped, then it is checked once more; then it is out of memory
//!   ([`OutOfMemory`], whose `tried` is that segment, as PyTorch's message prints it).
//!
//! One stream's use of another stream's block (`record_stream`) is not modelled: Part III
//! replays one stream.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::pool::{LARGE_SEGMENT, MIN_BLOCK, Request, Rules, SMALL_SEGMENT, Size, StreamId};

use crate::rounding::Divisions;
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
    /// The free blocks as `(size, offset)`: the order of PyTorch's free set within one stream.
    free: BTreeSet<(u64, u64)>,
    page: u64,
}

impl Segment {
    fn new(page: u64) -> Segment {
        Segment {
            blocks: BTreeMap::from([(0, (SEGMENT_SPAN, State::Unmapped))]),
            free: BTreeSet::new(),
            page,
        }
    }

    /// Sets the block at `at`, keeping the free set in step.
    fn put(&mut self, at: u64, size: u64, state: State) {
        if let Some((old, State::Free)) = self.blocks.insert(at, (size, state)) {
            self.free.remove(&(old, at));
        }
        if state == State::Free {
            self.free.insert((size, at));
        }
    }

    /// Removes the block at `at`, keeping the free set in step.
    fn cut(&mut self, at: u64) -> (u64, State) {
        let (size, state) = self.blocks.remove(&at).expect("a block starts there");
        if state == State::Free {
            self.free.remove(&(size, at));
        }
        (size, state)
    }

    /// Merges the block at `at` with neighbours of its state (never used ones); returns where
    /// the merged block starts.
    fn merge(&mut self, at: u64) -> u64 {
        let (mut at, (mut size, state)) = (at, self.blocks[&at]);
        debug_assert_ne!(state, State::Used);
        if let Some((&prev, &(psize, pstate))) = self.blocks.range(..at).next_back()
            && pstate == state
        {
            self.cut(at);
            (at, size) = (prev, psize + size);
        }
        if let Some(&(nsize, nstate)) = self.blocks.get(&(at + size))
            && nstate == state
        {
            self.cut(at + size);
            size += nsize;
        }
        self.put(at, size, state);
        at
    }

    /// The mapped free block that fits `size` best (`get_free_block`): the smallest, then the
    /// lowest, except that a block is weighed by what it could grow to, its size plus the
    /// unmapped run after it, and passed over while the next block in the free set's order
    /// could grow to less. So the block at the segment's mapped end is kept for requests
    /// nothing else fits.
    fn best_fit(&self, size: u64) -> Option<u64> {
        let grows = |&(s, at): &(u64, u64)| match self.blocks.get(&(at + s)) {
            Some(&(unmapped, State::Unmapped)) => s + unmapped,
            _ => s,
        };
        let mut fits = self.free.range((size, 0)..);
        let mut best = fits.next()?;
        for next in fits {
            if grows(next) >= grows(best) {
                break;
            }
            best = next;
        }
        Some(best.1)
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
                self.put(next, map, State::Free);
                if ns > map {
                    self.put(next + map, ns - map, State::Unmapped);
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
            self.cut(at);
            if lo > at {
                self.put(at, lo - at, State::Free);
            }
            if at + s > hi {
                self.put(hi, at + s - hi, State::Free);
            }
            self.put(lo, hi - lo, State::Unmapped);
            self.merge(lo);
            unmapped += hi - lo;
        }
        unmapped
    }
}

/// An expandable-segments pool: see the module doc.
#[derive(Clone, Debug)]
pub struct ExpandablePool {
    segments: BTreeMap<(StreamId, Size), Segment>,
    divisions: Divisions,
    usage: Usage,
}

impl ExpandablePool {
    /// An empty pool on a device that lets it map at most `limit` bytes.
    pub fn with_limit(limit: u64) -> ExpandablePool {
        ExpandablePool {
            segments: BTreeMap::new(),
            divisions: Divisions::default(),
            usage: Usage::under(limit),
        }
    }

    /// The pool with `roundup_power2_divisions` set.
    pub fn with_divisions(self, divisions: Divisions) -> ExpandablePool {
        ExpandablePool { divisions, ..self }
    }

    fn base(stream: StreamId, class: Size) -> u64 {
        let index = u64::from(stream.0) * 2 + class as u64;
        (index + 1) * SEGMENT_SPAN
    }

    /// A block for `bytes` on `stream`, or why the device could not map the pages for one.
    pub fn try_alloc(
        &mut self,
        bytes: u64,
        stream: impl Into<StreamId>,
    ) -> Result<Range<u64>, OutOfMemory> {
        let stream = stream.into();
        let request = Request::rounded(Rules::PyTorch, self.divisions, bytes);
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
                // The cap is checked against the segment the request would get without the
                // option (`alloc_block` reads `alloc_size`), not the pages it maps.
                let mut released = 0;
                if !self.usage.fits(request.segment) {
                    released = self.release_cached();
                }
                if !self.usage.fits(request.segment) {
                    return Err(self.usage.refusal(request.segment, bytes, released));
                }
                let seg = self.segments.get_mut(&key).expect("made above");
                let (start, pages) = seg.expansion(size);
                self.usage.reserve(pages);
                seg.map(start, size)
            }
        };
        let seg = self.segments.get_mut(&key).expect("made above");
        let (block, state) = seg.blocks[&at];
        debug_assert!(state == State::Free && block >= size);
        let kept = if block - size >= MIN_BLOCK {
            seg.put(at + size, block - size, State::Free);
            size
        } else {
            block
        };
        seg.put(at, kept, State::Used);
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
        seg.put(at, size, State::Free);
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
    use crate::program::Stream::*;

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
        let mut pool = ExpandablePool::with_limit(70 * MIB);
        let a = pool.try_alloc(30 * MIB, Main).unwrap();
        let b = pool.try_alloc(10 * MIB, Side).unwrap();
        assert_eq!(pool.usage().reserved(), 40 * MIB + 20 * MIB);
        pool.free(b.start);
        // Main's 30 MiB would be its 10 MiB free tail plus one 20 MiB page, but the limit is
        // checked against the 30 MiB segment it would get without the option: 60 + 30 > 70,
        // so Side's free page is unmapped first, and 40 + 30 fits.
        let c = pool.try_alloc(30 * MIB, Main).unwrap();
        assert_eq!(c.start, a.end);
        assert_eq!(pool.usage().released(), 20 * MIB);
        assert_eq!(pool.usage().reserved(), 60 * MIB);
        let err = pool.try_alloc(12 * MIB, Side).unwrap_err();
        assert_eq!(
            (err.tried, err.reserved, err.allocated),
            (12 * MIB, 60 * MIB, 60 * MIB)
        );
    }

    #[test]
    fn the_limit_reads_the_requests_segment_not_the_pages_it_would_map() {
        let mut pool = ExpandablePool::with_limit(60 * MIB);
        pool.try_alloc(22 * MIB, Main).unwrap();
        assert_eq!(pool.usage().reserved(), 40 * MIB, "18 MiB free at the end");
        // 30 MiB more needs one more page (40 + 20 = 60, within the limit), but PyTorch
        // checks 40 + 30 > 60 and refuses, naming the 30 MiB segment.
        let err = pool.try_alloc(30 * MIB, Main).unwrap_err();
        assert_eq!((err.tried, err.reserved), (30 * MIB, 40 * MIB));
    }

    #[test]
    fn best_fit_keeps_the_block_at_the_mapped_end_for_what_nothing_else_fits() {
        let mut pool = ExpandablePool::with_limit(u64::MAX);
        let a = pool.try_alloc(8 * MIB, Main).unwrap();
        let _b = pool.try_alloc(2 * MIB, Main).unwrap();
        let _c = pool.try_alloc(6 * MIB, Main).unwrap();
        pool.free(a.start);
        // Free: a's 8 MiB and the 4 MiB at the mapped end of the first page. By size alone
        // 3 MiB fits the end block best; it could grow into the unmapped space, so a's
        // block, which could grow to less, is taken.
        let d = pool.try_alloc(3 * MIB, Main).unwrap();
        assert_eq!(d.start, a.start);
        // 5 MiB: a's remaining 5 MiB, not the end block; nothing new mapped.
        let e = pool.try_alloc(5 * MIB, Main).unwrap();
        assert_eq!(e.start, d.end);
        assert_eq!(pool.usage().reserved(), 20 * MIB);
        // 4 MiB: only the end block fits.
        let f = pool.try_alloc(4 * MIB, Main).unwrap();
        assert_eq!(f.start, 16 * MIB + a.start);
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
