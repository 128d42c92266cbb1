//! Bytes reserved per step of a network trained dry on burn-fusion under schedules of one's
//! choosing (`dryrun::Schedule`), for exploring what moves pages beyond the band's own:
//!
//!     cargo run --release -p situ --features dry --example schedules -- \
//!         MODEL.toml CARD.json AUTOTUNE_DIR STEPS LOG_EVERY LAG:o|t ...
//!
//! `LAG:o`: burn-fusion's work LAG commands behind, the training thread's mode switches
//! overtaking it; `LAG:t`: the switches wait their turn. Prints one line per schedule.

use std::path::Path;
use std::sync::Arc;

use dryrun::{CardProfile, OnRefusal, Schedule, TieBreak};
use highwater::network::Network;
use situ::dry::{DryPlan, dry_network};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, card, autotune, steps, log_every, schedules @ ..] = &args[..] else {
        eprintln!("usage: schedules MODEL.toml CARD.json AUTOTUNE_DIR STEPS LOG_EVERY LAG:o|t ...");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(model).expect("the model file reads");
    let mut network = Network::parse(model, &text).expect("the model file parses");
    network.backend = highwater::recipe::Backend::Fusion;
    if let Ok(c) = std::env::var("CHECKPOINTING") {
        network.checkpointing = match c.as_str() {
            "balanced" => highwater::recipe::Checkpointing::Balanced,
            _ => highwater::recipe::Checkpointing::None,
        };
    }
    let card = Arc::new(CardProfile::read(Path::new(card)).expect("the card profile reads"));
    for spec in schedules {
        let (lag, how) = spec.split_once(':').expect("LAG:o or LAG:t");
        let schedule = Schedule {
            lag: lag.parse().expect("a lag"),
            modes_overtake: how == "o",
        };
        let plan = DryPlan {
            steps: steps.parse().expect("steps"),
            seed: 1,
            capacity: card.free_at_start,
            on_refusal: OnRefusal::Refuse,
            log_every: log_every.parse().expect("log every"),
            tie_break: TieBreak::First,
            schedule,
        };
        let out = dry_network(&network, &plan, card.clone(), Some(Path::new(autotune)))
            .expect("the dry run");
        let mib: Vec<String> = (out.steps.iter())
            .map(|s| format!("{:.2}", s.reserved as f64 / f64::from(1 << 20)))
            .collect();
        println!("{spec:>8}  {}", mib.join(" "));
    }
}
