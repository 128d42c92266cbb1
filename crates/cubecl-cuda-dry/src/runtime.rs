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
use cubecl_server::allocator::PitchedMemoryLayoutPolicy;
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

impl DeviceService for CudaServer {
    fn init(device_id: DeviceId) -> Self {
        let device = CudaDevice::from_id(device_id);
        let registered = registered(device.index as u16);
        let card = &registered.options.card;
        private_environment(card.atlas.as_deref());
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
