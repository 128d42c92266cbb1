//! PyTorch's caching allocator as a program meets it: one of its layouts under the options of
//! `PYTORCH_CUDA_ALLOC_CONF` ([`Setting`]), on a device that grants so many bytes, fed a
//! program's requests and frees in order ([`replay`]), reporting what `torch.cuda` would per
//! step and the first request it would refuse. The rules are [`crate::pool`]'s and
//! [`crate::expandable`]'s; this is the one way to drive them from a request stream, used by
//! the book's replays of simulated traces and by `highwater replay` of real memory snapshots.

use std::collections::HashMap;
use std::fmt;

use crate::expandable::ExpandablePool;
use crate::pool::{Pool, StreamId};
use crate::rounding::Divisions;
use crate::usage::{OutOfMemory, Usage};

/// `PYTORCH_CUDA_ALLOC_CONF`: the allocator's two layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conf {
    /// The default: a segment per `cudaMalloc`.
    Default,
    /// `expandable_segments:True`: one growing segment per stream and pool half.
    Expandable,
}

impl Conf {
    /// As a reader sets it.
    pub fn name(self) -> &'static str {
        match self {
            Conf::Default => "default",
            Conf::Expandable => "expandable_segments:True",
        }
    }
}

/// An allocator setting the model covers: the layout, `roundup_power2_divisions`, and for
/// the default layout `max_split_size_mb` and `garbage_collection_threshold`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setting {
    /// Segments per `cudaMalloc`, or expandable.
    pub layout: Conf,
    /// How requests are rounded.
    pub divisions: Divisions,
    /// `max_split_size_mb` in bytes, when set.
    pub max_split: Option<u64>,
    /// `garbage_collection_threshold`, when set.
    pub gc_threshold: Option<f64>,
}

impl From<Conf> for Setting {
    fn from(layout: Conf) -> Setting {
        Setting {
            layout,
            divisions: Divisions::default(),
            max_split: None,
            gc_threshold: None,
        }
    }
}

/// A `PYTORCH_CUDA_ALLOC_CONF` the model cannot take, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("PYTORCH_CUDA_ALLOC_CONF `{conf}`: {reason}")]
pub struct SettingError {
    /// The setting as given.
    pub conf: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Setting {
    /// Reads a `PYTORCH_CUDA_ALLOC_CONF` value (`key:value` pairs separated by commas; `""`
    /// is the default), as c10's `CUDAAllocatorConfig` parses it. Options the model has no
    /// rules for are refused by name: keys other than the four it covers, and
    /// `max_split_size_mb` or `garbage_collection_threshold` beside expandable segments.
    pub fn parse(conf: &str) -> Result<Setting, SettingError> {
        let fail = |reason: String| SettingError {
            conf: conf.into(),
            reason,
        };
        let mut setting = Setting::from(Conf::Default);
        for option in split_options(conf) {
            let (key, value) = option
                .split_once(':')
                .ok_or_else(|| fail(format!("`{option}` is not `key:value`")))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "expandable_segments" => {
                    setting.layout = match value {
                        "True" => Conf::Expandable,
                        "False" => Conf::Default,
                        _ => return Err(fail(format!("{key} is True or False, not `{value}`"))),
                    }
                }
                "roundup_power2_divisions" => {
                    setting.divisions = parse_divisions(value).map_err(fail)?;
                }
                "max_split_size_mb" => {
                    let mb: u64 = value.parse().map_err(|_| {
                        fail(format!("{key} is a whole number of MiB, not `{value}`"))
                    })?;
                    // c10 asks for more than the large segment (kLargeBuffer / 1 MiB = 20).
                    if !(21..=1 << 30).contains(&mb) {
                        return Err(fail(format!(
                            "{key} must be more than 20 (c10's floor), not {mb}"
                        )));
                    }
                    setting.max_split = Some(mb << 20);
                }
                "garbage_collection_threshold" => {
                    let t: f64 = value
                        .parse()
                        .map_err(|_| fail(format!("{key} is a number, not `{value}`")))?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(fail(format!(
                            "{key} must lie strictly between 0 and 1, not {t}"
                        )));
                    }
                    setting.gc_threshold = Some(t);
                }
                _ => {
                    return Err(fail(format!(
                        "the model has no rules for `{key}`; it covers expandable_segments, \
                         roundup_power2_divisions, max_split_size_mb and \
                         garbage_collection_threshold"
                    )));
                }
            }
        }
        if setting.layout == Conf::Expandable
            && (setting.max_split.is_some() || setting.gc_threshold.is_some())
        {
            return Err(fail(
                "max_split_size_mb and garbage_collection_threshold beside expandable segments \
                 are not modelled yet"
                    .into(),
            ));
        }
        Ok(setting)
    }
}

/// The options of a setting, split at commas outside brackets (`roundup_power2_divisions`'
/// list form holds commas).
fn split_options(conf: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in conf.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&conf[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&conf[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .collect()
}

/// `roundup_power2_divisions`: `N`, or `[MB:N,…,>:N]` (`parseRoundUpPower2Divisions`: each
/// `MB`, a power of two, sets its interval and, first of all, every interval below it; `>`
/// sets every interval above the last named).
fn parse_divisions(value: &str) -> Result<Divisions, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("roundup_power2_divisions: `{s}` is not a whole number"))
    };
    let divisions = |n: u64| {
        if n == 0 || n.is_power_of_two() {
            Ok(n)
        } else {
            Err(format!(
                "roundup_power2_divisions must be a power of two, not {n}"
            ))
        }
    };
    let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        return Ok(Divisions::all(divisions(number(value)?)?));
    };
    let mut d = [0; 16];
    let mut last: Option<usize> = None;
    for pair in list.split(',') {
        let (at, n) = pair
            .split_once(':')
            .ok_or_else(|| format!("roundup_power2_divisions: `{pair}` is not `MB:N`"))?;
        let n = divisions(number(n)?)?;
        if at.trim() == ">" {
            d[last.map_or(0, |l| l + 1)..].fill(n);
            continue;
        }
        let mb = number(at)?;
        if !mb.is_power_of_two() {
            return Err(format!(
                "roundup_power2_divisions: interval {mb} is not a power of two"
            ));
        }
        let index = (mb.trailing_zeros() as usize).min(15);
        if last.is_none() {
            d[..index].fill(n);
        }
        d[index] = n;
        last = Some(index);
    }
    Ok(Divisions(d))
}

impl fmt::Display for Setting {
    /// As `PYTORCH_CUDA_ALLOC_CONF` (`default` for no option).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut options = Vec::new();
        if self.layout == Conf::Expandable {
            options.push("expandable_segments:True".to_string());
        }
        let d = self.divisions.0;
        if d.iter().any(|&n| n > 1) {
            if d.iter().all(|&n| n == d[0]) {
                options.push(format!("roundup_power2_divisions:{}", d[0]));
            } else {
                let list: Vec<String> =
                    (0..16).map(|i| format!("{}:{}", 1u64 << i, d[i])).collect();
                options.push(format!("roundup_power2_divisions:[{}]", list.join(",")));
            }
        }
        if let Some(bytes) = self.max_split {
            options.push(format!("max_split_size_mb:{}", bytes >> 20));
        }
        if let Some(t) = self.gc_threshold {
            options.push(format!("garbage_collection_threshold:{t}"));
        }
        if options.is_empty() {
            f.write_str("default")
        } else {
            f.write_str(&options.join(","))
        }
    }
}

/// PyTorch's `format_size`: bytes up to 1 KiB, then KiB, MiB or GiB with two decimals.
pub fn format_size(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    match b {
        0..=1024 => format!("{b} bytes"),
        1025..=1_048_576 => format!("{:.2} KiB", f / KIB),
        1_048_577..=1_073_741_824 => format!("{:.2} MiB", f / (KIB * KIB)),
        _ => format!("{:.2} GiB", f / (KIB * KIB * KIB)),
    }
}

/// The figures PyTorch's message is made of, as `DeviceCachingAllocator::malloc` computes them
/// on a card with another process holding some of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomFigures {
    /// "Tried to allocate": the segment or pages asked of the device.
    pub tried: u64,
    /// The card's memory (`cudaMemGetInfo`'s total).
    pub total: u64,
    /// What the device had free after the allocator gave back what it could.
    pub free: u64,
    /// The process's memory (NVML): the allocator's segments and the CUDA context.
    pub process: u64,
    /// Another compute process's memory, as NVML lists it (0: none on the card).
    pub others: u64,
    /// The cap `set_per_process_memory_fraction` set, if one was.
    pub allowed: Option<u64>,
    /// Bytes in blocks handed out.
    pub allocated: u64,
    /// Segments' bytes not handed out: cached free blocks the give-back could not return.
    pub unallocated: u64,
}

impl OomFigures {
    /// The figures of `error` on a card of `total` bytes whose process took `context` for
    /// its CUDA context, with another process holding `others` bytes of it and no cap.
    pub fn of(error: &OutOfMemory, total: u64, context: u64, others: u64) -> OomFigures {
        OomFigures {
            tried: error.tried,
            total,
            free: error.limit - error.reserved,
            process: error.reserved + context,
            others,
            allowed: None,
            allocated: error.allocated,
            unallocated: error.reserved - error.allocated,
        }
    }

    /// The message, word for word as PyTorch 2.11 raises it on device 0
    /// (`CUDACachingAllocator.cpp`'s `malloc`), but for the other process's id, which only
    /// NVML on the card knows (`PID`), and the order NVML lists the processes in (the other
    /// one first here).
    pub fn message(&self) -> String {
        let others = if self.others > 0 {
            format!(
                "Process PID has {} memory in use. ",
                format_size(self.others)
            )
        } else {
            String::new()
        };
        let allowed = self
            .allowed
            .map_or(String::new(), |a| format!("{} allowed; ", format_size(a)));
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}. GPU 0 has a total \
             capacity of {} of which {} is free. {others}Including non-PyTorch memory, this \
             process has {} memory in use. {allowed}{}",
            format_size(self.tried),
            format_size(self.total),
            format_size(self.free),
            format_size(self.process),
            self.accounting(),
        )
    }

    /// The message from "Of the allocated memory" on: the allocator's own figures and its
    /// advice, the same on any card.
    pub fn accounting(&self) -> String {
        format!(
            "Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch \
             but unallocated. If reserved but unallocated memory is large try setting \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
             documentation for Memory Management  \
             (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            format_size(self.allocated),
            format_size(self.unallocated),
        )
    }
}

/// The allocator under one [`Setting`], on a device that grants `limit` bytes.
#[derive(Clone, Debug)]
pub enum CachingAllocator {
    /// A segment per `cudaMalloc`.
    Default(Pool),
    /// Expandable segments.
    Expandable(ExpandablePool),
}

impl CachingAllocator {
    /// An empty allocator; with the default layout its first segments go where `placed` says
    /// (`(address, bytes)` in `cudaMalloc`'s order, [`Pool::place_segments`]).
    pub fn new(setting: Setting, limit: u64, placed: &[(u64, u64)]) -> CachingAllocator {
        match setting.layout {
            Conf::Default => {
                let mut pool = Pool::with_limit(limit).with_divisions(setting.divisions);
                if let Some(bytes) = setting.max_split {
                    pool = pool.with_max_split(bytes);
                }
                if let Some(threshold) = setting.gc_threshold {
                    pool = pool.with_gc_threshold(threshold);
                }
                pool.place_segments(placed.iter().copied());
                CachingAllocator::Default(pool)
            }
            Conf::Expandable => CachingAllocator::Expandable(
                ExpandablePool::with_limit(limit).with_divisions(setting.divisions),
            ),
        }
    }

    /// A block for `bytes` on `stream`: its address, or the refusal.
    pub fn alloc(&mut self, bytes: u64, stream: StreamId) -> Result<u64, OutOfMemory> {
        match self {
            CachingAllocator::Default(p) => p.try_alloc(bytes, stream).map(|r| r.start),
            CachingAllocator::Expandable(p) => p.try_alloc(bytes, stream).map(|r| r.start),
        }
    }

    /// The block at `addr` is free again.
    pub fn free(&mut self, addr: u64) {
        match self {
            CachingAllocator::Default(p) => p.free(addr, false),
            CachingAllocator::Expandable(p) => p.free(addr),
        }
    }

    /// What it holds and hands out.
    pub fn usage(&self) -> &Usage {
        match self {
            CachingAllocator::Default(p) => p.usage(),
            CachingAllocator::Expandable(p) => p.usage(),
        }
    }

    /// `(max_memory_allocated, max_memory_reserved)` since the last reset, then resets them.
    pub fn take_peaks(&mut self) -> (u64, u64) {
        let peaks = self.usage().peaks();
        match self {
            CachingAllocator::Default(p) => p.reset_peaks(),
            CachingAllocator::Expandable(p) => p.reset_peaks(),
        }
        (peaks.allocated, peaks.reserved)
    }
}

/// One event of a program, as the allocator sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Step `n` (1-based) starts: the peaks are reset here (`reset_peak_memory_stats`).
    Step(u64),
    /// A tensor of `bytes` is made on `stream`; `id` names it for its free.
    Alloc {
        /// The tensor's name, unique while it lives.
        id: u64,
        /// Its bytes, as asked.
        bytes: u64,
        /// The stream it is made on.
        stream: StreamId,
    },
    /// The tensor `id` is freed; a free of a tensor never made is ignored.
    Free {
        /// See [`Event::Alloc`].
        id: u64,
    },
}

/// One step as `torch.cuda` reports it, peaks reset at the step's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepFigures {
    /// 1-based step.
    pub step: u64,
    /// `max_memory_allocated()`.
    pub max_allocated: u64,
    /// `max_memory_reserved()`.
    pub max_reserved: u64,
    /// Bytes free-and-retry had given back to the device by the step's end, since the start.
    pub released: u64,
    /// `memory_allocated()` at the step's end (or at the refusal).
    pub allocated: u64,
    /// `memory_reserved()` at the step's end (or at the refusal).
    pub reserved: u64,
}

/// The first request the allocator refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The step it came in (0: before the first step).
    pub step: u64,
    /// Its event's index in the replayed events.
    pub index: usize,
    /// The tensor's bytes.
    pub bytes: u64,
    /// The allocator's figures at the refusal.
    pub error: OutOfMemory,
}

/// Events replayed until their end or the first refusal (PyTorch raises at the request: the
/// program stops there).
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// The setting.
    pub setting: Setting,
    /// Every step that ended, then the one that raised, if any.
    pub steps: Vec<StepFigures>,
    /// The refusal, if one was made.
    pub refusal: Option<Refusal>,
    /// The most bytes the allocator held at once over the whole replay.
    pub peak_reserved: u64,
    /// The most bytes handed out at once over the whole replay.
    pub peak_allocated: u64,
}

/// Replays `events` through the allocator under `setting` on a device that grants `limit`
/// bytes, its first segments where `placed` says (see [`CachingAllocator::new`]).
pub fn replay(
    events: impl IntoIterator<Item = Event>,
    setting: Setting,
    limit: u64,
    placed: &[(u64, u64)],
) -> Replay {
    let mut allocator = CachingAllocator::new(setting, limit, placed);
    let mut at: HashMap<u64, u64> = HashMap::new();
    let mut out = Replay {
        setting,
        steps: Vec::new(),
        refusal: None,
        peak_reserved: 0,
        peak_allocated: 0,
    };
    let mut step = 0;
    let close = |allocator: &mut CachingAllocator, step: u64, out: &mut Replay| {
        let (max_allocated, max_reserved) = allocator.take_peaks();
        out.peak_allocated = out.peak_allocated.max(max_allocated);
        out.peak_reserved = out.peak_reserved.max(max_reserved);
        if step > 0 {
            out.steps.push(StepFigures {
                step,
                max_allocated,
                max_reserved,
                released: allocator.usage().released(),
                allocated: allocator.usage().allocated(),
                reserved: allocator.usage().reserved(),
            });
        }
    };
    for (index, event) in events.into_iter().enumerate() {
        match event {
            Event::Step(n) => {
                close(&mut allocator, step, &mut out);
                step = n;
            }
            Event::Alloc { id, bytes, stream } => match allocator.alloc(bytes, stream) {
                Ok(addr) => {
                    at.insert(id, addr);
                }
                Err(error) => {
                    close(&mut allocator, step, &mut out);
                    out.refusal = Some(Refusal {
                        step,
                        index,
                        bytes,
                        error,
                    });
                    return out;
                }
            },
            Event::Free { id } => {
                if let Some(addr) = at.remove(&id) {
                    allocator.free(addr);
                }
            }
        }
    }
    close(&mut allocator, step, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_setting_reads_as_pytorch_parses_it_and_prints_back() {
        let s = Setting::parse("").unwrap();
        assert_eq!(s, Setting::from(Conf::Default));
        assert_eq!(s.to_string(), "default");
        let s = Setting::parse("expandable_segments:True").unwrap();
        assert_eq!(s.layout, Conf::Expandable);
        let s = Setting::parse(
            "max_split_size_mb:64,garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,>:4]",
        )
        .unwrap();
        assert_eq!(s.max_split, Some(64 * MIB));
        assert_eq!(s.gc_threshold, Some(0.6));
        let mut d = [1; 16];
        d[9..].fill(4);
        assert_eq!(s.divisions, Divisions(d), "the rounding module's example");
        let back = Setting::parse(&s.to_string()).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            Setting::parse("roundup_power2_divisions:4")
                .unwrap()
                .divisions,
            Divisions::all(4)
        );
    }

    #[test]
    fn what_the_model_cannot_take_is_refused_by_name() {
        for (conf, says) in [
            (
                "pinned_num_register_threads:8",
                "no rules for `pinned_num_register_threads`",
            ),
            ("expandable_segments:Yes", "True or False"),
            ("max_split_size_mb:abc", "whole number"),
            ("max_split_size_mb:20", "more than 20"),
            ("garbage_collection_threshold:1.5", "strictly between"),
            ("roundup_power2_divisions:3", "power of two"),
            ("roundup_power2_divisions:[300:2]", "not a power of two"),
            (
                "expandable_segments:True,max_split_size_mb:64",
                "not modelled",
            ),
            ("expandable_segments", "not `key:value`"),
        ] {
            let e = Setting::parse(conf).unwrap_err();
            assert!(e.to_string().contains(says), "{conf}: {e}");
        }
    }

    #[test]
    fn a_replay_counts_steps_and_stops_at_the_refusal() {
        let s = StreamId(0);
        let events = [
            Event::Step(1),
            Event::Alloc {
                id: 1,
                bytes: 30 * MIB,
                stream: s,
            },
            Event::Free { id: 1 },
            Event::Step(2),
            Event::Alloc {
                id: 2,
                bytes: 30 * MIB,
                stream: s,
            },
            Event::Alloc {
                id: 3,
                bytes: 50 * MIB,
                stream: s,
            },
            Event::Free { id: 9 },
        ];
        let r = replay(events, Conf::Default.into(), 64 * MIB, &[]);
        assert_eq!(r.steps.len(), 2);
        assert_eq!(r.steps[0].max_reserved, 30 * MIB);
        let refusal = r.refusal.expect("30 + 50 MiB pass 64 MiB");
        assert_eq!(
            (refusal.step, refusal.index, refusal.bytes),
            (2, 5, 50 * MIB)
        );
        assert_eq!(r.peak_reserved, 30 * MIB);
        let roomy = replay(events, Conf::Expandable.into(), 1 << 30, &[]);
        assert_eq!(roomy.refusal, None);
        assert_eq!(roomy.peak_allocated, 80 * MIB);
    }
}
