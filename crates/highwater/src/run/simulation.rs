//! The step-by-step simulation: the pool, the late releases, and the shortcuts that skip work.

use std::collections::{BTreeMap, HashMap};

use basics::SplitMix64;
use cubecl_runtime::memory_management::ManagedMemoryHandle;

use crate::ffn::expert_ledger;
use crate::ledger::{Family, Label, Ledger};
use crate::memtrace::{Action, MemEvent, NO_PAGE};
use crate::pool::{CUDA_ALIGNMENT, CardPool};
use crate::recipe::Recipe;
use crate::trace::{Event, Phase, StepTrace, init_allocs, step_trace};

use super::{Failure, RunReport, Sink, StepRecord, rng};

#[derive(Debug, Clone)]
struct Outcome {
    peak: u64,
    /// In use when backward starts (the forward's live set) and when the optimizer starts.
    after_forward: u64,
    after_backward: u64,
    failures: Vec<(u64, u64, Phase)>,
}

/// What the pool's behaviour from a step boundary on depends on (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BoundaryState {
    persistent_slots: Vec<(u64, u32)>,
    sliced_pages: Vec<(u64, u32)>,
    in_use: u64,
}

/// One step's events as the replay walks them; indices are those of [`StepTrace::events`].
struct StepPlan {
    events: Vec<Event>,
    /// Per buffer: its label's number in [`Simulation::labels`].
    labels: Vec<u32>,
    /// Indices of the `Free` events: the late releases are drawn among them.
    frees: Vec<usize>,
    /// Per event: an `Alloc` whose buffer the very next event frees (a transient buffer).
    transient: Vec<bool>,
    buffers: usize,
}

impl StepPlan {
    fn new(trace: StepTrace, names: &mut Labels) -> Self {
        let labels = trace.labels.into_iter().map(|l| names.intern(l)).collect();
        let events = trace.events;
        let frees = (0..events.len())
            .filter(|&i| matches!(events[i], Event::Free { .. }))
            .collect();
        let transient = (0..events.len())
            .map(|i| match (events[i], events.get(i + 1)) {
                (Event::Alloc { buf, .. }, Some(&Event::Free { buf: next })) => buf == next,
                _ => false,
            })
            .collect();
        StepPlan {
            events,
            labels,
            frees,
            transient,
            buffers: trace.buffers as usize,
        }
    }
}

/// Every label a run uses, each once.
#[derive(Default)]
pub(super) struct Labels {
    pub(super) labels: Vec<Label>,
    index: HashMap<Label, u32>,
}

impl Labels {
    fn intern(&mut self, label: Label) -> u32 {
        if let Some(&i) = self.index.get(&label) {
            return i;
        }
        let i = self.labels.len() as u32;
        self.labels.push(label.clone());
        self.index.insert(label, i);
        i
    }
}

/// A live buffer's slice, and what the trace says of it.
pub(super) struct Held {
    handle: ManagedMemoryHandle,
    bytes: u64,
    label: u32,
    alloc: u64,
}

/// What a recorded event is about: (allocation, label, bytes).
type What = (u64, u32, u64);

/// Where it lies: (page, page bytes, offset).
type Where = (u32, u64, u64);

/// The events of a traced range, as they happen.
pub(super) struct Recording {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) events: Vec<MemEvent>,
}

pub(super) struct Simulation<'a> {
    recipe: &'a Recipe,
    pub(super) ledger: Ledger,
    rng: SplitMix64,
    pool: CardPool,
    handles: Vec<Option<Held>>,
    /// Weights and fixed buffers, alive for the whole run.
    pub(super) init: Vec<Held>,
    pub(super) labels: Labels,
    /// Allocations so far: the next one's number.
    allocs: u64,
    /// The step and phase being replayed, for the recording.
    at: (u64, Phase),
    /// Set while a traced range is recorded (and kept when it is over).
    pub(super) rec: Option<Recording>,
    in_use: u64,
    persistent_slots: BTreeMap<u64, u32>,
    sliced_pages: BTreeMap<u64, u32>,
    memo: HashMap<BoundaryState, Outcome>,
    /// Every size the run reserves is a multiple of the alignment: no slice carries padding,
    /// which both shortcuts rely on (module docs).
    aligned: bool,
    /// Skip steps proven to repeat.
    pub(super) use_memo: bool,
    /// Keep transient buffers away from the pool when provably invisible to it.
    pub(super) use_transients: bool,
    /// Per event of the current step: after how many reserves its release lands (0: on time).
    lag_at: Vec<u32>,
    /// Late releases waiting: (reserves still to overtake them, buffer).
    pending: Vec<(u32, u32)>,
    seed: u64,
}

impl<'a> Simulation<'a> {
    pub(super) fn new(recipe: &'a Recipe, seed: u64) -> Self {
        let mut pool = CardPool::cuda(recipe.card.total_bytes, recipe.card.pool_capacity());
        // Weights are created under burn's `memory_persistent_allocations`.
        pool.set_persistent(true);
        let mut init = vec![];
        let mut in_use = 0;
        let mut labels = Labels::default();
        let init_allocs = init_allocs(recipe);
        for (bytes, label) in init_allocs.iter().cloned() {
            // The recipe's validation guarantees the weights fit.
            init.push(Held {
                handle: pool.reserve(bytes).expect("weights fit the card"),
                bytes,
                label: labels.intern(label),
                alloc: init.len() as u64,
            });
            in_use += bytes;
        }
        pool.set_persistent(false);
        let persistent: Vec<u64> = pool.storage().page_sizes();
        let mut persistent_slots = BTreeMap::new();
        for s in &persistent {
            *persistent_slots.entry(*s).or_insert(0) += 1;
        }
        Self {
            recipe,
            ledger: expert_ledger(recipe),
            rng: rng(seed),
            pool,
            handles: vec![],
            allocs: init.len() as u64,
            init,
            labels,
            at: (0, Phase::Init),
            rec: None,
            in_use,
            persistent_slots,
            sliced_pages: BTreeMap::new(),
            memo: HashMap::new(),
            aligned: init_allocs.iter().all(|(b, _)| b % CUDA_ALIGNMENT == 0),
            use_memo: true,
            use_transients: true,
            lag_at: vec![],
            pending: vec![],
            seed,
        }
    }

    /// Narrows [`Self::aligned`] by the sizes a step's trace reserves.
    fn check_aligned(&mut self, plan: &StepPlan) {
        self.aligned &= plan.events.iter().all(|e| match *e {
            Event::Alloc { bytes, .. } => bytes % CUDA_ALIGNMENT == 0,
            _ => true,
        });
    }

    fn boundary_state(&self) -> BoundaryState {
        BoundaryState {
            persistent_slots: self
                .persistent_slots
                .iter()
                .map(|(&s, &n)| (s, n))
                .collect(),
            sliced_pages: self.sliced_pages.iter().map(|(&s, &n)| (s, n)).collect(),
            in_use: self.in_use,
        }
    }

    /// Whether the step being replayed is recorded.
    fn recording(&self) -> bool {
        self.rec
            .as_ref()
            .is_some_and(|r| (r.first..=r.last).contains(&self.at.0))
    }

    /// Records an event of the current step and phase when the step is traced: `what` is
    /// (allocation, label, bytes), `at` is (page, page bytes, offset).
    fn record(&mut self, action: Action, what: What, at: Where, late: bool) {
        if !self.recording() {
            return;
        }
        let (step, phase) = self.at;
        let events = &mut self.rec.as_mut().expect("recording").events;
        events.push(MemEvent {
            step,
            phase,
            action,
            alloc: what.0,
            label: what.1,
            bytes: what.2,
            page: at.0,
            page_bytes: at.1,
            offset: at.2,
            late,
        });
    }

    /// Where a live slice lies: (page, page bytes, offset).
    fn locate(pool: &mut CardPool, handle: &ManagedMemoryHandle) -> Where {
        let (page, offset) = pool.location(handle).expect("a live handle lies in a page");
        let bytes = pool.storage().page_bytes(page).unwrap_or(0);
        (page, bytes, offset)
    }

    /// Opens a recording: every page held and every live buffer, as they are now.
    fn record_opening(&mut self) {
        let earlier = self
            .labels
            .intern(Label::new("(held)", "earlier steps", Family::Weights));
        for (page, bytes) in self.pool.storage().numbered_pages() {
            self.record(
                Action::PageHeld,
                (0, earlier, bytes),
                (page, bytes, 0),
                false,
            );
        }
        let live: Vec<(What, Where)> = self
            .init
            .iter()
            .chain(self.handles.iter().flatten())
            .map(|h| {
                let at = Self::locate(&mut self.pool, &h.handle);
                ((h.alloc, h.label, h.bytes), at)
            })
            .collect();
        for (what, at) in live {
            self.record(Action::Live, what, at, false);
        }
    }

    /// Drops buffer `buf`'s handle; returns its bytes if it held a slice.
    fn release(&mut self, buf: u32, late: bool) -> Option<u64> {
        let held = self.handles[buf as usize].take()?;
        self.in_use -= held.bytes;
        if self.recording() {
            let at = Self::locate(&mut self.pool, &held.handle);
            self.record(Action::Free, (held.alloc, held.label, held.bytes), at, late);
        }
        Some(held.bytes)
    }

    /// One reserve went by: releases the late frees it was the last to overtake. Returns the
    /// bytes of one buffer it released, if any.
    fn overtake(&mut self) -> Option<u64> {
        let mut freed = None;
        if self.pending.is_empty() {
            return freed;
        }
        for p in self.pending.iter_mut() {
            p.0 -= 1;
        }
        while let Some(pos) = self.pending.iter().position(|p| p.0 == 0) {
            let (_, b) = self.pending.swap_remove(pos);
            freed = self.release(b, true).or(freed);
        }
        freed
    }

    /// Replays one step whose late releases are in `self.lag_at`; returns its peak and failures.
    fn replay(&mut self, plan: &StepPlan) -> Outcome {
        if self.handles.len() < plan.buffers {
            self.handles.resize_with(plan.buffers, || None);
        }
        let recording = self.recording();
        let transients = self.use_transients && self.aligned && !recording;
        let mut peak = self.in_use;
        let (mut after_forward, mut after_backward) = (self.in_use, self.in_use);
        let mut failures = vec![];
        // Bytes of a buffer released since the last reserve: a slot of that size is free.
        let mut known_free: Option<u64> = None;
        let mut idx = 0;
        while idx < plan.events.len() {
            match plan.events[idx] {
                Event::Phase(p) => {
                    self.at.1 = p;
                    match p {
                        Phase::Backward => after_forward = self.in_use,
                        Phase::Optimizer => after_backward = self.in_use,
                        Phase::Init | Phase::Forward | Phase::Eval => {}
                    }
                }
                Event::Alloc { bytes, .. }
                    if transients
                        && plan.transient[idx]
                        && known_free == Some(bytes)
                        && self.lag_at[idx + 1] == 0 =>
                {
                    // A transient buffer the pool cannot tell from none (module docs): it
                    // counts towards the peak and overtakes pending releases, then is freed.
                    peak = peak.max(self.in_use + bytes);
                    self.overtake();
                    known_free = Some(bytes);
                    idx += 2;
                    continue;
                }
                Event::Alloc { buf, bytes } => {
                    let before = self.pool.storage().page_allocs();
                    let what = (self.allocs, plan.labels[buf as usize], bytes);
                    self.allocs += 1;
                    match self.pool.reserve(bytes) {
                        Ok(handle) => {
                            self.in_use += bytes;
                            peak = peak.max(self.in_use);
                            let new_page = self.pool.storage().page_allocs() > before;
                            if new_page {
                                self.count_page(bytes);
                            }
                            if recording {
                                let at = Self::locate(&mut self.pool, &handle);
                                if new_page {
                                    let page = (what.0, what.1, at.1);
                                    self.record(Action::PageAlloc, page, (at.0, at.1, 0), false);
                                }
                                self.record(Action::Reserve, what, at, false);
                            }
                            self.handles[buf as usize] = Some(Held {
                                handle,
                                bytes,
                                label: what.1,
                                alloc: what.0,
                            });
                        }
                        Err(f) => {
                            failures.push((f.requested, f.page, self.at.1));
                            self.record(Action::OutOfMemory, what, (NO_PAGE, f.page, 0), false);
                        }
                    }
                    known_free = self.overtake();
                }
                Event::Free { buf } => match self.lag_at[idx] {
                    0 => known_free = self.release(buf, false).or(known_free),
                    lag => self.pending.push((lag, buf)),
                },
            }
            idx += 1;
        }
        while let Some((_, b)) = self.pending.pop() {
            self.release(b, true);
        }
        Outcome {
            peak,
            after_forward,
            after_backward,
            failures,
        }
    }

    /// Books a new storage allocation: a persistent slot when the reserve's aligned size is a
    /// persistent size (CubeCL's `has_size` routes it there), else a sliced page.
    fn count_page(&mut self, requested: u64) {
        let effective = requested.next_multiple_of(CUDA_ALIGNMENT);
        let pages = self.pool.storage().page_sizes();
        if self.persistent_slots.contains_key(&effective) {
            *self.persistent_slots.entry(effective).or_insert(0) += 1;
        } else {
            // The newest page is the one whose count rose; recount the sliced ones.
            let mut sliced: BTreeMap<u64, u32> = BTreeMap::new();
            for s in pages {
                *sliced.entry(s).or_insert(0) += 1;
            }
            for (s, n) in &self.persistent_slots {
                if let Some(c) = sliced.get_mut(s) {
                    *c -= (*n).min(*c);
                }
            }
            sliced.retain(|_, c| *c > 0);
            self.sliced_pages = sliced;
        }
    }

    /// Runs `steps` steps; the simulation (and its recording) stays with the caller.
    pub(super) fn run(&mut self, steps: u64, sink: &mut dyn Sink) -> RunReport {
        let r = self.recipe;
        let mut report = RunReport {
            recipe: r.origin.clone(),
            seed: self.seed,
            steps,
            died_at: None,
            peak_in_use: vec![],
            in_use_after_forward: vec![],
            in_use_after_backward: vec![],
            reserved: vec![],
            pages: vec![],
            failures: vec![],
            capacity: r.card.pool_capacity(),
            replayed_steps: 0,
            late_steps: 0,
        };
        let first = StepPlan::new(step_trace(r, &self.ledger, 1), &mut self.labels);
        let steady = StepPlan::new(step_trace(r, &self.ledger, 2), &mut self.labels);
        self.check_aligned(&first);
        self.check_aligned(&steady);
        self.lag_at = vec![0; first.events.len().max(steady.events.len())];
        let mut late_idx: Vec<usize> = Vec::with_capacity(r.jitter.late_releases as usize);
        let j = r.jitter;
        let mut failed_since_read = false;
        for step in 1..=steps {
            let plan = if step == 1 { &first } else { &steady };
            // Same number of draws on every path, so arms stay on the same random stream.
            let disturbed = self.rng.unit() < j.step_probability;
            for _ in 0..j.late_releases {
                let which = plan.frees[self.rng.below(plan.frees.len() as u64) as usize];
                let lag = 1 + self.rng.below(j.max_lag.max(1));
                if disturbed && j.max_lag > 0 {
                    // A release drawn twice keeps its last lag.
                    self.lag_at[which] = lag as u32;
                    late_idx.push(which);
                }
            }
            let on_time = late_idx.is_empty();
            self.at = (step, Phase::Forward);
            if self.rec.as_ref().is_some_and(|r| r.first == step) {
                self.record_opening();
            }
            let canonical =
                on_time && step > 1 && self.use_memo && self.aligned && !self.recording();
            let start = canonical.then(|| self.boundary_state());
            let (outcome, replayed) = match start.as_ref().and_then(|s| self.memo.get(s)) {
                Some(o) => (o.clone(), false),
                None => {
                    let o = self.replay(plan);
                    if let Some(start) = start
                        && self.boundary_state() == start
                    {
                        self.memo.insert(start, o.clone());
                    }
                    (o, true)
                }
            };
            for i in late_idx.drain(..) {
                self.lag_at[i] = 0;
            }
            report.replayed_steps += u64::from(replayed);
            report.late_steps += u64::from(!on_time);
            for &(requested, page, phase) in &outcome.failures {
                let f = Failure {
                    step,
                    requested,
                    page,
                    phase,
                };
                report.failures.push(f);
                failed_since_read = true;
            }
            let storage = self.pool.storage();
            let rec = StepRecord {
                step,
                peak_in_use: outcome.peak,
                in_use_after_forward: outcome.after_forward,
                in_use_after_backward: outcome.after_backward,
                reserved: storage.allocated(),
                pages: storage.pages() as u32,
                failures: outcome.failures.len() as u32,
                on_time,
                replayed,
            };
            report.peak_in_use.push(rec.peak_in_use);
            report.in_use_after_forward.push(rec.in_use_after_forward);
            report.in_use_after_backward.push(rec.in_use_after_backward);
            report.reserved.push(rec.reserved);
            report.pages.push(rec.pages);
            sink.step(&rec);
            if step % r.loss_read_every == 0 && failed_since_read {
                report.died_at = Some(step);
                sink.died(step);
                break;
            }
        }
        report
    }
}
