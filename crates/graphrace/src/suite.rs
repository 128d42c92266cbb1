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

use crate::capture::capture;
use crate::check::{Finding, check};
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
    /// Latent hazards on the model's graph (unrecorded frees).
    pub latent: usize,
    /// What the GPU saw.
    pub gpu: GpuResult,
    /// The confusion table's cell: flagged by the driver's graph (the model's when there is
    /// none) against corrupted on the GPU.
    pub verdict: Verdict,
    /// For a flagged race: the room the nominal timing leaves, in µs, between the end of the
    /// access that should come first and the start of the other (the smallest over the
    /// variant's races; negative: they overlap at nominal speed).
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
        let driver_races = match v.config.mode {
            Mode::Eager => None,
            Mode::Captured => {
                let g = graphs
                    .graph(&name)
                    .ok_or_else(|| JudgeError::NoGraph(name.clone()))?;
                Some(driver::check(g).len())
            }
        };
        let model = capture(&decode_step(&v.config, v.sessions))
            .map_err(|e| JudgeError::Capture(name.clone(), e.to_string()))?;
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
        // The margin: at nominal speed (no jitter), how long after the first access ends the
        // second starts.
        let still = Timing {
            jitter_sigma: 0.0,
            ..Timing::default()
        };
        let spans = Replayer::new(&model, still).schedule(Draw {
            seed: 0,
            trial: 0,
            replay: 0,
        });
        let at = |kernel: &str| {
            (model.nodes.iter())
                .position(|n| n.kernel.name == kernel)
                .map(|i| spans[i])
        };
        let margin_us = (report.findings.iter())
            .filter_map(|f| {
                let (a, b) = match f {
                    Finding::UnorderedReuse { earlier, later, .. } => (earlier, later),
                    Finding::UnorderedAccess { first, second } => (first, second),
                    Finding::UnrecordedFree { .. } => return None,
                };
                let (a, b) = (at(&a.kernel)?, at(&b.kernel)?);
                // Whichever starts first at nominal speed is the one that should finish first.
                let (first, second) = if a.start_us <= b.start_us {
                    (a, b)
                } else {
                    (b, a)
                };
                Some(second.start_us - first.end_us)
            })
            .min_by(f64::total_cmp);
        judged.push(Judged {
            variant: name,
            driver_races,
            model_races,
            latent: report.findings.len() - model_races,
            gpu,
            verdict,
            margin_us,
        });
    }
    Ok(judged)
}
