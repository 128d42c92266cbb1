//! cubecl-cuda 0.11.3's `PinnedMemoryStorage`, on ordinary host memory: reads and writes are
//! staged through it as on the GPU, so the host pool's pages follow the same sizes; the bytes are
//! zeroed (nothing on the device ever wrote them).

use std::alloc::Layout;
use std::collections::HashMap;

use cubecl_core::server::IoError;
use cubecl_environment::backtrace::BackTrace;
use cubecl_server::storage::{
    ComputeStorage, PINNED_MEMORY_ALIGNMENT, PinnedMemoryResource, StorageHandle, StorageId,
    StorageUtilization,
};

/// Host pages, zeroed.
#[derive(Debug, Default)]
pub struct PinnedMemoryStorage {
    /// Each page's start, layout and size asked for.
    memory: HashMap<StorageId, (*mut u8, Layout, u64)>,
    allocated: u64,
}

// SAFETY: the pages are owned by this storage and reached only through the server, which one
// thread at a time drives.
unsafe impl Send for PinnedMemoryStorage {}

impl PinnedMemoryStorage {
    /// No pages yet.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ComputeStorage for PinnedMemoryStorage {
    type Resource = PinnedMemoryResource;

    fn alignment(&self) -> usize {
        PINNED_MEMORY_ALIGNMENT
    }

    fn get(&mut self, handle: &StorageHandle) -> Result<PinnedMemoryResource, IoError> {
        let (ptr, _, _) =
            self.memory
                .get(&handle.id)
                .ok_or_else(|| IoError::StorageHandleNotFound {
                    reason: format!("{} in the dry CUDA pinned storage", handle.id).into(),
                    backtrace: BackTrace::capture(),
                })?;
        // SAFETY: the page holds at least offset + size bytes: the pool hands out slices of it.
        let ptr = unsafe { ptr.add(handle.offset() as usize) };
        Ok(PinnedMemoryResource {
            ptr,
            size: handle.size() as usize,
        })
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let refused = || IoError::Unknown {
            description: format!("host allocation of {size} B refused"),
            backtrace: BackTrace::capture(),
        };
        // One byte at least: a zero-sized layout may not be allocated.
        let layout = Layout::from_size_align((size as usize).max(1), PINNED_MEMORY_ALIGNMENT)
            .map_err(|_| refused())?;
        // SAFETY: the layout has a non-zero size. Zeroed pages cost nothing until touched.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(refused());
        }
        let id = StorageId::new();
        self.memory.insert(id, (ptr, layout, size));
        self.allocated += size;
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        if let Some((ptr, layout, size)) = self.memory.remove(&id) {
            self.allocated -= size;
            // SAFETY: allocated above with this layout, and removed from the map, so never again.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
    }

    fn flush(&mut self) {}

    fn bytes_allocated(&self) -> u64 {
        self.allocated
    }
}

impl Drop for PinnedMemoryStorage {
    fn drop(&mut self) {
        for (ptr, layout, _) in self.memory.drain().map(|(_, page)| page) {
            // SAFETY: every page in the map was allocated with its layout and not yet freed.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
    }
}
