//! "Will it fit?" for a snapshot: its requests replayed under one setting on a device that
//! grants so many bytes, and the request that would be refused, named as a reader finds it
//! in their code (its step, its place in the step, its Python frame).

use std::sync::Arc;

use super::{Frame, MAX_DEVICE_BYTES, Requests, Snapshot, Stack};
use crate::caching::{self, Conf, Event, Replay, Setting};
use crate::rounding::Divisions;
use crate::usage::OutOfMemory;

/// A request the replay refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Its step.
    pub step: u64,
    /// Its place in the step: the `nth` request (1-based) of the step's `of`.
    pub nth: usize,
    /// See [`Refused::nth`].
    pub of: usize,
    /// The tensor's bytes.
    pub bytes: u64,
    /// Where it was asked for (empty when the snapshot kept no stacks, or for a tensor made
    /// before the trace began).
    pub stack: Arc<Stack>,
    /// The allocator's figures at the refusal.
    pub error: OutOfMemory,
}

impl Refused {
    /// The frame a reader looks for: the innermost that is not PyTorch's own, else the
    /// innermost.
    pub fn frame(&self) -> Option<&Frame> {
        let own =
            |f: &&Frame| !f.filename.contains("/torch/") && !f.filename.contains("site-packages");
        let python = &self.stack.python;
        python.iter().find(own).or(python.first())
    }

    /// Where it came from, for a reader: `forward (train.py:42)`, with the op when known
    /// (`in NllLossBackward0` for backward, whose thread has no Python frames).
    pub fn place(&self) -> String {
        let frame = self.frame().map(|f| {
            let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
            format!("{} ({file}:{})", f.name, f.line)
        });
        match (frame, &self.stack.op) {
            (Some(f), Some(op)) => format!("{f}, op {op}"),
            (Some(f), None) => f,
            (None, Some(op)) => {
                format!("op {op} (no Python frame: backward runs on autograd's thread)")
            }
            (None, None) => "no stack recorded".into(),
        }
    }
}

/// A snapshot's requests replayed under one setting and limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The limit: the bytes the allocator could take.
    pub limit: u64,
    /// The replay.
    pub replay: Replay,
    /// The request refused, if one was.
    pub refused: Option<Refused>,
}

impl Verdict {
    /// Whether every request was served.
    pub fn fits(&self) -> bool {
        self.refused.is_none()
    }
}

/// Replays `requests` (read from `snapshot`) under `setting` on a device granting `limit`
/// (at most [`MAX_DEVICE_BYTES`]). With the default layout the model's segments go where the recorded driver put the
/// snapshot's (its `segment_alloc` events, in order, while sizes agree): best fit breaks ties
/// by address, and that placement is what the recording knows of the driver.
pub fn verdict(snapshot: &Snapshot, requests: &Requests, setting: Setting, limit: u64) -> Verdict {
    let limit = limit.min(MAX_DEVICE_BYTES);
    let placed = snapshot.placed_segments();
    let replay = caching::replay(requests.events.iter().copied(), setting, limit, &placed);
    let refused = replay.refusal.map(|r| {
        let start = requests.events[..r.index]
            .iter()
            .rposition(|e| matches!(e, Event::Step(_)))
            .unwrap_or(0);
        let end = requests.events[r.index..]
            .iter()
            .position(|e| matches!(e, Event::Step(_)))
            .map_or(requests.events.len(), |n| r.index + n);
        let is_alloc = |e: &&Event| matches!(e, Event::Alloc { .. });
        let nth = requests.events[start..=r.index]
            .iter()
            .filter(is_alloc)
            .count();
        let of = requests.events[start..end].iter().filter(is_alloc).count();
        let stack = requests.origin[r.index]
            .map_or_else(Arc::default, |i| snapshot.events[i].stack.clone());
        Refused {
            step: r.step,
            nth,
            of,
            bytes: r.bytes,
            stack,
            error: r.error,
        }
    });
    Verdict {
        limit,
        replay,
        refused,
    }
}

/// The smallest limit, to 2 MiB, under which `requests` fit under `setting`, found by
/// bisection between nothing and the bytes a replay on [`MAX_DEVICE_BYTES`] reserved at its
/// peak (which fit); `None` when they do not fit even there. Free-and-retry makes fitting not quite monotone in the limit: a limit above
/// the one found may still fail in rare cases, so the verdict at a chosen limit is
/// [`verdict`]'s, not this.
pub fn smallest_fit(snapshot: &Snapshot, requests: &Requests, setting: Setting) -> Option<u64> {
    const STEP: u64 = 2 << 20;
    let placed = snapshot.placed_segments();
    let run =
        |limit: u64| caching::replay(requests.events.iter().copied(), setting, limit, &placed);
    let fits = |limit: u64| run(limit).refusal.is_none();
    let most = run(MAX_DEVICE_BYTES);
    if most.refusal.is_some() {
        return None;
    }
    let (mut lo, mut hi) = (0, most.peak_reserved.div_ceil(STEP));
    // Invariant: `hi` steps fit, `lo` steps do not (none fit in nothing, unless nothing is asked).
    if hi == 0 {
        return Some(0);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid * STEP) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi * STEP)
}

/// The settings worth trying beside `recorded`: it first, then the default, expandable
/// segments, `garbage_collection_threshold:0.6`, `max_split_size_mb:128` and
/// `roundup_power2_divisions:4` (PyTorch's documented knobs against fragmentation), each
/// once.
pub fn settings_worth_trying(recorded: Setting) -> Vec<Setting> {
    let default = Setting::from(Conf::Default);
    let mut out = vec![
        recorded,
        default,
        Setting::from(Conf::Expandable),
        Setting {
            gc_threshold: Some(0.6),
            ..default
        },
        Setting {
            max_split: Some(128 << 20),
            ..default
        },
        Setting {
            divisions: Divisions::all(4),
            ..default
        },
    ];
    let mut seen = Vec::new();
    out.retain(|s| {
        let new = !seen.contains(s);
        seen.push(*s);
        new
    });
    out
}
