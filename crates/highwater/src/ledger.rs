//! The activation ledger: a layer written op by op, as burn 0.21 would run it, and what each
//! op costs the pool.
//!
//! [`Graph`] mirrors burn's tensor ops. Building records only structure; [`Graph::ledger`]
//! then applies burn 0.21's rules for one checkpoint strategy and backend:
//!
//! * **What autodiff keeps** (burn-autodiff 0.21 `ops/tensor.rs`, `ops/activation.rs`):
//!   matmul keeps both inputs (not its output); tanh, exp, log, sqrt, powf-scalar and sigmoid
//!   keep their *input*; mul keeps each side when the other is tracked; div keeps lhs when rhs
//!   is tracked and rhs when either is; add/sub and every scalar op keep no tensor; slice keeps
//!   shapes only; sum/mean keep the input shape.
//! * **Under `NoCheckpointing`** every op counts as compute-bound, so every kept input is held
//!   (a clone of its handle sits in the checkpointer builder) until backward uses it.
//! * **Under `BalancedCheckpointing`** a memory-bound op is recomputed in backward: keeping its
//!   output costs nothing in forward. But a memory-bound op backs up each *compute-bound*
//!   parent (`checkpoint_parents` → `ActionType::Backup`), holding that parent's handle until
//!   backward; an untracked parent makes the op compute-bound after all.
//! * **Views and in-place** (burn-cubecl 0.21): a slice whose start and end byte offsets are
//!   multiples of 512 is a view sharing its parent's buffer (`kernel/index/slice.rs`);
//!   elementwise ops write into an input whose handle is unique (`can_mut`), which a kept
//!   (held) tensor, a tensor still needed later, a view's parent or a parameter never is.
//!
//! Backward (gradient buffers, temporaries, recomputation, when each held buffer goes) is
//! not a cost table: `ledger/backward.rs` runs burn-autodiff's checkpointer and the op bodies'
//! `backward` on buffer handles, with the same in-place rules, in burn's order.

use std::fmt;

use serde::Serialize;

use crate::layout::{DType, Shape};
use crate::pool::CUDA_ALIGNMENT;
use crate::recipe::{Backend, Checkpointing};

mod analysis;
mod backward;
pub use backward::BackwardEvent;

/// A tensor in a [`Graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TensorId(pub usize);

/// Compute class an op declares in burn-autodiff (`.compute_bound()` / `.memory_bound()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Bound {
    /// Expensive to recompute: matmul, reductions, custom kernels.
    Compute,
    /// Cheap to recompute: elementwise, slices, reshapes.
    Memory,
    /// A leaf: parameters and inputs (`ComputingProperty::Ambiguous`, kept like compute-bound).
    Leaf,
}

/// The burn op a node mirrors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Op {
    /// A trainable parameter (lives in the persistent pool).
    Param,
    /// An activation handed in from upstream.
    Input,
    /// `matmul` / `Linear::forward` without bias.
    Matmul,
    /// `slice` on one dimension with step 1.
    Slice {
        /// The dimension sliced.
        dim: usize,
        /// First index kept.
        start: u64,
        /// One past the last.
        end: u64,
    },
    /// `add_scalar`, `sub_scalar`, `mul_scalar`, `div_scalar`.
    Scalar(&'static str),
    /// `add`, `sub`.
    AddSub(&'static str),
    /// `mul`.
    Mul,
    /// `div`.
    Div,
    /// `tanh`, `exp`, `log`, `sqrt`, `powf_scalar`: keep their input.
    Unary(&'static str),
    /// `sigmoid`: keeps its input; its backward recomputes the output.
    Sigmoid,
    /// `sum`, `mean`, `sum_dim`, `mean_dim`.
    Reduce(&'static str),
    /// A custom kernel (e.g. fused SiTU): compute-bound, keeps the inputs it names, and its
    /// backward allocates the listed temporaries besides the input gradients.
    Custom {
        /// The kernel's name.
        name: String,
        /// Buffers its backward allocates besides the input gradients.
        backward_temps: Vec<Shape>,
    },
}

impl Op {
    fn bound(&self) -> Bound {
        match self {
            Op::Param | Op::Input => Bound::Leaf,
            Op::Matmul | Op::Reduce(_) | Op::Custom { .. } => Bound::Compute,
            _ => Bound::Memory,
        }
    }

    /// The family a timeline colours this op's output by.
    pub fn family(&self) -> Family {
        match self {
            Op::Param => Family::Weights,
            Op::Input => Family::Input,
            Op::Matmul => Family::Matmul,
            Op::Custom { .. } => Family::Kernel,
            Op::Reduce(_) => Family::Reduce,
            _ => Family::Elementwise,
        }
    }

    fn elementwise(&self) -> bool {
        matches!(
            self,
            Op::Scalar(_) | Op::AddSub(_) | Op::Mul | Op::Div | Op::Unary(_) | Op::Sigmoid
        )
    }

    /// Short burn-ish name for tables.
    pub fn label(&self) -> String {
        match self {
            Op::Param => "param".into(),
            Op::Input => "input".into(),
            Op::Matmul => "matmul".into(),
            Op::Slice { .. } => "slice".into(),
            Op::Scalar(s) | Op::AddSub(s) | Op::Unary(s) | Op::Reduce(s) => (*s).into(),
            Op::Mul => "mul".into(),
            Op::Div => "div".into(),
            Op::Sigmoid => "sigmoid".into(),
            Op::Custom { name, .. } => name.clone(),
        }
    }
}

/// What a buffer in a trace is: the tensor, the op that made it, and the family a timeline
/// colours it by. The simulator's event stream and every view of it name buffers this way.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Label {
    /// The tensor, e.g. `it0.expert1.h`.
    pub tensor: String,
    /// The op that allocated it, e.g. `matmul`, `mul backward`, `sigmoid (recomputed)`.
    pub op: String,
    /// Its family.
    pub family: Family,
}

impl Label {
    /// A label from its parts.
    pub fn new(tensor: impl Into<String>, op: impl Into<String>, family: Family) -> Self {
        Self {
            tensor: tensor.into(),
            op: op.into(),
            family,
        }
    }
}

/// The kind of op behind a buffer: few enough to tell apart by colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// Parameters and fixed buffers, allocated before step one.
    Weights,
    /// An expert call's input from the residual stream.
    Input,
    /// Matmul outputs.
    Matmul,
    /// Elementwise op outputs (activations, scalar ops, copies of slices).
    Elementwise,
    /// Reductions.
    Reduce,
    /// A custom kernel's outputs (the fused SiTU kernel).
    Kernel,
    /// Activations of the rest of the model, outside the expert calls.
    Rest,
    /// Buffers backward allocates: gradients and their temporaries.
    Backward,
    /// Forward outputs recomputed during backward (Balanced checkpointing).
    Recompute,
    /// The optimizer's moments and temporaries.
    Optimizer,
    /// The loss and the stack's output.
    Loss,
}

impl Family {
    /// Every family, in legend order, which is declaration order: `family as usize` indexes it.
    pub const ALL: [Family; 11] = [
        Family::Weights,
        Family::Input,
        Family::Matmul,
        Family::Elementwise,
        Family::Reduce,
        Family::Kernel,
        Family::Rest,
        Family::Backward,
        Family::Recompute,
        Family::Optimizer,
        Family::Loss,
    ];

    /// Its name in traces and legends.
    pub fn name(self) -> &'static str {
        match self {
            Family::Weights => "weights",
            Family::Input => "input",
            Family::Matmul => "matmul",
            Family::Elementwise => "elementwise",
            Family::Reduce => "reduce",
            Family::Kernel => "kernel",
            Family::Rest => "rest",
            Family::Backward => "backward",
            Family::Recompute => "recompute",
            Family::Optimizer => "optimizer",
            Family::Loss => "loss",
        }
    }
}

#[derive(Debug, Clone)]
struct Node {
    name: String,
    op: Op,
    shape: Shape,
    inputs: Vec<TensorId>,
    /// Inputs the op checkpoints for its backward (explicit actions).
    saves: Vec<TensorId>,
    tracked: bool,
}

/// A layer written op by op, mirroring burn 0.21's tensor API.
#[derive(Debug, Clone)]
pub struct Graph {
    dtype: DType,
    nodes: Vec<Node>,
    outputs: Vec<TensorId>,
}

impl Graph {
    /// An empty graph whose float tensors are `dtype`.
    pub fn new(dtype: DType) -> Self {
        Self {
            dtype,
            nodes: Vec::new(),
            outputs: Vec::new(),
        }
    }

    fn push(&mut self, name: &str, op: Op, shape: Shape, inputs: Vec<TensorId>) -> TensorId {
        let tracked = matches!(op, Op::Param) || inputs.iter().any(|i| self.nodes[i.0].tracked);
        let tracked_in = |g: &Graph, i: &TensorId| g.nodes[i.0].tracked;
        // burn-autodiff 0.21 save rules, per op (see the module docs).
        let saves = match &op {
            Op::Matmul | Op::Mul => {
                let (l, r) = (inputs[0], inputs[1]);
                let mut s = vec![];
                if tracked_in(self, &r) {
                    s.push(l);
                }
                if tracked_in(self, &l) && r != l {
                    s.push(r);
                }
                s
            }
            Op::Div => {
                let (l, r) = (inputs[0], inputs[1]);
                let mut s = vec![];
                if tracked_in(self, &r) {
                    s.push(l);
                }
                if (tracked_in(self, &l) || tracked_in(self, &r)) && r != l {
                    s.push(r);
                }
                s
            }
            Op::Unary(_) | Op::Sigmoid => vec![inputs[0]],
            Op::Custom { .. } => inputs.clone(),
            _ => vec![],
        };
        let saves = if tracked { saves } else { vec![] };
        self.nodes.push(Node {
            name: name.to_string(),
            op,
            shape,
            inputs,
            saves,
            tracked,
        });
        TensorId(self.nodes.len() - 1)
    }

    /// Shape of a tensor.
    pub fn shape(&self, t: TensorId) -> &Shape {
        &self.nodes[t.0].shape
    }

    /// A trainable parameter.
    pub fn param(&mut self, name: &str, shape: impl Into<Shape>) -> TensorId {
        self.push(name, Op::Param, shape.into(), vec![])
    }

    /// An activation from upstream that requires grad (`tracked`) or not (data).
    pub fn input(&mut self, name: &str, shape: impl Into<Shape>, tracked: bool) -> TensorId {
        let id = self.push(name, Op::Input, shape.into(), vec![]);
        self.nodes[id.0].tracked = tracked;
        id
    }

    /// `lhs.matmul(rhs)` on the last two dims.
    pub fn matmul(&mut self, name: &str, lhs: TensorId, rhs: TensorId) -> TensorId {
        let (l, r) = (self.shape(lhs).clone(), self.shape(rhs));
        let mut out = l.0.clone();
        *out.last_mut().expect("matmul of a scalar") = *r.0.last().expect("matmul of a scalar");
        self.push(name, Op::Matmul, Shape(out), vec![lhs, rhs])
    }

    /// `Linear::forward` without bias: `x.matmul(weight)`.
    pub fn linear(&mut self, name: &str, x: TensorId, weight: TensorId) -> TensorId {
        self.matmul(name, x, weight)
    }

    /// `t.slice(..)` on dimension `dim`, `start..end`, step 1.
    pub fn slice(&mut self, name: &str, t: TensorId, dim: usize, start: u64, end: u64) -> TensorId {
        let mut shape = self.shape(t).clone();
        shape.0[dim] = end - start;
        self.push(name, Op::Slice { dim, start, end }, shape, vec![t])
    }

    fn same(&mut self, name: &str, op: Op, inputs: Vec<TensorId>) -> TensorId {
        let shape = self.shape(inputs[0]).clone();
        self.push(name, op, shape, inputs)
    }

    /// `t.add_scalar(c)`.
    pub fn add_scalar(&mut self, name: &str, t: TensorId) -> TensorId {
        self.same(name, Op::Scalar("add_scalar"), vec![t])
    }
    /// `t.mul_scalar(c)`.
    pub fn mul_scalar(&mut self, name: &str, t: TensorId) -> TensorId {
        self.same(name, Op::Scalar("mul_scalar"), vec![t])
    }
    /// `t.div_scalar(c)`.
    pub fn div_scalar(&mut self, name: &str, t: TensorId) -> TensorId {
        self.same(name, Op::Scalar("div_scalar"), vec![t])
    }
    /// `lhs + rhs`.
    pub fn add(&mut self, name: &str, lhs: TensorId, rhs: TensorId) -> TensorId {
        self.same(name, Op::AddSub("add"), vec![lhs, rhs])
    }
    /// `lhs - rhs`.
    pub fn sub(&mut self, name: &str, lhs: TensorId, rhs: TensorId) -> TensorId {
        self.same(name, Op::AddSub("sub"), vec![lhs, rhs])
    }
    /// `lhs * rhs`.
    pub fn mul(&mut self, name: &str, lhs: TensorId, rhs: TensorId) -> TensorId {
        self.same(name, Op::Mul, vec![lhs, rhs])
    }
    /// `lhs / rhs`.
    pub fn div(&mut self, name: &str, lhs: TensorId, rhs: TensorId) -> TensorId {
        self.same(name, Op::Div, vec![lhs, rhs])
    }
    /// `t.tanh()`.
    pub fn tanh(&mut self, name: &str, t: TensorId) -> TensorId {
        self.same(name, Op::Unary("tanh"), vec![t])
    }
    /// `t.exp()`.
    pub fn exp(&mut self, name: &str, t: TensorId) -> TensorId {
        self.same(name, Op::Unary("exp"), vec![t])
    }
    /// `activation::sigmoid(t)`.
    pub fn sigmoid(&mut self, name: &str, t: TensorId) -> TensorId {
        self.same(name, Op::Sigmoid, vec![t])
    }
    /// `activation::silu(t)`, which burn-tensor 0.21 writes as `t.clone().mul(sigmoid(t))`.
    pub fn silu(&mut self, name: &str, t: TensorId) -> TensorId {
        let s = self.sigmoid(&format!("{name}.sigmoid"), t);
        self.mul(name, t, s)
    }
    /// `t.sum()` / `t.mean()` to one element.
    pub fn reduce(&mut self, name: &str, kind: &'static str, t: TensorId) -> TensorId {
        self.push(name, Op::Reduce(kind), Shape(vec![1]), vec![t])
    }
    /// A custom compute-bound kernel with its own backward.
    pub fn custom(
        &mut self,
        name: &str,
        inputs: Vec<TensorId>,
        out: impl Into<Shape>,
        backward_temps: Vec<Shape>,
    ) -> TensorId {
        self.push(
            name,
            Op::Custom {
                name: name.to_string(),
                backward_temps,
            },
            out.into(),
            inputs,
        )
    }

    /// Marks a tensor as the layer's output: the caller owns it after forward.
    pub fn output(&mut self, t: TensorId) {
        self.outputs.push(t);
    }

    /// Applies burn 0.21's rules for `checkpointing` on `backend`.
    pub fn ledger(&self, checkpointing: Checkpointing, backend: Backend) -> Ledger {
        analysis::Analysis::new(self, checkpointing, backend).run()
    }
}

/// How an op's output gets its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Storage {
    /// Lives elsewhere (parameter, upstream input): not this layer's allocation.
    External,
    /// A fresh buffer from the pool.
    New,
    /// A zero-copy view of another tensor's buffer.
    View(TensorId),
    /// Written into an input's buffer.
    InPlace(TensorId),
    /// Not materialized: fused into the next kernel (Fusion backend).
    Fused,
}

/// Why a tensor is, or is not, alive when backward starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Kept {
    /// Freed during forward.
    No,
    /// Held until backward by the named consumer's checkpoint.
    Saved(String),
    /// Held until backward as Balanced's backup of a compute-bound parent.
    Backup(String),
    /// Saved, but recomputed in backward (Balanced, memory-bound): nothing held.
    Recomputed(String),
    /// The layer's output: the caller decides.
    Output,
    /// Not the layer's memory (parameter, input).
    External,
}

/// One row of the per-call table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerRow {
    /// The tensor the row is about.
    pub tensor: TensorId,
    /// Its name in the graph (`gate = mid[:, :f]`…).
    pub name: String,
    /// The op that made it, as burn names it.
    pub op: String,
    /// Its shape.
    pub shape: Shape,
    /// Bytes the output reserves from the pool when it is a new buffer (0 otherwise).
    pub bytes: u64,
    /// Where its memory comes from.
    pub storage: Storage,
    /// Why it is, or is not, alive when backward starts.
    pub kept: Kept,
    /// A fresh buffer nobody keeps under this tensor's own name, held until backward because
    /// a later tensor was written into it (in place of a view of it) and is kept.
    pub buffer_kept_by: Option<TensorId>,
    /// The op's family, for timelines.
    #[serde(skip)]
    pub family: Family,
}

impl LedgerRow {
    /// The "why" column, in words.
    pub fn why(&self) -> String {
        match &self.kept {
            Kept::No if self.buffer_kept_by.is_some() => {
                let by = self.buffer_kept_by.map_or(0, |t| t.0);
                format!("its buffer stays: #{by} is written into it and kept for backward")
            }
            Kept::No => match self.storage {
                Storage::View(p) => format!("view of #{}; nothing keeps it", p.0),
                Storage::Fused => "fused into the next kernel".into(),
                _ => "no consumer keeps it: freed after its last use".into(),
            },
            Kept::Saved(by) => format!("{by} keeps it for backward"),
            Kept::Backup(by) => {
                format!("compute-bound output feeding memory-bound {by}: backed up until backward")
            }
            Kept::Recomputed(by) => format!("{by} needs it, recomputed in backward"),
            Kept::Output => "layer output, owned by the caller".into(),
            Kept::External => "parameter or input, not this layer's memory".into(),
        }
    }

    /// Cells for a table: op, name, shape, bytes, storage, kept, why.
    pub fn cells(&self) -> [String; 7] {
        let storage = match self.storage {
            Storage::External => "external".to_string(),
            Storage::New => "new".to_string(),
            Storage::View(p) => format!("view of #{}", p.0),
            Storage::InPlace(p) => format!("in place of #{}", p.0),
            Storage::Fused => "fused".to_string(),
        };
        let kept = match self.kept {
            Kept::Saved(_) | Kept::Backup(_) => "yes",
            Kept::Output => "output",
            Kept::No if self.buffer_kept_by.is_some() => "its buffer",
            _ => "no",
        };
        [
            format!("#{} {}", self.tensor.0, self.op),
            self.name.clone(),
            self.shape.to_string(),
            self.bytes.to_string(),
            storage,
            kept.to_string(),
            self.why(),
        ]
    }
}

/// The per-call table plus what the trace needs to replay the call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ledger {
    /// The strategy whose rules were applied.
    pub checkpointing: Checkpointing,
    /// The backend whose rules were applied.
    pub backend: Backend,
    /// One row per tensor, in graph order.
    pub rows: Vec<LedgerRow>,
    /// Buffer owner of every tensor (itself, or the tensor whose buffer it shares).
    pub buffer_of: Vec<TensorId>,
    /// Forward: for every node, the buffers (by owner) that die right after it.
    pub forward_frees: Vec<Vec<TensorId>>,
    /// Buffers held when backward starts (by owner), with their bytes.
    pub held: Vec<(TensorId, u64)>,
    /// Balanced backups that nothing recomputes: released when the checkpointer is built, as
    /// backward starts.
    pub released_at_backward: Vec<TensorId>,
    /// The call's backward as pool events, replayed the way burn runs it (`ledger/backward.rs`).
    pub backward: Vec<BackwardEvent>,
    /// What each buffer backward allocates is, by its number in [`BackwardEvent::Alloc`].
    pub backward_labels: Vec<Label>,
    /// The layer's outputs: the caller owns them after forward.
    pub outputs: Vec<TensorId>,
    /// The parameters, with their bytes (a gradient's too).
    pub params: Vec<(TensorId, u64)>,
}

impl Ledger {
    /// Bytes held when backward starts.
    pub fn held_bytes(&self) -> u64 {
        self.held.iter().map(|(_, b)| b).sum()
    }

    /// Number of buffers held when backward starts (the seed's "live intermediates").
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// The most bytes forward has in use at once, over what it starts with: each fresh buffer
    /// allocated in op order, each freed after its last forward use (views, in-place writes and
    /// fused intermediates allocate nothing).
    pub fn forward_peak(&self) -> u64 {
        let (mut now, mut peak) = (0u64, 0u64);
        for (i, row) in self.rows.iter().enumerate() {
            if row.storage == Storage::New {
                now += row.bytes;
                peak = peak.max(now);
            }
            for owner in &self.forward_frees[i] {
                if self.rows[owner.0].storage == Storage::New {
                    now -= self.rows[owner.0].bytes;
                }
            }
        }
        peak
    }
}

impl fmt::Display for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| op | tensor | shape | bytes | storage | kept | why |")?;
        writeln!(f, "|---|---|---|---:|---|---|---|")?;
        for r in &self.rows {
            let c = r.cells();
            writeln!(
                f,
                "| {} | {} | {} | {} | {} | {} | {} |",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6]
            )?;
        }
        write!(
            f,
            "\nheld until backward: {} buffers, {} bytes",
            self.held_count(),
            self.held_bytes()
        )
    }
}

#[cfg(test)]
mod tests;
