//! The GPU records: where a run came from, the device it found, its steps and how it ended.

use serde::{Deserialize, Serialize};

use crate::network::Precision;
use crate::recipe::{
    Activation, Backend, Checkpointing, Jitter, Recipe, RecipeError, written_name,
};
use crate::trace::Phase;

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
