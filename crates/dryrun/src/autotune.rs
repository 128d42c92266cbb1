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

use crate::atlas::{AutotuneError, Entry, cache_files, io};

/// cubecl-common's version: the cache folder it reads (`cubecl-common/src/cache.rs`).
const CACHE_VERSION: &str = "0.10.0";

/// Where CubeCL keeps the autotune cache of CUDA device `index` in this process (a GPU's, or a
/// dry device's: they share the runtime's name).
pub fn cuda_cache_dir(index: u16) -> PathBuf {
    let root = CubeClRuntimeConfig::get().autotune.cache.root();
    root.join("autotune")
        .join(CACHE_VERSION)
        .join(format!("device-0-{index}-cuda"))
}

/// A device's copy of the GPU's autotune cache.
#[derive(Debug, Clone)]
pub struct AutotuneCache {
    dir: PathBuf,
    /// Entries per file when installed.
    installed: Vec<(String, usize)>,
    /// Held for the device's life: another process (a second `highwater`, a parallel test)
    /// takes another folder instead of emptying this one under it.
    _lock: std::sync::Arc<std::fs::File>,
}

impl AutotuneCache {
    /// Copies the GPU's cache files from `from` (a `device-0-0-cuda` folder), or none, to where
    /// CubeCL will look for dry device `index`, replacing what an earlier process left there:
    /// indices repeat across processes, and a stale folder would silently warm a cold device.
    /// `None` when a live process holds that folder (take another index).
    pub fn install(from: Option<&Path>, index: u16) -> Result<Option<Self>, AutotuneError> {
        let dir = cuda_cache_dir(index);
        let parent = dir
            .parent()
            .expect("a device folder has a parent")
            .to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let lock_path = parent.join(format!("device-0-{index}-cuda.lock"));
        let lock = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut installed = Vec::new();
        for (name, text) in from.map(cache_files).transpose()?.unwrap_or_default() {
            std::fs::write(dir.join(&name), &text).map_err(io(&dir))?;
            installed.push((name, entries(&text).count()));
        }
        Ok(Some(Self {
            dir,
            installed,
            _lock: std::sync::Arc::new(lock),
        }))
    }

    /// Problems tuned on the dry device so far (not in the GPU's cache, or every one when none
    /// was installed), in file order, each with every candidate's result.
    pub fn misses(&self) -> Vec<Entry> {
        let Ok(files) = cache_files(&self.dir) else {
            return Vec::new();
        };
        let mut misses = Vec::new();
        for (name, text) in files {
            let before = self
                .installed
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, count)| *count);
            let tuner = name.trim_end_matches(".json.log");
            misses.extend(
                entries(&text)
                    .skip(before)
                    .filter_map(|line| Entry::parse(tuner, line)),
            );
        }
        misses
    }
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"key":{"key":{"m":64},"checksum":"c"},"value":{"fastest_index":2,"results":[{"outcome":{"Ok":{"name":"slow","index":1,"computation":{"median":{"secs":0,"nanos":9}}}}},{"outcome":{"Ok":{"name":"fast","index":2,"computation":{"median":{"secs":0,"nanos":3}}}}}]}}"#;

    #[test]
    fn a_device_without_a_cache_starts_cold_whatever_an_earlier_process_left() {
        let index = 65_000;
        let stale = AutotuneCache::install(None, index).unwrap().unwrap();
        std::fs::write(stale.dir.join("matmul.json.log"), format!("{LINE}\n")).unwrap();
        assert_eq!(stale.misses().len(), 1, "what a run tuned is reported");
        assert!(
            AutotuneCache::install(None, index).unwrap().is_none(),
            "a folder in use is never emptied under its device"
        );
        drop(stale);
        let cold = AutotuneCache::install(None, index).unwrap().unwrap();
        assert!(cold.misses().is_empty());
        assert!(
            crate::atlas::Atlas::read(&cold.dir)
                .unwrap()
                .entries
                .is_empty()
        );
    }
}
