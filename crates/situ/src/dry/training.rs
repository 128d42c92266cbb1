//! The training loop on the dry device ([`dry_train`]): the trainer run step by step under a
//! probe that reads the pool and files each refused page under its step and phase, and the
//! death a GPU run would have met. Separate from the entry points that pick a backend for it.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

use burn::tensor::backend::AutodiffBackend;
use dryrun::{AutotuneError, CardProfile, DryDevice, DryRuntime, OnRefusal, OutOfMemory};
use highwater::conform::{MeasuredDeath, MeasuredStep};
use highwater::pool::PoolUsage;
use highwater::trace::Phase;

use super::{DryOutcome, DryPlan, Refusal};
use crate::network::WithStep;
use crate::train::{PoolProbe, Trainer, TrainingStep, client_usage, panic_message};

/// A network's training, dry, on runtime `R` (whose client the probe reads).
pub(super) struct Dry<'a, R> {
    plan: &'a DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&'a Path>,
    _r: std::marker::PhantomData<R>,
}

impl<'a, R> Dry<'a, R> {
    pub(super) fn new(
        plan: &'a DryPlan,
        card: Arc<CardProfile>,
        autotune: Option<&'a Path>,
    ) -> Self {
        Self {
            plan,
            card,
            autotune,
            _r: std::marker::PhantomData,
        }
    }
}

impl<B, R> WithStep<B> for Dry<'_, R>
where
    B: AutodiffBackend<Device = DryDevice>,
    R: cubecl::Runtime<Device = DryDevice>,
{
    type Output = Result<DryOutcome, AutotuneError>;
    fn train<S: crate::train::TrainingStep<B>>(
        self,
        build: impl FnOnce(&DryDevice) -> S,
    ) -> Self::Output {
        dry_train_on::<B, R, _>(self.plan, self.card, self.autotune, build)
    }
}

/// Runs the training step that `build` makes, on a new dry device of `card`: the library call
/// for a model of one's own. `B` is the backend it trains on (e.g. `Autodiff<DryFusion>`, what
/// burn-cuda's default becomes here); the backend is seeded before `build` runs. A panic in
/// `build` (its weights did not fit) is a death at step 0.
pub fn dry_train<B, S>(
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
    build: impl FnOnce(&DryDevice) -> S,
) -> Result<DryOutcome, AutotuneError>
where
    B: AutodiffBackend<Device = DryDevice>,
    S: TrainingStep<B>,
{
    dry_train_on::<B, DryRuntime, S>(plan, card, autotune, build)
}

/// [`dry_train`] over runtime `R`: [`DryRuntime`], or it traced.
fn dry_train_on<B, R, S>(
    plan: &DryPlan,
    card: Arc<CardProfile>,
    autotune: Option<&Path>,
    build: impl FnOnce(&DryDevice) -> S,
) -> Result<DryOutcome, AutotuneError>
where
    B: AutodiffBackend<Device = DryDevice>,
    R: cubecl::Runtime<Device = DryDevice>,
    S: TrainingStep<B>,
{
    let device = DryDevice::scheduled(
        card,
        plan.capacity,
        plan.on_refusal,
        autotune,
        plan.tie_break,
        plan.schedule,
    )?;
    // The server's client before burn's: burn-fusion shares its runner and could not start it.
    R::client(&device);
    let memory = device.memory();
    let probe = DryProbe::<B, R>::new(device.clone());
    let mut peak_in_use = Vec::new();
    let mut pages = Vec::new();
    let outcome = |steps, peak_in_use, pages, died, probe: DryProbe<B, R>| DryOutcome {
        steps,
        peak_in_use,
        pages,
        died,
        refused: probe.refused.take(),
        peak_bytes: memory.peak(),
        autotune_misses: device.autotune_misses(),
        server_trace: dryrun::traced::take_trace(&device),
    };
    let created = catch_unwind(AssertUnwindSafe(|| {
        B::seed(&device, plan.seed);
        Trainer::<B, S>::new(build(&device))
    }));
    probe.collect();
    let mut trainer = match created {
        Ok(trainer) => trainer,
        Err(panic) => {
            let death = MeasuredDeath {
                step: 0,
                phase: Phase::Init,
                message: panic_message(&panic),
                failed_pages: probe.pages_of(0),
            };
            return Ok(outcome(vec![], peak_in_use, pages, Some(death), probe));
        }
    };
    let mut steps = Vec::new();
    let mut died = None;
    for step in 1..=plan.steps {
        probe.step.set(step);
        memory.take_peak_in_use();
        let read_loss = step.is_multiple_of(plan.log_every) || step == plan.steps;
        let measured = catch_unwind(AssertUnwindSafe(|| trainer.step(&probe, read_loss)))
            .unwrap_or_else(|panic| {
                Err(MeasuredDeath {
                    step,
                    phase: trainer.phase(),
                    message: panic_message(&panic),
                    failed_pages: vec![],
                })
            });
        probe.collect();
        let first = probe
            .refused
            .borrow()
            .iter()
            .find(|r| r.step == step)
            .map(|r| (r.phase, r.out_of_memory));
        let failed_pages = probe.pages_of(step);
        let mut completed = |m: MeasuredStep| {
            // Bytes in use only grow at a reservation; the phases' reads bound a step without one.
            let phases = m.in_use_after_forward.max(m.in_use_after_backward);
            peak_in_use.push(memory.take_peak_in_use().max(phases));
            pages.push(memory.pages());
            steps.push(m);
        };
        match (measured, first) {
            (Ok(m), None) => completed(m),
            (Ok(m), Some((phase, oom))) => {
                died.get_or_insert(MeasuredDeath {
                    step,
                    phase,
                    message: refusal_message(oom),
                    failed_pages,
                });
                if plan.on_refusal == OnRefusal::Refuse {
                    break;
                }
                // Granted pages leave the run intact: it goes on to say what it would need.
                completed(m);
            }
            (Err(mut death), _) => {
                death.failed_pages = failed_pages;
                died.get_or_insert(death);
                break;
            }
        }
    }
    Ok(outcome(steps, peak_in_use, pages, died, probe))
}

/// cubecl-cuda 0.10's message for a refused page (`IoError::BufferTooBig`), with the books.
fn refusal_message(oom: OutOfMemory) -> String {
    format!(
        "can't allocate buffer of size: {} (reserving {} bytes; the pools held {} of {} bytes)",
        oom.page, oom.requested, oom.allocated, oom.capacity
    )
}

/// Reads the dry device's pool and files its refusals under the step and phase running.
struct DryProbe<B, R> {
    device: DryDevice,
    step: Cell<u64>,
    phase: Cell<Phase>,
    refused: RefCell<Vec<Refusal>>,
    _b: std::marker::PhantomData<(B, R)>,
}

impl<B: burn::tensor::backend::Backend<Device = DryDevice>, R> DryProbe<B, R> {
    fn new(device: DryDevice) -> Self {
        Self {
            device,
            step: Cell::new(0),
            phase: Cell::new(Phase::Init),
            refused: RefCell::new(Vec::new()),
            _b: std::marker::PhantomData,
        }
    }

    /// The pages refused in `step`, in order.
    fn pages_of(&self, step: u64) -> Vec<u64> {
        let refused = self.refused.borrow();
        refused
            .iter()
            .filter(|r| r.step == step)
            .map(|r| r.out_of_memory.page)
            .collect()
    }

    /// Files what the card refused under the step and phase running. Called where the trainer
    /// has just synchronized the device (after each phase), so nothing is still queued.
    fn collect(&self) {
        let (step, phase) = (self.step.get(), self.phase.get());
        self.refused
            .borrow_mut()
            .extend(
                self.device
                    .memory()
                    .take_refused()
                    .into_iter()
                    .map(|out_of_memory| Refusal {
                        step,
                        phase,
                        out_of_memory,
                    }),
            );
    }
}

impl<B, R> PoolProbe for DryProbe<B, R>
where
    B: burn::tensor::backend::Backend<Device = DryDevice>,
    R: cubecl::Runtime<Device = DryDevice>,
{
    fn sync(&self) -> Result<(), String> {
        B::sync(&self.device).map_err(|e| e.to_string())
    }

    fn phase(&self, phase: Phase) {
        self.collect();
        self.phase.set(phase);
    }

    fn usage(&self) -> Result<Option<PoolUsage>, String> {
        client_usage::<R>(&self.device)
    }

    /// Every stream's pages on the dry card.
    fn device_reserved(&self) -> Option<u64> {
        Some(self.device.memory().allocated())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dry::dry_run;
    use dryrun::TieBreak;
    use highwater::recipe::Recipe;

    fn plan(on_refusal: OnRefusal, capacity: u64) -> (Recipe, DryPlan, Arc<CardProfile>) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let card = CardProfile::read(&root.join("repro/cards/h200.json")).unwrap();
        let text = std::fs::read_to_string(root.join("repro/recipes/wave-stack.toml")).unwrap();
        let recipe = Recipe::parse("wave-stack.toml", &text).unwrap();
        let plan = DryPlan {
            steps: 3,
            seed: 1,
            capacity,
            on_refusal,
            log_every: 3,
            tie_break: TieBreak::First,
            schedule: dryrun::Schedule::default(),
        };
        (recipe, plan, Arc::new(card))
    }

    /// The wave stack with `workload` (TOML lines), trained dry for `steps` on the whole card.
    fn with_workload(workload: &str, steps: u64) -> DryOutcome {
        let (recipe, mut plan, card) = plan(OnRefusal::Refuse, u64::MAX);
        let text = format!(
            "{}\n[workload]\n{workload}\n",
            std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/recipes/wave-stack.toml")
            )
            .unwrap()
        );
        let r = Recipe::parse("wave-stack.toml", &text).unwrap();
        assert_eq!((r.batch, r.d_model), (recipe.batch, recipe.d_model));
        plan.steps = steps;
        plan.log_every = steps;
        dry_run(&r, &plan, card, None).unwrap()
    }

    #[test]
    fn a_loader_thread_per_epoch_adds_a_pool_the_training_thread_never_sees() {
        let o = with_workload("loader_every = 2", 6);
        let own: Vec<u64> = o.steps.iter().map(|m| m.reserved).collect();
        let every: Vec<u64> = o.steps.iter().map(|m| m.device_reserved.unwrap()).collect();
        assert!(
            own[1..].windows(2).all(|w| w[0] == w[1]),
            "the training thread's pool settles: {own:?}"
        );
        // Steps 3 and 5 start an epoch: a new thread, a new stream, a new page that stays.
        assert!(every[2] > every[1] && every[4] > every[3], "{every:?}");
        assert_eq!((every[3], every[5]), (every[2], every[4]), "{every:?}");
        assert_eq!(
            every[4] - every[2],
            every[2] - every[1],
            "one page per epoch: {every:?}"
        );
    }

    #[test]
    fn a_fixed_workload_holds_every_stream_to_the_training_threads_pool() {
        let o = with_workload("sync = \"phase\"", 3);
        for m in &o.steps {
            let every = m.device_reserved.unwrap();
            // The default stream's pages are all there is, with the persistent weights.
            assert!(
                every >= m.reserved && every - m.reserved < 64 << 20,
                "{m:?}"
            );
        }
    }

    #[test]
    fn a_granted_run_dies_where_the_card_would_and_says_what_it_needed() {
        let (recipe, roomy, card) = plan(OnRefusal::Grant, u64::MAX);
        let need = dry_run(&recipe, &roomy, card.clone(), None).unwrap();
        assert!(need.died.is_none() && need.refused.is_empty());
        let (_, tight, _) = plan(OnRefusal::Grant, need.peak_bytes / 2);
        let granted = dry_run(&recipe, &tight, card.clone(), None).unwrap();
        let death = granted.died.as_ref().expect("half the need is too little");
        assert_eq!(death.step, 1);
        assert_eq!(granted.steps.len(), 3, "granted pages: the run goes on");
        assert_eq!(
            granted.peak_bytes, need.peak_bytes,
            "and needs what the roomy run took"
        );
        let figures = |o: &DryOutcome| -> Vec<(u64, u64, u64)> {
            o.steps
                .iter()
                .map(|s| (s.in_use_after_forward, s.in_use_after_backward, s.reserved))
                .collect()
        };
        assert_eq!(
            figures(&granted),
            figures(&need),
            "granting changes nothing but the books"
        );
        assert!(!granted.refused.is_empty());

        let (_, refusing, _) = plan(OnRefusal::Refuse, need.peak_bytes / 2);
        let refused = dry_run(&recipe, &refusing, card, None).unwrap();
        let d = refused.died.as_ref().expect("the card refuses");
        assert_eq!(
            (d.step, refused.steps.len()),
            (1, 0),
            "dies in its first step"
        );
        assert!(
            refused.peak_bytes <= need.peak_bytes / 2,
            "never past the card"
        );
        assert_eq!(d.failed_pages[0], granted.refused[0].out_of_memory.page);
    }
}
