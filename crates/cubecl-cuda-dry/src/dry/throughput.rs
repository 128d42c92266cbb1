//! The throughput a dry device answers CubeCL 0.11 with, so that it never runs a probe.
//!
//! CubeCL 0.11 bounds each autotune round by a roofline: it probes the card's arithmetic and
//! memory throughput once (`cubecl-std`'s `throughput` runners) and stops tuning at the first
//! candidate close enough to that peak. A probe times its kernel by the wall clock around a launch
//! and a sync, and grows its iteration count until one launch takes 20 ms. On a dry device a
//! launch takes no time, so the count grows until it overflows the kernel's `u32` argument and the
//! probe panics, leaving its pooled buffers behind: several GiB of pages the GPU never keeps (on
//! the GPU a cold run, which probes, and a warm run, which reads the store, reserve the same
//! bytes). So before anything is tuned, every key CubeCL 0.11 can ask about is answered:
//! from the card's store where the GPU measured it, otherwise [`ThroughputValue::ZERO`], which
//! CubeCL reads as "no peak" (as it does where a probe is unsupported) and tunes that round
//! without a bound.

use cubecl_core::ir::DeviceProperties;
use cubecl_server::throughput::{
    CmmaDims, ComputeCmmaConfig, DEFAULT_WORKING_SET_BYTES, MemoryAccess, MemorySpec,
    ThroughputCache, ThroughputKey, ThroughputMode, ThroughputValue, working_set_sweep,
};

/// Windows a memory probe's pool holds (`POOL_WINDOWS` in cubecl-std 0.11.4's `memory_probe.rs`).
const POOL_WINDOWS: u64 = 2;

/// Every key CubeCL 0.11's kernels can ask a device with `properties` about: the launch
/// overhead; direct arithmetic in each element type the device has; each matrix instruction the
/// device offers (as `compute_throughput_key` builds it from the tile `select_cmma_tile` picks);
/// and memory traffic in each direction at each working set of the sweep (`memory_bound` asks
/// the power of two below a kernel's footprint, capped at what the probe can allocate).
pub fn keys(properties: &DeviceProperties) -> Vec<ThroughputKey> {
    let features = &properties.features;
    let mut modes = vec![ThroughputMode::Launch];
    modes.extend(
        features
            .types
            .elem
            .keys()
            .map(|&dtype| ThroughputMode::ComputeDirect { dtype }),
    );
    modes.extend(
        features
            .matmul
            .cmma
            .iter()
            .chain(&features.matmul.mma)
            .map(|mma| ThroughputMode::ComputeCmma {
                dtype: mma.a_type,
                config: ComputeCmmaConfig {
                    accumulator_type: mma.cd_type,
                    cmma_dims: CmmaDims {
                        m: mma.m as usize,
                        n: mma.n as usize,
                        k: mma.k as usize,
                    },
                },
            }),
    );
    // `window_cap` in cubecl-std 0.11.4's `memory_probe.rs`.
    let window = DEFAULT_WORKING_SET_BYTES
        .min(properties.memory.max_page_size / POOL_WINDOWS)
        .max(1);
    for access in [MemoryAccess::Copy, MemoryAccess::Read, MemoryAccess::Write] {
        modes.extend(
            working_set_sweep(window * access.buffers())
                .into_iter()
                .map(|bytes| ThroughputMode::Memory(MemorySpec::new(access, bytes))),
        );
    }
    modes
        .into_iter()
        .map(|mode| ThroughputKey { mode })
        .collect()
}

/// Answers every key of [`keys`] that the process's throughput cache for this device lacks (the
/// card's store, imported first, holds what the GPU measured) with [`ThroughputValue::ZERO`].
/// Returns how many keys were left unmeasured.
pub fn answer_unmeasured(properties: &DeviceProperties) -> usize {
    let cache = ThroughputCache::get_for_device("cuda", properties);
    let mut cache = cache.lock();
    let mut unmeasured = 0;
    for key in keys(properties) {
        if cache.get(&key).is_none() {
            cache.insert(key, ThroughputValue::ZERO);
            unmeasured += 1;
        }
    }
    unmeasured
}
