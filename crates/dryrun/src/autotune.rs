//! Autotune parity: the dry run picks the kernels the GPU picked.
//!
//! CubeCL keeps what autotune chose in JSON-lines files, one per tuner, under
//! `<cache root>/autotune/<cubecl version>/device-<type>-<index>-<runtime name>/`, keyed by the
//! tuned problem and an md5 of the candidates' names (nothing about the device). A copy of the
//! GPU's files is installed for every dry device before its first kernel, so a key the GPU tuned
//! is a hit and runs the GPU's choice. A key it never tuned is a miss: CubeCL then tunes for real
//! on the dry device — its test inputs and candidates' outputs go through the pool as they would
//! on the GPU — and, every time tying at zero, keeps the first candidate that launched. Misses
//! are appended to the device's copy, which is how [`AutotuneCache::misses`] reports them.

use std::path::{Path, PathBuf};

use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};

/// cubecl-common's version: the cache folder it reads (`cubecl-common/src/cache.rs`).
const CACHE_VERSION: &str = "0.10.0";

/// A device's copy of the GPU's autotune cache.
#[derive(Debug, Clone)]
pub struct AutotuneCache {
    dir: PathBuf,
    /// Entries per file when installed.
    installed: Vec<(String, usize)>,
}

/// Why a cache could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum AutotuneError {
    #[error("autotune cache {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One key tuned on the dry device because the GPU's cache did not have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// The tuner's file (`burn_cubecl-kernel-matmul-tune-base`, …).
    pub tuner: String,
    /// The problem, as CubeCL wrote its key.
    pub key: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AutotuneError + '_ {
    move |source| AutotuneError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl AutotuneCache {
    /// Copies the GPU's cache files from `from` (a `device-0-0-cuda` folder) to where CubeCL will
    /// look for dry device `index`, replacing what an earlier process left there.
    pub fn install(from: &Path, index: u16) -> Result<Self, AutotuneError> {
        let root = CubeClRuntimeConfig::get().autotune.cache.root();
        let dir = root
            .join("autotune")
            .join(CACHE_VERSION)
            .join(format!("device-0-{index}-cuda"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut installed = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(from)
            .map_err(io(from))?
            .collect::<Result<_, _>>()
            .map_err(io(from))?;
        files.sort_by_key(|f| f.file_name());
        for file in files {
            let name = file.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json.log") {
                continue;
            }
            let text = std::fs::read_to_string(file.path()).map_err(io(&file.path()))?;
            std::fs::write(dir.join(&name), &text).map_err(io(&dir))?;
            installed.push((name, entries(&text).count()));
        }
        Ok(Self { dir, installed })
    }

    /// Keys tuned on the dry device so far (not in the GPU's cache), in file order.
    pub fn misses(&self) -> Vec<Miss> {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = read
            .filter_map(|f| f.ok())
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json.log"))
            .collect();
        names.sort();
        let mut misses = Vec::new();
        for name in names {
            let before = self
                .installed
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, count)| *count);
            let text = std::fs::read_to_string(self.dir.join(&name)).unwrap_or_default();
            for line in entries(&text).skip(before) {
                misses.push(Miss {
                    tuner: name.trim_end_matches(".json.log").to_string(),
                    key: key_of(line),
                });
            }
        }
        misses
    }
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim().is_empty())
}

/// The tuned problem of one cache line (`{"key":{"key":…,"checksum":…},"value":…}`).
fn key_of(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("key").and_then(|k| k.get("key")).cloned())
        .map_or_else(|| line.to_string(), |k| k.to_string())
}
