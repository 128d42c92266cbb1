//! The dry compute server: cubecl-cuda 0.10's `CudaServer`, every memory decision kept and every
//! kernel dropped.
//!
//! What is the same as on CUDA, call for call (cubecl-cuda `compute/server.rs`, `command.rs`,
//! `stream.rs`): streams come from cubecl-runtime's own `MultiStream`, each with its own
//! `MemoryManagement` built from the same configuration; a reservation binds a pool slice to the
//! client's handle at the stream's cursor; a launch copies the dynamic part of its metadata (all
//! of it below sm 70) into a buffer reserved from the pool, then lets it go; freed pages go back
//! to the card when the stream is flushed; errors park on the stream and are returned by the next
//! call that flushes them, after an automatic cleanup. What differs: nothing runs, reads return
//! zeros of the right length, and a page the card could not hold is granted and recorded (see
//! [`crate::memory`]).

use std::sync::Arc;

use cubecl_common::bytes::Bytes;
use cubecl_common::future::DynFut;
use cubecl_common::profile::ProfileDuration;
use cubecl_common::stream_id::StreamId;
use cubecl_cpp::cuda::CudaDialect;
use cubecl_cpp::cuda::mma::CudaWmmaCompiler;
use cubecl_cpp::shared::CppCompiler;
use cubecl_ir::MemoryDeviceProperties;
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;
use cubecl_runtime::compiler::CubeTask;
use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};
use cubecl_runtime::logging::ServerLogger;
use cubecl_runtime::memory_management::{
    ManagedMemoryHandle, MemoryAllocationMode, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions, MemoryUsage,
};
use cubecl_runtime::server::{
    Binding, ComputeServer, CopyDescriptor, CubeCount, ExecutionMode, Handle, IoError,
    KernelArguments, ProfileError, ProfilingToken, ServerCommunication, ServerError,
    ServerUtilities, StreamErrorMode,
};
use cubecl_runtime::storage::{ComputeStorage, ManagedResource};
use cubecl_runtime::stream::{EventStreamBackend, MultiStream, ResolvedStreams};
use cubecl_runtime::timestamp_profiler::TimestampProfiler;
use cubecl_zspace::striding::has_pitched_row_major_strides;

use crate::memory::{DeviceMemory, DryResource, DryStorage};
use crate::schedule::{Held, Queue, Schedule};

/// The compiler type cubecl-cuda's runtime names (never called: the server compiles nothing).
pub(crate) type CudaCompiler = CppCompiler<CudaDialect<CudaWmmaCompiler>>;

/// A stream: its pool, and the errors waiting for the next flush.
#[derive(Debug)]
pub(crate) struct DryStream {
    memory: MemoryManagement<DryStorage>,
    errors: Vec<ServerError>,
    /// At least the pool's bytes in use now: the last count plus every reservation since
    /// (frees since only lower it), so the pool is counted only when the peak may have moved.
    in_use_bound: u64,
}

/// Makes streams as cubecl-cuda's `CudaStreamBackend` does, over the shared device memory.
#[derive(Debug)]
pub(crate) struct DryStreamBackend {
    memory_properties: MemoryDeviceProperties,
    device_memory: DeviceMemory,
    logger: Arc<ServerLogger>,
}

impl EventStreamBackend for DryStreamBackend {
    type Stream = DryStream;
    /// Nothing runs, so every event has already happened.
    type Event = ();

    fn create_stream(&self) -> DryStream {
        DryStream {
            memory: MemoryManagement::from_configuration(
                DryStorage::new(self.device_memory.clone()),
                &self.memory_properties,
                MemoryConfiguration::default(),
                self.logger.clone(),
                MemoryManagementOptions::new("Main GPU Memory"),
            ),
            errors: Vec::new(),
            in_use_bound: 0,
        }
    }

    fn flush(_stream: &mut DryStream) {}

    fn wait_event(_stream: &mut DryStream, _event: ()) {}

    fn wait_event_sync(_event: ()) -> Result<(), ServerError> {
        Ok(())
    }

    fn handle_cursor(stream: &DryStream, binding: &Binding) -> u64 {
        stream.memory.get_cursor(binding.memory.clone()).unwrap()
    }

    fn is_healthy(stream: &DryStream) -> bool {
        stream.errors.is_empty()
    }
}

/// The server of one dry device.
#[derive(Debug)]
pub struct DryServer {
    streams: MultiStream<DryStreamBackend>,
    utilities: Arc<ServerUtilities<Self>>,
    device_memory: DeviceMemory,
    timestamps: TimestampProfiler,
    /// Launches pass static metadata as a grid constant (sm ≥ 70).
    grid_constants: bool,
    /// What an autotune candidate's time is, nothing having run.
    tie_break: TieBreak,
    /// Bytes reserved on the device when the running profile started.
    profile_start: u64,
    /// How far the server runs behind: [`Schedule`].
    schedule: Schedule,
    /// The commands it holds back meanwhile.
    queue: Queue,
}

/// How the dry device settles a problem it has to autotune (one its copy of the GPU's cache
/// lacks). Nothing runs, so a candidate's time is a policy; the tuner keeps the candidate with the
/// least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TieBreak {
    /// Every candidate takes no time: the tuner keeps the first that launched.
    #[default]
    First,
    /// A candidate takes a nanosecond per byte it reserves (its output, workspace and launch
    /// metadata): the tuner keeps the leanest, and the cache line it writes records every
    /// candidate's bytes as its time.
    LeastMemory,
    /// The same cost reversed (2⁴⁰ ns less a nanosecond per byte): the tuner keeps the
    /// hungriest.
    MostMemory,
}

impl TieBreak {
    /// Above any candidate's bytes (a terabyte), so that [`TieBreak::MostMemory`] stays positive.
    const CEILING: u64 = 1 << 40;

    /// The time, in nanoseconds, of a candidate that reserved `bytes`.
    fn nanos(self, bytes: u64) -> u64 {
        match self {
            TieBreak::First => 0,
            TieBreak::LeastMemory => bytes,
            TieBreak::MostMemory => Self::CEILING - bytes.min(Self::CEILING - 1),
        }
    }

    /// The bytes a candidate reserved, from the time a [`TieBreak::LeastMemory`] or
    /// [`TieBreak::MostMemory`] device wrote for it.
    pub fn bytes(self, nanos: u64) -> Option<u64> {
        match self {
            TieBreak::First => None,
            TieBreak::LeastMemory => Some(nanos),
            TieBreak::MostMemory => Some(Self::CEILING.saturating_sub(nanos)),
        }
    }
}

impl DryServer {
    pub(crate) fn new(
        utilities: ServerUtilities<Self>,
        device_memory: DeviceMemory,
        grid_constants: bool,
        tie_break: TieBreak,
        schedule: Schedule,
    ) -> Self {
        let max_streams = CubeClRuntimeConfig::get().streaming.max_streams;
        let logger = utilities.logger.clone();
        let backend = DryStreamBackend {
            memory_properties: utilities.properties.memory.clone(),
            device_memory: device_memory.clone(),
            logger: logger.clone(),
        };
        Self {
            streams: MultiStream::new(logger, backend, max_streams),
            utilities: Arc::new(utilities),
            device_memory,
            timestamps: TimestampProfiler::default(),
            grid_constants,
            tie_break,
            profile_start: 0,
            schedule,
            queue: Queue::default(),
        }
    }

    /// Holds `command` and runs those it makes due ([`Schedule::lag`]).
    fn hold(&mut self, command: Held) {
        for due in self.queue.hold(command, self.schedule.lag) {
            self.run(due);
        }
    }

    /// Runs every held command: before anything that answers the caller.
    fn catch_up(&mut self) {
        for due in self.queue.drain() {
            self.run(due);
        }
    }

    fn run(&mut self, command: Held) {
        match command {
            Held::Reserve {
                memory,
                size,
                stream,
            } => self.reserve_now(memory, size, stream),
            Held::Launch { bindings, stream } => self.launch_now(bindings, stream),
            Held::Write {
                descriptors,
                stream,
            } => self.write_now(descriptors, stream),
            Held::Mode { mode, stream } => self.mode_now(mode, stream),
        }
    }

    fn reserve_now(&mut self, memory: ManagedMemoryHandle, size: u64, stream_id: StreamId) {
        let device_memory = self.device_memory.clone();
        let mut streams = match self.command(stream_id, [].into_iter(), IGNORE) {
            Ok(streams) => streams,
            Err(err) => unreachable!("{err:?}"),
        };
        // As cubecl-cuda: a reservation the pools cannot take at all (larger than the largest
        // page) panics on the server thread.
        reserve_and_bind(&mut streams, &device_memory, size, memory).unwrap();
    }

    fn launch_now(&mut self, bindings: KernelArguments, stream_id: StreamId) {
        if let Err(err) = self.launch_checked(bindings, stream_id) {
            let mut streams = match self.streams.resolve(stream_id, [].into_iter(), false) {
                Ok(streams) => streams,
                Err(err) => unreachable!("{err:?}"),
            };
            streams.current().errors.push(err);
        }
    }

    fn write_now(&mut self, descriptors: Vec<(CopyDescriptor, Bytes)>, stream_id: StreamId) {
        let handles: Vec<Binding> = descriptors.iter().map(|d| d.0.handle.clone()).collect();
        let mut streams = match self.command(stream_id, handles.iter(), IGNORE) {
            Ok(streams) => streams,
            Err(err) => unreachable!("{err:?}"),
        };
        for (descriptor, _data) in descriptors {
            let checked = check_copy(&descriptor)
                .and_then(|()| resource(&mut streams, descriptor.handle).map(|_| ()));
            if let Err(err) = checked {
                streams.current().errors.push(err.into());
                return;
            }
        }
    }

    fn mode_now(&mut self, mode: MemoryAllocationMode, stream_id: StreamId) {
        match self.command(stream_id, [].into_iter(), IGNORE) {
            Ok(mut streams) => streams.current().memory.mode(mode),
            Err(err) => unreachable!("{err:?}"),
        }
    }

    /// The streams resolved for a task, as `CudaServer::command` resolves them.
    fn command<'a>(
        &mut self,
        stream_id: StreamId,
        handles: impl Iterator<Item = &'a Binding>,
        mode: StreamErrorMode,
    ) -> Result<ResolvedStreams<'_, DryStreamBackend>, ServerError> {
        if mode.flush {
            let errors = self.flush_errors(stream_id);
            if !mode.ignore && !errors.is_empty() {
                return Err(ServerError::ServerUnhealthy {
                    errors,
                    backtrace: cubecl_common::backtrace::BackTrace::capture(),
                });
            }
        }
        self.streams.resolve(stream_id, handles, !mode.ignore)
    }

    fn flush_errors(&mut self, stream_id: StreamId) -> Vec<ServerError> {
        let Ok(mut streams) = self.streams.resolve(stream_id, [].into_iter(), false) else {
            return Vec::new();
        };
        let stream = streams.current();
        let errors = std::mem::take(&mut stream.errors);
        if !errors.is_empty() {
            self.timestamps.error(ProfileError::Unknown {
                reason: format!("{errors:?}"),
                backtrace: cubecl_common::backtrace::BackTrace::capture(),
            });
            stream.memory.cleanup(false);
        }
        errors
    }

    fn launch_checked(
        &mut self,
        bindings: KernelArguments,
        stream_id: StreamId,
    ) -> Result<(), ServerError> {
        let grid_constants = self.grid_constants;
        let device_memory = self.device_memory.clone();
        let mut streams = self.command(stream_id, bindings.buffers.iter(), IGNORE)?;
        let info = &bindings.info;
        // The metadata copied to the device: with grid constants only its dynamic part.
        let copied = if grid_constants {
            info.data.len().saturating_sub(info.dynamic_metadata_offset)
        } else {
            info.data.len()
        };
        let metadata = if copied > 0 {
            let bytes = (copied * size_of::<u64>()) as u64;
            Some(empty(&mut streams, &device_memory, bytes)?)
        } else {
            None
        };
        let buffers = bindings
            .tensor_maps
            .iter()
            .map(|map| map.binding.clone())
            .chain(bindings.buffers)
            .chain(metadata.map(Handle::binding));
        for binding in buffers {
            resource(&mut streams, binding)?;
        }
        Ok(())
    }
}

const IGNORE: StreamErrorMode = StreamErrorMode {
    ignore: true,
    flush: false,
};
const FLUSH: StreamErrorMode = StreamErrorMode {
    ignore: false,
    flush: true,
};
const STRICT: StreamErrorMode = StreamErrorMode {
    ignore: false,
    flush: false,
};

/// `Command::reserve` + `Command::bind`: a pool slice bound to `memory` at the stream's cursor.
fn reserve_and_bind(
    streams: &mut ResolvedStreams<'_, DryStreamBackend>,
    device_memory: &DeviceMemory,
    size: u64,
    memory: ManagedMemoryHandle,
) -> Result<(), IoError> {
    let cursor = streams.cursor;
    let stream = streams.current();
    device_memory.requesting(size);
    let reserved = stream.memory.reserve(size)?;
    stream.memory.bind(reserved, memory, cursor)?;
    // Bytes in use only grow here, by `size` (every pool counts a slice at its requested size).
    // Counting them walks every page's slices, so it is done only when the bound could pass
    // the peak: the peak stays exact at a fraction of the cost.
    stream.in_use_bound += size;
    if device_memory.may_pass_peak_in_use(stream.in_use_bound) {
        stream.in_use_bound = stream.memory.memory_usage().bytes_in_use;
        device_memory.in_use_seen(stream.in_use_bound);
    }
    Ok(())
}

/// `Command::empty`: a new handle with its memory reserved on the current stream.
fn empty(
    streams: &mut ResolvedStreams<'_, DryStreamBackend>,
    device_memory: &DeviceMemory,
    size: u64,
) -> Result<Handle, IoError> {
    let handle = Handle::new(streams.current, size);
    reserve_and_bind(streams, device_memory, size, handle.memory.clone())?;
    Ok(handle)
}

/// `Command::resource`: the binding resolved in the pool of the stream that made it.
fn resource(
    streams: &mut ResolvedStreams<'_, DryStreamBackend>,
    binding: Binding,
) -> Result<DryResource, IoError> {
    streams.get(&binding.stream).memory.get_resource(
        binding.memory,
        binding.offset_start,
        binding.offset_end,
    )
}

/// A copy cubecl-cuda would refuse (`write_to_gpu`/`write_to_cpu`): strides not pitched row-major.
fn check_copy(descriptor: &CopyDescriptor) -> Result<(), IoError> {
    if has_pitched_row_major_strides(&descriptor.shape, &descriptor.strides) {
        Ok(())
    } else {
        Err(IoError::UnsupportedStrides {
            backtrace: cubecl_common::backtrace::BackTrace::capture(),
        })
    }
}

impl ServerCommunication for DryServer {
    const SERVER_COMM_ENABLED: bool = false;
}

impl ComputeServer for DryServer {
    type Kernel = Box<dyn CubeTask<CudaCompiler>>;
    type Storage = DryStorage;
    type MemoryLayoutPolicy = PitchedMemoryLayoutPolicy;
    type Info = ();

    fn logger(&self) -> Arc<ServerLogger> {
        self.streams.logger.clone()
    }

    fn utilities(&self) -> Arc<ServerUtilities<Self>> {
        self.utilities.clone()
    }

    fn staging(&mut self, sizes: &[usize], stream_id: StreamId) -> Result<Vec<Bytes>, ServerError> {
        // Host memory (pinned on CUDA): not the device's, so plain vectors here.
        self.command(stream_id, [].into_iter(), IGNORE)?;
        Ok(sizes
            .iter()
            .map(|&n| Bytes::from_bytes_vec(vec![0; n]))
            .collect())
    }

    fn read(
        &mut self,
        descriptors: Vec<CopyDescriptor>,
        stream_id: StreamId,
    ) -> DynFut<Result<Vec<Bytes>, ServerError>> {
        self.catch_up();
        let result = (|| {
            let handles: Vec<Binding> = descriptors.iter().map(|d| d.handle.clone()).collect();
            let mut streams = self.command(stream_id, handles.iter(), FLUSH)?;
            let mut out = Vec::with_capacity(descriptors.len());
            for descriptor in descriptors {
                check_copy(&descriptor)?;
                let bytes = descriptor.shape.iter().product::<usize>() * descriptor.elem_size;
                resource(&mut streams, descriptor.handle)?;
                out.push(Bytes::from_bytes_vec(vec![0; bytes]));
            }
            Ok(out)
        })();
        Box::pin(async move { result })
    }

    fn initialize_memory(&mut self, memory: ManagedMemoryHandle, size: u64, stream_id: StreamId) {
        self.hold(Held::Reserve {
            memory,
            size,
            stream: stream_id,
        });
    }

    fn write(&mut self, descriptors: Vec<(CopyDescriptor, Bytes)>, stream_id: StreamId) {
        self.hold(Held::Write {
            descriptors,
            stream: stream_id,
        });
    }

    unsafe fn launch(
        &mut self,
        _kernel: Self::Kernel,
        _count: CubeCount,
        bindings: KernelArguments,
        _mode: ExecutionMode,
        stream_id: StreamId,
    ) {
        self.hold(Held::Launch {
            bindings,
            stream: stream_id,
        });
    }

    fn flush(&mut self, stream_id: StreamId) -> Result<(), ServerError> {
        self.catch_up();
        let mut streams = self.command(stream_id, [].into_iter(), FLUSH)?;
        streams.current().memory.storage().flush();
        Ok(())
    }

    fn sync(&mut self, stream_id: StreamId) -> DynFut<Result<(), ServerError>> {
        self.catch_up();
        let result = self.command(stream_id, [].into_iter(), FLUSH).map(|_| ());
        Box::pin(async move { result })
    }

    fn start_profile(&mut self, stream_id: StreamId) -> Result<ProfilingToken, ServerError> {
        cubecl_common::future::block_on(self.sync(stream_id))?;
        self.profile_start = self.device_memory.requested_total();
        Ok(self.timestamps.start())
    }

    fn end_profile(
        &mut self,
        stream_id: StreamId,
        token: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        if let Err(err) = cubecl_common::future::block_on(self.sync(stream_id)) {
            self.timestamps.error(ProfileError::Server(Box::new(err)));
        }
        // Nothing ran, so the time is the tie-break's: real clock readings here would make the
        // choice change from run to run.
        self.timestamps.stop(token)?;
        let bytes = self.device_memory.requested_total() - self.profile_start;
        let now = cubecl_common::profile::Instant::now();
        let took = cubecl_common::profile::Duration::from_nanos(self.tie_break.nanos(bytes));
        Ok(ProfileDuration::new_system_time(now, now + took))
    }

    fn get_resource(
        &mut self,
        binding: Binding,
        stream_id: StreamId,
    ) -> Result<ManagedResource<DryResource>, ServerError> {
        self.catch_up();
        let mut streams = self.command(stream_id, [&binding].into_iter(), IGNORE)?;
        let memory = binding.memory.clone();
        let resource = resource(&mut streams, binding)?;
        Ok(ManagedResource::new(memory, resource))
    }

    fn memory_usage(&mut self, stream_id: StreamId) -> Result<MemoryUsage, ServerError> {
        self.catch_up();
        let mut streams = self.command(stream_id, [].into_iter(), STRICT)?;
        Ok(streams.current().memory.memory_usage())
    }

    fn memory_cleanup(&mut self, stream_id: StreamId) {
        self.catch_up();
        match self.command(stream_id, [].into_iter(), IGNORE) {
            Ok(mut streams) => streams.current().memory.cleanup(true),
            Err(err) => unreachable!("{err:?}"),
        }
    }

    fn allocation_mode(&mut self, mode: MemoryAllocationMode, stream_id: StreamId) {
        if self.schedule.modes_overtake {
            self.mode_now(mode, stream_id);
        } else {
            self.hold(Held::Mode {
                mode,
                stream: stream_id,
            });
        }
    }
}
