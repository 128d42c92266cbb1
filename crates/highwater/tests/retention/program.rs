//! One small graph, written once, run two ways: as highwater's [`Graph`] (the ledger's
//! prediction) and on real burn 0.21.0 (`Autodiff<NdArray, C>`, measured by the counting
//! allocator).

use burn::backend::NdArray;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, Tensor, activation};
use highwater::ledger::{Kept, Storage};
use highwater::{Backend, Checkpointing, DType, Graph, Ledger, TensorId};

use super::counting::{Counting, LARGE, Snapshot};

/// A value of a [`Program`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct V(usize);

#[derive(Debug, Clone)]
enum Op {
    Input {
        shape: [usize; 2],
        tracked: bool,
    },
    Param {
        shape: [usize; 2],
    },
    Matmul(V, V),
    Tanh(V),
    Exp(V),
    Sigmoid(V),
    Silu(V),
    Mul(V, V),
    Add(V, V),
    MulScalar(V),
    DivScalar(V),
    Slice {
        t: V,
        dim: usize,
        start: usize,
        end: usize,
    },
    Sum(V),
}

impl Op {
    fn args(&self) -> Vec<V> {
        match *self {
            Op::Input { .. } | Op::Param { .. } => vec![],
            Op::Matmul(a, b) | Op::Mul(a, b) | Op::Add(a, b) => vec![a, b],
            Op::Tanh(a)
            | Op::Exp(a)
            | Op::Sigmoid(a)
            | Op::Silu(a)
            | Op::MulScalar(a)
            | Op::DivScalar(a)
            | Op::Sum(a) => vec![a],
            Op::Slice { t, .. } => vec![t],
        }
    }

    fn is_leaf(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Param { .. })
    }
}

/// A straight-line f32 graph of 2-D tensors (a `sum` may only be the output), mirroring the
/// [`Graph`] builder call for call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Program {
    ops: Vec<(String, Op)>,
    output: Option<V>,
}

impl Program {
    fn push(&mut self, name: &str, op: Op) -> V {
        if let Some(Op::Sum(_)) = self.ops.last().map(|o| &o.1) {
            panic!("a sum may only be the output");
        }
        self.ops.push((name.to_string(), op));
        V(self.ops.len() - 1)
    }
    pub(crate) fn input(&mut self, name: &str, shape: [usize; 2], tracked: bool) -> V {
        self.push(name, Op::Input { shape, tracked })
    }
    pub(crate) fn param(&mut self, name: &str, shape: [usize; 2]) -> V {
        self.push(name, Op::Param { shape })
    }
    pub(crate) fn matmul(&mut self, name: &str, a: V, b: V) -> V {
        self.push(name, Op::Matmul(a, b))
    }
    pub(crate) fn tanh(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::Tanh(a))
    }
    pub(crate) fn exp(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::Exp(a))
    }
    pub(crate) fn sigmoid(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::Sigmoid(a))
    }
    pub(crate) fn silu(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::Silu(a))
    }
    pub(crate) fn mul(&mut self, name: &str, a: V, b: V) -> V {
        self.push(name, Op::Mul(a, b))
    }
    pub(crate) fn add(&mut self, name: &str, a: V, b: V) -> V {
        self.push(name, Op::Add(a, b))
    }
    pub(crate) fn mul_scalar(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::MulScalar(a))
    }
    pub(crate) fn div_scalar(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::DivScalar(a))
    }
    pub(crate) fn slice(&mut self, name: &str, t: V, dim: usize, start: usize, end: usize) -> V {
        self.push(name, Op::Slice { t, dim, start, end })
    }
    pub(crate) fn sum(&mut self, name: &str, a: V) -> V {
        self.push(name, Op::Sum(a))
    }
    pub(crate) fn output(&mut self, v: V) {
        assert!(self.output.is_none(), "one output");
        self.output = Some(v);
    }

    fn out(&self) -> V {
        self.output.expect("the program has an output")
    }

    /// The same graph through highwater's builder, and the node of every value.
    pub(crate) fn graph(&self) -> (Graph, Vec<TensorId>) {
        let mut g = Graph::new(DType::F32);
        let mut id: Vec<TensorId> = Vec::with_capacity(self.ops.len());
        for (name, op) in &self.ops {
            let t = |v: V| id[v.0];
            let u = |n: usize| n as u64;
            let node = match *op {
                Op::Input { shape, tracked } => g.input(name, shape.map(u), tracked),
                Op::Param { shape } => g.param(name, shape.map(u)),
                Op::Matmul(a, b) => g.matmul(name, t(a), t(b)),
                Op::Tanh(a) => g.tanh(name, t(a)),
                Op::Exp(a) => g.exp(name, t(a)),
                Op::Sigmoid(a) => g.sigmoid(name, t(a)),
                Op::Silu(a) => g.silu(name, t(a)),
                Op::Mul(a, b) => g.mul(name, t(a), t(b)),
                Op::Add(a, b) => g.add(name, t(a), t(b)),
                Op::MulScalar(a) => g.mul_scalar(name, t(a)),
                Op::DivScalar(a) => g.div_scalar(name, t(a)),
                Op::Slice {
                    t: a,
                    dim,
                    start,
                    end,
                } => g.slice(name, t(a), dim, u(start), u(end)),
                Op::Sum(a) => g.reduce(name, "sum", t(a)),
            };
            id.push(node);
        }
        g.output(id[self.out().0]);
        (g, id)
    }

    /// Ops that are not leaves.
    pub(crate) fn ops(&self) -> usize {
        self.ops.iter().filter(|(_, op)| !op.is_leaf()).count()
    }

    /// Logical bytes of the output tensor.
    pub(crate) fn output_bytes(&self) -> usize {
        let (g, id) = self.graph();
        g.shape(id[self.out().0]).numel() as usize * 4
    }

    /// The ledger's prediction under `ckpt` (Cube backend: the unfused one).
    pub(crate) fn ledger(&self, ckpt: Checkpointing) -> Ledger {
        self.graph().0.ledger(ckpt, Backend::Cube)
    }

    /// Runs forward on `Autodiff<NdArray, C>`, drops every value the user code holds except
    /// the leaves (parameters and inputs: the model and the upstream layer own them) and the
    /// output, and returns what the forward pass left on the heap. Then runs backward (so the
    /// graph is complete and burn's global autodiff state is emptied again).
    pub(crate) fn run<C: CheckpointStrategy>(&self) -> Snapshot {
        self.run_on::<Autodiff<NdArray<f32>, C>, _, _>(
            &Default::default(),
            Counting::start,
            Counting::finish,
        )
    }

    /// [`Program::run`] on any autodiff backend: `start` is called once the leaves exist,
    /// `finish` (with what `start` returned) once forward has run and the user code holds only
    /// the leaves and the output; backward runs after.
    pub(crate) fn run_on<B: AutodiffBackend, S, M>(
        &self,
        device: &B::Device,
        start: impl FnOnce() -> S,
        finish: impl FnOnce(S) -> M,
    ) -> M {
        let device = device.clone();
        let mut uses = vec![0usize; self.ops.len()];
        for (_, op) in &self.ops {
            for a in op.args() {
                uses[a.0] += 1;
            }
        }
        let out = self.out();
        let mut vals: Vec<Option<Tensor<B, 2>>> = vec![None; self.ops.len()];
        let mut loss: Option<Tensor<B, 1>> = None;
        // Leaves before the baseline: they are not the layer's memory.
        for (i, (_, op)) in self.ops.iter().enumerate() {
            let leaf = |shape: [usize; 2]| {
                Tensor::<B, 2>::random(shape, Distribution::Uniform(-1.0, 1.0), &device)
            };
            vals[i] = match *op {
                Op::Input {
                    shape,
                    tracked: false,
                } => Some(leaf(shape)),
                Op::Input { shape, .. } | Op::Param { shape } => Some(leaf(shape).require_grad()),
                _ => None,
            };
        }
        let started = start();
        for (i, (_, op)) in self.ops.iter().enumerate() {
            if op.is_leaf() {
                continue;
            }
            // Move a value into its last use (as model code does), clone it otherwise: burn's
            // in-place paths depend on the handle being unique.
            let mut arg = |v: V| {
                uses[v.0] -= 1;
                if uses[v.0] == 0 && !self.ops[v.0].1.is_leaf() && v != out {
                    vals[v.0].take().expect("value alive")
                } else {
                    vals[v.0].clone().expect("value alive")
                }
            };
            let y = match *op {
                Op::Matmul(a, b) => {
                    let (a, b) = (arg(a), arg(b));
                    a.matmul(b)
                }
                Op::Tanh(a) => arg(a).tanh(),
                Op::Exp(a) => arg(a).exp(),
                Op::Sigmoid(a) => activation::sigmoid(arg(a)),
                Op::Silu(a) => activation::silu(arg(a)),
                Op::Mul(a, b) => {
                    let (a, b) = (arg(a), arg(b));
                    a.mul(b)
                }
                Op::Add(a, b) => {
                    let (a, b) = (arg(a), arg(b));
                    a.add(b)
                }
                Op::MulScalar(a) => arg(a).mul_scalar(1.5),
                Op::DivScalar(a) => arg(a).div_scalar(3.0),
                Op::Slice { t, dim, start, end } => {
                    let t = arg(t);
                    let [rows, cols] = t.dims();
                    let mut r = [0..rows, 0..cols];
                    r[dim] = start..end;
                    t.slice(r)
                }
                Op::Sum(a) => {
                    loss = Some(arg(a).sum());
                    continue;
                }
                Op::Input { .. } | Op::Param { .. } => unreachable!(),
            };
            vals[i] = Some(y);
        }
        // Everything but the leaves and the output is gone by now (moved into its last use).
        let output = vals[out.0].take();
        for (i, v) in vals.iter_mut().enumerate() {
            if !self.ops[i].1.is_leaf() {
                assert!(v.is_none(), "value #{i} still held by the user code");
            }
        }
        let measured = finish(started);
        match (output, loss) {
            (Some(t), None) => drop(t.backward()),
            (None, Some(l)) => drop(l.backward()),
            _ => unreachable!(),
        }
        drop(vals);
        measured
    }
}

/// The heap the ledger predicts for a [`Program::run`] on burn-ndarray: the logical size
/// (elements × 4 bytes) of every tensor the ledger says autodiff keeps until backward
/// (`Kept::Saved` by a consumer's checkpoint, `Kept::Backup` of Balanced), plus the output,
/// keeping those of at least [`LARGE`] bytes (all tensors of the graphs here are; a `sum` is
/// not). Ascending.
///
/// Comparable between the ledger and burn-ndarray: *which tensors autodiff keeps alive, and
/// how many elements each has* — burn-autodiff's op bodies and checkpointer are the same code
/// over NdArray and over CubeCL. Also comparable: in-place reuse, which both backends do only
/// when the input's handle is unique (CubeCL `can_mut`, ndarray's `ArcArray` copy-on-write),
/// and a kept tensor's handle never is — so on ndarray every kept tensor has a buffer of its
/// own, of exactly its logical size.
///
/// Not comparable, so not tested here: CubeCL's layout — pitched rows and 512-byte rounding
/// (the ledger's `bytes` column; ndarray allocates exactly elements × 4) — and views.
/// burn-cubecl 0.21 makes a slice at 512-byte-aligned offsets a view of its parent
/// (`kernel/index/slice.rs`), so on CUDA a kept slice keeps the parent's whole buffer (the
/// ledger's `held`, by buffer owner); burn-ndarray 0.21 copies every slice
/// (`NdArrayOps::slice`: `slice_move(..).to_shared()` of a view), so there a kept slice keeps
/// only its own elements.
pub(crate) fn predicted(l: &Ledger) -> Vec<usize> {
    let logical = |t: TensorId| l.rows[t.0].shape.numel() as usize * 4;
    let mut sizes: Vec<usize> = kept(l).into_iter().map(logical).collect();
    for o in &l.outputs {
        if !kept(l).contains(o) && l.rows[o.0].storage != Storage::External {
            sizes.push(logical(*o));
        }
    }
    sizes.retain(|&s| s >= LARGE);
    sizes.sort_unstable();
    sizes
}

/// Tensors the ledger says autodiff keeps until backward (not the caller's leaves).
pub(crate) fn kept(l: &Ledger) -> Vec<TensorId> {
    l.rows
        .iter()
        .filter(|r| matches!(r.kept, Kept::Saved(_) | Kept::Backup(_)))
        .map(|r| r.tensor)
        .collect()
}

/// Rows the ledger says are held until backward, for messages.
pub(crate) fn held_rows(l: &Ledger) -> Vec<String> {
    l.rows
        .iter()
        .filter(|r| matches!(r.kept, Kept::Saved(_) | Kept::Backup(_)))
        .map(|r| format!("#{} {} {} ({})", r.tensor.0, r.name, r.shape, r.why()))
        .collect()
}
