//! Figures: one dry training step of the wave's expert stack (burn's own code over the dry
//! CubeCL runtime, the H200's card profile and autotune cache), median over steps 3..=50, per
//! configuration, and a whole 50-step replay including the device's start.
//! `cargo bench -p situ --features dry` (harness-free; prints, asserts nothing).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use dryrun::{CardProfile, OnRefusal};
use highwater::Recipe;
use highwater::recipe::{Activation, Backend, Checkpointing};
use situ::dry::{DryPlan, dry_run};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let card = Arc::new(CardProfile::read(&root.join("repro/cards/h200.json")).unwrap());
    let autotune = root.join("repro/cards/h200-autotune");
    let text = std::fs::read_to_string(root.join("repro/recipes/wave-stack.toml")).unwrap();
    let base = Recipe::parse("wave-stack.toml", &text).unwrap();
    println!("one dry step of the wave stack (median of steps 3..=50), and the 50-step replay");
    let mut medians = vec![];
    for activation in [
        Activation::Silu,
        Activation::SituTensor,
        Activation::SituFused,
    ] {
        for checkpointing in [Checkpointing::None, Checkpointing::Balanced] {
            for backend in [Backend::Cube, Backend::Fusion] {
                let mut recipe = base.with(activation, checkpointing);
                recipe.backend = backend;
                let plan = DryPlan {
                    steps: 50,
                    seed: 1,
                    capacity: card.free_at_start,
                    on_refusal: OnRefusal::Refuse,
                    log_every: 10,
                };
                let t = Instant::now();
                let out = dry_run(&recipe, &plan, card.clone(), Some(&autotune)).unwrap();
                let wall = t.elapsed().as_secs_f64();
                let mut ms: Vec<f64> = out.steps.iter().skip(2).map(|s| s.step_ms).collect();
                ms.sort_by(f64::total_cmp);
                let median = ms[ms.len() / 2];
                medians.push(median);
                println!(
                    "  {:<12} {:<8} {:<6}  step {median:6.1} ms  (min {:5.1}, max {:5.1})  replay {wall:5.2} s",
                    highwater::recipe::written_name(&activation),
                    highwater::recipe::written_name(&checkpointing),
                    highwater::recipe::written_name(&backend),
                    ms[0],
                    ms[ms.len() - 1],
                );
            }
        }
    }
    medians.sort_by(f64::total_cmp);
    println!(
        "median over configurations: {:.1} ms per step",
        medians[medians.len() / 2]
    );
}
