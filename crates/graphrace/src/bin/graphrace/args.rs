//! The arguments more than one subcommand takes: the load of a run (replays, trials, seed,
//! timing), one configuration at one concurrency, and their parsers.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use clap::Args;
use graphrace::{MAX_SESSIONS, Timing, Workload};

#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// Graph replays per trial (decode steps each session goes through).
    #[arg(long, value_name = "N", default_value_t = Workload::default().replays,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) replays: u32,
    /// Independent load tests per point.
    #[arg(long, value_name = "N", default_value_t = Workload::default().trials,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) trials: u32,
    #[arg(long, value_name = "N", default_value_t = Workload::default().seed)]
    pub(crate) seed: u64,
    /// σ of the per-replay log-normal jitter of kernel durations (the calibrated number).
    #[arg(long, value_name = "X", default_value_t = Timing::default().jitter_sigma,
          value_parser = parse_sigma)]
    pub(crate) sigma: f64,
    /// Slow-down of each of two kernels running at once.
    #[arg(long, value_name = "X", default_value_t = Timing::default().contention,
          value_parser = parse_contention)]
    pub(crate) contention: f64,
}

impl LoadArgs {
    pub(crate) fn workload(&self) -> Workload {
        Workload {
            replays: self.replays,
            trials: self.trials,
            seed: self.seed,
        }
    }

    pub(crate) fn timing(&self) -> Timing {
        Timing {
            jitter_sigma: self.sigma,
            contention: self.contention,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct OneArgs {
    /// Configuration file (TOML).
    #[arg(long, value_name = "PATH")]
    pub(crate) config: PathBuf,
    /// Concurrent sessions.
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = parse_one_session)]
    pub(crate) sessions: u32,
    #[command(flatten)]
    pub(crate) load: LoadArgs,
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn parse_sessions(s: &str) -> Result<RangeInclusive<u32>, String> {
    let n = |t: &str| {
        let n = t
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("`{t}` is not a positive number of sessions"))?;
        if n > MAX_SESSIONS {
            return Err(format!(
                "{n} sessions is more than the {MAX_SESSIONS} the simulator takes"
            ));
        }
        Ok(n)
    };
    let range = match s.split_once("..") {
        Some((a, b)) => n(a)?..=n(b)?,
        None => n(s)?..=n(s)?,
    };
    if range.is_empty() {
        return Err(format!("`{s}` is an empty range"));
    }
    Ok(range)
}

pub(crate) fn parse_one_session(s: &str) -> Result<u32, String> {
    let range = parse_sessions(s)?;
    if range.start() != range.end() {
        return Err(format!("`{s}`: one number of sessions here"));
    }
    Ok(*range.start())
}

/// σ of a log-normal: finite, not negative (0: every replay takes the nominal durations).
pub(crate) fn parse_sigma(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a finite σ ≥ 0")),
    }
}

/// A slow-down factor: finite, at least 1 (1: two kernels at once run at full speed each).
pub(crate) fn parse_contention(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 1.0 => Ok(x),
        _ => Err(format!("`{s}` is not a finite slow-down ≥ 1")),
    }
}
