//! Figures: raw pool events per second on one core, the simulator's own events per second, and
//! the whole wave, single-threaded (per run and summed) and in parallel (wall).
//! `cargo bench -p highwater` (harness-free; prints, asserts nothing).
//!
//! `cargo bench -p highwater --bench wave -- small 1 2000` runs one recipe and seed only (for
//! `valgrind --tool=callgrind` on the bench binary).

use std::path::Path;
use std::time::Instant;

use highwater::pool::CardPool;
use highwater::run::simulate_many;
use highwater::trace::step_trace;
use highwater::{Recipe, ffn, simulate};

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

fn recipe(name: &str) -> Recipe {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/recipes");
    let p = dir.join(format!("{name}.toml"));
    Recipe::parse(name, &std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn main() {
    // `cargo bench` passes `--bench`; anything else is a single run: NAME SEED STEPS.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let [name, seed, steps] = &args[..] {
        let t = Instant::now();
        let rep = simulate(&recipe(name), seed.parse().unwrap(), steps.parse().unwrap());
        println!(
            "{name} seed {seed}: died_at {:?}, {} steps replayed, {:.0} ms",
            rep.died_at,
            rep.replayed_steps,
            t.elapsed().as_secs_f64() * 1e3
        );
        return;
    }
    println!(
        "raw pool: {:.2} M reserve/free events per second (one core)",
        raw_pool_events_per_second() / 1e6
    );
    let recipes: Vec<Recipe> = ["small", "situ", "situ-fused"]
        .iter()
        .map(|n| recipe(n))
        .collect();
    let t = Instant::now();
    let mut replayed = 0;
    for r in &recipes {
        let events = step_trace(r, &ffn::expert_ledger(r), 2).events.len() as f64;
        for seed in 1..=3 {
            let t1 = Instant::now();
            let rep = simulate(r, seed, 2000);
            let secs = t1.elapsed().as_secs_f64();
            replayed += rep.replayed_steps;
            println!(
                "  {:<11} seed {seed}: died_at {:?}, {} of {} steps replayed, {:.0} ms ({:.1} M trace events replayed per second)",
                r.origin,
                rep.died_at,
                rep.replayed_steps,
                rep.peak_in_use.len(),
                secs * 1e3,
                rep.replayed_steps as f64 * events / secs / 1e6
            );
        }
    }
    println!(
        "wave (small, situ, situ-fused × seeds 1..3 × 2000 steps), one thread: {:.2} s, {replayed} steps replayed",
        t.elapsed().as_secs_f64()
    );
    let jobs: Vec<(&Recipe, u64, u64)> = recipes
        .iter()
        .flat_map(|r| (1..=3).map(move |s| (r, s, 2000)))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = Instant::now();
    let reports = simulate_many(&jobs);
    println!(
        "wave, simulate_many on {threads} threads: {:.2} s wall ({} runs)",
        t.elapsed().as_secs_f64(),
        reports.len()
    );
}
