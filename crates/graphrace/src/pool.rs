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
//!   (`release_cached_blocks`), then try once more; only then is it out of memory
//!   ([`OutOfMemory`]). A segment with any block in use is never given back.
//! - **Options** (`PYTORCH_CUDA_ALLOC_CONF`): `roundup_power2_divisions`
//!   ([`Pool::with_divisions`], [`crate::rounding`]), `max_split_size_mb`
//!   ([`Pool::with_max_split`]: oversize blocks, and `release_available_cached_blocks` before
//!   the give-back) and `garbage_collection_threshold` ([`Pool::with_gc_threshold`]). Where
//!   the driver puts a segment decides ties of best fit: [`Pool::place_segments`] takes a
//!   GPU's addresses.
//!
//! Expandable segments are [`crate::expandable`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

use crate::program::Stream;
use crate::rounding::Divisions;
use crate::usage::{OutOfMemory, Usage};

const MIB: u64 = 1 << 20;

/// A stream as the allocator tells them apart: a block is handed out again only on the stream
/// it was allocated on. A [`Stream`] of the Part II programs is its index; a memory snapshot's
/// streams are numbered in the order they first appear.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u32);

impl From<Stream> for StreamId {
    fn from(stream: Stream) -> StreamId {
        StreamId(stream.index() as u32)
    }
}

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
    stream: StreamId,
    class: Size,
    segment: u32,
    state: State,
    /// Its half's lookups when it last became free (`gc_count_base`): its age for garbage
    /// collection is the lookups since.
    freed_at: u64,
}

/// A free block's place in the search for a fit: PyTorch keeps each half's free blocks in a
/// set ordered by stream, size, address (`BlockComparatorSize`), so the first at or after
/// `(half, stream, request, 0)` is the best fit.
type FreeKey = (Size, StreamId, u64, u64);

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
    /// `max_split_size_mb` in bytes (`u64::MAX`: unset).
    max_split: u64,
    /// `garbage_collection_threshold`, when set (it acts only under a limit).
    gc_threshold: Option<f64>,
    /// Lookups for a free block per half (`get_free_blocks_call_count`), counted while
    /// garbage collection is on.
    lookups: [u64; 2],
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
            max_split: u64::MAX,
            gc_threshold: None,
            lookups: [0; 2],
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
    pub fn alloc(&mut self, bytes: u64, stream: impl Into<StreamId>) -> Range<u64> {
        self.try_alloc(bytes, stream)
            .unwrap_or_else(|e| panic!("{e}: use try_alloc under a limit"))
    }

    /// A block for `bytes` on `stream`, or why the device could not give one: the free block
    /// that fits best, else a new segment, else (past the limit) the cached segments given
    /// back and a new segment tried once more.
    pub fn try_alloc(
        &mut self,
        bytes: u64,
        stream: impl Into<StreamId>,
    ) -> Result<Range<u64>, OutOfMemory> {
        let stream = stream.into();
        let request = Request::rounded(self.rules, self.divisions, bytes);
        let (size, class) = (request.rounded, request.class);
        let addr = match self.best_fit(size, class, stream) {
            Some(addr) => addr,
            None => self.grow(request, bytes, stream)?,
        };
        let block = self.blocks.get_mut(&addr).expect("a free block was found");
        self.free.remove(&key(addr, block));
        let rest = block.size - size;
        let split = request.splits(block.size) && size < self.max_split;
        block.state = State::Used;
        if split {
            block.size = size;
            let tail = Block {
                size: rest,
                state: State::Free,
                ..*block
            };
            self.blocks.insert(addr + size, tail);
            self.file_free(addr + size);
        }
        let size = self.blocks[&addr].size;
        self.usage.hand_out(size);
        Ok(addr..addr + size)
    }

    /// The pool with `roundup_power2_divisions` set.
    pub fn with_divisions(self, divisions: Divisions) -> Pool {
        Pool { divisions, ..self }
    }

    /// The pool with `max_split_size_mb` set, in bytes: blocks of at least this size are
    /// *oversize*. They are never split, a smaller request never takes one, a larger one only
    /// within [`LARGE_SEGMENT`] of its size; and before the cached segments are all given back
    /// to make room, the oversize ones are given back first, as few as make room.
    pub fn with_max_split(self, bytes: u64) -> Pool {
        Pool {
            max_split: bytes,
            ..self
        }
    }

    /// The pool with `garbage_collection_threshold` set: under a limit, when a request misses
    /// the cache and the pool holds more than this share of the limit, whole free large
    /// segments are given back, the longest unused first, until it holds no more than that.
    pub fn with_gc_threshold(self, threshold: f64) -> Pool {
        Pool {
            gc_threshold: Some(threshold),
            ..self
        }
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

    /// The free block a request of `size` gets (`get_free_block`): the first in the free
    /// set's order that fits, unless the oversize rules refuse it.
    fn best_fit(&mut self, size: u64, class: Size, stream: StreamId) -> Option<u64> {
        if self.gc_threshold.is_some() && self.usage.limited() {
            self.lookups[class as usize] += 1;
        }
        let &(c, s, block, addr) = self.free.range((class, stream, size, 0)..).next()?;
        let oversize = |bytes: u64| bytes >= self.max_split;
        let refused = c != class
            || s != stream
            || (!oversize(size) && oversize(block))
            || (oversize(size) && block >= size + LARGE_SEGMENT);
        (!refused).then_some(addr)
    }

    /// No free block fits: garbage collection if on, then a new segment; past the limit the
    /// oversize cached segments given back and a new segment tried, then every cached
    /// segment given back and a new segment tried once more (`malloc`'s chain).
    fn grow(&mut self, request: Request, bytes: u64, stream: StreamId) -> Result<u64, OutOfMemory> {
        if let Some(threshold) = self.gc_threshold
            && self.usage.limited()
        {
            self.collect_garbage(threshold);
        }
        if self.usage.fits(request.segment) {
            return Ok(self.new_segment(request, stream));
        }
        let (enough, mut released) = self.release_oversize(request, stream);
        if enough && self.usage.fits(request.segment) {
            return Ok(self.new_segment(request, stream));
        }
        released += self.release_cached();
        if self.usage.fits(request.segment) {
            return Ok(self.new_segment(request, stream));
        }
        Err(self.usage.refusal(request.segment, bytes, released))
    }

    /// `release_available_cached_blocks`: with `max_split_size_mb` set, the smallest cached
    /// block of the request's half and stream of at least the request and the split size is
    /// given back; else oversize blocks from the largest down, until they make the request.
    /// Returns whether it made room enough to try again, and the bytes given back (kept given
    /// back even when not enough).
    fn release_oversize(&mut self, request: Request, stream: StreamId) -> (bool, u64) {
        if self.max_split == u64::MAX {
            return (false, 0);
        }
        let class = request.class;
        let want = request.rounded.max(self.max_split);
        let below = (class, stream, want, 0);
        if let Some(&(c, s, _, addr)) = self.free.range(below..).next()
            && (c, s) == (class, stream)
        {
            return (true, self.release_segment_of(addr));
        }
        let oversize: Vec<u64> = self
            .free
            .range((class, stream, 0, 0)..below)
            .rev()
            .take_while(|&&(_, _, size, _)| size >= self.max_split)
            .map(|&(_, _, _, addr)| addr)
            .collect();
        let mut released = 0;
        for addr in oversize {
            if released >= want {
                break;
            }
            released += self.release_segment_of(addr);
        }
        (released >= want, released)
    }

    /// `garbage_collect_cached_blocks`: gives back whole free large segments whose age (the
    /// large half's lookups since they became free) is at least the mean age, pass after pass,
    /// until the pool holds no more than `threshold` of its limit.
    fn collect_garbage(&mut self, threshold: f64) {
        let allowed = (threshold * self.usage.limit() as f64) as u64;
        let Some(target) = self.usage.reserved().checked_sub(allowed) else {
            return;
        };
        let now = self.lookups[Size::Large as usize];
        let whole = |pool: &Pool| -> Vec<(u64, u64)> {
            pool.free
                .iter()
                .filter(|k| k.0 == Size::Large)
                .map(|k| (k.3, pool.blocks[&k.3]))
                .filter(|(_, b)| pool.held.get(&b.segment) == Some(&b.size))
                .map(|(addr, b)| (addr, now - b.freed_at))
                .collect()
        };
        let candidates = whole(self);
        let (mut total_age, mut count) = (
            candidates.iter().map(|c| c.1).sum::<u64>(),
            candidates.len(),
        );
        let (mut reclaimed, mut freed) = (0, true);
        while reclaimed < target && freed && count > 0 {
            let mean = total_age as f64 / count as f64;
            freed = false;
            for (addr, age) in whole(self) {
                if age as f64 >= mean {
                    freed = true;
                    reclaimed += self.release_segment_of(addr);
                    total_age -= age;
                    count -= 1;
                }
            }
        }
    }

    /// Gives back the segment whose one free block is at `addr`; returns its bytes.
    fn release_segment_of(&mut self, addr: u64) -> u64 {
        let block = self.blocks.remove(&addr).expect("a free block");
        self.free.remove(&key(addr, &block));
        let bytes = self.held.remove(&block.segment).expect("a held segment");
        debug_assert_eq!(bytes, block.size, "only whole segments are given back");
        self.usage.give_back(bytes);
        bytes
    }

    fn new_segment(&mut self, request: Request, stream: StreamId) -> u64 {
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
                freed_at: 0,
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
        self.file_free(addr);
    }

    /// Files the free block at `addr` in the free set (`insert_into_blocks`), its age from now.
    fn file_free(&mut self, addr: u64) {
        let block = self.blocks.get_mut(&addr).expect("a block starts there");
        block.freed_at = self.lookups[block.class as usize];
        self.free.insert(key(addr, block));
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
        whole
            .into_iter()
            .map(|(addr, _)| self.release_segment_of(addr))
            .sum()
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
mod tests;
