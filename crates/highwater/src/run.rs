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
//! # What the pool's future depends on
//!
//! Both speed-ups below rest on one fact about CubeCL 0.10's pool, read off
//! `cubecl_runtime::memory_management` (not re-implemented: every reserve that is replayed goes
//! through the real code). When no slice ever carries padding, a pool's behaviour from any
//! instant on (which reserves succeed, which page they take, which pages the storage is asked
//! for) is a function of its *used slices* alone:
//! - a sliced page's slices tile it; `MemoryPage::try_reserve` coalesces the page first, which
//!   merges every run of free slices into one, then takes the first free slice that is large
//!   enough. After coalescing, the free slices are exactly the gaps between used slices, so two
//!   pages with the same used slices (offset, size, holder) make the same choices. Coalescing a
//!   page without reserving from it changes nothing a later reserve can see.
//! - a persistent slot is an exact-size buffer; `PersistentPool::try_reserve` takes the first
//!   free slot of the size, and `has_size` looks at sizes only: what matters is which slots are
//!   free.
//! - the storage holds what it was given; only new pages and the card's capacity matter.
//!
//! Padding would break the first point: a freed slice that carried padding offers only its
//! unpadded size to the next reserve, and loses the padding when it is split. So both
//! speed-ups are used only when every size the run reserves (weights and both step traces) is a
//! multiple of the 512-byte alignment (checked once per run) — true of every recipe in
//! `repro/recipes/`; otherwise every step is replayed event by event.
//!
//! # Skipping steps that provably repeat
//!
//! At a step boundary every dynamic slice is free, so each sliced page is one free gap: pages of
//! one pool are interchangeable, and persistent slots are exact-size and interchangeable. So the
//! pool's behaviour from a boundary on is fixed by: the number of persistent slots per size, the
//! number of pages per sliced pool, and the live persistent tensors (weights and optimizer
//! state, the same at every boundary). When a step without late releases (whose events are
//! identical from step 2 on) starts from a state already seen, and that step left the state
//! unchanged then, it leaves it unchanged now and reports the same figures: it is not replayed.
//! The memo is keyed by that state itself, not by a hash of it.
//!
//! # Transient buffers need not reach the pool
//!
//! Backward allocates, for every rest-of-model activation, a gradient that dies at once (`alloc
//! g; free g`), right after freeing a buffer of the same size. Such a pair is not sent to the
//! pool when (a) a buffer of exactly the same size was released since the last reserve and (b)
//! the pair's own free is on time. Then the reserve is sure to succeed without a new page (the
//! released buffer's slot, in the same pool since the pool is chosen by size alone and
//! persistent sizes are fixed after init, is free and large enough), and once `g` is freed the
//! used slices are exactly what they would have been without it: by the fact above, the pool
//! cannot tell. What the pair does change is accounted without the pool: `g` counts towards the
//! step's peak in use, and its reserve counts towards the lag of pending late releases (those
//! that fall due on it are made while `g` would be alive; releases commute with one another).
//!
//! The golden test (`tests/golden`) checks every report of the wave, bit for bit, against the
//! one the plain event-by-event replay produced.

mod report;
mod simulation;
#[cfg(test)]
mod tests;
mod traced;

use basics::SplitMix64;

use crate::recipe::Recipe;
use simulation::Simulation;

pub use report::{Failure, NoSink, RunReport, Sink, StepRecord};
pub use traced::{TraceError, simulate_traced};

/// Simulates `steps` steps of `recipe` with `seed`. Its work and memory grow with `steps` and
/// with the recipe's counts, which [`Recipe::parse`] holds to [`crate::limits`]; a caller's own
/// `steps` should stay within [`crate::limits::MAX_STEPS`] (the report keeps every step).
pub fn simulate(recipe: &Recipe, seed: u64, steps: u64) -> RunReport {
    simulate_with(recipe, seed, steps, &mut NoSink)
}

/// [`simulate`], reporting to `sink` as it goes.
pub fn simulate_with(recipe: &Recipe, seed: u64, steps: u64, sink: &mut dyn Sink) -> RunReport {
    Simulation::new(recipe, seed).run(steps, sink)
}

/// The simulation's generator for `seed`, offset by a fixed constant: the calibrated deaths
/// depend on this exact stream, so neither may change.
fn rng(seed: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ 0x6a09_e667_f3bc_c909)
}

/// [`simulate`] for each `(recipe, seed, steps)`, spread over the machine's cores; reports in
/// the order of `jobs`. Runs are independent (each has its own pool and random stream), so the
/// reports are exactly those of calling [`simulate`] on each in turn.
pub fn simulate_many(jobs: &[(&Recipe, u64, u64)]) -> Vec<RunReport> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len());
    if threads <= 1 {
        return jobs.iter().map(|&(r, s, n)| simulate(r, s, n)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, RunReport)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = vec![];
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(r, s, n)) = jobs.get(i) else {
                            break mine;
                        };
                        mine.push((i, simulate(r, s, n)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a simulation thread panicked"))
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}
