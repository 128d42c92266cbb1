//! A PyTorch CUDA memory snapshot read back: the pickle `torch.cuda.memory._dump_snapshot`
//! writes after `_record_memory_history` (PyTorch 2.1 to 2.11), turned into the request stream
//! [`crate::caching::replay`] takes, so a real program's requests can be replayed under
//! another card or another `PYTORCH_CUDA_ALLOC_CONF`.
//!
//! What a real snapshot holds, and how each is read:
//! - **`device_traces`**: per device, the allocator's history: `alloc`, `free_requested`,
//!   `free_completed`, `segment_*`, `oom`, `snapshot`. A tensor is free for reuse at its
//!   `free_completed` (a `free_requested` alone waits on a stream's event); the segment
//!   events are the recorded allocator's own and are not replayed: the model makes its own.
//! - **The ring buffer.** History keeps the last `max_entries` events, so a trace may start
//!   mid-run. Tensors made before its first event show up as a `free_completed` of an address
//!   never allocated, or as a block in use in `segments` (the state at the dump) that no
//!   `alloc` made. They are allocated first, in address order, and the answer says how many
//!   and how many bytes: what the allocator had cached before the trace is not known.
//! - **Streams** are numbered as they first appear; a block is reused only on its stream.
//! - **CUDA graph private pools**: a request at an address of a private pool's segment (as
//!   the dump has it) is replayed in that pool, whose blocks no other request gets.
//! - **Steps** come from `external_annotations`: each `Optimizer.step` ends a step, and the
//!   next starts at the first request after it. Without them the trace is one step.
//! - **A refused request** (`oom`) was made and never served: it is replayed as a request,
//!   since the program asked for it. The recorded run ended there.
//! - **Settings**: `allocator_settings` (2.5 on) says how the recorded allocator was set.

mod pickle;
mod read;
mod verdict;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use pickle::{Node, Pickle};
use read::{Doc, kind};
pub use verdict::{Refused, Verdict, settings_worth_trying, smallest_fit, verdict};

use crate::caching::{Event, Setting};
use crate::pool::StreamId;

/// The largest pickle read: a snapshot of two million events (the most a history usually
/// keeps) with short stacks is well under it; more is refused before parsing.
pub const MAX_PICKLE_BYTES: usize = 2 << 30;

/// The most memory a replay's device has (1 TiB, past any card): a limit above it is taken
/// as it, and a request above it is a broken file. It also keeps an expandable segment within
/// the address span the model gives each.
pub const MAX_DEVICE_BYTES: u64 = 1 << 40;

/// The largest request replayed.
pub const MAX_REQUEST_BYTES: u64 = MAX_DEVICE_BYTES;

/// The most streams a replay tells apart.
pub const MAX_STREAMS: usize = 1024;

/// Why a file is not a snapshot this reader can replay.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Not a pickle at all, or cut short.
    #[error(
        "not a readable pickle ({0}); a snapshot is what torch.cuda.memory._dump_snapshot writes"
    )]
    NotPickle(String),
    /// Over [`MAX_PICKLE_BYTES`].
    #[error("{0} B is more than the {MAX_PICKLE_BYTES} B a snapshot is read up to")]
    TooLarge(usize),
    /// A pickle, but not of a memory snapshot.
    #[error(
        "not a PyTorch memory snapshot: {0} (torch.cuda.memory._dump_snapshot writes a dict with `segments` and `device_traces`)"
    )]
    NotSnapshot(String),
    /// A field of the snapshot is missing or of the wrong kind.
    #[error("`{field}`: {reason}")]
    Field {
        /// Where, as `device_traces[0][12].size`.
        field: String,
        /// What was wrong.
        reason: String,
    },
    /// Recorded without history: nothing to replay.
    #[error(
        "no allocator history: every device trace is empty. Record with torch.cuda.memory._record_memory_history(max_entries=...) before the steps, then _dump_snapshot"
    )]
    NoHistory,
    /// An action this reader does not know: a version it was not written for.
    #[error(
        "`{field}`: action `{action}` is not one PyTorch 2.1 to 2.11 records (a newer or older snapshot format)"
    )]
    UnknownAction {
        /// Where.
        field: String,
        /// The action.
        action: String,
    },
    /// More streams than a replay tells apart.
    #[error("the trace uses more than {MAX_STREAMS} streams")]
    TooManyStreams,
    /// History on more than one device and none chosen.
    #[error("history on devices {0:?}: choose one")]
    SeveralDevices(Vec<usize>),
    /// The chosen device has no history.
    #[error("device {0} has no history in this snapshot")]
    NoSuchDevice(usize),
}

/// A snapshot's allocator event, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A block handed out (`size`: the tensor's bytes).
    Alloc,
    /// The tensor was freed; its block waits on stream events.
    FreeRequested,
    /// The block is free for reuse (older versions: `free`).
    FreeCompleted,
    /// `cudaMalloc` of a segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Expandable segments mapped pages.
    SegmentMap,
    /// Expandable segments unmapped pages.
    SegmentUnmap,
    /// A snapshot was taken.
    Snapshot,
    /// A request refused (`size`: the rounded request).
    Oom,
    /// A user's own marker.
    UserDefined,
}

impl Action {
    fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" | "free" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            "user_defined" => Action::UserDefined,
            _ => return None,
        })
    }
}

/// One frame of a recorded stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function.
    pub name: String,
    /// Its file (`??` when the unwinder did not know it).
    pub filename: String,
    /// Its line (0: unknown).
    pub line: u64,
}

/// One event of a device's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// The block's or segment's address (`device_free` for an `oom`).
    pub addr: u64,
    /// Its bytes.
    pub size: u64,
    /// The stream, as the recorded process named it.
    pub stream: u64,
    /// Microseconds, on the host's clock.
    pub time_us: i64,
    /// Where it was asked for.
    pub stack: Arc<Stack>,
}

/// A recorded stack, reduced to what names a request to its reader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    /// The Python frames, innermost first.
    pub python: Vec<Frame>,
    /// The op that asked, from the C++ frames: the autograd node for a request made in
    /// backward (`NllLossBackward0`; that thread has no Python frames), else the ATen op
    /// (`addmm`).
    pub op: Option<String>,
}

/// A block of a segment when the snapshot was dumped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAtDump {
    /// Its address.
    pub address: u64,
    /// Its bytes.
    pub size: u64,
    /// The tensor's bytes, for a block in use.
    pub requested_size: u64,
    /// Handed out (`active_allocated`, or freed and awaiting its stream, `active_pending_free`).
    pub in_use: bool,
}

/// A segment when the snapshot was dumped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentAtDump {
    /// Its address.
    pub address: u64,
    /// Its bytes.
    pub total_size: u64,
    /// The stream it belongs to.
    pub stream: u64,
    /// The CUDA graph private pool it belongs to (`segment_pool_id`), if not the ordinary one.
    pub private_pool: Option<(i64, i64)>,
    /// Its blocks in address order.
    pub blocks: Vec<BlockAtDump>,
}

/// A snapshot, read.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// How the recorded allocator was set, when the snapshot says (PyTorch 2.5 on).
    pub setting: Option<Setting>,
    /// The segments at the dump.
    pub segments: Vec<SegmentAtDump>,
    /// The replayed device's history.
    pub events: Vec<TraceEvent>,
    /// When each `Optimizer.step` ended, in order (microseconds).
    pub optimizer_steps: Vec<i64>,
    /// The device whose history this is.
    pub device: usize,
}

/// A snapshot's requests as [`crate::caching::replay`] takes them, and what was inferred on
/// the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requests {
    /// The events to replay.
    pub events: Vec<Event>,
    /// For each of [`Requests::events`], the index in [`Snapshot::events`] it came from
    /// (`None`: a tensor made before the trace's first event).
    pub origin: Vec<Option<usize>>,
    /// Tensors already alive when the trace starts (the ring buffer had dropped their
    /// `alloc`): how many, and their bytes.
    pub before_trace: (usize, u64),
    /// The step the trace starts in: 1, unless the ring buffer dropped the steps before it
    /// (the optimizer's annotations are kept whole).
    pub first_step: u64,
    /// The last step: steps are counted from 1 (the trace is one step when it has no
    /// optimizer annotations).
    pub steps: u64,
    /// Whether steps came from annotations.
    pub annotated: bool,
    /// Streams that made requests.
    pub streams: usize,
    /// The request the recorded run refused, as an index into [`Requests::events`].
    pub recorded_refusal: Option<usize>,
    /// CUDA graph private pools in the dump. A request at an address of one of their segments
    /// is replayed as that pool's (blocks of a pool are never handed to another); a segment a
    /// pool gave back before the dump is not known, and its requests count as the ordinary
    /// pool's.
    pub private_pools: usize,
}

/// Reads a snapshot from its pickle's bytes; `device` picks the device when more than one has
/// history.
pub fn read(bytes: &[u8], device: Option<usize>) -> Result<Snapshot, SnapshotError> {
    if bytes.len() > MAX_PICKLE_BYTES {
        return Err(SnapshotError::TooLarge(bytes.len()));
    }
    let pickle = Pickle::parse(bytes).map_err(SnapshotError::NotPickle)?;
    let doc = Doc {
        p: &pickle,
        stacks: RefCell::new(HashMap::new()),
    };
    let top = match pickle.node(pickle.top) {
        Node::Dict(_) => pickle.top,
        other => {
            return Err(SnapshotError::NotSnapshot(format!(
                "the pickle holds {}, not a dict",
                kind(other)
            )));
        }
    };
    let (Some(segments), Some(traces)) = (doc.get(top, "segments"), doc.get(top, "device_traces"))
    else {
        return Err(SnapshotError::NotSnapshot(
            "it has no `segments` and `device_traces`".into(),
        ));
    };
    let traces = doc.list(traces, "device_traces")?;
    let with_history: Vec<usize> = traces
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(pickle.node(**t), Node::List(l) if !l.is_empty()))
        .map(|(i, _)| i)
        .collect();
    let device = match (device, with_history.as_slice()) {
        (_, []) => return Err(SnapshotError::NoHistory),
        (Some(d), _) if !with_history.contains(&d) => return Err(SnapshotError::NoSuchDevice(d)),
        (Some(d), _) => d,
        (None, [d]) => *d,
        (None, _) => return Err(SnapshotError::SeveralDevices(with_history)),
    };
    let path = format!("device_traces[{device}]");
    let events = doc
        .list(traces[device], &path)?
        .iter()
        .enumerate()
        .map(|(i, &e)| doc.event(e, &format!("{path}[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let segments = doc
        .list(segments, "segments")?
        .iter()
        .enumerate()
        .map(|(i, &s)| doc.segment(s, &format!("segments[{i}]"), device))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let setting = match doc.get(top, "allocator_settings") {
        Some(s) => Some(doc.settings(s, "allocator_settings")?),
        None => None,
    };
    let optimizer_steps = match doc.get(top, "external_annotations") {
        Some(a) => doc.annotations(a, device)?,
        None => Vec::new(),
    };
    Ok(Snapshot {
        setting,
        segments,
        events,
        optimizer_steps,
        device,
    })
}

impl Snapshot {
    /// Where the recorded driver put each segment, in `cudaMalloc`'s order.
    pub fn placed_segments(&self) -> Vec<(u64, u64)> {
        self.events
            .iter()
            .filter(|e| e.action == Action::SegmentAlloc)
            .map(|e| (e.addr, e.size))
            .collect()
    }

    /// The requests to replay: see the module doc.
    pub fn requests(&self) -> Result<Requests, SnapshotError> {
        let mut streams: HashMap<u64, StreamId> = HashMap::new();
        let mut stream_of = |s: u64| -> Result<StreamId, SnapshotError> {
            let n = streams.len();
            if n >= MAX_STREAMS && !streams.contains_key(&s) {
                return Err(SnapshotError::TooManyStreams);
            }
            Ok(*streams.entry(s).or_insert(StreamId(n as u32)))
        };
        let pools = Pools::of(&self.segments);
        // Tensors by address while alive; ids are the alloc's index in the trace, and
        // `len + k` for the k-th tensor made before the trace.
        let mut live: HashMap<u64, u64> = HashMap::new();
        // Tensors made before the trace, by address: (id, bytes, stream).
        let mut before: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
        let first_id = self.events.len() as u64;
        let mut body: Vec<(Event, usize)> = Vec::new();
        let mut recorded_refusal = None;
        let step_ends = &self.optimizer_steps;
        // A trace cut by the ring buffer starts after the steps whose ends came before it.
        let start = self.events.first().map_or(0, |e| e.time_us);
        let mut next_end = step_ends.partition_point(|&t| t < start);
        let first_step = 1 + next_end as u64;
        let mut step = first_step;
        let mut ended = 0;
        for (i, e) in self.events.iter().enumerate() {
            while next_end < step_ends.len() && e.time_us > step_ends[next_end] {
                next_end += 1;
                ended += 1;
            }
            match e.action {
                Action::Alloc | Action::Oom => {
                    if ended > 0 {
                        step += ended;
                        body.push((Event::Step(step), i));
                        ended = 0;
                    }
                    self.within_any_card(e, i)?;
                    let stream = match e.action {
                        Action::Oom => stream_of(e.stream)?,
                        _ => stream_of(pools.key(e.addr, e.stream))?,
                    };
                    if e.action == Action::Oom {
                        recorded_refusal.get_or_insert(body.len());
                    } else {
                        live.insert(e.addr, i as u64);
                    }
                    let bytes = e.size;
                    body.push((
                        Event::Alloc {
                            id: i as u64,
                            bytes,
                            stream,
                        },
                        i,
                    ));
                }
                Action::FreeCompleted => match live.remove(&e.addr) {
                    Some(id) => body.push((Event::Free { id }, i)),
                    None if !before.contains_key(&e.addr) && e.size <= MAX_REQUEST_BYTES => {
                        let id = first_id + before.len() as u64;
                        before.insert(e.addr, (id, e.size, pools.key(e.addr, e.stream)));
                        body.push((Event::Free { id }, i));
                    }
                    None => {}
                },
                _ => {}
            }
        }
        self.alive_through(&mut before, &pools);
        let mut events = vec![Event::Step(first_step)];
        let mut origin = vec![None];
        let mut before_bytes = 0;
        for &(id, bytes, stream) in before.values() {
            before_bytes += bytes;
            events.push(Event::Alloc {
                id,
                bytes,
                stream: stream_of(stream)?,
            });
            origin.push(None);
        }
        let shift = events.len();
        for (event, i) in body {
            events.push(event);
            origin.push(Some(i));
        }
        Ok(Requests {
            events,
            origin,
            before_trace: (before.len(), before_bytes),
            first_step,
            steps: step,
            annotated: !step_ends.is_empty(),
            streams: streams.len(),
            recorded_refusal: recorded_refusal.map(|r| r + shift),
            private_pools: pools.count,
        })
    }
    /// Refuses a request past any card: a broken file, not a job.
    fn within_any_card(&self, e: &TraceEvent, i: usize) -> Result<(), SnapshotError> {
        if e.size <= MAX_REQUEST_BYTES {
            return Ok(());
        }
        Err(SnapshotError::Field {
            field: format!("device_traces[{}][{i}].size", self.device),
            reason: format!("{} B is past any card ({MAX_REQUEST_BYTES} B)", e.size),
        })
    }

    /// Adds to `before` the blocks in use at the dump that no `alloc` of the trace made
    /// (alive through the whole trace).
    fn alive_through(&self, before: &mut BTreeMap<u64, (u64, u64, u64)>, pools: &Pools) {
        let first_id = self.events.len() as u64;
        let made: HashSet<u64> = self
            .events
            .iter()
            .filter(|e| e.action == Action::Alloc)
            .map(|e| e.addr)
            .collect();
        for s in &self.segments {
            for b in s.blocks.iter().filter(|b| b.in_use) {
                if !made.contains(&b.address)
                    && !before.contains_key(&b.address)
                    && b.size <= MAX_REQUEST_BYTES
                {
                    let id = first_id + before.len() as u64;
                    let bytes = if b.requested_size > 0 {
                        b.requested_size
                    } else {
                        b.size
                    };
                    before.insert(b.address, (id, bytes, pools.key(b.address, s.stream)));
                }
            }
        }
    }
}

/// The CUDA graph private pools of a dump, by the address ranges of their segments.
struct Pools {
    /// `(start, end, key)` by start; a pool's key has the top bit set, which no stream (a
    /// pointer, or 0) has.
    ranges: Vec<(u64, u64, u64)>,
    count: usize,
}

impl Pools {
    fn of(segments: &[SegmentAtDump]) -> Pools {
        let mut ids: Vec<(i64, i64)> = Vec::new();
        let mut ranges = Vec::new();
        for s in segments {
            let Some(id) = s.private_pool else { continue };
            let ordinal = ids.iter().position(|&p| p == id).unwrap_or_else(|| {
                ids.push(id);
                ids.len() - 1
            });
            let end = s.address.saturating_add(s.total_size);
            ranges.push((s.address, end, 1 << 63 | ordinal as u64));
        }
        ranges.sort_unstable();
        Pools {
            ranges,
            count: ids.len(),
        }
    }

    /// What a request at `addr` on `stream` is replayed on: its pool's key inside a private
    /// pool's segment, else its stream.
    fn key(&self, addr: u64, stream: u64) -> u64 {
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        match i.checked_sub(1).map(|i| self.ranges[i]) {
            Some((_, end, key)) if addr < end => key,
            _ => stream,
        }
    }
}

#[cfg(test)]
mod tests;
