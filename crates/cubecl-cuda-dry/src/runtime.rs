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
/// `target/environment/default.db`, where a real GPU run would take them for its own.
fn private_environment() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // CubeCL's configuration, once loaded, points the environment at its own root (and
        // drops any file mounted before): load it first, so the mount below is the one that holds.
        let _ = <CubeClRuntimeConfig as RuntimeConfig>::get();
        let file =
            std::env::temp_dir().join(format!("highwater-dry-cubecl-{}.db", std::process::id()));
        // A file left by an earlier process of the same id is not this one's.
        let _ = std::fs::remove_file(&file);
        cubecl_environment::environment::load(file);
    });
}

/// The device a card's store was recorded on: its autotune namespaces name it
/// (`autotune/<version>/device-0-0-cuda/<operation>`).
#[cfg(feature = "persistence")]
const RECORDED_DEVICE: &str = "device-0-0-cuda";

/// Puts what the card's recorded store (`atlas`) holds into the process's store, for the dry
/// device `device_id`: the throughput CubeCL measured on the card (keyed by the card's
/// properties, so any device of the same card reads it), and the autotune picks the GPU's
/// device 0 made, as this device's own. CubeCL keys its tuning by device id and every dry device
/// has an id of its own (the index [`crate::dry::register`] gave it); cards differ from device to
/// device in one process, so each device imports its own card's store when it starts. Without
/// it the device would probe the card's throughput and tune every problem itself (on a dry
/// device: keep the first candidate) instead of taking the GPU's measurements and picks. An
/// entry the process's store already holds is kept.
#[cfg(feature = "persistence")]
fn import_atlas(atlas: &std::path::Path, device_id: DeviceId) {
    use cubecl_environment::bytes::Bytes;
    use cubecl_environment::persistence::{Access, Database, Origin};
    let source = match Database::open_at(atlas, Access::ReadOnly) {
        Ok(source) => source,
        Err(e) => {
            log::warn!("{}: {e}; the dry device starts untuned", atlas.display());
            return;
        }
    };
    let Some(target) = Database::open_active() else {
        return;
    };
    let own = format!("device-{}-{}-cuda", device_id.type_id, device_id.index_id);
    for namespace in source.namespaces() {
        let into = if namespace.starts_with("throughput/") {
            namespace.clone()
        } else if let Some((version, operation)) = namespace
            .strip_prefix("autotune/")
            .and_then(|rest| rest.split_once(&format!("/{RECORDED_DEVICE}/")))
        {
            format!("autotune/{version}/{own}/{operation}")
        } else {
            continue;
        };
        let mut entries = Vec::new();
        source.scan(&namespace, &mut |key, value| {
            entries.push((
                Bytes::from_bytes_vec(key.to_vec()),
                Bytes::from_bytes_vec(value.to_vec()),
            ));
        });
        let summary = target.insert_many(&into, &mut entries.into_iter(), Origin::Imported);
        if summary.failed > 0 {
            log::warn!("{into}: {} recorded entries not imported", summary.failed);
        }
    }
}

impl DeviceService for CudaServer {
    fn init(device_id: DeviceId) -> Self {
        let device = CudaDevice::from_id(device_id);
        let registered = registered(device.index as u16);
        let card = &registered.options.card;
        private_environment();
        #[cfg(feature = "persistence")]
        if let Some(atlas) = &card.atlas {
            import_atlas(atlas, device_id);
        }
        let properties = card.device_properties();
        let unmeasured = crate::dry::throughput::answer_unmeasured(&properties);
        log::debug!("{unmeasured} throughput keys the card's store lacks run without a bound");
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
