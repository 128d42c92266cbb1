//! cubecl-cuda 0.11.3's streams: one `MemoryManagement` per stream for the device (over the
//! dry storage, all charged to one card) and one for pinned host memory, configured as
//! cubecl-cuda configures them.

use std::sync::Arc;

use cubecl_core::MemoryConfiguration;
use cubecl_core::ir::MemoryDeviceProperties;
use cubecl_core::server::{BufferBinding, DeviceCaptures, Handle, ServerError};
use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::{
    ErrorGraph, FailureId, MemoryAllocationMode, MemoryManagement, MemoryManagementOptions,
    drop_queue,
};
use cubecl_server::metadata_cache::{MetadataCachePolicy, MetadataInfoCache};
use cubecl_server::storage::PINNED_MEMORY_ALIGNMENT;
use cubecl_server::stream::{EventStreamBackend, StreamCapture, StreamMemory};

use crate::compute::events::Fence;
use crate::compute::storage::{cpu::PinnedMemoryStorage, gpu::GpuStorage};
use crate::dry::DeviceMemory;

/// One stream's state, as cubecl-cuda's `Stream` less the driver handle.
#[derive(Debug)]
pub struct Stream {
    pub memory_management_gpu: MemoryManagement<GpuStorage>,
    pub memory_management_cpu: MemoryManagement<PinnedMemoryStorage>,
    pub drop_queue: drop_queue::PendingDropQueue<Fence>,
    pub capturing: StreamCapture,
    pub info_cache: MetadataInfoCache<Handle>,
}

impl StreamMemory for Stream {
    fn failure(&self, binding: &BufferBinding) -> Option<FailureId> {
        self.memory_management_gpu
            .failure(&binding.memory, binding.range())
    }

    fn taint(&mut self, binding: &BufferBinding, failure: FailureId, failures: &mut ErrorGraph) {
        self.memory_management_gpu
            .taint(&binding.memory, binding.range(), failure, failures)
    }

    fn written(&mut self, binding: &BufferBinding, failures: &mut ErrorGraph) {
        self.memory_management_gpu
            .written(&binding.memory, binding.range(), failures)
    }
}

/// Makes the streams, as cubecl-cuda's `CudaStreamBackend`.
#[derive(new, Debug)]
pub struct CudaStreamBackend {
    mem_props: MemoryDeviceProperties,
    mem_config: MemoryConfiguration,
    logger: Arc<ServerLogger>,
    captures: DeviceCaptures,
    memory: DeviceMemory,
}

impl EventStreamBackend for CudaStreamBackend {
    type Stream = Stream;
    type Event = Fence;

    fn create_stream(&self) -> Result<Self::Stream, ServerError> {
        let memory_management_gpu = MemoryManagement::from_configuration(
            GpuStorage::new(self.memory.clone()),
            &self.mem_props,
            self.mem_config.clone(),
            self.logger.clone(),
            MemoryManagementOptions::new("Main GPU Memory"),
        );
        // As cubecl-cuda: the host pool takes the device's page sizes.
        let memory_management_cpu = MemoryManagement::from_configuration(
            PinnedMemoryStorage::new(),
            &MemoryDeviceProperties::new(
                self.mem_props.max_page_size,
                PINNED_MEMORY_ALIGNMENT as u64,
            ),
            self.mem_config.clone(),
            self.logger.clone(),
            MemoryManagementOptions::new("Pinned CPU Memory").mode(MemoryAllocationMode::Auto),
        );
        Ok(Stream {
            memory_management_gpu,
            memory_management_cpu,
            drop_queue: Default::default(),
            capturing: StreamCapture::new(&self.captures),
            info_cache: MetadataInfoCache::new(MetadataCachePolicy::default()),
        })
    }

    fn flush(_stream: &mut Self::Stream, _failures: &mut ErrorGraph) -> Self::Event {
        Fence
    }

    fn wait_event(_stream: &mut Self::Stream, _event: Self::Event) -> Result<(), ServerError> {
        Ok(())
    }

    fn wait_event_sync(_event: Self::Event) -> Result<(), ServerError> {
        Ok(())
    }

    fn handle_cursor(stream: &Self::Stream, binding: &BufferBinding) -> u64 {
        stream
            .memory_management_gpu
            .get_cursor(binding.memory.clone())
            .unwrap_or(u64::MAX)
    }
}
