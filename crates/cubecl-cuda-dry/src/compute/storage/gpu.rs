//! cubecl-cuda 0.11.3's `GpuStorage`, without a GPU: a page is an id and a size charged to the
//! card's books; one given back returns to the card at the next flush, as `GpuStorage` frees its
//! deallocations then.

use std::collections::HashMap;

use cubecl_core::server::IoError;
use cubecl_environment::backtrace::BackTrace;
use cubecl_server::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};

use crate::dry::DeviceMemory;
use crate::dry::card::CUDA_ALIGNMENT;

/// Device pages as bookkeeping.
#[derive(Debug)]
pub struct GpuStorage {
    memory: DeviceMemory,
    pages: HashMap<StorageId, u64>,
    deallocations: Vec<StorageId>,
    /// The bytes `pages` holds.
    allocated: u64,
}

/// What a binding resolves to: nothing to point at, only its size.
#[derive(Debug)]
pub struct GpuResource {
    /// The binding's bytes.
    pub size: u64,
}

impl GpuStorage {
    /// Storage whose pages are charged to `memory`.
    pub fn new(memory: DeviceMemory) -> Self {
        Self {
            memory,
            pages: HashMap::new(),
            deallocations: Vec::new(),
            allocated: 0,
        }
    }
}

impl ComputeStorage for GpuStorage {
    type Resource = GpuResource;

    fn alignment(&self) -> usize {
        CUDA_ALIGNMENT as usize
    }

    fn get(&mut self, handle: &StorageHandle) -> Result<GpuResource, IoError> {
        if !self.pages.contains_key(&handle.id) {
            return Err(IoError::StorageHandleNotFound {
                reason: format!("{} in the dry CUDA gpu storage", handle.id).into(),
                backtrace: BackTrace::capture(),
            });
        }
        Ok(GpuResource {
            size: handle.size(),
        })
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        // A zero-byte buffer takes no device memory in cubecl-cuda either.
        if size > 0 {
            // `OutOfMemory`, not `BufferTooBig`, as cubecl-cuda 0.11 reports a full card: the
            // shared command reclaims and retries once on it.
            self.memory
                .take(size)
                .map_err(|refused| IoError::OutOfMemory {
                    size: refused.page,
                    backtrace: BackTrace::capture(),
                })?;
        }
        let id = StorageId::new();
        self.pages.insert(id, size);
        self.allocated += size;
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        self.deallocations.push(id);
    }

    fn flush(&mut self) {
        for id in self.deallocations.drain(..) {
            if let Some(size) = self.pages.remove(&id) {
                self.allocated -= size;
                if size > 0 {
                    self.memory.give_back(size);
                }
            }
        }
    }

    fn bytes_allocated(&self) -> u64 {
        self.allocated
    }
}
