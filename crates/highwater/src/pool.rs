//! CubeCL 0.10's own memory pool, replayed on CPU.
//!
//! The policy (which pool takes which size, first-fit slicing, coalescing, pages that are
//! never given back) is *not* re-implemented here: [`CardPool`] drives
//! `cubecl_runtime::memory_management::MemoryManagement` itself, over [`SimStorage`], a
//! `ComputeStorage` that only keeps books. The storage refuses an allocation the way
//! cubecl-cuda's `GpuStorage::alloc` does when `cuMemAlloc` returns
//! `CUDA_ERROR_OUT_OF_MEMORY`: `IoError::BufferTooBig` carrying the *page* size it was asked for.

use std::collections::BTreeMap;
use std::sync::{Arc, Once};

use cubecl_common::backtrace::BackTrace;
use cubecl_common::config::RuntimeConfig;
use cubecl_ir::MemoryDeviceProperties;
use cubecl_runtime::config::CubeClRuntimeConfig;
use cubecl_runtime::logging::ServerLogger;
use cubecl_runtime::memory_management::{
    ManagedMemoryHandle, MemoryAllocationMode, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions,
};
use cubecl_runtime::server::IoError;
use cubecl_runtime::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};
use serde::Serialize;

/// cubecl-cuda 0.10 `runtime.rs`: the pitch alignment `cuMemAllocPitch` reports, used as the
/// pool's offset alignment.
pub const CUDA_ALIGNMENT: u64 = 512;

/// The device properties cubecl-cuda 0.10 derives from `cuDeviceTotalMem_v2`
/// (`runtime.rs`: `max_page_size: max_memory / 4, alignment: 512`).
fn cuda_memory_properties(total_bytes: u64) -> MemoryDeviceProperties {
    MemoryDeviceProperties {
        max_page_size: total_bytes / 4,
        alignment: CUDA_ALIGNMENT,
    }
}

/// Pins CubeCL's global runtime config to its defaults, once per process.
///
/// `MemoryManagement::from_configuration` reads `CubeClRuntimeConfig::get()`, which would
/// otherwise look for a `cubecl.toml`/`burn.toml` in the current directory and its parents:
/// a stray file there could switch persistent memory to `enforced` and change every figure.
/// If a host program already set (or read) the config, it is left alone.
fn pin_runtime_config() {
    static PIN: Once = Once::new();
    PIN.call_once(|| {
        let mut slot = CubeClRuntimeConfig::storage().lock();
        if slot.is_none() {
            *slot = Some(Arc::new(CubeClRuntimeConfig::default()));
        }
    });
}

/// A `ComputeStorage` that only counts: which pages exist and how many bytes they take.
///
/// Pages are numbered in the order they were allocated, so that a trace can name them.
#[derive(Debug)]
pub struct SimStorage {
    capacity: u64,
    allocated: u64,
    /// The pages held, each with its number.
    live: BTreeMap<StorageId, u32>,
    /// Bytes of every page ever allocated, by number (0 once given back).
    sizes: Vec<u64>,
    pending: Vec<StorageId>,
    last_refused: Option<u64>,
}

impl SimStorage {
    /// A storage that can hold at most `capacity` bytes of pages at once.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            allocated: 0,
            live: BTreeMap::new(),
            sizes: Vec::new(),
            pending: Vec::new(),
            last_refused: None,
        }
    }

    /// Bytes currently held by pages (what `cuMemAlloc` has handed out).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Number of pages currently held.
    pub fn pages(&self) -> usize {
        self.live.len()
    }

    /// Sizes of the pages currently held, sorted.
    pub fn page_sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> = self.numbered_pages().into_iter().map(|(_, b)| b).collect();
        sizes.sort_unstable();
        sizes
    }

    /// Total number of successful page allocations so far.
    pub fn page_allocs(&self) -> u64 {
        self.sizes.len() as u64
    }

    /// The pages held, as (number, bytes), in the order they were allocated.
    pub fn numbered_pages(&self) -> Vec<(u32, u64)> {
        (0..)
            .zip(self.sizes.iter().copied())
            .filter(|&(_, b)| b > 0)
            .collect()
    }

    /// Bytes of the held page numbered `number`.
    pub fn page_bytes(&self, number: u32) -> Option<u64> {
        self.sizes.get(number as usize).copied().filter(|&b| b > 0)
    }
}

impl ComputeStorage for SimStorage {
    type Resource = ();

    fn alignment(&self) -> usize {
        CUDA_ALIGNMENT as usize
    }

    fn get(&mut self, _handle: &StorageHandle) -> Self::Resource {}

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        if self.allocated.saturating_add(size) > self.capacity {
            self.last_refused = Some(size);
            // What cubecl-cuda 0.10 `GpuStorage::alloc` returns on CUDA_ERROR_OUT_OF_MEMORY.
            return Err(IoError::BufferTooBig {
                size,
                backtrace: BackTrace::capture(),
            });
        }
        let id = StorageId::new();
        self.live.insert(id, self.sizes.len() as u32);
        self.sizes.push(size);
        self.allocated += size;
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        // cubecl-cuda queues deallocations until `flush`; so do we.
        self.pending.push(id);
    }

    fn flush(&mut self) {
        for id in self.pending.drain(..) {
            if let Some(n) = self.live.remove(&id) {
                self.allocated -= std::mem::take(&mut self.sizes[n as usize]);
            }
        }
    }
}

/// Which page a request of a given size gets: every size from `smallest` to `largest` bytes
/// goes to the pool whose pages are `page` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SizeClass {
    /// The smallest request of the class, in bytes.
    pub smallest: u64,
    /// The largest request of the class, in bytes.
    pub largest: u64,
    /// The size of the pool's pages.
    pub page: u64,
    /// Whether the pool cuts several requests of the class from one page (a request no larger
    /// than the pool's largest slice); otherwise each request fills most of a page of its own.
    pub shared: bool,
}

/// The dynamic pools' size classes on a card reporting `total_bytes`, in order of size.
///
/// The arithmetic is cubecl-runtime 0.10's (`MemoryManagement::from_configuration`,
/// `MemoryConfiguration::SubSlices`, the default cubecl-cuda uses): pages of a quarter of the
/// card, then pools with pages a quarter of the last while they stay at least 32 MiB, each
/// lending slices up to its page over 2^k; a request goes to the first pool (smallest pages
/// first) whose largest slice holds it, or whose page it fills to more than 80 %
/// (`SlicedPool::accept`). Requests over the largest page fit no pool. [`CardPool::page_for`]
/// asks CubeCL's own code, and the tests hold every class's ends to it.
pub fn size_classes(total_bytes: u64) -> Vec<SizeClass> {
    const MIB: u64 = 1 << 20;
    let props = cuda_memory_properties(total_bytes);
    let (align, max_page) = (props.alignment, props.max_page_size);
    // (page, largest slice), smallest pages first, as the pools are tried.
    let mut pools = Vec::new();
    let (mut current, mut base) = (max_page, 1u32);
    while current >= 32 * MIB {
        current = (current / 4).next_multiple_of(align);
        pools.push((current, current / 2u64.pow(base)));
        base += 1;
    }
    pools.reverse();
    let last = max_page / align * align;
    pools.push((last, last));
    let pool_for = |size: u64| {
        pools.iter().copied().find(|&(page, slice)| {
            size <= slice || page.checked_sub(size).is_some_and(|d| d * 5 < page)
        })
    };
    // Where the answer can change: past a largest slice, past 80 % of a page, past a page.
    let mut starts: Vec<u64> = pools
        .iter()
        .flat_map(|&(page, slice)| [slice + 1, page * 4 / 5 + 1, page + 1])
        .chain([1])
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let mut classes: Vec<SizeClass> = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let Some((page, slice)) = pool_for(start) else {
            continue;
        };
        let end = starts.get(i + 1).map_or(last, |next| next - 1);
        match classes.last_mut() {
            Some(c) if c.page == page && c.shared == (start <= slice) && c.largest + 1 == start => {
                c.largest = end;
            }
            _ => classes.push(SizeClass {
                smallest: start,
                largest: end,
                page,
                shared: start <= slice,
            }),
        }
    }
    classes
}

/// A reserve the pool could not satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("failed to reserve {requested} bytes: the storage refused a page of {page} bytes")]
pub struct ReserveFailure {
    /// Bytes the tensor asked for.
    pub requested: u64,
    /// Bytes the pool asked of the storage (the page), which is what the driver refused.
    pub page: u64,
}

/// Pool figures at one instant, as `MemoryManagement::memory_usage` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PoolUsage {
    /// Live slices.
    pub allocs: u64,
    /// Bytes of live slices (without padding).
    pub in_use: u64,
    /// Padding of live slices.
    pub padding: u64,
    /// Bytes of every page held.
    pub reserved: u64,
}

/// One stream's pool on one card: CubeCL's `MemoryManagement` configured as cubecl-cuda 0.10
/// configures it, over a bookkeeping storage with the card's free capacity.
pub struct CardPool {
    mm: MemoryManagement<SimStorage>,
}

impl std::fmt::Debug for CardPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardPool")
            .field("usage", &self.usage())
            .finish()
    }
}

impl CardPool {
    /// The pool cubecl-cuda 0.10 builds for a card reporting `total_bytes` from
    /// `cuDeviceTotalMem_v2`, allowed to take at most `capacity` bytes of pages.
    pub fn cuda(total_bytes: u64, capacity: u64) -> Self {
        pin_runtime_config();
        let mm = MemoryManagement::from_configuration(
            SimStorage::new(capacity),
            &cuda_memory_properties(total_bytes),
            // cubecl-cuda 0.10 `RuntimeOptions::default()`; burn-cuda offers no other.
            MemoryConfiguration::default(),
            Arc::new(ServerLogger::default()),
            MemoryManagementOptions::new("Main GPU Memory"),
        );
        Self { mm }
    }

    /// Reserves `size` bytes; dropping the handle (every clone of it) frees the slice.
    pub fn reserve(&mut self, size: u64) -> Result<ManagedMemoryHandle, ReserveFailure> {
        self.mm.storage().last_refused = None;
        self.mm.reserve(size).map_err(|err| {
            let page = self.mm.storage().last_refused.take();
            let page = match (&err, page) {
                (_, Some(page)) => page,
                // No pool accepts the size at all: nothing was asked of the storage.
                (IoError::BufferTooBig { size, .. }, None) => *size,
                (_, None) => size,
            };
            ReserveFailure {
                requested: size,
                page,
            }
        })
    }

    /// The page a fresh pool on a card reporting `total_bytes` opens for one request of `size`
    /// bytes, as CubeCL's own code decides it; `None` when no pool takes the size.
    pub fn page_for(total_bytes: u64, size: u64) -> Option<u64> {
        let mut pool = CardPool::cuda(total_bytes, total_bytes);
        let _held = pool.reserve(size).ok()?;
        pool.storage().page_sizes().first().copied()
    }

    /// Switches between the persistent pool (parameters at init, as burn's
    /// `memory_persistent_allocations` does) and the dynamic pools.
    pub fn set_persistent(&mut self, persistent: bool) {
        self.mm.mode(if persistent {
            MemoryAllocationMode::Persistent
        } else {
            MemoryAllocationMode::Auto
        });
    }

    /// Current figures.
    pub fn usage(&self) -> PoolUsage {
        let u = self.mm.memory_usage();
        PoolUsage {
            allocs: u.number_allocs,
            in_use: u.bytes_in_use,
            padding: u.bytes_padding,
            reserved: u.bytes_reserved,
        }
    }

    /// Where a live slice lies: its page's number (see [`SimStorage::numbered_pages`]) and its
    /// offset in the page, as CubeCL's own bookkeeping has it.
    pub fn location(&mut self, handle: &ManagedMemoryHandle) -> Option<(u32, u64)> {
        let storage = self.mm.get_storage(handle.clone().binding()).ok()?;
        let page = *self.mm.storage().live.get(&storage.id)?;
        Some((page, storage.utilization.offset))
    }

    /// The bookkeeping storage underneath.
    pub fn storage(&mut self) -> &mut SimStorage {
        self.mm.storage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_cubecls_own_at_both_ends() {
        const GIB: u64 = 1 << 30;
        for total in [16 * GIB, 24 * GIB, 80 * GIB, 143_771_336_704] {
            let classes = size_classes(total);
            assert_eq!(classes[0].smallest, 1);
            for pair in classes.windows(2) {
                assert_eq!(pair[0].largest + 1, pair[1].smallest, "{classes:#?}");
            }
            for c in &classes {
                for size in [c.smallest, c.largest] {
                    assert_eq!(
                        CardPool::page_for(total, size),
                        Some(c.page),
                        "{size} in {c:?}"
                    );
                }
            }
            let over = classes.last().unwrap().largest + 1;
            assert_eq!(CardPool::page_for(total, over), None);
        }
        // A 16 GiB card: a 128 MiB tensor takes a page of 1 GiB, a 64 MiB one a page of its own.
        assert_eq!(CardPool::page_for(16 * GIB, 128 << 20), Some(GIB));
        assert_eq!(CardPool::page_for(16 * GIB, 64 << 20), Some(64 << 20));
    }

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// The page the pool asks of the storage for a first reserve of `size` on a fresh pool.
    fn page_for(total: u64, size: u64) -> u64 {
        let mut pool = CardPool::cuda(total, u64::MAX);
        let _h = pool.reserve(size).expect("unbounded storage");
        let pages = pool.storage().page_sizes();
        assert_eq!(pages.len(), 1, "one page for one reserve");
        pages[0]
    }

    #[test]
    fn sixteen_gib_card_pools_match_the_design_notes() {
        let total = 16 * GIB;
        // (page, largest slice) per sliced pool, as the design notes derive them.
        let pools = [
            (16 * MIB, MIB),
            (64 * MIB, 8 * MIB),
            (256 * MIB, 64 * MIB),
            (GIB, 512 * MIB),
            (4 * GIB, 4 * GIB),
        ];
        assert_eq!(page_for(total, 512), pools[0].0);
        assert_eq!(page_for(total, MIB), pools[0].0);
        // Just above one pool's largest slice, the next pool takes it.
        for w in pools.windows(2) {
            assert_eq!(page_for(total, w[0].1 + 512), w[1].0, "above {}", w[0].1);
        }
        // The seed's failing 32 MiB activations ask for 256 MiB pages.
        assert_eq!(page_for(total, 32 * MIB), 268_435_456);
        // A pool also takes sizes above 80 % of its page, so the mapping is not monotonic:
        // 56 MiB and 64 MiB tensors each get a whole 64 MiB page, 48 MiB goes to 256 MiB pages.
        assert_eq!(page_for(total, 56 * MIB), 64 * MIB);
        assert_eq!(page_for(total, 64 * MIB), 64 * MIB);
        assert_eq!(page_for(total, 48 * MIB), 256 * MIB);
    }

    #[test]
    fn h200_pools_from_its_reported_total() {
        // cuDeviceTotalMem_v2 on the project's H200 (driver 580.159.04): 150 109 880 320 B.
        let total = 150_109_880_320;
        let max_page = total / 4;
        let mut pages = vec![];
        let mut current = max_page;
        while current >= 32 * MIB {
            current = (current / 4).next_multiple_of(512);
            pages.push(current);
        }
        // Expected, read off cubecl-runtime's loop: 7 sliced pools up to the max page.
        assert_eq!(pages.len(), 6);
        let got: Vec<u64> = pages.iter().rev().map(|&p| page_for(total, p)).collect();
        let want: Vec<u64> = pages.iter().rev().copied().collect();
        assert_eq!(got, want);
        assert_eq!(page_for(total, max_page), max_page / 512 * 512);
        // 8.9 MiB first page and a 35.8 GB last page.
        assert_eq!(want[0], 9_162_240);
        assert_eq!(max_page, 37_527_470_080);
    }

    #[test]
    fn refused_page_is_reported_not_the_tensor() {
        let mut pool = CardPool::cuda(16 * GIB, 100 * MIB);
        let err = pool.reserve(32 * MIB).unwrap_err();
        assert_eq!(
            err,
            ReserveFailure {
                requested: 32 * MIB,
                page: 256 * MIB
            }
        );
    }

    #[test]
    fn freed_slices_are_reused_and_pages_kept() {
        let mut pool = CardPool::cuda(16 * GIB, 16 * GIB);
        let a = pool.reserve(32 * MIB).unwrap();
        let b = pool.reserve(32 * MIB).unwrap();
        assert_eq!(pool.usage().reserved, 256 * MIB);
        drop(a);
        drop(b);
        assert_eq!(pool.usage().in_use, 0);
        assert_eq!(
            pool.usage().reserved,
            256 * MIB,
            "pages stay without cleanup"
        );
        let _c = pool.reserve(48 * MIB).unwrap();
        assert_eq!(pool.storage().pages(), 1);
    }

    #[test]
    fn locations_are_pages_and_offsets_from_cubecls_books() {
        let mut pool = CardPool::cuda(16 * GIB, 16 * GIB);
        let a = pool.reserve(32 * MIB).unwrap();
        let b = pool.reserve(32 * MIB).unwrap();
        let c = pool.reserve(2 * GIB).unwrap();
        assert_eq!(pool.location(&a), Some((0, 0)));
        // First fit: the second slice follows the first in the same 256 MiB page.
        assert_eq!(pool.location(&b), Some((0, 32 * MIB)));
        assert_eq!(pool.location(&c), Some((1, 0)));
        assert_eq!(
            pool.storage().numbered_pages(),
            vec![(0, 256 * MIB), (1, 4 * GIB)]
        );
        drop(a);
        let d = pool.reserve(32 * MIB).unwrap();
        assert_eq!(pool.location(&d), Some((0, 0)), "the freed gap is reused");
        assert_eq!(pool.storage().pages(), 2, "pages stay");
    }

    #[test]
    fn persistent_sizes_capture_later_dynamic_reserves() {
        let mut pool = CardPool::cuda(16 * GIB, 16 * GIB);
        pool.set_persistent(true);
        let _w = pool.reserve(12 * MIB).unwrap();
        pool.set_persistent(false);
        // Same effective size as a persistent slice: CubeCL routes it to the persistent pool,
        // one exact-size storage allocation, not a 256 MiB page.
        let _x = pool.reserve(12 * MIB).unwrap();
        assert_eq!(pool.storage().page_sizes(), vec![12 * MIB, 12 * MIB]);
    }
}
