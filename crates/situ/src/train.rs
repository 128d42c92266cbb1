//! Training steps, run for real and measured: what `highwater rerun` runs on a GPU, what the
//! dry run runs on CPU, and what the CPU tests run on burn-ndarray.
//!
//! [`Trainer`] runs any [`TrainingStep`] (forward, backward, optimizer) and reads the pool after
//! each phase. [`WaveStep`] is the recipe's step, the one `highwater::trace` models, part for
//! part, so that the simulator can be held to it (`crate::network` has others, modelled by
//! nobody):
//! - **weights**: every expert's `gate_up` and `down`, plus the rest of the model's parameters
//!   as one tensor and its persistent buffers (`[rest_of_model]`), created under burn's
//!   `memory_persistent_allocations` as a model load does;
//! - **forward**: a fresh `[N, d_model]` batch, tracked as the embedding output it stands for
//!   (its gradient is dropped after backward); `max_iter` times, the rest of the model's
//!   activations for that iteration (a stand-in op, [`rest_of_model`], that holds
//!   `rest_of_model.live_bytes` in `tensor_bytes` pieces until its backward), then the
//!   `n_experts` residual expert calls; the loss is the mean of the output (plus the mean of
//!   the rest's parameters, so that they get a gradient): a loss head with no activations of
//!   its own, so every byte measured belongs to the parts above;
//! - **backward**: `loss.backward()`; after it, a failed page shows only in cubecl's log (its
//!   server thread swallows the panic), which `crate::rerun` watches for;
//! - **optimizer**: burn's own Adam (`burn::optim::Adam` through `SimpleOptimizer`, as burn's
//!   `OptimizerAdaptor` drives it), one parameter at a time, each gradient dropped after its
//!   update.
//!
//! - **workload** (the recipe's `[workload]`, a fixed-shape step when absent): each step's
//!   sequence length from a seeded schedule, batches made by a loader thread replaced every
//!   epoch, an evaluation pass and a `memory_cleanup` between steps.
//!
//! After each phase (or, under `SyncMode::Step`, at the end of the step) the device is
//! synchronized and the pool read through a [`PoolProbe`].

use std::time::Instant;

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::optim::{Adam, AdamConfig, AdamState, SimpleOptimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Distribution, ElementConversion, Shape, Tensor, TensorPrimitive};
use highwater::conform::{MeasuredDeath, MeasuredStep};
use highwater::pool::PoolUsage;
use highwater::recipe::{Recipe, SyncMode};
use highwater::trace::Phase;

use crate::expert::{Expert, ExpertStack};
use crate::fused::SituBackend;

/// Learning rate of the rerun's Adam (what it is does not change a byte).
pub const LEARNING_RATE: f64 = 1e-4;

/// Synchronizes the device and reads its memory pool.
pub trait PoolProbe {
    /// Waits for every queued operation; an error is the backend's, verbatim.
    fn sync(&self) -> Result<(), String>;
    /// The pool's figures, `None` on a backend without a pool (burn-ndarray).
    fn usage(&self) -> Result<Option<PoolUsage>, String>;
    /// The step enters `phase` (so that an error reported asynchronously can be placed).
    fn phase(&self, _phase: Phase) {}
    /// Bytes every stream's pool holds from the device, where the probe can tell.
    fn device_reserved(&self) -> Option<u64> {
        None
    }
}

/// The pool a CubeCL runtime's client reads on `device`, for the calling thread's stream.
#[cfg(feature = "cube")]
pub(crate) fn client_usage<R: cubecl::Runtime>(
    device: &R::Device,
) -> Result<Option<PoolUsage>, String> {
    let u = R::client(device)
        .memory_usage()
        .map_err(|e| format!("{e:?}"))?;
    Ok(Some(PoolUsage {
        allocs: u.number_allocs,
        in_use: u.bytes_in_use,
        padding: u.bytes_padding,
        reserved: u.bytes_reserved,
    }))
}

/// A caught panic's message (`panic!` with a literal or with a format).
#[cfg(feature = "dry")]
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    payload_text(panic.as_ref()).unwrap_or_else(|| "panic without a message".into())
}

/// A panic payload's text, if it has one.
#[cfg(feature = "dry")]
pub(crate) fn payload_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

/// For backends without a pool: syncs nothing, reads nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPool;

impl PoolProbe for NoPool {
    fn sync(&self) -> Result<(), String> {
        Ok(())
    }
    fn usage(&self) -> Result<Option<PoolUsage>, String> {
        Ok(None)
    }
}

/// A backend the trainer can run: autodiff with the fused op, and the rest-of-model stand-in.
pub trait TrainBackend: AutodiffBackend + SituBackend + RestOfModelBackend {}
impl<B: AutodiffBackend + SituBackend + RestOfModelBackend> TrainBackend for B {}

/// The model: the expert stack and the rest of the model's parameters and buffers.
#[derive(Debug)]
pub struct Model<B: Backend> {
    /// The experts, modelled op by op.
    pub stack: ExpertStack<B>,
    /// `[rest_of_model.params]`, trained; `None` when the recipe has none.
    pub rest_params: Option<Tensor<B, 1>>,
    /// `[rest_of_model.persistent_bytes / 4]`, held for the run (an embedding table, caches).
    pub persistent: Option<Tensor<B, 1>>,
}

/// One training step of a model, phase by phase: what [`Trainer`] runs and measures between
/// the phases, on any backend. The wave stack's step is [`WaveStep`]; a model of one's own is
/// any type with a forward that returns the loss and an optimizer that consumes the gradients.
pub trait TrainingStep<B: AutodiffBackend> {
    /// The forward pass over a fresh batch; returns the loss.
    fn forward(&mut self) -> Tensor<B, 1>;
    /// The backward pass: the gradients the optimizer will consume.
    fn backward(&mut self, loss: &Tensor<B, 1>) -> B::Gradients {
        loss.backward()
    }
    /// The optimizer's update; the gradients are gone when it returns.
    fn optimize(&mut self, grads: B::Gradients);
    /// What the training loop does between steps (an evaluation pass, a cleanup), after step
    /// `step`; whether it did anything (the device is then synchronized and the pool read again).
    fn between_steps(&mut self, _step: u64) -> bool {
        false
    }
    /// The parameters the model trains, as burn counts them, where the step knows its model.
    fn parameters(&self) -> Option<usize> {
        None
    }
    /// Whether the device is synchronized after every phase, or only at the end of the step.
    fn sync_mode(&self) -> SyncMode {
        SyncMode::Phase
    }
}

/// Runs a [`TrainingStep`] step by step on one device, synchronizing after each phase and
/// reading the pool through a [`PoolProbe`].
pub struct Trainer<B: AutodiffBackend, S> {
    program: S,
    step: u64,
    /// The phase running (or that failed).
    phase: Phase,
    _backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend, S: TrainingStep<B>> Trainer<B, S> {
    /// A trainer before its first step.
    pub fn new(program: S) -> Self {
        Trainer {
            program,
            step: 0,
            phase: Phase::Init,
            _backend: std::marker::PhantomData,
        }
    }

    /// The step it trains (its model, its optimizer state).
    pub fn program(&self) -> &S {
        &self.program
    }

    /// The phase the last step was in when it returned (or panicked).
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// One step. `read_loss`: read the loss back to the host, as a trainer does when it logs.
    pub fn step(
        &mut self,
        probe: &dyn PoolProbe,
        read_loss: bool,
    ) -> Result<MeasuredStep, MeasuredDeath> {
        self.step += 1;
        let step = self.step;
        let died = |phase: Phase| {
            move |message: String| MeasuredDeath {
                step,
                phase,
                message,
                failed_pages: vec![],
            }
        };
        let every_phase = self.program.sync_mode() == SyncMode::Phase;
        // Under `SyncMode::Step` the host reads the pool as it stands, the device maybe behind.
        let in_use = |phase: Phase, sync: bool| -> Result<(u64, u64), MeasuredDeath> {
            if sync {
                probe.sync().map_err(died(phase))?;
            }
            let u = probe.usage().map_err(died(phase))?.unwrap_or_default();
            Ok((u.in_use, u.reserved))
        };
        let start = Instant::now();

        self.phase = Phase::Forward;
        probe.phase(self.phase);
        let loss = self.program.forward();
        let (in_use_after_forward, _) = in_use(Phase::Forward, every_phase)?;

        self.phase = Phase::Backward;
        probe.phase(self.phase);
        let grads = self.program.backward(&loss);
        let (in_use_after_backward, _) = in_use(Phase::Backward, every_phase)?;
        let loss = read_loss.then(|| loss.into_scalar().elem::<f64>());

        self.phase = Phase::Optimizer;
        probe.phase(self.phase);
        self.program.optimize(grads);
        let (_, mut reserved) = in_use(Phase::Optimizer, true)?;

        self.phase = Phase::Eval;
        probe.phase(self.phase);
        if self.program.between_steps(step) {
            reserved = in_use(Phase::Eval, true)?.1;
        }
        Ok(MeasuredStep {
            step,
            in_use_after_forward,
            in_use_after_backward,
            reserved,
            step_ms: start.elapsed().as_secs_f64() * 1e3,
            loss,
            device_reserved: probe.device_reserved(),
        })
    }
}

/// The wave's training step, built from a recipe: the step `highwater::trace` models.
pub struct WaveStep<B: TrainBackend> {
    recipe: Recipe,
    device: B::Device,
    model: Model<B>,
    adam: Adam,
    expert_states: Vec<Option<AdamState<B::InnerBackend, 2>>>,
    rest_state: Option<AdamState<B::InnerBackend, 1>>,
    /// The step's batch, from its forward to its backward.
    batch: Option<Tensor<B, 2>>,
    seed: u64,
    /// Steps begun.
    step: u64,
    /// The loader thread of this epoch, under `workload.loader_every`.
    loader: Option<Loader<B>>,
}

impl<B: TrainBackend> WaveStep<B> {
    /// Seeds the backend, creates the weights in the persistent pool.
    pub fn new(recipe: &Recipe, seed: u64, cap: f32, device: &B::Device) -> Self {
        B::seed(device, seed);
        let model = B::memory_persistent_allocations(device, (), |()| {
            let stack = ExpertStack::from_recipe(recipe, seed, cap, device);
            let rest_params = (recipe.rest.params > 0).then(|| {
                Tensor::<B, 1>::zeros([recipe.rest.params as usize], device).require_grad()
            });
            let persistent = (recipe.rest.persistent_bytes > 0).then(|| {
                let elems = recipe.rest.persistent_bytes / recipe.dtype.size();
                Tensor::<B, 1>::zeros([elems as usize], device)
            });
            Model {
                stack,
                rest_params,
                persistent,
            }
        });
        B::sync(device).expect("the weights are on the device");
        WaveStep {
            recipe: recipe.clone(),
            device: device.clone(),
            expert_states: vec![None; 2 * model.stack.experts.len()],
            model,
            adam: AdamConfig::new().build(),
            rest_state: None,
            batch: None,
            seed,
            step: 0,
            loader: None,
        }
    }

    /// The model as trained so far.
    pub fn model(&self) -> &Model<B> {
        &self.model
    }

    /// A fresh `[batch × seq_len, d_model]` batch for the step about to run (its sequence length
    /// the workload's), made on the loader thread if there is one. Tracked, as the embedding
    /// output it stands for is: the rest of the model's first activations are kept for backward
    /// only behind a tracked input.
    fn batch(&mut self) -> Tensor<B, 2> {
        let r = &self.recipe;
        let shape = [
            (r.batch * r.seq_len_at(self.seed, self.step)) as usize,
            r.d_model as usize,
        ];
        let every = r.workload.loader_every;
        if every == 0 {
            return Tensor::<B, 2>::random(shape, Distribution::Normal(0.0, 1.0), &self.device)
                .require_grad();
        }
        if (self.step - 1).is_multiple_of(every) {
            // A new epoch: the last epoch's loader thread ends, a new one starts.
            self.loader = Some(Loader::spawn(self.device.clone()));
        }
        self.loader
            .as_ref()
            .expect("a loader from the epoch's first step")
            .batch(shape)
            .require_grad()
    }

    /// The forward pass as `highwater::trace` models it, over `batch`'s positions; returns the
    /// loss.
    fn wave_forward(&self, batch: Tensor<B, 2>) -> Tensor<B, 1> {
        self.forward_with(&self.model.stack, batch)
    }

    /// The forward pass over `stack`'s weights (the model's, or detached for an evaluation).
    fn forward_with(&self, stack: &ExpertStack<B>, batch: Tensor<B, 2>) -> Tensor<B, 1> {
        let r = &self.recipe;
        let positions = batch.dims()[0] as u64;
        let mut x = batch;
        let rest_count = r.rest.live_bytes / r.rest.tensor_bytes;
        // One activation of the rest of the model per piece, as wide as this batch.
        let piece = (r.rest.tensor_bytes / r.dtype.size() * positions / r.tokens()) as usize;
        for it in 0..stack.max_iter as u64 {
            // Spread as the trace spreads them: the remainder goes to the first iterations.
            let count = rest_count / r.max_iter + u64::from(it < rest_count % r.max_iter);
            if count > 0 {
                x = rest_of_model(x, count as usize, piece);
            }
            for e in &stack.experts {
                x = x.clone() + e.forward(x, stack.activation, stack.cap);
            }
        }
        let loss = x.mean();
        match &self.model.rest_params {
            Some(p) => loss + p.clone().mean(),
            None => loss,
        }
    }

    /// Adam on every parameter, one at a time, each gradient dropped after its update.
    fn update(&mut self, grads: &mut B::Gradients) {
        let experts = std::mem::take(&mut self.model.stack.experts);
        for (i, e) in experts.into_iter().enumerate() {
            let w_gate_up = self.adam_step_expert(2 * i, e.w_gate_up, grads);
            let w_down = self.adam_step_expert(2 * i + 1, e.w_down, grads);
            self.model.stack.experts.push(Expert { w_gate_up, w_down });
        }
        if let Some(p) = self.model.rest_params.take() {
            let state = self.rest_state.take();
            let (p, state) = adam_step(&self.adam, p, grads, state);
            self.rest_state = state;
            self.model.rest_params = Some(p);
        }
    }

    fn adam_step_expert(
        &mut self,
        k: usize,
        param: Tensor<B, 2>,
        grads: &mut B::Gradients,
    ) -> Tensor<B, 2> {
        let state = self.expert_states[k].take();
        let (param, state) = adam_step(&self.adam, param, grads, state);
        self.expert_states[k] = state;
        param
    }
}

impl<B: TrainBackend> TrainingStep<B> for WaveStep<B> {
    fn forward(&mut self) -> Tensor<B, 1> {
        self.step += 1;
        let batch = self.batch();
        self.batch = Some(batch.clone());
        self.wave_forward(batch)
    }

    fn backward(&mut self, loss: &Tensor<B, 1>) -> B::Gradients {
        let mut grads = loss.backward();
        // The batch's gradient goes upstream and is gone, as an embedding's backward would
        // consume it; only the parameters' gradients wait for the optimizer.
        if let Some(batch) = self.batch.take() {
            drop(batch.grad_remove(&mut grads));
        }
        grads
    }

    fn optimize(&mut self, mut grads: B::Gradients) {
        self.update(&mut grads);
    }

    fn between_steps(&mut self, step: u64) -> bool {
        let w = self.recipe.workload;
        let evaluate = w.eval_every > 0 && step.is_multiple_of(w.eval_every);
        let cleanup = w.cleanup_every > 0 && step.is_multiple_of(w.cleanup_every);
        if evaluate {
            // Forward only, on its own batch shape, with the weights detached (burn's `valid()`):
            // nothing is tracked, so every activation goes as soon as it is consumed. The loss
            // is read, as an evaluation reports it.
            let mut stack = self.model.stack.clone();
            for e in &mut stack.experts {
                e.w_gate_up = e.w_gate_up.clone().detach();
                e.w_down = e.w_down.clone().detach();
            }
            let shape = [
                (w.eval_batch * w.eval_seq_len) as usize,
                self.recipe.d_model as usize,
            ];
            let batch = Tensor::<B, 2>::random(shape, Distribution::Normal(0.0, 1.0), &self.device);
            let _evaluated = self.forward_with(&stack, batch).into_scalar();
        }
        if cleanup {
            // Every page that is wholly free goes back to the driver; the queue drains first,
            // since burn-fusion does not before a cleanup.
            B::sync(&self.device).expect("the device syncs before a cleanup");
            B::memory_cleanup(&self.device);
        }
        evaluate || cleanup
    }

    fn sync_mode(&self) -> SyncMode {
        self.recipe.workload.sync
    }
}

/// A data loader's worker thread for one epoch: it makes the batches on the device, as burn's
/// multi-threaded `DataLoader` does in the threads it spawns for every pass over the data. In
/// CubeCL 0.10 each new thread is a new stream with a pool of its own, which lives on after the
/// thread.
struct Loader<B: Backend> {
    shapes: Option<std::sync::mpsc::Sender<[usize; 2]>>,
    batches: std::sync::mpsc::Receiver<Tensor<B, 2>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<B: Backend> Loader<B> {
    fn spawn(device: B::Device) -> Self {
        let (shapes, requests) = std::sync::mpsc::channel::<[usize; 2]>();
        let (send, batches) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            for shape in requests {
                let batch = Tensor::<B, 2>::random(shape, Distribution::Normal(0.0, 1.0), &device);
                if send.send(batch).is_err() {
                    break;
                }
            }
        });
        Loader {
            shapes: Some(shapes),
            batches,
            thread: Some(thread),
        }
    }

    fn batch(&self, shape: [usize; 2]) -> Tensor<B, 2> {
        let shapes = self
            .shapes
            .as_ref()
            .expect("a loader is used before it is dropped");
        shapes.send(shape).expect("the loader thread is running");
        self.batches
            .recv()
            .expect("the loader thread made the batch")
    }
}

impl<B: Backend> Drop for Loader<B> {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.shapes = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What burn's `OptimizerAdaptor` does for one parameter: take its gradient out of the
/// container, step the inner tensor, track the result again.
fn adam_step<B: AutodiffBackend, const D: usize>(
    adam: &Adam,
    param: Tensor<B, D>,
    grads: &mut B::Gradients,
    state: Option<AdamState<B::InnerBackend, D>>,
) -> (Tensor<B, D>, Option<AdamState<B::InnerBackend, D>>) {
    let Some(grad) = param.grad_remove(grads) else {
        return (param, state);
    };
    let (inner, state) = adam.step(LEARNING_RATE, param.inner(), grad, state);
    (Tensor::from_inner(inner).require_grad(), state)
}

/// The rest of the model, as far as memory goes: `count` activations of `piece` elements that
/// it keeps from its forward to its backward. Identity on `x`; in backward each activation gets
/// a gradient of its size that lives only as long as the activation's own backward, then both
/// go (the trace's `alloc g; free g; free a`).
pub fn rest_of_model<B: RestOfModelBackend>(
    x: Tensor<B, 2>,
    count: usize,
    piece: usize,
) -> Tensor<B, 2> {
    let out = B::rest_of_model(x.into_primitive().tensor(), count, piece);
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// A backend on which the rest-of-model stand-in can run.
pub trait RestOfModelBackend: Backend {
    /// Allocates the activations and returns `x` (as a new autodiff node when tracked).
    fn rest_of_model(x: FloatTensor<Self>, count: usize, piece: usize) -> FloatTensor<Self>;
}

#[derive(Debug)]
struct RestBackward;

impl<B: Backend> Backward<B, 1> for RestBackward {
    /// The held activations.
    type State = Vec<FloatTensor<B>>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let device = B::float_device(&grad);
        for held in ops.state.into_iter().rev() {
            let shape = burn::tensor::TensorMetadata::shape(&held);
            let dtype = burn::tensor::TensorMetadata::dtype(&held);
            drop(B::float_zeros(shape, &device, dtype.into()));
            drop(held);
        }
        if let Some(node) = parent {
            grads.register::<B>(node.id, grad);
        }
    }
}

impl<B: Backend, C: CheckpointStrategy> RestOfModelBackend for Autodiff<B, C> {
    fn rest_of_model(x: FloatTensor<Self>, count: usize, piece: usize) -> FloatTensor<Self> {
        // Compute-bound: Balanced keeps the state rather than re-running the op, as the
        // activations it stands for are kept by the layers that made them.
        match RestBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let device = B::float_device(&x.primitive);
                let dtype = burn::tensor::TensorMetadata::dtype(&x.primitive);
                let held = (0..count)
                    .map(|_| B::float_zeros(Shape::new([piece]), &device, dtype.into()))
                    .collect();
                prep.finish(held, x.primitive)
            }
            OpsKind::UnTracked(prep) => prep.finish(x.primitive),
        }
    }
}
