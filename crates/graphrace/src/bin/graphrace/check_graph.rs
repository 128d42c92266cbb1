//! `graphrace check-graph`: the static check on the graphs CUDA built, each race with its
//! witness, and where the driver's ordering differs from the model's.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use graphrace::driver::{self, DriverGraph, GraphDump};

use crate::{captured, load};

#[derive(Debug, Args)]
pub(crate) struct GraphArgs {
    /// A dump written by `graphrace-gpu --dump-graph`, e.g.
    /// repro/results/graphrace-graph-h200.json.
    #[arg(long, value_name = "PATH")]
    pub(crate) graph: PathBuf,
    /// Only this configuration's graph.
    #[arg(long, value_name = "NAME")]
    pub(crate) config: Option<String>,
    /// Where the configurations are, to compare with the model's graph of each.
    #[arg(long, value_name = "DIR", default_value = "repro/graphrace")]
    pub(crate) configs: PathBuf,
    /// One JSON object per graph per line.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn check_graph(args: &GraphArgs) -> Result<()> {
    let path = &args.graph;
    let dump = GraphDump::read(path)?;
    let graphs: Vec<&DriverGraph> = match &args.config {
        Some(name) => vec![dump.graph(name).with_context(|| {
            let have: Vec<&str> = dump.graphs.iter().map(|g| g.config.as_str()).collect();
            format!(
                "{} has no graph `{name}` (it has: {})",
                path.display(),
                have.join(", ")
            )
        })?],
        None => dump.graphs.iter().collect(),
    };
    for g in graphs {
        let races = driver::check(g);
        // A suite's graphs are named by variant (`incident@36`): the configuration is before `@`.
        let config = g.config.split('@').next().unwrap_or_default();
        let file = args.configs.join(format!("{config}.toml"));
        let model = load(&file)
            .and_then(|config| captured(&config, g.sessions))
            .map(|c| driver::compare(g, &c.graph));
        if args.json {
            let line = serde_json::json!({
                "config": g.config,
                "nodes": g.nodes.len(),
                "edges": g.edges.len(),
                "races": races,
                "against_model": model.as_ref().ok(),
            });
            say!("{line}")?;
            continue;
        }
        say!(
            "{}: the graph CUDA built ({}, driver {}, {}): {} nodes, {} edges; races: {}",
            g.config,
            dump.gpu,
            dump.driver,
            dump.date,
            g.nodes.len(),
            g.edges.len(),
            races.len()
        )?;
        for w in &races {
            for line in w.to_string().lines() {
                say!("  {line}")?;
            }
            let mut steps: Vec<(u32, Vec<String>)> = vec![];
            for slot in &w.schedule {
                match steps.last_mut() {
                    Some((at, names)) if *at == slot.start => names.push(g.node_name(slot.node)),
                    _ => steps.push((slot.start, vec![g.node_name(slot.node)])),
                }
            }
            for (at, names) in steps {
                say!("    step {at}: {}", names.join(" | "))?;
            }
        }
        match model {
            Ok(c) if c.agrees() => say!(
                "  against the model ({}, {} sessions): {} kernels matched, same order; the \
                 driver's nodes no model kernel matched: {}",
                file.display(),
                g.sessions,
                c.matched,
                c.harness.join(", ")
            )?,
            Ok(c) => {
                say!(
                    "  against the model ({}, {} sessions): {} kernels matched; they differ:",
                    file.display(),
                    g.sessions,
                    c.matched
                )?;
                for m in &c.missing {
                    say!("    the model's `{m}` is not in the driver's graph")?;
                }
                for (a, b) in &c.only_driver_orders {
                    say!("    the driver orders `{a}` before `{b}`; the model does not")?;
                }
                for (a, b) in &c.only_model_orders {
                    say!("    the model orders `{a}` before `{b}`; the driver does not")?;
                }
            }
            Err(e) => say!("  not compared with the model: {e:#}")?,
        }
    }
    Ok(())
}
