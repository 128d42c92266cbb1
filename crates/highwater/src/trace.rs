//! A whole training step as pool events: forward over the stack (`max_iter` loop iterations ×
//! `n_experts` expert calls, with the rest of the model's activations between them), backward
//! in reverse (gradients, releases of what autodiff held, Balanced's recomputation), then the
//! optimizer update.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::layout::Shape;
use crate::ledger::{BackwardEvent, Family, Label, Ledger, TensorId};
use crate::recipe::{Checkpointing, Recipe};

/// A buffer in a step's trace. Ids below [`StepTrace::persistent`] outlive the step.
pub type Buf = u32;

/// Part of the step an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before step one: weights and fixed buffers.
    Init,
    /// The forward pass, to the loss.
    Forward,
    /// `backward()`.
    Backward,
    /// The optimizer's step.
    Optimizer,
    /// Between steps: an evaluation pass (forward only) or a cleanup (`[workload]`).
    Eval,
}

/// One pool event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Reserve `bytes` for buffer `buf`.
    Alloc {
        /// The buffer.
        buf: Buf,
        /// Its size.
        bytes: u64,
    },
    /// Drop buffer `buf`.
    Free {
        /// The buffer.
        buf: Buf,
    },
    /// The step enters a phase.
    Phase(Phase),
}

/// What a run allocates before step one, in the persistent pool: weights and fixed buffers.
pub(crate) fn init_allocs(recipe: &Recipe) -> Vec<(u64, Label)> {
    let mut v = named_params(recipe);
    if recipe.rest.persistent_bytes > 0 {
        v.push((
            recipe.rest.persistent_bytes,
            Label::new("rest.buffers", "init", Family::Weights),
        ));
    }
    v
}

/// Every parameter tensor, with its bytes: each expert's gate_up and down, then the rest of
/// the model as one tensor.
fn named_params(recipe: &Recipe) -> Vec<(u64, Label)> {
    let dt = recipe.dtype;
    let param = |name: String| Label::new(name, "param", Family::Weights);
    let mut v = vec![];
    for e in 0..recipe.n_experts {
        v.push((
            Shape::from([recipe.d_model, recipe.gate_up_width()]).bytes(dt),
            param(format!("expert{e}.gate_up")),
        ));
        v.push((
            Shape::from([recipe.d_ffn, recipe.d_model]).bytes(dt),
            param(format!("expert{e}.down")),
        ));
    }
    if recipe.rest.params > 0 {
        v.push((
            Shape::from([recipe.rest.params]).bytes(dt),
            param("rest.params".into()),
        ));
    }
    v
}

/// The events of one step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepTrace {
    /// In program order.
    pub events: Vec<Event>,
    /// Buffers `0..persistent` are optimizer state created on the first step and never freed.
    pub persistent: Buf,
    /// Number of buffer ids used.
    pub buffers: Buf,
    /// What each buffer is, by id.
    pub labels: Vec<Label>,
}

struct Builder {
    events: Vec<Event>,
    next: Buf,
    labels: Vec<Label>,
}

impl Builder {
    fn alloc(&mut self, bytes: u64, label: Label) -> Buf {
        let buf = self.next;
        self.next += 1;
        self.events.push(Event::Alloc { buf, bytes });
        self.labels.push(label);
        buf
    }
    fn free(&mut self, buf: Buf) {
        self.events.push(Event::Free { buf });
    }
    fn phase(&mut self, p: Phase) {
        self.events.push(Event::Phase(p));
    }
}

/// One expert call's live buffers between its forward and its backward.
struct CallState {
    x: Buf,
    held: HashMap<TensorId, Buf>,
}

/// Builds step `step` (1-based; step 1 also creates the optimizer state).
pub fn step_trace(recipe: &Recipe, ledger: &Ledger, step: u64) -> StepTrace {
    let named = named_params(recipe);
    let params: Vec<u64> = named.iter().map(|(b, _)| *b).collect();
    let states_per_param = recipe.optimizer.states_per_param() as usize;
    let states = states_per_param * params.len();
    let mut b = Builder {
        events: vec![],
        next: states as Buf,
        labels: (0..states)
            .map(|s| {
                let name = &named[s / states_per_param].1.tensor;
                Label::new(
                    format!("{name}.moment{}", s % states_per_param + 1),
                    "adam state",
                    Family::Optimizer,
                )
            })
            .collect(),
    };
    let dt = recipe.dtype;
    let x_bytes = Shape::from([recipe.tokens(), recipe.d_model]).bytes(dt);
    let rest_count = recipe.rest.live_bytes / recipe.rest.tensor_bytes;
    let per_iter =
        |it: u64| rest_count / recipe.max_iter + u64::from(it < rest_count % recipe.max_iter);

    b.phase(Phase::Forward);
    let mut rest: Vec<Vec<Buf>> = vec![];
    let mut calls: Vec<CallState> = vec![];
    for it in 0..recipe.max_iter {
        rest.push(
            (0..per_iter(it))
                .map(|k| {
                    let label = Label::new(format!("it{it}.rest{k}"), "rest", Family::Rest);
                    b.alloc(recipe.rest.tensor_bytes, label)
                })
                .collect(),
        );
        for e in 0..recipe.n_experts {
            calls.push(forward_call(
                &mut b,
                ledger,
                x_bytes,
                &format!("it{it}.expert{e}."),
            ));
        }
    }
    // Balanced keeps one more [N, d_model] activation at the end of the stack than None does:
    // the last expert's output, which nothing else holds (measured: exactly one such tensor on
    // every Balanced rerun on the H200, none under None). It goes when backward starts.
    let stack_output = (recipe.checkpointing == Checkpointing::Balanced)
        .then(|| b.alloc(x_bytes, Label::new("stack.output", "expert", Family::Loss)));
    let loss = b.alloc(
        Shape::from([1]).bytes(dt),
        Label::new("loss", "loss", Family::Loss),
    );

    b.phase(Phase::Backward);
    if let Some(buf) = stack_output {
        b.free(buf);
    }
    // Balanced: backups no recompute needs are dropped when the checkpointer is built.
    for c in &calls {
        for t in &ledger.released_at_backward {
            if let Some(buf) = c.held.get(t) {
                b.free(*buf);
            }
        }
    }
    // Parameter gradients accumulate over the loop iterations and wait for the optimizer.
    let mut param_grads: Vec<Option<Buf>> = vec![None; params.len()];
    let mut calls = calls.into_iter().rev();
    for it in (0..recipe.max_iter).rev() {
        for e in (0..recipe.n_experts).rev() {
            let c = calls.next().expect("one call state per call");
            let prefix = format!("it{it}.expert{e}.");
            backward_call(&mut b, ledger, c, e as usize, &mut param_grads, &prefix);
        }
        for (k, buf) in rest[it as usize].iter().enumerate().rev() {
            let label = Label::new(
                format!("∂it{it}.rest{k}"),
                "rest backward",
                Family::Backward,
            );
            let g = b.alloc(recipe.rest.tensor_bytes, label);
            b.free(g);
            b.free(*buf);
        }
    }
    if recipe.rest.params > 0 {
        let last = params.len() - 1;
        let label = Label::new("∂rest.params", "rest backward", Family::Backward);
        param_grads[last] = Some(b.alloc(params[last], label));
    }

    b.phase(Phase::Optimizer);
    optimizer_step(&mut b, &named, &param_grads, states_per_param, step);
    b.free(loss);
    StepTrace {
        events: b.events,
        persistent: states as Buf,
        buffers: b.next,
        labels: b.labels,
    }
}

/// The optimizer's step over every parameter with a gradient (`param_grads`, by parameter):
/// SGD frees the gradient; Adam creates its moments in step 1, and its temporaries come and go.
fn optimizer_step(
    b: &mut Builder,
    named: &[(u64, Label)],
    param_grads: &[Option<Buf>],
    states_per_param: usize,
    step: u64,
) {
    for (i, &(p, _)) in named.iter().enumerate() {
        let temp = |what: &str| {
            Label::new(
                format!("{}.{what}", named[i].1.tensor),
                "adam step",
                Family::Optimizer,
            )
        };
        // burn's `OptimizerAdaptor` skips a parameter without a gradient.
        let Some(grad) = param_grads[i] else { continue };
        if states_per_param == 0 {
            // SGD (burn-optim 0.21 `sgd.rs`): `tensor - grad.mul_scalar(lr)`, both in place.
            b.free(grad);
            continue;
        }
        // Adam, in burn-optim 0.21's order (`adam.rs`, `AdaptiveMomentum::transform`); every op
        // on a unique handle (moments, parameter) runs in place, every other one allocates.
        if step == 1 {
            // `moment_1 = grad.clone().mul_scalar(..)`: new; `moment_2 = grad.square()..`:
            // `square` is `mul(grad.clone(), grad)`, new, and with it the gradient's last
            // handle goes. The moments live for the rest of the run.
            for k in 0..states_per_param {
                b.events.push(Event::Alloc {
                    buf: (i * states_per_param + k) as Buf,
                    bytes: p,
                });
            }
            b.free(grad);
        } else {
            // `moment_1.mul_scalar(..).add(grad.clone().mul_scalar(..))`: one temporary,
            // summed into the moment in place.
            let t = b.alloc(p, temp("m1_update"));
            b.free(t);
            // `moment_2.mul_scalar(..).add(grad.square().mul_scalar(..))`: the square is new,
            // and consumes the gradient.
            let t = b.alloc(p, temp("grad_squared"));
            b.free(grad);
            b.free(t);
        }
        // `moment_1.clone().mul_scalar(..).div(moment_2.clone().sqrt().add_scalar(..))`: two
        // new tensors (the moments are shared), the quotient in place; then
        // `tensor - delta.mul_scalar(lr)` in place.
        let c = b.alloc(p, temp("m1_scaled"));
        let d = b.alloc(p, temp("m2_sqrt"));
        b.free(d);
        b.free(c);
    }
}

fn forward_call(b: &mut Builder, ledger: &Ledger, x_bytes: u64, prefix: &str) -> CallState {
    let x = b.alloc(
        x_bytes,
        Label::new(format!("{prefix}x"), "residual", Family::Input),
    );
    let mut bufs: HashMap<TensorId, Buf> = HashMap::new();
    for (i, row) in ledger.rows.iter().enumerate() {
        if row.storage == crate::ledger::Storage::New {
            let label = Label::new(format!("{prefix}{}", row.name), &row.op, row.family);
            bufs.insert(row.tensor, b.alloc(row.bytes, label));
        }
        for owner in &ledger.forward_frees[i] {
            if let Some(buf) = bufs.remove(owner) {
                b.free(buf);
            }
        }
    }
    // The output feeds the residual add, which runs in place: the call's output buffer ends
    // with the call.
    for o in &ledger.outputs {
        if let Some(buf) = bufs.remove(&ledger.buffer_of[o.0]) {
            b.free(buf);
        }
    }
    let held = ledger
        .held
        .iter()
        .filter_map(|(t, _)| bufs.remove(t).map(|buf| (*t, buf)))
        .collect();
    CallState { x, held }
}

fn backward_call(
    b: &mut Builder,
    ledger: &Ledger,
    mut c: CallState,
    expert: usize,
    param_grads: &mut [Option<Buf>],
    prefix: &str,
) {
    // The ledger's events start with the gradient arriving from the residual stream.
    let mut local: HashMap<u32, Buf> = HashMap::new();
    let mut handed_up = vec![];
    for e in &ledger.backward {
        match *e {
            BackwardEvent::Alloc { buf, bytes } => {
                let l = &ledger.backward_labels[buf as usize];
                let label = Label::new(format!("{prefix}{}", l.tensor), &l.op, l.family);
                local.insert(buf, b.alloc(bytes, label));
            }
            BackwardEvent::Free { buf } => {
                if let Some(x) = local.remove(&buf) {
                    b.free(x);
                }
            }
            BackwardEvent::FreeHeld { owner } => {
                if let Some(x) = c.held.remove(&owner) {
                    b.free(x);
                }
            }
            BackwardEvent::ParamGrad { param, buf } => {
                let Some(new) = local.remove(&buf) else {
                    continue;
                };
                match &mut param_grads[2 * expert + param] {
                    slot @ None => *slot = Some(new),
                    // A later contribution is summed with the first (`Gradients::register`):
                    // one of the two buffers goes.
                    Some(_) => b.free(new),
                }
            }
            BackwardEvent::InputGrad { buf } => {
                if let Some(x) = local.remove(&buf) {
                    handed_up.push(x);
                }
            }
        }
    }
    // Whatever is left: dx (handed upstream, summed into the residual gradient), stragglers.
    let mut rest: Vec<Buf> = handed_up;
    rest.extend(local.into_values());
    rest.extend(c.held.into_values());
    rest.sort_unstable();
    for buf in rest {
        b.free(buf);
    }
    b.free(c.x);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffn::expert_ledger;
    use crate::recipe::{Activation, Checkpointing};

    fn recipes() -> Vec<Recipe> {
        let small = Recipe::parse(
            "small.toml",
            include_str!("../../../repro/recipes/small.toml"),
        )
        .unwrap();
        let mut v = vec![];
        for a in [
            Activation::Silu,
            Activation::SituTensor,
            Activation::SituFused,
        ] {
            for c in [Checkpointing::None, Checkpointing::Balanced] {
                v.push(small.with(a, c));
            }
        }
        v
    }

    #[test]
    fn every_step_frees_what_it_allocates() {
        for r in recipes() {
            let l = expert_ledger(&r);
            for step in [1, 2] {
                let t = step_trace(&r, &l, step);
                let mut live = std::collections::HashSet::new();
                for e in &t.events {
                    match *e {
                        Event::Alloc { buf, .. } => assert!(live.insert(buf), "{buf} twice"),
                        Event::Free { buf } => assert!(live.remove(&buf), "{buf} not live"),
                        Event::Phase(_) => {}
                    }
                }
                let left: Vec<_> = live.iter().filter(|b| **b >= t.persistent).collect();
                assert!(
                    left.is_empty(),
                    "{:?} {:?}: {left:?}",
                    r.activation,
                    r.checkpointing
                );
            }
        }
    }

    #[test]
    fn canonical_steps_repeat() {
        let r = &recipes()[2];
        let l = expert_ledger(r);
        assert_eq!(step_trace(r, &l, 2), step_trace(r, &l, 3));
        assert_ne!(step_trace(r, &l, 1), step_trace(r, &l, 2));
    }
}
