//! The command line, as clap reads it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Simulates, on CPU, the memory pool of a burn 0.21 / CubeCL 0.10 training step, step by
/// step, and reads the trainer logs of the runs it explains.
#[derive(Debug, Parser)]
#[command(name = "highwater", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs a recipe for some steps and seeds through CubeCL's own pool; prints per-seed
    /// outcome, high-water and reserve failures (or JSON lines with every step).
    Simulate(SimulateArgs),
    /// Prints one expert call's per-op ledger: bytes, views, and what autodiff keeps.
    Ledger(LedgerArgs),
    /// Reads trainer logs: attempts, the step each died at, reserve failures by size.
    Forensics(ForensicsArgs),
    /// Holds the simulator to runs recorded on a GPU: live bytes after forward within 2 %,
    /// bytes reserved within 5 %, the same arms dying under a cap; with --dry, the dry run to
    /// every byte of every step. Exits 1 on any miss.
    Conform(ConformArgs),
    /// Trains a recipe on the GPU (burn-cuda) and records its pool step by step.
    #[cfg(feature = "cuda")]
    Rerun(RerunArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    highwater simulate --recipe repro/recipes/situ.toml --steps 2000 --seeds 1..3\n  \
    highwater simulate --recipe repro/recipes/situ.toml --seeds 1..3 --json > runs.jsonl\n  \
    highwater simulate --recipe repro/recipes/small.toml --seed 1 --svg small.svg\n\n\
    JSON: one object per run per line with recipe, seed, steps, died_at (null if it \
    survived), capacity, peak_in_use / reserved / pages (per step), and failures \
    (step, requested, page, phase).")]
pub struct SimulateArgs {
    /// Recipe file (TOML), e.g. repro/recipes/situ.toml.
    #[arg(long, value_name = "PATH")]
    pub recipe: PathBuf,
    /// Steps to run [default: the recipe's `training.steps`].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Seeds to run: `A..B` (inclusive: `1..3` runs 1, 2 and 3), `A..=B`, or `A,B,C`
    /// [default: the recipe's `training.seeds`].
    #[arg(long, value_name = "A..B", value_parser = parse_seeds, conflicts_with = "seed")]
    pub seeds: Option<Seeds>,
    /// One seed.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// One JSON object per run per line on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the per-step high-water figure (SVG) to this file.
    #[arg(long, value_name = "OUT")]
    pub svg: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct LedgerArgs {
    /// Recipe file (TOML).
    #[arg(long, value_name = "PATH")]
    pub recipe: PathBuf,
    /// Checkpoint strategy [default: the recipe's `training.checkpointing`].
    #[arg(long, value_enum)]
    pub checkpointing: Option<CheckpointingArg>,
    /// Activation path [default: the recipe's `model.activation`].
    #[arg(long, value_enum)]
    pub activation: Option<ActivationArg>,
}

#[derive(Debug, Args)]
pub struct ForensicsArgs {
    /// Trainer logs; several logs make one table, one row each.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
    /// One JSON object per log per line instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ConformArgs {
    /// Directory of recorded runs (`rerun-*.json`), e.g. repro/results.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// One JSON object per run per line instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Replay each run dry (burn's own code on the dry CubeCL runtime) and hold it to the
    /// record byte for byte, instead of the simulator within tolerances.
    #[arg(long)]
    pub dry: bool,
    /// With --dry: the card profile recorded on the GPU that ran them.
    #[arg(long, value_name = "PATH", default_value = "repro/cards/h200.json")]
    pub card: PathBuf,
    /// With --dry: that GPU's autotune cache (a `device-0-0-cuda` folder).
    #[arg(long, value_name = "DIR", default_value = "repro/cards/h200-autotune")]
    pub autotune: PathBuf,
}

#[cfg(feature = "cuda")]
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    highwater rerun --recipe repro/recipes/wave-stack.toml --activation situ-tensor \
    --backend fusion --checkpointing balanced --steps 50 --out repro/results\n  \
    highwater rerun --recipe repro/recipes/situ.toml --cap card --steps 100\n\n\
    Writes OUT/rerun-<recipe>-<activation>-<backend>-<checkpointing>[-cap<GiB>].json; log \
    lines (the command first) go to stdout.")]
pub struct RerunArgs {
    /// Recipe file (TOML).
    #[arg(long, value_name = "PATH")]
    pub recipe: PathBuf,
    /// Activation path [default: the recipe's].
    #[arg(long, value_enum)]
    pub activation: Option<ActivationArg>,
    /// Checkpoint strategy [default: the recipe's].
    #[arg(long, value_enum)]
    pub checkpointing: Option<CheckpointingArg>,
    /// Backend [default: the recipe's].
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Steps to train.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Seed of the weights and batches.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Emulate a card that leaves the process BYTES (its total less its desktop), or `card`:
    /// the recipe's own card (`card.total_bytes − card.desktop_bytes`). The rest of the GPU is
    /// held back before the pool grows.
    #[arg(long, value_name = "BYTES|card", value_parser = parse_cap)]
    pub cap: Option<CapArg>,
    /// Read the loss and print a step line every N steps.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub log_every: u64,
    /// Directory for the record.
    #[arg(long, value_name = "DIR", default_value = "repro/results")]
    pub out: PathBuf,
}

/// What `--cap` asks for.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapArg {
    Bytes(u64),
    /// The recipe's card less its desktop.
    RecipeCard,
}

#[cfg(feature = "cuda")]
fn parse_cap(s: &str) -> Result<CapArg, String> {
    match s {
        "card" => Ok(CapArg::RecipeCard),
        _ => s
            .parse()
            .map(CapArg::Bytes)
            .map_err(|_| format!("`{s}` is neither a byte count nor `card`")),
    }
}

/// The burn backends a rerun can use.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BackendArg {
    /// burn-cubecl's unfused `CubeBackend`.
    Cube,
    /// burn-cuda's default `Cuda`: Fusion over CubeBackend.
    Fusion,
}

impl From<BackendArg> for highwater::Backend {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Cube => highwater::Backend::Cube,
            BackendArg::Fusion => highwater::Backend::Fusion,
        }
    }
}

/// burn 0.21's checkpoint strategies.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CheckpointingArg {
    /// `NoCheckpointing`: what an op saves stays until backward.
    None,
    /// `BalancedCheckpointing`: memory-bound ops are recomputed in backward.
    Balanced,
}

impl From<CheckpointingArg> for highwater::Checkpointing {
    fn from(c: CheckpointingArg) -> Self {
        match c {
            CheckpointingArg::None => highwater::Checkpointing::None,
            CheckpointingArg::Balanced => highwater::Checkpointing::Balanced,
        }
    }
}

/// The expert FFN's activation paths.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ActivationArg {
    /// `activation::silu(mid)`: the control.
    Silu,
    /// SiTU GLU, tensor path (what the wave ran).
    SituTensor,
    /// SiTU GLU, one fused kernel.
    SituFused,
}

impl From<ActivationArg> for highwater::Activation {
    fn from(a: ActivationArg) -> Self {
        match a {
            ActivationArg::Silu => highwater::Activation::Silu,
            ActivationArg::SituTensor => highwater::Activation::SituTensor,
            ActivationArg::SituFused => highwater::Activation::SituFused,
        }
    }
}

/// Seeds from `--seeds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeds(pub Vec<u64>);

/// At most this many seeds in one call (a typo like `1..10000000` should not run for hours).
const MAX_SEEDS: u64 = 100_000;

fn parse_seeds(s: &str) -> Result<Seeds, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{t}` is not a seed (a whole number ≥ 0)"))
    };
    if let Some((a, b)) = s.split_once("..") {
        let b = b.strip_prefix('=').unwrap_or(b);
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(format!("the range {s} is empty (start above end)"));
        }
        if b - a >= MAX_SEEDS {
            return Err(format!("the range {s} has more than {MAX_SEEDS} seeds"));
        }
        return Ok(Seeds((a..=b).collect()));
    }
    let seeds = s.split(',').map(num).collect::<Result<Vec<_>, _>>()?;
    Ok(Seeds(seeds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds() {
        assert_eq!(parse_seeds("1..3"), Ok(Seeds(vec![1, 2, 3])));
        assert_eq!(parse_seeds("1..=3"), Ok(Seeds(vec![1, 2, 3])));
        assert_eq!(parse_seeds("5"), Ok(Seeds(vec![5])));
        assert_eq!(parse_seeds("4,2"), Ok(Seeds(vec![4, 2])));
        assert!(parse_seeds("3..1").unwrap_err().contains("empty"));
        assert!(parse_seeds("a..3").unwrap_err().contains("`a`"));
        assert!(parse_seeds("0..100000000").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
