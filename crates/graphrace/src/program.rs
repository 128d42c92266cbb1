//! What the host issues while a decode step is captured: allocations, kernel launches, frees,
//! `record_stream` calls and cross-stream waits, in host order. A [`Program`] is plain data; the
//! incident's step is [`crate::step::decode_step`], and tests build random ones.

use serde::{Deserialize, Serialize};

/// The two CUDA streams of the incident.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// The stream the step is launched (and captured) on.
    Main,
    /// The alternate stream that multi-stream overlap forks the indexer onto.
    Side,
}

impl Stream {
    /// Position in a vector clock.
    pub fn index(self) -> usize {
        match self {
            Stream::Main => 0,
            Stream::Side => 1,
        }
    }

    /// `main` or `side`, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Main => "main",
            Stream::Side => "side",
        }
    }
}

/// Index of a tensor in [`Program::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TensorId(pub usize);

/// Where a tensor's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Home {
    /// Handed out by the graph's private pool when the host allocates it.
    Pool,
    /// Allocated before capture and kept (graph inputs, caches): never reused by the pool.
    Static,
}

/// One tensor: a row of `row_bytes` per session.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tensor {
    /// Its name in the step (`index_k`, `logits`…).
    pub name: String,
    /// Bytes per session.
    pub row_bytes: u64,
    /// Pool or static.
    pub home: Home,
}

/// A kernel's nominal duration at `sessions` concurrent sessions: `fixed_us + per_session_us ×
/// sessions` microseconds (weights read once per step, activations per session).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Cost {
    /// µs whatever the sessions.
    pub fixed_us: f64,
    /// µs per session.
    pub per_session_us: f64,
}

impl Cost {
    /// The duration in µs at `sessions` sessions.
    pub fn at(&self, sessions: u32) -> f64 {
        self.fixed_us + self.per_session_us * f64::from(sessions)
    }
}

/// A kernel launch: what it reads and writes. Every access sweeps its tensor's rows in address
/// order over the kernel's duration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kernel {
    /// Its name in the step (`lm_head`…), which also keys its jitter.
    pub name: String,
    /// The stream it is launched on.
    pub stream: Stream,
    /// Its nominal duration.
    pub cost: Cost,
    /// Tensors it reads.
    pub reads: Vec<TensorId>,
    /// Tensors it writes.
    pub writes: Vec<TensorId>,
}

/// One host action during capture.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Op {
    /// `torch.empty(…)` with `stream` current: the pool hands out a block tagged with it.
    Alloc {
        /// The tensor allocated.
        tensor: TensorId,
        /// The current stream, whose pool the block comes from.
        stream: Stream,
    },
    /// A kernel launched on its stream.
    Launch(Kernel),
    /// The host drops its last reference. The pool sees only this moment, in host order, not
    /// when the GPU is done with the block.
    Free {
        /// The tensor freed.
        tensor: TensorId,
    },
    /// `tensor.record_stream(stream)`: the pool will not reuse the block before `stream`'s use
    /// is known to be over (during capture: not before the capture ends).
    RecordStream {
        /// The tensor used on another stream.
        tensor: TensorId,
        /// That stream.
        stream: Stream,
    },
    /// An event recorded on `on` and waited on by `waiter`: the fork (side waits on main) and the
    /// join (main waits on side) of multi-stream overlap.
    Wait {
        /// The stream that waits.
        waiter: Stream,
        /// The stream waited on: everything launched on it so far.
        on: Stream,
    },
}

/// A captured step as the host issued it, at a given concurrency.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Program {
    /// Concurrent sessions: one row of every tensor per session.
    pub sessions: u32,
    /// Every tensor, indexed by [`TensorId`].
    pub tensors: Vec<Tensor>,
    /// The host's actions, in order.
    pub ops: Vec<Op>,
}

impl Program {
    /// An empty program at `sessions` concurrent sessions.
    pub fn new(sessions: u32) -> Program {
        Program {
            sessions,
            ..Program::default()
        }
    }

    /// The tensor named `name`, if the program has one.
    pub fn tensor(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(TensorId)
    }

    fn push_tensor(&mut self, name: &str, row_bytes: u64, home: Home) -> TensorId {
        self.tensors.push(Tensor {
            name: name.to_string(),
            row_bytes,
            home,
        });
        TensorId(self.tensors.len() - 1)
    }

    /// A tensor that lives outside the graph pool for the whole run.
    pub fn fixed(&mut self, name: &str, row_bytes: u64) -> TensorId {
        self.push_tensor(name, row_bytes, Home::Static)
    }

    /// A tensor allocated from the pool now, on `stream`.
    pub fn alloc(&mut self, name: &str, stream: Stream, row_bytes: u64) -> TensorId {
        let tensor = self.push_tensor(name, row_bytes, Home::Pool);
        self.ops.push(Op::Alloc { tensor, stream });
        tensor
    }

    /// Launches kernel `name` on `stream`.
    pub fn launch(
        &mut self,
        name: &str,
        stream: Stream,
        cost: Cost,
        reads: &[TensorId],
        writes: &[TensorId],
    ) {
        self.ops.push(Op::Launch(Kernel {
            name: name.to_string(),
            stream,
            cost,
            reads: reads.to_vec(),
            writes: writes.to_vec(),
        }));
    }

    /// The host drops `tensor`: its block goes back to the pool now.
    pub fn free(&mut self, tensor: TensorId) {
        self.ops.push(Op::Free { tensor });
    }

    /// `tensor.record_stream(stream)`.
    pub fn record_stream(&mut self, tensor: TensorId, stream: Stream) {
        self.ops.push(Op::RecordStream { tensor, stream });
    }

    /// `waiter` waits for everything launched on `on` so far.
    pub fn wait(&mut self, waiter: Stream, on: Stream) {
        self.ops.push(Op::Wait { waiter, on });
    }

    /// Bytes of a tensor at this concurrency.
    pub fn bytes(&self, tensor: TensorId) -> u64 {
        self.tensors[tensor.0].row_bytes * u64::from(self.sessions)
    }
}
