//! Part II's static check swept over concurrencies, as *Proving it without running it* reads
//! it.

use std::ops::RangeInclusive;

use cell_output::CellError;
use graphrace::{Captured, Config};

/// Where the static check flags a configuration, concurrency by concurrency.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// The session counts at which the captured graph has a race.
    pub races: Vec<u32>,
    /// Those at which it has a latent hazard (an unordered, unrecorded cross-stream free).
    pub latent: Vec<u32>,
}

/// The static check of `config`'s graph captured at every session count of `sessions`.
pub fn sweep(config: &Config, sessions: RangeInclusive<u32>) -> Result<Sweep, CellError> {
    let mut out = Sweep::default();
    for s in sessions {
        let report = Captured::new(config, s)?.check();
        if report.races().next().is_some() {
            out.races.push(s);
        }
        if report.findings.iter().any(|f| !f.is_race()) {
            out.latent.push(s);
        }
    }
    Ok(out)
}

/// The session counts of `sessions` at which `config`'s transient `index_k` is small enough
/// for the allocator's small segments; at each, attention's output must land on its block
/// (the chapter's claim), else an error says where it does not.
pub fn small_transient(
    config: &Config,
    sessions: RangeInclusive<u32>,
) -> Result<Vec<u32>, CellError> {
    let mut small = vec![];
    for s in sessions {
        let g = Captured::new(config, s)?.graph;
        let at = |name: &str| {
            let i = g.tensors.iter().position(|t| t.name == name)?;
            g.placements[i].clone()
        };
        let k = at("index_k").ok_or("index_k not placed")?;
        let attn = at("attn").ok_or("attn not placed")?;
        if k.range.end - k.range.start <= graphrace::pool::SMALL_LIMIT {
            if !(attn.range.start < k.block.end && k.block.start < attn.range.end) {
                let e = format!("attention's output is not on the transient at {s} sessions");
                return Err(e.into());
            }
            small.push(s);
        }
    }
    Ok(small)
}

/// The tensors of `graph` that share bytes with the transient `index_k`, in the program's
/// order; empty if the step has no `index_k`.
pub fn on_transient(graph: &graphrace::Graph) -> Vec<String> {
    let Some(k) = graph.tensors.iter().position(|t| t.name == "index_k") else {
        return vec![];
    };
    let Some(kr) = graph.placements[k].as_ref().map(|p| p.range.clone()) else {
        return vec![];
    };
    (graph.tensors.iter().enumerate())
        .filter(|(i, _)| {
            *i != k
                && graph.placements[*i]
                    .as_ref()
                    .is_some_and(|p| p.range.start < kr.end && kr.start < p.range.end)
        })
        .map(|(_, t)| t.name.clone())
        .collect()
}

/// `config`'s step at `sessions` captured under the allocator rules the GPU records were laid
/// out by (every large segment rounded to 2 MiB; see `graphrace::pool::Rules`).
pub fn older_layout(config: &Config, sessions: u32) -> Result<graphrace::Graph, CellError> {
    let program = graphrace::decode_step(config, sessions);
    graphrace::capture::capture_with(&program, graphrace::pool::Rules::Rounded2MiB)
        .map_err(|e| e.to_string().into())
}
