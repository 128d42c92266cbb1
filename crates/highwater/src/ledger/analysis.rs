//! The forward analysis: what each op keeps, where its output lives, and the backward replay.

use super::*;

/// Whether `k` holds its tensor's buffer until backward.
fn holds(k: &Kept) -> bool {
    matches!(k, Kept::Saved(_) | Kept::Backup(_) | Kept::Output)
}

pub(super) struct Analysis<'a> {
    g: &'a Graph,
    ckpt: Checkpointing,
    backend: Backend,
    consumers: Vec<Vec<usize>>,
}

impl<'a> Analysis<'a> {
    pub(super) fn new(g: &'a Graph, ckpt: Checkpointing, backend: Backend) -> Self {
        let mut consumers = vec![vec![]; g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            for inp in &n.inputs {
                if !consumers[inp.0].contains(&i) {
                    consumers[inp.0].push(i);
                }
            }
        }
        Self {
            g,
            ckpt,
            backend,
            consumers,
        }
    }

    /// The compute property burn assigns a node under this strategy.
    fn effective(&self, i: usize) -> Bound {
        let n = &self.g.nodes[i];
        match (n.op.bound(), self.ckpt) {
            (Bound::Leaf, _) => Bound::Leaf,
            (_, Checkpointing::None) => Bound::Compute,
            (Bound::Memory, Checkpointing::Balanced) => {
                // An untracked parent cannot be checkpointed: the op falls back to compute-bound.
                if n.inputs.iter().all(|p| self.g.nodes[p.0].tracked) {
                    Bound::Memory
                } else {
                    Bound::Compute
                }
            }
            (b, _) => b,
        }
    }

    /// Which tensors something holds until backward, and why.
    fn kept(&self) -> Vec<Kept> {
        let g = self.g;
        let mut kept: Vec<Kept> = g
            .nodes
            .iter()
            .map(|nd| match nd.op {
                Op::Param | Op::Input => Kept::External,
                _ => Kept::No,
            })
            .collect();
        for (i, nd) in g.nodes.iter().enumerate() {
            if !nd.tracked {
                continue;
            }
            let by = format!("#{} {}", i, nd.op.label());
            for s in &nd.saves {
                if matches!(kept[s.0], Kept::External) {
                    continue;
                }
                match self.effective(s.0) {
                    Bound::Memory => {
                        if matches!(kept[s.0], Kept::No) {
                            kept[s.0] = Kept::Recomputed(by.clone());
                        }
                    }
                    _ => kept[s.0] = Kept::Saved(by.clone()),
                }
            }
            if self.effective(i) == Bound::Memory {
                for p in &nd.inputs {
                    let pb = self.effective(p.0);
                    if pb == Bound::Compute && matches!(kept[p.0], Kept::No | Kept::Recomputed(_)) {
                        kept[p.0] = Kept::Backup(by.clone());
                    }
                }
            }
        }
        for o in &g.outputs {
            if matches!(kept[o.0], Kept::No | Kept::Recomputed(_)) {
                kept[o.0] = Kept::Output;
            }
        }
        kept
    }

    /// Where each node's output lives (a view, in place, fused, new), and the buffer it is on.
    /// The last node that reads tensor `t`, if any does.
    fn last_use(&self, t: usize) -> Option<usize> {
        self.consumers[t].iter().copied().max()
    }

    fn storage(&self, kept: &[Kept]) -> (Vec<Storage>, Vec<TensorId>) {
        let g = self.g;
        let n = g.nodes.len();
        let dtype = g.dtype;
        let mut storage = vec![Storage::New; n];
        let mut buffer_of: Vec<TensorId> = (0..n).map(TensorId).collect();
        for i in 0..n {
            let nd = &g.nodes[i];
            storage[i] = match &nd.op {
                Op::Param | Op::Input => Storage::External,
                Op::Slice { dim, start, end } => {
                    let parent = &g.nodes[nd.inputs[0].0].shape;
                    let inner: u64 = parent.0[dim + 1..].iter().product();
                    let elem = dtype.size();
                    let off_start = start * inner * elem;
                    let off_end = (parent.0[*dim] - end) * inner * elem;
                    if off_start.is_multiple_of(CUDA_ALIGNMENT)
                        && off_end.is_multiple_of(CUDA_ALIGNMENT)
                    {
                        Storage::View(nd.inputs[0])
                    } else {
                        Storage::New
                    }
                }
                op if op.elementwise() => {
                    // In place into the first input whose handle is unique at this point.
                    let unique = |t: TensorId| {
                        let owner = buffer_of[t.0];
                        let shares = (0..i).any(|j| {
                            j != t.0
                                && buffer_of[j] == owner
                                && storage[j] != Storage::Fused
                                && (holds(&kept[j]) || self.last_use(j).is_some_and(|u| u >= i))
                        });
                        // Fusion writes a fused kernel's output to a fresh buffer rather than
                        // into a strided view of another tensor (measured on the H200: the SiTU
                        // tensor path's `u/c` then frees `mid` instead of pinning it, 32 MiB
                        // less per call than CubeBackend).
                        let fused_view = self.backend == Backend::Fusion
                            && matches!(storage[t.0], Storage::View(_));
                        !matches!(storage[t.0], Storage::External | Storage::Fused)
                            && !fused_view
                            && !holds(&kept[t.0])
                            && self.last_use(t.0) == Some(i)
                            && nd.inputs.iter().filter(|x| **x == t).count() == 1
                            && !shares
                            && g.nodes[t.0].shape == nd.shape
                    };
                    match nd.inputs.iter().copied().find(|t| unique(*t)) {
                        Some(t) => Storage::InPlace(t),
                        None => Storage::New,
                    }
                }
                _ => Storage::New,
            };
            // Fusion: an elementwise output nobody holds, read only by elementwise ops, stays in
            // registers.
            if self.backend == Backend::Fusion
                && nd.op.elementwise()
                && !holds(&kept[i])
                && !matches!(kept[i], Kept::Recomputed(_))
                && !self.consumers[i].is_empty()
                && self.consumers[i]
                    .iter()
                    .all(|&c| g.nodes[c].op.elementwise())
            {
                storage[i] = Storage::Fused;
            }
            buffer_of[i] = match storage[i] {
                Storage::View(p) | Storage::InPlace(p) => buffer_of[p.0],
                _ => TensorId(i),
            };
        }
        (storage, buffer_of)
    }

    /// The ledger: what each op keeps, where its output lives, and the backward replay.
    pub(super) fn run(self) -> Ledger {
        let g = self.g;
        let n = g.nodes.len();
        let dtype = g.dtype;
        let kept = self.kept();
        let (storage, buffer_of) = self.storage(&kept);

        // Forward liveness per buffer: until the last use of any tensor on it, unless held.
        let mut buffer_end: Vec<Option<usize>> = vec![None; n];
        let mut buffer_held = vec![false; n];
        for i in 0..n {
            if matches!(storage[i], Storage::External | Storage::Fused) {
                continue;
            }
            let o = buffer_of[i].0;
            let end = self.last_use(i).unwrap_or(i).max(i);
            buffer_end[o] = Some(buffer_end[o].map_or(end, |e: usize| e.max(end)));
            if holds(&kept[i]) {
                buffer_held[o] = true;
            }
        }
        let mut forward_frees = vec![vec![]; n];
        let mut held = vec![];
        for o in 0..n {
            if storage[o] != Storage::New {
                continue;
            }
            let is_output = g.outputs.iter().any(|t| buffer_of[t.0].0 == o);
            if buffer_held[o] && !is_output {
                held.push((TensorId(o), g.nodes[o].shape.bytes(dtype)));
            } else if is_output {
                // The caller frees it (see `crate::trace`).
            } else if let Some(end) = buffer_end[o] {
                forward_frees[end].push(TensorId(o));
            }
        }

        // Backward: burn's own pass, replayed on buffer handles.
        let replay = super::backward::replay(&super::backward::Forward {
            g,
            effective: (0..n).map(|i| self.effective(i)).collect(),
            storage: &storage,
            buffer_of: &buffer_of,
            backend: self.backend,
        });
        let released_at_backward: Vec<TensorId> = held
            .iter()
            .map(|&(o, _)| o)
            .filter(|o| !replay.held.contains(o))
            .collect();
        debug_assert!(
            replay.held.iter().all(|o| held.iter().any(|(h, _)| h == o)),
            "a checkpointer state holds a buffer forward did not keep"
        );

        let rows = (0..n)
            .map(|i| {
                let nd = &g.nodes[i];
                LedgerRow {
                    tensor: TensorId(i),
                    name: nd.name.clone(),
                    op: nd.op.label(),
                    shape: nd.shape.clone(),
                    bytes: if storage[i] == Storage::New {
                        nd.shape.bytes(dtype)
                    } else {
                        0
                    },
                    storage: storage[i],
                    kept: kept[i].clone(),
                    buffer_kept_by: (storage[i] == Storage::New && !holds(&kept[i]))
                        .then(|| (i + 1..n).find(|&j| buffer_of[j].0 == i && holds(&kept[j])))
                        .flatten()
                        .map(TensorId),
                    family: nd.op.family(),
                }
            })
            .collect();
        let of_kind = |op: fn(&Op) -> bool| {
            (0..n)
                .filter(|&i| op(&g.nodes[i].op))
                .map(|i| (TensorId(i), g.nodes[i].shape.bytes(dtype)))
                .collect::<Vec<_>>()
        };
        Ledger {
            checkpointing: self.ckpt,
            backend: self.backend,
            rows,
            buffer_of,
            forward_frees,
            held,
            released_at_backward,
            backward: replay.events,
            backward_labels: replay.labels,
            outputs: g.outputs.clone(),
            params: of_kind(|o| matches!(o, Op::Param)),
        }
    }
}
