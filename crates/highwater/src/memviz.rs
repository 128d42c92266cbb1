//! A trace as PyTorch's CUDA memory snapshot, the file `torch.cuda.memory._dump_snapshot`
//! writes and memory_viz (pytorch.org/memory_viz, `torch.cuda._memory_viz`) opens: a pickled
//! dict with `segments` (the pool's pages when the trace ends, each tiled by its blocks) and
//! `device_traces` (one list of events for device 0). The types below are that dict's schema;
//! `serde-pickle` writes them as protocol 2 (structs as dicts, tuples as tuples), whose opcodes
//! every reader takes: CPython's and memory_viz's own JavaScript one (protocols 2 to 4, no
//! classes).
//!
//! How our events map onto PyTorch's:
//! - a page is a segment; pages get made-up addresses, one after another in page order, so
//!   a slice's address is its page's plus its offset (CubeCL's own, from the trace);
//! - a page held or allocated is `segment_alloc`, a page given back is `segment_free`;
//! - a live or reserved slice is `alloc`, a free is `free_requested` then `free_completed` (the
//!   pool reuses a slice at once: no stream waits on it), a refusal is `oom`;
//! - the size of a slice is its bytes rounded up to the pool's 512-byte alignment, as the pool
//!   lays slices out, so blocks tile their segment; `requested_size` is the tensor's bytes;
//! - there is no clock: `time_us` is the event's position in the trace;
//! - a frame names the tensor, its op and family, the step and phase: memory_viz shows it as
//!   the allocation's stack.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::memtrace::{Action, MemEvent, MemTrace};
use crate::pool::CUDA_ALIGNMENT;

/// Where the made-up addresses start: high in a 47-bit space like CUDA's, and far below 2⁵³,
/// above which memory_viz's reader loses precision.
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;

/// Pages are laid out on boundaries of this size, so addresses read as page-aligned.
const PAGE_ALIGN: u64 = 2 << 20;

/// What `torch.cuda.memory._snapshot()` returns, as far as memory_viz reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// The pool's pages when the trace ends.
    pub segments: Vec<Segment>,
    /// Per device, its events in order; only device 0.
    pub device_traces: Vec<Vec<TraceEntry>>,
}

/// A page of the pool, tiled by its blocks in address order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// Always 0.
    pub device: u32,
    /// Its made-up address.
    pub address: u64,
    /// The page's bytes.
    pub total_size: u64,
    /// Bytes of its live blocks.
    pub allocated_size: u64,
    /// The same: no block waits on a stream.
    pub active_size: u64,
    /// Bytes the live blocks' tensors asked for.
    pub requested_size: u64,
    /// Always stream 0.
    pub stream: u32,
    /// `large`: PyTorch's name for pages of its large pool.
    pub segment_type: &'static str,
    /// PyTorch's private-pool id; `(0, 0)` is the default pool.
    pub segment_pool_id: (u32, u32),
    /// No expandable segments.
    pub is_expandable: bool,
    /// Where the segment was made: none.
    pub frames: Vec<Frame>,
    /// Its live slices (`active_allocated`) and the gaps between them (`inactive`).
    pub blocks: Vec<Block>,
}

/// A slice of a page, or a gap between slices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// Its address: the page's plus its offset.
    pub address: u64,
    /// Its bytes, as the pool lays it out.
    pub size: u64,
    /// Its tensor's bytes (0 for a gap).
    pub requested_size: u64,
    /// `active_allocated` or `inactive`.
    pub state: &'static str,
    /// Its tensor, as a one-frame stack (none for a gap).
    pub frames: Vec<Frame>,
}

/// One event of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEntry {
    /// `alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`, `oom`.
    pub action: &'static str,
    /// The slice's or page's address (none for `oom`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    /// For `oom`: the bytes the card had left outside the pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    /// The bytes of the slice, the page or the refused request.
    pub size: u64,
    /// Always stream 0.
    pub stream: u32,
    /// The event's position in the trace: there is no clock.
    pub time_us: u64,
    /// The tensor, as a one-frame stack.
    pub frames: Vec<Frame>,
}

/// A stack frame, which memory_viz shows as where an allocation came from: here the tensor,
/// its op and family, the step and phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frame {
    /// The tensor and its family.
    pub filename: String,
    /// The step.
    pub line: u64,
    /// The op, the step and the phase.
    pub name: String,
}

/// `trace` as a memory snapshot, pickled (protocol 2).
pub fn snapshot_pickle(trace: &MemTrace) -> Vec<u8> {
    let options = serde_pickle::SerOptions::new().proto_v2();
    serde_pickle::to_vec(&snapshot(trace), options).expect("a snapshot is plain data")
}

/// `trace` as a memory snapshot, before pickling.
pub fn snapshot(trace: &MemTrace) -> Snapshot {
    let bases = page_bases(trace);
    let address = |e: &MemEvent| bases[&e.page] + e.offset;
    let frames_of = |e: &MemEvent| {
        let l = trace.label(e);
        let phase = serde_json::to_value(e.phase).expect("a phase serializes");
        vec![Frame {
            filename: format!("{} ({})", l.tensor, l.family.name()),
            line: e.step,
            name: format!(
                "{} in step {} {}",
                l.op,
                e.step,
                phase.as_str().unwrap_or("")
            ),
        }]
    };
    let mut events = vec![];
    // Pages held and slices live when the trace ends, by page: the final `segments`.
    let mut held: BTreeMap<u32, u64> = BTreeMap::new();
    let mut live: BTreeMap<u64, &MemEvent> = BTreeMap::new();
    let mut reserved = 0u64;
    for (seq, e) in trace.events.iter().enumerate() {
        let entry = |action, addr, size| TraceEntry {
            action,
            addr: Some(addr),
            device_free: None,
            size,
            stream: 0,
            time_us: seq as u64,
            frames: frames_of(e),
        };
        match e.action {
            Action::PageHeld | Action::PageAlloc => {
                held.insert(e.page, e.page_bytes);
                reserved += e.page_bytes;
                events.push(entry("segment_alloc", bases[&e.page], e.page_bytes));
            }
            Action::PageRelease => {
                held.remove(&e.page);
                reserved -= e.page_bytes;
                events.push(entry("segment_free", bases[&e.page], e.page_bytes));
            }
            Action::Live | Action::Reserve => {
                live.insert(address(e), e);
                events.push(entry("alloc", address(e), block_size(e)));
            }
            Action::Free => {
                live.remove(&address(e));
                events.push(entry("free_requested", address(e), block_size(e)));
                events.push(entry("free_completed", address(e), block_size(e)));
            }
            Action::OutOfMemory => events.push(TraceEntry {
                addr: None,
                device_free: Some(trace.capacity.saturating_sub(reserved)),
                ..entry("oom", 0, e.bytes)
            }),
        }
    }
    Snapshot {
        segments: segments(&held, &live, &bases, &frames_of),
        device_traces: vec![events],
    }
}

/// The final `segments`: each page held when the trace ends, its live slices as active
/// blocks and the gaps between them as inactive ones.
fn segments(
    held: &BTreeMap<u32, u64>,
    live: &BTreeMap<u64, &MemEvent>,
    bases: &BTreeMap<u32, u64>,
    frames_of: &dyn Fn(&MemEvent) -> Vec<Frame>,
) -> Vec<Segment> {
    held.iter()
        .map(|(&page, &bytes)| {
            let base = bases[&page];
            let mut blocks = vec![];
            let (mut at, mut active, mut requested) = (0u64, 0u64, 0u64);
            let gap = |from: u64, to: u64, blocks: &mut Vec<Block>| {
                if to > from {
                    blocks.push(Block {
                        address: base + from,
                        size: to - from,
                        requested_size: 0,
                        state: "inactive",
                        frames: vec![],
                    });
                }
            };
            for (_, e) in live.range(base..base + bytes) {
                gap(at, e.offset, &mut blocks);
                let size = block_size(e).min(bytes - e.offset);
                blocks.push(Block {
                    address: base + e.offset,
                    size,
                    requested_size: e.bytes,
                    state: "active_allocated",
                    frames: frames_of(e),
                });
                at = e.offset + size;
                active += size;
                requested += e.bytes;
            }
            gap(at, bytes, &mut blocks);
            Segment {
                device: 0,
                address: base,
                total_size: bytes,
                allocated_size: active,
                active_size: active,
                requested_size: requested,
                stream: 0,
                segment_type: "large",
                segment_pool_id: (0, 0),
                is_expandable: false,
                frames: vec![],
                blocks,
            }
        })
        .collect()
}

/// A slice's bytes as the pool lays it out: rounded up to the alignment.
fn block_size(e: &MemEvent) -> u64 {
    e.bytes.next_multiple_of(CUDA_ALIGNMENT)
}

/// Each page's made-up address, in page order, every page on a [`PAGE_ALIGN`] boundary.
fn page_bases(trace: &MemTrace) -> BTreeMap<u32, u64> {
    let mut sizes: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &trace.events {
        if matches!(e.action, Action::PageHeld | Action::PageAlloc) {
            sizes.insert(e.page, e.page_bytes);
        }
    }
    let mut next = BASE_ADDRESS;
    sizes
        .into_iter()
        .map(|(page, bytes)| {
            let base = next;
            next = (next + bytes).next_multiple_of(PAGE_ALIGN);
            (page, base)
        })
        .collect()
}
