//! `highwater rerun` (feature `cuda`): the recipe trained on a real GPU with burn-cuda, its
//! pool read after every phase of every step, recorded as a [`RerunRecord`].
//!
//! Backends: `cube` is burn-cubecl's unfused `CubeBackend<CudaRuntime>` (every op materializes
//! its output); `fusion` is burn-cuda's default `Cuda`, `Fusion` over the same. Both use one
//! CubeCL client per device, so the pool read is the one the tensors live in.
//!
//! **Emulating a smaller card.** `cap` bytes is what the emulated card leaves the process (its
//! total less its desktop). Before the pool grows, `total - cap` bytes are taken straight from
//! the driver (`cuMemAlloc`, outside the pool), so the pool's pages fail where they would on
//! that card. The pool is still configured from the real card's total (cubecl-cuda reads
//! `cuDeviceTotalMem`): a 16 GB card would get smaller pages. The record says which.

use std::panic::{AssertUnwindSafe, catch_unwind};

use highwater::conform::{
    DeviceMemory, MeasuredDeath, MeasuredStep, NetworkRecord, RerunRecord, TunedProblem,
};
use highwater::pool::PoolUsage;
use highwater::recipe::Recipe;
use highwater::trace::Phase;

use crate::SOFT_CAP;
use crate::counters::SituCounts;
use crate::gpu::{Cube, CudaDevice, CudaRuntime};
use crate::network::{WithStep, with_step};
use crate::train::{
    PoolProbe, TrainBackend, Trainer, TrainingStep, WaveStep, client_usage, panic_message,
    payload_text,
};

/// burn-cuda's default backend: `Fusion<CubeBackend<CudaRuntime, f32, i32, u8>>`.
pub type Fused = burn_cuda::Cuda<f32, i32>;
/// [`Cube`] in bfloat16.
pub type CubeBf16 = burn_cubecl::CubeBackend<CudaRuntime, burn::tensor::bf16, i32, u8>;
/// [`Fused`] in bfloat16.
pub type FusedBf16 = burn_cuda::Cuda<burn::tensor::bf16, i32>;
/// cubecl-cuda with its server traced: `NetworkPlan::trace_server`.
pub type TracedCuda = dryrun::traced::Traced<CudaRuntime>;
type TracedCube = burn_cubecl::CubeBackend<TracedCuda, f32, i32, u8>;
type TracedFused = burn_fusion::Fusion<TracedCube>;
type TracedCubeBf16 = burn_cubecl::CubeBackend<TracedCuda, burn::tensor::bf16, i32, u8>;
type TracedFusedBf16 = burn_fusion::Fusion<TracedCubeBf16>;

/// What to run.
#[derive(Debug, Clone)]
pub struct RerunPlan {
    /// As given on the command line.
    pub recipe_path: String,
    /// The file's text.
    pub recipe_toml: String,
    /// Parsed, overrides applied (activation, checkpointing, backend).
    pub recipe: Recipe,
    /// Training steps.
    pub steps: u64,
    /// The seed of the weights and the batches.
    pub seed: u64,
    /// Emulate a card that leaves the process this many bytes.
    pub cap: Option<u64>,
    /// Read the loss back every this many steps (a trainer's log line).
    pub log_every: u64,
}

/// Follows a rerun as it goes (a progress bar, log lines).
pub trait Observer {
    /// The device is up, its memory measured (and the cap's ballast held).
    fn started(&mut self, _device: &DeviceMemory) {}
    /// A step completed; `counters` is the path counters' log field.
    fn step(&mut self, _step: &MeasuredStep, _counters: &str) {}
    /// The run died.
    fn died(&mut self, _death: &MeasuredDeath) {}
}

/// Why a rerun could not start.
#[derive(Debug, thiserror::Error)]
pub enum RerunError {
    /// The driver refused what the rerun needs before training (its message).
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// The ballast that emulates a smaller card does not fit.
    #[error(
        "--cap {cap} cannot be emulated: holding back total - cap needs more than the {free} \
         bytes free of {total}"
    )]
    Cap {
        /// The card asked for, in bytes.
        cap: u64,
        /// Free on the device.
        free: u64,
        /// The device's total.
        total: u64,
    },
}

/// Runs `plan` on GPU 0 and returns its record, headed by `provenance`.
pub fn rerun(
    plan: &RerunPlan,
    provenance: highwater::conform::Provenance,
    observer: &mut dyn Observer,
) -> Result<RerunRecord, RerunError> {
    let r = &plan.recipe;
    fn wave<B: TrainBackend<Device = CudaDevice>>(
        plan: &RerunPlan,
        observer: &mut dyn Observer,
    ) -> Result<Outcome, RerunError> {
        let run = Run {
            cap: plan.cap,
            steps: plan.steps,
            seed: plan.seed,
            log_every: plan.log_every,
        };
        run_on::<B, CudaRuntime, _>(&run, observer, |device| {
            WaveStep::new(&plan.recipe, plan.seed, SOFT_CAP, device)
        })
    }
    let run = on_backend!(r.backend, r.checkpointing, Cube, Fused, wave);
    let (device, steps, died) = run(plan, observer)?;
    Ok(RerunRecord {
        provenance,
        recipe_path: plan.recipe_path.clone(),
        recipe_toml: plan.recipe_toml.clone(),
        activation: r.activation,
        checkpointing: r.checkpointing,
        backend: r.backend,
        steps_asked: plan.steps,
        seed: plan.seed,
        device,
        steps,
        died,
        counters: SituCounts::now().to_string(),
    })
}

/// A network to train on the GPU.
#[derive(Debug, Clone)]
pub struct NetworkPlan {
    /// As given on the command line.
    pub model_path: String,
    /// The file's text.
    pub model_toml: String,
    /// Parsed, overrides applied (batch, backend, checkpointing, precision, steps, seed).
    pub network: highwater::network::Network,
    /// Emulate a card that leaves the process this many bytes.
    pub cap: Option<u64>,
    /// Read the loss back every this many steps (a trainer's log line).
    pub log_every: u64,
    /// Train over [`TracedCuda`]: [`take_server_trace`] then gives every reservation in order.
    pub trace_server: bool,
}

/// Every reservation the traced server met (`NetworkPlan::trace_server`), in order, with the
/// pool as it saw it just before.
pub fn take_server_trace() -> Vec<dryrun::traced::Reservation> {
    dryrun::traced::take_trace(&CudaDevice::default())
}

/// Trains `plan`'s network on GPU 0 and returns its record, headed by `provenance`, with the
/// problems CubeCL autotuned during the run (read from its cache folder before and after).
pub fn rerun_network(
    plan: &NetworkPlan,
    provenance: highwater::conform::Provenance,
    observer: &mut dyn Observer,
) -> Result<NetworkRecord, RerunError> {
    let n = &plan.network;
    /// On runtime `R` (whose client the probe reads).
    struct Gpu<'a, R> {
        run: Run,
        observer: &'a mut dyn Observer,
        _r: std::marker::PhantomData<R>,
    }
    impl<B, R> WithStep<B> for Gpu<'_, R>
    where
        B: burn::tensor::backend::AutodiffBackend<Device = CudaDevice>,
        R: cubecl::Runtime<Device = CudaDevice>,
    {
        type Output = Result<Outcome, RerunError>;
        fn train<S: TrainingStep<B>>(self, build: impl FnOnce(&CudaDevice) -> S) -> Self::Output {
            run_on::<B, R, _>(&self.run, self.observer, build)
        }
    }
    fn train_on<B, R>(
        plan: &NetworkPlan,
        observer: &mut dyn Observer,
    ) -> Result<Outcome, RerunError>
    where
        B: burn::tensor::backend::AutodiffBackend<Device = CudaDevice>,
        R: cubecl::Runtime<Device = CudaDevice>,
    {
        let run = Run {
            cap: plan.cap,
            steps: plan.network.steps,
            seed: plan.network.seed,
            log_every: plan.log_every,
        };
        let gpu = Gpu::<R> {
            run,
            observer,
            _r: std::marker::PhantomData,
        };
        with_step::<B, _>(&plan.network, gpu)
    }
    fn train<B>(plan: &NetworkPlan, observer: &mut dyn Observer) -> Result<Outcome, RerunError>
    where
        B: burn::tensor::backend::AutodiffBackend<Device = CudaDevice>,
    {
        train_on::<B, CudaRuntime>(plan, observer)
    }
    fn traced<B>(plan: &NetworkPlan, observer: &mut dyn Observer) -> Result<Outcome, RerunError>
    where
        B: burn::tensor::backend::AutodiffBackend<Device = CudaDevice>,
    {
        train_on::<B, TracedCuda>(plan, observer)
    }
    let run = if plan.trace_server {
        on_precision!(
            n.precision,
            n.backend,
            n.checkpointing,
            (TracedCube, TracedFused),
            (TracedCubeBf16, TracedFusedBf16),
            traced
        )
    } else {
        on_precision!(
            n.precision,
            n.backend,
            n.checkpointing,
            (Cube, Fused),
            (CubeBf16, FusedBf16),
            train
        )
    };
    let before = tuned_so_far();
    let (device, steps, died) = run(plan, observer)?;
    let tuned = tuned_so_far()
        .into_iter()
        .filter(|t| !before.contains(t))
        .collect();
    Ok(NetworkRecord {
        provenance,
        model_path: plan.model_path.clone(),
        model_toml: plan.model_toml.clone(),
        backend: n.backend,
        checkpointing: n.checkpointing,
        precision: n.precision,
        batch: n.batch,
        steps_asked: n.steps,
        seed: n.seed,
        device,
        steps,
        died,
        tuned,
    })
}

/// Every problem in CubeCL's autotune cache for GPU 0 now (none when it has no folder yet).
fn tuned_so_far() -> Vec<TunedProblem> {
    dryrun::Atlas::read(&dryrun::autotune::cuda_cache_dir(0))
        .map(|atlas| atlas.entries)
        .unwrap_or_default()
        .into_iter()
        .map(|t| TunedProblem {
            key: t.key.to_string(),
            kernel: t.kernel().to_string(),
            tuner: t.tuner,
        })
        .collect()
}

type Outcome = (DeviceMemory, Vec<MeasuredStep>, Option<MeasuredDeath>);

/// How long to train, on how much of the card.
struct Run {
    cap: Option<u64>,
    steps: u64,
    seed: u64,
    log_every: u64,
}

/// Trains the step `build` makes on GPU 0 (the backend seeded first), reading the pool after
/// every phase, until `run.steps` or the first refused page.
fn run_on<B, R, S>(
    run: &Run,
    observer: &mut dyn Observer,
    build: impl FnOnce(&CudaDevice) -> S,
) -> Result<Outcome, RerunError>
where
    B: burn::tensor::backend::AutodiffBackend<Device = CudaDevice>,
    R: cubecl::Runtime<Device = CudaDevice>,
    S: TrainingStep<B>,
{
    watch_allocation_failures();
    let device = CudaDevice::default();
    let mut probe = CudaProbe::<B, R> {
        device: device.clone(),
        free_at_start: None,
        _b: std::marker::PhantomData,
    };
    // Starts the CubeCL server (its CUDA context, streams) without reserving a page.
    probe
        .usage()
        .map_err(|e| RerunError::Driver(format!("first pool read: {e}")))?;
    let (memory, _ballast) = hold_back(run.cap)?;
    probe.free_at_start = Some(memory.pool_capacity);
    observer.started(&memory);
    let mut steps = vec![];
    let created = catch_unwind(AssertUnwindSafe(|| {
        B::seed(&device, run.seed);
        Trainer::<B, S>::new(build(&device))
    }));
    let mut trainer = match created {
        Ok(t) => t,
        Err(panic) => {
            let death = MeasuredDeath {
                step: 0,
                phase: Phase::Init,
                message: panic_message(&panic),
                failed_pages: vec![],
            };
            observer.died(&death);
            return Ok((memory, steps, Some(death)));
        }
    };
    let mut died = None;
    for step in 1..=run.steps {
        let read_loss = step.is_multiple_of(run.log_every) || step == run.steps;
        let result = catch_unwind(AssertUnwindSafe(|| trainer.step(&probe, read_loss)));
        let mut outcome = result.unwrap_or_else(|panic| {
            Err(MeasuredDeath {
                step,
                phase: trainer.phase(),
                message: panic_message(&panic),
                failed_pages: vec![],
            })
        });
        // A failed reserve does not stop burn: cubecl-cuda 0.10 panics on its server thread,
        // the panic is caught there and the tensor is left without memory; syncs still succeed.
        // A trainer that reads its loss would die at that read (the incident's "loss is not a
        // scalar"): the run ends at the first step with a failed reserve.
        let failed = ALLOCATION_FAILURES.drain();
        let pages: Vec<u64> = failed.iter().filter_map(|(_, m)| page_of(m)).collect();
        match (&mut outcome, failed.first()) {
            (Ok(_), Some((phase, first))) => {
                outcome = Err(MeasuredDeath {
                    step,
                    phase: *phase,
                    message: first.clone(),
                    failed_pages: pages,
                });
            }
            // The step itself failed (a panic downstream of a refused page, e.g. autotune).
            (Err(death), _) => death.failed_pages = pages,
            (Ok(_), None) => {}
        }
        match outcome {
            Ok(m) => {
                observer.step(&m, &SituCounts::now().to_string());
                steps.push(m);
            }
            Err(d) => {
                observer.died(&d);
                died = Some(d);
                break;
            }
        }
    }
    Ok((memory, steps, died))
}

/// Failed device allocations reported by panics on cubecl's server thread, with the phase the
/// trainer was in.
struct AllocationFailures(std::sync::Mutex<Vec<(Phase, String)>>);

static ALLOCATION_FAILURES: AllocationFailures = AllocationFailures(std::sync::Mutex::new(vec![]));
/// The phase the trainer is in, for failures reported from cubecl's server thread.
static PHASE: std::sync::Mutex<Phase> = std::sync::Mutex::new(Phase::Init);

impl AllocationFailures {
    fn drain(&self) -> Vec<(Phase, String)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// cubecl-cuda 0.10's message for a refused page (compute/server.rs:124).
const REFUSED: &str = "can't allocate buffer of size: ";

fn page_of(message: &str) -> Option<u64> {
    let tail = &message[message.find(REFUSED)? + REFUSED.len()..];
    tail.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Keeps the default panic output (the log shows cubecl's own messages) and notes every
/// refused page.
fn watch_allocation_failures() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = payload_text(info.payload()).unwrap_or_default();
            if message.contains(REFUSED) {
                let phase = *PHASE.lock().unwrap_or_else(|e| e.into_inner());
                ALLOCATION_FAILURES
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((phase, message));
            }
            default(info);
        }));
    });
}

/// The pool of backend `B` on one CUDA device.
struct CudaProbe<B, R> {
    device: CudaDevice,
    /// The device's free memory once the ballast is held: what every pool may take.
    free_at_start: Option<u64>,
    _b: std::marker::PhantomData<(B, R)>,
}

impl<B, R> PoolProbe for CudaProbe<B, R>
where
    B: burn::tensor::backend::Backend<Device = CudaDevice>,
    R: cubecl::Runtime<Device = CudaDevice>,
{
    fn sync(&self) -> Result<(), String> {
        B::sync(&self.device).map_err(|e| e.to_string())
    }

    fn phase(&self, phase: Phase) {
        *PHASE.lock().unwrap_or_else(|e| e.into_inner()) = phase;
    }

    fn usage(&self) -> Result<Option<PoolUsage>, String> {
        client_usage::<R>(&self.device)
    }

    /// What the driver has handed out since the start: every stream's pages (the primary
    /// context is bound to this thread by `hold_back`).
    fn device_reserved(&self) -> Option<u64> {
        let (free, _) = cudarc::driver::result::mem_get_info().ok()?;
        Some(self.free_at_start?.saturating_sub(free as u64))
    }
}

/// Memory taken from the driver outside the pool, freed on drop.
struct Ballast(Option<cudarc::driver::sys::CUdeviceptr>);

impl Drop for Ballast {
    fn drop(&mut self) {
        if let Some(ptr) = self.0.take() {
            // SAFETY: `ptr` came from `malloc_sync` in the same (primary) context and is freed
            // once.
            let _ = unsafe { cudarc::driver::result::free_sync(ptr) };
        }
    }
}

/// Reads the device's memory and, under a cap, holds back `total - cap` bytes.
fn hold_back(cap: Option<u64>) -> Result<(DeviceMemory, Ballast), RerunError> {
    let driver = |e: cudarc::driver::DriverError| RerunError::Driver(e.to_string());
    // The primary context: the one cubecl-cuda retained, so the ballast shares its books.
    let ctx = cudarc::driver::CudaContext::new(0).map_err(driver)?;
    ctx.bind_to_thread().map_err(driver)?;
    let (free, total) = cudarc::driver::result::mem_get_info().map_err(driver)?;
    let (free, total) = (free as u64, total as u64);
    let ballast_bytes = match cap {
        None => 0,
        Some(cap) if cap < total && total - cap < free => total - cap,
        Some(cap) => return Err(RerunError::Cap { cap, free, total }),
    };
    let ballast = if ballast_bytes > 0 {
        // SAFETY: a plain device allocation, freed by `Ballast::drop`.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(ballast_bytes as usize) }
            .map_err(driver)?;
        Ballast(Some(ptr))
    } else {
        Ballast(None)
    };
    let (after, _) = cudarc::driver::result::mem_get_info().map_err(driver)?;
    Ok((
        DeviceMemory {
            total_bytes: total,
            free_at_start: free,
            cap_bytes: cap,
            ballast_bytes,
            pool_capacity: after as u64,
        },
        ballast,
    ))
}
