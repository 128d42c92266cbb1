//! A network file trained on a GPU by burn 0.22 (the real cubecl-cuda 0.11), its pools read
//! after every phase: the record `conform --dry --burn 0.22` holds the dry run to. Written in the
//! 0.21 rerun's format (`highwater::conform::NetworkRecord`), its versions saying which burn ran.

use burn::tensor::Device;
use highwater::conform::{DeviceMemory, NetworkRecord, Provenance, Versions};
use highwater::network::Network;
use serde::Serialize;

use crate::network::network_step;
use crate::train::Trainer;

/// How to rerun.
#[derive(Debug, Clone)]
pub struct RerunPlan {
    /// Training steps.
    pub steps: u64,
    /// Seeds the device before the model is built.
    pub seed: u64,
    /// Read the loss back every this many steps, and at the last.
    pub log_every: u64,
}

/// Where the record came from: the GPU as `nvidia-smi` names it, burn 0.22.1 and CubeCL 0.11.3.
pub fn provenance(build: &str) -> Provenance {
    let query =
        ::provenance::gpu_query(&["name", "driver_version", "memory.total"]).unwrap_or_default();
    let field = |i: usize| {
        query
            .get(i)
            .filter(|v| !v.is_empty())
            .map_or_else(|| "unknown".to_string(), String::clone)
    };
    Provenance {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        gpu: field(0),
        driver: field(1),
        cuda: ::provenance::cuda_version().unwrap_or_else(|| "unknown".into()),
        gpu_memory: field(2),
        versions: Versions {
            situ: env!("CARGO_PKG_VERSION").into(),
            burn: "0.22.1".into(),
            cubecl: "0.11.3".into(),
            rustc: option_env!("HIGHWATER_RUSTC").unwrap_or("unknown").into(),
            build: build.into(),
        },
        git_revision: option_env!("HIGHWATER_GIT_REV").unwrap_or("unknown").into(),
        date: ::provenance::utc_now(),
    }
}

/// A network file this build cannot train as written.
#[derive(Debug, thiserror::Error)]
#[error(
    "{model_path}: backend {backend:?}, but burn-fusion is a build-wide switch in burn 0.22 and \
     this build {} it (this crate's feature `fusion`)",
    if cfg!(feature = "fusion") { "has" } else { "lacks" }
)]
pub struct BackendMismatch {
    /// The network file.
    pub model_path: String,
    /// What it asked for.
    pub backend: highwater::recipe::Backend,
}

/// `network` trained on CUDA device 0, every step measured; refused when it asks for burn-fusion
/// and the build has none, or the other way round, so a record never names a backend that did
/// not run.
pub fn rerun(
    network: &Network,
    model_path: &str,
    model_toml: &str,
    plan: &RerunPlan,
    build: &str,
) -> Result<NetworkRecord, BackendMismatch> {
    if !crate::built_for(network.backend) {
        return Err(BackendMismatch {
            model_path: model_path.to_string(),
            backend: network.backend,
        });
    }
    let provenance = provenance(build);
    let mut device = Device::cuda(0).autodiff();
    if network.checkpointing == highwater::recipe::Checkpointing::Balanced {
        device = device.gradient_checkpointing();
    }
    device.seed(plan.seed);
    let mib = |field: &str| {
        ::provenance::gpu_field(field)
            .and_then(|v| v.trim_end_matches(" MiB").trim().parse::<u64>().ok())
            .map_or(0, |m| m << 20)
    };
    let total_bytes = mib("memory.total");
    let free_at_start = mib("memory.free");
    let mut trainer = Trainer::new(network_step(network, &device), device);
    let mut steps = Vec::new();
    let mut died = None;
    for step in 1..=plan.steps {
        let read_loss = step % plan.log_every.max(1) == 0 || step == plan.steps;
        match trainer.step(read_loss) {
            Ok(measured) => steps.push(measured),
            Err(death) => {
                died = Some(death);
                break;
            }
        }
    }
    Ok(NetworkRecord {
        provenance,
        model_path: model_path.to_string(),
        model_toml: model_toml.to_string(),
        backend: network.backend,
        checkpointing: network.checkpointing,
        precision: network.precision,
        batch: network.batch,
        steps_asked: plan.steps,
        seed: plan.seed,
        device: DeviceMemory {
            total_bytes,
            free_at_start,
            cap_bytes: None,
            ballast_bytes: 0,
            pool_capacity: free_at_start,
        },
        steps,
        died,
        tuned: Vec::new(),
    })
}

/// What cubecl-cuda 0.11 told burn about the GPU: what the dry card's derivation is held to.
#[derive(Debug, Clone, Serialize)]
pub struct CardProperties {
    /// Where it came from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// `client.properties().checksum()`: what kernel and autotune caches key on.
    pub properties_checksum: u64,
    /// `format!("{:?}", client.properties())`: every property.
    pub properties_debug: String,
}

/// The properties of CUDA device 0 as cubecl-cuda 0.11 builds them.
pub fn card_properties(build: &str) -> CardProperties {
    let client = cubecl::Device::Cuda(cubecl::cuda::CudaDevice::new(0)).client();
    let properties = client.properties();
    CardProperties {
        provenance: provenance(build),
        properties_checksum: properties.checksum(),
        properties_debug: format!("{properties:?}"),
    }
}
