//! A card profile: what cubecl-cuda 0.10 reads from the driver when it starts on a GPU, recorded
//! once on that GPU (`situ`'s `card-profile` binary) so that the dry runtime can start as if it
//! were there.
//!
//! The device properties are not stored: they are *derived* from the recorded attributes by the
//! same steps cubecl-cuda's `DeviceService::init` takes ([`CardProfile::device_properties`]),
//! and the recorded checksum and `Debug` text of the GPU's own properties hold the derivation to
//! the real thing (a test compares both).

use cubecl_common::profile::TimingMethod;
use cubecl_cpp::DialectWmmaCompiler;
use cubecl_cpp::cuda::CudaDialect;
use cubecl_cpp::cuda::arch::CudaArchitecture;
use cubecl_cpp::cuda::mma::CudaWmmaCompiler;
use cubecl_cpp::shared::{
    register_mma_features, register_scaled_mma_features, register_wmma_features,
};
use cubecl_ir::features::{AtomicUsage, Plane, Tma, TypeUsage};
use cubecl_ir::{
    BarrierLevel, DeviceProperties, ElemType, FloatKind, HardwareProperties,
    MemoryDeviceProperties, OpaqueType, SemanticType, StorageType, Type, VectorSize,
};
use serde::{Deserialize, Serialize};

/// The row pitch `cuMemAllocPitch` reports, which cubecl-cuda 0.10 uses as the pool's alignment.
pub const CUDA_ALIGNMENT: u64 = 512;

/// cubecl-cuda 0.10 `device.rs`: the bindings it assumes a launch can hold.
const CUDA_MAX_BINDINGS: u32 = 1024;

/// What one GPU told cubecl-cuda 0.10, and what it had free before the pool started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardProfile {
    /// The exact command that recorded this file.
    pub command: String,
    /// The GPU as `nvidia-smi` names it.
    pub gpu: String,
    /// The driver version, as `nvidia-smi` reports it.
    pub driver: String,
    /// When the profile was taken (UTC, RFC 3339).
    pub date: String,
    /// `git rev-parse HEAD` of the recording binary's tree.
    pub git_revision: String,
    /// `CUDA_VERSION` as cudarc's bindings define it in the recording binary (cubecl-cuda turns
    /// some features on from it).
    pub cuda_version: u32,
    /// Compute capability, `major * 10 + minor` (90 for an H100/H200).
    pub compute_capability: u32,
    /// `cuDeviceTotalMem_v2`: cubecl-cuda sizes its pools from it (max page = total / 4).
    pub total_bytes: u64,
    /// `cuMemGetInfo` once cubecl's client (its CUDA context and streams) existed, before any
    /// tensor: what the pool can take, the context's own memory already gone.
    pub free_at_start: u64,
    /// How much free memory one lone device allocation of each size took (`cuMemAllocAsync`
    /// on a stream, as cubecl-cuda's storage allocates): bytes asked → bytes gone. Recorded, not
    /// charged: see `DeviceMemory::new` for why.
    pub allocation_cost: Vec<[u64; 2]>,
    /// `CU_DEVICE_ATTRIBUTE_WARP_SIZE`.
    pub warp_size: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: what cubecl-cuda allows a cube.
    pub max_shared_memory_per_block_optin: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub max_threads_per_block: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{X,Y,Z}`.
    pub max_block_dim: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{X,Y,Z}`.
    pub max_grid_dim: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
    pub multiprocessor_count: u32,
    /// `client.properties().checksum()` on the GPU: what the autotune and kernel caches key on.
    pub properties_checksum: u64,
    /// `format!("{:?}", client.properties())` on the GPU: every property, not only the hashed ones.
    pub properties_debug: String,
}

/// A profile that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The file could not be read.
    #[error("card profile {path}: {source}")]
    Read {
        /// The profile's path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a profile.
    #[error("card profile {path}: {source}")]
    Parse {
        /// The profile's path.
        path: String,
        /// Where and why the JSON did not fit.
        #[source]
        source: serde_json::Error,
    },
}

impl CardProfile {
    /// Reads a profile written by `card-profile`.
    pub fn read(path: &std::path::Path) -> Result<Self, CardError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CardError::Read {
            path: name.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| CardError::Parse { path: name, source })
    }

    /// The same chip with `total_bytes` of memory (a 16 GiB card, say): the pools are sized
    /// from the new total as cubecl-cuda would size them, the process's CUDA context still takes
    /// what it took on the profiled card, and the properties are re-derived (their checksum, which
    /// hashes the chip and not its memory, stays). Saturates: a total below the context leaves
    /// the pools nothing.
    pub fn with_memory(&self, total_bytes: u64) -> CardProfile {
        let context = self.total_bytes.saturating_sub(self.free_at_start);
        let mut card = CardProfile {
            gpu: format!("{} with {}", self.gpu, basics::bytes::show(total_bytes)),
            total_bytes,
            free_at_start: total_bytes.saturating_sub(context),
            ..self.clone()
        };
        let properties = card.device_properties();
        card.properties_checksum = properties.checksum();
        card.properties_debug = format!("{properties:?}");
        card
    }

    /// The pool's page limit and alignment, as cubecl-cuda derives them.
    pub(crate) fn memory_properties(&self) -> MemoryDeviceProperties {
        MemoryDeviceProperties {
            max_page_size: self.total_bytes / 4,
            alignment: CUDA_ALIGNMENT,
        }
    }

    /// The smallest page the pool can add: CubeCL 0.10's `SubSlices` configuration quarters the
    /// largest page, rounded up to the alignment, while it is at least 32 MiB, and the last
    /// quarter is its smallest sliced page (8.7 MiB on the H200).
    pub fn smallest_page(&self) -> u64 {
        let mut page = self.memory_properties().max_page_size;
        while page >= 32 * 1024 * 1024 {
            page = (page / 4).next_multiple_of(CUDA_ALIGNMENT);
        }
        page
    }

    /// The device properties cubecl-cuda 0.10's `DeviceService::init` builds on this card
    /// (`runtime.rs`), step for step, with the driver's answers taken from the profile.
    #[expect(
        clippy::too_many_lines,
        reason = "mirrors cubecl-cuda's `DeviceService::init` step for step, so that it reads \
                  against upstream line by line; split, the two would no longer line up"
    )]
    pub fn device_properties(&self) -> DeviceProperties {
        let arch_version = self.compute_capability;
        let arch_major = arch_version / 10;
        let arch = CudaArchitecture {
            version: arch_version,
        };
        type Wmma = CudaWmmaCompiler;
        let wmma =
            <Wmma as DialectWmmaCompiler<CudaDialect<Wmma>>>::supported_wmma_combinations(&arch);
        let mma =
            <Wmma as DialectWmmaCompiler<CudaDialect<Wmma>>>::supported_mma_combinations(&arch);
        let scaled_mma =
            <Wmma as DialectWmmaCompiler<CudaDialect<Wmma>>>::supported_scaled_mma_combinations(
                &arch,
            );

        let hardware = HardwareProperties {
            load_width: 128,
            plane_size_min: self.warp_size,
            plane_size_max: self.warp_size,
            max_bindings: CUDA_MAX_BINDINGS,
            max_shared_memory_size: self.max_shared_memory_per_block_optin as usize,
            max_cube_count: self.max_grid_dim.into(),
            max_units_per_cube: self.max_threads_per_block,
            max_cube_dim: self.max_block_dim.into(),
            num_streaming_multiprocessors: Some(self.multiprocessor_count),
            num_tensor_cores: tensor_cores_per_sm(arch_version),
            min_tensor_cores_dim: (!wmma.is_empty()).then_some(8),
            num_cpu_cores: None,
            max_vector_size: VectorSize::MAX,
        };
        let mut props = DeviceProperties::new(
            Default::default(),
            self.memory_properties(),
            hardware,
            TimingMethod::System,
        );
        cubecl_cpp::register_supported_types(&mut props);
        props.register_type_usage(ElemType::Float(FloatKind::TF32), TypeUsage::Conversion);
        let atomic = |kind: FloatKind| Type::new(StorageType::Atomic(ElemType::Float(kind)));
        let add_load_store = AtomicUsage::Add | AtomicUsage::LoadStore;
        if arch_version >= 60 {
            props.register_atomic_type_usage(atomic(FloatKind::F64), add_load_store);
        }
        if arch_version >= 70 {
            props.register_atomic_type_usage(atomic(FloatKind::F16), add_load_store);
            props.register_atomic_type_usage(
                atomic(FloatKind::F16).with_vector_size(2),
                add_load_store,
            );
            props.register_semantic_type(SemanticType::Pipeline);
            for level in [BarrierLevel::Unit, BarrierLevel::Cube] {
                props.register_type_usage(OpaqueType::Barrier(level), TypeUsage::Buffer);
            }
            props.features.plane.insert(Plane::Sync);
        }
        if arch_version >= 75 {
            let ldmatrix = &mut props.features.matmul.ldmatrix;
            ldmatrix.insert(ElemType::Float(FloatKind::F16).into());
            ldmatrix.insert(ElemType::Float(FloatKind::BF16).into());
        }
        if arch_version >= 80 {
            props.features.copy_async = true;
        }
        if arch_version >= 89 {
            for kind in [FloatKind::E4M3, FloatKind::E5M2] {
                props.register_type_usage(
                    ElemType::Float(kind),
                    TypeUsage::Conversion | TypeUsage::Buffer,
                );
            }
        }
        if arch_version >= 90 {
            props.features.tma.insert(Tma::Base);
            props.register_semantic_type(SemanticType::TensorMap);
            props.features.cube_cluster = true;
            let stmatrix = &mut props.features.matmul.stmatrix;
            stmatrix.insert(ElemType::Float(FloatKind::F16).into());
            stmatrix.insert(ElemType::Float(FloatKind::BF16).into());
            for width in [2, 4] {
                props.register_atomic_type_usage(
                    atomic(FloatKind::F32).with_vector_size(width),
                    AtomicUsage::LoadStore | AtomicUsage::Add,
                );
            }
        }
        if arch_version >= 100 {
            props.features.tma.insert(Tma::Im2colWide);
        }
        if matches!(arch_major, 10..=12) {
            props.register_type_usage(ElemType::Float(FloatKind::E2M1), TypeUsage::Conversion);
            props.register_type_usage(
                StorageType::Packed(ElemType::Float(FloatKind::E2M1), 2),
                TypeUsage::Conversion | TypeUsage::Buffer,
            );
            for kind in [FloatKind::E2M3, FloatKind::E3M2, FloatKind::UE8M0] {
                props.register_type_usage(
                    ElemType::Float(kind),
                    TypeUsage::Conversion | TypeUsage::Buffer,
                );
            }
            if self.cuda_version >= 12080 {
                props.features.tma.insert(Tma::SwizzleAtomicity);
            }
        }
        props.features.memory_reinterpret = true;
        props.features.alignment = true;
        props.features.plane.insert(Plane::Ops);
        props.features.plane.insert(Plane::NonUniformControlFlow);
        register_wmma_features(wmma, &mut props);
        register_mma_features(mma, &mut props);
        register_scaled_mma_features(scaled_mma, &mut props);
        props
    }

    /// Whether launches pass their static metadata as a grid constant (cubecl-cuda: sm ≥ 70), so
    /// that only the dynamic part of it is copied to a device buffer.
    pub(crate) fn grid_constants(&self) -> bool {
        self.compute_capability >= 70
    }
}

/// cubecl-cuda 0.10 `runtime.rs`: tensor cores per SM by architecture.
fn tensor_cores_per_sm(version: u32) -> Option<u32> {
    match version {
        70 | 75 => Some(8),
        80 | 86 | 89 | 90 | 91 | 92 | 100 => Some(4),
        _ => None,
    }
}
