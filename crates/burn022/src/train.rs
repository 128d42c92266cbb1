//! A training step on burn 0.22, run phase by phase and measured through burn's own
//! `Device::memory_pool_usage` after each: the same reading on the dry device and on a GPU, and
//! the one a user's program can take itself.

use std::time::Instant;

use burn::tensor::{Device, Tensor};
use highwater::conform::{MeasuredDeath, MeasuredStep};
use highwater::pool::PoolUsage;
use highwater::trace::Phase;

/// What autodiff hands the optimizer.
pub type Gradients = burn::tensor::Gradients;

/// One training step of a model, phase by phase.
pub trait TrainingStep {
    /// The forward pass over a fresh batch; returns the loss.
    fn forward(&mut self) -> Tensor<1>;
    /// The backward pass: the gradients the optimizer will consume.
    fn backward(&mut self, loss: &Tensor<1>) -> Gradients {
        loss.backward()
    }
    /// The optimizer's update; the gradients are gone when it returns.
    fn optimize(&mut self, grads: Gradients);
    /// The parameters the model trains, as burn counts them, where the step knows its model.
    fn parameters(&self) -> Option<usize> {
        None
    }
}

/// The device's pools now, once what is queued has run: burn's `memory_pool_usage`, every
/// stream of the device.
///
/// # Errors
///
/// What the device reported when synchronized (a tensor whose page it refused, say).
pub fn pool_usage(device: &Device) -> Result<PoolUsage, String> {
    device.sync().map_err(|e| e.to_string())?;
    let usage = device.memory_pool_usage().unwrap_or_default();
    Ok(PoolUsage {
        allocs: usage.number_allocs,
        in_use: usage.bytes_in_use,
        padding: usage.bytes_padding,
        reserved: usage.bytes_reserved,
    })
}

/// What a trainer asks after each phase: the pages the device refused since the last call. In
/// CubeCL 0.11 a refused page fails no synchronization: the tensor it was for carries the error
/// until something reads it (the loss, a step or more later), and a page refused to a
/// throughput probe or an autotune candidate fails nothing of the training at all. So a
/// refusal is recorded where it happened, and the run dies where a read fails, as on a GPU.
pub type Refusals = Box<dyn FnMut() -> Vec<u64>>;

/// A page the device refused, placed in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refused {
    /// 1-based step.
    pub step: u64,
    /// The phase after which it was seen.
    pub phase: Phase,
    /// The page's bytes.
    pub page: u64,
}

/// Runs a [`TrainingStep`] step by step on one device, synchronizing after each phase and
/// reading the pools.
pub struct Trainer {
    program: Box<dyn TrainingStep>,
    device: Device,
    step: u64,
    phase: Phase,
    refusals: Option<Refusals>,
    refused: Vec<Refused>,
}

impl Trainer {
    /// A trainer of `program` on `device`, before its first step.
    pub fn new(program: Box<dyn TrainingStep>, device: Device) -> Self {
        Trainer {
            program,
            device,
            step: 0,
            phase: Phase::Init,
            refusals: None,
            refused: Vec::new(),
        }
    }

    /// The same, asking `refusals` after every phase which pages the device refused
    /// ([`Trainer::refused`]).
    pub fn watching(mut self, refusals: Refusals) -> Self {
        self.refusals = Some(refusals);
        self
    }

    /// Every page refused so far, where it was seen.
    pub fn refused(&self) -> &[Refused] {
        &self.refused
    }

    /// The step it trains.
    pub fn program(&self) -> &dyn TrainingStep {
        self.program.as_ref()
    }

    /// The phase the last step was in when it returned.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// One step. `read_loss`: read the loss back to the host, as a trainer does when it logs.
    ///
    /// # Errors
    ///
    /// Where the step died: the device reported an error when synchronized after a phase.
    pub fn step(&mut self, read_loss: bool) -> Result<MeasuredStep, MeasuredDeath> {
        self.step += 1;
        let start = Instant::now();

        self.phase = Phase::Forward;
        let loss = self.program.forward();
        let in_use_after_forward = self.read(Phase::Forward)?.in_use;

        self.phase = Phase::Backward;
        let grads = self.program.backward(&loss);
        let in_use_after_backward = self.read(Phase::Backward)?.in_use;
        let loss = match read_loss {
            false => None,
            true => Some(loss.try_into_scalar::<f64>().map_err(|e| {
                let pages = self.refused.iter().map(|r| r.page).collect();
                self.death(Phase::Backward, e.to_string(), pages)
            })?),
        };

        self.phase = Phase::Optimizer;
        self.program.optimize(grads);
        let reserved = self.read(Phase::Optimizer)?.reserved;
        Ok(MeasuredStep {
            step: self.step,
            in_use_after_forward,
            in_use_after_backward,
            reserved,
            step_ms: start.elapsed().as_secs_f64() * 1e3,
            loss,
            device_reserved: None,
        })
    }

    /// The pools after `phase`, or the run's death in it.
    fn read(&mut self, phase: Phase) -> Result<PoolUsage, MeasuredDeath> {
        let usage = pool_usage(&self.device).map_err(|m| self.death(phase, m, vec![]))?;
        if let Some(watch) = self.refusals.as_mut() {
            let step = self.step;
            self.refused.extend(
                watch()
                    .into_iter()
                    .map(|page| Refused { step, phase, page }),
            );
        }
        Ok(usage)
    }

    fn death(&self, phase: Phase, message: String, failed_pages: Vec<u64>) -> MeasuredDeath {
        MeasuredDeath {
            step: self.step,
            phase,
            message,
            failed_pages,
        }
    }
}
