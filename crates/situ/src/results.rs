//! What `situ-gate` and `situ-bench` write (`repro/results/gate-situ-h200.json`,
//! `repro/results/bench-situ-h200.json`), as one type per file that the binaries serialize and
//! the book deserializes.
//!
//! Writer and reader share these types so that a field renamed on one side is a compile error
//! on the other, and a committed file that lacks a field fails to read with the field named,
//! instead of showing a dash on the page. Every field is required; the nested objects refuse a
//! field they do not know (the top level cannot: it flattens its [`Provenance`], which serde's
//! `deny_unknown_fields` does not support).

use highwater::conform::Provenance;
use serde::{Deserialize, Serialize};

use crate::gate::TestResult;

/// `situ-gate`'s file: the three tests of the fused path on the GPU, every check with its
/// threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// Where it ran; `command` comes first in the file.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// What the inputs were drawn from (`SITU_SEED` replays it).
    pub seed: u64,
    /// The soft cap `c` of `c·tanh(z/c)`.
    pub soft_cap: f32,
    /// The thresholds, fixed before the run.
    pub thresholds: Thresholds,
    /// Every test passed.
    pub pass: bool,
    /// The three tests, in the order [`crate::gate::FWD`], [`crate::gate::BWD`],
    /// [`crate::gate::FD`].
    pub tests: Vec<TestResult>,
    /// The path counters' log field at the end of the run.
    pub counters_after: String,
}

/// The gate's thresholds, one per kind of comparison (each a largest `‖Δ‖/‖reference‖`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// Fused vs tensor path, forward.
    pub fused_vs_tensor_forward: f64,
    /// Fused vs tensor path, `d(mid)`.
    pub fused_vs_tensor_backward: f64,
    /// Either path vs the `f64` host formula.
    pub vs_f64_reference: f64,
    /// The directional finite difference.
    pub finite_difference: f64,
    /// The finite difference's step.
    pub finite_difference_eps: f64,
    /// The wave's expert stack, every gradient, fused vs tensor.
    pub expert_stack: f64,
}

/// `situ-bench`'s file: fused vs tensor path at the wave's shape, times, bandwidth and the live
/// bytes per call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bench {
    /// Where it ran; `command` comes first in the file.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The shape of `mid`, `[N, 2f]`.
    pub shape_mid: [usize; 2],
    /// The element type (`f32`).
    pub dtype: String,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
    /// Timed runs, each timing a median of.
    pub runs: usize,
    /// The device-to-device copy: the yardstick.
    pub copy: CopyTiming,
    /// The fused kernels alone.
    pub fused_kernels: Kernels,
    /// Forward + backward through autodiff, per path (`tensor`, then `fused`).
    pub paths: Vec<PathTiming>,
    /// The tensor path's median over the fused path's.
    pub speedup_fused_over_tensor: f64,
    /// Live bytes one call leaves until backward, per path and checkpoint strategy.
    pub memory: Vec<Memory>,
    /// The fix's goals, met or not.
    pub goals: Goals,
    /// The path counters' log field at the end of the run.
    pub counters: String,
}

impl Bench {
    /// The timing of path `path` (`tensor`, `fused`), if the bench ran it.
    pub fn path(&self, path: &str) -> Option<&PathTiming> {
        self.paths.iter().find(|p| p.path == path)
    }

    /// The memory of path `path` under checkpointing `checkpointing` (`none`, `balanced`), if
    /// the bench measured it.
    pub fn memory(&self, path: &str, checkpointing: &str) -> Option<&Memory> {
        self.memory
            .iter()
            .find(|m| m.path == path && m.checkpointing == checkpointing)
    }
}

/// The yardstick: a vectorized device-to-device copy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyTiming {
    /// Bytes read + written.
    pub bytes_moved: u64,
    /// Median time of one copy.
    pub median_ms: f64,
    /// The bandwidth it reached.
    pub gb_per_s: f64,
}

/// The fused kernels alone, forward, backward and the pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernels {
    /// Minimal traffic of fused forward + backward: read mid twice, write h, read dh, write
    /// d(mid).
    pub bytes_moved: u64,
    /// The forward's part of it.
    pub forward_bytes: u64,
    /// The backward's part of it.
    pub backward_bytes: u64,
    /// Median time of the forward kernel.
    pub median_ms_forward: f64,
    /// Median time of the backward kernel.
    pub median_ms_backward: f64,
    /// Median time of forward + backward.
    pub median_ms_pair: f64,
    /// The pair's bandwidth.
    pub gb_per_s: f64,
    /// `bytes_moved` at the copy's bandwidth: the floor.
    pub floor_ms: f64,
    /// The pair's time over the floor.
    pub ratio_to_floor: f64,
    /// Elements per vector load/store.
    pub vector: usize,
    /// Cubes the forward launched.
    pub cubes_forward: u64,
    /// Units per cube.
    pub units_per_cube: u32,
}

/// One path through autodiff, forward + backward, one call per timed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathTiming {
    /// `tensor` or `fused`.
    pub path: String,
    /// Median time.
    pub median_ms: f64,
    /// Fastest run.
    pub min_ms: f64,
    /// Slowest run.
    pub max_ms: f64,
    /// The median over the fused kernels' floor.
    pub ratio_to_floor: f64,
    /// The path counters over the timed runs.
    pub counters: String,
}

/// The live pool bytes one call leaves until backward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// `tensor` or `fused`.
    pub path: String,
    /// `none` or `balanced`.
    pub checkpointing: String,
    /// `bytes_in_use` after the forward minus before it.
    pub live_bytes_after_forward: i64,
    /// The same in `[N, f]` tensors of the element type.
    pub in_nf_tensors: f64,
    /// `bytes_in_use` before the call.
    pub bytes_in_use_before: u64,
    /// `bytes_reserved` after the forward.
    pub bytes_reserved_after_forward: u64,
}

/// The fix's goals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goals {
    /// Through autodiff, the fused path is at least 5× faster than the tensor path.
    pub fused_at_least_5x_faster: bool,
    /// The fused kernels alone take at most 1.5× their bandwidth floor.
    pub fused_within_1_5x_of_floor_kernels: bool,
    /// The fused path through autodiff takes at most 1.5× the floor.
    pub fused_within_1_5x_of_floor_end_to_end: bool,
    /// Without checkpointing, a fused call leaves exactly its `[N, f]` output alive.
    pub fused_one_live_nf_output: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The committed file `name`, and what `T` writes back after reading it, both as JSON
    /// values (serde_json reads a float's last digit differently from how it was written, so
    /// the texts may differ where the values do not).
    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(name: &str) -> (Value, Value) {
        let path = format!("{}/../../repro/results/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let typed: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let value = serde_json::from_str(&text).unwrap();
        (value, serde_json::to_value(&typed).unwrap())
    }

    #[test]
    fn the_committed_files_hold_exactly_what_these_types_write() {
        for (committed, written) in [
            round_trip::<Gate>("gate-situ-h200.json"),
            round_trip::<Bench>("bench-situ-h200.json"),
        ] {
            assert_eq!(committed, written);
        }
    }
}
