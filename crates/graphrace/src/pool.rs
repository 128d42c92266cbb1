//! The graph's private pool: PyTorch's caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! native backend, default settings) reduced to the rules that decide where a tensor lands.
//!
//! - **Rounding.** A request is rounded up to a multiple of 512 B, at least 512 B
//!   (`kMinBlockSize`, `round_size`; `roundup_power2_divisions` is off by default).
//! - **Two pools.** A rounded request of at most 1 MiB (`kSmallSize`) is *small* and is served
//!   only from small segments; anything larger is *large* and only from large segments
//!   (`get_pool`). A graph's private pool keeps the same two halves.
//! - **Segment sizes.** When no free block fits, a new segment is taken from the device: 2 MiB
//!   for a small request (`kSmallBuffer`), 20 MiB for a large one under 10 MiB
//!   (`kLargeBuffer` for requests below `kMinLargeAlloc`), and the request rounded up to
//!   2 MiB (`kRoundLarge`) from 10 MiB on (`get_allocation_size`).
//! - **Stream tags.** A block belongs to the stream it was allocated on and is reused only by
//!   requests on that stream (the free lists are ordered by stream first). Stream order makes
//!   that safe for work on that stream; a use on another stream is invisible to the allocator
//!   unless recorded ([`Pool::free`] with `recorded = true`, PyTorch's `record_stream`).
//! - **Best fit.** Among the free blocks of the right pool and stream, the smallest that fits,
//!   then the lowest address (`BlockComparatorSize`, `get_free_block`). A block freed during
//!   capture is reusable at once by a later request in host order.
//! - **Splitting.** The block handed out is cut to the request when the rest is worth keeping:
//!   in the small pool when at least 512 B remain, in the large pool when more than 1 MiB
//!   remains (`should_split`; `max_split_size` is unlimited by default, so no block is too big
//!   to split). The rest stays a free block of the same segment and stream.
//! - **Merging.** A freed block merges with free neighbours of its own segment
//!   (`free_block`, `try_merge_blocks`); blocks of different segments never merge.
//! - **Deferred frees.** A block freed with a recorded use on another stream while a capture is
//!   under way is held back, unmerged, until the capture ends
//!   (`needs_events_deferred_until_no_capture`): no request of the capture gets it.
//! - **Free and retry.** With a device limit ([`Pool::with_limit`]), a new segment that would
//!   pass it first makes the pool give back every cached segment that is one free block
//!   (`release_cached_blocks`; `release_available_cached_blocks` does nothing while
//!   `max_split_size` is unlimited), then try once more; only then is it out of memory
//!   ([`OutOfMemory`]). A segment with any block in use is never given back.
//!
//! Expandable segments are [`crate::expandable`]. Left out, because neither Part II's decode
//! step nor Part III's training step reaches them: garbage collection and the other
//! `PYTORCH_CUDA_ALLOC_CONF` options.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

use crate::program::Stream;
use crate::rounding::Divisions;
use crate::usage::{OutOfMemory, Usage};

const MIB: u64 = 1 << 20;
/// Every block is a multiple of this many bytes, and at least this large (`kMinBlockSize`).
pub const MIN_BLOCK: u64 = 512;
/// Rounded requests up to this size come from the small pool (`kSmallSize`, 1 MiB).
pub const SMALL_LIMIT: u64 = MIB;
/// A small pool's segment (`kSmallBuffer`, 2 MiB).
pub const SMALL_SEGMENT: u64 = 2 * MIB;
/// Large requests below this size get a [`LARGE_SEGMENT`] (`kMinLargeAlloc`, 10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// The segment of a large request under [`MIN_LARGE_ALLOC`] (`kLargeBuffer`, 20 MiB).
pub const LARGE_SEGMENT: u64 = 20 * MIB;
/// Larger requests get a segment of their size rounded up to this (`kRoundLarge`, 2 MiB).
pub const ROUND_LARGE: u64 = 2 * MIB;

/// Which half of the pool serves a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Size {
    /// Rounded requests of at most [`SMALL_LIMIT`].
    Small,
    /// Everything larger.
    Large,
}

impl Size {
    /// The half's name, as PyTorch's memory snapshots call it.
    pub fn name(self) -> &'static str {
        match self {
            Size::Small => "small",
            Size::Large => "large",
        }
    }
}

/// Which segment sizes the pool takes from the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rules {
    /// PyTorch's ([`Request::new`]): 2 MiB small segments, 20 MiB under 10 MiB, else rounded
    /// to 2 MiB.
    #[default]
    PyTorch,
    /// This model's rules before it followed PyTorch's: every large segment is the request
    /// rounded up to 2 MiB. Kept only to read the GPU records made with them (the GPU arm laid
    /// its tensors out where the model's pool put them); everything else is as `PyTorch`.
    Rounded2MiB,
}

/// What the allocator's rules make of a request before looking at any free block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The request rounded to [`MIN_BLOCK`]: the block handed out is at least this.
    pub rounded: u64,
    /// The half of the pool that serves it.
    pub class: Size,
    /// The segment taken from the device if no free block fits.
    pub segment: u64,
}

impl Request {
    /// The rules for `bytes`: rounding (`round_size`), pool (`get_pool`) and segment size
    /// (`get_allocation_size`).
    pub fn new(bytes: u64) -> Request {
        Request::under(Rules::PyTorch, bytes)
    }

    /// [`Request::new`] under `rules`.
    pub fn under(rules: Rules, bytes: u64) -> Request {
        Request::rounded(rules, Divisions::default(), bytes)
    }

    /// [`Request::under`] with `roundup_power2_divisions` set.
    pub fn rounded(rules: Rules, divisions: Divisions, bytes: u64) -> Request {
        let rounded = divisions.round(bytes);
        let class = if rounded <= SMALL_LIMIT {
            Size::Small
        } else {
            Size::Large
        };
        let segment = match class {
            Size::Small => SMALL_SEGMENT,
            Size::Large if rounded < MIN_LARGE_ALLOC && rules == Rules::PyTorch => LARGE_SEGMENT,
            Size::Large => rounded.next_multiple_of(ROUND_LARGE),
        };
        Request {
            rounded,
            class,
            segment,
        }
    }

    /// Whether a free block of `block` bytes is cut down to this request (`should_split`): the
    /// rest must be at least [`MIN_BLOCK`] in the small pool, more than [`SMALL_LIMIT`] in the
    /// large one.
    pub fn splits(&self, block: u64) -> bool {
        let rest = block - self.rounded;
        match self.class {
            Size::Small => rest >= MIN_BLOCK,
            Size::Large => rest > SMALL_LIMIT,
        }
    }
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

/// A free block's place in the search for a fit: PyTorch keeps each half's free blocks in a
/// set ordered by stream, size, address (`BlockComparatorSize`), so the first at or after
/// `(half, stream, request, 0)` is the best fit.
type FreeKey = (Size, Stream, u64, u64);

/// The pool's blocks by address.
#[derive(Clone, Debug)]
pub struct Pool {
    blocks: BTreeMap<u64, Block>,
    /// Every block in state [`State::Free`], as [`FreeKey`]s.
    free: BTreeSet<FreeKey>,
    next_segment_at: u64,
    segments: u32,
    rules: Rules,
    /// Segment sizes by segment number, while the pool holds them.
    held: BTreeMap<u32, u64>,
    /// Where the driver put each new segment, when a GPU's record says so (see
    /// [`Pool::place_segments`]).
    placed: VecDeque<(u64, u64)>,
    divisions: Divisions,
    usage: Usage,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            blocks: BTreeMap::new(),
            free: BTreeSet::new(),
            next_segment_at: 0,
            segments: 0,
            rules: Rules::default(),
            held: BTreeMap::new(),
            placed: VecDeque::new(),
            divisions: Divisions::default(),
            usage: Usage::under(u64::MAX),
        }
    }
}

impl Pool {
    /// An empty pool: no segment taken from the device yet.
    pub fn new() -> Pool {
        Pool::default()
    }

    /// An empty pool under other `rules`.
    pub fn with_rules(rules: Rules) -> Pool {
        Pool {
            rules,
            ..Pool::default()
        }
    }

    /// An empty pool under PyTorch's rules on a device that lets it hold at most `limit` bytes
    /// of segments (what `cudaMalloc` would grant it: the card less the CUDA context and other
    /// processes, or `set_per_process_memory_fraction`'s cap).
    pub fn with_limit(limit: u64) -> Pool {
        Pool {
            usage: Usage::under(limit),
            ..Pool::default()
        }
    }

    /// A block for `bytes` on `stream`; returns the block's address range. Without a limit it
    /// cannot fail.
    ///
    /// # Panics
    /// When the pool has a limit and the device is full: use [`Pool::try_alloc`].
    pub fn alloc(&mut self, bytes: u64, stream: Stream) -> Range<u64> {
        self.try_alloc(bytes, stream)
            .unwrap_or_else(|e| panic!("{e}: use try_alloc under a limit"))
    }

    /// A block for `bytes` on `stream`, or why the device could not give one: the free block
    /// that fits best, else a new segment, else (past the limit) the cached segments given
    /// back and a new segment tried once more.
    pub fn try_alloc(&mut self, bytes: u64, stream: Stream) -> Result<Range<u64>, OutOfMemory> {
        let request = Request::rounded(self.rules, self.divisions, bytes);
        let (size, class) = (request.rounded, request.class);
        let best = self
            .free
            .range((class, stream, size, 0)..)
            .next()
            .filter(|&&(c, s, _, _)| c == class && s == stream)
            .map(|&(_, _, _, addr)| addr);
        let addr = match best {
            Some(addr) => addr,
            None => {
                let mut released = 0;
                if !self.usage.fits(request.segment) {
                    released = self.release_cached();
                }
                if !self.usage.fits(request.segment) {
                    return Err(self.usage.refusal(request.segment, bytes, released));
                }
                self.new_segment(request, stream)
            }
        };
        let block = self.blocks.get_mut(&addr).expect("a free block was found");
        self.free.remove(&key(addr, block));
        let rest = block.size - size;
        let split = request.splits(block.size);
        block.state = State::Used;
        if split {
            block.size = size;
            let tail = Block {
                size: rest,
                state: State::Free,
                ..*block
            };
            self.blocks.insert(addr + size, tail);
            self.free.insert(key(addr + size, &tail));
        }
        let size = self.blocks[&addr].size;
        self.usage.hand_out(size);
        Ok(addr..addr + size)
    }

    /// The pool with `roundup_power2_divisions` set.
    pub fn with_divisions(self, divisions: Divisions) -> Pool {
        Pool { divisions, ..self }
    }

    /// Puts the next segments where a GPU's driver put them: `(address, bytes)` in the order
    /// `cudaMalloc` returned them (a memory snapshot's `segment_alloc` events). Best fit breaks
    /// ties by address, so where the driver puts a segment can decide which block a request
    /// gets; left alone, the pool lays segments out one after another. A segment whose size
    /// is not the next one's ends the placing: the pool has parted from the GPU's.
    pub fn place_segments(&mut self, segments: impl IntoIterator<Item = (u64, u64)>) {
        self.placed = segments.into_iter().collect();
        self.next_segment_at = self.placed.iter().map(|(a, b)| a + b).max().unwrap_or(0);
    }

    fn new_segment(&mut self, request: Request, stream: Stream) -> u64 {
        let (bytes, class) = (request.segment, request.class);
        let addr = match self.placed.pop_front() {
            Some((addr, size)) if size == bytes => addr,
            _ => {
                self.placed.clear();
                let addr = self.next_segment_at;
                self.next_segment_at += bytes;
                addr
            }
        };
        self.segments += 1;
        self.held.insert(self.segments, bytes);
        self.usage.reserve(bytes);
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
        self.usage.take_back(block.size);
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

    /// Merges the block at `addr`, just made free, with its free neighbours of the same
    /// segment, and files the merged block among the free ones.
    fn merge_around(&mut self, addr: u64) {
        let mut addr = addr;
        if let Some((&prev, p)) = self.blocks.range(..addr).next_back() {
            let b = self.blocks[&addr];
            if p.state == State::Free && p.segment == b.segment && prev + p.size == addr {
                self.free.remove(&key(prev, p));
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
            self.free.remove(&key(addr + b.size, &next));
            self.blocks.get_mut(&addr).expect("just seen").size += next.size;
            self.blocks.remove(&(addr + b.size));
        }
        self.free.insert(key(addr, &self.blocks[&addr]));
    }

    /// Gives back to the device every segment that is one free block, whole (PyTorch's
    /// `release_cached_blocks`, also `torch.cuda.empty_cache()`); returns the bytes given back.
    pub fn release_cached(&mut self) -> u64 {
        let whole: Vec<(u64, u32)> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.state == State::Free && self.held.get(&b.segment) == Some(&b.size))
            .map(|(addr, b)| (*addr, b.segment))
            .collect();
        let mut released = 0;
        for (addr, segment) in whole {
            let block = self.blocks.remove(&addr).expect("listed above");
            self.free.remove(&key(addr, &block));
            released += self.held.remove(&segment).expect("listed above");
        }
        self.usage.give_back(released);
        released
    }

    /// What the pool holds and hands out, with its peaks.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Starts the peaks again from now (`torch.cuda.reset_peak_memory_stats`).
    pub fn reset_peaks(&mut self) {
        self.usage.reset_peaks();
    }
}

/// `block` at `addr` as the free set orders it.
fn key(addr: u64, block: &Block) -> FreeKey {
    (block.class, block.stream, block.size, addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::Peaks;
    use Stream::*;

    const KIB: u64 = 1024;

    /// The segment a fresh pool takes for one request of `bytes`, and the block it hands out.
    fn first(bytes: u64) -> (u64, Range<u64>) {
        let mut pool = Pool::new();
        let block = pool.alloc(bytes, Main);
        (pool.usage().reserved(), block)
    }

    #[test]
    fn segment_sizes_follow_get_allocation_size() {
        // 512 B and 1 MiB are small: a 2 MiB segment, the block cut to the request.
        assert_eq!(first(512), (2 * MIB, 0..512));
        assert_eq!(first(MIB), (2 * MIB, 0..MIB));
        assert_eq!(Request::new(MIB).class, Size::Small);
        // Just over 1 MiB is large: a 20 MiB segment.
        assert_eq!(Request::new(MIB + 1).class, Size::Large);
        assert_eq!(first(MIB + 1).0, 20 * MIB);
        // 4 MiB: a 20 MiB segment, split (16 MiB remain).
        assert_eq!(first(4 * MIB), (20 * MIB, 0..4 * MIB));
        // Under 10 MiB still gets 20 MiB; from 10 MiB on, the request rounded to 2 MiB. The
        // rule reads the rounded size: 10 MiB - 1 B rounds to 10 MiB.
        assert_eq!(first(10 * MIB - 512).0, 20 * MIB);
        assert_eq!(first(10 * MIB - 1).0, 10 * MIB);
        assert_eq!(first(10 * MIB).0, 10 * MIB);
        // 12 MiB: a segment of exactly 12 MiB, the whole of it the block.
        assert_eq!(first(12 * MIB), (12 * MIB, 0..12 * MIB));
        // 12 MiB + 1 B: a 14 MiB segment; 2 MiB - 512 B remain, more than 1 MiB: split.
        assert_eq!(first(12 * MIB + 1), (14 * MIB, 0..12 * MIB + 512));
        // 13.5 MiB: a 14 MiB segment; 512 KiB would remain, not worth a block.
        assert_eq!(first(13 * MIB + 512 * KIB), (14 * MIB, 0..14 * MIB));
    }

    #[test]
    fn requests_round_to_512_bytes() {
        assert_eq!(Request::new(0).rounded, 512);
        assert_eq!(Request::new(1).rounded, 512);
        assert_eq!(Request::new(512).rounded, 512);
        assert_eq!(Request::new(513).rounded, 1024);
        assert_eq!(Request::new(MIB + 1).rounded, MIB + 512);
        // 1 MiB - 1 rounds to 1 MiB: still small.
        assert_eq!(Request::new(MIB - 1).class, Size::Small);
    }

    #[test]
    fn small_blocks_split_at_512_bytes_and_large_ones_above_1_mib() {
        // Small: a 2 MiB segment cut down to 512 B.
        let mut pool = Pool::new();
        let a = pool.alloc(MIB, Side);
        let b = pool.alloc(MIB - 512, Side);
        assert_eq!(b, a.end..SMALL_SEGMENT - 512, "512 B remain: split");
        let c = pool.alloc(300, Side);
        assert_eq!(c, b.end..SMALL_SEGMENT, "the 512 B remainder was a block");
        assert_eq!(pool.usage().reserved(), SMALL_SEGMENT);
        assert!(Request::new(MIB).splits(MIB + 512));
        assert!(!Request::new(MIB).splits(MIB));
        // Large: a remainder of exactly 1 MiB stays with the block; 1 MiB + 512 B is split off.
        let r = Request::new(3 * MIB);
        assert!(!r.splits(4 * MIB));
        assert!(r.splits(4 * MIB + 512));
        let mut pool = Pool::new();
        let big = pool.alloc(19 * MIB, Main);
        assert_eq!(big, 0..20 * MIB, "1 MiB would remain: not split");
        let mut pool = Pool::new();
        let big = pool.alloc(19 * MIB - 512, Main);
        assert_eq!(big, 0..19 * MIB - 512, "1 MiB + 512 B remain: split");
    }

    #[test]
    fn small_and_large_requests_never_share_a_segment() {
        let mut pool = Pool::new();
        let large = pool.alloc(4 * MIB, Main);
        let small = pool.alloc(4 * KIB, Main);
        assert!(
            small.start >= 20 * MIB,
            "16 MiB free in the large segment, unused"
        );
        assert_eq!(pool.usage().reserved(), 20 * MIB + 2 * MIB);
        pool.free(small.start, false);
        pool.free(large.start, false);
        let again = pool.alloc(MIB + 1, Main);
        assert_eq!(
            again.start, large.start,
            "a large request takes a large block"
        );
    }

    #[test]
    fn a_freed_block_goes_to_the_next_fitting_request_on_its_stream() {
        let mut pool = Pool::new();
        let a = pool.alloc(30 * MIB, Main);
        pool.free(a.start, false);
        let other_stream = pool.alloc(20 * MIB, Side);
        assert!(other_stream.start >= a.end, "side never gets main's block");
        let b = pool.alloc(20 * MIB, Main);
        assert_eq!(b.start, a.start, "main reuses its freed block");
        assert_eq!(pool.usage().reserved(), 30 * MIB + 20 * MIB);
    }

    #[test]
    fn the_remainder_of_a_segment_keeps_the_segments_stream() {
        let mut pool = Pool::new();
        let a = pool.alloc(2 * MIB, Side);
        let b = pool.alloc(2 * MIB, Main);
        assert!(
            b.start >= 20 * MIB,
            "main never gets the side segment's 18 MiB"
        );
        let c = pool.alloc(2 * MIB, Side);
        assert_eq!(c.start, a.end, "side does");
    }

    #[test]
    fn best_fit_takes_the_smallest_block_then_the_lowest_address() {
        let mut pool = Pool::new();
        // Three 12 MiB segments (exact), then free the first and third, and a 20 MiB segment
        // with a 6 MiB hole.
        let s1 = pool.alloc(12 * MIB, Main);
        let s2 = pool.alloc(12 * MIB, Main);
        let s3 = pool.alloc(12 * MIB, Main);
        pool.free(s3.start, false);
        pool.free(s1.start, false);
        let x = pool.alloc(11 * MIB + 512 * KIB, Main);
        assert_eq!(x, s1, "equal sizes: the lower address");
        let _ = s2;
        let y = pool.alloc(6 * MIB, Main);
        assert_eq!(y.start, s3.start, "the only free block that fits");
        assert_eq!(y.end, s3.start + 6 * MIB, "split: 6 MiB remain");
        let z = pool.alloc(5 * MIB, Main);
        assert_eq!(
            z.start, y.end,
            "the 6 MiB remainder, smaller than any new segment"
        );
    }

    #[test]
    fn best_fit_splits_and_merges_back() {
        let mut pool = Pool::new();
        let seg = pool.alloc(12 * MIB, Main);
        pool.free(seg.start, false);
        let a = pool.alloc(3 * MIB, Main);
        assert_eq!(a, 0..3 * MIB, "split: 9 MiB remain");
        let b = pool.alloc(8 * MIB + 512 * KIB, Main);
        assert_eq!(b, a.end..seg.end, "512 KiB would remain: not split");
        pool.free(a.start, false);
        pool.free(b.start, false);
        assert_eq!(pool.alloc(12 * MIB, Main), seg, "the halves merged back");
        assert_eq!(pool.usage().reserved(), 12 * MIB);
    }

    #[test]
    fn blocks_of_different_segments_never_merge() {
        let mut pool = Pool::new();
        let a = pool.alloc(12 * MIB, Main);
        let b = pool.alloc(12 * MIB, Main);
        assert_eq!(a.end, b.start, "adjacent segments");
        pool.free(a.start, false);
        pool.free(b.start, false);
        let c = pool.alloc(24 * MIB, Main);
        assert!(
            c.start >= b.end,
            "two free neighbours of different segments stay apart"
        );
    }

    #[test]
    fn the_older_rules_round_every_large_segment_to_2_mib() {
        let mut pool = Pool::with_rules(Rules::Rounded2MiB);
        pool.alloc(4 * MIB + 1, Main);
        assert_eq!(pool.usage().reserved(), 6 * MIB);
        pool.alloc(512, Main);
        assert_eq!(pool.usage().reserved(), 8 * MIB, "small segments as before");
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
    fn a_deferred_block_does_not_merge_until_the_capture_ends() {
        let mut pool = Pool::new();
        let a = pool.alloc(4 * MIB, Main);
        pool.free(a.start, true);
        // The segment's 16 MiB remainder is free; the deferred 4 MiB does not join it.
        let b = pool.alloc(18 * MIB, Main);
        assert!(b.start >= 20 * MIB, "the held block did not merge");
        pool.end_capture();
        pool.free(b.start, false);
        assert_eq!(pool.alloc(20 * MIB, Main), 0..20 * MIB, "now it has");
    }

    #[test]
    fn allocated_counts_whole_blocks_and_peaks_restart_on_reset() {
        let mut pool = Pool::new();
        // 19 MiB takes the whole 20 MiB segment (1 MiB would remain): 20 MiB allocated.
        let a = pool.alloc(19 * MIB, Main);
        let b = pool.alloc(300, Main);
        assert_eq!(pool.usage().allocated(), 20 * MIB + 512);
        pool.free(a.start, false);
        assert_eq!(pool.usage().allocated(), 512);
        assert_eq!(
            pool.usage().peaks(),
            Peaks {
                allocated: 20 * MIB + 512,
                reserved: 22 * MIB
            }
        );
        pool.reset_peaks();
        assert_eq!(pool.usage().peaks().allocated, 512);
        pool.free(b.start, true);
        assert_eq!(
            pool.usage().allocated(),
            0,
            "a recorded free counts at once"
        );
    }

    #[test]
    fn a_full_device_gives_back_whole_free_segments_then_retries() {
        let mut pool = Pool::with_limit(50 * MIB);
        let a = pool.alloc(30 * MIB, Main);
        let b = pool.alloc(12 * MIB, Main);
        pool.free(a.start, false);
        // 36 MiB do not fit the free 30 MiB segment, and 42 + 36 > 50: the free 30 MiB
        // segment goes back to the device, then 12 + 36 fits.
        let c = pool.try_alloc(36 * MIB, Main).unwrap();
        assert_eq!(pool.usage().reserved(), 48 * MIB);
        assert_eq!(pool.usage().released(), 30 * MIB);
        assert!(c.start >= b.end, "a new segment, at a new address");
        // A segment with a block in use is never given back: 48 + 4 > 50 after the retry.
        let err = pool.try_alloc(4 * MIB, Side).unwrap_err();
        assert_eq!(
            err,
            OutOfMemory {
                tried: 20 * MIB,
                requested: 4 * MIB,
                allocated: 48 * MIB,
                reserved: 48 * MIB,
                limit: 50 * MIB,
                released: 0,
            }
        );
        assert_eq!(
            pool.usage().reserved(),
            48 * MIB,
            "nothing lost by the refusal"
        );
    }

    #[test]
    fn a_split_segment_with_a_free_remainder_stays_cached() {
        // 4 MiB in a 20 MiB segment: the 16 MiB remainder is free but its segment is in use.
        let mut pool = Pool::with_limit(30 * MIB);
        let _a = pool.alloc(4 * MIB, Main);
        let err = pool.try_alloc(18 * MIB, Main).unwrap_err();
        assert_eq!(
            (err.tried, err.reserved, err.allocated),
            (18 * MIB, 20 * MIB, 4 * MIB)
        );
        assert_eq!(pool.release_cached(), 0);
    }
}
