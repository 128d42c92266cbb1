//! Figures: raw pool events per second on one core, and the whole wave's wall time.
//! `cargo bench -p highwater` (harness-free; prints, asserts nothing).

use std::path::Path;
use std::time::Instant;

use highwater::pool::CardPool;
use highwater::{Recipe, simulate};

fn raw_pool_events_per_second() -> f64 {
    // A steady mix of the step's sizes on a 16 GiB card: 32 MiB, 64 MiB, 12 MiB, small.
    const MIB: u64 = 1 << 20;
    let sizes = [
        32 * MIB,
        12 * MIB,
        32 * MIB,
        64 * MIB,
        4096,
        32 * MIB,
        6 * MIB,
        512,
    ];
    let mut pool = CardPool::cuda(16 << 30, 15 << 30);
    let mut live = Vec::with_capacity(64);
    let rounds = 200_000;
    let t = Instant::now();
    let mut events = 0u64;
    for i in 0..rounds {
        live.push(pool.reserve(sizes[i % sizes.len()]).unwrap());
        events += 1;
        if live.len() > 40 {
            // Free out of order, as a backward pass does.
            live.swap_remove((i * 7) % live.len());
            events += 1;
        }
    }
    events as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    println!(
        "raw pool: {:.2} M reserve/free events per second (one core)",
        raw_pool_events_per_second() / 1e6
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/recipes");
    let recipes: Vec<Recipe> = ["small", "situ", "situ-fused"]
        .iter()
        .map(|n| {
            let p = dir.join(format!("{n}.toml"));
            Recipe::parse(n, &std::fs::read_to_string(&p).unwrap()).unwrap()
        })
        .collect();
    let t = Instant::now();
    let mut replayed = 0;
    for r in &recipes {
        for seed in 1..=3 {
            let t1 = Instant::now();
            let rep = simulate(r, seed, 2000);
            replayed += rep.replayed_steps;
            println!(
                "  {:<11} seed {seed}: died_at {:?}, {} of {} steps replayed, {:.0} ms",
                r.origin,
                rep.died_at,
                rep.replayed_steps,
                rep.peak_in_use.len(),
                t1.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    println!(
        "wave (small, situ, situ-fused × seeds 1..3 × 2000 steps): {:.2} s wall, {replayed} steps replayed",
        t.elapsed().as_secs_f64()
    );
}
