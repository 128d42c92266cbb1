//! One call's backward pass, replayed the way burn-autodiff 0.21 runs it, on buffer handles.
//!
//! Nothing here is a cost table: the pass is executed symbolically, op body by op body, with a
//! reference count per buffer, so that what burn allocates, what it writes in place and when the
//! last handle on a buffer drops all come out of the same rules burn and burn-cubecl apply:
//!
//! * **The checkpointer** (`checkpoint/builder.rs`, `CheckpointerBuilder::build`): explicit
//!   actions (what an op saved for its backward) and Balanced's backups (`checkpoint_parents`)
//!   become one state per node that some action needs: `Computed` (a handle on the forward
//!   output) for compute-bound nodes and leaves, `Recompute` for memory-bound ones, each with
//!   `n_required`, counted by `build_n_required_map` / `update_n_required_of_parents` (which
//!   stops at computed nodes). A backup nothing needs is dropped when the checkpointer is built.
//! * **Retrieval** (`checkpoint/base.rs`, `retrieve_node_output`): a topological sort of the
//!   recompute ancestors, each re-run by its retro-forward (`checkpoint/retro_forward.rs`),
//!   which takes its parents' states; then the node's own state. `BackwardStates::get_state`
//!   (`checkpoint/state.rs`) hands out a clone while `n_required` stays above zero and the
//!   stored handle itself on the last use, which leaves that handle unique.
//! * **Order** (`runtime/server.rs`, `build_tape` / `execute_steps`): steps grouped by depth,
//!   deepest first; within a depth, in the order `graph/traversal.rs`'s stack-based search
//!   discovered them (the last parent pushed is explored first).
//! * **Op bodies** (`ops/tensor.rs`, `ops/activation.rs`, `ops/backward.rs` `binary`/`unary`,
//!   `utils.rs` `duplicate`; `grads.rs` `Gradients::register` sums into the new gradient).
//! * **In place** (burn-cubecl 0.21 `kernel/binary.rs`, `kernel/unary_float.rs`,
//!   `kernel/index/slice_assign.rs`): an elementwise op writes into its input (lhs first, then
//!   rhs) when that input's handle is unique and it is not overlapping; a matmul always
//!   allocates its output. burn-backend's defaults spell out the rest: `powi_scalar(x, 2)` is
//!   `mul(x.clone(), x)` (never in place), `neg` is `mul_scalar(-1)`, `sigmoid` is a chain of
//!   unary ops, `sigmoid_backward(out, g)` is `mul(out.clone(), neg(out) + 1) * g`.
//!
//! On burn-fusion, views are never written in place (as in forward, see the ledger's storage
//! rules).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::{Bound, Family, Graph, Label, Op, Storage, TensorId};
use crate::recipe::Backend;

mod step;

/// A pool event of one call's backward, in order. `buf` numbers buffers this pass creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BackwardEvent {
    /// A new buffer: a gradient, a recomputed output, a temporary.
    Alloc {
        /// The buffer's number in this pass.
        buf: u32,
        /// Its size.
        bytes: u64,
    },
    /// The last handle on a buffer of this pass dropped.
    Free {
        /// The buffer's number in this pass.
        buf: u32,
    },
    /// The last handle on a buffer held since forward (by its owner) dropped.
    FreeHeld {
        /// The tensor that owns the buffer.
        owner: TensorId,
    },
    /// The gradient of a parameter (index into [`super::Ledger::params`]), registered for the
    /// optimizer: the buffer leaves the call.
    ParamGrad {
        /// Index into [`super::Ledger::params`].
        param: usize,
        /// The gradient's buffer.
        buf: u32,
    },
    /// The gradient of the call's input, registered for upstream: the buffer leaves the call.
    InputGrad {
        /// The gradient's buffer.
        buf: u32,
    },
}

/// What the replay needs from the forward analysis.
pub(super) struct Forward<'a> {
    pub g: &'a Graph,
    /// burn's compute property of every node under the strategy.
    pub effective: Vec<Bound>,
    pub storage: &'a [Storage],
    pub buffer_of: &'a [TensorId],
    pub backend: Backend,
}

/// The replay's result.
pub(super) struct Replay {
    pub events: Vec<BackwardEvent>,
    /// What each new buffer is, by its number.
    pub labels: Vec<Label>,
    /// Forward buffers (by owner) some checkpointer state still holds when backward starts.
    pub held: HashSet<TensorId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Not this call's memory: parameters, the call's input.
    External,
    /// Held since forward, by owner.
    Held(TensorId),
    /// Created by this pass.
    Local(u32),
}

#[derive(Debug)]
struct Buffer {
    origin: Origin,
    handles: u32,
}

/// A handle on (part of) a buffer.
#[derive(Debug, Clone, Copy)]
struct Val {
    buf: usize,
    /// A strided view of a larger buffer.
    view: bool,
    bytes: u64,
}

#[derive(Debug)]
enum State {
    Recompute { n: usize },
    Computed { v: Val, n: usize },
}

struct Exec<'a> {
    f: &'a Forward<'a>,
    bufs: Vec<Buffer>,
    events: Vec<BackwardEvent>,
    next_local: u32,
    labels: Vec<Label>,
    /// The node whose backward (or recomputation) is running: names the buffers it makes.
    at: Label,
    states: HashMap<usize, State>,
    grads: HashMap<usize, Val>,
}

impl Exec<'_> {
    fn bytes(&self, i: usize) -> u64 {
        self.f.g.nodes[i].shape.bytes(self.f.g.dtype)
    }

    /// A fresh handle on a new buffer of `origin`.
    fn push(&mut self, origin: Origin, bytes: u64) -> Val {
        self.bufs.push(Buffer { origin, handles: 1 });
        Val {
            buf: self.bufs.len() - 1,
            view: false,
            bytes,
        }
    }

    fn external(&mut self, bytes: u64) -> Val {
        self.push(Origin::External, bytes)
    }

    fn new_buf(&mut self, bytes: u64) -> Val {
        let local = self.next_local;
        self.next_local += 1;
        self.events.push(BackwardEvent::Alloc { buf: local, bytes });
        self.labels.push(self.at.clone());
        self.push(Origin::Local(local), bytes)
    }

    fn clone_val(&mut self, v: Val) -> Val {
        self.bufs[v.buf].handles += 1;
        v
    }

    fn drop_val(&mut self, v: Val) {
        let b = &mut self.bufs[v.buf];
        b.handles -= 1;
        if b.handles == 0 {
            match b.origin {
                Origin::External => {}
                Origin::Held(owner) => self.events.push(BackwardEvent::FreeHeld { owner }),
                Origin::Local(buf) => self.events.push(BackwardEvent::Free { buf }),
            }
        }
    }

    /// burn-cubecl's `can_mut` (and `is_nonoverlapping`, true of every tensor here).
    fn can_mut(&self, v: Val, out: u64) -> bool {
        let b = &self.bufs[v.buf];
        b.handles == 1
            && b.origin != Origin::External
            && v.bytes == out
            && !(v.view && self.f.backend == Backend::Fusion)
    }

    /// An elementwise op on one tensor: in place when its handle is unique.
    fn unary(&mut self, v: Val) -> Val {
        if self.can_mut(v, v.bytes) {
            v
        } else {
            let out = self.new_buf(v.bytes);
            self.drop_val(v);
            out
        }
    }

    /// An elementwise op on two same-shaped tensors: into lhs, else rhs, else a new buffer.
    fn binary(&mut self, l: Val, r: Val) -> Val {
        let out = l.bytes.max(r.bytes);
        if self.can_mut(l, out) {
            self.drop_val(r);
            l
        } else if self.can_mut(r, out) {
            self.drop_val(l);
            r
        } else {
            let o = self.new_buf(out);
            self.drop_val(l);
            self.drop_val(r);
            o
        }
    }

    /// A matmul: always a new output, inputs dropped after it.
    fn matmul(&mut self, l: Val, r: Val, out: u64) -> Val {
        let o = self.new_buf(out);
        self.drop_val(l);
        self.drop_val(r);
        o
    }

    /// `BackwardStates::get_state`.
    fn get_state(&mut self, node: usize) -> Val {
        match self.states.remove(&node) {
            Some(State::Computed { v, n }) if n > 1 => {
                self.states.insert(node, State::Computed { v, n: n - 1 });
                self.clone_val(v)
            }
            Some(State::Computed { v, .. }) => v,
            other => panic!("state of node {node} taken before it is computed: {other:?}"),
        }
    }

    fn tree_parents(&self, node: usize) -> Vec<usize> {
        let g = self.f.g;
        g.nodes[node]
            .inputs
            .iter()
            .map(|t| t.0)
            .filter(|&p| g.nodes[p].tracked && p != node)
            .collect()
    }

    /// `Checkpointer::topological_sort`.
    fn topological_sort(&self, node: usize) -> Vec<usize> {
        match self.states.get(&node) {
            Some(State::Recompute { .. }) => {
                let mut sorted = vec![];
                for p in self.tree_parents(node) {
                    for ps in self.topological_sort(p) {
                        if !sorted.contains(&ps) {
                            sorted.push(ps);
                        }
                    }
                }
                sorted.push(node);
                sorted
            }
            Some(State::Computed { .. }) => vec![node],
            None => panic!("node {node} is not in the backward states"),
        }
    }

    /// `Checkpointer::retrieve_node_output`.
    fn retrieve(&mut self, node: usize) -> Val {
        for n in self.topological_sort(node) {
            if let Some(&State::Recompute { n: required }) = self.states.get(&n) {
                let v = self.retro_forward(n);
                self.states.insert(n, State::Computed { v, n: required });
            }
        }
        self.get_state(node)
    }

    /// The node's retro-forward: its forward op on its parents' states.
    fn retro_forward(&mut self, node: usize) -> Val {
        let nd = &self.f.g.nodes[node];
        let outer = std::mem::replace(
            &mut self.at,
            Label::new(
                nd.name.clone(),
                format!("{} (recomputed)", nd.op.label()),
                Family::Recompute,
            ),
        );
        let v = self.retro_forward_op(node);
        self.at = outer;
        v
    }

    fn retro_forward_op(&mut self, node: usize) -> Val {
        let nd = &self.f.g.nodes[node];
        let inputs: Vec<usize> = nd.inputs.iter().map(|t| t.0).collect();
        match &nd.op {
            Op::Slice { .. } => {
                let v = self.get_state(inputs[0]);
                if matches!(self.f.storage[node], Storage::View(_)) {
                    Val {
                        view: true,
                        bytes: self.bytes(node),
                        ..v
                    }
                } else {
                    let o = self.new_buf(self.bytes(node));
                    self.drop_val(v);
                    o
                }
            }
            Op::Scalar(_) | Op::Unary(_) | Op::Sigmoid => {
                let v = self.get_state(inputs[0]);
                self.unary(v)
            }
            Op::AddSub(_) | Op::Mul | Op::Div => {
                let l = self.get_state(inputs[0]);
                let r = self.get_state(inputs[1]);
                self.binary(l, r)
            }
            op => panic!("{} is compute-bound: never recomputed", op.label()),
        }
    }

    /// `Gradients::consume`.
    fn consume(&mut self, node: usize) -> Option<Val> {
        self.grads.remove(&node)
    }

    /// `Gradients::register`: a second contribution is `add(new, old)`.
    fn register(&mut self, node: usize, v: Val) {
        let g = self.f.g;
        match g.nodes[node].op {
            Op::Param => {
                let param = (0..node)
                    .filter(|&j| matches!(g.nodes[j].op, Op::Param))
                    .count();
                self.hand_over(v, |buf| BackwardEvent::ParamGrad { param, buf });
            }
            Op::Input => {
                let v = match self.grads.remove(&node) {
                    Some(old) => self.binary(v, old),
                    None => v,
                };
                self.hand_over(v, |buf| BackwardEvent::InputGrad { buf });
            }
            _ => {
                let v = match self.grads.remove(&node) {
                    Some(old) => self.binary(v, old),
                    None => v,
                };
                self.grads.insert(node, v);
            }
        }
    }

    fn hand_over(&mut self, v: Val, event: impl Fn(u32) -> BackwardEvent) {
        let b = &mut self.bufs[v.buf];
        match b.origin {
            Origin::Local(buf) if b.handles == 1 => {
                b.handles = 0;
                self.events.push(event(buf));
            }
            // A gradient that is still shared (never the case here): copy it out.
            _ => {
                let o = self.new_buf(v.bytes);
                self.drop_val(v);
                self.hand_over(o, event);
            }
        }
    }

    /// `duplicate`: one handle per tracked parent.
    fn duplicate(&mut self, g: Val, parents: &[Option<usize>]) -> Vec<Option<Val>> {
        let out: Vec<Option<Val>> = parents
            .iter()
            .map(|p| p.map(|_| self.clone_val(g)))
            .collect();
        self.drop_val(g);
        out
    }

    /// The tape's order: depth, then discovery order of the stack-based search from the output.
    fn tape_order(&self) -> Vec<usize> {
        let g = self.f.g;
        let n = g.nodes.len();
        let mut depth = vec![0usize; n];
        for i in 0..n {
            depth[i] = g.nodes[i]
                .inputs
                .iter()
                .filter(|t| g.nodes[t.0].tracked)
                .map(|t| depth[t.0] + 1)
                .max()
                .unwrap_or(0);
        }
        let has_step =
            |i: usize| g.nodes[i].tracked && !matches!(g.nodes[i].op, Op::Param | Op::Input);
        let mut discovered = vec![];
        let mut visited = HashSet::new();
        for o in &g.outputs {
            let mut stack = vec![o.0];
            while let Some(id) = stack.pop() {
                if !has_step(id) || !visited.insert(id) {
                    continue;
                }
                for p in self.tree_parents(id) {
                    if !visited.contains(&p) {
                        stack.push(p);
                    }
                }
                discovered.push(id);
            }
        }
        let mut order = discovered.clone();
        order.sort_by_key(|&i| {
            (
                std::cmp::Reverse(depth[i]),
                discovered.iter().position(|&d| d == i),
            )
        });
        order
    }
}

/// Burn's `CheckpointerBuilder` replayed: from the explicit actions, the backups and the stop
/// nodes, how many times backward will ask for each node's state (`n_required`).
fn required(f: &Forward<'_>) -> HashMap<usize, usize> {
    let g = f.g;
    let n = g.nodes.len();
    let computed = |i: usize| f.effective[i] != Bound::Memory;
    let explicit: Vec<usize> = g
        .nodes
        .iter()
        .filter(|nd| nd.tracked)
        .flat_map(|nd| nd.saves.iter().map(|t| t.0))
        .collect();
    let backups: Vec<usize> = (0..n)
        .filter(|&i| g.nodes[i].tracked && f.effective[i] == Bound::Memory)
        .flat_map(|i| g.nodes[i].inputs.iter().map(|t| t.0))
        .collect();
    let stop: HashSet<usize> = explicit
        .iter()
        .chain(&backups)
        .copied()
        .filter(|&i| computed(i))
        .collect();
    let mut required: HashMap<usize, usize> = HashMap::new();
    fn update(id: usize, g: &Graph, stop: &HashSet<usize>, required: &mut HashMap<usize, usize>) {
        if let Some(r) = required.get_mut(&id) {
            *r += 1;
            return;
        }
        required.insert(id, 1);
        if !stop.contains(&id) {
            for p in g.nodes[id].inputs.iter().map(|t| t.0) {
                if g.nodes[p].tracked && p != id {
                    update(p, g, stop, required);
                }
            }
        }
    }
    for &s in &explicit {
        if computed(s) {
            *required.entry(s).or_insert(0) += 1;
        } else {
            update(s, g, &stop, &mut required);
        }
    }
    required
}

/// Replays one call's backward, from the output's gradient arriving to the input's leaving.
pub(super) fn replay(f: &Forward<'_>) -> Replay {
    let g = f.g;
    let n = g.nodes.len();
    let computed = |i: usize| f.effective[i] != Bound::Memory;
    let required = required(f);

    let mut exec = Exec {
        f,
        bufs: vec![],
        events: vec![],
        next_local: 0,
        labels: vec![],
        at: Label::new("", "", Family::Backward),
        states: HashMap::new(),
        grads: HashMap::new(),
    };
    // Held buffers: one per owner, one handle per computed state on it.
    let mut held_buf: HashMap<TensorId, usize> = HashMap::new();
    let is_view = |mut i: usize| loop {
        match f.storage[i] {
            Storage::View(_) => return true,
            Storage::InPlace(p) => i = p.0,
            _ => return false,
        }
    };
    let mut nodes: Vec<usize> = required.keys().copied().collect();
    nodes.sort_unstable();
    for i in nodes {
        let r = required[&i];
        let state = if computed(i) {
            let bytes = exec.bytes(i);
            let v = match f.storage[i] {
                Storage::External => exec.external(bytes),
                _ => {
                    let owner = f.buffer_of[i];
                    let buf = *held_buf.entry(owner).or_insert_with(|| {
                        exec.bufs.push(Buffer {
                            origin: Origin::Held(owner),
                            handles: 0,
                        });
                        exec.bufs.len() - 1
                    });
                    exec.bufs[buf].handles += 1;
                    Val {
                        buf,
                        view: is_view(i),
                        bytes,
                    }
                }
            };
            State::Computed { v, n: r }
        } else {
            State::Recompute { n: r }
        };
        exec.states.insert(i, state);
    }
    // The output's gradient comes from the residual add `x + call(x)` (see `crate::trace`):
    // `float_add`'s backward hands one buffer to both sides (`duplicate`), so the same buffer
    // also waits as the input's gradient until the input's own contribution is summed into it.
    let residual_input = (0..n).find(|&i| {
        matches!(g.nodes[i].op, Op::Input)
            && g.nodes[i].tracked
            && g.outputs.len() == 1
            && g.nodes[i].shape == g.nodes[g.outputs[0].0].shape
    });
    for o in &g.outputs {
        exec.at = Label::new(
            format!("∂{}", g.nodes[o.0].name),
            "residual gradient",
            Family::Backward,
        );
        let v = exec.new_buf(exec.bytes(o.0));
        if let Some(x) = residual_input {
            let shared = exec.clone_val(v);
            exec.grads.insert(x, shared);
        }
        exec.grads.insert(o.0, v);
    }

    for i in exec.tape_order() {
        exec.step(i);
    }

    // Whatever a state or a gradient still holds goes with the checkpointer and the
    // gradients of this call (nothing, when every state was used as counted).
    let mut left: Vec<usize> = exec.states.keys().copied().collect();
    left.sort_unstable();
    for i in left {
        if let Some(State::Computed { v, .. }) = exec.states.remove(&i) {
            exec.drop_val(v);
        }
    }
    let mut left: Vec<usize> = exec.grads.keys().copied().collect();
    left.sort_unstable();
    for i in left {
        if let Some(v) = exec.grads.remove(&i) {
            exec.drop_val(v);
        }
    }
    Replay {
        events: exec.events,
        labels: exec.labels,
        held: held_buf.into_keys().collect(),
    }
}
