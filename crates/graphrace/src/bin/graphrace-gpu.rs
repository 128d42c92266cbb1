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
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::{CUdevice_attribute, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use graphrace::program::{Home, Kernel, Op, Program, TensorId};
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

// Sweeps `rows` rows of dst in address order; all blocks share each row, then wait.
// copy = 1: dst = src (same row width); copy = 0: dst = gen(tag, …), src is read too.
extern "C" __global__ void sweep(const u32* src, u32 src_row_words, u32* dst, u32 dst_row_words,
                                 u32 rows, u32 tag, const u32* epoch, long long fixed_cycles,
                                 long long row_cycles, u32 copy, u32 keep) {
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

struct Args {
    out: PathBuf,
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
            "--sessions" => a.sessions = list(&value()?)?.into_iter().map(|x| x as u32).collect(),
            "--replays" => a.replays = value()?.parse()?,
            "--trials" => a.trials = value()?.parse()?,
            "--side-stretch" => a.side_stretch = list(&value()?)?,
            "--blocks" => a.blocks = value()?.parse()?,
            "--no-load" => a.load = false,
            other => bail!(
                "unknown argument `{other}`; usage: graphrace-gpu --out FILE [--sessions 36,48,60] \
                 [--replays N] [--trials N] [--side-stretch 1,1.5,2] [--blocks N] [--no-load]"
            ),
        }
    }
    if a.out.as_os_str().is_empty() {
        bail!("--out FILE is required");
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
        })
    }

    /// Issues the host program's ops on the two streams (inside a capture or not).
    fn walk(&self, program: &Program, b: &Buffers, blocks: u32, side_stretch: f64) -> Result<()> {
        let epoch = dptr(&b.epoch, &self.main);
        unsafe {
            self.main
                .launch_builder(&self.bump)
                .arg(&epoch)
                .launch(LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1, 1, 1),
                    shared_mem_bytes: 0,
                })?;
        }
        for op in &program.ops {
            match op {
                Op::Launch(k) => self.launch(program, b, k, blocks, side_stretch, epoch)?,
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
        blocks: u32,
        side_stretch: f64,
        epoch: u64,
    ) -> Result<()> {
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
        let copy = u32::from(k.name == "index_k_store");
        let (src_ptr, dst_ptr) = (b.ptr[&src.0], b.ptr[&dst.0]);
        let (src_words, dst_words) = (words(src), words(dst));
        let (rows, tag, keep) = (program.sessions, dst.0 as u32 + 1, 0u32);
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
                .launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })?;
        }
        Ok(())
    }

    fn check(&self, program: &Program, b: &Buffers) -> Result<()> {
        let cache = tensor(program, "index_k_cache");
        let index_k = tensor(program, "index_k");
        let (cache_ptr, words) = (
            b.ptr[&cache.0],
            (program.tensors[cache.0].row_bytes / 4) as u32,
        );
        let (rows, tag) = (program.sessions, index_k.0 as u32 + 1);
        let (epoch, row_bad) = (dptr(&b.epoch, &self.main), dptr(&b.row_bad, &self.main));
        let (replay_bad, racing) = (dptr(&b.replay_bad, &self.main), dptr(&b.racing, &self.main));
        unsafe {
            self.main
                .launch_builder(&self.verify)
                .arg(&cache_ptr)
                .arg(&words)
                .arg(&rows)
                .arg(&tag)
                .arg(&epoch)
                .arg(&row_bad)
                .arg(&replay_bad)
                .launch(LaunchConfig::for_num_elems(words * rows.min(64)))?;
            self.main
                .launch_builder(&self.tally)
                .arg(&replay_bad)
                .arg(&racing)
                .launch(LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1, 1, 1),
                    shared_mem_bytes: 0,
                })?;
        }
        Ok(())
    }
}

/// SM cycles per µs, measured: one thread spins 4·10⁸ cycles (a fraction of a second) while the
/// host times it. The kernels' waits are in cycles, so this is what maps the model's µs onto
/// the GPU, whatever the clock runs at under load.
fn measure_clock(stream: &Arc<CudaStream>, spin: &CudaFunction) -> Result<f64> {
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
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
        gpu.walk(&program, &b, args.blocks, side_stretch)?;
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
    let mut corrupted = 0u64;
    gpu.main.synchronize()?;
    let start = Instant::now();
    for _ in 0..args.trials {
        gpu.main.memset_zeros(&mut b.row_bad)?;
        for _ in 0..args.replays {
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
                None => gpu.walk(&program, &b, args.blocks, side_stretch)?,
            }
            gpu.check(&program, &b)?;
        }
        let rows = gpu.main.clone_dtoh(&b.row_bad)?;
        corrupted += rows.iter().filter(|r| **r != 0).count() as u64;
    }
    gpu.main.synchronize()?;
    gpu.load.synchronize()?;
    let elapsed = start.elapsed().as_secs_f64();
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
    })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let gpu = Gpu::new()?;
    let name = gpu.ctx.name().unwrap_or_else(|_| "unknown".into());
    println!("{command}\n{name}, SM clock {:.0} MHz", gpu.cycles_per_us);
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
