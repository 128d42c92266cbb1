//! The dry runtime and its devices.
//!
//! CubeCL starts a device's server from its id alone (`DeviceService::init`), so a device's card
//! is registered in a process-wide table first: [`DryDevice::new`] takes the next free index,
//! so every run gets a server of its own, with fresh pools, however many a process makes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use cubecl_common::device::{
    Device, DeviceId, DeviceService, DeviceServiceStage, ServerUtilitiesHandle,
};
use cubecl_cpp::cuda::mma::contiguous_elements_cuda;
use cubecl_ir::{ContiguousElements, MatrixLayout, MmaProperties, TargetProperties};
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;
use cubecl_runtime::client::ComputeClient;
use cubecl_runtime::logging::ServerLogger;
use cubecl_runtime::runtime::Runtime;
use cubecl_runtime::server::{ComputeServer, ServerUtilities};
use cubecl_zspace::striding::has_pitched_row_major_strides;
use cubecl_zspace::{Shape, Strides};

use crate::atlas::AutotuneError;
use crate::atlas::Entry;
use crate::autotune::AutotuneCache;
use crate::card::{CUDA_ALIGNMENT, CardProfile};
use crate::memory::{DeviceMemory, OnRefusal};
use crate::schedule::Schedule;
use crate::server::{CudaCompiler, DryServer, TieBreak};

/// A CubeCL runtime that allocates like cubecl-cuda 0.10 and never computes.
#[derive(Debug, Clone)]
pub struct DryRuntime;

/// A dry device: an index into the table of registered cards.
#[derive(Clone, PartialEq, Eq, Default, Hash)]
pub struct DryDevice {
    /// Its row in the process's table of devices (`DryDevice::new` takes the first free one).
    pub index: u16,
}

impl std::fmt::Debug for DryDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dry({})", self.index)
    }
}

/// What a device is: its card, the memory its pools share, its copy of the autotune cache and
/// how it settles a problem that cache lacks.
#[derive(Debug, Clone)]
struct Registered {
    card: Arc<CardProfile>,
    memory: DeviceMemory,
    autotune: AutotuneCache,
    tie_break: TieBreak,
    schedule: Schedule,
}

fn table() -> MutexGuard<'static, HashMap<u16, Registered>> {
    static TABLE: LazyLock<Mutex<HashMap<u16, Registered>>> = LazyLock::new(Default::default);
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

impl DryDevice {
    /// A new device on `card` whose pools may take `capacity` bytes (the card's free memory,
    /// or less to emulate a smaller one), pages beyond it refused or granted, tuned from the
    /// GPU's autotune cache in `autotune` (a `device-0-0-cuda` folder) or, given none, from an
    /// empty one. Each call is a new device, with its own server. A problem the cache lacks is
    /// tuned on the device and settled by `tie_break`.
    pub fn new(
        card: Arc<CardProfile>,
        capacity: u64,
        on_refusal: OnRefusal,
        autotune: Option<&Path>,
        tie_break: TieBreak,
    ) -> Result<Self, AutotuneError> {
        Self::scheduled(
            card,
            capacity,
            on_refusal,
            autotune,
            tie_break,
            Schedule::default(),
        )
    }

    /// [`DryDevice::new`], its server running behind burn-fusion's work as `schedule` says.
    pub fn scheduled(
        card: Arc<CardProfile>,
        capacity: u64,
        on_refusal: OnRefusal,
        autotune: Option<&Path>,
        tie_break: TieBreak,
        schedule: Schedule,
    ) -> Result<Self, AutotuneError> {
        let memory = DeviceMemory::new(capacity, on_refusal);
        let mut table = table();
        // The first index free here whose autotune folder no other process holds.
        let mut claimed = None;
        for index in (0..=u16::MAX).filter(|i| !table.contains_key(i)) {
            if let Some(cache) = AutotuneCache::install(autotune, index)? {
                claimed = Some((index, cache));
                break;
            }
        }
        let (index, autotune) = claimed.expect("fewer than 65536 dry devices at once");
        table.insert(
            index,
            Registered {
                card,
                memory,
                autotune,
                tie_break,
                schedule,
            },
        );
        drop(table);
        let device = DryDevice { index };
        // The server starts now, from this thread: burn-fusion, which shares its runner, could
        // not start it from there ([`DeviceService::stage`] below).
        DryRuntime::client(&device);
        Ok(device)
    }

    /// Problems autotuned on this device because the GPU's cache did not have them (all of them
    /// when it was given none).
    pub fn autotune_misses(&self) -> Vec<Entry> {
        self.registered().autotune.misses()
    }

    /// The device's memory: what its pages take, and what the card refused.
    pub fn memory(&self) -> DeviceMemory {
        self.registered().memory
    }

    fn registered(&self) -> Registered {
        table()
            .get(&self.index)
            .cloned()
            .unwrap_or_else(|| panic!("{self:?} was not made by DryDevice::new"))
    }
}

impl Device for DryDevice {
    fn from_id(id: DeviceId) -> Self {
        DryDevice { index: id.index_id }
    }

    fn to_id(&self) -> DeviceId {
        // Type 0, as cubecl-cuda's devices: the autotune cache's folder is named after it.
        DeviceId {
            type_id: 0,
            index_id: self.index,
        }
    }
}

impl burn_backend::DeviceOps for DryDevice {}

impl DeviceService for DryServer {
    fn init(id: DeviceId) -> Self {
        let Registered {
            card,
            memory,
            tie_break,
            schedule,
            ..
        } = DryDevice::from_id(id).registered();
        let properties = card.device_properties();
        let utilities = ServerUtilities::new(
            properties,
            Arc::new(ServerLogger::default()),
            (),
            PitchedMemoryLayoutPolicy::new(CUDA_ALIGNMENT as usize),
        );
        DryServer::new(
            utilities,
            memory,
            card.grid_constants(),
            tie_break,
            schedule,
        )
    }

    /// burn-fusion's stage: one thread runs burn-fusion's work and then the server's, in the
    /// order the training thread sent it, on every host ([`crate::schedule`]). The server has
    /// to start before burn-fusion's (the runner cannot start one service from inside another's
    /// start), so [`DryDevice::scheduled`] starts it.
    fn stage() -> DeviceServiceStage {
        DeviceServiceStage::Upstream
    }

    fn utilities(&self) -> ServerUtilitiesHandle {
        ComputeServer::utilities(self) as ServerUtilitiesHandle
    }
}

impl Runtime for DryRuntime {
    type Compiler = CudaCompiler;
    type Server = DryServer;
    type Device = DryDevice;

    fn client(device: &DryDevice) -> ComputeClient<Self> {
        ComputeClient::load(device)
    }

    /// "cuda": kernels, autotune keys and caches are cubecl-cuda's, so they carry its name.
    fn name(_client: &ComputeClient<Self>) -> &'static str {
        "cuda"
    }

    // The rest as cubecl-cuda 0.10's `CudaRuntime`: they shape metadata and launches.
    fn require_array_lengths() -> bool {
        true
    }

    fn max_cube_count() -> (u32, u32, u32) {
        (i32::MAX as u32, u16::MAX as u32, u16::MAX as u32)
    }

    fn can_read_tensor(shape: &Shape, strides: &Strides) -> bool {
        has_pitched_row_major_strides(shape, strides)
    }

    fn target_properties() -> TargetProperties {
        TargetProperties {
            mma: MmaProperties {
                register_size_bits: 32,
                const_plane_size: 32,
                register_layout_a: MatrixLayout::RowMajor,
                register_layout_b: MatrixLayout::ColMajor,
                register_layout_acc: MatrixLayout::RowMajor,
                register_duplication_a: 1,
                register_duplication_b: 1,
                register_duplication_acc: 1,
                contiguous_elements: ContiguousElements::new(contiguous_elements_cuda),
            },
        }
    }

    fn enumerate_devices(_type_id: u16, _info: &()) -> Vec<DeviceId> {
        let mut ids: Vec<DeviceId> = table()
            .keys()
            .map(|&index| DryDevice { index }.to_id())
            .collect();
        ids.sort_by_key(|id| id.index_id);
        ids
    }
}
