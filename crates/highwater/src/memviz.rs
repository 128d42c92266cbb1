//! A trace as PyTorch's CUDA memory snapshot, the file `torch.cuda.memory._dump_snapshot`
//! writes and memory_viz (pytorch.org/memory_viz, `torch.cuda._memory_viz`) opens: a pickled
//! dict with `segments` (the pool's pages when the trace ends, each tiled by its blocks) and
//! `device_traces` (one list of events for device 0).
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

use crate::memtrace::{Action, MemEvent, MemTrace};
use crate::pickle::{Value, to_pickle};
use crate::pool::CUDA_ALIGNMENT;

/// Where the made-up addresses start: high in a 47-bit space like CUDA's, and far below 2⁵³,
/// above which memory_viz's reader loses precision.
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;

/// Pages are laid out on boundaries of this size, so addresses read as page-aligned.
const PAGE_ALIGN: u64 = 2 << 20;

/// `trace` as a memory snapshot, pickled (protocol 4).
pub fn snapshot_pickle(trace: &MemTrace) -> Vec<u8> {
    to_pickle(&snapshot(trace))
}

/// `trace` as a memory snapshot, before pickling.
pub fn snapshot(trace: &MemTrace) -> Value {
    let bases = page_bases(trace);
    let address = |e: &MemEvent| bases[&e.page] + e.offset;
    let frames_of = |e: &MemEvent| {
        let l = trace.label(e);
        let phase = serde_json::to_value(e.phase).expect("a phase serializes");
        Value::List(vec![Value::dict([
            (
                "filename",
                Value::str(format!("{} ({})", l.tensor, l.family.name())),
            ),
            ("line", int(e.step)),
            (
                "name",
                Value::str(format!(
                    "{} in step {} {}",
                    l.op,
                    e.step,
                    phase.as_str().unwrap_or("")
                )),
            ),
        ])])
    };
    let mut events = vec![];
    // Pages held and slices live when the trace ends, by page: the final `segments`.
    let mut held: BTreeMap<u32, u64> = BTreeMap::new();
    let mut live: BTreeMap<u64, &MemEvent> = BTreeMap::new();
    let mut reserved = 0u64;
    for (seq, e) in trace.events.iter().enumerate() {
        let frames = frames_of(e);
        let entry = |action: &str, addr: u64, size: u64, frames: Value| {
            Value::dict([
                ("action", Value::str(action)),
                ("addr", int(addr)),
                ("size", int(size)),
                ("stream", Value::Int(0)),
                ("time_us", int(seq as u64)),
                ("frames", frames),
            ])
        };
        match e.action {
            Action::PageHeld | Action::PageAlloc => {
                held.insert(e.page, e.page_bytes);
                reserved += e.page_bytes;
                events.push(entry("segment_alloc", bases[&e.page], e.page_bytes, frames));
            }
            Action::PageRelease => {
                held.remove(&e.page);
                reserved -= e.page_bytes;
                events.push(entry("segment_free", bases[&e.page], e.page_bytes, frames));
            }
            Action::Live | Action::Reserve => {
                live.insert(address(e), e);
                events.push(entry("alloc", address(e), block_size(e), frames));
            }
            Action::Free => {
                live.remove(&address(e));
                events.push(entry(
                    "free_requested",
                    address(e),
                    block_size(e),
                    frames.clone(),
                ));
                events.push(entry("free_completed", address(e), block_size(e), frames));
            }
            Action::OutOfMemory => events.push(Value::dict([
                ("action", Value::str("oom")),
                ("device_free", int(trace.capacity.saturating_sub(reserved))),
                ("size", int(e.bytes)),
                ("stream", Value::Int(0)),
                ("time_us", int(seq as u64)),
                ("frames", frames),
            ])),
        }
    }
    let segments = segments(&held, &live, &bases, &frames_of);
    Value::dict([
        ("segments", Value::List(segments)),
        ("device_traces", Value::List(vec![Value::List(events)])),
    ])
}

/// The final `segments`: each page held when the trace ends, its live slices as active
/// blocks and the gaps between them as inactive ones.
fn segments(
    held: &BTreeMap<u32, u64>,
    live: &BTreeMap<u64, &MemEvent>,
    bases: &BTreeMap<u32, u64>,
    frames_of: &dyn Fn(&MemEvent) -> Value,
) -> Vec<Value> {
    held.iter()
        .map(|(&page, &bytes)| {
            let base = bases[&page];
            let mut blocks = vec![];
            let (mut at, mut active, mut requested) = (0u64, 0u64, 0u64);
            let gap = |from: u64, to: u64, blocks: &mut Vec<Value>| {
                if to > from {
                    blocks.push(Value::dict([
                        ("address", int(base + from)),
                        ("size", int(to - from)),
                        ("requested_size", int(0)),
                        ("state", Value::str("inactive")),
                        ("frames", Value::List(vec![])),
                    ]));
                }
            };
            for (_, e) in live.range(base..base + bytes) {
                gap(at, e.offset, &mut blocks);
                let size = block_size(e).min(bytes - e.offset);
                blocks.push(Value::dict([
                    ("address", int(base + e.offset)),
                    ("size", int(size)),
                    ("requested_size", int(e.bytes)),
                    ("state", Value::str("active_allocated")),
                    ("frames", frames_of(e)),
                ]));
                at = e.offset + size;
                active += size;
                requested += e.bytes;
            }
            gap(at, bytes, &mut blocks);
            Value::dict([
                ("device", Value::Int(0)),
                ("address", int(base)),
                ("total_size", int(bytes)),
                ("allocated_size", int(active)),
                ("active_size", int(active)),
                ("requested_size", int(requested)),
                ("stream", Value::Int(0)),
                ("segment_type", Value::str("large")),
                (
                    "segment_pool_id",
                    Value::Tuple(vec![Value::Int(0), Value::Int(0)]),
                ),
                ("is_expandable", Value::Bool(false)),
                ("frames", Value::List(vec![])),
                ("blocks", Value::List(blocks)),
            ])
        })
        .collect()
}

/// A slice's bytes as the pool lays it out: rounded up to the alignment.
/// A byte count or an address as the snapshot's integers.
fn int(v: u64) -> Value {
    Value::Int(v as i64)
}

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
