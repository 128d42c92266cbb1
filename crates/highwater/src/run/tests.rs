//! Tests of the simulator's runs, traces and shortcuts.

use std::collections::{BTreeMap, HashMap};

use super::*;

fn small() -> Recipe {
    Recipe::parse(
        "small.toml",
        include_str!("../../../../repro/recipes/small.toml"),
    )
    .unwrap()
}

#[test]
fn rng_is_stable() {
    let mut r = rng(1);
    let drawn: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
    // Pinned: the calibrated deaths depend on these draws, on every platform and version.
    assert_eq!(
        drawn,
        [
            1927618558350093866,
            13703392640351029448,
            11176358302719344501
        ]
    );
}

#[test]
fn rng_draws_are_pinned() {
    let mut r = rng(5);
    assert_eq!(r.unit().to_bits(), 4596047640223847100);
    assert_eq!([r.below(7), r.below(1 << 40)], [2, 27027723158]);
}

#[test]
fn deterministic_per_seed() {
    let r = small();
    assert_eq!(simulate(&r, 7, 150), simulate(&r, 7, 150));
}

#[test]
fn shortcuts_change_nothing() {
    let r = small();
    let fast = simulate(&r, 3, 150);
    let mut sim = Simulation::new(&r, 3);
    sim.use_memo = false;
    sim.use_transients = false;
    let full = sim.run(150, &mut NoSink);
    assert_eq!(full.peak_in_use, fast.peak_in_use);
    assert_eq!(full.in_use_after_forward, fast.in_use_after_forward);
    assert_eq!(full.in_use_after_backward, fast.in_use_after_backward);
    assert_eq!(full.reserved, fast.reserved);
    assert_eq!(full.pages, fast.pages);
    assert_eq!(full.failures, fast.failures);
    assert_eq!(full.replayed_steps, 150);
    assert!(fast.replayed_steps < 150, "{}", fast.replayed_steps);
}

#[test]
fn a_trace_changes_no_figure_and_accounts_for_every_byte() {
    use crate::memtrace::Action;
    let r = small();
    let plain = simulate(&r, 3, 12);
    let (report, t) = simulate_traced(&r, 3, 5..=12).unwrap();
    let replayed_steps = plain.replayed_steps;
    assert_eq!(
        RunReport {
            replayed_steps,
            ..report.clone()
        },
        plain
    );
    assert_eq!((t.first_step, t.last_step), (5, 12));
    // Replaying the events gives back the run's figures: peak in use per step, and the
    // pages never overlap two live slices.
    let mut live: HashMap<u64, (u32, u64, u64)> = HashMap::new();
    let mut in_use = 0u64;
    let mut peak: BTreeMap<u64, u64> = BTreeMap::new();
    let mut pages: HashMap<u32, u64> = HashMap::new();
    for e in &t.events {
        match e.action {
            Action::PageHeld | Action::PageAlloc => {
                assert!(
                    pages.insert(e.page, e.page_bytes).is_none(),
                    "page {} twice",
                    e.page
                );
            }
            Action::Live | Action::Reserve => {
                assert_eq!(pages.get(&e.page), Some(&e.page_bytes), "{e:?}");
                assert!(e.offset + e.bytes <= e.page_bytes, "{e:?}");
                for &(p, o, b) in live.values() {
                    let apart = p != e.page || o + b <= e.offset || e.offset + e.bytes <= o;
                    assert!(apart, "{e:?} overlaps a live slice");
                }
                assert!(live.insert(e.alloc, (e.page, e.offset, e.bytes)).is_none());
                in_use += e.bytes;
            }
            Action::Free => {
                assert_eq!(live.remove(&e.alloc), Some((e.page, e.offset, e.bytes)));
                in_use -= e.bytes;
            }
            Action::PageRelease | Action::OutOfMemory => {}
        }
        let p = peak.entry(e.step).or_insert(0);
        *p = (*p).max(in_use);
    }
    let want: Vec<u64> = (5..=12)
        .map(|s| report.peak_in_use[s as usize - 1])
        .collect();
    assert_eq!(peak.values().copied().collect::<Vec<_>>(), want);
    assert!(
        t.events.iter().any(|e| e.late),
        "seed 3 releases late within the range"
    );
    let names: std::collections::HashSet<&str> =
        t.labels.iter().map(|l| l.tensor.as_str()).collect();
    assert!(names.contains("expert0.gate_up"), "{names:?}");
}

#[test]
fn absurd_trace_ranges_are_refused() {
    let r = small();
    assert!(matches!(
        simulate_traced(&r, 1, 0..=3),
        Err(TraceError::Range { .. })
    ));
    // After the run: a range past the death.
    let situ = Recipe::parse(
        "situ.toml",
        include_str!("../../../../repro/recipes/situ.toml"),
    )
    .unwrap();
    let died = simulate(&situ, 3, 400).died_at.expect("seed 3 dies");
    let err = simulate_traced(&situ, 3, died + 1..=died + 2).unwrap_err();
    assert_eq!(
        err,
        TraceError::DiedBefore {
            first: died + 1,
            last: died + 2,
            died
        }
    );
    assert!(matches!(
        simulate_traced(&r, 1, std::ops::RangeInclusive::new(4, 3)),
        Err(TraceError::Range { .. })
    ));
    let err = simulate_traced(&r, 1, 1..=u64::MAX).unwrap_err();
    assert!(err.to_string().contains("MAX_STEPS"), "{err}");
    let err = simulate_traced(&r, 1, 1..=90_000).unwrap_err();
    assert!(err.to_string().contains("MAX_TRACE_EVENTS"), "{err}");
}

#[test]
fn simulate_many_is_simulate_in_turn() {
    let r = small();
    let jobs = [(&r, 2, 60), (&r, 5, 40), (&r, 2, 30)];
    let many = simulate_many(&jobs);
    let one: Vec<RunReport> = jobs.iter().map(|&(r, s, n)| simulate(r, s, n)).collect();
    assert_eq!(many, one);
}
