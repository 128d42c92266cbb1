//! *Reading a PyTorch OOM* (`src/pytorch.md`): Part I's training step as the simulator replays
//! it, every reservation and release in the pool's order, replayed once more through PyTorch's
//! caching allocator as graphrace models it ([`graphrace::pool`], and
//! [`graphrace::expandable`] for `expandable_segments:True`). Same requests, PyTorch's rules:
//! what `torch.cuda` would have reported, step by step, and the error it would have raised.

pub mod programs;
pub mod record;
pub mod settings;

pub use graphrace::caching::{Conf, OomFigures, Setting, StepFigures, format_size};

use crate::{Book, BookError};
use basics::bytes;
use cell_output::Table;
use graphrace::caching::{self, Event};
use graphrace::pool::{LARGE_SEGMENT, MIN_LARGE_ALLOC, ROUND_LARGE, StreamId};
use graphrace::usage::OutOfMemory;
use highwater::RunReport;
use highwater::memtrace::{Action, MemTrace};
use highwater::recipe::{Card, Recipe};

/// The book's trace: the SiTU arm at this seed, whose pool Part I sees refuse a page...
pub const SEED: u64 = 3;
/// ...traced for as many steps as its simulated run lasts.
pub const STEPS: u64 = 100;
/// Another process on the card: enough to kill the job under PyTorch's rules too.
pub const TENANT: u64 = 320 << 20;

/// The SiTU recipe, and its run at [`SEED`] over [`STEPS`] steps with every reservation and
/// release traced: the requests this chapter and the allocator reference replay.
pub fn situ(book: &Book) -> Result<(Recipe, RunReport, MemTrace), BookError> {
    let recipe = book.recipe("situ")?;
    let (report, trace) = highwater::run::simulate_traced(&recipe, SEED, 1..=STEPS)
        .map_err(|e| BookError::Refused(e.to_string()))?;
    Ok((recipe, report, trace))
}

/// The request PyTorch could not serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oom {
    /// The step it came in.
    pub step: u64,
    /// The request's place in the trace (its event's index, the trace's `seq`).
    pub seq: usize,
    /// The tensor's bytes.
    pub bytes: u64,
    /// The tensor that asked, and the op that made it.
    pub tensor: String,
    /// See [`Oom::tensor`].
    pub op: String,
    /// The allocator's figures at the refusal.
    pub error: OutOfMemory,
}

/// A trace replayed under one [`Conf`] until its end or the first out-of-memory error (PyTorch
/// raises it at the request: the step stops there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The layout.
    pub conf: Conf,
    /// Every step that ended, then the one that raised, if any.
    pub steps: Vec<StepFigures>,
    /// The error, if one was raised.
    pub oom: Option<Oom>,
}

/// Replays `trace` through PyTorch's allocator under `conf`, on a device that lets it hold
/// `limit` bytes. Every request of the trace is made, a refused one included (the program
/// asked for it; CubeCL's refusal is its pool's, not PyTorch's).
pub fn replay(trace: &MemTrace, conf: Conf, limit: u64) -> Replay {
    replay_placed(trace, conf.into(), limit, &[])
}

/// [`replay`] under any [`Setting`], with the default layout's segments where a GPU's driver
/// put them (`(address, bytes)` in `cudaMalloc`'s order, [`graphrace::pool::Pool::place_segments`]);
/// the expandable layout's one segment per stream and half needs no placing.
pub fn replay_placed(
    trace: &MemTrace,
    setting: Setting,
    limit: u64,
    placed: &[(u64, u64)],
) -> Replay {
    // The allocator's events, and for each the trace event it came from.
    let mut events = Vec::with_capacity(trace.events.len() + trace.last_step as usize);
    let mut from = Vec::with_capacity(events.capacity());
    let mut step = 0;
    for (seq, e) in trace.events.iter().enumerate() {
        if e.step != step {
            step = e.step;
            events.push(Event::Step(step));
            from.push(seq);
        }
        let event = match e.action {
            Action::Live | Action::Reserve | Action::OutOfMemory => Event::Alloc {
                id: e.alloc,
                bytes: e.bytes,
                stream: StreamId::default(),
            },
            Action::Free => Event::Free { id: e.alloc },
            Action::PageHeld | Action::PageAlloc | Action::PageRelease => continue,
        };
        events.push(event);
        from.push(seq);
    }
    let r = caching::replay(events, setting, limit, placed);
    let oom = r.refusal.map(|refusal| {
        let seq = from[refusal.index];
        let label = trace.label(&trace.events[seq]);
        Oom {
            step: refusal.step,
            seq,
            bytes: refusal.bytes,
            tensor: label.tensor.clone(),
            op: label.op.clone(),
            error: refusal.error,
        }
    });
    Replay {
        conf: setting.layout,
        steps: r.steps,
        oom,
    }
}

/// The trainer's device limit on `card` with another process holding `others` bytes: what
/// `cudaMalloc` can give before it fails (the card less the desktop, the trainer's CUDA context
/// and the other process).
pub fn limit(card: &Card, others: u64) -> Result<u64, BookError> {
    card.pool_capacity()
        .checked_sub(others)
        .ok_or_else(|| "the other process holds more than the card has left".into())
}

/// Steps `shown` of `report` (CubeCL's pool, from the simulator) beside the same requests under
/// PyTorch's allocator, both layouts, each replayed on `limit`.
pub fn steps_table(report: &RunReport, trace: &MemTrace, limit: u64, shown: &[u64]) -> Table {
    let replays = [Conf::Default, Conf::Expandable].map(|c| replay(trace, c, limit));
    let mut t = Table::new([
        "step",
        "CubeCL: peak in use",
        "CubeCL: reserved",
        "PyTorch: max allocated",
        "PyTorch: max reserved",
        "expandable: max reserved",
    ]);
    for &step in shown {
        let i = (step - 1) as usize;
        let at = |r: &Replay| r.steps.iter().find(|s| s.step == step).copied();
        let (Some(d), Some(x)) = (at(&replays[0]), at(&replays[1])) else {
            continue;
        };
        let cube = |v: &[u64]| v.get(i).map_or("-".into(), |b| bytes::show(*b));
        t.push([
            step.to_string(),
            cube(&report.peak_in_use),
            cube(&report.reserved),
            bytes::show(d.max_allocated),
            bytes::show(d.max_reserved),
            bytes::show(x.max_reserved),
        ]);
    }
    t
}

/// How a replay ended, for a table cell: the step that raised and what it tried, or the last
/// step and its bytes reserved, with what free-and-retry gave back.
pub fn outcome(replay: &Replay) -> String {
    let released = replay.steps.last().map_or(0, |s| s.released);
    let gave_back = if released > 0 {
        format!("; gave back {} on the way", bytes::show(released))
    } else {
        String::new()
    };
    match (&replay.oom, replay.steps.last()) {
        (Some(oom), _) => format!(
            "out of memory in step {}, trying {}{gave_back}",
            oom.step,
            bytes::show(oom.error.tried)
        ),
        (None, Some(last)) => format!(
            "lives to step {}, {} reserved{gave_back}",
            last.step,
            bytes::show(last.max_reserved)
        ),
        (None, None) => "no step ran".into(),
    }
}

/// For each amount in `others`, the SiTU arm's recipe with another process holding it: the
/// first refusal of CubeCL's pool (the simulator, `recipe`'s card less `others`) and how
/// PyTorch's allocator fares on the same requests (`trace`), in both layouts.
pub fn tenants_table(
    recipe: &Recipe,
    seed: u64,
    trace: &MemTrace,
    others: &[u64],
) -> Result<Table, BookError> {
    let mut t = Table::new([
        "another process holds",
        "CubeCL's pool",
        "PyTorch, default",
        "PyTorch, expandable_segments:True",
    ]);
    for &extra in others {
        let limit = limit(&recipe.card, extra)?;
        let mut r = recipe.clone();
        r.card.desktop_bytes += extra;
        let cube = highwater::run::simulate(&r, seed, trace.last_step);
        let cube = match cube.failures.first() {
            Some(f) => format!("refuses a page in step {}", f.step),
            None => format!("lives to step {}", trace.last_step),
        };
        t.push([
            bytes::show(extra),
            cube,
            outcome(&replay(trace, Conf::Default, limit)),
            outcome(&replay(trace, Conf::Expandable, limit)),
        ]);
    }
    Ok(t)
}

/// The figures of PyTorch's message for `error` on `card`, with another process holding
/// `others` bytes of it and no cap.
pub fn oom_figures(error: &OutOfMemory, card: &Card, others: u64) -> OomFigures {
    OomFigures::of(error, card.total_bytes, card.cuda_context_bytes, others)
}

/// The message's figures one by one, with what each is in this run.
pub fn reading_table(oom: &Oom, card: &Card, others: u64) -> Table {
    let f = oom_figures(&oom.error, card, others);
    let outside = card.total_bytes - f.free - f.process - others;
    Table::new(["the message says", "it is"])
        .row([
            format!("Tried to allocate {}", format_size(f.tried)),
            if f.tried == oom.error.requested {
                format!(
                    "the segment asked of the device; here the tensor's own size (from {} a \
                     segment is the request rounded up to {}): `{}` ({})",
                    bytes::show(MIN_LARGE_ALLOC),
                    bytes::show(ROUND_LARGE),
                    oom.tensor,
                    oom.op
                )
            } else {
                format!(
                    "the segment asked of the device, not the tensor: `{}` ({}) wanted {}",
                    oom.tensor,
                    oom.op,
                    bytes::show(oom.error.requested)
                )
            },
        ])
        .row([
            format!("of which {} is free", format_size(f.free)),
            "what the device had left after the allocator gave back every cached segment it could"
                .into(),
        ])
        .row([
            format!("Process PID has {} memory in use", format_size(others)),
            "the other process: NVML lists every compute process on the card, with its id".into(),
        ])
        .row([
            format!("this process has {} memory in use", format_size(f.process)),
            format!(
                "bytes reserved ({}) plus the CUDA context ({})",
                bytes::show(oom.error.reserved),
                bytes::show(card.cuda_context_bytes)
            ),
        ])
        .row([
            "total − free − the processes".into(),
            format!(
                "{}: the desktop ({}), a graphics process, which NVML's list of compute \
                 processes leaves out",
                bytes::show(outside),
                bytes::show(card.desktop_bytes)
            ),
        ])
        .row([
            format!("{} is allocated by PyTorch", format_size(f.allocated)),
            "tensors alive at the refusal, each rounded to its block".into(),
        ])
        .row([
            format!("{} is reserved by PyTorch but unallocated", format_size(f.unallocated)),
            "free blocks inside segments that also hold a live tensor: free-and-retry cannot return them"
                .into(),
        ])
}

/// What `expandable_segments:True`, the message's own advice, does for the job with another
/// process holding `others`: the step each layout raises in, and why.
pub fn expandable_lesson(card: &Card, trace: &MemTrace, others: u64) -> Result<String, BookError> {
    let limit = limit(card, others)?;
    let [default, expandable] = [Conf::Default, Conf::Expandable].map(|c| replay(trace, c, limit));
    let raised = |r: &Replay| r.oom.as_ref().map(|o| o.step);
    let d = raised(&default).ok_or("the default layout raised no error")?;
    let stranded = default
        .oom
        .as_ref()
        .map_or(0, |o| o.error.reserved - o.error.allocated);
    let then = match raised(&expandable) {
        Some(x) if x == d => format!("it raises in the same step, {d}"),
        Some(x) => format!(
            "it raises in step {x} instead of step {d}: the {} reserved but unallocated was real, \
             but the job needs more than the card has left",
            bytes::show(stranded)
        ),
        None => format!(
            "it lives to step {} instead of raising in step {d}: the {} reserved but \
             unallocated was what it lacked",
            trace.last_step,
            bytes::show(stranded)
        ),
    };
    Ok(format!(
        "The message ends with its usual advice. With `expandable_segments:True` one segment \
         grows by {} pages and free blocks merge across what were separate segments; here \
         {then}. Take the advice when reserved but unallocated is a large share of what the job \
         lacks; otherwise free the card or shrink the step.",
        bytes::show(LARGE_SEGMENT)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Book;

    const MIB: u64 = 1 << 20;

    fn situ(steps: u64) -> (Recipe, RunReport, MemTrace) {
        let recipe = Book::repository().recipe("situ").unwrap();
        let (report, trace) = highwater::run::simulate_traced(&recipe, 3, 1..=steps).unwrap();
        (recipe, report, trace)
    }

    #[test]
    fn format_size_is_pytorchs() {
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size(32 * MIB), "32.00 MiB");
        assert_eq!(format_size(16 << 30), "16.00 GiB");
    }

    #[test]
    fn pytorch_allocates_what_cubecl_holds_in_use_and_reserves_less() {
        let (recipe, report, trace) = situ(3);
        let r = replay(&trace, Conf::Default, recipe.card.pool_capacity());
        assert_eq!(r.oom, None);
        assert_eq!(r.steps.len(), 3);
        for (i, s) in r.steps.iter().enumerate() {
            // Blocks are rounded to 512 B and may keep an unsplit remainder (under 1 MiB each):
            // PyTorch's allocated is at least CubeCL's bytes in use, and close to it.
            let in_use = report.peak_in_use[i];
            assert!(s.max_allocated >= in_use, "{s:?}");
            assert!(s.max_allocated - in_use < 8 * MIB, "{s:?}");
            assert!(s.max_reserved < report.reserved[i], "{s:?}");
        }
        let x = replay(&trace, Conf::Expandable, recipe.card.pool_capacity());
        assert!(x.steps[0].max_reserved < r.steps[0].max_reserved);
    }

    #[test]
    fn a_smaller_limit_raises_with_the_figures_of_the_refusal() {
        let (recipe, _, trace) = situ(2);
        let limit = limit(&recipe.card, 512 * MIB).unwrap();
        let r = replay(&trace, Conf::Default, limit);
        let oom = r.oom.expect("14.36 GiB less 512 MiB is too little");
        assert_eq!(oom.step, 1);
        let e = oom.error;
        assert!(e.reserved + e.tried > e.limit && e.allocated <= e.reserved);
        let f = oom_figures(&e, &recipe.card, 512 * MIB);
        assert_eq!(
            f.free + f.process + recipe.card.desktop_bytes + f.others,
            recipe.card.total_bytes
        );
        let text = f.message();
        assert!(text.contains(&format!("Tried to allocate {}.", format_size(e.tried))));
        assert!(text.contains("GPU 0 has a total capacity of 16.00 GiB of which"));
        assert!(text.contains(" is free. Process PID has 512.00 MiB memory in use. Including"));
        let t = reading_table(&oom, &recipe.card, 512 * MIB);
        assert_eq!(t.rows().len(), 7);
    }

    /// What the chapter's prose says of its tables, on seed 3's 100 steps.
    #[test]
    fn the_chapters_claims_hold() {
        let (recipe, report, trace) = situ(100);
        let capacity = recipe.card.pool_capacity();
        let r = replay(&trace, Conf::Default, capacity);
        // Adam's moments: step 2 holds more than step 1; reserved creeps after step 2.
        assert!(r.steps[1].max_allocated > r.steps[0].max_allocated);
        assert!(r.steps[49].max_reserved > r.steps[2].max_reserved);
        // On the incident's card CubeCL's pool refuses a page and PyTorch lives, both layouts.
        assert!(report.first_failure().is_some());
        assert_eq!(r.oom, None);
        assert_eq!(replay(&trace, Conf::Expandable, capacity).oom, None);
        // With the 320 MiB tenant PyTorch raises after earlier steps passed, having given
        // back segments on the way; so does some smaller tenant row.
        let tenant = replay(
            &trace,
            Conf::Default,
            limit(&recipe.card, 320 * MIB).unwrap(),
        );
        let oom = tenant.oom.as_ref().unwrap();
        assert!(oom.step > 1 && tenant.steps.last().unwrap().released > 0);
        let lesson = expandable_lesson(&recipe.card, &trace, 320 * MIB).unwrap();
        assert!(lesson.contains("instead of step"), "{lesson}");
    }
}
