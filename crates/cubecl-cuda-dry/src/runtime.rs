//! cubecl-cuda 0.11.3's `CudaRuntime` and its server's start (`runtime.rs` there): the device's
//! properties come from the registered card instead of the driver, derived by the same steps.

use std::sync::Arc;

use cubecl_common::device::{Device, DeviceId, DeviceService};
use cubecl_core::MemoryConfiguration;
use cubecl_core::cmma::MatrixLayout;
use cubecl_core::device::ServerUtilitiesHandle;
use cubecl_core::ir::{ContiguousElements, MmaProperties, TargetProperties};
use cubecl_core::server::ServerUtilities;
use cubecl_core::zspace::{Shape, Strides, striding::has_pitched_row_major_strides};
use cubecl_cpp::cuda::mma::manual::contiguous_elements_cuda;
use cubecl_environment::config::RuntimeConfig;
use cubecl_server::allocator::PitchedMemoryLayoutPolicy;
use cubecl_server::config::CubeClRuntimeConfig;
use cubecl_server::logging::ServerLogger;
use cubecl_server::runtime::Runtime;

use crate::compute::CudaServer;
use crate::device::CudaDevice;
use crate::dry::devices::registered;

/// The CUDA runtime, dry.
#[derive(Debug, Clone)]
pub struct CudaRuntime;

/// Points CubeCL's environment (its autotune results, throughput measurements and compiled
/// kernels) at a store of this process's own, once: the dry device's tuning results are a
/// policy's, not a GPU's timings, and must never land in the project's
/// `target/environment/default.db`, where a real GPU run would take them for its own. The store
/// starts as a copy of `atlas`, the first device's card's recorded store, when there is one.
fn private_environment(atlas: Option<&std::path::Path>) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // CubeCL's configuration, once loaded, points the environment at its own root (and
        // drops any file mounted before): load it first, so the mount below is the one that holds.
        let _ = <CubeClRuntimeConfig as RuntimeConfig>::get();
        let file =
            std::env::temp_dir().join(format!("highwater-dry-cubecl-{}.db", std::process::id()));
        // A file left by an earlier process of the same id is not this one's.
        let _ = std::fs::remove_file(&file);
        if let Some(atlas) = atlas
            && let Err(e) = std::fs::copy(atlas, &file)
        {
            log::warn!("{}: {e}; the dry device starts untuned", atlas.display());
        }
        cubecl_environment::environment::load(file);
    });
}

/// The device a card's store was recorded on: its autotune namespaces name it
/// (`autotune/<version>/device-0-0-cuda/<operation>`).
#[cfg(feature = "persistence")]
const RECORDED_DEVICE: &str = "device-0-0-cuda";

/// Gives a dry device the autotune picks the card's store recorded for the GPU's device 0.
/// CubeCL keys its tuning by device id, and each dry device has an id of its own (the index
/// [`crate::dry::register`] gave it), so without this every device past the first would tune
/// every problem itself (on a dry device: keep the first candidate) instead of taking the
/// GPU's pick. A pick the device already holds is kept.
#[cfg(feature = "persistence")]
fn adopt_recorded_tuning(device_id: DeviceId) {
    use cubecl_environment::bytes::Bytes;
    use cubecl_environment::persistence::{Database, Origin};
    let own = format!("device-{}-{}-cuda", device_id.type_id, device_id.index_id);
    if own == RECORDED_DEVICE {
        return;
    }
    let Some(database) = Database::open_active() else {
        return;
    };
    for namespace in database.namespaces() {
        let Some(rest) = namespace.strip_prefix("autotune/") else {
            continue;
        };
        let Some((version, operation)) = rest.split_once(&format!("/{RECORDED_DEVICE}/")) else {
            continue;
        };
        let mut entries = Vec::new();
        database.scan(&namespace, &mut |key, value| {
            entries.push((
                Bytes::from_bytes_vec(key.to_vec()),
                Bytes::from_bytes_vec(value.to_vec()),
            ));
        });
        let target = format!("autotune/{version}/{own}/{operation}");
        let summary = database.insert_many(&target, &mut entries.into_iter(), Origin::Imported);
        if summary.failed > 0 {
            log::warn!("{target}: {} recorded picks not adopted", summary.failed);
        }
    }
}

impl DeviceService for CudaServer {
    fn init(device_id: DeviceId) -> Self {
        let device = CudaDevice::from_id(device_id);
        let registered = registered(device.index as u16);
        let card = &registered.options.card;
        private_environment(card.atlas.as_deref());
        #[cfg(feature = "persistence")]
        if card.atlas.is_some() {
            adopt_recorded_tuning(device_id);
        }
        let properties = card.device_properties();
        let mem_properties = card.memory_properties();
        let policy = PitchedMemoryLayoutPolicy::new(properties.memory.alignment as usize);
        let (utilities, captures) = ServerUtilities::init(
            cubecl_common::device::ServiceId::of::<Self>(device_id),
            "cuda",
            properties,
            CudaRuntime::target_properties(),
            Arc::new(ServerLogger::default()),
            policy,
        );
        CudaServer::new(
            mem_properties,
            MemoryConfiguration::default(),
            card.grid_constants(),
            registered.options.tie_break,
            registered.memory,
            utilities,
            captures,
        )
    }

    fn utilities(&self) -> ServerUtilitiesHandle {
        self.utilities() as ServerUtilitiesHandle
    }
}

impl Runtime for CudaRuntime {
    type Server = CudaServer;
    type Device = CudaDevice;

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

    /// Every dry device is there: device 0 stands for the environment's card until a run
    /// registers its own.
    fn enumerate_devices(_: u16) -> Vec<DeviceId> {
        vec![CudaDevice::new(0).to_id()]
    }
}
