//! `highwater rerun` (feature `cuda`): the recipe, or a network, on a real GPU, a trainer's log
//! on stdout, the record in `--out`.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use highwater::conform::{DeviceMemory, MeasuredDeath, MeasuredStep};
use highwater::network::Network;
use indicatif::{ProgressBar, ProgressStyle};
use situ::rerun::{
    NetworkPlan, Observer, RerunPlan, rerun as run, rerun_network as rerun_network_on_gpu,
};

use highwater::recipe::written_name;

use crate::args::{CapArg, RerunArgs};
use crate::input::read_recipe;
use basics::bytes::show;

pub(crate) fn rerun(a: RerunArgs) -> Result<()> {
    let Some(recipe_path) = a.recipe.clone() else {
        return rerun_network(a);
    };
    let (mut recipe, recipe_toml) = read_recipe(&recipe_path)?;
    let cap = a.cap.map(|c| match c {
        CapArg::Bytes(b) => b,
        CapArg::RecipeCard => recipe.card.total_bytes - recipe.card.desktop_bytes,
    });
    recipe = recipe.with(
        a.activation.map_or(recipe.activation, Into::into),
        a.checkpointing.map_or(recipe.checkpointing, Into::into),
    );
    recipe.backend = a.backend.map_or(recipe.backend, Into::into);
    let plan = RerunPlan {
        recipe_path: recipe_path.display().to_string(),
        recipe_toml,
        recipe,
        steps: a.steps,
        seed: a.seed,
        cap,
        log_every: a.log_every,
    };
    let provenance = provenance();
    let r = &plan.recipe;
    println!(
        "model: {} experts x {} iterations, batch {} x seq {}, d_model {}, d_ffn {} | \
         activation: {} | checkpointing: {} | backend: {} | optimizer: {}",
        r.n_experts,
        r.max_iter,
        r.batch,
        r.seq_len,
        r.d_model,
        r.d_ffn,
        written_name(&r.activation),
        written_name(&r.checkpointing),
        written_name(&r.backend),
        written_name(&r.optimizer),
    );
    if !r.workload.is_fixed(r.seq_len) {
        println!("workload: {}", serde_json::to_string(&r.workload)?);
    }
    let bar = bar(a.steps);
    let mut log = Log {
        bar: &bar,
        steps: a.steps,
        every: a.log_every,
    };
    let record = run(&plan, provenance, &mut log).context("the rerun could not start")?;
    bar.finish_and_clear();
    println!("eval: {}", record.counters);
    write(&a.out, &record.name(), &record)
}

/// `rerun --model`: a network trained on the GPU.
fn rerun_network(a: RerunArgs) -> Result<()> {
    let path = a.model.clone().context("--recipe or --model")?;
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("cannot read model {origin}"))?;
    let mut network = Network::parse(&origin, &text)
        .map_err(|e| anyhow::anyhow!(e).context(format!("invalid model {origin}")))?;
    if let Some(batch) = a.batch {
        network = network.with_batch(batch).map_err(anyhow::Error::msg)?;
    }
    network.backend = a.backend.map_or(network.backend, Into::into);
    network.checkpointing = a.checkpointing.map_or(network.checkpointing, Into::into);
    network.precision = a.precision.map_or(network.precision, Into::into);
    network.steps = a.steps;
    network.seed = a.seed;
    let cap = a.cap.map(|c| match c {
        CapArg::Bytes(b) => Ok(b),
        CapArg::RecipeCard => Err(anyhow::anyhow!(
            "a network has no card of its own: --cap BYTES"
        )),
    });
    let plan = NetworkPlan {
        model_path: origin,
        model_toml: text,
        network,
        cap: cap.transpose()?,
        log_every: a.log_every,
        trace_server: a.trace_server,
    };
    let provenance = provenance();
    println!("{}", plan.network.describe());
    let bar = bar(a.steps);
    let mut log = Log {
        bar: &bar,
        steps: a.steps,
        every: a.log_every,
    };
    let record =
        rerun_network_on_gpu(&plan, provenance, &mut log).context("the rerun could not start")?;
    bar.finish_and_clear();
    if !record.tuned.is_empty() {
        println!("autotuned {} problems during the run", record.tuned.len());
    }
    if a.trace_server {
        let trace = situ::rerun::take_server_trace();
        println!("the server met {} reservations", trace.len());
        write(&a.out, &format!("{}.server", record.name()), &trace)?;
    }
    write(&a.out, &record.name(), &record)
}

/// Where the binary came from, printed as the log's first lines.
fn provenance() -> highwater::conform::Provenance {
    let provenance = situ::provenance::collect(
        "cargo build --release --locked -p highwater-cli --features cuda",
    );
    println!("$ {}", provenance.command);
    println!(
        "{} | driver {} | CUDA {} | burn {} cubecl {} | rev {} | {}",
        provenance.gpu,
        provenance.driver,
        provenance.cuda,
        provenance.versions.burn,
        provenance.versions.cubecl,
        provenance.git_revision,
        provenance.date
    );
    provenance
}

fn bar(steps: u64) -> ProgressBar {
    if std::io::stderr().is_terminal() {
        ProgressBar::new(steps).with_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} steps {msg}")
                .expect("a valid template"),
        )
    } else {
        ProgressBar::hidden()
    }
}

/// Writes `OUT/<name>.json`.
fn write(out: &std::path::Path, name: &str, record: &impl serde::Serialize) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join(format!("{name}.json"));
    let json = serde_json::to_string_pretty(record)?;
    std::fs::write(&path, json + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Step lines in a trainer's format, and the progress bar.
struct Log<'a> {
    bar: &'a ProgressBar,
    steps: u64,
    every: u64,
}

impl Log<'_> {
    /// A log line: above the bar on a terminal, else straight to stdout (a hidden bar prints
    /// nothing).
    fn line(&self, text: String) {
        if self.bar.is_hidden() {
            println!("{text}");
        } else {
            self.bar.println(text);
        }
    }
}

impl Observer for Log<'_> {
    fn started(&mut self, d: &DeviceMemory) {
        self.line(format!(
            "device: total {} | free at start {} | cap {} | ballast {} | pool may take {}",
            show(d.total_bytes),
            show(d.free_at_start),
            d.cap_bytes.map_or("none".into(), show),
            show(d.ballast_bytes),
            show(d.pool_capacity),
        ));
    }

    fn step(&mut self, m: &MeasuredStep, counters: &str) {
        self.bar.inc(1);
        self.bar
            .set_message(format!("in use {}", show(m.in_use_after_forward)));
        if m.step == 1 || m.step.is_multiple_of(self.every) || m.step == self.steps {
            let loss = m.loss.map_or("–".into(), |l| format!("{l:.6}"));
            self.line(format!(
                "step {:>5}/{} | loss {loss} | in use after fwd {} after bwd {} | reserved {}{} | \
                 {:.1} ms | {counters}",
                m.step,
                self.steps,
                show(m.in_use_after_forward),
                show(m.in_use_after_backward),
                show(m.reserved),
                m.device_reserved
                    .map_or(String::new(), |d| format!(" (every stream: {})", show(d))),
                m.step_ms,
            ));
        }
    }

    fn died(&mut self, d: &MeasuredDeath) {
        let pages = if d.failed_pages.is_empty() {
            String::new()
        } else {
            format!(
                " | {} failed reserves, pages {}",
                d.failed_pages.len(),
                d.failed_pages
                    .iter()
                    .map(|&p| show(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        self.line(format!(
            "step {:>5}/{} | died in {}: {}{pages}",
            d.step,
            self.steps,
            written_name(&d.phase),
            d.message.lines().next().unwrap_or_default()
        ));
    }
}
