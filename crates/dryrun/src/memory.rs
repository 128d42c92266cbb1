//! The card's device memory, as bookkeeping: what cubecl-cuda's `GpuStorage` would get from the
//! driver, shared by every stream's pool on one device, with what it refused.
//!
//! Every refusal is recorded as an [`OutOfMemory`] event. What happens next is the caller's
//! choice ([`OnRefusal`]): refuse the page as the card would (cubecl-cuda's server then panics
//! on its thread, exactly as on the GPU, and burn goes on as it does there), or grant it, so that
//! the run goes on undisturbed and [`DeviceMemory::peak`] says how much it would have needed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cubecl_common::backtrace::BackTrace;
use cubecl_runtime::server::IoError;
use cubecl_runtime::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};

use crate::card::CUDA_ALIGNMENT;

/// A device allocation the card could not have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The reservation that needed a new page (a tensor, a launch's metadata), in bytes.
    pub requested: u64,
    /// The page the pool asked the driver for: the size cubecl-cuda's error carries.
    pub page: u64,
    /// Bytes the pools held when it was asked for.
    pub allocated: u64,
    /// What the card leaves the pools.
    pub capacity: u64,
}

/// What a page the card cannot hold becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRefusal {
    /// Refused, as cubecl-cuda's `GpuStorage::alloc` refuses it (`IoError::BufferTooBig` with
    /// the page size): what happens next is what happens on the GPU.
    #[default]
    Refuse,
    /// Granted beyond the card: the run goes on as on a card large enough.
    Grant,
}

/// One device's memory, shared by its streams.
#[derive(Debug, Clone)]
pub struct DeviceMemory(Arc<Mutex<Books>>);

#[derive(Debug)]
struct Books {
    capacity: u64,
    on_refusal: OnRefusal,
    /// What live pages take.
    allocated: u64,
    peak: u64,
    page_allocs: u64,
    /// Pages held now.
    pages: u32,
    /// The most bytes in use a stream's pool reached since the last [`DeviceMemory::take_peak_in_use`].
    peak_in_use: u64,
    /// The reservation being served, for the event if its page is refused.
    requesting: u64,
    /// Every byte ever reserved, summed: what a stretch of work asked of the pools.
    requested_total: u64,
    refused: Vec<OutOfMemory>,
}

impl DeviceMemory {
    /// `capacity` bytes for the pools, every page charged its size.
    ///
    /// Why its size: on the H200 a lone `cuMemAllocAsync` takes free memory in 32 MiB chunks
    /// (the card profile's `allocation_cost`), but the driver's pool packs later allocations
    /// into those chunks. Charging each page its size reproduces the capped runs (the SiTU arm's
    /// first refused pages and the other arms' survival); charging the chunks kills two arms the
    /// GPU kept alive.
    pub fn new(capacity: u64, on_refusal: OnRefusal) -> Self {
        Self(Arc::new(Mutex::new(Books {
            capacity,
            on_refusal,
            allocated: 0,
            peak: 0,
            page_allocs: 0,
            pages: 0,
            peak_in_use: 0,
            requesting: 0,
            requested_total: 0,
            refused: Vec::new(),
        })))
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // A panic elsewhere never leaves the books half-written: every update is one statement.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes the pages take now.
    pub fn allocated(&self) -> u64 {
        self.books().allocated
    }

    /// The most the pages ever took: what the card would have needed.
    pub fn peak(&self) -> u64 {
        self.books().peak
    }

    /// Pages allocated so far.
    pub fn page_allocs(&self) -> u64 {
        self.books().page_allocs
    }

    /// Pages held now.
    pub fn pages(&self) -> u32 {
        self.books().pages
    }

    /// The most bytes in use any stream's pool reached since the last call (bytes in use only
    /// grow at a reservation, where the server samples them), and starts over.
    pub fn take_peak_in_use(&self) -> u64 {
        std::mem::take(&mut self.books().peak_in_use)
    }

    /// Whether `bytes` in use would be a new peak since the last [`Self::take_peak_in_use`].
    pub(crate) fn may_pass_peak_in_use(&self, bytes: u64) -> bool {
        bytes > self.books().peak_in_use
    }

    pub(crate) fn in_use_seen(&self, bytes: u64) {
        let mut books = self.books();
        books.peak_in_use = books.peak_in_use.max(bytes);
    }

    /// The refusals since the last call, in order.
    pub fn take_refused(&self) -> Vec<OutOfMemory> {
        std::mem::take(&mut self.books().refused)
    }

    pub(crate) fn requesting(&self, size: u64) {
        let mut books = self.books();
        books.requesting = size;
        books.requested_total += size;
    }

    /// Every byte reserved so far, summed (frees do not subtract).
    pub(crate) fn requested_total(&self) -> u64 {
        self.books().requested_total
    }
}

/// Cubecl-cuda's `GpuStorage`, without a GPU: pages are ids and sizes; a page given back is
/// returned to the card only at the next flush, as `GpuStorage` frees its deallocations then.
#[derive(Debug)]
pub struct DryStorage {
    memory: DeviceMemory,
    pages: HashMap<StorageId, u64>,
    deallocations: Vec<StorageId>,
}

impl DryStorage {
    /// Storage whose pages are charged to `memory`.
    pub fn new(memory: DeviceMemory) -> Self {
        Self {
            memory,
            pages: HashMap::new(),
            deallocations: Vec::new(),
        }
    }
}

/// What a binding resolves to: nothing to point at, only its size.
#[derive(Debug, Clone, Copy)]
pub struct DryResource {
    /// The binding's bytes.
    pub size: u64,
}

impl ComputeStorage for DryStorage {
    type Resource = DryResource;

    fn alignment(&self) -> usize {
        CUDA_ALIGNMENT as usize
    }

    fn get(&mut self, handle: &StorageHandle) -> DryResource {
        assert!(
            self.pages.contains_key(&handle.id),
            "Storage handle not found"
        );
        DryResource {
            size: handle.size(),
        }
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let mut books = self.memory.books();
        if books.allocated + size > books.capacity {
            let event = OutOfMemory {
                requested: books.requesting,
                page: size,
                allocated: books.allocated,
                capacity: books.capacity,
            };
            books.refused.push(event);
            if books.on_refusal == OnRefusal::Refuse {
                return Err(IoError::BufferTooBig {
                    size,
                    backtrace: BackTrace::capture(),
                });
            }
        }
        books.allocated += size;
        books.peak = books.peak.max(books.allocated);
        books.page_allocs += 1;
        books.pages += 1;
        drop(books);
        let id = StorageId::new();
        self.pages.insert(id, size);
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        self.deallocations.push(id);
    }

    fn flush(&mut self) {
        let mut books = self.memory.books();
        for id in self.deallocations.drain(..) {
            if let Some(size) = self.pages.remove(&id) {
                books.allocated -= size;
                books.pages -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_page_is_refused_as_cubecl_cuda_refuses_it() {
        let memory = DeviceMemory::new(4 << 20, OnRefusal::Refuse);
        let mut storage = DryStorage::new(memory.clone());
        storage.alloc(3 << 20).unwrap();
        memory.requesting(512);
        let err = storage.alloc((1 << 20) + 1).unwrap_err();
        assert!(
            matches!(err, IoError::BufferTooBig { size: 1048577, .. }),
            "{err:?}"
        );
        assert_eq!(memory.take_refused().len(), 1);
        assert_eq!(
            (memory.allocated(), memory.peak(), memory.page_allocs()),
            (3 << 20, 3 << 20, 1)
        );
    }

    #[test]
    fn a_granted_page_is_recorded_and_counted_in_the_peak() {
        let memory = DeviceMemory::new(4 << 20, OnRefusal::Grant);
        let mut storage = DryStorage::new(memory.clone());
        storage.alloc(3 << 20).unwrap();
        memory.requesting(512);
        let second = storage.alloc(2 << 20).unwrap();
        assert_eq!(
            memory.take_refused(),
            vec![OutOfMemory {
                requested: 512,
                page: 2 << 20,
                allocated: 3 << 20,
                capacity: 4 << 20
            }]
        );
        assert_eq!(memory.peak(), 5 << 20);
        // Given back only at the flush, as GpuStorage frees its deallocations.
        storage.dealloc(second.id);
        assert_eq!(memory.allocated(), 5 << 20);
        storage.flush();
        assert_eq!((memory.allocated(), memory.pages()), (3 << 20, 1));
        assert!(memory.take_refused().is_empty());
    }
}
