//! "Will it fit?" for a model the GPU never ran: the dry run's prediction, with its band.
//!
//! On a GPU, a problem missing from the autotune cache is settled by timing its candidates;
//! dry, nothing runs, so its pick is predicted from the atlas (the card's cache of problems
//! other models tuned: [`Atlas::predict`]). Candidates differ in the scratch memory they take, so
//! the answer comes with the least and the most the run would reserve over the candidates it
//! could have picked:
//!
//! 1. **discover**: the model trained dry over the atlas, each problem it lacks tuned on the dry
//!    device and settled by memory ([`TieBreak::LeastMemory`]), which records every candidate's
//!    bytes;
//! 2. **three runs over complete caches**: the atlas plus every missed problem settled on the
//!    predicted pick, on the leanest candidate, on the hungriest. Nothing is tuned during these
//!    runs, as on a GPU whose cache is warm: the figures are a warm GPU's, for each choice.
//!
//! A choice can bring problems of its own (a kernel that calls another tuned kernel); each run
//! settles those the same way and runs again, at most [`ROUNDS`] times.
//!
//! On burn-fusion a run's pages also depend on where burn-fusion's work meets the training
//! thread's (`dryrun::schedule`): every choice is run again at each schedule the band explores
//! ([`schedules`]), and the band's edges are the least and the most of all those runs. The same
//! input gives the same band on any host.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use dryrun::atlas::{Candidate, Entry, Prediction};
use dryrun::{Atlas, AutotuneError, CardProfile, Schedule, TieBreak};
use highwater::conform::{Exactness, MeasuredStep, NetworkRecord, exactness};
use highwater::recipe::Backend;

use crate::dry::{DryOutcome, DryPlan, ReplayError, dry_network, network_plan_for};

/// Runs per choice, at most: the first, and reruns for problems a choice brought.
pub const ROUNDS: usize = 3;

/// The schedules a band explores on `backend`, the prediction's first: on burn-fusion
/// [`Schedule::EXPLORED`], on CubeBackend the one there is (no second thread).
pub fn schedules(backend: Backend) -> &'static [Schedule] {
    match backend {
        Backend::Fusion => &Schedule::EXPLORED,
        Backend::Cube => &[Schedule::IN_ORDER],
    }
}

/// How one problem the atlas lacked was settled.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The problem, as the dry device tuned it (every candidate with its bytes as its time).
    pub problem: Entry,
    /// How that device settled it: how its times read as bytes.
    pub timed_by: TieBreak,
    /// The miss policy's pick, and the atlas problem it came from.
    pub prediction: Prediction,
    /// The candidate that reserves the least, and its bytes.
    pub leanest: (Candidate, u64),
    /// The candidate that reserves the most, and its bytes.
    pub hungriest: (Candidate, u64),
}

/// The prediction and its band.
#[derive(Debug, Clone)]
pub struct Band {
    /// The run with every missed problem settled by the miss policy.
    pub predicted: DryOutcome,
    /// With every missed problem on its leanest candidate; `None` when the atlas held every
    /// problem (the prediction is then exact, as the dry run is with the GPU's cache).
    pub least: Option<DryOutcome>,
    /// With every missed problem on its hungriest candidate.
    pub most: Option<DryOutcome>,
    /// How each missed problem was settled, in the order the run met them.
    pub decided: Vec<Decision>,
    /// Every choice's run again at each other schedule the band explored (none on
    /// CubeBackend), with its schedule.
    pub explored: Vec<(Schedule, DryOutcome)>,
}

/// How the miss policy's picks compare with the GPU's, where the GPU's are known (`gpu`: the
/// model's own cache, as its first run on the GPU filled it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Agreement {
    /// Problems decided by the miss policy whose GPU pick is known.
    pub known: usize,
    /// The policy named the GPU's kernel.
    pub same_kernel: usize,
    /// The policy's kernel reserves what the GPU's does (the same bytes on the dry device).
    pub same_bytes: usize,
}

impl Band {
    /// The miss policy against the GPU's own picks (`gpu`).
    pub fn agreement(&self, gpu: &Atlas) -> Agreement {
        let mut a = Agreement::default();
        for d in &self.decided {
            let Some(won) = gpu
                .entries
                .iter()
                .find(|e| e.tuner == d.problem.tuner && e.key == d.problem.key)
                .and_then(|e| e.winner().map(|w| w.name.clone()))
            else {
                continue;
            };
            a.known += 1;
            a.same_kernel += usize::from(d.prediction.pick.name == won);
            let bytes = |name: &str| {
                let c = d.problem.ran().find(|c| c.name == name)?;
                d.timed_by.bytes(c.nanos?)
            };
            a.same_bytes +=
                usize::from(bytes(&won).is_some() && bytes(&won) == bytes(&d.prediction.pick.name));
        }
        a
    }

    /// Per step: bytes reserved at the end of it, least, predicted and most (the predicted run's
    /// steps; a bound that died earlier stops its column). The band's edges are the least and the
    /// most of the three runs: on CubeBackend a run's bytes reserved vary by a few hundred bytes
    /// from run to run (on the GPU as dry), more than the leanest and hungriest choices differ
    /// when they differ little.
    pub fn reserved(&self) -> Vec<(Option<u64>, u64, Option<u64>)> {
        let at = |o: &Option<DryOutcome>, i: usize| match o {
            None => Some(self.predicted.steps[i].reserved),
            Some(o) => o.steps.get(i).map(|s| s.reserved),
        };
        (0..self.predicted.steps.len())
            .map(|i| {
                let x = self.predicted.steps[i].reserved;
                let (least, most) = (at(&self.least, i), at(&self.most, i));
                let explored = self.explored.iter().map(|(_, o)| o.steps.get(i));
                match (least, most) {
                    (Some(l), Some(h)) => {
                        let seen = explored.clone().flatten().map(|s| s.reserved);
                        let low = seen.clone().fold(l.min(h).min(x), u64::min);
                        // A run that died before this step needed more: the top is open.
                        let high = seen.fold(l.max(h).max(x), u64::max);
                        let died = explored.clone().any(|s| s.is_none());
                        (Some(low), x, (!died).then_some(high))
                    }
                    _ => (least, x, most),
                }
            })
            .collect()
    }

    /// The band has edges apart from the prediction: the atlas lacked problems, or burn-fusion's
    /// schedules were explored.
    pub fn is_banded(&self) -> bool {
        self.least.is_some() || !self.explored.is_empty()
    }

    /// The run at the band's top: the first to die (the earliest step), else the one that
    /// reserved the most at any step's end. What a batch that must fit whatever happens is
    /// searched against.
    pub fn top(self) -> DryOutcome {
        let died = |o: &DryOutcome| o.died.as_ref().map_or(u64::MAX, |d| d.step);
        let most = |o: &DryOutcome| o.steps.iter().map(|s| s.reserved).max().unwrap_or(0);
        std::iter::once(self.predicted)
            .chain(self.least)
            .chain(self.most)
            .chain(self.explored.into_iter().map(|(_, o)| o))
            .min_by_key(|o| (died(o), std::cmp::Reverse(most(o))))
            .expect("the prediction at least")
    }

    /// Every run the band made: the prediction, the least and the most, and the explored.
    fn runs(&self) -> impl Iterator<Item = &DryOutcome> + Clone {
        std::iter::once(&self.predicted)
            .chain(self.least.iter())
            .chain(self.most.iter())
            .chain(self.explored.iter().map(|(_, o)| o))
    }

    /// The widest the band is at any step (most less least), over the steps where both edges
    /// are known: what the choices the atlas could not settle and the schedules together span.
    pub fn width(&self) -> u64 {
        widest(&self.reserved())
    }
}

/// The widest of per-step edges `(least, prediction, most)`, over the steps where both are known.
fn widest(reserved: &[(Option<u64>, u64, Option<u64>)]) -> u64 {
    reserved
        .iter()
        .filter_map(|&(l, _, h)| Some(h? - l?))
        .max()
        .unwrap_or(0)
}

/// A step whose GPU figure lies outside a band: step, GPU, least, most.
pub type Outside = (u64, u64, u64, u64);

/// A recorded network replayed from an atlas that lacks some of its problems, held to the GPU:
/// the predicted bytes in use against the GPU's runs, and the GPU's bytes reserved against the
/// band.
#[derive(Debug, Clone)]
pub struct BandCheck {
    /// The figures of the predicted run that differ from the record, beyond the GPU's spread.
    pub in_use: Exactness,
    /// Phases whose GPU bytes in use (any run's) lie outside the three runs' least and most,
    /// widened by the GPU's spread: step, figure, GPU, least, most. A kernel's pick moves bytes
    /// in use a little (a TMA kernel's output is padded for its copies), so a mispredicted pick
    /// can leave the prediction off by a few kilobytes while the band still holds the GPU.
    pub in_use_outside: Vec<(u64, &'static str, u64, u64, u64)>,
    /// Steps whose GPU bytes reserved (any run's) lie outside the band widened by
    /// `reserved_tolerance`: step, GPU, least, most.
    pub reserved_outside: Vec<Outside>,
    /// How far outside the band the GPU's bytes reserved may lie: [`reserved_tolerance`].
    pub reserved_tolerance: u64,
    /// Problems the atlas lacked.
    pub decided: usize,
    /// Per step: the band's least, the prediction and the most bytes reserved ([`Band::reserved`]).
    pub reserved: Vec<(Option<u64>, u64, Option<u64>)>,
}

impl BandCheck {
    /// The GPU's bytes in use and reserved inside the band at every phase of every step, and
    /// the run as long as the GPU's.
    pub fn holds(&self) -> bool {
        self.in_use_outside.is_empty()
            && self.reserved_outside.is_empty()
            && self.in_use.completed.0 == self.in_use.completed.1
    }

    /// Steps at which some GPU run reserved outside the band ([`BandCheck::reserved_outside`]
    /// names a step once per run).
    pub fn steps_outside(&self) -> usize {
        let steps: std::collections::BTreeSet<u64> =
            self.reserved_outside.iter().map(|o| o.0).collect();
        steps.len()
    }

    /// The band's widest at any step: [`Band::width`].
    pub fn width(&self) -> u64 {
        widest(&self.reserved)
    }

    /// The prediction's bytes in use are the GPU's, to its spread, at every phase.
    pub fn in_use_exact(&self) -> bool {
        self.in_use
            .differences
            .iter()
            .filter(|d| d.figure != "reserved")
            .all(|d| d.measured.abs_diff(d.predicted) <= self.in_use.gpu_spread)
    }
}

/// Replays a network recorded on the GPU (and its repeats) dry from `atlas` and holds it to
/// them: [`BandCheck`].
pub fn replay_band(
    record: &NetworkRecord,
    repeats: &[NetworkRecord],
    card: Arc<CardProfile>,
    atlas: &Atlas,
) -> Result<(Band, BandCheck), ReplayError> {
    let (network, plan) = network_plan_for(record, &card)?;
    let band = dry_band(&plan, atlas, schedules(record.backend), |p, dir| {
        dry_network(&network, p, card.clone(), dir)
    })?;
    let in_use = exactness(
        record,
        repeats,
        &band.predicted.steps,
        band.predicted.died.as_ref(),
    );
    let runs: Vec<&NetworkRecord> = std::iter::once(record).chain(repeats).collect();
    let spread = in_use.gpu_spread;
    let tolerance = reserved_tolerance(&card, spread);
    let reserved_outside = band
        .reserved()
        .iter()
        .enumerate()
        .flat_map(|(i, &(least, _, most))| {
            runs.iter()
                .filter_map(move |r| outside(i, r.steps.get(i)?.reserved, least, most, tolerance))
        })
        .collect();
    let in_use_outside = in_use_outside(&band, &runs, spread);
    let decided = band.decided.len();
    let reserved = band.reserved();
    Ok((
        band,
        BandCheck {
            in_use,
            in_use_outside,
            reserved_outside,
            reserved_tolerance: tolerance,
            decided,
            reserved,
        },
    ))
}

/// [`BandCheck::in_use_outside`]: each GPU run's bytes in use after forward and after backward
/// against the least and most of the band's runs, widened by `spread`.
fn in_use_outside(
    band: &Band,
    runs: &[&NetworkRecord],
    spread: u64,
) -> Vec<(u64, &'static str, u64, u64, u64)> {
    let dry: Vec<&DryOutcome> = band.runs().collect();
    type Figure = fn(&MeasuredStep) -> u64;
    let figures: [(&'static str, Figure); 2] = [
        ("in_use_after_forward", |s| s.in_use_after_forward),
        ("in_use_after_backward", |s| s.in_use_after_backward),
    ];
    let mut found = Vec::new();
    for i in 0..band.predicted.steps.len() {
        for (figure, of) in figures {
            let values = dry.iter().filter_map(|o| o.steps.get(i).map(of));
            let (l, h) = (values.clone().min(), values.max());
            for gpu in runs.iter().filter_map(|r| r.steps.get(i).map(of)) {
                if let Some((step, gpu, l, h)) = outside(i, gpu, l, h, spread) {
                    found.push((step, figure, gpu, l, h));
                }
            }
        }
    }
    found
}

/// How far the GPU's bytes reserved may lie outside a band and still be the band's pages: the
/// GPU's own `spread`, or half the smallest page the pool can add, whichever is larger.
///
/// Why pages: CubeCL counts bytes reserved by summing its slices, and a free slice reused for a
/// smaller tensor drops its old padding from the count (up to 511 B each time; cubecl-runtime
/// 0.10's `MemoryPage::try_reserve`). The count therefore sits a few hundred bytes to a few
/// kilobytes below the pages, by an amount that follows the order of frees, which burn's hash
/// maps change from process to process, on the GPU as dry: the GPU's warm runs of the ResNet
/// differ by 480 B, and two dry replays of its first run by as much again. A page more or less
/// moves the count by at least the smallest page (8.7 MiB on the H200).
pub fn reserved_tolerance(card: &CardProfile, spread: u64) -> u64 {
    spread.max(card.smallest_page() / 2)
}

/// Step `i`'s GPU figure against a band's `least … most` (an edge `None` where that run died
/// before the step: the band is open on that side) widened by `tolerance`: the step, the figure
/// and the edges when it lies outside.
fn outside(
    i: usize,
    gpu: u64,
    least: Option<u64>,
    most: Option<u64>,
    tolerance: u64,
) -> Option<Outside> {
    let (l, h) = (least.unwrap_or(0), most.unwrap_or(u64::MAX));
    (gpu.saturating_add(tolerance) < l || gpu > h.saturating_add(tolerance)).then_some((
        i as u64 + 1,
        gpu,
        l,
        h,
    ))
}

/// Trains a model dry with `run` (a plan, the cache folder it starts from) and bands its figures
/// over the choices the atlas could not settle and over `schedules` (the first is the
/// prediction's: [`schedules`]). `plan`'s tie-break and schedule are replaced per run.
pub fn dry_band(
    plan: &DryPlan,
    atlas: &Atlas,
    schedules: &[Schedule],
    run: impl Fn(&DryPlan, Option<&Path>) -> Result<DryOutcome, AutotuneError> + Sync,
) -> Result<Band, AutotuneError> {
    let scratch = Scratch::new()?;
    let (first_schedule, others) = schedules
        .split_first()
        .unwrap_or((&Schedule::IN_ORDER, &[]));
    let with = |tie_break, schedule| DryPlan {
        tie_break,
        schedule,
        ..plan.clone()
    };
    let discovery = scratch.write("atlas", atlas)?;
    let first = run(
        &with(TieBreak::LeastMemory, *first_schedule),
        Some(&discovery),
    )?;
    if first.autotune_misses.is_empty() {
        // Every problem settled: the prediction is exact but for the schedule.
        let jobs = others
            .iter()
            .map(|&s| (s, with(TieBreak::LeastMemory, s), discovery.clone()))
            .collect();
        let explored = in_parallel(jobs, &run)?;
        return Ok(Band {
            predicted: first,
            least: None,
            most: None,
            decided: vec![],
            explored,
        });
    }
    let mut decided: Vec<Decision> = Vec::new();
    let mut outcomes = Vec::new();
    let mut jobs = Vec::new();
    for (choice, tie_break) in [
        (Choice::Predicted, TieBreak::LeastMemory),
        (Choice::Least, TieBreak::LeastMemory),
        (Choice::Most, TieBreak::MostMemory),
    ] {
        // The discovery's problems were settled by least memory, a rerun's by its own tie-break:
        // that is how their candidates' times read as bytes.
        let (mut misses, mut timed_by) = (first.autotune_misses.clone(), TieBreak::LeastMemory);
        let mut settled: Vec<Entry> = Vec::new();
        let mut outcome = None;
        let mut cache = discovery.clone();
        for round in 0..ROUNDS {
            for miss in &misses {
                let decision = decide(atlas, miss, timed_by);
                settled.push(miss.with_pick(choice.pick(&decision).index));
                if !decided.iter().any(|d| d.problem.id() == miss.id()) {
                    decided.push(decision);
                }
            }
            cache = scratch.write(&format!("{choice:?}-{round}"), &atlas.with(settled.clone()))?;
            let o = run(&with(tie_break, *first_schedule), Some(&cache))?;
            (misses, timed_by) = (o.autotune_misses.clone(), tie_break);
            outcome = Some(o);
            if misses.is_empty() {
                break;
            }
        }
        outcomes.push(outcome.expect("at least one round"));
        // The same choices, met at every other schedule.
        jobs.extend(
            others
                .iter()
                .map(|&s| (s, with(tie_break, s), cache.clone())),
        );
    }
    let explored = in_parallel(jobs, &run)?;
    let [predicted, least, most] = <[DryOutcome; 3]>::try_from(outcomes).expect("three choices");
    Ok(Band {
        predicted,
        least: Some(least),
        most: Some(most),
        decided,
        explored,
    })
}

/// A model's first run on the card: its autotune cache empty, CubeCL tunes every problem as the
/// step meets it, each candidate on the step's real inputs, in the same pool, so what the
/// candidates allocate while they are timed shows in the bytes reserved (a cold run can reserve
/// more than every later one). Dry, every candidate is allocated as on the GPU; which one wins
/// the timing is not known, so the band runs it twice: every problem settled on its leanest
/// candidate, and on its hungriest.
#[derive(Debug, Clone)]
pub struct ColdBand {
    /// Every problem settled on its leanest candidate.
    pub least: DryOutcome,
    /// Every problem settled on its hungriest candidate.
    pub most: DryOutcome,
    /// Both again at each other schedule explored (none on CubeBackend), with its schedule.
    pub explored: Vec<(Schedule, DryOutcome)>,
}

impl ColdBand {
    /// Per step: the least and the most bytes reserved at its end over the runs (a run that
    /// died earlier opens its side: the least's the bottom, any other's the top).
    pub fn reserved(&self) -> Vec<(Option<u64>, Option<u64>)> {
        let n = self.least.steps.len().max(self.most.steps.len());
        let at = |o: &DryOutcome, i: usize| o.steps.get(i).map(|s| s.reserved);
        (0..n)
            .map(|i| match (at(&self.least, i), at(&self.most, i)) {
                (Some(l), Some(h)) => {
                    let explored = self.explored.iter().map(|(_, o)| at(o, i));
                    let seen = explored.clone().flatten();
                    let low = seen.clone().fold(l.min(h), u64::min);
                    let high = seen.fold(l.max(h), u64::max);
                    let died = explored.clone().any(|r| r.is_none());
                    (Some(low), (!died).then_some(high))
                }
                other => other,
            })
            .collect()
    }
}

/// Trains a model dry from an empty autotune cache with `run`, once per extreme and schedule
/// (the first schedule's are [`ColdBand::least`] and [`ColdBand::most`]): [`ColdBand`].
pub fn cold_band(
    plan: &DryPlan,
    schedules: &[Schedule],
    run: impl Fn(&DryPlan, Option<&Path>) -> Result<DryOutcome, AutotuneError> + Sync,
) -> Result<ColdBand, AutotuneError> {
    let scratch = Scratch::new()?;
    let empty = scratch.write("empty", &Atlas::default())?;
    let first = schedules.first().copied().unwrap_or(Schedule::IN_ORDER);
    // Both extremes at the first schedule, then at every other; each device copies the (empty)
    // cache it starts from, so the runs share the folder.
    let mut jobs = Vec::new();
    for &schedule in std::iter::once(&first).chain(schedules.iter().skip(1)) {
        for tie_break in [TieBreak::LeastMemory, TieBreak::MostMemory] {
            let plan = DryPlan {
                tie_break,
                schedule,
                ..plan.clone()
            };
            jobs.push((schedule, plan, empty.clone()));
        }
    }
    let mut runs = in_parallel(jobs, &run)?.into_iter().map(|(_, o)| o);
    let (least, most) = (runs.next(), runs.next());
    let explored = schedules
        .iter()
        .skip(1)
        .flat_map(|&s| [s, s])
        .zip(runs)
        .collect();
    Ok(ColdBand {
        least: least.expect("the first schedule's least"),
        most: most.expect("the first schedule's most"),
        explored,
    })
}

/// Runs every job (a schedule, its plan, the cache folder it starts from) with `run`, as many at
/// once as the host has cores, each on a dry device of its own: the outcomes in the jobs' order,
/// whatever order they finish in.
fn in_parallel(
    jobs: Vec<(Schedule, DryPlan, PathBuf)>,
    run: &(impl Fn(&DryPlan, Option<&Path>) -> Result<DryOutcome, AutotuneError> + Sync),
) -> Result<Vec<(Schedule, DryOutcome)>, AutotuneError> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = jobs.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(s, plan, dir)| Ok((*s, run(plan, Some(dir))?)))
                        .collect::<Result<Vec<_>, AutotuneError>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(jobs.len());
        for h in handles {
            out.extend(h.join().expect("a dry run's thread panicked")?);
        }
        Ok(out)
    })
}

/// A network's cold record (its first run on the GPU, from an empty cache) replayed cold dry:
/// the band, and the steps whose GPU bytes reserved lie outside it widened by `tolerance` (its
/// warm runs' [`BandCheck::reserved_tolerance`]: a cold run is made once): step, GPU, least,
/// most.
pub fn replay_cold(
    record: &NetworkRecord,
    tolerance: u64,
    card: Arc<CardProfile>,
) -> Result<(ColdBand, Vec<Outside>), ReplayError> {
    let (network, plan) = network_plan_for(record, &card)?;
    let band = cold_band(&plan, schedules(record.backend), |p, dir| {
        dry_network(&network, p, card.clone(), dir)
    })?;
    let outside = band
        .reserved()
        .iter()
        .zip(&record.steps)
        .enumerate()
        .filter_map(|(i, (&(least, most), step))| outside(i, step.reserved, least, most, tolerance))
        .collect();
    Ok((band, outside))
}

/// Which candidate a run gives every missed problem.
#[derive(Debug, Clone, Copy)]
enum Choice {
    Predicted,
    Least,
    Most,
}

impl Choice {
    fn pick(self, d: &Decision) -> &Candidate {
        match self {
            Choice::Predicted => &d.prediction.pick,
            Choice::Least => &d.leanest.0,
            Choice::Most => &d.hungriest.0,
        }
    }
}

/// Settles a problem tuned on a device whose tie-break was `tie_break` (its candidates' times
/// encode their bytes).
fn decide(atlas: &Atlas, miss: &Entry, tie_break: TieBreak) -> Decision {
    let sized: Vec<(Candidate, u64)> = miss
        .ran()
        .filter_map(|c| Some((c.clone(), tie_break.bytes(c.nanos?)?)))
        .collect();
    let fallback = || {
        let c = miss.winner().cloned().unwrap_or(Candidate {
            name: "?".into(),
            index: miss.fastest_index,
            nanos: None,
        });
        (c, 0)
    };
    let leanest = sized
        .iter()
        .min_by_key(|(c, b)| (*b, c.index))
        .cloned()
        .unwrap_or_else(fallback);
    let hungriest = sized
        .iter()
        .max_by_key(|(c, b)| (*b, std::cmp::Reverse(c.index)))
        .cloned()
        .unwrap_or_else(fallback);
    Decision {
        problem: miss.clone(),
        timed_by: tie_break,
        prediction: atlas.predict(miss),
        leanest,
        hungriest,
    }
}

/// A folder of this band's own for the caches it writes, removed on drop.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Result<Scratch, AutotuneError> {
        (tempfile::Builder::new().prefix("highwater-band-").tempdir())
            .map(Scratch)
            .map_err(|source| AutotuneError::Io {
                path: std::env::temp_dir().display().to_string(),
                source,
            })
    }

    fn write(&self, name: &str, atlas: &Atlas) -> Result<PathBuf, AutotuneError> {
        let dir = self.0.path().join(name);
        atlas.write(&dir)?;
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A problem tuned dry: candidates `(name, index, nanos)`, the first listed won.
    fn tuned(candidates: &[(&str, usize, u64)]) -> Entry {
        let results: Vec<String> = candidates
            .iter()
            .map(|(name, index, nanos)| {
                format!(
                    r#"{{"outcome":{{"Ok":{{"name":"{name}","index":{index},"computation":{{"median":{{"secs":0,"nanos":{nanos}}}}}}}}}}}"#
                )
            })
            .collect();
        let line = format!(
            r#"{{"key":{{"key":{{"m":64}},"checksum":"c"}},"value":{{"fastest_index":{},"results":[{}]}}}}"#,
            candidates[0].1,
            results.join(",")
        );
        Entry::parse("mm", &line).unwrap()
    }

    #[test]
    fn a_missed_problem_is_banded_by_its_candidates_bytes_however_its_device_timed_them() {
        // Least memory: a nanosecond per byte, leanest first.
        let least = tuned(&[("lean", 4, 100), ("mid", 1, 200), ("fat", 2, 900)]);
        let d = decide(&Atlas::default(), &least, TieBreak::LeastMemory);
        assert_eq!((d.leanest.0.name.as_str(), d.leanest.1), ("lean", 100));
        assert_eq!((d.hungriest.0.name.as_str(), d.hungriest.1), ("fat", 900));
        // No atlas problem of this tuner: the first candidate by index.
        assert_eq!(d.prediction.pick.name, "mid");
        // Most memory: the same bytes, timed the other way round.
        let ceiling = 1u64 << 40;
        let most = tuned(&[
            ("fat", 2, ceiling - 900),
            ("mid", 1, ceiling - 200),
            ("lean", 4, ceiling - 100),
        ]);
        let d = decide(&Atlas::default(), &most, TieBreak::MostMemory);
        assert_eq!((d.leanest.0.name.as_str(), d.leanest.1), ("lean", 100));
        assert_eq!((d.hungriest.0.name.as_str(), d.hungriest.1), ("fat", 900));
    }
}
