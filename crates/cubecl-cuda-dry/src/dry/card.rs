//! The card a dry device stands for: what cubecl-cuda 0.11 reads from the driver when it starts,
//! taken from a card profile recorded on that GPU (`repro/cards/*.json`, the format the 0.21 dry
//! run reads too), and the device properties derived from it by the steps cubecl-cuda 0.11.3's
//! `DeviceService::init` takes (`runtime.rs` there), LLVM backend included.

use cubecl_common::profile::TimingMethod;
use cubecl_core::ir::features::{AtomicUsage, ComplexUsage, Plane, Tma, TypeUsage};
use cubecl_core::ir::{
    ComplexKind, DeviceIdentity, DeviceProperties, ElemType, FloatKind, HardwareProperties,
    IntKind, MemoryDeviceProperties, OpaqueType, PciVendor, PhysicalDevice, Type, UIntKind,
    VectorSize,
};
use cubecl_cpp::cuda::{self, arch::CudaArchitecture, mma::CudaCmmaCompiler};
use cubecl_cpp::register_supported_types;
use cubecl_cpp::shared::{
    register_mma_features, register_scaled_mma_features, register_wmma_features,
};
use serde::Deserialize;

/// The alignment cubecl-cuda 0.11 gives its pools (`cuMemAllocPitch`'s row pitch).
pub const CUDA_ALIGNMENT: u64 = 512;

/// The fields of a recorded card profile that cubecl-cuda 0.11 reads at start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CardProfile {
    /// The GPU as `nvidia-smi` names it; cubecl-cuda 0.11 asks the driver (`cuDeviceGetName`),
    /// which names an H200 the same way, and guesses tensor cores from it.
    pub gpu: String,
    /// `CUDA_VERSION` of the recording binary's bindings (cubecl-cuda gates features on it).
    pub cuda_version: u32,
    /// Compute capability, `major * 10 + minor`.
    pub compute_capability: u32,
    /// `cuDeviceTotalMem_v2`: the pools' largest page is a quarter of it.
    pub total_bytes: u64,
    /// Free memory once the CUDA context existed: what the pools can take.
    pub free_at_start: u64,
    /// `CU_DEVICE_ATTRIBUTE_WARP_SIZE`.
    pub warp_size: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`.
    pub max_shared_memory_per_block_optin: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub max_threads_per_block: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{X,Y,Z}`.
    pub max_block_dim: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{X,Y,Z}`.
    pub max_grid_dim: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
    pub multiprocessor_count: u32,
    /// CubeCL 0.11's environment store as a GPU run of this card left it
    /// (`target/environment/default.db`), kept beside the profile as
    /// `<profile>-cubecl-0.11.db`: autotune's picks and the throughput probes' measurements.
    /// A dry device imports it when it starts, so it settles problems as that GPU did and
    /// probes nothing: a probe times its kernels by the wall clock, which a dry launch cannot
    /// give it.
    #[serde(skip)]
    pub atlas: Option<std::path::PathBuf>,
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

/// The H200 the project's GPU records come from (`repro/cards/h200.json`): the card a device
/// nobody registered stands for.
const H200: &str = include_str!("../../../../repro/cards/h200.json");

impl CardProfile {
    /// Reads a recorded profile.
    pub fn read(path: &std::path::Path) -> Result<Self, CardError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CardError::Read {
            path: name.clone(),
            source,
        })?;
        let mut card =
            Self::parse(&text).map_err(|source| CardError::Parse { path: name, source })?;
        let atlas = path.with_file_name(format!(
            "{}-cubecl-0.11.db",
            path.file_stem().unwrap_or_default().to_string_lossy()
        ));
        card.atlas = atlas.is_file().then_some(atlas);
        Ok(card)
    }

    /// Parses a recorded profile.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The H200 of `repro/cards/h200.json`.
    pub fn h200() -> Self {
        Self::parse(H200).expect("repro/cards/h200.json is a card profile")
    }

    /// The same chip with `total_bytes` of memory: the pools sized from the new total, the CUDA
    /// context still taking what it took on the recorded card.
    pub fn with_memory(&self, total_bytes: u64) -> Self {
        let context = self.total_bytes.saturating_sub(self.free_at_start);
        Self {
            total_bytes,
            free_at_start: total_bytes.saturating_sub(context),
            ..self.clone()
        }
    }

    /// cubecl-cuda 0.11.3's memory properties: pages up to a quarter of the card, 512-byte
    /// alignment, the card's total as the ceiling.
    pub fn memory_properties(&self) -> MemoryDeviceProperties {
        MemoryDeviceProperties::new(self.total_bytes / 4, CUDA_ALIGNMENT)
            .with_max_memory(self.total_bytes)
    }

    fn architecture(&self) -> CudaArchitecture {
        CudaArchitecture {
            version: self.compute_capability,
            tensor_cores: CudaArchitecture::has_tensor_cores(self.compute_capability, &self.gpu),
        }
    }

    /// Whether launches pass their static metadata as a grid constant (sm ≥ 70), so that only
    /// the dynamic part takes a buffer.
    pub fn grid_constants(&self) -> bool {
        self.compute_capability >= 70
    }

    /// The device properties cubecl-cuda 0.11.3 builds on this card, step by step as its
    /// `DeviceService::init` does with the default (LLVM) backend.
    #[expect(
        clippy::too_many_lines,
        reason = "one register per line in cubecl-cuda's order, so the two read side by side"
    )]
    pub fn device_properties(&self) -> DeviceProperties {
        let arch_version = self.compute_capability;
        let arch_major = arch_version / 10;
        let arch = self.architecture();
        let cmma = CudaCmmaCompiler::Cpp.supported_cmma_combinations(&arch);
        let mma = cuda::supported_mma_combinations(&arch);
        let scaled_mma = cuda::supported_scaled_mma_combinations(&arch);
        let hardware = HardwareProperties {
            load_width: 128,
            vector_register_count: None,
            plane_size_min: self.warp_size,
            plane_size_max: self.warp_size,
            max_bindings: crate::device::CUDA_MAX_BINDINGS,
            max_shared_memory_size: self.max_shared_memory_per_block_optin as usize,
            max_cube_count: self.max_grid_dim.into(),
            max_units_per_cube: self.max_threads_per_block,
            max_cube_dim: self.max_block_dim.into(),
            num_streaming_multiprocessors: Some(self.multiprocessor_count),
            num_tensor_cores: tensor_cores_per_sm(&arch),
            min_tensor_cores_dim: if cmma.is_empty() { None } else { Some(8) },
            num_cpu_cores: None,
            last_level_cache_size: None,
            max_vector_size: VectorSize::MAX,
            cube_mma_reserved_shared_memory: 0,
        };
        let mut physical = PhysicalDevice::default();
        physical.vendor = Some(PciVendor::Nvidia);
        let mut props = DeviceProperties::new(
            Default::default(),
            self.memory_properties(),
            hardware,
            TimingMethod::Device,
            DeviceIdentity {
                name: self.gpu.clone(),
                fingerprint: format!("ptx_sm{arch_version}"),
                physical: Some(physical),
            },
        );
        register_supported_types(&mut props);
        for kind in [ComplexKind::C32, ComplexKind::C64] {
            let ty = ElemType::Complex(kind);
            props.register_type_usage(ty, TypeUsage::Conversion | TypeUsage::Buffer);
            props.register_complex_usage(
                ty,
                ComplexUsage::Core | ComplexUsage::Compare | ComplexUsage::Math,
            );
        }
        let f16 = ElemType::Float(FloatKind::F16);
        let bf16 = ElemType::Float(FloatKind::BF16);
        let f32 = ElemType::Float(FloatKind::F32);
        if arch_version >= 60 {
            props.register_atomic_type_usage(
                Type::atomic(ElemType::Float(FloatKind::F64)),
                AtomicUsage::Add | AtomicUsage::LoadStore | AtomicUsage::Exchange,
            );
        }
        if arch_version >= 70 {
            props.register_atomic_type_usage(Type::atomic(f16), AtomicUsage::Add);
            props.register_atomic_type_usage(
                Type::atomic(Type::new(f16).with_vector_size(2)),
                AtomicUsage::Add | AtomicUsage::LoadStore | AtomicUsage::Exchange,
            );
            props.register_opaque_type(OpaqueType::Barrier);
            props.features.plane.insert(Plane::Sync);
        }
        if arch_version >= 75 {
            props.features.matmul.ldmatrix.insert(f16);
            props.features.matmul.ldmatrix.insert(bf16);
        }
        if arch_version >= 80 {
            props.register_type_usage(ElemType::Float(FloatKind::TF32), TypeUsage::Conversion);
            props.features.copy_async = true;
        }
        if arch_version >= 90 {
            props.features.tma.insert(Tma::Base);
            props.register_opaque_type(OpaqueType::TensorMap);
            props.features.cube_cluster = true;
            props.features.matmul.stmatrix.insert(f16);
            props.features.matmul.stmatrix.insert(bf16);
            for vec in [2, 4, 8] {
                for ty in [bf16, f16] {
                    props.register_atomic_type_usage(
                        Type::atomic(Type::new(ty).with_vector_size(vec)),
                        AtomicUsage::Add | AtomicUsage::LoadStore | AtomicUsage::Exchange,
                    );
                }
            }
            for vec in [4, 8] {
                for ty in [bf16, f16] {
                    props.register_atomic_type_usage(
                        Type::atomic(Type::new(ty).with_vector_size(vec)),
                        AtomicUsage::MinMax,
                    );
                }
            }
            if self.cuda_version > 12080 {
                for vec in [2, 4] {
                    props.register_atomic_type_usage(
                        Type::atomic(Type::new(f32).with_vector_size(vec)),
                        AtomicUsage::LoadStore | AtomicUsage::Exchange | AtomicUsage::Add,
                    );
                }
            }
        }
        if arch_version >= 100 {
            props.features.tma.insert(Tma::Im2colWide);
        }
        if matches!(arch_major, 10..=12) {
            props.register_type_usage(ElemType::Float(FloatKind::E2M1), TypeUsage::Conversion);
            for kind in [
                FloatKind::E2M1x2,
                FloatKind::E2M3,
                FloatKind::E3M2,
                FloatKind::UE8M0,
            ] {
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
        props.features.device_memory_scope = true;
        props.features.plane.insert(Plane::Ops);
        props.features.plane.insert(Plane::NonUniformControlFlow);
        register_wmma_features(cmma, &mut props);
        register_mma_features(mma, &mut props);
        register_scaled_mma_features(scaled_mma, &mut props);
        // cubecl-cuda 0.11's default backend is LLVM (feature `cpp` off), and it narrows what
        // the device advertises to what that backend lowers: cubek picks kernels from these.
        restrict_to_nvptx(&mut props);
        props
    }
}

/// cubecl-cuda 0.11.3 `tensor_cores_per_sm`.
fn tensor_cores_per_sm(arch: &CudaArchitecture) -> Option<u32> {
    if !arch.tensor_cores {
        return None;
    }
    match arch.version {
        70 | 75 => Some(8),
        80 | 86 | 89 | 90 | 91 | 92 | 100 => Some(4),
        _ => None,
    }
}

/// cubecl-llvm 0.11.3 `restrict_features(props, GpuTarget::Nvptx)` (`shared/lowered_features.rs`):
/// the matrix forms NVPTX has register shapes for, then what neither LLVM target lowers. Written
/// out here because cubecl-llvm cannot be built without LLVM; a test holds the result to the
/// properties a 0.22 binary recorded on the GPU, when one has been.
fn restrict_to_nvptx(props: &mut DeviceProperties) {
    let half = ElemType::Float(FloatKind::F16);
    let bf16 = ElemType::Float(FloatKind::BF16);
    let tf32 = ElemType::Float(FloatKind::TF32);
    let f32 = ElemType::Float(FloatKind::F32);
    let byte = |ty: ElemType| {
        matches!(
            ty,
            ElemType::Int(IntKind::I8) | ElemType::UInt(UIntKind::U8)
        )
    };
    let matmul = &mut props.features.matmul;
    matmul.cmma.retain(|c| {
        let halves =
            c.a_type == half && c.b_type == half && (c.cd_type == half || c.cd_type == f32);
        let bf16s = c.a_type == bf16 && c.b_type == bf16 && c.cd_type == f32;
        let tf32s = c.a_type == tf32
            && c.b_type == tf32
            && c.cd_type == f32
            && (c.m, c.n, c.k) == (16, 16, 8);
        halves || bf16s || tf32s
    });
    matmul.mma.retain(|c| {
        let floats =
            (c.a_type == half || c.a_type == bf16) && c.b_type == c.a_type && c.cd_type == f32;
        let integers = byte(c.a_type) && byte(c.b_type) && c.cd_type == ElemType::Int(IntKind::I32);
        let tf32s = c.a_type == tf32
            && c.b_type == tf32
            && c.cd_type == f32
            && c.m == 16
            && c.n == 8
            && matches!(c.k, 4 | 8);
        floats || integers || tf32s
    });
    matmul.cube_mma = Default::default();
    matmul.scaled_mma = Default::default();
    matmul.cmma_tensor_addressing = false;
    if matmul.cmma.is_empty() && matmul.mma.is_empty() {
        props.hardware.num_tensor_cores = None;
        props.hardware.min_tensor_cores_dim = None;
    }
    props.features.tma = Default::default();
    props.features.cube_cluster = false;
    props.features.copy_async = false;
    props.features.types.opaque.remove(&OpaqueType::TensorMap);
    props.features.types.opaque.remove(&OpaqueType::Barrier);
    props
        .features
        .types
        .atomic
        .retain(|ty, _| ty.elem_type() != bf16);
    props.features.types.complex.clear();
    for kind in [ComplexKind::C32, ComplexKind::C64] {
        props.features.types.elem.remove(&ElemType::Complex(kind));
    }
    props
        .features
        .types
        .atomic
        .retain(|ty, _| ty.vector_size() == 1);
}
