//! The command line, as clap reads it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use highwater::limits::{MAX_FIGURE_SEEDS, MAX_SEEDS, MAX_STEPS, quote};

/// Simulates, on CPU, the memory pool of a burn 0.21 / CubeCL 0.10 training step, step by
/// step, and reads the trainer logs of the runs it explains.
#[derive(Debug, Parser)]
#[command(name = "highwater", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Will it fit? Trains a model (a network file or a wave recipe) dry, burn's own code with no
    /// GPU, on a card of the size asked: per-step pool figures, where it dies, or the largest
    /// batch that fits.
    Fit(FitArgs),
    /// Merges GPU autotune caches into the card's atlas: what each source's problems the others
    /// hold, and how often the miss policy names the GPU's pick (each problem left out).
    Atlas(AtlasArgs),
    /// Holds dry replays of a burn-fusion record to its traced GPU run (`rerun --trace-server`),
    /// reservation by reservation: where the servers part, and their persistent pages.
    Order(OrderArgs),
    /// Will a PyTorch job fit? Replays a memory snapshot's requests through PyTorch's caching
    /// allocator (modelled) on another card or under other allocator settings: whether it
    /// fits, the peak reserved, the request refused and the message PyTorch would raise, and
    /// the same for each setting worth trying.
    Replay(crate::replay::ReplayArgs),
    /// Trains a recipe or a decoder on the GPU (burn-cuda) and records its pool step by step.
    #[cfg(feature = "cuda")]
    Rerun(RerunArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    highwater simulate --recipe repro/recipes/situ.toml --steps 2000 --seeds 1..3\n  \
    highwater simulate --recipe repro/recipes/situ.toml --seeds 1..3 --json > runs.jsonl\n  \
    highwater simulate --recipe repro/recipes/small.toml --seed 1 --svg small.svg\n  \
    highwater simulate --recipe repro/recipes/small.toml --seed 3 --steps 12 \
    --trace-steps 10..12 --trace t.jsonl --snapshot t.pickle\n\n\
    JSON: one object per run per line with recipe, seed, steps, died_at (null if it \
    survived), capacity, peak_in_use / reserved / pages (per step), and failures \
    (step, requested, page, phase).")]
#[command(group(clap::ArgGroup::new("tracing").args(["trace", "snapshot"]).multiple(true)))]
pub(crate) struct SimulateArgs {
    /// Recipe file (TOML), e.g. repro/recipes/situ.toml.
    #[arg(long, value_name = "PATH")]
    pub recipe: PathBuf,
    // Helps with a limit are written by functions below, so that they say it as `limits` sets
    // it.
    #[arg(long, value_name = "N", value_parser = parse_steps, help = steps_help())]
    pub steps: Option<u64>,
    #[arg(long, value_name = "A..B", value_parser = parse_seeds, conflicts_with = "seed",
          help = seeds_help())]
    pub seeds: Option<Seeds>,
    /// One seed.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// One JSON object per run per line on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    #[arg(long, value_name = "OUT", help = svg_help())]
    pub svg: Option<PathBuf>,
    /// Record every pool event of the traced steps (one seed) to this file as JSON lines: a
    /// header, then reserve / free / page / out-of-memory events with tensor, op, page, offset.
    #[arg(long, value_name = "OUT.jsonl")]
    pub trace: Option<PathBuf>,
    /// Write the traced steps (one seed) as a PyTorch memory snapshot: drop it on
    /// pytorch.org/memory_viz, or `python -m torch.cuda._memory_viz trace_plot OUT.pickle`.
    #[arg(long, value_name = "OUT.pickle")]
    pub snapshot: Option<PathBuf>,
    #[arg(long, value_name = "A..B", value_parser = parse_step_range, help = trace_steps_help(),
          requires = "tracing")]
    pub trace_steps: Option<(u64, u64)>,
}

fn trace_steps_help() -> String {
    format!(
        "Steps --trace and --snapshot record, `A..B` inclusive, at most {} events in all \
         [default: every step]",
        highwater::limits::MAX_TRACE_EVENTS.max
    )
}

/// `--trace-steps A..B` (or `A..=B`, or one step `A`): a non-empty range of steps from 1.
fn parse_step_range(s: &str) -> Result<(u64, u64), String> {
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{}` is not a step number", quote(t)))
    };
    let (a, b) = match s.split_once("..") {
        Some((a, b)) => (num(a)?, num(b.strip_prefix('=').unwrap_or(b))?),
        None => (num(s)?, num(s)?),
    };
    if a == 0 || a > b {
        return Err(format!(
            "`{}` is not a range of steps (they count from 1, start ≤ end)",
            quote(s)
        ));
    }
    Ok((a, b))
}

fn steps_help() -> String {
    format!(
        "Steps to run, at most {} [default: the recipe's `training.steps`]",
        MAX_STEPS.max
    )
}

fn seeds_help() -> String {
    format!(
        "Seeds to run, at most {}: `A..B` (inclusive: `1..3` runs 1, 2 and 3), `A..=B`, or \
         `A,B,C` [default: the recipe's `training.seeds`]",
        MAX_SEEDS.max
    )
}

fn svg_help() -> String {
    format!(
        "Also write the per-step high-water figure (SVG) to this file (at most {} seeds)",
        MAX_FIGURE_SEEDS.max
    )
}

#[derive(Debug, Args)]
pub(crate) struct LedgerArgs {
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
pub(crate) struct ForensicsArgs {
    /// Trainer logs; several logs make one table, one row each.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
    /// One JSON object per log per line instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ConformArgs {
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
    /// With --dry: the networks only, each predicted from the atlas --autotune less the problems
    /// its own first run tuned (`DIR/autotune/<family>-<precision>`): bytes in use within the
    /// GPU's spread, the GPU's bytes reserved between the least and the most of the band.
    #[arg(long, requires = "dry")]
    pub band: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    highwater order repro/results/fusion/order/decoder-decoder-fusion-none-b16.json --replays 5\n\n\
    The GPU's trace is the record's NAME.server.json beside it. Per replay: bytes reserved at \
    the end of each step less the GPU's; the first reservation where the servers saw different \
    bytes in use, different bytes reserved, and where one opened a page and the other did not \
    (\"none\" also when the GPU's trace predates that field); at how many reservations the \
    dry server had seen more releases than the GPU's, or fewer; and the sizes whose count of \
    persistent pages (pages of exactly their tensor's size) differs from the GPU's, GPU's count \
    first.")]
pub(crate) struct OrderArgs {
    /// A network record made with `highwater rerun --trace-server`.
    #[arg(value_name = "RECORD")]
    pub record: PathBuf,
    /// Dry replays.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub replays: u64,
    /// The card profile recorded on the GPU that ran it.
    #[arg(long, value_name = "PATH", default_value = "repro/cards/h200.json")]
    pub card: PathBuf,
    /// That GPU's autotune cache (a `device-0-0-cuda` folder), as the record's run had it.
    #[arg(long, value_name = "DIR", default_value = "repro/cards/h200-autotune")]
    pub autotune: PathBuf,
}

#[derive(Debug, Args)]
#[command(after_help = fit_after_help())]
pub(crate) struct FitArgs {
    #[arg(value_name = "MODEL", help = fit_model_help())]
    pub model: PathBuf,
    /// The card's memory (`16GiB`, `80GB`, `24000000000`), or a card profile (JSON) to use as
    /// it is.
    #[arg(long, value_name = "SIZE|PATH", default_value = "repro/cards/h200.json", value_parser = parse_card)]
    pub card: CardArg,
    /// The chip a --card size is given to.
    #[arg(long, value_name = "PATH", default_value = "repro/cards/h200.json")]
    pub chip: PathBuf,
    /// Sequences per step [default: the model's].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "largest_batch")]
    pub batch: Option<u64>,
    /// Search for the largest batch whose steps fit, and say where the next one dies.
    #[arg(long)]
    pub largest_batch: bool,
    /// Steps per run (the bundled models' pools settle by their third step).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=highwater::limits::MAX_DRY_STEPS.max))]
    pub steps: u64,
    /// Backend [default: the model's].
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Checkpoint strategy [default: the model's].
    #[arg(long, value_enum)]
    pub checkpointing: Option<CheckpointingArg>,
    /// On the --card as it is (its page sizes), a card that leaves the process BYTES, or
    /// `card`: a wave recipe's own card less its desktop. The chip's CUDA context comes out of
    /// it, as on the GPU: what `highwater rerun --cap` emulates there.
    #[arg(long, value_name = "BYTES|card", value_parser = parse_cap, conflicts_with = "largest_batch")]
    pub cap: Option<CapArg>,
    /// Seed of the weights and batches (and of a recipe's sequence-length schedule).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Read the loss back every N steps, as a trainer that logs does [default: at the last step].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub log_every: Option<u64>,
    /// The card's autotune atlas (GPU caches merged by `highwater atlas`), so the dry run picks
    /// the kernels the GPU picked; a problem it lacks is decided by the miss policy and the
    /// bytes reserved are banded over its candidates.
    #[arg(long, value_name = "DIR", default_value = "repro/cards/h200-atlas")]
    pub autotune: PathBuf,
    /// One JSON object on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// The burn a network file trains under: 0.22 (CubeCL 0.11's pools), or 0.21 (CubeCL 0.10's,
    /// the incident's, with the GPU's autotune atlas) [default: 0.22 for a network file; a wave
    /// recipe's SiTU step exists on 0.21 only].
    #[arg(long, value_enum)]
    pub burn: Option<BurnArg>,
}

/// A burn version `fit` can train under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BurnArg {
    /// burn 0.21 / CubeCL 0.10.
    #[value(name = "0.21")]
    V021,
    /// burn 0.22 / CubeCL 0.11.
    #[value(name = "0.22")]
    V022,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    highwater atlas repro/cards/h200-autotune repro/results/models/autotune/* \
    --out repro/cards/h200-atlas")]
pub(crate) struct AtlasArgs {
    /// Autotune cache folders written on the GPU (`device-0-0-cuda`), in order of preference.
    #[arg(value_name = "DIR", required = true)]
    pub sources: Vec<PathBuf>,
    /// Write the merged atlas here (replaced), one cache file per tuner.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `fit MODEL`: what a model file is, and where its format is listed.
fn fit_model_help() -> String {
    format!(
        "A network file (TOML with one of {}: repro/models) or a wave recipe (repro/recipes)",
        highwater::network::FAMILIES
            .map(|f| format!("`[{f}]`"))
            .join(", ")
    )
}

/// `fit --help`'s closing lines: examples, the card, the model file's format, the exit status.
fn fit_after_help() -> String {
    format!(
        "Examples:\n  \
         highwater fit repro/models/decoder.toml --card 16GiB\n  \
         highwater fit repro/models/decoder.toml --card 16GiB --largest-batch\n  \
         highwater fit repro/recipes/wave-stack.toml --card 80GB --batch 32 --backend fusion\n\n\
         The card is the chip of --chip (a profile recorded by card-profile) with the memory of \
         --card; the pools may take that memory less the CUDA context the chip's process took.\n\n\
         Every family, key, unit, default and limit of a network file: {}. The file's \
         batch, backend and checkpointing are trained unless --batch, --backend or \
         --checkpointing say otherwise; its training.steps and training.seed are not read \
         (--steps, --seed).\n\n\
         Exits 0 whether or not the model fits; 1 on bad input.",
        highwater::network::see_format()
    )
}

/// What `--card` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CardArg {
    /// A memory size in bytes, given to the chip.
    Bytes(u64),
    /// A card profile used as it is.
    Profile(PathBuf),
}

/// `16GiB`, `16 GiB`, `80GB`, `512MiB`, `24000000000` (bytes); anything else is a path.
pub(crate) fn parse_card(s: &str) -> Result<CardArg, String> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    if digits == 0 {
        return Ok(CardArg::Profile(PathBuf::from(s)));
    }
    let (number, unit) = t.split_at(digits);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ if t.ends_with(".json") => return Ok(CardArg::Profile(PathBuf::from(s))),
        other => {
            return Err(format!(
                "`{}` is not a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                quote(other)
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{}` is not a number", quote(number)))?;
    let bytes = value * scale as f64;
    if !(1.0..=(1u64 << 50) as f64).contains(&bytes) {
        return Err(format!(
            "{} is not a card's memory (1 B to 1 PiB)",
            quote(s)
        ));
    }
    Ok(CardArg::Bytes(bytes as u64))
}

#[cfg(feature = "cuda")]
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    highwater rerun --recipe repro/recipes/wave-stack.toml --activation situ-tensor \
    --backend fusion --checkpointing balanced --steps 50 --out repro/results\n  \
    highwater rerun --recipe repro/recipes/situ.toml --cap card --steps 100\n  \
    highwater rerun --model repro/models/decoder.toml --backend cube --steps 20\n  \
    highwater rerun --model repro/models/resnet.toml --precision bf16 --steps 4\n\n\
    Writes OUT/rerun-<recipe>-<activation>-<backend>-<checkpointing>[-cap<GiB>].json, or \
    OUT/<family>-<file>-<backend>-<checkpointing>-b<batch>[-bf16].json; log lines (the command \
    first) go to stdout.")]
#[command(group = clap::ArgGroup::new("what").required(true).args(["recipe", "model"]))]
pub(crate) struct RerunArgs {
    /// Recipe file (TOML).
    #[arg(long, value_name = "PATH")]
    pub recipe: Option<PathBuf>,
    /// A network file (TOML with `[decoder]`, `[encoder]`, `[resnet]`, `[vit]`, `[lstm]` or
    /// `[mlp]`), e.g. repro/models/decoder.toml.
    #[arg(long, value_name = "PATH", alias = "decoder")]
    pub model: Option<PathBuf>,
    /// With --model: examples per step [default: the file's].
    #[arg(long, value_name = "N", requires = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// With --model: the float type [default: the file's].
    #[arg(long, value_enum, requires = "model")]
    pub precision: Option<PrecisionArg>,
    /// Activation path [default: the recipe's].
    #[arg(long, value_enum, conflicts_with = "model")]
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
    /// With --model: trace the CubeCL server (the pool before each reservation, the launches
    /// between, the server's clock), written beside the record as NAME.server.json. Reading
    /// the pool slows the server: compare the record with an untraced run's.
    #[arg(long, requires = "model")]
    pub trace_server: bool,
    /// Directory for the record.
    #[arg(long, value_name = "DIR", default_value = "repro/results")]
    pub out: PathBuf,
}

/// What `--cap` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapArg {
    Bytes(u64),
    /// The recipe's card less its desktop.
    RecipeCard,
}

fn parse_cap(s: &str) -> Result<CapArg, String> {
    match s {
        "card" => Ok(CapArg::RecipeCard),
        _ => s
            .parse()
            .map(CapArg::Bytes)
            .map_err(|_| format!("`{}` is neither a byte count nor `card`", quote(s))),
    }
}

/// The burn backends a run can use.
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

/// The float types a network trains in.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PrecisionArg {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
}

impl From<PrecisionArg> for highwater::network::Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::F32 => highwater::network::Precision::F32,
            PrecisionArg::Bf16 => highwater::network::Precision::Bf16,
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
pub(crate) struct Seeds(pub Vec<u64>);

/// `--steps`: refused past [`MAX_STEPS`], the limit a recipe's own steps obey.
fn parse_steps(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("a run of 0 steps simulates nothing".into()),
        Ok(n) if MAX_STEPS.allows(n) => Ok(n),
        Ok(_) => Err(format!("above {MAX_STEPS}")),
        Err(_) => Err(format!("`{}` is not a number of steps", quote(s))),
    }
}

/// `--seeds`: refused past [`MAX_SEEDS`], the limit a recipe's own seeds obey, before a range
/// is expanded.
fn parse_seeds(s: &str) -> Result<Seeds, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{}` is not a seed (a whole number ≥ 0)", quote(t)))
    };
    let too_many = |n: u128| format!("{n} seeds, above {MAX_SEEDS}");
    if let Some((a, b)) = s.split_once("..") {
        let b = b.strip_prefix('=').unwrap_or(b);
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(format!("the range {} is empty (start above end)", quote(s)));
        }
        let n = u128::from(b - a) + 1;
        if n > u128::from(MAX_SEEDS.max) {
            return Err(too_many(n));
        }
        return Ok(Seeds((a..=b).collect()));
    }
    let seeds = s.split(',').map(num).collect::<Result<Vec<_>, _>>()?;
    match seeds.len() as u64 {
        n if MAX_SEEDS.allows(n) => Ok(Seeds(seeds)),
        n => Err(too_many(n.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_ranges() {
        assert_eq!(parse_step_range("10..12"), Ok((10, 12)));
        assert_eq!(parse_step_range("10..=12"), Ok((10, 12)));
        assert_eq!(parse_step_range("7"), Ok((7, 7)));
        assert!(parse_step_range("0..3").unwrap_err().contains("from 1"));
        assert!(
            parse_step_range("5..3")
                .unwrap_err()
                .contains("start ≤ end")
        );
        assert!(parse_step_range("x..3").unwrap_err().contains("`x`"));
    }

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

    /// Past the limit a recipe obeys too, by range or by list, naming the limit; the range is
    /// refused before it is expanded (`0..18446744073709551615` would not fit in memory).
    #[test]
    fn seeds_are_capped_like_a_recipes() {
        assert_eq!(parse_seeds("1..100000").map(|s| s.0.len()), Ok(100_000));
        for s in [
            "1..100001".to_string(),
            "0..=18446744073709551615".to_string(),
            vec!["7"; 100_001].join(","),
        ] {
            let e = parse_seeds(&s).unwrap_err();
            assert!(e.contains("limits::MAX_SEEDS"), "{e}");
        }
    }

    #[test]
    fn steps_are_capped_like_a_recipes() {
        assert_eq!(parse_steps("100000"), Ok(100_000));
        assert!(parse_steps("0").unwrap_err().contains("0 steps"));
        let e = parse_steps("1000000000000").unwrap_err();
        assert_eq!(
            e,
            "above the limit of 100000 steps per run (limits::MAX_STEPS)"
        );
    }

    /// A bad value is quoted cut to a bounded length, whatever was typed.
    #[test]
    fn bad_values_are_quoted_cut() {
        let long = "x".repeat(100_000);
        for e in [
            parse_steps(&long).unwrap_err(),
            parse_seeds(&long).unwrap_err(),
            parse_seeds(&format!("{long}..3")).unwrap_err(),
        ] {
            assert!(e.len() < 200 && e.contains("(100000 bytes)"), "{e}");
        }
    }

    #[test]
    fn cards() {
        assert_eq!(parse_card("16GiB"), Ok(CardArg::Bytes(16 << 30)));
        assert_eq!(parse_card("16 GiB"), Ok(CardArg::Bytes(16 << 30)));
        assert_eq!(parse_card("80GB"), Ok(CardArg::Bytes(80_000_000_000)));
        assert_eq!(parse_card("1.5GiB"), Ok(CardArg::Bytes(3 << 29)));
        assert_eq!(parse_card("4096"), Ok(CardArg::Bytes(4096)));
        assert_eq!(
            parse_card("repro/cards/h200.json"),
            Ok(CardArg::Profile("repro/cards/h200.json".into()))
        );
        assert!(
            parse_card("16 furlongs")
                .unwrap_err()
                .contains("not a unit")
        );
        assert!(
            parse_card("99999999TiB")
                .unwrap_err()
                .contains("not a card")
        );
        assert!(parse_card("0GiB").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
