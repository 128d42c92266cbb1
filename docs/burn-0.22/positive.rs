//! Probe: the CubeCL 0.11 / burn 0.22 names a port of crates/dryrun would use.
//! Compiles only if every path and signature below is as the feasibility note says.
#![allow(dead_code, unused_imports)]

use std::collections::HashMap;
use std::sync::Arc;

// Storage contract: still in cubecl-runtime; `get` is fallible, `bytes_allocated` is new.
use cubecl_runtime::server::IoError;
use cubecl_runtime::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};
// The pools: now in cubecl-server; reserve takes a PageUpdate and an ErrorGraph.
use cubecl_server::memory_management::{
    Cleanup, ErrorGraph, ManagedMemoryHandle, MemoryAllocationMode, MemoryConfiguration,
    MemoryManagement, MemoryManagementOptions, PageUpdate,
};
// Value types a client sees stay in cubecl-runtime.
use cubecl_runtime::memory_management::{
    MemoryPoolKind, MemoryPoolsReport, MemoryReport, MemoryScope, MemoryUsage, StreamMemoryReport,
};
use cubecl_ir::MemoryDeviceProperties;
use cubecl_runtime::logging::ServerLogger;
// Server-side toolkit moved from cubecl-runtime to cubecl-server.
use cubecl_server::allocator::PitchedMemoryLayoutPolicy;
use cubecl_server::stream::{EventStreamBackend, MultiStream, ResolvedStreams};
use cubecl_server::timestamp_profiler::TimestampProfiler;
use cubecl_server::command::{Command, DeviceStream, Driver};
// Contract a runtime implements.
use cubecl_runtime::runtime::Runtime;
use cubecl_runtime::server::{Server, ServerStorage, ServerUtilities, ServerCommunication, LaunchError};
use cubecl_runtime::client::Client;
use cubecl_runtime::dry_run::{DryRun, LaunchMode};
use cubecl_common::device::{Device, DeviceId, DeviceService, DeviceServiceStage, ServerUtilitiesHandle};
// burn 0.22: one CubeBackend for every runtime, device = cubecl's closed enum.
use burn_cubecl::{CubeBackend, CubeDevice};
use burn_backend::DeviceOps;

/// A 0.11 `ComputeStorage` that only keeps books (what `DryStorage` would become).
#[derive(Debug, Default)]
pub struct Books {
    pages: HashMap<StorageId, u64>,
    pending: Vec<StorageId>,
    allocated: u64,
}

impl ComputeStorage for Books {
    type Resource = u64;
    fn alignment(&self) -> usize {
        512
    }
    fn get(&mut self, handle: &StorageHandle) -> Result<u64, IoError> {
        Ok(handle.size())
    }
    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let id = StorageId::new();
        self.pages.insert(id, size);
        self.allocated += size;
        Ok(StorageHandle::new(id, StorageUtilization { offset: 0, size }))
    }
    fn dealloc(&mut self, id: StorageId) {
        self.pending.push(id);
    }
    fn flush(&mut self) {
        for id in self.pending.drain(..) {
            if let Some(size) = self.pages.remove(&id) {
                self.allocated -= size;
            }
        }
    }
    fn bytes_allocated(&self) -> u64 {
        self.allocated
    }
}

/// cubecl-cuda 0.11's memory properties and its default configuration (Adaptive).
pub fn cuda_like_pool(total: u64) -> MemoryManagement<Books> {
    MemoryManagement::from_configuration(
        Books::default(),
        &MemoryDeviceProperties::new(total / 4, 512).with_max_memory(total),
        MemoryConfiguration::default(),
        Arc::new(ServerLogger::default()),
        MemoryManagementOptions::new("Main GPU Memory"),
    )
}

pub fn reserve(pool: &mut MemoryManagement<Books>, size: u64) -> Result<ManagedMemoryHandle, IoError> {
    let mut failures = ErrorGraph::default();
    pool.reserve(size, PageUpdate::Allow, &mut failures)
}

pub fn usage(pool: &MemoryManagement<Books>) -> MemoryUsage {
    pool.memory_report().usage()
}

/// A cube device is cubecl's enum; a CUDA one can be named without linking cubecl-cuda...
pub fn a_cuda_device() -> CubeDevice {
    CubeDevice::Cuda(cubecl::device::CudaDevice::new(0))
}
/// ...but burn-cubecl reaches its client through `cubecl::Device::client`.
pub fn client_of(device: &CubeDevice) -> Client {
    device.client()
}

/// burn 0.22's unfused cube backend: no runtime, no element type parameters.
pub type Unfused = CubeBackend;
pub type Fused = burn_fusion::Fusion<CubeBackend>;
pub type Trained = burn::backend::Autodiff<Fused>;
