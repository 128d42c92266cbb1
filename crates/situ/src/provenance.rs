//! Where a recorded GPU result came from: the command, the GPU, the driver, the versions, the
//! source revision and the date. The gate, the bench and the rerun put this first in their JSON.

pub use highwater::conform::{Provenance, Versions};

/// Reads the GPU through `nvidia-smi` (present wherever the driver is).
pub fn collect(build: &str) -> Provenance {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let query = smi(&[
        "--query-gpu=name,driver_version,memory.total",
        "--format=csv,noheader",
    ]);
    let mut parts = query.split(',').map(|s| s.trim().to_string());
    let gpu = parts.next().unwrap_or_default();
    let driver = parts.next().unwrap_or_default();
    let gpu_memory = parts.next().unwrap_or_default();
    let cuda = smi(&[])
        .split("CUDA Version:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("unknown")
        .to_string();
    Provenance {
        command,
        gpu: or_unknown(gpu),
        driver: or_unknown(driver),
        cuda,
        gpu_memory: or_unknown(gpu_memory),
        versions: Versions {
            situ: env!("CARGO_PKG_VERSION").into(),
            burn: "0.21.0".into(),
            cubecl: "0.10.0".into(),
            rustc: option_env!("SITU_RUSTC").unwrap_or("unknown").into(),
            build: build.into(),
        },
        git_revision: option_env!("SITU_GIT_REV").unwrap_or("unknown").into(),
        date: cell_output::utc_now(),
    }
}

fn or_unknown(s: String) -> String {
    if s.is_empty() { "unknown".into() } else { s }
}

fn smi(args: &[&str]) -> String {
    std::process::Command::new("nvidia-smi")
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .filter(|_| !args.is_empty())
                .map_or_else(
                    || String::from_utf8_lossy(&o.stdout).into_owned(),
                    str::to_string,
                )
        })
        .unwrap_or_default()
}
