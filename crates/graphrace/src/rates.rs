//! Rates: sessions corrupted per configuration and concurrency, as the incident counted them.
//!
//! A trial is one load test: `sessions` sessions decode together, the graph captured for that
//! batch is replayed once per decode step, `replays` times (4 rounds of a multi-turn
//! conversation × decode steps per round). A session is corrupted when any replay corrupted
//! its row. The rate is corrupted sessions over sessions, pooled over trials.

use serde::Serialize;

use crate::capture::{CaptureError, Graph, capture};
use crate::check::{Report, check};
use crate::config::Config;
use crate::replay::{Draw, Replay, Replayer, Timing};
use crate::step::{Costs, decode_step_with};

/// How the load test is run. Defaults: the incident's 4 rounds of 50 decode steps, 40 trials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Graph replays per trial: decode steps every session goes through.
    pub replays: u32,
    /// Load tests, each with every session fresh.
    pub trials: u32,
    /// What the jitter is drawn from (with the trial, the replay and the kernel).
    pub seed: u64,
}

impl Default for Workload {
    fn default() -> Workload {
        Workload {
            // 4 rounds × 50 decode steps: short tool-call turns (not fitted; the jitter's σ
            // absorbs the choice).
            replays: 200,
            trials: 40,
            seed: 2,
        }
    }
}

/// One point of a curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Rate {
    /// Concurrent sessions.
    pub sessions: u32,
    /// Sessions corrupted, summed over trials.
    pub corrupted: u64,
    /// Sessions run, summed over trials.
    pub observed: u64,
    /// Replays in which anything collided.
    pub racing_replays: u64,
    /// Replays run, summed over trials.
    pub replays: u64,
}

impl Rate {
    /// Sessions corrupted over sessions run (0 when none ran).
    pub fn fraction(&self) -> f64 {
        if self.observed == 0 {
            0.0
        } else {
            self.corrupted as f64 / self.observed as f64
        }
    }
}

/// A configuration captured at one concurrency: its graph and its static report.
#[derive(Clone, Debug)]
pub struct Captured {
    /// What was captured.
    pub config: Config,
    /// Its step as captured.
    pub graph: Graph,
}

/// The most concurrent sessions a step is built for: the step's tensors and the replay's rows
/// grow with it, and the incident's server ran about a hundred.
pub const MAX_SESSIONS: u32 = 100_000;

impl Captured {
    /// `config`'s decode step at `sessions` sessions, captured at the stylised costs.
    pub fn new(config: &Config, sessions: u32) -> Result<Captured, CaptureError> {
        Captured::with_costs(config, sessions, &Costs::default())
    }

    fn with_costs(config: &Config, sessions: u32, costs: &Costs) -> Result<Captured, CaptureError> {
        if sessions > MAX_SESSIONS {
            return Err(CaptureError::TooManySessions {
                sessions,
                max: MAX_SESSIONS,
            });
        }
        Ok(Captured {
            config: config.clone(),
            graph: capture(&decode_step_with(config, sessions, costs))?,
        })
    }

    /// The static check of its graph.
    pub fn check(&self) -> Report {
        check(&self.graph)
    }

    /// The load test: `workload.trials` trials of `workload.replays` replays.
    pub fn rate(&self, timing: Timing, workload: Workload) -> Rate {
        let replayer = Replayer::new(&self.graph, timing);
        let sessions = self.graph.sessions;
        let mut rate = Rate {
            sessions,
            corrupted: 0,
            observed: u64::from(sessions) * u64::from(workload.trials),
            racing_replays: 0,
            replays: u64::from(workload.replays) * u64::from(workload.trials),
        };
        if !replayer.can_collide() {
            return rate;
        }
        let mut hit = vec![false; sessions as usize];
        for trial in 0..workload.trials {
            hit.fill(false);
            for replay in 0..workload.replays {
                let r = replayer.replay(Draw {
                    seed: workload.seed,
                    trial,
                    replay,
                });
                rate.racing_replays += u64::from(!r.collisions.is_empty());
                for c in &r.collisions {
                    for s in c.sessions.clone() {
                        hit[s as usize] = true;
                    }
                }
            }
            rate.corrupted += hit.iter().filter(|h| **h).count() as u64;
        }
        rate
    }

    /// The first replay of the load test in which something collided.
    pub fn first_racing_replay(
        &self,
        timing: Timing,
        workload: Workload,
    ) -> Option<(Draw, Replay)> {
        let replayer = Replayer::new(&self.graph, timing);
        if !replayer.can_collide() {
            return None;
        }
        (0..workload.trials)
            .flat_map(|trial| (0..workload.replays).map(move |replay| (trial, replay)))
            .map(|(trial, replay)| Draw {
                seed: workload.seed,
                trial,
                replay,
            })
            .map(|d| (d, replayer.replay(d)))
            .find(|(_, r)| !r.collisions.is_empty())
    }
}

/// The rate at each concurrency of `sessions`.
pub fn sweep(
    config: &Config,
    sessions: impl IntoIterator<Item = u32>,
    timing: Timing,
    workload: Workload,
) -> Result<Vec<Rate>, CaptureError> {
    sessions
        .into_iter()
        .map(|s| Ok(Captured::new(config, s)?.rate(timing, workload)))
        .collect()
}
