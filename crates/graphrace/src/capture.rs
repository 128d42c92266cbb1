//! Capture: the host's [`Program`] run once through the [`Pool`], as `torch.cuda.graph` does.
//! What comes out is the [`Graph`]: every tensor's address range and lifetime, and every kernel
//! as a node with its dependencies (stream order plus the waits) and its vector clock.
//!
//! A vector clock holds, per stream, how many of that stream's kernels are known to have
//! finished before this point. Kernel `a` happens before `b` iff `a.clock[a.stream] <=
//! b.clock[a.stream]`. The clocks are computed here, once, from the same edges the replay
//! follows, so the static check and the replay cannot disagree about the graph.

use std::ops::Range;

use serde::Serialize;

use crate::pool::{Pool, Rules};
use crate::program::{Home, Kernel, Op, Program, Stream, Tensor, TensorId};

/// Per stream: kernels of that stream ordered before this point.
pub type Clock = [u32; 2];

/// Addresses of tensors that live outside the pool start here, far from any pool block.
const STATIC_BASE: u64 = 1 << 44;

/// A program the host could not have run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// A kernel touches a tensor before its allocation or after its free.
    #[error("kernel `{kernel}` uses `{tensor}`, which is not allocated at that point")]
    NotLive {
        /// The kernel's name.
        kernel: String,
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor is allocated again while live.
    #[error("`{tensor}` is allocated twice")]
    AllocatedTwice {
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor is freed while not live.
    #[error("`{tensor}` is freed while not allocated")]
    NotAllocated {
        /// The tensor's name.
        tensor: String,
    },
    /// A static tensor (weights, caches) is handled as a pool tensor.
    #[error("`{tensor}` lives outside the pool and cannot be allocated, recorded or freed")]
    NotPooled {
        /// The tensor's name.
        tensor: String,
    },
    /// An op names a tensor index past the program's table.
    #[error("the program refers to tensor #{0}, which it does not declare")]
    UnknownTensor(usize),
    /// More sessions than [`MAX_SESSIONS`](crate::MAX_SESSIONS).
    #[error("{sessions} sessions is more than the {max} the simulator takes")]
    TooManySessions {
        /// Asked for.
        sessions: u32,
        /// The limit.
        max: u32,
    },
}

/// Where and when a tensor lived.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Placement {
    /// The bytes the tensor occupies: `sessions × row_bytes` from the block's start.
    pub range: Range<u64>,
    /// The block the pool handed out (at least `range`).
    pub block: Range<u64>,
    /// The stream the block was allocated on (its pool tag); `Main` for statics.
    pub stream: Stream,
    /// Position of the allocation among the program's ops.
    pub alloc_op: usize,
    /// Position of the free; `None` if the program never frees it.
    pub free_op: Option<usize>,
    /// The allocating stream's clock when the host freed it: the pool hands the block to that
    /// stream's later work, which is ordered after everything this clock covers.
    pub free_clock: Option<Clock>,
    /// Streams whose use was recorded with `record_stream`.
    pub recorded: Vec<Stream>,
}

/// One access of a kernel to a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Access {
    /// What is accessed.
    pub tensor: TensorId,
    /// A write (else a read).
    pub write: bool,
}

/// A kernel in the captured graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// The kernel launched.
    pub kernel: Kernel,
    /// Nodes that must finish before this one starts.
    pub deps: Vec<usize>,
    /// Per stream, its kernels known to finish before this one starts (see the module docs).
    pub clock: Clock,
    /// Its reads and writes, in the kernel's order.
    pub accesses: Vec<Access>,
}

impl Node {
    /// `self` finishes before `other` starts in every replay.
    pub fn happens_before(&self, other: &Node) -> bool {
        let s = self.kernel.stream.index();
        self.clock[s] <= other.clock[s] && self.clock != other.clock
    }
}

/// The captured step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Graph {
    /// Concurrent sessions the step was captured for.
    pub sessions: u32,
    /// The program's tensors, indexed by [`TensorId`].
    pub tensors: Vec<Tensor>,
    /// Per tensor; `None` for a pool tensor the program never allocated.
    pub placements: Vec<Option<Placement>>,
    /// The kernels in launch order.
    pub nodes: Vec<Node>,
    /// Bytes the pool took from the device.
    pub pool_bytes: u64,
}

impl Graph {
    /// The tensor named `name`, if the program has one.
    pub fn tensor(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(TensorId)
    }

    /// The node that launches kernel `name` (its first launch), by its index in [`Graph::nodes`].
    pub fn node(&self, kernel: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.kernel.name == kernel)
    }

    /// The name the program gave `t`.
    pub fn tensor_name(&self, t: TensorId) -> &str {
        &self.tensors[t.0].name
    }

    /// The tensors whose bytes overlap those of the tensor named `name`, itself left out, in the
    /// program's order; empty when no placed tensor has that name.
    pub fn sharing_bytes_with(&self, name: &str) -> Vec<TensorId> {
        let placed = |i: usize| self.placements[i].as_ref().map(|p| p.range.clone());
        let Some((k, kr)) = self.tensor(name).and_then(|k| Some((k.0, placed(k.0)?))) else {
            return vec![];
        };
        (0..self.tensors.len())
            .filter(|&i| i != k && placed(i).is_some_and(|r| r.start < kr.end && kr.start < r.end))
            .map(TensorId)
            .collect()
    }

    /// Where and when `t` lived; panics for a pool tensor never allocated (no kernel accesses
    /// one).
    pub fn placement(&self, t: TensorId) -> &Placement {
        self.placements[t.0]
            .as_ref()
            .expect("accessed tensors are placed")
    }
}

/// Runs the host program through a fresh pool.
pub fn capture(program: &Program) -> Result<Graph, CaptureError> {
    capture_with(program, Rules::PyTorch)
}

/// [`capture`] through a pool under other `rules` (to read GPU records made with them).
#[expect(
    clippy::too_many_lines,
    reason = "one interpreter loop, a match over every `Op` kind, all arms updating the same pool, \
              placements, liveness, clocks and nodes: split, each arm would take all of them"
)]
pub fn capture_with(program: &Program, rules: Rules) -> Result<Graph, CaptureError> {
    let mut pool = Pool::with_rules(rules);
    let mut placements: Vec<Option<Placement>> = vec![None; program.tensors.len()];
    let mut live = vec![false; program.tensors.len()];
    let name = |t: TensorId| program.tensors[t.0].name.clone();
    let known = |t: TensorId| {
        if t.0 < program.tensors.len() {
            Ok(t)
        } else {
            Err(CaptureError::UnknownTensor(t.0))
        }
    };
    let mut static_at = STATIC_BASE;
    for (i, t) in program.tensors.iter().enumerate() {
        if t.home == Home::Static {
            let bytes = t.row_bytes * u64::from(program.sessions);
            placements[i] = Some(Placement {
                range: static_at..static_at + bytes,
                block: static_at..static_at + bytes,
                stream: Stream::Main,
                alloc_op: 0,
                free_op: None,
                free_clock: None,
                recorded: vec![],
            });
            live[i] = true;
            static_at += bytes.next_multiple_of(1 << 20) + (1 << 20);
        }
    }
    let pooled = |t: TensorId| {
        if program.tensors[t.0].home == Home::Pool {
            Ok(t)
        } else {
            Err(CaptureError::NotPooled { tensor: name(t) })
        }
    };

    let mut frontier: [Clock; 2] = [[0; 2]; 2];
    let mut last: [Option<usize>; 2] = [None; 2];
    let mut waits: [Vec<usize>; 2] = [vec![], vec![]];
    let mut nodes: Vec<Node> = vec![];
    for (at, op) in program.ops.iter().enumerate() {
        match op {
            Op::Alloc { tensor, stream } => {
                let t = pooled(known(*tensor)?)?;
                if placements[t.0].is_some() {
                    return Err(CaptureError::AllocatedTwice { tensor: name(t) });
                }
                let bytes = program.bytes(t);
                let block = pool.alloc(bytes, *stream);
                placements[t.0] = Some(Placement {
                    range: block.start..block.start + bytes,
                    block,
                    stream: *stream,
                    alloc_op: at,
                    free_op: None,
                    free_clock: None,
                    recorded: vec![],
                });
                live[t.0] = true;
            }
            Op::Free { tensor } => {
                let t = pooled(known(*tensor)?)?;
                let p = placements[t.0].as_mut().filter(|_| live[t.0]);
                let Some(p) = p else {
                    return Err(CaptureError::NotAllocated { tensor: name(t) });
                };
                let recorded = p.recorded.iter().any(|s| *s != p.stream);
                pool.free(p.block.start, recorded);
                p.free_op = Some(at);
                p.free_clock = Some(frontier[p.stream.index()]);
                live[t.0] = false;
            }
            Op::RecordStream { tensor, stream } => {
                let t = pooled(known(*tensor)?)?;
                match placements[t.0].as_mut().filter(|_| live[t.0]) {
                    Some(p) if !p.recorded.contains(stream) => p.recorded.push(*stream),
                    Some(_) => {}
                    None => return Err(CaptureError::NotAllocated { tensor: name(t) }),
                }
            }
            Op::Wait { waiter, on } => {
                let (w, o) = (waiter.index(), on.index());
                let seen = frontier[o];
                for (mine, theirs) in frontier[w].iter_mut().zip(seen) {
                    *mine = (*mine).max(theirs);
                }
                waits[w].extend(last[o]);
            }
            Op::Launch(kernel) => {
                let s = kernel.stream.index();
                let mut accesses = vec![];
                for (list, write) in [(&kernel.reads, false), (&kernel.writes, true)] {
                    for t in list {
                        let t = known(*t)?;
                        if !live[t.0] {
                            return Err(CaptureError::NotLive {
                                kernel: kernel.name.clone(),
                                tensor: name(t),
                            });
                        }
                        accesses.push(Access { tensor: t, write });
                    }
                }
                frontier[s][s] += 1;
                let mut deps: Vec<usize> = last[s].into_iter().collect();
                deps.append(&mut waits[s]);
                deps.sort_unstable();
                deps.dedup();
                last[s] = Some(nodes.len());
                nodes.push(Node {
                    kernel: kernel.clone(),
                    deps,
                    clock: frontier[s],
                    accesses,
                });
            }
        }
    }
    pool.end_capture();
    Ok(Graph {
        sessions: program.sessions,
        tensors: program.tensors.clone(),
        placements,
        nodes,
        pool_bytes: pool.usage().reserved(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Cost;
    use Stream::*;

    const C: Cost = Cost {
        fixed_us: 1.0,
        per_session_us: 0.0,
    };

    #[test]
    fn a_freed_block_is_shared_with_the_tensor_that_reuses_it() {
        let mut p = Program::new(1);
        let a = p.alloc("a", Main, 4096);
        let b = p.alloc("b", Main, 4096);
        p.launch("m1", Main, C, &[], &[a, b]);
        p.free(a);
        let c = p.alloc("c", Main, 4096);
        p.launch("m2", Main, C, &[b], &[c]);
        let g = capture(&p).unwrap();
        assert_eq!(g.sharing_bytes_with("a"), vec![c]);
        assert_eq!(g.sharing_bytes_with("c"), vec![a]);
        assert!(g.sharing_bytes_with("b").is_empty());
        assert!(g.sharing_bytes_with("nothing").is_empty());
    }

    #[test]
    fn clocks_follow_fork_and_join() {
        let mut p = Program::new(1);
        let a = p.alloc("a", Main, 4096);
        p.launch("m1", Main, C, &[], &[a]);
        p.wait(Side, Main);
        p.launch("s1", Side, C, &[a], &[]);
        p.launch("m2", Main, C, &[], &[a]);
        p.wait(Main, Side);
        p.launch("m3", Main, C, &[a], &[]);
        let g = capture(&p).unwrap();
        let [m1, s1, m2, m3] = [0, 1, 2, 3].map(|i| &g.nodes[i]);
        assert_eq!(s1.deps, vec![0]);
        assert_eq!(m3.deps, vec![1, 2]);
        assert!(m1.happens_before(s1));
        assert!(!s1.happens_before(m2) && !m2.happens_before(s1));
        assert!(s1.happens_before(m3) && m2.happens_before(m3));
        assert_eq!(m3.clock, [3, 1]);
    }

    #[test]
    fn a_free_remembers_the_allocating_streams_clock() {
        let mut p = Program::new(4);
        let a = p.alloc("a", Main, 1 << 20);
        p.launch("m1", Main, C, &[], &[a]);
        p.wait(Side, Main);
        p.launch("s1", Side, C, &[a], &[]);
        p.free(a);
        let b = p.alloc("b", Main, 1 << 20);
        let g = capture(&p).unwrap();
        let (pa, pb) = (g.placement(a), g.placement(b));
        assert_eq!(pa.free_clock, Some([1, 0]));
        assert_eq!(pa.block, pb.block, "the block went straight back to main");
    }

    #[test]
    fn using_a_freed_tensor_is_refused() {
        let mut p = Program::new(1);
        let a = p.alloc("a", Main, 8);
        p.free(a);
        p.launch("late", Main, C, &[a], &[]);
        assert_eq!(
            capture(&p).unwrap_err(),
            CaptureError::NotLive {
                kernel: "late".into(),
                tensor: "a".into()
            }
        );
        let mut p = Program::new(1);
        let s = p.fixed("cache", 8);
        p.free(s);
        assert!(matches!(capture(&p), Err(CaptureError::NotPooled { .. })));
    }
}
