#![cfg(feature = "dry")]
use dryrun::OnRefusal;
use situ::dry::*;
use std::sync::Arc;
use std::time::Instant;
#[test]
fn scratch() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let h200 = dryrun::CardProfile::read(&root.join("repro/cards/h200.json")).unwrap();
    let text = std::fs::read_to_string(root.join("repro/models/decoder.toml")).unwrap();
    let d = highwater::decoder::Decoder::parse("decoder.toml", &text).unwrap();
    for backend in [highwater::Backend::Fusion, highwater::Backend::Cube] {
        let mut d = d.clone();
        d.backend = backend;
        let plan = DryPlan {
            steps: 4,
            seed: 1,
            capacity: h200.free_at_start,
            on_refusal: OnRefusal::Refuse,
            log_every: 10,
        };
        let t = Instant::now();
        let o = dry_decoder(&d, &plan, Arc::new(h200.clone()), None).unwrap();
        eprintln!(
            "{backend:?} {:.1}s misses {} died {:?}",
            t.elapsed().as_secs_f64(),
            o.autotune_misses.len(),
            o.died
        );
        for (s, p) in o.steps.iter().zip(&o.peak_in_use) {
            eprintln!(
                "  step {} fwd {} bwd {} res {} peak {} ms {:.0}",
                s.step, s.in_use_after_forward, s.in_use_after_backward, s.reserved, p, s.step_ms
            );
        }
    }
    let card = Arc::new(h200.with_memory(16 << 30));
    let t = Instant::now();
    let search = largest_batch(4096, |b| {
        let plan = DryPlan {
            steps: 3,
            seed: 1,
            capacity: card.free_at_start,
            on_refusal: OnRefusal::Refuse,
            log_every: 10,
        };
        dry_decoder(&d.with_batch(b).unwrap(), &plan, card.clone(), None)
    })
    .unwrap();
    eprintln!(
        "search {:.1}s tried {:?} largest {:?} failing death {:?}",
        t.elapsed().as_secs_f64(),
        search.tried,
        search.largest.as_ref().map(|l| l.0),
        search
            .smallest_failing
            .as_ref()
            .map(|f| (f.0, f.1.died.clone()))
    );
}
