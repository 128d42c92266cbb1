//! Tests of conformance: records that are their own simulation, misses, known differences.

use super::*;
use crate::recipe::{Activation, Backend, Checkpointing};
use crate::run::simulate;
use crate::trace::Phase;

/// A record whose "measurements" are the simulator's own figures for `recipe_toml`.
fn simulated_record(recipe_toml: &str, cap: Option<u64>, steps: u64) -> RerunRecord {
    let total = 150_109_880_320;
    let free_at_start = total - (600 << 20);
    let ballast = cap.map_or(0, |c| total - c);
    let mut record = RerunRecord {
        provenance: Provenance {
            command: "highwater rerun …".into(),
            gpu: "test".into(),
            driver: "–".into(),
            cuda: "–".into(),
            gpu_memory: "–".into(),
            versions: Versions {
                situ: "0".into(),
                burn: "0.21.0".into(),
                cubecl: "0.10.0".into(),
                rustc: "–".into(),
                build: "–".into(),
            },
            git_revision: "–".into(),
            date: "–".into(),
        },
        recipe_path: "repro/recipes/situ.toml".into(),
        recipe_toml: recipe_toml.into(),
        activation: Activation::SituTensor,
        checkpointing: Checkpointing::None,
        backend: Backend::Cube,
        steps_asked: steps,
        seed: 1,
        device: DeviceMemory {
            total_bytes: total,
            free_at_start,
            cap_bytes: cap,
            ballast_bytes: ballast,
            pool_capacity: free_at_start - ballast,
        },
        steps: vec![],
        died: None,
        counters: String::new(),
    };
    let sim = simulate(&record.simulated_recipe().unwrap(), 1, steps);
    record.steps = (0..sim.reserved.len())
        .map(|i| MeasuredStep {
            step: i as u64 + 1,
            in_use_after_forward: sim.in_use_after_forward[i],
            in_use_after_backward: sim.in_use_after_backward[i],
            reserved: sim.reserved[i],
            step_ms: 1.0,
            loss: None,
            device_reserved: None,
        })
        .collect();
    record.died = sim.died_at.map(|step| MeasuredDeath {
        step,
        phase: Phase::Forward,
        message: "out of memory".into(),
        failed_pages: vec![],
    });
    record
}

const SITU: &str = include_str!("../../../../repro/recipes/situ.toml");

#[test]
fn a_run_that_is_its_own_simulation_conforms() {
    let r = simulated_record(SITU, None, 5);
    let c = conform(&r).unwrap();
    assert!(c.passes(), "{c:?}");
    assert_eq!(c.in_use_after_forward.unwrap().error, 0.0);
    assert_eq!(r.name(), "rerun-situ-situ-tensor-cube-none");
}

#[test]
fn an_error_past_the_tolerance_misses() {
    let mut r = simulated_record(SITU, None, 5);
    r.steps[3].in_use_after_forward = (r.steps[3].in_use_after_forward as f64 / 1.021) as u64;
    let c = conform(&r).unwrap();
    let worst = c.in_use_after_forward.unwrap();
    assert!(!worst.passes());
    assert_eq!(worst.step, 4, "the worst step is reported");
    assert!(!c.passes());
}

#[test]
fn a_known_difference_can_hold_only_below_a_core_count() {
    let text = "[[difference]]\nrun = \"a\"\nfigures = [\"reserved\"]\nreason = \"timing\"\n\
                below_cores = 4\n[[difference]]\nrun = \"b\"\nfigures = [\"reserved\"]\n\
                reason = \"always\"\n";
    let known = parse_known_dry("known.toml", text).unwrap();
    assert_eq!(known[0].below_cores, Some(4));
    assert!(known[0].applies_on(2) && known[0].applies_on(3));
    assert!(!known[0].applies_on(4) && !known[0].applies_on(16));
    assert!(known[1].applies_on(2) && known[1].applies_on(128));
    let typo = text.replace("below_cores", "below_core");
    assert!(
        parse_known_dry("known.toml", &typo)
            .unwrap_err()
            .contains("below_core")
    );
}

#[test]
fn exactness_names_every_differing_byte_and_the_fate() {
    let r = simulated_record(SITU, None, 3);
    assert!(exactness(&r, &[], &r.steps, None).passes());
    let mut off = r.steps.clone();
    off[1].reserved += 512;
    let e = exactness(&r, &[], &off, None);
    assert_eq!(e.differences.len(), 1);
    assert_eq!(
        (e.differences[0].step, e.differences[0].figure),
        (2, "reserved")
    );
    assert_eq!(e.differences[0].bytes(), 512);
    assert!(!e.passes());
    // A repeat on the GPU that took one page more at step 3: a spread of 1024 bytes.
    let mut repeat = r.clone();
    repeat.steps[2].reserved += 1024;
    let e = exactness(&r, std::slice::from_ref(&repeat), &off, None);
    assert_eq!((e.gpu_runs, e.gpu_spread), (2, 1024));
    assert!(e.passes(), "512 B off is within what the GPU varies by");
    off[0].in_use_after_forward += 1025;
    assert!(!exactness(&r, &[repeat], &off, None).passes());
    let death = MeasuredDeath {
        step: 3,
        phase: Phase::Backward,
        message: String::new(),
        failed_pages: vec![],
    };
    let e = exactness(&r, &[], &r.steps[..2], Some(&death));
    assert!(e.differences.is_empty());
    assert_eq!(
        (e.completed, e.predicted_death),
        ((3, 2), Some((3, Phase::Backward)))
    );
    assert!(!e.passes(), "a death the GPU did not have");
}

#[test]
fn a_different_fate_under_a_cap_misses() {
    // Under a 16 GiB card less 1.25 GiB of desktop the tensor path dies at once.
    let cap = (16u64 << 30) - (5 << 28);
    let r = simulated_record(SITU, Some(cap), 5);
    assert!(r.died.is_some(), "the simulated arm dies under the cap");
    assert!(conform(&r).unwrap().passes());
    let mut survived = r.clone();
    survived.died = None;
    assert!(!conform(&survived).unwrap().passes());
    assert!(r.name().ends_with("-cap14.75GiB"), "{}", r.name());
}
