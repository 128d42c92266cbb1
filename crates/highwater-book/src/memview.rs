//! A traced run as [`MemoryView`], the book's interactive memory view: each allocation's
//! life from its reserve to its free, the pages, the steps, and the run's every step in the
//! overview.

use std::collections::{BTreeMap, HashMap};

use highwater::RunReport;
use highwater::ledger::Family;
use highwater::memtrace::{Action, MemTrace};
use highwater_plot::{Band, DetailStep, MemoryView, Page, Refusal, StepTotals};

use crate::bytes::show;

/// The view of `trace` (with `report`, the same run's figures, for the overview), showing only
/// the allocations `keep` accepts (by tensor name), e.g. one expert call's.
pub fn memory_view(
    trace: &MemTrace,
    report: &RunReport,
    title: &str,
    keep: impl Fn(&str) -> bool,
) -> MemoryView {
    let mut bands: Vec<Band> = vec![];
    let mut open: HashMap<u64, usize> = HashMap::new();
    // Page → (bytes, first event it is held at).
    let mut pages: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut left_out = false;
    let mut steps: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut refusals = vec![];
    for (seq, e) in trace.events.iter().enumerate() {
        let seq = seq as u64;
        let span = steps.entry(e.step).or_insert((seq, seq + 1));
        span.1 = seq + 1;
        let label = trace.label(e);
        match e.action {
            Action::PageHeld | Action::PageAlloc => {
                pages.insert(e.page, (e.page_bytes, seq));
            }
            Action::PageRelease => {}
            Action::Live | Action::Reserve if keep(&label.tensor) => {
                open.insert(e.alloc, bands.len());
                bands.push(Band {
                    start: seq,
                    end: None,
                    page: e.page,
                    offset: e.offset,
                    bytes: e.bytes,
                    family: label.family as usize,
                    tensor: label.tensor.clone(),
                    op: label.op.clone(),
                    step: if e.action == Action::Live { 0 } else { e.step },
                    late: false,
                });
            }
            Action::Free => {
                if let Some(i) = open.remove(&e.alloc) {
                    bands[i].end = Some(seq);
                    bands[i].late = e.late;
                }
            }
            Action::OutOfMemory => refusals.push(Refusal {
                time: seq,
                bytes: e.bytes,
                page_bytes: e.page_bytes,
                tensor: label.tensor.clone(),
            }),
            Action::Live | Action::Reserve => left_out = true,
        }
    }
    // A view of some tensors draws the pages they use; a view of all, every page held.
    let used: std::collections::HashSet<u32> = bands.iter().map(|b| b.page).collect();
    let failures_at = |step: u64| report.failures.iter().filter(|f| f.step == step).count() as u32;
    MemoryView {
        title: title.to_string(),
        families: Family::ALL.iter().map(|f| f.name().to_string()).collect(),
        bands,
        pages: pages
            .into_iter()
            .filter(|(p, _)| !left_out || used.contains(p))
            .map(|(number, (bytes, since))| Page {
                number,
                bytes,
                since,
            })
            .collect(),
        steps: steps
            .into_iter()
            .map(|(step, (start, end))| DetailStep { step, start, end })
            .collect(),
        overview: (0..report.peak_in_use.len())
            .map(|i| StepTotals {
                step: i as u64 + 1,
                peak: report.peak_in_use[i],
                reserved: report.reserved[i],
                failures: failures_at(i as u64 + 1),
            })
            .collect(),
        refusals,
        capacity: trace.capacity,
        died_at: report.died_at,
        initial: trace.died_at.or(report.failures.first().map(|f| f.step)),
    }
}

/// What one expert call holds across its step, read off the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallHold {
    /// Buffers the call reserves in the forward pass and frees in the backward pass.
    pub buffers: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// The first expert call of `recipe`'s first step (tensors `it0.expert0.*`), traced through
/// the pool: its view, and what it holds from forward to backward.
pub fn first_call(
    recipe: &highwater::Recipe,
    title: &str,
) -> Result<(MemoryView, CallHold), highwater::TraceError> {
    const CALL: &str = "it0.expert0.";
    let (report, trace) = highwater::simulate_traced(recipe, 1, 1..=1)?;
    let view = memory_view(&trace, &report, title, |t| t.starts_with(CALL));
    let mut phase_of: HashMap<u64, highwater::trace::Phase> = HashMap::new();
    let mut hold = CallHold {
        buffers: 0,
        bytes: 0,
    };
    for e in &trace.events {
        if !trace.label(e).tensor.starts_with(CALL) {
            continue;
        }
        match e.action {
            Action::Reserve => {
                phase_of.insert(e.alloc, e.phase);
            }
            Action::Free => {
                use highwater::trace::Phase;
                if phase_of.get(&e.alloc) == Some(&Phase::Forward) && e.phase == Phase::Backward {
                    hold.buffers += 1;
                    hold.bytes += e.bytes;
                }
            }
            _ => {}
        }
    }
    Ok((view, hold))
}

/// The steps around `recipe`'s first refused reserve with `seed`: the step before and the
/// step itself, traced (`None`: the run never fails within the recipe's steps).
pub fn first_refusal(
    recipe: &highwater::Recipe,
    seed: u64,
    title: &str,
) -> Result<Option<MemoryView>, highwater::TraceError> {
    let plain = highwater::simulate(recipe, seed, recipe.steps);
    let Some(step) = plain.first_failure() else {
        return Ok(None);
    };
    let (_, trace) =
        highwater::simulate_traced(recipe, seed, step.saturating_sub(1).max(1)..=step)?;
    // The overview shows the whole run, to its death if it dies.
    let mut view = memory_view(&trace, &plain, title, |_| true);
    view.initial = Some(step);
    Ok(Some(view))
}

/// The first refusal of a [`first_refusal`] view, in words, after the view's own note on its
/// size class: what the pool had free in all, and why that was not enough.
pub fn explain_refusal(view: &MemoryView) -> Option<String> {
    let refusal = view.refusals.first()?;
    let all = view.free_space(refusal.time, None);
    Some(format!(
        "The pool's {} pages then held {} free, the largest gap {}, but CubeCL picks the page \
         from the request's size, so none of it could serve this request: fragmentation by size \
         class. The run went on until the loss read at step {} found the dead tensor.",
        all.pages,
        show(all.bytes),
        show(all.largest_gap),
        view.died_at.map_or("its end".into(), |d| d.to_string()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reserve_is_a_band_and_every_held_page_is_drawn() {
        let r = crate::Book::repository().recipe("small").unwrap();
        let (report, trace) = highwater::simulate_traced(&r, 3, 2..=3).unwrap();
        let all = memory_view(&trace, &report, "all", |_| true);
        let count = |a: Action| trace.events.iter().filter(|e| e.action == a).count();
        assert_eq!(
            all.bands.len(),
            count(Action::Live) + count(Action::Reserve)
        );
        let freed = all.bands.iter().filter(|b| b.end.is_some()).count();
        assert_eq!(freed, count(Action::Free));
        assert_eq!(all.pages.len(), *report.pages.last().unwrap() as usize);
        assert_eq!(all.steps.iter().map(|s| s.step).collect::<Vec<_>>(), [2, 3]);
        // A view of some tensors draws only the pages they use.
        let call = memory_view(&trace, &report, "call", |t| t.starts_with("it0.expert0."));
        assert!(
            call.bands
                .iter()
                .all(|b| b.tensor.starts_with("it0.expert0."))
        );
        assert!(call.pages.len() < all.pages.len());
        assert!(
            call.pages
                .iter()
                .all(|p| call.bands.iter().any(|b| b.page == p.number))
        );
    }
}
