//! Runs a recipe for N steps through CubeCL's pool, seeded, and finds the step it dies.
//!
//! # Why the death depends on the seed: late releases
//!
//! Every step allocates exactly the same sizes (no leak; seed 000 §4), and CubeCL never gives a
//! page back without an explicit cleanup, so a pool replaying one fixed order would settle
//! after step one and either die there or never. The real arm died at 200, 300 or 400, and
//! seed 1 died at different steps on two attempts: the cause is timing, not data.
//!
//! The timing we model: a tensor's slice returns to the pool when the last handle to it drops,
//! and in burn + cubecl-cuda that drop does not always land where program order puts it. The
//! compute thread runs ahead of releases queued behind it; burn-autodiff and burn's gradient
//! containers drop state from `std` hash maps, whose iteration order changes with every map
//! (`RandomState`). So, now and then, a release reaches the pool a few reserves late. First-fit
//! slicing then places the next tensors elsewhere, a 256 MiB page that was enough is not, and
//! the pool asks the driver for one more page, which it keeps for the rest of the run. The page
//! inventory ratchets up. An arm whose step-one inventory sits a page below the card's edge
//! dies on the first unlucky step; an arm with a few pages of room absorbs every ratchet.
//!
//! A seed drives which steps release late, which releases, and by how many reserves
//! ([`crate::recipe::Jitter`], calibrated in the recipe). The same seed draws the same numbers
//! for every arm, so arms are compared under the same luck.
//!
//! # How the trainer dies
//!
//! A failed reserve is an error on the stream (cubecl-cuda 0.10 unwraps it on the server
//! thread; the panic is caught and the tensor is left without memory). Errors accumulate until
//! the next sync that does not ignore them: the trainer's loss read, every
//! `loss_read_every` steps. The first read after any failure lands on a dead tensor and the
//! trainer exits: "loss is not a scalar".
//!
//! # Skipping steps that provably repeat
//!
//! At a step boundary every dynamic slice is free. A page whose slices are all free behaves
//! exactly like a fresh page (the sliced pool coalesces it before every try), and persistent
//! slots are exact-size and interchangeable. So the pool's behaviour from a boundary on is fixed
//! by: the number of persistent slots per size, the number of pages per sliced pool, and the
//! live persistent tensors (weights and optimizer state, the same at every boundary). When a
//! step without late releases (whose events are identical from step 2 on) starts from a state
//! already seen, and that step left the state unchanged then, it leaves it unchanged now and
//! reports the same figures: it is not replayed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use cubecl_runtime::memory_management::ManagedMemoryHandle;
use serde::Serialize;

use crate::ffn::expert_ledger;
use crate::ledger::Ledger;
use crate::pool::{CUDA_ALIGNMENT, CardPool};
use crate::recipe::Recipe;
use crate::trace::{Event, Phase, StepTrace, init_allocs, step_trace};

/// A reserve the pool could not satisfy, during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// 1-based step.
    pub step: u64,
    /// Bytes the tensor asked for.
    pub requested: u64,
    /// Page size the pool asked of the driver.
    pub page: u64,
    /// Where in the step.
    pub phase: Phase,
}

/// Figures of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepRecord {
    /// 1-based step.
    pub step: u64,
    /// Highest bytes in use (live slices, weights included) during the step.
    pub peak_in_use: u64,
    /// Bytes of pages held at the end of the step.
    pub reserved: u64,
    /// Pages held at the end of the step.
    pub pages: u32,
    /// Reserves that failed during the step.
    pub failures: u32,
    /// Whether the step's releases were on time (false: some came late).
    pub on_time: bool,
    /// Whether the step was replayed event by event (false: proven to repeat).
    pub replayed: bool,
}

/// Receives a run as it goes (ripgrep-style sink), e.g. for a progress bar.
pub trait Sink {
    /// After every step.
    fn step(&mut self, _record: &StepRecord) {}
    /// On every failed reserve.
    fn failure(&mut self, _failure: &Failure) {}
    /// When the trainer dies.
    fn died(&mut self, _step: u64) {}
}

/// A sink that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSink;
impl Sink for NoSink {}

/// One run of one recipe with one seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The recipe's origin.
    pub recipe: String,
    pub seed: u64,
    /// Steps asked for.
    pub steps: u64,
    /// The step whose loss read found a dead tensor; `None` if it survived.
    pub died_at: Option<u64>,
    /// Per step, up to the death.
    pub peak_in_use: Vec<u64>,
    pub reserved: Vec<u64>,
    pub pages: Vec<u32>,
    pub failures: Vec<Failure>,
    /// What the pool could take: card total less desktop and CUDA context.
    pub capacity: u64,
    /// Steps replayed event by event (the rest were proven repeats).
    pub replayed_steps: u64,
    /// Steps with late releases.
    pub late_steps: u64,
}

/// Simulates `steps` steps of `recipe` with `seed`.
pub fn simulate(recipe: &Recipe, seed: u64, steps: u64) -> RunReport {
    simulate_with(recipe, seed, steps, &mut NoSink)
}

/// [`simulate`], reporting to `sink` as it goes.
pub fn simulate_with(recipe: &Recipe, seed: u64, steps: u64, sink: &mut dyn Sink) -> RunReport {
    Simulation::new(recipe, seed).run(steps, sink)
}

/// SplitMix64: small, seedable, stable across platforms and crate versions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[derive(Debug, Clone)]
struct Outcome {
    peak: u64,
    failures: Vec<(u64, u64, Phase)>,
}

struct Simulation<'a> {
    recipe: &'a Recipe,
    ledger: Ledger,
    rng: Rng,
    pool: CardPool,
    handles: Vec<Option<(ManagedMemoryHandle, u64)>>,
    _init: Vec<ManagedMemoryHandle>,
    in_use: u64,
    persistent_sizes: HashSet<u64>,
    persistent_slots: BTreeMap<u64, u32>,
    sliced_pages: BTreeMap<u64, u32>,
    memo: HashMap<u64, Outcome>,
    use_memo: bool,
    seed: u64,
}

impl<'a> Simulation<'a> {
    fn new(recipe: &'a Recipe, seed: u64) -> Self {
        let mut pool = CardPool::cuda(recipe.card.total_bytes, recipe.card.pool_capacity());
        // Weights are created under burn's `memory_persistent_allocations`.
        pool.set_persistent(true);
        let mut init = vec![];
        let mut in_use = 0;
        for bytes in init_allocs(recipe) {
            // The recipe's validation guarantees the weights fit.
            init.push(pool.reserve(bytes).expect("weights fit the card"));
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
            rng: Rng::new(seed),
            pool,
            handles: vec![],
            _init: init,
            in_use,
            persistent_sizes: persistent.into_iter().collect(),
            persistent_slots,
            sliced_pages: BTreeMap::new(),
            memo: HashMap::new(),
            use_memo: true,
            seed,
        }
    }

    fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.persistent_slots.hash(&mut h);
        self.sliced_pages.hash(&mut h);
        self.in_use.hash(&mut h);
        h.finish()
    }

    fn release(&mut self, buf: u32) {
        if let Some((h, bytes)) = self.handles[buf as usize].take() {
            self.in_use -= bytes;
            drop(h);
        }
    }

    /// Replays one step; returns its peak and failures.
    fn replay(&mut self, trace: &StepTrace, late: &HashMap<usize, u64>) -> Outcome {
        if self.handles.len() < trace.buffers as usize {
            self.handles.resize_with(trace.buffers as usize, || None);
        }
        let mut phase = Phase::Forward;
        let mut peak = self.in_use;
        let mut failures = vec![];
        let mut pending: Vec<(u64, u32)> = vec![];
        for (idx, ev) in trace.events.iter().enumerate() {
            match *ev {
                Event::Phase(p) => phase = p,
                Event::Alloc { buf, bytes } => {
                    let before = self.pool.storage().page_allocs();
                    match self.pool.reserve(bytes) {
                        Ok(h) => {
                            self.handles[buf as usize] = Some((h, bytes));
                            self.in_use += bytes;
                            peak = peak.max(self.in_use);
                            if self.pool.storage().page_allocs() > before {
                                self.count_page(bytes);
                            }
                        }
                        Err(f) => failures.push((f.requested, f.page, phase)),
                    }
                    if !pending.is_empty() {
                        for p in pending.iter_mut() {
                            p.0 -= 1;
                        }
                        while let Some(pos) = pending.iter().position(|p| p.0 == 0) {
                            let (_, b) = pending.swap_remove(pos);
                            self.release(b);
                        }
                    }
                }
                Event::Free { buf } => match late.get(&idx) {
                    Some(&lag) => pending.push((lag, buf)),
                    None => self.release(buf),
                },
            }
        }
        for (_, b) in pending {
            self.release(b);
        }
        Outcome { peak, failures }
    }

    /// Books a new storage allocation: a persistent slot when the reserve's aligned size is a
    /// persistent size (CubeCL's `has_size` routes it there), else a sliced page.
    fn count_page(&mut self, requested: u64) {
        let effective = requested.next_multiple_of(CUDA_ALIGNMENT);
        let pages = self.pool.storage().page_sizes();
        if self.persistent_sizes.contains(&effective) {
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

    fn run(mut self, steps: u64, sink: &mut dyn Sink) -> RunReport {
        let r = self.recipe;
        let mut report = RunReport {
            recipe: r.origin.clone(),
            seed: self.seed,
            steps,
            died_at: None,
            peak_in_use: vec![],
            reserved: vec![],
            pages: vec![],
            failures: vec![],
            capacity: r.card.pool_capacity(),
            replayed_steps: 0,
            late_steps: 0,
        };
        let first = step_trace(r, &self.ledger, 1);
        let steady = step_trace(r, &self.ledger, 2);
        let frees = |t: &StepTrace| {
            t.events
                .iter()
                .enumerate()
                .filter(|(_, e)| matches!(e, Event::Free { .. }))
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        let (first_frees, steady_frees) = (frees(&first), frees(&steady));
        let j = r.jitter;
        let mut failed_since_read = false;
        for step in 1..=steps {
            let (trace, free_idx) = if step == 1 {
                (&first, &first_frees)
            } else {
                (&steady, &steady_frees)
            };
            // Same number of draws on every path, so arms stay on the same random stream.
            let disturbed = self.rng.unit() < j.step_probability;
            let mut late = HashMap::new();
            for _ in 0..j.late_releases {
                let which = free_idx[self.rng.below(free_idx.len() as u64) as usize];
                let lag = 1 + self.rng.below(j.max_lag.max(1));
                if disturbed && j.max_lag > 0 {
                    late.insert(which, lag);
                }
            }
            let start = self.fingerprint();
            let canonical = late.is_empty() && step > 1;
            let (outcome, replayed) = match self.memo.get(&start) {
                Some(o) if canonical && self.use_memo => (o.clone(), false),
                _ => {
                    let o = self.replay(trace, &late);
                    if canonical && self.fingerprint() == start {
                        self.memo.insert(start, o.clone());
                    }
                    (o, true)
                }
            };
            report.replayed_steps += u64::from(replayed);
            report.late_steps += u64::from(!late.is_empty());
            for &(requested, page, phase) in &outcome.failures {
                let f = Failure {
                    step,
                    requested,
                    page,
                    phase,
                };
                sink.failure(&f);
                report.failures.push(f);
                failed_since_read = true;
            }
            let storage = self.pool.storage();
            let rec = StepRecord {
                step,
                peak_in_use: outcome.peak,
                reserved: storage.allocated(),
                pages: storage.pages() as u32,
                failures: outcome.failures.len() as u32,
                on_time: late.is_empty(),
                replayed,
            };
            report.peak_in_use.push(rec.peak_in_use);
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

/// [`simulate`] for every seed of the recipe, with its own step count.
pub fn simulate_recipe(recipe: &Recipe) -> Vec<RunReport> {
    recipe
        .seeds
        .iter()
        .map(|&s| simulate(recipe, s, recipe.steps))
        .collect()
}

impl RunReport {
    /// Highest bytes in use over the run.
    pub fn high_water(&self) -> u64 {
        self.peak_in_use.iter().copied().max().unwrap_or(0)
    }

    /// Bytes reserved at the end.
    pub fn final_reserved(&self) -> u64 {
        self.reserved.last().copied().unwrap_or(0)
    }

    /// The first step with a failed reserve.
    pub fn first_failure(&self) -> Option<u64> {
        self.failures.first().map(|f| f.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Recipe {
        Recipe::parse(
            "small.toml",
            include_str!("../../../repro/recipes/small.toml"),
        )
        .unwrap()
    }

    #[test]
    fn rng_is_stable() {
        let mut r = Rng::new(1);
        let a: Vec<u64> = (0..3).map(|_| r.below(100)).collect();
        let mut r = Rng::new(1);
        let b: Vec<u64> = (0..3).map(|_| r.below(100)).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn deterministic_per_seed() {
        let r = small();
        assert_eq!(simulate(&r, 7, 150), simulate(&r, 7, 150));
    }

    #[test]
    fn skipping_changes_nothing() {
        let r = small();
        let fast = simulate(&r, 3, 150);
        let mut sim = Simulation::new(&r, 3);
        sim.use_memo = false;
        let full = sim.run(150, &mut NoSink);
        assert_eq!(full.peak_in_use, fast.peak_in_use);
        assert_eq!(full.reserved, fast.reserved);
        assert_eq!(full.pages, fast.pages);
        assert_eq!(full.failures, fast.failures);
        assert_eq!(full.replayed_steps, 150);
        assert!(fast.replayed_steps < 150, "{}", fast.replayed_steps);
    }
}
