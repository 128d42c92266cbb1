//! The suite the static check is judged on: variants of the decode step (a configuration of
//! `repro/graphrace/` at a number of sessions), each checked statically and replayed on a GPU
//! under load, and the confusion table of the two.
//!
//! The suite is a file (`repro/graphrace-suite.toml`), one `[[variant]]` table per
//! configuration with the sessions to try it at. The GPU's verdicts are a [`SuiteRecord`]
//! written by `graphrace-gpu --suite` (with the driver's graph of every captured variant beside
//! it, a [`GraphDump`]); [`judge`] puts the three together.

use basics::line_of;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::capture::{Graph, capture};
use crate::check::{Finding, Use, check};
use crate::config::{Config, ConfigError, Mode};
use crate::driver::{self, GraphDump};
use crate::rates::MAX_SESSIONS;
use crate::replay::{Draw, Replayer, Timing};
use crate::step::decode_step;

/// One variant: a configuration at a number of sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Variant {
    /// The configuration.
    pub config: Config,
    /// Concurrent sessions.
    pub sessions: u32,
}

impl Variant {
    /// `incident@36`: the configuration's name and the sessions.
    pub fn name(&self) -> String {
        format!("{}@{}", self.config.name, self.sessions)
    }
}

/// The suite, in file order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Suite {
    /// Every variant.
    pub variants: Vec<Variant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    variant: Vec<VariantFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    config: Spanned<String>,
    sessions: Spanned<Vec<u32>>,
}

impl Suite {
    /// Parses a suite's text (`origin` names it in errors); `load` gives the configuration of a
    /// name (or why it cannot).
    pub fn parse(
        origin: &str,
        text: &str,
        load: impl Fn(&str) -> Result<Config, String>,
    ) -> Result<Suite, ConfigError> {
        let error = |at: usize, reason: String| ConfigError {
            origin: origin.to_string(),
            line: line_of(text, at),
            reason,
        };
        let file: SuiteFile = toml::from_str(text).map_err(|e| {
            error(
                e.span().map_or(0, |s| s.start),
                e.message().trim().to_string(),
            )
        })?;
        let mut variants: Vec<Variant> = vec![];
        for v in file.variant {
            let at = v.config.span().start;
            let config = load(v.config.get_ref()).map_err(|reason| error(at, reason))?;
            let sessions_at = v.sessions.span().start;
            if v.sessions.get_ref().is_empty() {
                return Err(error(sessions_at, "`sessions` lists none".into()));
            }
            for &sessions in v.sessions.get_ref() {
                if sessions == 0 || sessions > MAX_SESSIONS {
                    return Err(error(
                        sessions_at,
                        format!("{sessions} sessions is not in 1..={MAX_SESSIONS}"),
                    ));
                }
                let variant = Variant {
                    config: config.clone(),
                    sessions,
                };
                if variants.iter().any(|w| w.name() == variant.name()) {
                    return Err(error(
                        sessions_at,
                        format!("`{}` is in the suite twice", variant.name()),
                    ));
                }
                variants.push(variant);
            }
        }
        Ok(Suite { variants })
    }
}

/// What `graphrace-gpu --suite` writes: provenance first (`command` the very first field), then
/// one result per variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteRecord {
    /// The command that wrote the file.
    pub command: String,
    /// The GPU's name.
    pub gpu: String,
    /// The driver's version.
    pub driver: String,
    /// When (UTC).
    pub date: String,
    /// The repository's revision the binary was built from.
    pub git_revision: String,
    /// SM clock measured at start-up (kHz).
    pub sm_clock_khz: i32,
    /// Replays per trial.
    pub replays_per_trial: u32,
    /// Trials per variant.
    pub trials: u32,
    /// A bandwidth hog ran on a third stream.
    pub load: bool,
    /// Replays per variant timed kernel by kernel after the counted ones.
    #[serde(default)]
    pub timed_replays: u32,
    /// One per variant, in the suite's order.
    pub results: Vec<GpuResult>,
}

/// One variant replayed on the GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuResult {
    /// The variant's name (`incident@36`).
    pub variant: String,
    /// Sessions whose check found a row that differs, over all trials.
    pub corrupted: u64,
    /// Sessions checked, over all trials.
    pub observed: u64,
    /// Replays in which any row differed.
    pub racing_replays: u64,
    /// Replays run.
    pub replays: u64,
    /// Wall time per replay, host-measured.
    pub us_per_replay: f64,
    /// For each race the model's check finds: how the two kernels fell in the timed replays.
    #[serde(default)]
    pub gaps: Vec<Gap>,
    /// Each kernel's median start and end over the timed replays.
    #[serde(default)]
    pub kernels: Vec<KernelTime>,
}

/// When a kernel ran in the timed replays: medians, µs after the replay's first kernel started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelTime {
    /// The kernel.
    pub kernel: String,
    /// Its start.
    pub start_us: f64,
    /// Its end.
    pub end_us: f64,
}

/// How far apart two racing kernels ran on the GPU: the second's start less the first's end,
/// on the GPU's global timer (negative: they overlapped).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gap {
    /// The kernel whose access should come first.
    pub first: String,
    /// The other.
    pub second: String,
    /// The smallest gap over the timed replays, µs.
    pub min_us: f64,
    /// The median.
    pub median_us: f64,
    /// Timed replays.
    pub replays: u32,
}

/// Where a variant lands in the confusion table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The check flags a race and the GPU corrupted.
    FlaggedCorrupted,
    /// The check flags a race and the GPU never corrupted.
    FlaggedClean,
    /// The check flags nothing and the GPU corrupted: the check missed a race.
    CleanCorrupted,
    /// Neither.
    CleanClean,
}

/// One variant judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judged {
    /// `incident@36`.
    pub variant: String,
    /// Races on the graph CUDA built; `None` when the variant is not captured (eager).
    pub driver_races: Option<usize>,
    /// Races on the model's graph.
    pub model_races: usize,
    /// The pool tensors the GPU ran at other offsets than the model now places them (see
    /// [`driver::layout_differences`]); empty when the layouts agree or nothing was captured.
    pub moved: Vec<String>,
    /// Latent hazards on the model's graph (unrecorded frees).
    pub latent: usize,
    /// What the GPU saw.
    pub gpu: GpuResult,
    /// The confusion table's cell: flagged by the driver's graph (the model's when there is
    /// none) against corrupted on the GPU.
    pub verdict: Verdict,
    /// For a flagged variant: the room the GPU's timed replays left, in µs (see [`margin`], with
    /// the kernels' median times; the smallest over the variant's races; negative: the second
    /// access reached a shared byte before the first was done with it).
    pub margin_us: Option<f64>,
}

/// A suite that cannot be judged: a variant without a GPU result or without a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JudgeError {
    /// The GPU record lacks a variant.
    #[error("the GPU record has no result for `{0}`")]
    NoResult(String),
    /// The graph dump lacks a captured variant.
    #[error("the graph dump has no graph for `{0}`")]
    NoGraph(String),
    /// The model cannot capture a variant.
    #[error("`{0}` does not capture: {1}")]
    Capture(String, String),
}

/// Every variant of `suite` judged: the static check on the driver's graph (`graphs`, by
/// variant name), the model's check beside it, against the GPU's `record`.
pub fn judge(
    suite: &Suite,
    record: &SuiteRecord,
    graphs: &GraphDump,
) -> Result<Vec<Judged>, JudgeError> {
    let mut judged = vec![];
    for v in &suite.variants {
        let name = v.name();
        let gpu = (record.results.iter())
            .find(|r| r.variant == name)
            .ok_or_else(|| JudgeError::NoResult(name.clone()))?
            .clone();
        let model = capture(&decode_step(&v.config, v.sessions))
            .map_err(|e| JudgeError::Capture(name.clone(), e.to_string()))?;
        // The driver's races as tensor pairs, and the tensors the GPU placed elsewhere.
        let (driver_races, on_gpu, moved) = match v.config.mode {
            Mode::Eager => (None, None, vec![]),
            Mode::Captured => {
                let g = graphs
                    .graph(&name)
                    .ok_or_else(|| JudgeError::NoGraph(name.clone()))?;
                let races = driver::check(g);
                let pairs: Vec<(String, String)> = (races.iter())
                    .map(|w| (w.first.tensor.clone(), w.second.tensor.clone()))
                    .collect();
                let moved = driver::layout_differences(g, &model);
                (Some(races.len()), Some(pairs), moved)
            }
        };
        let report = check(&model);
        let model_races = report.races().count();
        let flagged = driver_races.unwrap_or(model_races) > 0;
        let corrupted = gpu.corrupted > 0;
        let verdict = match (flagged, corrupted) {
            (true, true) => Verdict::FlaggedCorrupted,
            (true, false) => Verdict::FlaggedClean,
            (false, true) => Verdict::CleanCorrupted,
            (false, false) => Verdict::CleanClean,
        };
        let times = measured_times(&model, &gpu.kernels);
        // The margin of the races the GPU ran: on its graph where there is one.
        let ran = |a: &Use, b: &Use| {
            on_gpu
                .as_ref()
                .is_none_or(|pairs| (pairs.iter()).any(|(x, y)| *x == a.tensor && *y == b.tensor))
        };
        let margin_us = (report.findings.iter())
            .filter(|_| flagged)
            .filter_map(Finding::race_pair)
            .filter(|(a, b)| ran(a, b))
            .filter_map(|(a, b)| margin(&model, &times, a, b))
            .min_by(f64::total_cmp);
        judged.push(Judged {
            variant: name,
            driver_races,
            model_races,
            moved,
            latent: report.findings.len() - model_races,
            gpu,
            verdict,
            margin_us,
        });
    }
    Ok(judged)
}

/// How much later than needed the second of two racing accesses reaches the bytes they share,
/// in µs: the smallest, over the shared bytes, of the time the second kernel reaches a byte
/// less the time the first does. A corruption needs the first to run that much late (or the
/// second that much early).
///
/// Each kernel of the GPU arm waits its fixed cost, then sweeps its tensor one session's row at
/// a time. `times` gives each node's start and end (µs); between its fixed wait and its end,
/// its rows are taken to be reached at an even pace. `a` is the access that should come first
/// (the earlier tenant's, or the earlier launch's: [`Finding::race_pair`]).
pub fn margin(model: &Graph, times: &[(f64, f64)], a: &Use, b: &Use) -> Option<f64> {
    let side = |u: &Use| {
        let node = model.node(&u.kernel)?;
        let tensor = model.tensor(&u.tensor)?.0;
        let placed = model.placements[tensor].as_ref()?;
        let (start, end) = *times.get(node)?;
        let fixed = model.nodes[node].kernel.cost.fixed_us.min(end - start);
        let rows = f64::from(model.sessions.max(1));
        Some(Sweep {
            start_us: start + fixed,
            per_row_us: (end - start - fixed).max(0.0) / rows,
            base: placed.range.start,
            row_bytes: model.tensors[tensor].row_bytes.max(1),
            bytes: placed.range.clone(),
        })
    };
    let (first, second) = (side(a)?, side(b)?);
    let shared = first.bytes.start.max(second.bytes.start)..first.bytes.end.min(second.bytes.end);
    if shared.is_empty() {
        return None;
    }
    // Both reach times are constant between row starts: the row starts in the shared bytes
    // (and its first byte) are every place the difference can change.
    let mut at: Vec<u64> = vec![shared.start];
    for s in [&first, &second] {
        let mut row = s.base + (shared.start - s.base).div_ceil(s.row_bytes) * s.row_bytes;
        while row < shared.end {
            at.push(row);
            row += s.row_bytes;
        }
    }
    at.into_iter()
        .map(|byte| second.reaches(byte) - first.reaches(byte))
        .min_by(f64::total_cmp)
}

/// Each node's start and end at the GPU arm's nominal timing: as soon as the graph lets it,
/// for its nominal duration (its waits count clock cycles: no jitter, no slow-down).
pub fn nominal_times(model: &Graph) -> Vec<(f64, f64)> {
    let still = Timing {
        jitter_sigma: 0.0,
        contention: 1.0,
    };
    let draw = Draw {
        seed: 0,
        trial: 0,
        replay: 0,
    };
    (Replayer::new(model, still).schedule(draw).iter())
        .map(|s| (s.start_us, s.end_us))
        .collect()
}

/// Each node's start and end as the GPU measured them (`kernels`, by name); the nominal
/// timing for any it did not time.
pub fn measured_times(model: &Graph, kernels: &[KernelTime]) -> Vec<(f64, f64)> {
    let nominal = nominal_times(model);
    (model.nodes.iter().zip(nominal))
        .map(|(n, nominal)| {
            (kernels.iter())
                .find(|k| k.kernel == n.kernel.name)
                .map_or(nominal, |k| (k.start_us, k.end_us))
        })
        .collect()
}

/// A kernel sweeping a tensor row by row, at nominal speed.
struct Sweep {
    /// When it reaches its first row, µs into the replay.
    start_us: f64,
    /// The wait after each row.
    per_row_us: f64,
    /// The tensor's first byte.
    base: u64,
    /// One session's row.
    row_bytes: u64,
    /// The tensor's bytes.
    bytes: std::ops::Range<u64>,
}

impl Sweep {
    /// When the sweep reaches `byte`.
    fn reaches(&self, byte: u64) -> f64 {
        let row = (byte - self.base) / self.row_bytes;
        self.start_us + row as f64 * self.per_row_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{Cost, Program, Stream};

    const MIB: u64 = 1 << 20;

    /// `fill` writes `scratch` on main; the side reads it, while main hands its block to `out`
    /// and writes it: the reuse race, the side's read starting at `read_at` µs and main's write
    /// at `write_at`, both sweeping one row per µs over 4 sessions.
    fn handoff(read_at: f64, write_at: f64) -> (Graph, Vec<(f64, f64)>) {
        let mut p = Program::new(4);
        let c = Cost {
            fixed_us: 0.0,
            per_session_us: 1.0,
        };
        let scratch = p.alloc("scratch", Stream::Main, MIB);
        p.launch("fill", Stream::Main, c, &[], &[scratch]);
        p.wait(Stream::Side, Stream::Main);
        p.launch("consume", Stream::Side, c, &[scratch], &[]);
        p.free(scratch);
        let out = p.alloc("out", Stream::Main, MIB);
        p.launch("produce", Stream::Main, c, &[], &[out]);
        p.wait(Stream::Main, Stream::Side);
        let g = capture(&p).unwrap();
        let times = vec![
            (0.0, 4.0),
            (read_at, read_at + 4.0),
            (write_at, write_at + 4.0),
        ];
        (g, times)
    }

    fn race_margin(read_at: f64, write_at: f64) -> f64 {
        let (g, times) = handoff(read_at, write_at);
        let report = check(&g);
        let (a, b) = report.findings.iter().find_map(Finding::race_pair).unwrap();
        assert_eq!(
            (a.kernel.as_str(), b.kernel.as_str()),
            ("consume", "produce")
        );
        margin(&g, &times, a, b).unwrap()
    }

    #[test]
    fn the_margin_is_how_late_the_writer_reaches_each_row_after_the_reader() {
        // The reader sweeps rows 0..4 from 4 µs, the writer from 10 µs: 6 µs to spare.
        assert_eq!(race_margin(4.0, 10.0), 6.0);
        // The writer starts first and stays ahead: every row is overwritten before it is read.
        assert_eq!(race_margin(10.0, 4.0), -6.0);
        // Both at once: a tie on every row.
        assert_eq!(race_margin(4.0, 4.0), 0.0);
    }
}
