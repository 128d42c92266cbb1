//! Figures: one dry training step of the wave's expert stack (burn's own code over the dry
//! CubeCL runtime, the H200's card profile and autotune cache), median over steps 3..=50, per
//! configuration, and a whole 50-step replay including the device's start; then the decoder
//! (repro/models/decoder.toml): its dry step on both backends, and the search for its largest
//! batch on a 16 GiB card, 5 steps per run; then "will it fit?" for the ViT
//! (repro/models/vit.toml) from the atlas less its own problems: `highwater fit`'s work, the
//! band's four runs included.
//! `cargo bench -p situ --features dry` (harness-free; prints, asserts nothing).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use dryrun::{CardProfile, OnRefusal};
use highwater::Recipe;
use highwater::recipe::{Activation, Backend, Checkpointing};
use situ::dry::{DryPlan, dry_network, dry_run, largest_batch};

fn main() {
    // Runs that die (the batch search's) panic on the device's threads (cubecl's `DSD-*`,
    // burn-fusion's `DSU-*`), as on a GPU: expected, and not worth a screenful each.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let name = std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string();
        if !(name.starts_with("DSD-") || name.starts_with("DSU-")) {
            default(info);
        }
    }));
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
                    tie_break: dryrun::TieBreak::First,
                    schedule: dryrun::Schedule::default(),
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

    decoder(&root, &card, &autotune);
    vit_band(&root, &card);
}

/// `highwater fit repro/models/vit.toml` (5 steps) without the ViT's own problems in the atlas:
/// every kernel choice of the model decided by the miss policy and banded, and its first run.
fn vit_band(root: &Path, h200: &Arc<CardProfile>) {
    let text = std::fs::read_to_string(root.join("repro/models/vit.toml")).unwrap();
    let vit = highwater::network::Network::parse("vit.toml", &text).unwrap();
    let atlas = dryrun::Atlas::read(&root.join("repro/cards/h200-atlas")).unwrap();
    let own = dryrun::Atlas::read(&root.join("repro/results/models/autotune/vit-f32")).unwrap();
    let atlas = atlas.without(&own);
    let plan = DryPlan {
        steps: 5,
        seed: 1,
        capacity: h200.free_at_start,
        on_refusal: OnRefusal::Refuse,
        log_every: 5,
        tie_break: dryrun::TieBreak::First,
        schedule: dryrun::Schedule::default(),
    };
    let t = Instant::now();
    let schedules = situ::band::schedules(vit.backend);
    let band = situ::band::dry_band(&plan, &atlas, schedules, |p, dir| {
        dry_network(&vit, p, h200.clone(), dir)
    })
    .unwrap();
    // What `fit` runs besides: the first run, from an empty cache, at both extremes.
    let cold = situ::band::cold_band(&plan, schedules, |p, dir| {
        dry_network(&vit, p, h200.clone(), dir)
    })
    .unwrap();
    let last = band.reserved().last().copied().unwrap();
    let first = cold.reserved().first().copied().unwrap();
    println!(
        "the ViT from the atlas less its own problems: {} decided by the miss policy, band \
         {:?} … {:?} around {} bytes reserved; its first run {:?} … {:?}; in {:.1} s (six dry \
         runs of 5 steps)",
        band.decided.len(),
        last.0,
        last.2,
        last.1,
        first.0,
        first.1,
        t.elapsed().as_secs_f64()
    );
}

fn decoder(root: &Path, h200: &Arc<CardProfile>, autotune: &Path) {
    let text = std::fs::read_to_string(root.join("repro/models/decoder.toml")).unwrap();
    let base = highwater::network::Network::parse("decoder.toml", &text).unwrap();
    println!(
        "the decoder (batch {}): one dry step (median of steps 3..=20), and the largest-batch search on 16 GiB",
        base.batch
    );
    let sixteen = Arc::new(h200.with_memory(16 << 30));
    for backend in [Backend::Cube, Backend::Fusion] {
        let d = highwater::network::Network {
            backend,
            ..base.clone()
        };
        let plan = DryPlan {
            steps: 20,
            seed: 1,
            capacity: h200.free_at_start,
            on_refusal: OnRefusal::Refuse,
            log_every: 5,
            tie_break: dryrun::TieBreak::First,
            schedule: dryrun::Schedule::default(),
        };
        let out = dry_network(&d, &plan, h200.clone(), Some(autotune)).unwrap();
        let mut ms: Vec<f64> = out.steps.iter().skip(2).map(|s| s.step_ms).collect();
        ms.sort_by(f64::total_cmp);
        let plan = DryPlan {
            steps: 5,
            capacity: sixteen.free_at_start,
            ..plan
        };
        let t = Instant::now();
        let search = largest_batch(1 << 20, |b| {
            dry_network(
                &d.with_batch(b).unwrap(),
                &plan,
                sixteen.clone(),
                Some(autotune),
            )
        })
        .unwrap();
        println!(
            "  {:<6}  step {:6.1} ms  |  largest batch {} in {:.1} s ({} runs)",
            highwater::recipe::written_name(&backend),
            ms[ms.len() / 2],
            search.largest.map_or(0, |(b, _)| b),
            t.elapsed().as_secs_f64(),
            search.tried.len()
        );
    }
}
