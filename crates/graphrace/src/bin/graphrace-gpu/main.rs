//! `graphrace-gpu`: the decode step of the model, run on a real GPU (feature `cuda`).
//!
//! One body, two arms: the step is the model's own [`graphrace::decode_step`] program, and
//! every tensor sits at the address the model's caching allocator gave it ([`graphrace::capture`])
//! inside one device arena. The host walks the same ops: a launch becomes a CUDA kernel on the
//! main or the side stream, a wait becomes an event recorded on one stream and waited on by the
//! other; allocations and frees were already decided by the model's pool. Captured arms record
//! that walk into a CUDA graph once and replay it; the eager arm launches the walk each time.
//!
//! Each kernel sweeps its tensor's rows in address order and spends the model's nominal cost
//! doing so (a `clock64` wait per row and a fixed one at the start), so the GPU follows the
//! model's timing; the GPU's own scheduling, plus a bandwidth hog on a third stream (`--load`),
//! supplies the jitter. `--side-stretch` makes the side's store slower (a heavier indexer) to
//! show where the margin closes.
//!
//! After every replay a check on the main stream compares the index-K cache, which the side's
//! store copies from `index_k`, with the values `index_k_proj` wrote in that replay: a session
//! whose row differs read a block the main stream had already handed to another tensor.
//!
//! ```text
//! graphrace-gpu --out graphrace-h200.json [--sessions 36,48,60,72,84] [--replays 200]
//!               [--trials 5] [--side-stretch 1,1.5,2] [--blocks 16] [--no-load]
//! ```
//!
//! Why cudarc rather than CubeCL: the race needs CUDA-graph stream capture, events between two
//! streams and a pool whose addresses we choose, and CubeCL 0.10 exposes none of these (its
//! streams and memory pools are internal to its server). cudarc is the driver API itself,
//! loaded at run time like CubeCL loads it, and already in the lockfile through cubecl-cuda.
//!
//! Writes JSON whose first field is the command line, then the GPU, driver, date and git
//! revision, then one result per arm × sessions × stretch; prints a human log as it goes.

mod dump;
mod gpu;
mod rerun;
mod suite;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::gpu::Gpu;

pub(crate) struct Args {
    pub(crate) out: PathBuf,
    /// Write the driver's graphs of every captured configuration here instead of replaying
    /// (with `--suite`: of every captured variant, beside the replays).
    pub(crate) dump_graph: Option<PathBuf>,
    /// Replay every variant of this suite (`repro/graphrace-suite.toml`) instead of the arms.
    pub(crate) suite: Option<PathBuf>,
    /// With `--suite`: replays timed kernel by kernel after the counted ones.
    pub(crate) timed: u32,
    pub(crate) sessions: Vec<u32>,
    pub(crate) replays: u32,
    pub(crate) trials: u32,
    pub(crate) side_stretch: Vec<f64>,
    pub(crate) blocks: u32,
    pub(crate) load: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        out: PathBuf::new(),
        dump_graph: None,
        suite: None,
        timed: 0,
        sessions: vec![36, 48, 60, 72, 84],
        replays: 200,
        trials: 5,
        side_stretch: vec![1.0, 1.5, 2.0],
        blocks: 16,
        load: true,
    };
    let list = |v: &str| -> Result<Vec<f64>> {
        v.split(',')
            .map(|x| {
                x.trim()
                    .parse::<f64>()
                    .with_context(|| format!("`{x}` is not a number"))
            })
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => a.out = PathBuf::from(value()?),
            "--dump-graph" => a.dump_graph = Some(PathBuf::from(value()?)),
            "--suite" => {
                a.suite = Some(PathBuf::from(value()?));
                a.timed = a.timed.max(100);
            }
            "--timed" => a.timed = value()?.parse()?,
            "--sessions" => a.sessions = list(&value()?)?.into_iter().map(|x| x as u32).collect(),
            "--replays" => a.replays = value()?.parse()?,
            "--trials" => a.trials = value()?.parse()?,
            "--side-stretch" => a.side_stretch = list(&value()?)?,
            "--blocks" => a.blocks = value()?.parse()?,
            "--no-load" => a.load = false,
            other => bail!(
                "unknown argument `{other}`; usage: graphrace-gpu --out FILE [--sessions 36,48,60] \
                 [--replays N] [--trials N] [--side-stretch 1,1.5,2] [--blocks N] [--no-load] | \
                 graphrace-gpu --dump-graph FILE [--sessions N] [--blocks N] | \
                 graphrace-gpu --suite SUITE --out FILE --dump-graph FILE [--replays N] [--trials N]"
            ),
        }
    }
    if a.out.as_os_str().is_empty() && a.dump_graph.is_none() {
        bail!("--out FILE (or --dump-graph FILE) is required");
    }
    if a.suite.is_some() && (a.out.as_os_str().is_empty() || a.dump_graph.is_none()) {
        bail!("--suite needs --out FILE (the replays) and --dump-graph FILE (the graphs)");
    }
    Ok(a)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let gpu = Gpu::new()?;
    let name = gpu.ctx.name().unwrap_or_else(|_| "unknown".into());
    println!("{command}\n{name}, SM clock {:.0} MHz", gpu.cycles_per_us);
    if let Some(suite) = &args.suite {
        return suite::run_suite(&gpu, &args, command, name, suite);
    }
    if let Some(path) = &args.dump_graph {
        return dump::dump_graphs(&gpu, &args, command, name, path);
    }
    rerun::run_arms(&gpu, &args, command, name)
}
