//! Conformance: the simulator held to runs recorded on a real GPU.
//!
//! One body, two arms: `highwater rerun` (crate `situ`, feature `cuda`) trains a recipe on
//! burn-cuda and writes a [`RerunRecord`]; [`conform`] replays the same recipe through the
//! simulator, configured as that card really was (its pool sized from the total memory the
//! driver reported, its capacity what the process could really take), and compares step by
//! step. The record is plain data, so CI checks every committed run without a GPU.
//!
//! What is compared, and why these tolerances:
//! - bytes in use when the forward ends: what autodiff keeps for backward, plus weights and
//!   optimizer state. This is the ledger's claim, exact up to the pool's bookkeeping: **2 %**.
//! - bytes reserved (pages held) at the end of each step: the pool's claim. A page is coarse
//!   (up to a quarter of the card), so one extra page is a large error: **5 %**.
//! - for a run under a cap: whether it died. The simulator must kill the same arms.
//!
//! The rerun synchronizes after every phase to read the pool, so releases land in program
//! order: the simulation runs without the late-release jitter the incident's trainer needed.

use serde::{Deserialize, Serialize};

use crate::network::Precision;
use crate::recipe::{
    Activation, Backend, Checkpointing, Jitter, Recipe, RecipeError, written_name,
};
use crate::run::{RunReport, simulate};
use crate::trace::Phase;

/// Live bytes after forward: allowed relative error.
pub const IN_USE_TOLERANCE: f64 = 0.02;
/// Bytes reserved: allowed relative error.
pub const RESERVED_TOLERANCE: f64 = 0.05;

/// Where a recorded GPU result came from. `command` is the first field of every result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The exact command line that produced the file (argv, space-joined).
    pub command: String,
    /// The GPU, as `nvidia-smi` names it.
    pub gpu: String,
    /// The driver version.
    pub driver: String,
    /// The CUDA version the driver supports (`nvidia-smi`'s header).
    pub cuda: String,
    /// Total device memory, as `nvidia-smi` prints it (`143771 MiB`).
    pub gpu_memory: String,
    /// Versions of what ran.
    pub versions: Versions,
    /// `git rev-parse HEAD` of the tree the binary was built from, `-dirty` when it had
    /// uncommitted changes.
    pub git_revision: String,
    /// UTC, RFC 3339.
    pub date: String,
}

/// Versions of what ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    /// The `situ` crate's.
    pub situ: String,
    /// burn's.
    pub burn: String,
    /// CubeCL's.
    pub cubecl: String,
    /// `rustc -V` of the compiler that built the binary.
    pub rustc: String,
    /// The command that built it.
    pub build: String,
}

/// The device's memory as the run found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// `cuDeviceTotalMem_v2`: what cubecl-cuda sizes its pools from.
    pub total_bytes: u64,
    /// Free once the process's CUDA context existed, before anything else was allocated.
    pub free_at_start: u64,
    /// `--cap`: the card being emulated (its total less its desktop), if any.
    pub cap_bytes: Option<u64>,
    /// Held outside the pool so that only the cap is left (`total - cap`).
    pub ballast_bytes: u64,
    /// Free once the ballast was held: what the pool could take.
    pub pool_capacity: u64,
}

/// One measured step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredStep {
    /// 1-based.
    pub step: u64,
    /// Pool bytes in use (`MemoryUsage::bytes_in_use`) after the loss, device synced.
    pub in_use_after_forward: u64,
    /// After `backward()`: gradients waiting for the optimizer.
    pub in_use_after_backward: u64,
    /// Pool bytes reserved (`bytes_reserved`) at the end of the step.
    pub reserved: u64,
    /// Wall time of the step, syncs included.
    pub step_ms: f64,
    /// The loss, on the steps the trainer read it.
    pub loss: Option<f64>,
    /// Bytes the process's pools on *every* stream hold from the device at the end of the step
    /// (the GPU's free memory at the start less now; the dry device's pages). The pool read
    /// above is the trainer thread's stream only: a loader thread's tensors live in a pool of
    /// their own. Absent from records made before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_reserved: Option<u64>,
}

/// How a recorded run ended early.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredDeath {
    /// 1-based.
    pub step: u64,
    /// The phase that failed.
    pub phase: Phase,
    /// The first error exactly as burn/cubecl reported it.
    pub message: String,
    /// Every failed device allocation of the step, in bytes (the pool's page sizes), in order.
    #[serde(default)]
    pub failed_pages: Vec<u64>,
}

/// A run recorded on a GPU by `highwater rerun`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerunRecord {
    /// Where the record came from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The recipe file, as given on the command line.
    pub recipe_path: String,
    /// Its text at the time.
    pub recipe_toml: String,
    /// The arm run (it overrides the recipe's).
    pub activation: Activation,
    /// The checkpointing run (it overrides the recipe's).
    pub checkpointing: Checkpointing,
    /// The backend run (it overrides the recipe's).
    pub backend: Backend,
    /// Steps asked for.
    pub steps_asked: u64,
    /// The seed of the model's weights and inputs.
    pub seed: u64,
    /// The device's memory as the run found it.
    pub device: DeviceMemory,
    /// Every step completed, in order.
    pub steps: Vec<MeasuredStep>,
    /// How the run ended early, if it did.
    pub died: Option<MeasuredDeath>,
    /// The path counters at the end (`situ=tensor:E/F/B,fused:E/F/B`).
    pub counters: String,
}

impl RerunRecord {
    /// `rerun-<recipe>-<activation>-<backend>-<checkpointing>[-cap<GiB>][-s<seed>]`: the file
    /// stem (the seed only when it is not 1, the seed of every run recorded before it varied).
    pub fn name(&self) -> String {
        let stem = std::path::Path::new(&self.recipe_path)
            .file_stem()
            .map_or("recipe".into(), |s| s.to_string_lossy().into_owned());
        let cap = self.device.cap_bytes.map_or(String::new(), |c| {
            format!("-cap{:.2}GiB", c as f64 / (1u64 << 30) as f64)
        });
        format!(
            "rerun-{stem}-{}-{}-{}{cap}",
            written_name(&self.activation),
            written_name(&self.backend),
            written_name(&self.checkpointing)
        ) + &if self.seed == 1 {
            String::new()
        } else {
            format!("-s{}", self.seed)
        }
    }

    /// The recipe the run trained, with the run's overrides applied.
    pub fn recipe(&self) -> Result<Recipe, RecipeError> {
        let mut r = Recipe::parse(&self.recipe_path, &self.recipe_toml)?;
        r = r.with(self.activation, self.checkpointing);
        r.backend = self.backend;
        Ok(r)
    }

    /// The same recipe as the simulator must see this run: the card as measured (pools sized
    /// from its total, capacity what was free for the pool), releases in program order, and a
    /// sync every step (the rerun reads the pool after every phase).
    pub(crate) fn simulated_recipe(&self) -> Result<Recipe, RecipeError> {
        let mut r = self.recipe()?;
        let d = self.device;
        r.card.total_bytes = d.total_bytes;
        r.card.cuda_context_bytes = d.total_bytes.saturating_sub(d.free_at_start);
        r.card.desktop_bytes = d.free_at_start.saturating_sub(d.pool_capacity);
        r.jitter = Jitter {
            step_probability: 0.0,
            late_releases: 0,
            max_lag: 0,
        };
        r.loss_read_every = 1;
        Ok(r)
    }
}

/// A network ([`crate::network::Network`]) trained on a GPU by `highwater rerun --model`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkRecord {
    /// Where the record came from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The network's file, as given on the command line.
    #[serde(alias = "decoder_path")]
    pub model_path: String,
    /// Its text at the time.
    #[serde(alias = "decoder_toml")]
    pub model_toml: String,
    /// The backend run (it overrides the file's).
    pub backend: Backend,
    /// The checkpointing run (it overrides the file's).
    pub checkpointing: Checkpointing,
    /// The float type run (it overrides the file's).
    #[serde(default)]
    pub precision: Precision,
    /// The batch run (it overrides the file's).
    pub batch: u64,
    /// Steps asked for.
    pub steps_asked: u64,
    /// The seed of the model's weights and inputs.
    pub seed: u64,
    /// The device's memory as the run found it.
    pub device: DeviceMemory,
    /// Every step completed, in order.
    pub steps: Vec<MeasuredStep>,
    /// How the run ended early, if it did.
    pub died: Option<MeasuredDeath>,
    /// Problems CubeCL autotuned during the run (absent from its cache when it started), with
    /// the kernel that won: empty for a warm run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuned: Vec<TunedProblem>,
}

/// One problem autotune settled: the tuner, the key as CubeCL wrote it, the winning kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunedProblem {
    /// The tuner's cache file (`burn_cubecl-kernel-matmul-tune-base`, …).
    pub tuner: String,
    /// The problem, as CubeCL wrote its key (JSON).
    pub key: String,
    /// The candidate that won.
    pub kernel: String,
}

impl NetworkRecord {
    /// `<family>-<file>-<backend>-<checkpointing>-b<batch>[-<precision>]`: the file stem (a
    /// decoder's records keep the names they had before the other families came).
    pub fn name(&self) -> String {
        let stem = std::path::Path::new(&self.model_path)
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned());
        let family = crate::network::Network::parse(&self.model_path, &self.model_toml)
            .map_or("network", |n| n.arch.family());
        let precision = match self.precision {
            Precision::F32 => String::new(),
            p => format!("-{}", written_name(&p)),
        };
        format!(
            "{family}-{stem}-{}-{}-b{}{precision}",
            written_name(&self.backend),
            written_name(&self.checkpointing),
            self.batch
        )
    }

    /// The network the run trained, with the run's overrides applied.
    pub fn network(&self) -> Result<crate::network::Network, RecipeError> {
        let mut n = crate::network::Network::parse(&self.model_path, &self.model_toml)?;
        n.backend = self.backend;
        n.checkpointing = self.checkpointing;
        n.precision = self.precision;
        n.steps = self.steps_asked;
        n.seed = self.seed;
        n.with_batch(self.batch)
            .map_err(|reason| RecipeError::Invalid {
                origin: self.model_path.clone(),
                line: 1,
                field: "batch",
                reason,
            })
    }
}

/// What every GPU record offers a comparison: its name, its steps, how it ended.
pub trait Recorded {
    /// The record's file stem.
    fn name(&self) -> String;
    /// Every step completed, in order.
    fn steps(&self) -> &[MeasuredStep];
    /// How the run ended early, if it did.
    fn died(&self) -> Option<&MeasuredDeath>;
}

impl Recorded for RerunRecord {
    fn name(&self) -> String {
        RerunRecord::name(self)
    }
    fn steps(&self) -> &[MeasuredStep] {
        &self.steps
    }
    fn died(&self) -> Option<&MeasuredDeath> {
        self.died.as_ref()
    }
}

impl Recorded for NetworkRecord {
    fn name(&self) -> String {
        NetworkRecord::name(self)
    }
    fn steps(&self) -> &[MeasuredStep] {
        &self.steps
    }
    fn died(&self) -> Option<&MeasuredDeath> {
        self.died.as_ref()
    }
}

/// One run, measured against simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conformance {
    /// The record's name.
    pub name: String,
    /// Steps the record completed.
    pub steps: u64,
    /// At the step where the error is largest; `None` when no step completed on both arms
    /// (a run that died in its first step is judged by its fate alone).
    pub in_use_after_forward: Option<Compared>,
    /// Bytes reserved at the end of a step, at the step where the error is largest.
    pub reserved: Option<Compared>,
    /// The step the GPU run died at, if it did.
    pub measured_died_at: Option<u64>,
    /// The step the simulation died at, if it did.
    pub predicted_died_at: Option<u64>,
    /// The simulated run, for figures.
    pub simulated: RunReport,
}

/// A measured figure, the prediction for it, and the relative error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compared {
    /// 1-based.
    pub step: u64,
    /// Bytes on the GPU.
    pub measured: u64,
    /// Bytes simulated.
    pub predicted: u64,
    /// `(predicted - measured) / measured`.
    pub error: f64,
    /// The largest `|error|` that passes.
    pub tolerance: f64,
}

impl Compared {
    /// Within tolerance.
    pub fn passes(&self) -> bool {
        self.error.abs() <= self.tolerance
    }
}

impl Conformance {
    /// Every figure within tolerance and the same fate.
    pub fn passes(&self) -> bool {
        self.in_use_after_forward.is_none_or(|c| c.passes())
            && self.reserved.is_none_or(|c| c.passes())
            && self.measured_died_at.is_some() == self.predicted_died_at.is_some()
    }
}

/// Why a record cannot be checked.
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    /// The recipe text kept in the record does not parse now.
    #[error("the recorded recipe does not parse")]
    Recipe(#[from] RecipeError),
    /// Nothing to compare.
    #[error("the run recorded no step and no death")]
    NoSteps,
}

/// A recorded run the simulator is known to miss, and why (`conform-known-misses.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownMiss {
    /// The record's name (`rerun-…`, without `.json`).
    pub run: String,
    /// Why the simulator misses it.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownMissFile {
    #[serde(default)]
    miss: Vec<KnownMiss>,
}

/// Parses a known-misses file; `origin` names it in errors.
pub fn parse_known_misses(origin: &str, text: &str) -> Result<Vec<KnownMiss>, String> {
    toml::from_str::<KnownMissFile>(text)
        .map(|f| f.miss)
        .map_err(|e| format!("{origin}: {e}"))
}

/// A recorded run whose dry replay is known to differ from the GPU beyond the GPU's own
/// spread, in which figures, and why (`conform-dry-known.toml`). Its other figures, how many
/// steps it completed and how it ended must still match.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownDryDifference {
    /// The record's name (without `.json`).
    pub run: String,
    /// `in_use_after_forward`, `in_use_after_backward` or `reserved`.
    pub figures: Vec<String>,
    /// Why they differ.
    pub reason: String,
    /// Known only on a host with fewer cores than this: where the difference is host timing,
    /// and with as many cores the replays were measured to agree with the GPU.
    #[serde(default)]
    pub below_cores: Option<usize>,
}

impl KnownDryDifference {
    /// Whether the difference is known on a host with `cores` cores.
    pub fn applies_on(&self, cores: usize) -> bool {
        self.below_cores.is_none_or(|n| cores < n)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownDryFile {
    #[serde(default)]
    difference: Vec<KnownDryDifference>,
}

/// Parses a known-dry-differences file; `origin` names it in errors (an unknown figure too).
pub fn parse_known_dry(origin: &str, text: &str) -> Result<Vec<KnownDryDifference>, String> {
    let known = toml::from_str::<KnownDryFile>(text)
        .map(|f| f.difference)
        .map_err(|e| format!("{origin}: {e}"))?;
    const FIGURES: [&str; 3] = ["in_use_after_forward", "in_use_after_backward", "reserved"];
    for k in &known {
        if let Some(f) = k.figures.iter().find(|f| !FIGURES.contains(&f.as_str())) {
            return Err(format!(
                "{origin}: run {}: `{f}` is not a figure ({FIGURES:?})",
                k.run
            ));
        }
    }
    Ok(known)
}

/// Simulates `record`'s recipe as the recorded card had it and compares, step by step, over
/// the steps both arms completed.
pub fn conform(record: &RerunRecord) -> Result<Conformance, ConformError> {
    let recipe = record.simulated_recipe()?;
    let steps = record.steps_asked.max(1);
    let sim = simulate(&recipe, record.seed, steps);
    let measured = &record.steps;
    if measured.is_empty() && record.died.is_none() {
        return Err(ConformError::NoSteps);
    }
    // (measured, predicted) of one figure at one step, if both arms have it.
    type Pick<'a> = &'a dyn Fn(&MeasuredStep, usize) -> Option<(u64, u64)>;
    let worst = |tolerance: f64, pick: Pick| {
        measured
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let (meas, pred) = pick(m, i)?;
                Some(Compared {
                    step: m.step,
                    measured: meas,
                    predicted: pred,
                    error: (pred as f64 - meas as f64) / (meas.max(1)) as f64,
                    tolerance,
                })
            })
            .max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()))
    };
    let in_use = worst(IN_USE_TOLERANCE, &|m, i| {
        Some((m.in_use_after_forward, *sim.in_use_after_forward.get(i)?))
    });
    let reserved = worst(RESERVED_TOLERANCE, &|m, i| {
        Some((m.reserved, *sim.reserved.get(i)?))
    });
    Ok(Conformance {
        name: record.name(),
        steps: measured.len() as u64,
        in_use_after_forward: in_use,
        reserved,
        measured_died_at: record.died.as_ref().map(|d| d.step),
        predicted_died_at: sim.died_at,
        simulated: sim,
    })
}

/// A recorded run against a prediction that claims to be exact (the dry run: burn's and
/// CubeCL's own code): every figure of every step, byte for byte, and the same fate. Where the
/// GPU itself varied between repeats of the run, the widest spread it showed is the tolerance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exactness {
    /// The record's name.
    pub name: String,
    /// Steps completed: measured, predicted.
    pub completed: (u64, u64),
    /// Runs of this configuration on the GPU (the record and its repeats).
    pub gpu_runs: usize,
    /// The widest the GPU's runs differed on any figure of any step, in bytes: the tolerance.
    pub gpu_spread: u64,
    /// Every figure that differs from the record, in step order.
    pub differences: Vec<Difference>,
    /// Where the GPU run died: step and phase.
    pub measured_death: Option<(u64, Phase)>,
    /// Where the prediction died.
    pub predicted_death: Option<(u64, Phase)>,
}

/// One figure of one step that differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// 1-based.
    pub step: u64,
    /// `in_use_after_forward`, `in_use_after_backward` or `reserved`.
    pub figure: &'static str,
    /// Bytes on the GPU.
    pub measured: u64,
    /// Bytes predicted.
    pub predicted: u64,
}

impl Difference {
    /// `predicted - measured`, in bytes.
    pub fn bytes(&self) -> i64 {
        self.predicted as i64 - self.measured as i64
    }
}

impl Exactness {
    /// Steps compared: those both arms completed.
    pub fn steps_compared(&self) -> u64 {
        self.completed.0.min(self.completed.1)
    }

    /// No figure further from the record than the GPU is from itself, both arms completed the
    /// same steps and died (or not) alike.
    pub fn passes(&self) -> bool {
        self.passes_except(&[])
    }

    /// [`Exactness::passes`], the figures named in `known` aside.
    pub fn passes_except(&self, known: &[String]) -> bool {
        self.differences
            .iter()
            .filter(|d| !known.iter().any(|k| k == d.figure))
            .all(|d| d.bytes().unsigned_abs() <= self.gpu_spread)
            && self.completed.0 == self.completed.1
            && self.measured_death == self.predicted_death
    }
}

/// The three figures of a step, named.
fn figures(s: &MeasuredStep) -> [(&'static str, u64); 3] {
    [
        ("in_use_after_forward", s.in_use_after_forward),
        ("in_use_after_backward", s.in_use_after_backward),
        ("reserved", s.reserved),
    ]
}

/// Compares `record` (and `repeats`, the same configuration run again on the same GPU) with a
/// prediction of the run, step by step, figure by figure.
pub fn exactness<R: Recorded>(
    record: &R,
    repeats: &[R],
    steps: &[MeasuredStep],
    died: Option<&MeasuredDeath>,
) -> Exactness {
    let mut gpu_spread = 0;
    for (i, m) in record.steps().iter().enumerate() {
        for r in repeats.iter().filter_map(|repeat| repeat.steps().get(i)) {
            for ((_, a), (_, b)) in figures(m).into_iter().zip(figures(r)) {
                gpu_spread = gpu_spread.max(a.abs_diff(b));
            }
        }
    }
    let mut differences = Vec::new();
    for (m, p) in record.steps().iter().zip(steps) {
        for ((figure, measured), (_, predicted)) in figures(m).into_iter().zip(figures(p)) {
            if measured != predicted {
                differences.push(Difference {
                    step: m.step,
                    figure,
                    measured,
                    predicted,
                });
            }
        }
    }
    Exactness {
        name: record.name(),
        completed: (record.steps().len() as u64, steps.len() as u64),
        gpu_runs: 1 + repeats.len(),
        gpu_spread,
        differences,
        measured_death: record.died().map(|d| (d.step, d.phase)),
        predicted_death: died.map(|d| (d.step, d.phase)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record whose "measurements" are the simulator's own figures for `recipe_toml`.
    fn simulated_record(recipe_toml: &str, cap: Option<u64>, steps: u64) -> RerunRecord {
        let total = 150_109_880_320;
        let free_at_start = total - (600 << 20);
        let ballast = cap.map_or(0, |c| total - c);
        let mut record = RerunRecord {
            provenance: Provenance {
                command: "highwater rerun …".into(),
                gpu: "test".into(),
                driver: "–".into(),
                cuda: "–".into(),
                gpu_memory: "–".into(),
                versions: Versions {
                    situ: "0".into(),
                    burn: "0.21.0".into(),
                    cubecl: "0.10.0".into(),
                    rustc: "–".into(),
                    build: "–".into(),
                },
                git_revision: "–".into(),
                date: "–".into(),
            },
            recipe_path: "repro/recipes/situ.toml".into(),
            recipe_toml: recipe_toml.into(),
            activation: Activation::SituTensor,
            checkpointing: Checkpointing::None,
            backend: Backend::Cube,
            steps_asked: steps,
            seed: 1,
            device: DeviceMemory {
                total_bytes: total,
                free_at_start,
                cap_bytes: cap,
                ballast_bytes: ballast,
                pool_capacity: free_at_start - ballast,
            },
            steps: vec![],
            died: None,
            counters: String::new(),
        };
        let sim = simulate(&record.simulated_recipe().unwrap(), 1, steps);
        record.steps = (0..sim.reserved.len())
            .map(|i| MeasuredStep {
                step: i as u64 + 1,
                in_use_after_forward: sim.in_use_after_forward[i],
                in_use_after_backward: sim.in_use_after_backward[i],
                reserved: sim.reserved[i],
                step_ms: 1.0,
                loss: None,
                device_reserved: None,
            })
            .collect();
        record.died = sim.died_at.map(|step| MeasuredDeath {
            step,
            phase: Phase::Forward,
            message: "out of memory".into(),
            failed_pages: vec![],
        });
        record
    }

    const SITU: &str = include_str!("../../../repro/recipes/situ.toml");

    #[test]
    fn a_run_that_is_its_own_simulation_conforms() {
        let r = simulated_record(SITU, None, 5);
        let c = conform(&r).unwrap();
        assert!(c.passes(), "{c:?}");
        assert_eq!(c.in_use_after_forward.unwrap().error, 0.0);
        assert_eq!(r.name(), "rerun-situ-situ-tensor-cube-none");
    }

    #[test]
    fn an_error_past_the_tolerance_misses() {
        let mut r = simulated_record(SITU, None, 5);
        r.steps[3].in_use_after_forward = (r.steps[3].in_use_after_forward as f64 / 1.021) as u64;
        let c = conform(&r).unwrap();
        let worst = c.in_use_after_forward.unwrap();
        assert!(!worst.passes());
        assert_eq!(worst.step, 4, "the worst step is reported");
        assert!(!c.passes());
    }

    #[test]
    fn a_known_difference_can_hold_only_below_a_core_count() {
        let text = "[[difference]]\nrun = \"a\"\nfigures = [\"reserved\"]\nreason = \"timing\"\n\
                    below_cores = 4\n[[difference]]\nrun = \"b\"\nfigures = [\"reserved\"]\n\
                    reason = \"always\"\n";
        let known = parse_known_dry("known.toml", text).unwrap();
        assert_eq!(known[0].below_cores, Some(4));
        assert!(known[0].applies_on(2) && known[0].applies_on(3));
        assert!(!known[0].applies_on(4) && !known[0].applies_on(16));
        assert!(known[1].applies_on(2) && known[1].applies_on(128));
        let typo = text.replace("below_cores", "below_core");
        assert!(
            parse_known_dry("known.toml", &typo)
                .unwrap_err()
                .contains("below_core")
        );
    }

    #[test]
    fn exactness_names_every_differing_byte_and_the_fate() {
        let r = simulated_record(SITU, None, 3);
        assert!(exactness(&r, &[], &r.steps, None).passes());
        let mut off = r.steps.clone();
        off[1].reserved += 512;
        let e = exactness(&r, &[], &off, None);
        assert_eq!(e.differences.len(), 1);
        assert_eq!(
            (e.differences[0].step, e.differences[0].figure),
            (2, "reserved")
        );
        assert_eq!(e.differences[0].bytes(), 512);
        assert!(!e.passes());
        // A repeat on the GPU that took one page more at step 3: a spread of 1024 bytes.
        let mut repeat = r.clone();
        repeat.steps[2].reserved += 1024;
        let e = exactness(&r, std::slice::from_ref(&repeat), &off, None);
        assert_eq!((e.gpu_runs, e.gpu_spread), (2, 1024));
        assert!(e.passes(), "512 B off is within what the GPU varies by");
        off[0].in_use_after_forward += 1025;
        assert!(!exactness(&r, &[repeat], &off, None).passes());
        let death = MeasuredDeath {
            step: 3,
            phase: Phase::Backward,
            message: String::new(),
            failed_pages: vec![],
        };
        let e = exactness(&r, &[], &r.steps[..2], Some(&death));
        assert!(e.differences.is_empty());
        assert_eq!(
            (e.completed, e.predicted_death),
            ((3, 2), Some((3, Phase::Backward)))
        );
        assert!(!e.passes(), "a death the GPU did not have");
    }

    #[test]
    fn a_different_fate_under_a_cap_misses() {
        // Under a 16 GiB card less 1.25 GiB of desktop the tensor path dies at once.
        let cap = (16u64 << 30) - (5 << 28);
        let r = simulated_record(SITU, Some(cap), 5);
        assert!(r.died.is_some(), "the simulated arm dies under the cap");
        assert!(conform(&r).unwrap().passes());
        let mut survived = r.clone();
        survived.died = None;
        assert!(!conform(&survived).unwrap().passes());
        assert!(r.name().ends_with("-cap14.75GiB"), "{}", r.name());
    }
}
