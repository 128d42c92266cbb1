//! The GPU gate: the seed's three tests ([`situ::gate`]), run on CUDA, written to one JSON file.
//!
//! `situ-gate --out gate.json`. Exit status 0 only when every check passes. Each check records
//! its shape, vector width, checkpoint strategy, metric, value and threshold; the file begins
//! with the command that produced it, then the GPU, driver, versions, revision and date.

use highwater::recipe::Recipe;
use situ::SOFT_CAP;
use situ::gate::{self, FiniteDifference, GatePlan};
use situ::gpu::{Cube, CudaDevice};
use situ::provenance;
use situ::reference::fresh_seed;
use situ::results::{Gate, Thresholds};

/// `[N, f]`: the wave's own shape (f = 2048, vector 4), then shapes whose `f` is 2 mod 4
/// (vector 2) and odd (vector 1), a pitched-looking tall one and a tiny one.
const SHAPES: [[usize; 2]; 6] = [
    [4096, 2048],
    [1024, 1026],
    [1000, 1027],
    [4099, 516],
    [37, 5],
    [3, 1],
];

/// Fused vs tensor path, forward, ‖Δ‖/‖ref‖ (both f32 on the same device).
const T_FWD: f64 = 1e-5;
/// Fused vs tensor path, d(mid).
const T_BWD: f64 = 1e-5;
/// Either path vs the f64 host reference (f32 rounding of tanh/exp/products).
const T_REF: f64 = 1e-5;
/// Directional finite difference in f32 inputs, loss summed in f64 on the host, ε = 1e-2:
/// f32 rounding of h bounds the agreement at ~3e-6/ε.
const T_FD: f64 = 1e-2;
const FD_EPS: f64 = 1e-2;
/// The wave's expert stack (12 calls, 24 matmuls chained): every gradient, fused vs tensor.
const T_STACK: f64 = 1e-3;

fn main() {
    let out = situ::gpu::out_arg("gate.json");
    let provenance = provenance::collect("cargo build --release --locked -p situ --features cuda");
    let seed = fresh_seed();
    println!(
        "situ gate: seed {seed}, cap {SOFT_CAP}, {} on driver {}",
        provenance.gpu, provenance.driver
    );
    let recipe = Recipe::parse(
        "situ.toml",
        include_str!("../../../../repro/recipes/situ.toml"),
    )
    .expect("the wave recipe parses");
    let plan = GatePlan {
        shapes: &SHAPES,
        forward: T_FWD,
        backward: T_BWD,
        fused_vs_reference: T_REF,
        tensor_vs_reference: T_REF,
        finite_difference: FiniteDifference::Directional {
            eps: FD_EPS,
            threshold: T_FD,
        },
        expert_stack: T_STACK,
        recipe: &recipe,
    };
    let outcome = gate::run::<Cube>(&CudaDevice::default(), &plan, seed);

    let gate = Gate {
        provenance,
        seed,
        soft_cap: SOFT_CAP,
        thresholds: Thresholds {
            fused_vs_tensor_forward: T_FWD,
            fused_vs_tensor_backward: T_BWD,
            vs_f64_reference: T_REF,
            finite_difference: T_FD,
            finite_difference_eps: FD_EPS,
            expert_stack: T_STACK,
        },
        pass: outcome.pass,
        tests: outcome.tests,
        counters_after: situ::situ_field(),
    };
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&gate).expect("serializable") + "\n",
    )
    .expect("write the gate's JSON");
    println!(
        "{} -> {out}",
        if gate.pass {
            "GATE PASSED"
        } else {
            "GATE FAILED"
        }
    );
    println!("{}", situ::situ_field());
    std::process::exit(if gate.pass { 0 } else { 1 });
}
