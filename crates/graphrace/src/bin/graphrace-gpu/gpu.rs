//! The CUDA context, the arena and the launch plumbing shared by every mode.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::{CUdevice_attribute, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use graphrace::arms::ArmPoint;
use graphrace::program::{Home, Kernel, Op, Program, TensorId};
use graphrace::{Config, Graph, Mode, Stream, capture, decode_step};

use crate::Args;

/// The kernels, compiled at run time by NVRTC (the text of `kernels.cu`, after a newline).
const KERNELS: &str = concat!("\n", include_str!("kernels.cu"));

/// One block of one thread: the bookkeeping kernels (`bump`, `tally`, `spin`).
const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (1, 1, 1),
    shared_mem_bytes: 0,
};

/// One arm's point as recorded, and its timed replays (kept for the suite's timings).
#[derive(Clone)]
pub(crate) struct ArmResult {
    /// What the record holds of the point.
    pub(crate) point: ArmPoint,
    /// Timed replays after the counted ones: per replay, each kernel's start and end on the
    /// GPU's global timer (ns), by the position of its launch among the program's ops.
    pub(crate) timed: Vec<Vec<(u64, u64)>>,
}

pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) main: Arc<CudaStream>,
    pub(crate) side: Arc<CudaStream>,
    pub(crate) load: Arc<CudaStream>,
    pub(crate) sweep: CudaFunction,
    pub(crate) bump: CudaFunction,
    pub(crate) verify: CudaFunction,
    pub(crate) tally: CudaFunction,
    pub(crate) hog: CudaFunction,
    pub(crate) cycles_per_us: f64,
}

/// Device memory of one arm: the pool arena, the statics, the epoch and the tallies.
pub(crate) struct Buffers {
    pub(crate) _arena: CudaSlice<u8>,
    pub(crate) _statics: Vec<CudaSlice<u8>>,
    pub(crate) ptr: HashMap<usize, u64>,
    pub(crate) epoch: CudaSlice<u32>,
    pub(crate) row_bad: CudaSlice<u32>,
    pub(crate) replay_bad: CudaSlice<u32>,
    pub(crate) racing: CudaSlice<u32>,
    /// Per kernel (by launch order): start and end on the GPU's global timer, ns.
    pub(crate) times: CudaSlice<u64>,
}

pub(crate) fn dptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

impl Gpu {
    pub(crate) fn new() -> Result<Gpu> {
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

    pub(crate) fn stream(&self, s: Stream) -> &Arc<CudaStream> {
        match s {
            Stream::Main => &self.main,
            Stream::Side => &self.side,
        }
    }

    pub(crate) fn buffers(&self, program: &Program, graph: &Graph) -> Result<Buffers> {
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
    pub(crate) fn walk(
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

    pub(crate) fn launch(
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
    pub(crate) fn check(&self, program: &Program, b: &Buffers) -> Result<()> {
        let index_k = tensor(program, "index_k");
        let (rows, tag) = (program.sessions, index_k.0 as u32 + 1);
        let (epoch, row_bad) = (dptr(&b.epoch, &self.main), dptr(&b.row_bad, &self.main));
        let (replay_bad, racing) = (dptr(&b.replay_bad, &self.main), dptr(&b.racing, &self.main));
        let copies = ["index_k_cache", "topk"]
            .into_iter()
            .filter_map(|name| program.tensor(name).map(|t| t.0));
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
    program
        .tensor(name)
        .expect("the decode step names its tensors")
}

pub(crate) fn run_arm(
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
        point: ArmPoint {
            arm: arm.to_string(),
            config: config.name.clone(),
            sessions,
            side_stretch,
            corrupted,
            observed,
            rate: corrupted as f64 / observed as f64,
            racing_replays: u64::from(racing),
            replays,
            us_per_replay: 1e6 * elapsed / replays as f64,
        },
        timed,
    })
}

/// The driver version, as `nvidia-smi` reports it (present wherever the driver is), else
/// `unknown`.
pub(crate) fn driver_version() -> String {
    provenance::gpu_field("driver_version").unwrap_or_else(|| "unknown".into())
}
