//! What cubecl-server's shared command cannot do itself (cubecl-cuda 0.11.3 `driver.rs`), dry:
//! a copy moves nothing and a launch runs nothing; where the state they move in step with lives.

use cubecl_common::bytes::Bytes;
use cubecl_server::command::{CopyLayout, DeviceStream, Driver};
use cubecl_server::id::KernelId;
use cubecl_server::memory_management::drop_queue::PendingDropQueue;
use cubecl_server::memory_management::{ManagedMemoryBinding, MemoryManagement};
use cubecl_server::metadata_cache::MetadataInfoCache;
use cubecl_server::server::{Handle, IoError, LaunchError};
use cubecl_server::storage::{PinnedMemoryAllocController, PinnedMemoryResource};
use cubecl_server::stream::StreamCapture;

use crate::compute::events::Fence;
use crate::compute::server::DryContext;
use crate::compute::storage::cpu::PinnedMemoryStorage;
use crate::compute::storage::gpu::{GpuResource, GpuStorage};
use crate::compute::stream::{CudaStreamBackend, Stream};

impl DeviceStream for Stream {
    type Fence = Fence;
    type DeviceStorage = GpuStorage;
    type HostStorage = PinnedMemoryStorage;
    type Signal = ();

    fn device_memory(&mut self) -> &mut MemoryManagement<GpuStorage> {
        &mut self.memory_management_gpu
    }

    fn host_memory(&mut self) -> &mut MemoryManagement<PinnedMemoryStorage> {
        &mut self.memory_management_cpu
    }

    fn drop_queue(&mut self) -> &mut PendingDropQueue<Fence> {
        &mut self.drop_queue
    }

    fn capturing(&mut self) -> &mut StreamCapture {
        &mut self.capturing
    }

    fn info_cache(&mut self) -> &mut MetadataInfoCache<Handle> {
        &mut self.info_cache
    }

    fn signal(&self) -> Self::Signal {}

    fn fence(_signal: Self::Signal) -> Fence {
        Fence
    }
}

/// CUDA without a GPU, as the shared command sees it.
pub(crate) struct Cuda;

impl Driver for Cuda {
    type Backend = CudaStreamBackend;
    type Stream = Stream;
    type Context = DryContext;
    type LaunchArgs = ();

    unsafe fn pinned_bytes(
        binding: ManagedMemoryBinding,
        resource: PinnedMemoryResource,
        size: usize,
    ) -> Bytes {
        let controller = Box::new(PinnedMemoryAllocController::init(binding, resource));
        // SAFETY: the caller guarantees `binding` names initialized memory of at least `size`
        // bytes; the host storage zeroes every page.
        unsafe { Bytes::from_controller(controller, size) }
    }

    unsafe fn copy_to_host(
        _resource: &GpuResource,
        _layout: &CopyLayout<'_>,
        _bytes: &mut Bytes,
        _stream: &Stream,
    ) -> Result<(), IoError> {
        Ok(())
    }

    unsafe fn copy_to_device(
        resource: &GpuResource,
        _layout: &CopyLayout<'_>,
        data: &[u8],
        _stream: &Stream,
    ) -> Result<(), IoError> {
        // The one check cubecl-cuda makes before a linear copy: it is a refusal there too.
        if resource.size < data.len() as u64 {
            return Err(IoError::Unknown {
                description: format!(
                    "write of {} bytes exceeds the target buffer of {} bytes",
                    data.len(),
                    resource.size
                ),
                backtrace: cubecl_environment::backtrace::BackTrace::capture(),
            });
        }
        Ok(())
    }

    unsafe fn copy_on_device(
        _source: &GpuResource,
        _target: &GpuResource,
        _queue: (),
    ) -> Result<(), IoError> {
        Ok(())
    }

    fn launch(
        _ctx: &mut DryContext,
        _stream: &mut Stream,
        _kernel: KernelId,
        _count: (u32, u32, u32),
        _args: &mut (),
    ) -> Result<(), LaunchError> {
        Ok(())
    }
}
