//! The bench: fused vs tensor path at the wave's shape, `mid [4096, 4096]` f32 (`f` = 2048).
//!
//! `situ-bench --out bench.json`. Every timing is the median of `RUNS` synchronized runs after
//! `WARMUP` untimed ones. Measured in one process:
//!
//! * the device-to-device copy bandwidth (a vectorized CubeCL copy of 512 MiB, bytes read +
//!   written), the yardstick;
//! * the fused kernels alone (forward + backward, 10 pairs per timed run): achieved GB/s and the
//!   ratio to the bandwidth floor, `bytes moved / copy bandwidth`;
//! * forward + backward through burn-autodiff (`NoCheckpointing`) for each path, one call per
//!   timed run, loss seeded with ones by `backward()`;
//! * live pool bytes per call: `bytes_in_use` after the forward minus before it, for each path
//!   and checkpoint strategy (what the call leaves alive until backward, output included).

use std::time::Instant;

use basics::SplitMix64;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::tensor::Tensor;
use cubecl::Runtime;
use situ::cube;
use situ::gate::{self, strategy_name};
use situ::gpu::{Cube, CubeAd, CudaDevice, CudaRuntime, sync, tensor};
use situ::provenance;
use situ::reference::{fresh_seed, nonzero_uniforms};
use situ::results::{Bench, CopyTiming, Goals, Kernels, Memory, PathTiming};
use situ::{SOFT_CAP, SituCounts};

const N: usize = 4096;
const F: usize = 2048;
const WARMUP: usize = 5;
const RUNS: usize = 30;
const COPY_ELEMS: usize = 128 << 20; // 512 MiB of f32
const KERNEL_REPS: usize = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn timed(device: &CudaDevice, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..WARMUP {
        f();
    }
    sync(device);
    (0..RUNS)
        .map(|_| {
            sync(device);
            let t = Instant::now();
            f();
            sync(device);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn in_use(device: &CudaDevice) -> (u64, u64) {
    sync(device);
    let u = CudaRuntime::client(device)
        .memory_usage()
        .expect("memory usage");
    (u.bytes_in_use, u.bytes_reserved)
}

/// The bench in run order: the copy yardstick, the fused kernels, the autodiff paths, the
/// memory each leaves live, and the goals, all in one JSON.
fn main() {
    let out = situ::gpu::out_arg("bench.json");
    let provenance = provenance::collect("cargo build --release --locked -p situ --features cuda");
    let device = CudaDevice::default();
    let mut rng = SplitMix64::new(fresh_seed());
    let c = f64::from(SOFT_CAP);
    let mid_host = nonzero_uniforms(&mut rng, N * 2 * F, -3.0 * c, 3.0 * c);
    let dh_host = nonzero_uniforms(&mut rng, N * F, -1.0, 1.0);

    let copy = copy_yardstick(&device);
    let kernels = fused_kernels(&device, &mid_host, &dh_host, &copy);
    let paths = autodiff_paths(&device, &mid_host, kernels.floor_ms);
    let speedup = paths[0].median_ms / paths[1].median_ms;

    let mut memory = vec![];
    memory.extend(live::<NoCheckpointing>(&device, &mid_host));
    memory.extend(live::<BalancedCheckpointing>(&device, &mid_host));
    for m in &memory {
        println!(
            "{} / {}: {} B live after forward ({:.2} [N, f] tensors)",
            m.path, m.checkpointing, m.live_bytes_after_forward, m.in_nf_tensors
        );
    }
    let fused_none = memory
        .iter()
        .find(|m| m.path == "fused" && m.checkpointing == "none")
        .expect("measured");
    let goals = Goals {
        fused_at_least_5x_faster: speedup >= 5.0,
        fused_within_1_5x_of_floor_kernels: kernels.ratio_to_floor <= 1.5,
        fused_within_1_5x_of_floor_end_to_end: paths[1].ratio_to_floor <= 1.5,
        fused_one_live_nf_output: fused_none.live_bytes_after_forward == (N * F * 4) as i64,
    };
    let bench = Bench {
        provenance,
        shape_mid: [N, 2 * F],
        dtype: "f32".into(),
        warmup: WARMUP,
        runs: RUNS,
        copy,
        fused_kernels: kernels,
        paths,
        speedup_fused_over_tensor: speedup,
        memory,
        goals,
        counters: situ::situ_field(),
    };
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&bench).expect("serializable") + "\n",
    )
    .expect("write the bench's JSON");
    println!("speedup {speedup:.2}x -> {out}");
}

/// The yardstick: a vectorized copy, bytes read + written, and the bandwidth it reaches.
fn copy_yardstick(device: &CudaDevice) -> CopyTiming {
    let src = Tensor::<Cube, 1>::ones([COPY_ELEMS], device)
        .into_primitive()
        .tensor();
    let dst = Tensor::<Cube, 1>::zeros([COPY_ELEMS], device)
        .into_primitive()
        .tensor();
    let copy_ms = median(timed(device, || {
        for _ in 0..KERNEL_REPS {
            cube::copy_into::<CudaRuntime, f32>(&src, &dst);
        }
    })) / KERNEL_REPS as f64;
    let copy_bytes = 2 * COPY_ELEMS as u64 * 4;
    let copy_bw = copy_bytes as f64 / (copy_ms * 1e-3);
    println!(
        "copy: {copy_ms:.4} ms for {copy_bytes} B -> {:.1} GB/s",
        copy_bw / 1e9
    );
    CopyTiming {
        bytes_moved: copy_bytes,
        median_ms: copy_ms,
        gb_per_s: copy_bw / 1e9,
    }
}

/// The fused kernels alone, forward, backward and the pair, against the floor the copy's
/// bandwidth sets for the bytes they move.
fn fused_kernels(
    device: &CudaDevice,
    mid_host: &[f64],
    dh_host: &[f64],
    copy: &CopyTiming,
) -> Kernels {
    let nf = (N * F * 4) as u64;
    let (fwd_bytes, bwd_bytes) = (3 * nf, 5 * nf);
    let mid = tensor::<Cube>(mid_host, [N, 2 * F], device)
        .into_primitive()
        .tensor();
    let dh = tensor::<Cube>(dh_host, [N, F], device)
        .into_primitive()
        .tensor();
    let h = cube::empty_dense::<CudaRuntime, f32>(&mid, N, F);
    let dmid = cube::empty_dense::<CudaRuntime, f32>(&mid, N, 2 * F);
    let info = cube::forward_into::<CudaRuntime, f32>(mid.clone(), &h, SOFT_CAP);
    let reps = |f: &mut dyn FnMut()| {
        median(timed(device, || (0..KERNEL_REPS).for_each(|_| f()))) / KERNEL_REPS as f64
    };
    let fwd_ms = reps(&mut || {
        cube::forward_into::<CudaRuntime, f32>(mid.clone(), &h, SOFT_CAP);
    });
    let bwd_ms = reps(&mut || {
        cube::backward_into::<CudaRuntime, f32>(mid.clone(), dh.clone(), &dmid, SOFT_CAP);
    });
    let pair_ms = reps(&mut || {
        cube::forward_into::<CudaRuntime, f32>(mid.clone(), &h, SOFT_CAP);
        cube::backward_into::<CudaRuntime, f32>(mid.clone(), dh.clone(), &dmid, SOFT_CAP);
    });
    let bytes = fwd_bytes + bwd_bytes;
    let floor_ms = bytes as f64 / (copy.gb_per_s * 1e9) * 1e3;
    println!(
        "fused kernels: fwd {fwd_ms:.4} ms, bwd {bwd_ms:.4} ms, pair {pair_ms:.4} ms, floor {floor_ms:.4} ms"
    );
    Kernels {
        bytes_moved: bytes,
        forward_bytes: fwd_bytes,
        backward_bytes: bwd_bytes,
        median_ms_forward: fwd_ms,
        median_ms_backward: bwd_ms,
        median_ms_pair: pair_ms,
        gb_per_s: bytes as f64 / (pair_ms * 1e-3) / 1e9,
        floor_ms,
        ratio_to_floor: pair_ms / floor_ms,
        vector: info.vector,
        cubes_forward: info.cubes,
        units_per_cube: info.cube_dim,
    }
}

/// Forward + backward through autodiff, one call per run, on the tensor path and the fused one.
fn autodiff_paths(device: &CudaDevice, mid_host: &[f64], floor_ms: f64) -> Vec<PathTiming> {
    type Ad = CubeAd<NoCheckpointing>;
    let x = tensor::<Ad>(mid_host, [N, 2 * F], device).require_grad();
    let mut paths = vec![];
    for (name, fused) in [("tensor", false), ("fused", true)] {
        let before = SituCounts::now();
        let t = timed(device, || {
            let h = gate::path(x.clone(), fused);
            let grads = h.backward();
            let g = x.grad(&grads).expect("tracked");
            drop((g, grads));
        });
        let counts = SituCounts::since(before);
        let med = median(t.clone());
        println!("{name}: fwd+bwd median {med:.4} ms ({counts})");
        paths.push(PathTiming {
            path: name.into(),
            median_ms: med,
            min_ms: t.iter().copied().fold(f64::INFINITY, f64::min),
            max_ms: t.iter().copied().fold(0.0, f64::max),
            ratio_to_floor: med / floor_ms,
            counters: counts.to_string(),
        });
    }
    paths
}

/// Live pool bytes one call leaves until backward, per path, under strategy `C`.
fn live<C: CheckpointStrategy>(device: &CudaDevice, mid_host: &[f64]) -> Vec<Memory> {
    let ck = strategy_name::<C>();
    let x = tensor::<CubeAd<C>>(mid_host, [N, 2 * F], device).require_grad();
    let mut out = vec![];
    for (name, fused) in [("tensor", false), ("fused", true)] {
        // One untimed call first, so the pool's pages exist and the delta is slices only.
        let h = gate::path(x.clone(), fused);
        drop(h.backward());
        let (before, _) = in_use(device);
        let h = gate::path(x.clone(), fused);
        let (after, reserved) = in_use(device);
        drop(h.backward());
        let delta = after as i64 - before as i64;
        out.push(Memory {
            path: name.into(),
            checkpointing: ck.into(),
            live_bytes_after_forward: delta,
            in_nf_tensors: delta as f64 / (N * F * 4) as f64,
            bytes_in_use_before: before,
            bytes_reserved_after_forward: reserved,
        });
    }
    out
}
