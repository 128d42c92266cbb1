//! *What it is not* (`src/part-1/not-a-leak.md`): what its cells compute.
//!
//! A leak shows in a log two ways: the same seed dies at the same step every time, and what it
//! fails to get grows. [`situ_logs`] reads both off the SiTU arm's logs; [`StepProfile`] checks
//! the simulator's own step for the same two signs.

use std::collections::BTreeMap;

use cell_output::Table;
use highwater::forensics::AttemptPhase;
use highwater::layout::Shape;
use highwater::trace::{Event, StepTrace};

use crate::BookError;
use crate::text::steps;
use crate::{Book, bytes};

/// The SiTU arm's logs read for the signs of a leak: the table the chapter shows, and the two
/// facts its asserts tie the prose to.
#[derive(Debug, Clone)]
pub struct LeakCheck {
    /// Per log: seed, deaths in attempt order, and each size refused after step 0 with the
    /// tensor of the step it is.
    pub table: Table,
    /// Whether some seed died at two different steps in two attempts (a leak would not).
    pub replays_differ: bool,
    /// Sizes refused after step 0 that are neither an `[N, f]` nor an `[N, 2f]` tensor of the
    /// SiTU recipe's step (a leak's growing requests would land here).
    pub foreign: Vec<u64>,
}

/// Reads the SiTU arm's incident logs against the sizes of the step's own tensors
/// (`repro/incident`, `repro/recipes/situ.toml`).
pub fn situ_logs(book: &Book) -> Result<LeakCheck, BookError> {
    let r = book.recipe("situ")?;
    let nf = Shape::from([r.tokens(), r.d_ffn]).bytes(r.dtype);
    let n2f = Shape::from([r.tokens(), r.gate_up_width()]).bytes(r.dtype);
    let name = |b: u64| match b {
        _ if b == nf => "one `[N, f]`",
        _ if b == n2f => "one `[N, 2f]`",
        _ => "no tensor of the step",
    };
    let or_none = |s: String| {
        if s.is_empty() {
            "none logged".to_string()
        } else {
            s
        }
    };
    let mut t = Table::new([
        "log",
        "seed",
        "deaths (attempts in order)",
        "sizes refused after step 0",
    ]);
    let (mut replays_differ, mut foreign) = (false, Vec::new());
    for i in book.incidents()?.iter().filter(|i| i.arm == "situ") {
        replays_differ |= i.died_at.windows(2).any(|w| w[0] != w[1]);
        let sizes: Vec<u64> = i.sizes(AttemptPhase::Run).collect();
        foreign.extend(sizes.iter().copied().filter(|&b| b != nf && b != n2f));
        let refused: Vec<String> = sizes
            .iter()
            .map(|&b| format!("{}, {}", bytes::show(b), name(b)))
            .collect();
        t.push([
            i.log.clone(),
            i.seed.to_string(),
            or_none(steps(&i.died_at)),
            or_none(refused.join("; ")),
        ]);
    }
    Ok(LeakCheck {
        table: t,
        replays_differ,
        foreign,
    })
}

/// One simulated step's reservations: what a leak would change from step to step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepProfile {
    /// How many buffers of each size the step reserves.
    pub sizes: BTreeMap<u64, usize>,
    /// Buffers reserved that are not optimizer state (ids from the trace's `persistent` on).
    pub temporary: usize,
    /// Buffers the step releases.
    pub released: usize,
}

impl StepProfile {
    /// Counts a step's reservations by size, and its temporary buffers against its releases.
    pub fn of(trace: &StepTrace) -> StepProfile {
        let mut sizes = BTreeMap::new();
        let (mut temporary, mut released) = (0, 0);
        for e in &trace.events {
            match e {
                Event::Alloc { buf, bytes } => {
                    *sizes.entry(*bytes).or_insert(0) += 1;
                    if *buf >= trace.persistent {
                        temporary += 1;
                    }
                }
                Event::Free { .. } => released += 1,
                Event::Phase(_) => {}
            }
        }
        StepProfile {
            sizes,
            temporary,
            released,
        }
    }

    /// All the buffers the step reserves, whatever their size.
    pub fn buffers(&self) -> usize {
        self.sizes.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use highwater::{ffn, trace};

    use super::*;

    #[test]
    fn the_situ_logs_show_no_sign_of_a_leak() {
        let check = situ_logs(&Book::repository()).unwrap();
        // The prose: a seed rerun died at two different steps, and every refused size is one of
        // the step's own activations.
        assert!(check.replays_differ, "{check:?}");
        assert!(check.foreign.is_empty(), "{check:?}");
        let rows = check.table.rows();
        assert!(!rows.is_empty());
        assert!(
            rows.iter().any(|r| r[3].contains("one `[N, 2f]`")),
            "{rows:?}"
        );
        assert!(rows.iter().all(|r| !r[3].contains("no tensor")), "{rows:?}");
    }

    #[test]
    fn every_simulated_step_reserves_the_same_and_releases_its_temporaries() {
        let r = Book::repository().recipe("situ").unwrap();
        let ledger = ffn::expert_ledger(&r);
        let profile = |step| StepProfile::of(&trace::step_trace(&r, &ledger, step));
        let second = profile(2);
        let StepProfile {
            temporary,
            released,
            ..
        } = second;
        assert!(
            second.buffers() > second.sizes.len() && temporary > 0,
            "{second:?}"
        );
        assert_eq!(temporary, released, "a temporary buffer outlives its step");
        // A few steps stand for the chapter's 500: the same reservations, step after step.
        assert!((3..=12).all(|s| profile(s).sizes == second.sizes));
    }
}
