//! `highwater`: the simulator of the book, on the command line.
//!
//! ```text
//! highwater simulate --recipe repro/recipes/situ.toml --steps 2000 --seeds 1..3
//! highwater simulate --recipe repro/recipes/situ.toml --seeds 1..3 --json > runs.jsonl
//! highwater simulate --recipe repro/recipes/small.toml --seed 1 --svg small.svg
//! highwater ledger   --recipe repro/recipes/situ.toml --checkpointing balanced
//! highwater forensics ~/logs/ab2000_situ_s*.log
//! highwater conform repro/results
//! highwater fit repro/models/decoder.toml --card 16GiB --largest-batch
//! highwater replay job.pickle --card 24GiB
//! highwater rerun --recipe repro/recipes/wave-stack.toml --activation situ-fused --steps 50   # feature cuda
//! ```
//!
//! * `simulate` runs [`highwater::simulate_with`] once per seed (the recipe's own steps and
//!   seeds unless `--steps` / `--seeds A..B` (inclusive) / `--seed N` say otherwise) and
//!   prints a summary table, or with `--json` one JSON object per run per line:
//!   `{"recipe", "seed", "steps", "died_at" (null if it survived), "capacity",
//!   "peak_in_use": [per step], "reserved": [per step], "pages": [per step],
//!   "failures": [{"step", "requested", "page", "phase"}]}`. `--svg OUT` also writes the
//!   per-step high-water figure. A progress bar goes to stderr when it is a terminal.
//! * `ledger` prints one expert call's per-op table: shape, bytes, view or copy, and what
//!   burn 0.21's autodiff keeps until backward, and why.
//! * `forensics` reads trainer logs (see [`highwater::forensics`] for the line formats) and
//!   prints attempts, deaths, reserve failures by size × count, before or after step 0.
//!
//! * `conform` reads every `rerun-*.json` in a directory (runs recorded on a GPU by `rerun`),
//!   simulates each as that card had it and prints measured, predicted and error; it exits 1
//!   when any run misses a tolerance (see [`highwater::conform`]).
//! * `fit` trains a model (a network file or a wave recipe) dry on a card of the size asked and
//!   prints each step's pool figures and whether it fits, or searches for the largest batch
//!   that does and says where the next one dies (see `situ::dry`).
//! * `rerun` (built with `--features cuda`) trains the recipe, or a network file, on burn-cuda and
//!   writes the record (see `situ::rerun`).
//! * `order` replays a burn-fusion record traced on the GPU dry, with the server traced, and
//!   says where the two servers part and which persistent pages each opened (see
//!   `dryrun::traced`).
//! * `replay` reads a PyTorch memory snapshot and replays its requests through PyTorch's
//!   caching allocator as `graphrace` models it, on another card or under other allocator
//!   settings: whether it fits, the request refused and PyTorch's message (see
//!   `graphrace::snapshot`).
//! * `atlas` merges autotune caches recorded on a GPU into the card's atlas, the kernel choices
//!   `fit` starts from (see `dryrun::atlas`).
//!
//! Bad input (unreadable file, malformed recipe, bad range) exits with status 1 and one
//! message on stderr: what failed, then each cause once (a recipe error names the file, line,
//! field and reason, and quotes the line, cut as `highwater::limits::quote` cuts it). Work past
//! a limit of `highwater::limits` (steps, seeds, a recipe's counts) is refused before it starts,
//! naming the limit. Usage errors exit with clap's status 2.

mod args;
mod atlas;
mod commands;
mod conform;
mod conform022;
mod fit;
mod fit022;
mod input;
mod order;
mod quiet;
mod replay;
#[cfg(feature = "cuda")]
mod rerun;

use clap::Parser;

fn main() -> std::process::ExitCode {
    basics::cli::exit_code(commands::run(args::Cli::parse()))
}
