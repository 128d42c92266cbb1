//! The card's device memory as bookkeeping: what the driver would hand cubecl-cuda 0.11's
//! `GpuStorage`, shared by every stream's pool on one device, and every page it refused.

use std::sync::{Arc, Mutex, MutexGuard};

/// A device allocation the card could not have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutOfMemory {
    /// The page the pool asked the driver for (what `IoError::OutOfMemory` carries).
    pub page: u64,
    /// Bytes the pages held when it was asked for.
    pub allocated: u64,
    /// What the card leaves the pools.
    pub capacity: u64,
}

/// What a page the card cannot hold becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum OnRefusal {
    /// Refused as `cuMemAlloc` refuses it (`IoError::OutOfMemory`): cubecl-server's command then
    /// reclaims and retries once, and a second refusal taints the tensor, as on the GPU.
    #[default]
    Refuse,
    /// Granted beyond the card: the run goes on as on a card large enough, and
    /// [`DeviceMemory::peak`] says how much it would have needed.
    Grant,
}

/// One device's memory, shared by its streams' storages.
#[derive(Debug, Clone)]
pub struct DeviceMemory(Arc<Mutex<Books>>);

#[derive(Debug)]
struct Books {
    capacity: u64,
    on_refusal: OnRefusal,
    allocated: u64,
    peak: u64,
    page_allocs: u64,
    pages: u32,
    refused: Vec<OutOfMemory>,
}

impl DeviceMemory {
    /// `capacity` bytes for the pools, every page charged its size.
    pub fn new(capacity: u64, on_refusal: OnRefusal) -> Self {
        Self(Arc::new(Mutex::new(Books {
            capacity,
            on_refusal,
            allocated: 0,
            peak: 0,
            page_allocs: 0,
            pages: 0,
            refused: Vec::new(),
        })))
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // Every update is made under the lock in one go: a panic elsewhere leaves them whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the card leaves the pools.
    pub fn capacity(&self) -> u64 {
        self.books().capacity
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

    /// The refusals since the last call, in order.
    pub fn take_refused(&self) -> Vec<OutOfMemory> {
        std::mem::take(&mut self.books().refused)
    }

    /// Takes a page of `size` bytes, or says why the card would not give it.
    pub(crate) fn take(&self, size: u64) -> Result<(), OutOfMemory> {
        let mut books = self.books();
        if books.allocated + size > books.capacity {
            let event = OutOfMemory {
                page: size,
                allocated: books.allocated,
                capacity: books.capacity,
            };
            books.refused.push(event);
            if books.on_refusal == OnRefusal::Refuse {
                return Err(event);
            }
        }
        books.allocated += size;
        books.peak = books.peak.max(books.allocated);
        books.page_allocs += 1;
        books.pages += 1;
        Ok(())
    }

    /// Gives back a page of `size` bytes.
    pub(crate) fn give_back(&self, size: u64) {
        let mut books = self.books();
        books.allocated -= size;
        books.pages -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_past_the_card_is_refused_and_recorded() {
        let memory = DeviceMemory::new(4 << 20, OnRefusal::Refuse);
        memory.take(3 << 20).unwrap();
        let refused = memory.take((1 << 20) + 1).unwrap_err();
        assert_eq!(refused.page, (1 << 20) + 1);
        assert_eq!(refused.allocated, 3 << 20);
        assert_eq!(memory.take_refused(), vec![refused]);
        assert_eq!((memory.allocated(), memory.pages()), (3 << 20, 1));
    }

    #[test]
    fn a_granted_page_counts_in_the_peak_and_goes_back() {
        let memory = DeviceMemory::new(4 << 20, OnRefusal::Grant);
        memory.take(3 << 20).unwrap();
        memory.take(2 << 20).unwrap();
        assert_eq!(memory.take_refused().len(), 1);
        memory.give_back(2 << 20);
        assert_eq!((memory.allocated(), memory.peak()), (3 << 20, 5 << 20));
    }
}
