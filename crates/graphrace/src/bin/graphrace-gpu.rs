//! `graphrace-gpu`: the decode step of the model, run on a real GPU (feature `cuda`).
//!
//! One body, two arms: the step is the model's own [`graphrace::decode_step`] program, and
//! every tensor sits at the address the model's caching allocator gave it ([`graphrace::capture`])
//! inside one device arena. The host walks the same ops: a launch becomes a CUDA kernel on the
//! main or the side stream, a wait becomes an event recorded on one stream and waited on by the
//! other; allocations and frees were already decided by the model's pool. Captured arms record
//! that walk into a CUDA graph once and replay it; the eager arm launches the walk each time.
//!
//! Each kernel sweeps its tensor's rows in address order and spends the model's nominal cost
//! doing so (a `clock64` wait per row and a fixed one at the start), so the GPU follows the
//! model's timing; the GPU's own scheduling, plus a bandwidth hog on a third stream (`--load`),
//! supplies the jitter. `--side-stretch` makes the side's store slower (a heavier indexer) to
//! show where the margin closes.
//!
//! After every replay a check on the main stream compares the index-K cache, which the side's
//! store copies from `index_k`, with the values `index_k_proj` wrote in that replay: a session
//! whose row differs read a block the main stream had already handed to another tensor.
//!
//! ```text
//! graphrace-gpu --out graphrace-h200.json [--sessions 36,48,60,72,84] [--replays 200]
//!               [--trials 5] [--side-stretch 1,1.5,2] [--blocks 16] [--no-load]
//! ```
//!
//! Why cudarc rather than CubeCL: the race needs CUDA-graph stream capture, events between two
//! streams and a pool whose addresses we choose, and CubeCL 0.10 exposes none of these (its
//! streams and memory pools are internal to its server). cudarc is the driver API itself,
//! loaded at run time like CubeCL loads it, and already in the lockfile through cubecl-cuda.
//!
//! Writes JSON whose first field is the command line, then the GPU, driver, date and git
//! revision, then one result per arm × sessions × stretch; prints a human log as it goes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::{CUdevice_attribute, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use graphrace::Finding;
use graphrace::driver::{ByteAccess, DriverGraph, DriverNode, GraphDump, Region, RegionHome};
use graphrace::program::{Home, Kernel, Op, Program, TensorId};
use graphrace::suite::{Gap, GpuResult, KernelTime, Suite, SuiteRecord};
use graphrace::{Config, Graph, Mode, Stream, capture, decode_step};
use serde::Serialize;

const KERNELS: &str = r#"
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 gen(u32 tag, u32 row, u32 col, u32 epoch) {
    u32 h = tag * 0x9E3779B9u ^ row * 0x85EBCA6Bu ^ col * 0xC2B2AE35u ^ epoch * 0x27D4EB2Fu;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    return h;
}

__device__ __forceinline__ void wait_cycles(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}

extern "C" __global__ void bump(u32* epoch) { *epoch += 1; }

// One thread spinning for a known number of cycles: times the SM clock against the host's.
extern "C" __global__ void spin(long long cycles) { wait_cycles(cycles); }

__device__ __forceinline__ u64 now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Sweeps `rows` rows of dst in address order; all blocks share each row, then wait.
// copy = 1: dst = src (same row width); copy = 0: dst = gen(tag, …), src is read too.
// times[2 slot]: when block 0 started (ns, the GPU's global timer); times[2 slot + 1]: when the
// last block finished.
extern "C" __global__ void sweep(const u32* src, u32 src_row_words, u32* dst, u32 dst_row_words,
                                 u32 rows, u32 tag, const u32* epoch, long long fixed_cycles,
                                 long long row_cycles, u32 copy, u32 keep, u64* times, u32 slot) {
    if (blockIdx.x == 0 && threadIdx.x == 0) { times[2 * slot] = now_ns(); }
    u32 e = *epoch;
    wait_cycles(fixed_cycles);
    u32 stride = gridDim.x * blockDim.x;
    u32 tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (u32 r = 0; r < rows; ++r) {
        const u32* s = src + (u64)r * src_row_words;
        u32* d = dst + (u64)r * dst_row_words;
        for (u32 c = tid; c < dst_row_words; c += stride) {
            u32 v = s[c % src_row_words];
            d[c] = copy ? v : (gen(tag, r, c, e) ^ (v & keep));
        }
        wait_cycles(row_cycles);
    }
    __syncthreads();
    if (threadIdx.x == 0) { atomicMax(&times[2 * slot + 1], now_ns()); }
}

extern "C" __global__ void verify(const u32* cache, u32 row_words, u32 rows, u32 tag,
                                  const u32* epoch, u32* row_bad, u32* replay_bad) {
    u32 e = *epoch;
    u64 n = (u64)rows * row_words;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u32 r = (u32)(i / row_words), c = (u32)(i % row_words);
        if (cache[i] != gen(tag, r, c, e)) { atomicOr(&row_bad[r], 1u); atomicOr(replay_bad, 1u); }
    }
}

extern "C" __global__ void tally(u32* replay_bad, u32* racing) {
    if (*replay_bad) { *racing += 1; *replay_bad = 0; }
}

// The bandwidth hog of --load: read-modify-write over a large buffer.
extern "C" __global__ void hog(u32* buf, u64 words) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        buf[i] = buf[i] * 1664525u + 1013904223u;
    }
}
"#;

/// One block of one thread: the bookkeeping kernels (`bump`, `tally`, `spin`).
const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (1, 1, 1),
    shared_mem_bytes: 0,
};

struct Args {
    out: PathBuf,
    /// Write the driver's graphs of every captured configuration here instead of replaying
    /// (with `--suite`: of every captured variant, beside the replays).
    dump_graph: Option<PathBuf>,
    /// Replay every variant of this suite (`repro/graphrace-suite.toml`) instead of the arms.
    suite: Option<PathBuf>,
    /// With `--suite`: replays timed kernel by kernel after the counted ones.
    timed: u32,
    sessions: Vec<u32>,
    replays: u32,
    trials: u32,
    side_stretch: Vec<f64>,
    blocks: u32,
    load: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        out: PathBuf::new(),
        dump_graph: None,
        suite: None,
        timed: 0,
        sessions: vec![36, 48, 60, 72, 84],
        replays: 200,
        trials: 5,
        side_stretch: vec![1.0, 1.5, 2.0],
        blocks: 16,
        load: true,
    };
    let list = |v: &str| -> Result<Vec<f64>> {
        v.split(',')
            .map(|x| {
                x.trim()
                    .parse::<f64>()
                    .with_context(|| format!("`{x}` is not a number"))
            })
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => a.out = PathBuf::from(value()?),
            "--dump-graph" => a.dump_graph = Some(PathBuf::from(value()?)),
            "--suite" => {
                a.suite = Some(PathBuf::from(value()?));
                a.timed = a.timed.max(100);
            }
            "--timed" => a.timed = value()?.parse()?,
            "--sessions" => a.sessions = list(&value()?)?.into_iter().map(|x| x as u32).collect(),
            "--replays" => a.replays = value()?.parse()?,
            "--trials" => a.trials = value()?.parse()?,
            "--side-stretch" => a.side_stretch = list(&value()?)?,
            "--blocks" => a.blocks = value()?.parse()?,
            "--no-load" => a.load = false,
            other => bail!(
                "unknown argument `{other}`; usage: graphrace-gpu --out FILE [--sessions 36,48,60] \
                 [--replays N] [--trials N] [--side-stretch 1,1.5,2] [--blocks N] [--no-load] | \
                 graphrace-gpu --dump-graph FILE [--sessions N] [--blocks N] | \
                 graphrace-gpu --suite SUITE --out FILE --dump-graph FILE [--replays N] [--trials N]"
            ),
        }
    }
    if a.out.as_os_str().is_empty() && a.dump_graph.is_none() {
        bail!("--out FILE (or --dump-graph FILE) is required");
    }
    if a.suite.is_some() && (a.out.as_os_str().is_empty() || a.dump_graph.is_none()) {
        bail!("--suite needs --out FILE (the replays) and --dump-graph FILE (the graphs)");
    }
    Ok(a)
}

/// The recorded file: provenance first, `command` the very first field.
#[derive(Serialize)]
struct Record {
    command: String,
    gpu: String,
    driver: String,
    date: String,
    git_revision: String,
    /// SM clock measured at start-up (kHz): the kernels' waits are in its cycles.
    sm_clock_khz: i32,
    settings: Settings,
    results: Vec<ArmResult>,
}

#[derive(Serialize)]
struct Settings {
    sessions: Vec<u32>,
    replays_per_trial: u32,
    trials: u32,
    side_stretch: Vec<f64>,
    blocks_per_kernel: u32,
    load: bool,
    build: &'static str,
}

#[derive(Serialize, Clone)]
struct ArmResult {
    arm: &'static str,
    config: String,
    sessions: u32,
    side_stretch: f64,
    corrupted: u64,
    observed: u64,
    rate: f64,
    racing_replays: u64,
    replays: u64,
    /// Wall time per replay (graph or eager walk + check), host-measured.
    us_per_replay: f64,
    /// Timed replays after the counted ones: per replay, each kernel's start and end on the
    /// GPU's global timer (ns), by the position of its launch among the program's ops.
    #[serde(skip)]
    timed: Vec<Vec<(u64, u64)>>,
}

struct Gpu {
    ctx: Arc<CudaContext>,
    main: Arc<CudaStream>,
    side: Arc<CudaStream>,
    load: Arc<CudaStream>,
    sweep: CudaFunction,
    bump: CudaFunction,
    verify: CudaFunction,
    tally: CudaFunction,
    hog: CudaFunction,
    cycles_per_us: f64,
}

/// Device memory of one arm: the pool arena, the statics, the epoch and the tallies.
struct Buffers {
    _arena: CudaSlice<u8>,
    _statics: Vec<CudaSlice<u8>>,
    ptr: HashMap<usize, u64>,
    epoch: CudaSlice<u32>,
    row_bad: CudaSlice<u32>,
    replay_bad: CudaSlice<u32>,
    racing: CudaSlice<u32>,
    /// Per kernel (by launch order): start and end on the GPU's global timer, ns.
    times: CudaSlice<u64>,
}

fn dptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

impl Gpu {
    fn new() -> Result<Gpu> {
        let ctx = CudaContext::new(0).context("opening GPU 0 (is libcuda there?)")?;
        // Streams must not be ordered behind our back: the race is the point.
        unsafe { ctx.disable_event_tracking() };
        let main = ctx.new_stream()?;
        let side = ctx.new_stream()?;
        let load = ctx.new_stream()?;
        let ptx =
            cudarc::nvrtc::compile_ptx(KERNELS).context("compiling the kernels with NVRTC")?;
        let module = ctx.load_module(ptx)?;
        let spin = module.load_function("spin")?;
        let cycles_per_us = measure_clock(&main, &spin).or_else(|_| {
            ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
                .map(|khz| f64::from(khz) / 1000.0)
        })?;
        if cycles_per_us <= 0.0 {
            bail!("could not tell the SM clock");
        }
        Ok(Gpu {
            sweep: module.load_function("sweep")?,
            bump: module.load_function("bump")?,
            verify: module.load_function("verify")?,
            tally: module.load_function("tally")?,
            hog: module.load_function("hog")?,
            cycles_per_us,
            ctx,
            main,
            side,
            load,
        })
    }

    fn stream(&self, s: Stream) -> &Arc<CudaStream> {
        match s {
            Stream::Main => &self.main,
            Stream::Side => &self.side,
        }
    }

    fn buffers(&self, program: &Program, graph: &Graph) -> Result<Buffers> {
        let arena = self
            .main
            .alloc_zeros::<u8>(graph.pool_bytes.max(512) as usize)?;
        let base = dptr(&arena, &self.main);
        let mut ptr = HashMap::new();
        let mut statics = vec![];
        for (i, t) in program.tensors.iter().enumerate() {
            let Some(p) = &graph.placements[i] else {
                continue;
            };
            match t.home {
                Home::Pool => {
                    ptr.insert(i, base + p.range.start);
                }
                Home::Static => {
                    let s = self
                        .main
                        .alloc_zeros::<u8>((p.range.end - p.range.start) as usize)?;
                    ptr.insert(i, dptr(&s, &self.main));
                    statics.push(s);
                }
            }
        }
        Ok(Buffers {
            _arena: arena,
            _statics: statics,
            ptr,
            epoch: self.main.alloc_zeros::<u32>(1)?,
            row_bad: self.main.alloc_zeros::<u32>(program.sessions as usize)?,
            replay_bad: self.main.alloc_zeros::<u32>(1)?,
            racing: self.main.alloc_zeros::<u32>(1)?,
            times: self.main.alloc_zeros::<u64>(2 * program.ops.len().max(1))?,
        })
    }

    /// Issues the host program's ops on the two streams (inside a capture or not); after each
    /// kernel launch, `launched(op, stream)` with the op's position in the program.
    fn walk(
        &self,
        program: &Program,
        b: &Buffers,
        blocks: u32,
        side_stretch: f64,
        mut launched: impl FnMut(usize, &CudaStream) -> Result<()>,
    ) -> Result<()> {
        let epoch = dptr(&b.epoch, &self.main);
        unsafe {
            self.main
                .launch_builder(&self.bump)
                .arg(&epoch)
                .launch(ONE_THREAD)?;
        }
        for (at, op) in program.ops.iter().enumerate() {
            match op {
                Op::Launch(k) => {
                    self.launch(program, b, k, at, blocks, side_stretch)?;
                    launched(at, self.stream(k.stream))?;
                }
                Op::Wait { waiter, on } => self.stream(*waiter).join(self.stream(*on))?,
                // Decided by the model's pool already; record_stream has no GPU side.
                Op::Alloc { .. } | Op::Free { .. } | Op::RecordStream { .. } => {}
            }
        }
        Ok(())
    }

    fn launch(
        &self,
        program: &Program,
        b: &Buffers,
        k: &Kernel,
        at: usize,
        blocks: u32,
        side_stretch: f64,
    ) -> Result<()> {
        let epoch = dptr(&b.epoch, &self.main);
        let (src, dst) = match (&k.reads[..], &k.writes[..]) {
            ([s], [d]) => (*s, *d),
            _ => bail!(
                "kernel `{}`: the GPU arm runs one-input one-output kernels",
                k.name
            ),
        };
        let words = |t: TensorId| (program.tensors[t.0].row_bytes / 4) as u32;
        let stretch = if k.name == "index_k_store" {
            side_stretch
        } else {
            1.0
        };
        let fixed = (k.cost.fixed_us * stretch * self.cycles_per_us) as i64;
        let per_row = (k.cost.per_session_us * stretch * self.cycles_per_us) as i64;
        // The store copies the transient into the cache; the cache reader copies the cache out,
        // so that what it read can be checked like the cache itself.
        let copy = u32::from(k.name == "index_k_store" || k.name == "topk_select");
        let (src_ptr, dst_ptr) = (b.ptr[&src.0], b.ptr[&dst.0]);
        let (src_words, dst_words) = (words(src), words(dst));
        let (rows, tag, keep) = (program.sessions, dst.0 as u32 + 1, 0u32);
        let (times, slot) = (dptr(&b.times, &self.main), at as u32);
        unsafe {
            self.stream(k.stream)
                .launch_builder(&self.sweep)
                .arg(&src_ptr)
                .arg(&src_words)
                .arg(&dst_ptr)
                .arg(&dst_words)
                .arg(&rows)
                .arg(&tag)
                .arg(&epoch)
                .arg(&fixed)
                .arg(&per_row)
                .arg(&copy)
                .arg(&keep)
                .arg(&times)
                .arg(&slot)
                .launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })?;
        }
        Ok(())
    }

    /// After a replay, on main: every copy of the transient's rows (the index-K cache, and
    /// what the cache reader took from it) is compared with what `index_k_proj` wrote in that
    /// replay; a differing row marks its session.
    fn check(&self, program: &Program, b: &Buffers) -> Result<()> {
        let index_k = tensor(program, "index_k");
        let (rows, tag) = (program.sessions, index_k.0 as u32 + 1);
        let (epoch, row_bad) = (dptr(&b.epoch, &self.main), dptr(&b.row_bad, &self.main));
        let (replay_bad, racing) = (dptr(&b.replay_bad, &self.main), dptr(&b.racing, &self.main));
        let copies = ["index_k_cache", "topk"]
            .into_iter()
            .filter_map(|name| program.tensors.iter().position(|t| t.name == name));
        for copy in copies {
            let (ptr, words) = (b.ptr[&copy], (program.tensors[copy].row_bytes / 4) as u32);
            unsafe {
                self.main
                    .launch_builder(&self.verify)
                    .arg(&ptr)
                    .arg(&words)
                    .arg(&rows)
                    .arg(&tag)
                    .arg(&epoch)
                    .arg(&row_bad)
                    .arg(&replay_bad)
                    .launch(LaunchConfig::for_num_elems(words * rows.min(64)))?;
            }
        }
        unsafe {
            self.main
                .launch_builder(&self.tally)
                .arg(&replay_bad)
                .arg(&racing)
                .launch(ONE_THREAD)?;
        }
        Ok(())
    }
}

/// SM cycles per µs, measured: one thread spins 4·10⁸ cycles (a fraction of a second) while the
/// host times it. The kernels' waits are in cycles, so this is what maps the model's µs onto
/// the GPU, whatever the clock runs at under load.
fn measure_clock(stream: &Arc<CudaStream>, spin: &CudaFunction) -> Result<f64> {
    let one = ONE_THREAD;
    let cycles: i64 = 400_000_000;
    let small: i64 = 1_000;
    unsafe { stream.launch_builder(spin).arg(&small).launch(one)? };
    stream.synchronize()?;
    let t = Instant::now();
    unsafe { stream.launch_builder(spin).arg(&cycles).launch(one)? };
    stream.synchronize()?;
    Ok(cycles as f64 / (t.elapsed().as_secs_f64() * 1e6))
}

fn tensor(program: &Program, name: &str) -> TensorId {
    TensorId(
        program
            .tensors
            .iter()
            .position(|t| t.name == name)
            .expect("the decode step names its tensors"),
    )
}

fn run_arm(
    gpu: &Gpu,
    args: &Args,
    arm: &'static str,
    config: &Config,
    sessions: u32,
    side_stretch: f64,
    hog_buf: &CudaSlice<u32>,
) -> Result<ArmResult> {
    let program = decode_step(config, sessions);
    let graph = capture(&program).context("the model's capture")?;
    let mut b = gpu.buffers(&program, &graph)?;
    let captured: Option<CudaGraph> = if config.mode == Mode::Captured {
        gpu.main
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        gpu.walk(&program, &b, args.blocks, side_stretch, |_, _| Ok(()))?;
        let g = gpu
            .main
            .end_capture(CUgraphInstantiate_flags(0))?
            .context("the capture recorded nothing")?;
        g.upload()?;
        Some(g)
    } else {
        None
    };
    let hog_ptr = dptr(hog_buf, &gpu.load);
    let hog_words = hog_buf.len() as u64;
    // One replay: the hog on its stream (under load), then the step, captured or eager.
    let replay = |b: &Buffers| -> Result<()> {
        if args.load {
            unsafe {
                gpu.load
                    .launch_builder(&gpu.hog)
                    .arg(&hog_ptr)
                    .arg(&hog_words)
                    .launch(LaunchConfig {
                        grid_dim: (264, 1, 1),
                        block_dim: (512, 1, 1),
                        shared_mem_bytes: 0,
                    })?;
            }
        }
        match &captured {
            Some(g) => g.launch()?,
            None => gpu.walk(&program, b, args.blocks, side_stretch, |_, _| Ok(()))?,
        }
        Ok(())
    };
    let mut corrupted = 0u64;
    gpu.main.synchronize()?;
    let start = Instant::now();
    for _ in 0..args.trials {
        gpu.main.memset_zeros(&mut b.row_bad)?;
        for _ in 0..args.replays {
            replay(&b)?;
            gpu.check(&program, &b)?;
        }
        let rows = gpu.main.clone_dtoh(&b.row_bad)?;
        corrupted += rows.iter().filter(|r| **r != 0).count() as u64;
    }
    gpu.main.synchronize()?;
    gpu.load.synchronize()?;
    let elapsed = start.elapsed().as_secs_f64();
    // Timed replays, under the same load: each one's kernel times read back on its own.
    let mut timed = vec![];
    for _ in 0..args.timed {
        gpu.main.memset_zeros(&mut b.times)?;
        replay(&b)?;
        gpu.main.synchronize()?;
        let t = gpu.main.clone_dtoh(&b.times)?;
        timed.push(t.chunks(2).map(|c| (c[0], c[1])).collect());
    }
    gpu.load.synchronize()?;
    let racing = gpu.main.clone_dtoh(&b.racing)?[0];
    let replays = u64::from(args.trials) * u64::from(args.replays);
    let observed = u64::from(args.trials) * u64::from(sessions);
    gpu.ctx.synchronize()?;
    Ok(ArmResult {
        arm,
        config: config.name.clone(),
        sessions,
        side_stretch,
        corrupted,
        observed,
        rate: corrupted as f64 / observed as f64,
        racing_replays: u64::from(racing),
        replays,
        us_per_replay: 1e6 * elapsed / replays as f64,
        timed,
    })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let gpu = Gpu::new()?;
    let name = gpu.ctx.name().unwrap_or_else(|_| "unknown".into());
    println!("{command}\n{name}, SM clock {:.0} MHz", gpu.cycles_per_us);
    if let Some(suite) = &args.suite {
        return run_suite(&gpu, &args, command, name, suite);
    }
    if let Some(path) = &args.dump_graph {
        return dump_graphs(&gpu, &args, command, name, path);
    }
    let hog_buf = gpu.load.alloc_zeros::<u32>(64 << 20)?;
    let arms: [(&'static str, Config); 4] = [
        ("overlap", Config::incident()),
        (
            "serialized",
            Config {
                name: "overlap-off".into(),
                overlap: false,
                ..Config::incident()
            },
        ),
        (
            "eager",
            Config {
                name: "eager".into(),
                mode: Mode::Eager,
                ..Config::incident()
            },
        ),
        (
            "recorded",
            Config {
                name: "record-stream".into(),
                record_stream: true,
                ..Config::incident()
            },
        ),
    ];
    let mut results = vec![];
    for &stretch in &args.side_stretch {
        for &sessions in &args.sessions {
            for (arm, config) in &arms {
                let r = run_arm(&gpu, &args, arm, config, sessions, stretch, &hog_buf)
                    .with_context(|| {
                        format!("arm {arm}, {sessions} sessions, stretch {stretch}")
                    })?;
                println!(
                    "stretch {stretch:>4}  {sessions:>3} sessions  {arm:>10}: {:>5.1} % of sessions corrupted, {:>4} of {} replays raced, {:.0} µs/replay",
                    100.0 * r.rate,
                    r.racing_replays,
                    r.replays,
                    r.us_per_replay
                );
                results.push(r);
            }
        }
    }
    let record = Record {
        command,
        gpu: name,
        driver: smi("driver_version"),
        date: cell_output::utc_now(),
        git_revision: option_env!("GRAPHRACE_GIT_REV").unwrap_or("unknown").into(),
        sm_clock_khz: (gpu.cycles_per_us * 1000.0) as i32,
        settings: Settings {
            sessions: args.sessions.clone(),
            replays_per_trial: args.replays,
            trials: args.trials,
            side_stretch: args.side_stretch.clone(),
            blocks_per_kernel: args.blocks,
            load: args.load,
            build: "cargo build --release --locked -p graphrace --features cuda",
        },
        results,
    };
    std::fs::write(&args.out, serde_json::to_string_pretty(&record)? + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    Ok(())
}

/// Every variant of the suite replayed under load, and the driver's graph of each captured one.
fn run_suite(gpu: &Gpu, args: &Args, command: String, name: String, file: &Path) -> Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the suite {}", file.display()))?;
    let suite = Suite::parse(&file.display().to_string(), &text, |config| {
        let path = format!("repro/graphrace/{config}.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        Config::parse(&path, &text).map_err(|e| e.to_string())
    })?;
    let hog_buf = gpu.load.alloc_zeros::<u32>(64 << 20)?;
    let (mut results, mut graphs) = (vec![], vec![]);
    for v in &suite.variants {
        let variant = v.name();
        if v.config.mode == Mode::Captured {
            let mut g = dump_graph(gpu, &v.config, v.sessions, args.blocks)
                .with_context(|| format!("dumping the graph of {variant}"))?;
            g.config = variant.clone();
            graphs.push(g);
        }
        let r = run_arm(gpu, args, "suite", &v.config, v.sessions, 1.0, &hog_buf)
            .with_context(|| format!("replaying {variant}"))?;
        println!(
            "{variant:>26}: {:>5.1} % of sessions corrupted, {:>4} of {} replays raced, {:.0} µs/replay",
            100.0 * r.rate,
            r.racing_replays,
            r.replays,
            r.us_per_replay
        );
        let gaps = race_gaps(&v.config, v.sessions, &r.timed);
        let kernels = kernel_times(&v.config, v.sessions, &r.timed);
        for g in &gaps {
            println!(
                "{:>26}  {} → {}: gap {:.1} µs at least, {:.1} µs median over {} timed replays",
                "", g.first, g.second, g.min_us, g.median_us, g.replays
            );
        }
        results.push(GpuResult {
            variant,
            gaps,
            kernels,
            corrupted: r.corrupted,
            observed: r.observed,
            racing_replays: r.racing_replays,
            replays: r.replays,
            us_per_replay: r.us_per_replay,
        });
    }
    let (driver, date) = (smi("driver_version"), cell_output::utc_now());
    let git_revision: String = option_env!("GRAPHRACE_GIT_REV").unwrap_or("unknown").into();
    let record = SuiteRecord {
        command: command.clone(),
        gpu: name.clone(),
        driver: driver.clone(),
        date: date.clone(),
        git_revision: git_revision.clone(),
        sm_clock_khz: (gpu.cycles_per_us * 1000.0) as i32,
        replays_per_trial: args.replays,
        trials: args.trials,
        load: args.load,
        timed_replays: args.timed,
        results,
    };
    let dump = GraphDump {
        command,
        gpu: name,
        driver,
        date,
        git_revision,
        graphs,
    };
    let graphs_path = args
        .dump_graph
        .as_ref()
        .expect("checked with the arguments");
    for (path, json) in [
        (&args.out, serde_json::to_string_pretty(&record)?),
        (graphs_path, serde_json::to_string_pretty(&dump)?),
    ] {
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Each kernel's median start and end over the timed replays, µs after the replay's first
/// kernel started.
fn kernel_times(config: &Config, sessions: u32, timed: &[Vec<(u64, u64)>]) -> Vec<KernelTime> {
    let program = decode_step(config, sessions);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    (program.ops.iter().enumerate())
        .filter_map(|(at, op)| {
            let Op::Launch(k) = op else { return None };
            let (mut starts, mut ends) = (vec![], vec![]);
            for t in timed {
                let Some(t0) = t.iter().map(|s| s.0).filter(|&s| s > 0).min() else {
                    continue;
                };
                let Some(&(start, end)) = t.get(at) else {
                    continue;
                };
                if start >= t0 && end >= start {
                    starts.push((start - t0) as f64 / 1e3);
                    ends.push((end - t0) as f64 / 1e3);
                }
            }
            Some(KernelTime {
                kernel: k.name.clone(),
                start_us: median(starts)?,
                end_us: median(ends)?,
            })
        })
        .collect()
}

/// For each race the model's check finds in the variant: how long after the first kernel ended
/// the second started, over the timed replays (negative: they overlapped).
fn race_gaps(config: &Config, sessions: u32, timed: &[Vec<(u64, u64)>]) -> Vec<Gap> {
    let program = decode_step(config, sessions);
    let Ok(model) = capture(&program) else {
        return vec![];
    };
    let launch = |kernel: &str| {
        (program.ops.iter()).position(|op| matches!(op, Op::Launch(k) if k.name == kernel))
    };
    let mut gaps = vec![];
    let report = graphrace::check(&model);
    for (a, b) in report.findings.iter().filter_map(Finding::race_pair) {
        let (Some(ia), Some(ib)) = (launch(&a.kernel), launch(&b.kernel)) else {
            continue;
        };
        let mut us: Vec<f64> = (timed.iter())
            .filter_map(|t| {
                let ((_, a_end), (b_start, _)) = (t.get(ia)?, t.get(ib)?);
                (*a_end > 0 && *b_start > 0).then(|| (*b_start as f64 - *a_end as f64) / 1e3)
            })
            .collect();
        if us.is_empty()
            || gaps
                .iter()
                .any(|g: &Gap| g.first == a.kernel && g.second == b.kernel)
        {
            continue;
        }
        us.sort_by(f64::total_cmp);
        gaps.push(Gap {
            first: a.kernel.clone(),
            second: b.kernel.clone(),
            min_us: us[0],
            median_us: us[us.len() / 2],
            replays: us.len() as u32,
        });
    }
    gaps
}

/// Captures every captured configuration of `repro/graphrace/` and writes the graphs the
/// driver built, read back node by node and edge by edge.
fn dump_graphs(gpu: &Gpu, args: &Args, command: String, name: String, path: &Path) -> Result<()> {
    let sessions = args.sessions[0];
    let mut files: Vec<PathBuf> = std::fs::read_dir("repro/graphrace")
        .context("reading repro/graphrace (run from the repository's root)")?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.sort();
    let mut graphs = vec![];
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "toml"))
    {
        let text = std::fs::read_to_string(file)?;
        let config = Config::parse(&file.display().to_string(), &text)?;
        if config.mode != Mode::Captured {
            continue;
        }
        let g = dump_graph(gpu, &config, sessions, args.blocks)
            .with_context(|| format!("dumping the graph of {}", file.display()))?;
        let kernels = g.nodes.iter().filter(|n| n.kind == "kernel").count();
        println!(
            "{:>14}: {} nodes ({kernels} kernels), {} edges",
            g.config,
            g.nodes.len(),
            g.edges.len()
        );
        graphs.push(g);
    }
    let dump = GraphDump {
        command,
        gpu: name,
        driver: smi("driver_version"),
        date: cell_output::utc_now(),
        git_revision: option_env!("GRAPHRACE_GIT_REV").unwrap_or("unknown").into(),
        graphs,
    };
    std::fs::write(path, serde_json::to_string_pretty(&dump)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The step of `config` captured on the GPU, and its graph read back from the driver: every
/// node's type, a kernel's function and arguments (decoded with the signatures in `KERNELS`),
/// and every edge. The memory map is the GPU arm's own layout of the model's tensors.
fn dump_graph(gpu: &Gpu, config: &Config, sessions: u32, blocks: u32) -> Result<DriverGraph> {
    use cudarc::driver::sys;
    let program = decode_step(config, sessions);
    let model = capture(&program).context("the model's capture")?;
    let b = gpu.buffers(&program, &model)?;
    gpu.main
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    // Which node each launch made, as the capture reports it: the node the stream's next
    // captured work would depend on.
    let mut made_by: HashMap<usize, usize> = HashMap::new();
    gpu.walk(&program, &b, blocks, 1.0, |op, stream| {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut deps, mut n): (*const sys::CUgraphNode, usize) = (std::ptr::null(), 0);
        // SAFETY: a capturing stream; the dependency array is the driver's, read at once.
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream.cu_stream(),
                &mut status,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut deps,
                std::ptr::null_mut(),
                &mut n,
            )
            .result()?;
            if n != 1 {
                bail!(
                    "after host op {op} the capture reports {n} dependencies, not the one node \
                     the launch made"
                );
            }
            made_by.insert(*deps as usize, op);
        }
        Ok(())
    })?;
    let captured = gpu
        .main
        .end_capture(CUgraphInstantiate_flags(0))?
        .context("the capture recorded nothing")?;
    let cu_graph = captured.cu_graph();

    let mut count = 0usize;
    let mut handles: Vec<sys::CUgraphNode> = vec![];
    // SAFETY: the graph is alive (`captured`); the first call sizes the second's buffer.
    unsafe {
        sys::cuGraphGetNodes(cu_graph, std::ptr::null_mut(), &mut count).result()?;
        handles.resize(count, std::ptr::null_mut());
        sys::cuGraphGetNodes(cu_graph, handles.as_mut_ptr(), &mut count).result()?;
    }
    handles.truncate(count);
    let index: HashMap<usize, usize> = (handles.iter().enumerate())
        .map(|(i, h)| (*h as usize, i))
        .collect();
    let mut edges_n = 0usize;
    let (mut from, mut to) = (vec![], vec![]);
    // SAFETY: as above; null edge data is allowed for graphs whose edges carry none (capture's).
    unsafe {
        let (none, no_data) = (std::ptr::null_mut(), std::ptr::null_mut());
        sys::cuGraphGetEdges_v2(cu_graph, none, none, no_data, &mut edges_n).result()?;
        from.resize(edges_n, std::ptr::null_mut());
        to.resize(edges_n, std::ptr::null_mut());
        let (f, t) = (from.as_mut_ptr(), to.as_mut_ptr());
        sys::cuGraphGetEdges_v2(cu_graph, f, t, no_data, &mut edges_n).result()?;
    }
    let edges = from
        .iter()
        .zip(&to)
        .take(edges_n)
        .map(|(f, t)| {
            let at = |h: &sys::CUgraphNode| index.get(&(*h as usize)).copied();
            at(f)
                .zip(at(t))
                .map(|(f, t)| [f, t])
                .context("an edge names a node cuGraphGetNodes did not list")
        })
        .collect::<Result<Vec<_>>>()?;

    let epoch = dptr(&b.epoch, &gpu.main);
    let mut nodes = vec![];
    for &h in &handles {
        let mut kind: u32 = u32::MAX;
        // SAFETY: written as a plain integer: a type newer than these bindings stays a number.
        unsafe { sys::cuGraphNodeGetType(h, (&raw mut kind).cast()).result()? };
        let host_op = made_by.get(&(h as usize)).copied();
        nodes.push(if kind == 0 {
            DriverNode {
                host_op,
                ..kernel_node(h)?
            }
        } else {
            DriverNode {
                kind: node_kind(kind),
                function: None,
                host_op,
                launch: None,
                args: vec![],
                accesses: vec![],
            }
        });
    }

    let times = dptr(&b.times, &gpu.main);
    let mut regions = vec![
        Region {
            name: "epoch".into(),
            start: epoch,
            end: epoch + 4,
            home: RegionHome::Harness,
            alloc_op: None,
            free_op: None,
            stream: None,
        },
        Region {
            name: "kernel times".into(),
            start: times,
            end: times + 16 * program.ops.len() as u64,
            home: RegionHome::Harness,
            alloc_op: None,
            free_op: None,
            stream: None,
        },
    ];
    for (t, tensor) in program.tensors.iter().enumerate() {
        let (Some(&start), Some(p)) = (b.ptr.get(&t), &model.placements[t]) else {
            continue;
        };
        let pooled = tensor.home == Home::Pool;
        regions.push(Region {
            name: tensor.name.clone(),
            start,
            end: start + program.bytes(TensorId(t)),
            home: if pooled {
                RegionHome::Pool
            } else {
                RegionHome::Static
            },
            alloc_op: pooled.then_some(p.alloc_op),
            free_op: p.free_op.filter(|_| pooled),
            stream: pooled.then_some(p.stream),
        });
    }
    drop(captured);
    Ok(DriverGraph {
        config: config.name.clone(),
        sessions,
        regions,
        nodes,
        edges,
    })
}

/// The driver's name for a node type (`CUgraphNodeType`), lower case.
fn node_kind(kind: u32) -> String {
    let names = [
        "kernel",
        "memcpy",
        "memset",
        "host",
        "child_graph",
        "empty",
        "wait_event",
        "event_record",
        "ext_semas_signal",
        "ext_semas_wait",
        "mem_alloc",
        "mem_free",
        "batch_mem_op",
        "conditional",
    ];
    (names.get(kind as usize)).map_or_else(|| format!("type {kind}"), |n| n.to_string())
}

/// A kernel node read back: its function's name, launch shape and arguments, and the bytes
/// they make it read and write (by the kernel's code in `KERNELS`).
fn kernel_node(h: cudarc::driver::sys::CUgraphNode) -> Result<DriverNode> {
    use cudarc::driver::sys;
    // SAFETY: a kernel node (checked by the caller); the driver fills the struct.
    let params = unsafe {
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        sys::cuGraphKernelNodeGetParams_v2(h, &mut p).result()?;
        p
    };
    let mut name_ptr: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the function outlives the call; the name is a static string of the module.
    let function = unsafe {
        sys::cuFuncGetName(&mut name_ptr, params.func).result()?;
        std::ffi::CStr::from_ptr(name_ptr)
            .to_string_lossy()
            .into_owned()
    };
    // Each argument as its signature types it: (name, bytes).
    let signature: &[(&str, usize)] = match function.as_str() {
        "sweep" => &[
            ("src", 8),
            ("src_row_words", 4),
            ("dst", 8),
            ("dst_row_words", 4),
            ("rows", 4),
            ("tag", 4),
            ("epoch", 8),
            ("fixed_cycles", 8),
            ("row_cycles", 8),
            ("copy", 4),
            ("keep", 4),
            ("times", 8),
            ("slot", 4),
        ],
        "bump" => &[("epoch", 8)],
        other => bail!("a kernel `{other}` this binary did not launch"),
    };
    if params.kernelParams.is_null() {
        bail!("kernel `{function}` has no argument array (launched with `extra`?)");
    }
    let mut args = vec![];
    for (i, (arg, size)) in signature.iter().enumerate() {
        // SAFETY: the driver's copy of argument i, of the size the kernel's signature gives.
        let value = unsafe {
            let p = *params.kernelParams.add(i);
            match size {
                8 => std::ptr::read_unaligned(p as *const u64),
                _ => u64::from(std::ptr::read_unaligned(p as *const u32)),
            }
        };
        args.push((arg.to_string(), value));
    }
    let arg = |n: &str| args.iter().find(|(a, _)| a == n).map_or(0, |(_, v)| *v);
    let mut accesses = vec![];
    match function.as_str() {
        "sweep" => {
            let (src, src_words, dst) = (arg("src"), arg("src_row_words"), arg("dst"));
            let (dst_words, rows) = (arg("dst_row_words"), arg("rows"));
            accesses.push(ByteAccess {
                start: arg("epoch"),
                end: arg("epoch") + 4,
                write: false,
            });
            // Row r reads words 0..min(src, dst row) of src's row r: one range if that is the
            // whole row, else one per row.
            let read_words = src_words.min(dst_words);
            if read_words == src_words {
                accesses.push(ByteAccess {
                    start: src,
                    end: src + rows * src_words * 4,
                    write: false,
                });
            } else {
                for r in 0..rows {
                    let start = src + r * src_words * 4;
                    accesses.push(ByteAccess {
                        start,
                        end: start + read_words * 4,
                        write: false,
                    });
                }
            }
            accesses.push(ByteAccess {
                start: dst,
                end: dst + rows * dst_words * 4,
                write: true,
            });
            // Its own two timestamps.
            let stamps = arg("times") + 16 * arg("slot");
            accesses.push(ByteAccess {
                start: stamps,
                end: stamps + 16,
                write: true,
            });
        }
        _ => accesses.push(ByteAccess {
            start: arg("epoch"),
            end: arg("epoch") + 4,
            write: true,
        }),
    }
    Ok(DriverNode {
        kind: "kernel".into(),
        function: Some(function),
        host_op: None,
        launch: Some([params.gridDimX, params.blockDimX]),
        args,
        accesses,
    })
}

/// One field of `nvidia-smi --query-gpu` (present wherever the driver is).
fn smi(field: &str) -> String {
    std::process::Command::new("nvidia-smi")
        .args([&format!("--query-gpu={field}"), "--format=csv,noheader"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
