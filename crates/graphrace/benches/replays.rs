//! Figures: graph replays per second on one core (the incident's step at 60 sessions, with and
//! without collision detection doing work), and the wall time of the book's whole sweep.
//! `cargo bench -p graphrace` (harness-free; prints, asserts nothing).

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use graphrace::{Captured, Config, Draw, Replayer, Timing, Workload, sweep};

fn replays_per_second(config: &Config, sessions: u32) -> (f64, f64) {
    let captured = Captured::new(config, sessions).expect("the step captures");
    let replayer = Replayer::new(&captured.graph, Timing::default());
    let n = 200_000u32;
    let t = Instant::now();
    let mut collided = 0u32;
    for replay in 0..n {
        let r = replayer.replay(black_box(Draw {
            seed: 2,
            trial: replay / 200,
            replay: replay % 200,
        }));
        collided += u32::from(!r.collisions.is_empty());
    }
    let secs = t.elapsed().as_secs_f64();
    (f64::from(n) / secs, f64::from(collided) / f64::from(n))
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let load = |name: &str| {
        let path = root.join(format!("repro/graphrace/{name}.toml"));
        let text = std::fs::read_to_string(&path).expect("configuration file");
        Config::parse(&path.display().to_string(), &text).expect("valid configuration")
    };
    for name in ["incident", "overlap-off"] {
        let (per_second, collided) = replays_per_second(&load(name), 60);
        println!(
            "{name:>12}, 60 sessions: {:>9.0} replays/s on one core ({:.2} % of replays collided)",
            per_second,
            100.0 * collided
        );
    }
    let names = [
        "incident",
        "fp8",
        "eager",
        "logits-cached",
        "clone",
        "overlap-off",
        "record-stream",
    ];
    let t = Instant::now();
    let mut replays = 0;
    for name in names {
        let rates = sweep(
            &load(name),
            (6..=72).step_by(6),
            Timing::default(),
            Workload::default(),
        )
        .expect("the step captures");
        replays += rates.iter().map(|r| r.replays).sum::<u64>();
    }
    println!(
        "the book's sweep ({} configurations × 12 concurrencies × {} trials × {} replays): {:.2} s, {} replays",
        names.len(),
        Workload::default().trials,
        Workload::default().replays,
        t.elapsed().as_secs_f64(),
        replays
    );
}
