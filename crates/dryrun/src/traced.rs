//! A CubeCL runtime that records the order its server met reservations and releases in, around
//! another runtime's server (cubecl-cuda's on the GPU, [`crate::DryRuntime`]'s dry).
//!
//! Why: on burn-fusion, what a run reserves depends on how its threads met (issue 27). The
//! server cannot see a release or a pool mode switch happen, but it can see the result: before each
//! reservation it reads its stream's pool (bytes in use, bytes reserved), so a trace of the
//! same program on the GPU and dry shows, reservation by reservation, where the releases the
//! server had seen differ. The server thread's clock and the launches between reservations say
//! how far it lagged.
//!
//! Reading the pool walks its slices on the server thread, so a traced run lags more than an
//! untraced one: compare its figures per step with an untraced run before trusting its order.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use cubecl_common::bytes::Bytes;
use cubecl_common::device::{
    Device, DeviceId, DeviceService, DeviceServiceStage, ServerUtilitiesHandle,
};
use cubecl_common::future::DynFut;
use cubecl_common::profile::ProfileDuration;
use cubecl_common::stream_id::StreamId;
use cubecl_ir::TargetProperties;
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;
use cubecl_runtime::client::ComputeClient;
use cubecl_runtime::memory_management::{ManagedMemoryHandle, MemoryAllocationMode, MemoryUsage};
use cubecl_runtime::runtime::Runtime;
use cubecl_runtime::server::{
    Binding, ComputeServer, CopyDescriptor, CubeCount, ExecutionMode, KernelArguments,
    ProfileError, ProfilingToken, ServerCommunication, ServerError, ServerUtilities,
};
use cubecl_runtime::storage::{ComputeStorage, ManagedResource};
use cubecl_zspace::{Shape, Strides};
use serde::{Deserialize, Serialize};

/// One reservation as the server met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Bytes asked for.
    pub size: u64,
    /// The stream's pool just before: bytes in use (every release the server could see by then
    /// is subtracted) and bytes reserved.
    pub in_use: u64,
    /// See [`Reservation::in_use`].
    pub reserved: u64,
    /// Kernels the server launched since the previous reservation.
    pub launches: u32,
    /// The server thread's clock, nanoseconds since the server started.
    pub nanos: u64,
    /// What the reservation added to the bytes reserved: 0 when a free slice took it, a page
    /// when it opened one (give or take the padding CubeCL's count drops). Only the server
    /// reserves, so nothing else moves the count meanwhile. `None` in traces made before it
    /// was recorded.
    #[serde(default)]
    pub grew: Option<u64>,
}

type Trace = Arc<Mutex<Vec<Reservation>>>;

fn traces() -> std::sync::MutexGuard<'static, HashMap<DeviceId, Trace>> {
    static TRACES: LazyLock<Mutex<HashMap<DeviceId, Trace>>> = LazyLock::new(Default::default);
    TRACES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every reservation the traced server of `device` met so far, in order; the trace restarts.
pub fn take_trace(device: &impl Device) -> Vec<Reservation> {
    traces()
        .get(&device.to_id())
        .map(|t| std::mem::take(&mut *t.lock().unwrap_or_else(|e| e.into_inner())))
        .unwrap_or_default()
}

/// Runtime `R` with its server traced ([`TracedServer`]). Kernels, autotune keys and caches are
/// `R`'s; its name is "cuda", as both runtimes it wraps here are named.
#[derive(Debug, Clone)]
pub struct Traced<R>(PhantomData<R>);

/// A server that records each reservation ([`Reservation`]) and hands every call to `S`.
pub struct TracedServer<S>
where
    S: ComputeServer<Info = (), MemoryLayoutPolicy = PitchedMemoryLayoutPolicy>,
{
    inner: S,
    utilities: Arc<ServerUtilities<Self>>,
    trace: Trace,
    start: Instant,
    launches: u32,
}

impl<S> DeviceService for TracedServer<S>
where
    S: ComputeServer<Info = (), MemoryLayoutPolicy = PitchedMemoryLayoutPolicy>,
{
    fn init(id: DeviceId) -> Self {
        let inner = <S as DeviceService>::init(id);
        let theirs = ComputeServer::utilities(&inner);
        let utilities = ServerUtilities::new(
            theirs.properties.clone(),
            theirs.logger.clone(),
            (),
            PitchedMemoryLayoutPolicy::new(theirs.properties.memory.alignment as usize),
        );
        let trace = Trace::default();
        traces().insert(id, trace.clone());
        Self {
            inner,
            utilities: Arc::new(utilities),
            trace,
            start: Instant::now(),
            launches: 0,
        }
    }

    fn utilities(&self) -> ServerUtilitiesHandle {
        self.utilities.clone() as ServerUtilitiesHandle
    }

    fn stage() -> DeviceServiceStage {
        S::stage()
    }
}

impl<S> std::fmt::Debug for TracedServer<S>
where
    S: ComputeServer<Info = (), MemoryLayoutPolicy = PitchedMemoryLayoutPolicy>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracedServer")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> ServerCommunication for TracedServer<S>
where
    S: ComputeServer<Info = (), MemoryLayoutPolicy = PitchedMemoryLayoutPolicy>,
{
    const SERVER_COMM_ENABLED: bool = false;
}

impl<S> ComputeServer for TracedServer<S>
where
    S: ComputeServer<Info = (), MemoryLayoutPolicy = PitchedMemoryLayoutPolicy>,
{
    type Kernel = S::Kernel;
    type Info = ();
    type MemoryLayoutPolicy = PitchedMemoryLayoutPolicy;
    type Storage = S::Storage;

    fn initialize_memory(&mut self, memory: ManagedMemoryHandle, size: u64, stream_id: StreamId) {
        // A stream in error reads as an empty pool: the reservation is still in the order.
        let (in_use, reserved) = self
            .inner
            .memory_usage(stream_id)
            .map_or((0, 0), |u| (u.bytes_in_use, u.bytes_reserved));
        let nanos = self.start.elapsed().as_nanos() as u64;
        self.inner.initialize_memory(memory, size, stream_id);
        let after = self.inner.memory_usage(stream_id).map(|u| u.bytes_reserved);
        let reservation = Reservation {
            size,
            in_use,
            reserved,
            launches: std::mem::take(&mut self.launches),
            nanos,
            grew: after.ok().map(|a| a.saturating_sub(reserved)),
        };
        self.trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(reservation);
    }

    fn staging(&mut self, sizes: &[usize], stream_id: StreamId) -> Result<Vec<Bytes>, ServerError> {
        self.inner.staging(sizes, stream_id)
    }

    fn logger(&self) -> Arc<cubecl_runtime::logging::ServerLogger> {
        self.inner.logger()
    }

    fn utilities(&self) -> Arc<ServerUtilities<Self>> {
        self.utilities.clone()
    }

    fn read(
        &mut self,
        descriptors: Vec<CopyDescriptor>,
        stream_id: StreamId,
    ) -> DynFut<Result<Vec<Bytes>, ServerError>> {
        self.inner.read(descriptors, stream_id)
    }

    fn write(&mut self, descriptors: Vec<(CopyDescriptor, Bytes)>, stream_id: StreamId) {
        self.inner.write(descriptors, stream_id)
    }

    fn sync(&mut self, stream_id: StreamId) -> DynFut<Result<(), ServerError>> {
        self.inner.sync(stream_id)
    }

    fn get_resource(
        &mut self,
        binding: Binding,
        stream_id: StreamId,
    ) -> Result<ManagedResource<<Self::Storage as ComputeStorage>::Resource>, ServerError> {
        self.inner.get_resource(binding, stream_id)
    }

    unsafe fn launch(
        &mut self,
        kernel: Self::Kernel,
        count: CubeCount,
        bindings: KernelArguments,
        kind: ExecutionMode,
        stream_id: StreamId,
    ) {
        self.launches += 1;
        // SAFETY: the caller's guarantees are passed on unchanged.
        unsafe { self.inner.launch(kernel, count, bindings, kind, stream_id) }
    }

    fn flush(&mut self, stream_id: StreamId) -> Result<(), ServerError> {
        self.inner.flush(stream_id)
    }

    fn memory_usage(&mut self, stream_id: StreamId) -> Result<MemoryUsage, ServerError> {
        self.inner.memory_usage(stream_id)
    }

    fn memory_cleanup(&mut self, stream_id: StreamId) {
        self.inner.memory_cleanup(stream_id)
    }

    fn start_profile(&mut self, stream_id: StreamId) -> Result<ProfilingToken, ServerError> {
        self.inner.start_profile(stream_id)
    }

    fn end_profile(
        &mut self,
        stream_id: StreamId,
        token: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        self.inner.end_profile(stream_id, token)
    }

    fn allocation_mode(&mut self, mode: MemoryAllocationMode, stream_id: StreamId) {
        self.inner.allocation_mode(mode, stream_id)
    }
}

impl<R> Runtime for Traced<R>
where
    R: Runtime,
    R::Server: ComputeServer<Info = (), MemoryLayoutPolicy = PitchedMemoryLayoutPolicy>,
{
    type Compiler = R::Compiler;
    type Server = TracedServer<R::Server>;
    type Device = R::Device;

    fn client(device: &R::Device) -> ComputeClient<Self> {
        ComputeClient::load(device)
    }

    fn name(_client: &ComputeClient<Self>) -> &'static str {
        "cuda"
    }

    fn require_array_lengths() -> bool {
        R::require_array_lengths()
    }

    fn max_cube_count() -> (u32, u32, u32) {
        R::max_cube_count()
    }

    fn can_read_tensor(shape: &Shape, strides: &Strides) -> bool {
        R::can_read_tensor(shape, strides)
    }

    fn target_properties() -> TargetProperties {
        R::target_properties()
    }

    fn enumerate_devices(type_id: u16, info: &()) -> Vec<DeviceId> {
        R::enumerate_devices(type_id, info)
    }
}

/// Two traces of one program (a GPU's and a dry replay's, say) held against each other,
/// reservation by reservation: where the releases their servers had seen part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Comparison {
    /// Reservations in each trace.
    pub reservations: (usize, usize),
    /// Both asked for the same sizes in the same order (else the rest compares a prefix).
    pub same_requests: bool,
    /// The first reservation where the bytes in use the servers saw differ: its index, and
    /// the first trace's and the second's.
    pub first_in_use_difference: Option<(usize, u64, u64)>,
    /// The first where bytes reserved differ, likewise.
    pub first_reserved_difference: Option<(usize, u64, u64)>,
    /// The first where one reservation grew the pool and the other did not, or by other
    /// amounts (by a page or more: less is CubeCL's count of padding), likewise: the first
    /// tensor the runs placed apart. `None` also when a trace does not record it.
    pub first_placed_apart: Option<(usize, u64, u64)>,
    /// Reservations at which the second trace's server had seen more releases than the
    /// first's (less in use), and fewer.
    pub more_released: usize,
    /// See [`Comparison::more_released`].
    pub fewer_released: usize,
}

/// Growths this far apart are a page apart: at least a megabyte (CubeCL's smallest page is the
/// card's memory over 4⁸ or more, 8.7 MiB on the H200), far above the padding its count drops.
const PLACED_APART: u64 = 1 << 20;

/// Holds trace `b` to trace `a` ([`Comparison`]).
pub fn compare(a: &[Reservation], b: &[Reservation]) -> Comparison {
    let n = a.len().min(b.len());
    let same_requests = a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.size == y.size);
    let first = |of: fn(&Reservation) -> u64| {
        a.iter()
            .zip(b)
            .enumerate()
            .find(|(_, (x, y))| of(x) != of(y))
            .map(|(i, (x, y))| (i, of(x), of(y)))
    };
    let pairs = || a[..n].iter().zip(&b[..n]);
    let first_placed_apart = pairs().enumerate().find_map(|(i, (x, y))| {
        let (gx, gy) = (x.grew?, y.grew?);
        (gx.abs_diff(gy) >= PLACED_APART).then_some((i, gx, gy))
    });
    Comparison {
        reservations: (a.len(), b.len()),
        same_requests,
        first_in_use_difference: first(|r| r.in_use),
        first_reserved_difference: first(|r| r.reserved),
        first_placed_apart,
        more_released: pairs().filter(|(x, y)| y.in_use < x.in_use).count(),
        fewer_released: pairs().filter(|(x, y)| y.in_use > x.in_use).count(),
    }
}

/// Pages counted per size in bytes ([`exact_size_pages`]).
pub type PageCounts = std::collections::BTreeMap<u64, usize>;

/// Reservations that opened a page of exactly their own size, counted per size: the signature
/// of CubeCL's persistent pool, which gives each tensor a page of its size (its sliced pools
/// open pages of fixed sizes). On burn-fusion, which parameters land there is what parts runs
/// of the same program (see `repro/results/fusion/order/README.md`). Read from consecutive
/// `reserved`, so traces made before [`Reservation::grew`] count alike; the last reservation,
/// with nothing after it, is not counted.
pub fn exact_size_pages(trace: &[Reservation]) -> PageCounts {
    let mut pages = PageCounts::new();
    for pair in trace.windows(2) {
        let (r, next) = (&pair[0], &pair[1]);
        // Below a megabyte an exact fit may be a reused slice's padding coming back, not a page.
        if r.size >= PLACED_APART && next.reserved.checked_sub(r.reserved) == Some(r.size) {
            *pages.entry(r.size).or_insert(0) += 1;
        }
    }
    pages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(size: u64, in_use: u64, reserved: u64) -> Reservation {
        Reservation {
            size,
            in_use,
            reserved,
            launches: 0,
            nanos: 0,
            grew: None,
        }
    }

    #[test]
    fn exact_size_pages_count_pages_of_their_tensors_size_only() {
        let mib = 1 << 20;
        let trace = [
            // Opens a page of its own size: counted.
            r(3 * mib, 0, 0),
            // Takes a free slice: no growth.
            r(3 * mib, 3 * mib, 3 * mib),
            // Opens a larger page of a sliced pool: not counted.
            r(2 * mib, 3 * mib, 3 * mib),
            // A small exact fit is padding, not a page.
            r(512, 5 * mib, 11 * mib),
            r(3 * mib, 5 * mib, 11 * mib + 512),
            // The last one has nothing after it.
            r(3 * mib, 8 * mib, 14 * mib + 512),
        ];
        assert_eq!(
            exact_size_pages(&trace),
            [(3 * mib, 2)].into_iter().collect()
        );
    }

    #[test]
    fn a_comparison_finds_where_the_servers_saw_different_releases() {
        let gpu = [r(8, 0, 0), r(8, 8, 512), r(4, 0, 512), r(4, 4, 512)];
        let dry = [r(8, 0, 0), r(8, 8, 512), r(4, 8, 1024), r(4, 4, 1024)];
        let c = compare(&gpu, &dry);
        assert!(c.same_requests);
        assert_eq!(c.first_in_use_difference, Some((2, 0, 8)));
        assert_eq!(c.first_reserved_difference, Some((2, 512, 1024)));
        assert_eq!((c.more_released, c.fewer_released), (0, 1));
        assert_eq!(compare(&gpu, &gpu).first_in_use_difference, None);
        assert!(!compare(&gpu, &dry[..3]).same_requests);
        assert_eq!(c.first_placed_apart, None, "neither records its growth");
    }

    #[test]
    fn the_first_tensor_placed_apart_is_the_first_page_one_opened_and_the_other_did_not() {
        let grew = |size, in_use, grew| Reservation {
            grew: Some(grew),
            ..r(size, in_use, 0)
        };
        let page = 9 << 20;
        let gpu = [grew(8, 0, page), grew(8 << 20, 8, 0), grew(8, 0, 96)];
        let dry = [grew(8, 0, page), grew(8 << 20, 8, page), grew(8, 0, 0)];
        assert_eq!(compare(&gpu, &dry).first_placed_apart, Some((1, 0, page)));
        // A few hundred bytes of padding are not a page.
        assert_eq!(compare(&gpu[2..], &dry[2..]).first_placed_apart, None);
    }
}
