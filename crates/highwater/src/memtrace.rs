//! Every allocation of a run, as data: one event per reserve, free, page and refusal, with the
//! tensor and op behind it, its page and offset (read from CubeCL's own books), the step and
//! the phase. The timeline view, the CLI's `--trace` JSON lines and the memory_viz export all
//! read this one stream.
//!
//! A trace covers a range of steps (bounded by [`crate::limits::MAX_TRACE_EVENTS`]); what is
//! already live when the range begins (weights, optimizer state, pages) opens the stream as
//! [`Action::PageHeld`] and [`Action::Live`] events, so the stream alone says where every byte
//! is. Within the range the simulator replays every step event by event: neither of its two
//! shortcuts (repeats proven from the boundary state, transients kept off the pool) is used,
//! since both would hide events. They change no figure (`run.rs`'s tests), only what is seen.

use std::io::{self, Write};

use serde::Serialize;

use crate::ledger::{Family, Label};
use crate::trace::Phase;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// A page already held when the traced range began.
    PageHeld,
    /// An allocation already live when the traced range began.
    Live,
    /// The pool asked the driver for a new page.
    PageAlloc,
    /// The pool gave a page back to the driver (on an explicit cleanup, which the
    /// simulator's steps never make: its traces have none).
    PageRelease,
    /// A tensor's slice was reserved.
    Reserve,
    /// A tensor's last handle dropped: its slice is free again.
    Free,
    /// A reserve failed: the driver refused the page the pool asked for.
    OutOfMemory,
}

/// One event; its position in [`MemTrace::events`] is its time (the simulator has no clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemEvent {
    /// 1-based step (0: before step one).
    pub step: u64,
    /// Part of the step.
    pub phase: Phase,
    /// What happened.
    pub action: Action,
    /// The allocation's number in the run (a free carries its reserve's); for page events
    /// and refusals, the reserve that caused them; 0 for [`Action::PageHeld`], which has no
    /// cause in the range (written `null` in JSON lines).
    pub alloc: u64,
    /// Index into [`MemTrace::labels`]: the tensor, and the op that made it.
    pub label: u32,
    /// Bytes the tensor asked for; for page events, the page's bytes.
    pub bytes: u64,
    /// The page's number (pages are numbered in the order the driver gave them).
    pub page: u32,
    /// The page's bytes: where a slice lies, or the page the driver refused.
    pub page_bytes: u64,
    /// Offset of the slice in its page.
    pub offset: u64,
    /// A free that reached the pool later than program order puts it (`run.rs`'s jitter).
    pub late: bool,
}

/// A page number that means "no page" (a refused reserve got none).
pub const NO_PAGE: u32 = u32::MAX;

/// A traced run: its context and its events.
#[derive(Debug, Clone, PartialEq)]
pub struct MemTrace {
    /// The recipe's origin.
    pub recipe: String,
    /// The seed of the release jitter.
    pub seed: u64,
    /// What the pool could take: card total less desktop and CUDA context.
    pub capacity: u64,
    /// First and last traced step (inclusive; the last one run if the trainer died first).
    pub first_step: u64,
    /// See [`MemTrace::first_step`].
    pub last_step: u64,
    /// The step whose loss read found a dead tensor, if it came within the range.
    pub died_at: Option<u64>,
    /// What each event's buffer is.
    pub labels: Vec<Label>,
    /// In the order the pool saw them.
    pub events: Vec<MemEvent>,
}

impl MemTrace {
    /// The label of `event`.
    pub fn label(&self, event: &MemEvent) -> &Label {
        &self.labels[event.label as usize]
    }

    /// Writes the trace as JSON lines: a header object, then one object per event.
    pub fn write_json_lines(&self, mut w: impl Write) -> io::Result<()> {
        let header = serde_json::json!({
            "highwater_trace": 1,
            "recipe": self.recipe,
            "seed": self.seed,
            "capacity": self.capacity,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "died_at": self.died_at,
            "events": self.events.len(),
        });
        writeln!(w, "{header}")?;
        for (seq, e) in self.events.iter().enumerate() {
            let l = self.label(e);
            let line = EventLine {
                seq,
                step: e.step,
                phase: e.phase,
                action: e.action,
                alloc: (e.action != Action::PageHeld).then_some(e.alloc),
                tensor: &l.tensor,
                op: &l.op,
                family: l.family,
                bytes: e.bytes,
                page: (e.page != NO_PAGE).then_some(e.page),
                page_bytes: e.page_bytes,
                offset: e.offset,
                late: e.late,
            };
            serde_json::to_writer(&mut w, &line)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct EventLine<'a> {
    seq: usize,
    step: u64,
    phase: Phase,
    action: Action,
    alloc: Option<u64>,
    tensor: &'a str,
    op: &'a str,
    family: Family,
    bytes: u64,
    page: Option<u32>,
    page_bytes: u64,
    offset: u64,
    late: bool,
}
