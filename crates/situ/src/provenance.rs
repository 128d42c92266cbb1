//! Where a recorded GPU result came from: the command, the GPU, the driver, the versions, the
//! source revision and the date. The gate, the bench and the rerun put this first in their JSON.

pub use highwater::conform::{Provenance, Versions};

/// Reads the GPU through `nvidia-smi` (present wherever the driver is); what it cannot read is
/// `unknown`.
pub fn collect(build: &str) -> Provenance {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let query =
        ::provenance::gpu_query(&["name", "driver_version", "memory.total"]).unwrap_or_default();
    let field = |i: usize| {
        query
            .get(i)
            .filter(|v| !v.is_empty())
            .map_or_else(|| "unknown".to_string(), String::clone)
    };
    Provenance {
        command,
        gpu: field(0),
        driver: field(1),
        cuda: ::provenance::cuda_version().unwrap_or_else(|| "unknown".into()),
        gpu_memory: field(2),
        versions: Versions {
            situ: env!("CARGO_PKG_VERSION").into(),
            burn: "0.21.0".into(),
            cubecl: "0.10.0".into(),
            rustc: option_env!("SITU_RUSTC").unwrap_or("unknown").into(),
            build: build.into(),
        },
        git_revision: option_env!("SITU_GIT_REV").unwrap_or("unknown").into(),
        date: ::provenance::utc_now(),
    }
}
