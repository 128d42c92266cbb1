use rt010::storage::ComputeStorage as _;
use rt011::storage::ComputeStorage as _;
use std::collections::HashMap;
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

macro_rules! books {
    ($name:ident, $rt:ident, $get:ty, $wrap:expr $(, $extra:item)?) => {
        #[derive(Debug, Default)]
        pub struct $name {
            pages: HashMap<$rt::storage::StorageId, u64>,
            pending: Vec<$rt::storage::StorageId>,
            pub allocated: u64,
            pub peak: u64,
            pub page_allocs: u64,
        }
        impl $rt::storage::ComputeStorage for $name {
            type Resource = u64;
            fn alignment(&self) -> usize { 512 }
            fn get(&mut self, h: &$rt::storage::StorageHandle) -> $get { $wrap(h.size()) }
            fn alloc(&mut self, size: u64) -> Result<$rt::storage::StorageHandle, $rt::server::IoError> {
                let id = $rt::storage::StorageId::new();
                self.pages.insert(id, size);
                self.allocated += size;
                self.peak = self.peak.max(self.allocated);
                self.page_allocs += 1;
                Ok($rt::storage::StorageHandle::new(id, $rt::storage::StorageUtilization { offset: 0, size }))
            }
            fn dealloc(&mut self, id: $rt::storage::StorageId) { self.pending.push(id); }
            fn flush(&mut self) {
                for id in self.pending.drain(..) {
                    if let Some(s) = self.pages.remove(&id) { self.allocated -= s; }
                }
            }
            $($extra)?
        }
    };
}
books!(Books010, rt010, u64, |s| s);
books!(Books011, rt011, Result<u64, rt011::server::IoError>, Ok, fn bytes_allocated(&self) -> u64 { self.allocated });

trait Pool {
    type H;
    fn reserve(&mut self, size: u64) -> Self::H;
    /// (bytes in use, bytes reserved per the pool, bytes the storage holds, peak storage, page allocations)
    fn stats(&mut self) -> (u64, u64, u64, u64, u64);
    fn persistent(&mut self, on: bool);
}

struct P010(rt010::memory_management::MemoryManagement<Books010>);
impl Pool for P010 {
    type H = rt010::memory_management::ManagedMemoryHandle;
    fn reserve(&mut self, size: u64) -> Self::H { self.0.reserve(size).unwrap() }
    fn stats(&mut self) -> (u64, u64, u64, u64, u64) {
        let u = self.0.memory_usage();
        self.0.storage().flush();
        let s = self.0.storage();
        (u.bytes_in_use, u.bytes_reserved, s.allocated, s.peak, s.page_allocs)
    }
    fn persistent(&mut self, on: bool) {
        use rt010::memory_management::MemoryAllocationMode as M;
        self.0.mode(if on { M::Persistent } else { M::Auto });
    }
}
struct P011(srv011::memory_management::MemoryManagement<Books011>);
impl Pool for P011 {
    type H = srv011::memory_management::ManagedMemoryHandle;
    fn reserve(&mut self, size: u64) -> Self::H {
        let mut f = srv011::memory_management::ErrorGraph::default();
        self.0.reserve(size, srv011::memory_management::PageUpdate::Allow, &mut f).unwrap()
    }
    fn stats(&mut self) -> (u64, u64, u64, u64, u64) {
        let u = self.0.memory_report().usage();
        self.0.storage().flush();
        let s = self.0.storage();
        (u.bytes_in_use, u.bytes_reserved, s.allocated, s.peak, s.page_allocs)
    }
    fn persistent(&mut self, on: bool) {
        use srv011::memory_management::MemoryAllocationMode as M;
        self.0.mode(if on { M::Persistent } else { M::Auto });
    }
}

fn p010(total: u64) -> P010 {
    P010(rt010::memory_management::MemoryManagement::from_configuration(
        Books010::default(),
        &ir010::MemoryDeviceProperties { max_page_size: total / 4, alignment: 512 },
        rt010::memory_management::MemoryConfiguration::SubSlices,
        Arc::new(rt010::logging::ServerLogger::default()),
        rt010::memory_management::MemoryManagementOptions::new("Main GPU Memory"),
    ))
}
fn p011(total: u64) -> P011 {
    P011(srv011::memory_management::MemoryManagement::from_configuration(
        Books011::default(),
        &ir011::MemoryDeviceProperties::new(total / 4, 512).with_max_memory(total),
        srv011::memory_management::MemoryConfiguration::default(),
        Arc::new(rt011::logging::ServerLogger::default()),
        srv011::memory_management::MemoryManagementOptions::new("Main GPU Memory"),
    ))
}

fn show(label: &str, s: (u64, u64, u64, u64, u64)) {
    println!(
        "  {label:<34} in_use {:>10.1} MiB  reserved {:>10.1} MiB  storage {:>10.1} MiB  peak {:>10.1} MiB  pages allocated {}",
        s.0 as f64 / MIB as f64, s.1 as f64 / MIB as f64, s.2 as f64 / MIB as f64, s.3 as f64 / MIB as f64, s.4
    );
}

/// A toy training loop: persistent weights, then per step a rising set of activations of three
/// sizes and small metadata, freed at the end of the step.
fn run<P: Pool>(pool: &mut P) {
    pool.persistent(true);
    let weights: Vec<_> = (0..8).map(|i| pool.reserve(4 * MIB + i * 512 * 1024)).collect();
    pool.persistent(false);
    show("after weights", pool.stats());
    for step in 1..=3 {
        let mut live = Vec::new();
        for i in 0..48u64 {
            live.push(pool.reserve(32 * MIB));
            live.push(pool.reserve(3 * MIB + i * 4096));
            let meta = pool.reserve(256);
            drop(meta);
            if step == 2 && i == 24 {
                live.push(pool.reserve(600 * MIB));
            }
        }
        show(&format!("step {step}, peak of the step"), pool.stats());
        drop(live);
        show(&format!("step {step}, after the step"), pool.stats());
    }
    drop(weights);
}

fn main() {
    let total = 16 * GIB;
    println!("16 GiB card (max page = total / 4, alignment 512)");
    println!("CubeCL 0.10 MemoryManagement, MemoryConfiguration::SubSlices:");
    run(&mut p010(total));
    println!("CubeCL 0.11 MemoryManagement (cubecl-server 0.11), MemoryConfiguration::default() = Adaptive:");
    run(&mut p011(total));
}
