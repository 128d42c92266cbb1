//! cubecl-cuda 0.11.3's `CudaServer` (`compute/server.rs`), dry: every path that reserves,
//! stages, binds or frees memory is cubecl-cuda's, through cubecl-server's shared command;
//! kernels are dropped without compiling, copies move nothing, and autotune's timings are a
//! policy ([`TieBreak`]) since nothing runs. Graph capture and collectives are refused, as on a
//! device that has none (burn's training step uses neither).

use std::collections::HashMap;
use std::sync::Arc;

use cubecl_common::bytes::Bytes;
use cubecl_common::profile::{Duration, Instant, ProfileDuration};
use cubecl_core::MemoryConfiguration;
use cubecl_core::ir::MemoryDeviceProperties;
use cubecl_core::prelude::*;
use cubecl_core::server::{
    BufferBinding, CopyDescriptor, DeviceCaptures, Handle, KernelArguments, KernelResource,
    ProfileError, ProfilingToken, ServerCommunication, ServerError, ServerStorage, ServerUtilities,
    TensorMapBinding,
};
use cubecl_environment::backtrace::BackTrace;
use cubecl_environment::future::{self, DynFut};
use cubecl_environment::stream::StreamId;
use cubecl_server::config::{CubeClRuntimeConfig, RuntimeConfig};
use cubecl_server::dry_run::LaunchMode;
use cubecl_server::kernel::CubeKernel;
use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::{
    ManagedMemoryHandle, MemoryAllocationMode, StreamMemoryReport,
};
use cubecl_server::server::Server;
use cubecl_server::storage::{ComputeStorage, ManagedResource};
use cubecl_server::stream::{ExecuteScope, FailureStore, MultiStream, WriteScoped};

use crate::compute::storage::gpu::{GpuResource, GpuStorage};
use crate::compute::{Command, stream::CudaStreamBackend};
use crate::dry::{DeviceMemory, TieBreak};

/// What the command hands the driver: cubecl-cuda's `CudaContext` holds loaded modules and
/// profiling clocks; here, what the launch path and the profiler need.
#[derive(Debug)]
pub(crate) struct DryContext {
    /// Whether static metadata rides in the kernel's parameters (sm ≥ 70): then only the
    /// dynamic part of a launch's metadata takes a device buffer.
    grid_constants: bool,
    tie_break: TieBreak,
    /// Bytes reserved for tensors and launch metadata so far, summed: what a profiled candidate
    /// asked of the pools.
    reserved_total: u64,
    /// Open profiles: where `reserved_total` stood at each start.
    profiles: HashMap<ProfilingToken, u64>,
    next_token: u64,
}

/// The dry CUDA server.
#[derive(Debug)]
pub struct CudaServer {
    ctx: DryContext,
    streams: MultiStream<CudaStreamBackend>,
    utilities: Arc<ServerUtilities>,
    /// Modes set on streams that did not exist yet, applied when the stream is made.
    pending_allocation_modes: HashMap<StreamId, MemoryAllocationMode>,
}

/// Stage `words` into a device buffer, reusing a cached one when a launch already staged these
/// exact words: cubecl-cuda 0.11.3's `info_buffer`, whose cache decides what stays reserved.
fn info_buffer(command: &mut Command<'_>, words: &[u64]) -> Result<Handle, ServerError> {
    let size = core::mem::size_of_val(words);
    let cache_mode = command.stream().capturing.cache_mode();
    command.stream().info_cache.mode(cache_mode);
    if !command.stream().info_cache.should_cache(size) {
        return Ok(command.create_with_data(bytemuck::cast_slice(words))?);
    }
    if let Some(handle) = command.stream().info_cache.get(words) {
        return Ok(handle);
    }
    let handle = command.create_with_data(bytemuck::cast_slice(words))?;
    command
        .stream()
        .info_cache
        .insert(words.to_vec(), handle.clone());
    Ok(handle)
}

impl Server for CudaServer {
    fn logger(&self) -> Arc<ServerLogger> {
        self.streams.logger.clone()
    }

    fn staging(&mut self, sizes: &[usize], stream_id: StreamId) -> Result<Vec<Bytes>, ServerError> {
        let mut command = self.command_no_inputs(stream_id)?;
        Ok(sizes
            .iter()
            .map(|size| command.reserve_cpu(*size, None))
            .collect())
    }

    fn utilities(&self) -> Arc<ServerUtilities> {
        self.utilities.clone()
    }

    fn read(
        &mut self,
        descriptors: Vec<CopyDescriptor>,
        stream_id: StreamId,
    ) -> DynFut<Result<Vec<Bytes>, ServerError>> {
        if let Err(err) = self
            .streams
            .ensure_written(descriptors.iter().map(|d| &d.handle))
        {
            return Box::pin(async move { Err(err) });
        }
        let mut command = match self.command(stream_id, descriptors.iter().map(|d| &d.handle)) {
            Ok(command) => command,
            Err(err) => return Box::pin(async move { Err(err) }),
        };
        Box::pin(command.read_async(descriptors))
    }

    fn initialize_memory(
        &mut self,
        memory: ManagedMemoryHandle,
        size: u64,
        stream_id: StreamId,
    ) -> Result<(), ServerError> {
        self.ctx.reserved_total += size;
        let result = match self.command_no_inputs(stream_id) {
            Ok(mut command) => command
                .initialize_memory(memory.clone(), size)
                .map_err(ServerError::from),
            Err(error) => Err(error),
        };
        if let Err(error) = &result {
            self.streams.fail_unallocated(&memory, error.clone());
        }
        result
    }

    fn write(&mut self, descriptors: Vec<(CopyDescriptor, Bytes)>, stream_id: StreamId) {
        for (descriptor, data) in descriptors {
            let mut written = self.write_set();
            written.push(descriptor.handle.clone());
            ExecuteScope::over(self, stream_id, written).execute(|server| {
                let mut command = server.command(stream_id, [&descriptor.handle].into_iter())?;
                command.write_to_gpu(descriptor, data).map_err(Into::into)
            });
        }
    }

    unsafe fn launch(
        &mut self,
        kernel: Box<dyn CubeKernel>,
        count: CubeCount,
        bindings: KernelArguments,
        stream_id: StreamId,
        launch_mode: LaunchMode,
    ) {
        // cubecl-cuda compiles here, memoized; the dry server never compiles, so it takes every
        // kernel to compile (a candidate that would fail on the GPU is one autotune keeps here).
        let kernel_id = kernel.id();
        if launch_mode.is_skipped() {
            return;
        }
        let count = match self.resolve_cube_count(count, stream_id) {
            Ok(count) => count,
            Err(err) => {
                let mut written = self.write_set();
                written.extend(bindings.buffers_written(None).cloned());
                cubecl_server::stream::failed_writing(self, stream_id, written, err);
                return;
            }
        };
        if count.0 == 0 || count.1 == 0 || count.2 == 0 {
            return;
        }
        let mut written = self.write_set();
        written.extend(bindings.buffers_written(None).cloned());
        ExecuteScope::launching(
            self,
            kernel_id.clone(),
            stream_id,
            bindings.buffers_read(None),
            written,
        )
        .execute(|server| server.launch_checked(kernel_id, count, bindings, stream_id));
    }

    fn check(
        &mut self,
        handles: Vec<BufferBinding>,
        _stream_id: StreamId,
    ) -> Result<(), ServerError> {
        self.streams.ensure_written(handles.iter())
    }

    fn flush(&mut self, stream_id: StreamId) -> Result<(), ServerError> {
        let mut command = self.command_no_inputs(stream_id)?;
        command.flush_drops();
        command.stream().memory_management_gpu.storage().flush();
        Ok(())
    }

    fn sync(
        &mut self,
        handles: Vec<BufferBinding>,
        stream_id: StreamId,
    ) -> DynFut<Result<(), ServerError>> {
        if let Err(err) = self.streams.ensure_written(handles.iter()) {
            return Box::pin(async move { Err(err) });
        }
        match self.command_no_inputs(stream_id) {
            Ok(mut command) => command.sync(),
            Err(err) => Box::pin(async move { Err(err) }),
        }
    }

    fn start_profile(&mut self, stream_id: StreamId) -> Result<ProfilingToken, ServerError> {
        future::block_on(self.sync(Vec::new(), stream_id))?;
        let token = ProfilingToken {
            id: self.ctx.next_token,
        };
        self.ctx.next_token += 1;
        self.ctx.profiles.insert(token, self.ctx.reserved_total);
        Ok(token)
    }

    fn end_profile(
        &mut self,
        stream_id: StreamId,
        token: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        future::block_on(self.sync(Vec::new(), stream_id))
            .map_err(|err| ProfileError::Server(Box::new(err)))?;
        let start =
            self.ctx
                .profiles
                .remove(&token)
                .ok_or_else(|| ProfileError::NotRegistered {
                    backtrace: BackTrace::capture(),
                })?;
        // Nothing ran, so the time is the tie-break's: a clock reading here would make the
        // choice change from run to run.
        let bytes = self.ctx.reserved_total - start;
        let now = Instant::now();
        let took = Duration::from_nanos(self.ctx.tie_break.nanos(bytes));
        Ok(ProfileDuration::new_system_time(now, now + took))
    }

    fn abandon_profile(&mut self, _stream_id: StreamId, token: ProfilingToken) {
        self.ctx.profiles.remove(&token);
    }

    fn memory_report(&mut self, stream_id: StreamId) -> Option<StreamMemoryReport> {
        self.streams.try_stream_mut(&stream_id)?;
        self.command_no_inputs(stream_id)
            .ok()
            .map(|mut command| command.memory_report())
    }

    fn stream_ids(&self) -> Vec<StreamId> {
        self.streams.stream_ids().collect()
    }

    fn memory_cleanup(&mut self, stream_id: StreamId) -> Result<(), ServerError> {
        let mut command = self.command_no_inputs(stream_id)?;
        command.memory_cleanup()
    }

    fn allocation_mode(&mut self, mode: MemoryAllocationMode, stream_id: StreamId) {
        match self.streams.try_stream_mut(&stream_id) {
            Some(stream) => stream.memory_management_gpu.mode(mode),
            None => {
                self.pending_allocation_modes.insert(stream_id, mode);
            }
        }
    }
}

/// No collectives: a dry device joins no group (every call is refused by the defaults).
impl ServerCommunication for CudaServer {}

impl WriteScoped for CudaServer {
    type Streams = MultiStream<CudaStreamBackend>;

    fn write_streams(&mut self) -> &mut Self::Streams {
        &mut self.streams
    }

    fn capturing(&mut self, stream: StreamId) -> Option<&mut cubecl_server::stream::StreamCapture> {
        self.streams
            .try_stream_mut(&stream)
            .map(|stream| &mut stream.capturing)
    }
}

impl CudaServer {
    /// A server over `memory`, configured as cubecl-cuda's.
    pub(crate) fn new(
        mem_props: MemoryDeviceProperties,
        mem_config: MemoryConfiguration,
        grid_constants: bool,
        tie_break: TieBreak,
        memory: DeviceMemory,
        utilities: ServerUtilities,
        captures: DeviceCaptures,
    ) -> Self {
        let max_streams = CubeClRuntimeConfig::get().streaming.max_streams;
        let backend = CudaStreamBackend::new(
            mem_props,
            mem_config,
            utilities.logger.clone(),
            captures,
            memory,
        );
        Self {
            ctx: DryContext {
                grid_constants,
                tie_break,
                reserved_total: 0,
                profiles: HashMap::new(),
                next_token: 0,
            },
            streams: MultiStream::new(utilities.logger.clone(), backend, max_streams),
            utilities: Arc::new(utilities),
            pending_allocation_modes: HashMap::new(),
        }
    }

    pub(crate) fn utilities(&self) -> Arc<ServerUtilities> {
        self.utilities.clone()
    }

    fn command_no_inputs(&mut self, stream_id: StreamId) -> Result<Command<'_>, ServerError> {
        self.command(stream_id, [].into_iter())
    }

    fn command<'a>(
        &mut self,
        stream_id: StreamId,
        handles: impl Iterator<Item = &'a BufferBinding>,
    ) -> Result<Command<'_>, ServerError> {
        let mut streams = self.streams.resolve(stream_id, handles)?;
        if let Some(mode) = self.pending_allocation_modes.remove(&stream_id) {
            streams.current().memory_management_gpu.mode(mode);
        }
        Ok(Command::new(&mut self.ctx, streams, self.utilities.service))
    }

    /// A dynamic count is read back from the device as cubecl-cuda reads it; the bytes are
    /// zeros here, so such a launch counts as empty and stages no metadata.
    fn resolve_cube_count(
        &mut self,
        count: CubeCount,
        stream_id: StreamId,
    ) -> Result<(u32, u32, u32), ServerError> {
        match count {
            CubeCount::Static(x, y, z) => Ok((x, y, z)),
            CubeCount::Dynamic(binding) => {
                self.streams.ensure_written([&binding].into_iter())?;
                let mut command = self.command(stream_id, [&binding].into_iter())?;
                let data = future::block_on(command.read_async(vec![CopyDescriptor::new(
                    binding,
                    [3].into(),
                    [1].into(),
                    4,
                )]))?;
                let data: &[u32] = bytemuck::cast_slice(&data[0]);
                Ok((data[0], data[1], data[2]))
            }
        }
    }

    /// cubecl-cuda 0.11.3's `launch_checked`: stage the launch's metadata, resolve every
    /// binding, enqueue (here: nothing), so the pools see what they see on the GPU.
    fn launch_checked(
        &mut self,
        kernel_id: KernelId,
        count: (u32, u32, u32),
        bindings: KernelArguments,
        stream_id: StreamId,
    ) -> Result<(), ServerError> {
        let grid_constants = self.ctx.grid_constants;
        let info = &bindings.info;
        let staged = if grid_constants {
            (info.dynamic_metadata_offset < info.data.len())
                .then(|| info.data[info.dynamic_metadata_offset..].to_vec())
        } else {
            (!info.data.is_empty()).then(|| info.data.clone())
        };
        if let Some(words) = &staged {
            self.ctx.reserved_total += core::mem::size_of_val(words.as_slice()) as u64;
        }
        let mut command = self.command(stream_id, bindings.buffers())?;
        let info_binding = match staged {
            Some(words) => Some(info_buffer(&mut command, &words)?),
            None => None,
        };
        for resource in bindings.resources {
            let binding = match resource {
                KernelResource::Buffer(binding) => binding,
                KernelResource::TensorMap(TensorMapBinding { binding, .. }) => binding,
            };
            command.resource(binding)?;
        }
        if let Some(handle) = info_binding {
            command.resource(handle.binding())?;
        }
        command.kernel(kernel_id, count, &mut ())?;
        Ok(())
    }
}

impl ServerStorage for CudaServer {
    type Storage = GpuStorage;

    fn get_resource(
        &mut self,
        binding: BufferBinding,
        stream_id: StreamId,
    ) -> Result<ManagedResource<GpuResource>, ServerError> {
        self.streams.ensure_written([&binding].into_iter())?;
        let mut command = self.command(stream_id, [&binding].into_iter())?;
        Ok(command.managed_resource(binding)?)
    }
}
