//! The gate on CPU (burn-ndarray, f64): the seed's three tests ([`situ::gate`], the walk the
//! GPU gate takes), plus the recipe and counter wiring. Inputs are fresh each run (the seed is
//! printed on failure), never zero.
//!
//! Tolerances. The fused host path is the formula in f64 end to end, so it is held to 1e-13
//! against the reference and to 1e-7 against a central finite difference with step
//! ε = 1e-6·max(1, |x|) (truncation ~ε², rounding ~1e-16/ε). The tensor path is *not* f64
//! throughout even on `NdArray<f64>`: burn 0.21's default `sigmoid` and `sigmoid_backward`
//! (burn-backend `ops/activation.rs`) cast to f32 and back, whatever the backend's float type.
//! So the tensor path is compared with the fused path and the reference at 1e-6 (f32 rounding
//! of one factor), and with finite differences at step ε = 1e-3·max(1, |x|) to 1e-4 relative,
//! plus the absolute error that f32 rounding of the loss makes in a difference quotient
//! (bounded by 2^-20·Σ|h·w|/ε per component). A wrong term in either gradient is off by far more.

use std::sync::{Mutex, OnceLock};

use basics::SplitMix64;
use burn::backend::autodiff::checkpoint::strategy::{BalancedCheckpointing, NoCheckpointing};
use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};
use highwater::ffn::expert_ledger;
use highwater::recipe::{Activation, Checkpointing, Recipe};
use situ::gate::{self, Componentwise, FiniteDifference, GatePlan, Outcome};
use situ::reference::{fresh_seed, nonzero_uniforms, rel_err};
use situ::{ExpertStack, SOFT_CAP, SituCounts, TENSOR_PATH_OPS, situ_glu_fused, situ_glu_tensor};

type Host = NdArray<f64>;
type Ad<C> = Autodiff<Host, C>;

/// The counters are process-wide; every test that runs a path or reads them takes turns.
static COUNTERS: Mutex<()> = Mutex::new(());

const SHAPES: [[usize; 2]; 4] = [[1, 1], [3, 5], [7, 6], [16, 33]];

fn t<B: burn::tensor::backend::Backend>(v: &[f64], shape: [usize; 2]) -> Tensor<B, 2> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), &Default::default())
}

fn host<B: burn::tensor::backend::Backend>(x: Tensor<B, 2>) -> Vec<f64> {
    x.into_data().convert::<f64>().to_vec().unwrap()
}

/// The gate on the host, run once for the three tests that each read their part of it.
fn gate() -> &'static Outcome {
    static OUTCOME: OnceLock<Outcome> = OnceLock::new();
    OUTCOME.get_or_init(|| {
        let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
        let recipe = small(&wave());
        let plan = GatePlan {
            shapes: &SHAPES,
            forward: 1e-6,
            backward: 1e-6,
            fused_vs_reference: 1e-13,
            tensor_vs_reference: 1e-6,
            finite_difference: FiniteDifference::Componentwise {
                fused: Componentwise {
                    step: 1e-6,
                    threshold: 1e-7,
                    loss_rounding: 0.0,
                },
                // The tensor path's loss carries sigmoid's f32 rounding: its input g'
                // (|g'| ≤ 8c/… ≤ 24 here) and its output are rounded to 2^-24, which moves h by
                // up to ~(1 + |g'|/4)·2^-24 ≤ 7·2^-24 of |h|; two evaluations per quotient, over
                // 2ε. We allow 2^-20·Σ|h·w|/ε per component (a margin of 2).
                tensor: Componentwise {
                    step: 1e-3,
                    threshold: 1e-4,
                    loss_rounding: 2f64.powi(-20),
                },
            },
            expert_stack: 1e-6,
            recipe: &recipe,
        };
        gate::run::<Host>(&Default::default(), &plan, fresh_seed())
    })
}

/// Every check of gate test `name` passed (and there were some).
fn passes(name: &str) {
    let outcome = gate();
    let test = outcome.tests.iter().find(|t| t.name == name).unwrap();
    let failed: Vec<_> = test.checks.iter().filter(|c| !c.pass).collect();
    assert!(
        failed.is_empty(),
        "seed {}: {name} failed {failed:#?}",
        outcome.seed
    );
    assert!(!test.checks.is_empty(), "{name} checked nothing");
}

#[test]
fn situ_grad_matches_finite_difference() {
    passes(gate::FD);
}

#[test]
fn situ_fused_matches_tensor() {
    passes(gate::FWD);
    // And in f32, where the host fused path rounds once and the tensor path per op.
    let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    let seed = fresh_seed();
    let mut rng = SplitMix64::new(seed);
    for [n, f] in SHAPES {
        let mid = nonzero_uniforms(
            &mut rng,
            n * 2 * f,
            -3.0 * f64::from(SOFT_CAP),
            3.0 * f64::from(SOFT_CAP),
        );
        let x = || t::<NdArray<f32>>(&mid, [n, 2 * f]);
        let (tensor, fused) = (
            host(situ_glu_tensor(x(), SOFT_CAP)),
            host(situ_glu_fused(x(), SOFT_CAP)),
        );
        assert!(rel_err(&fused, &tensor) < 1e-5, "seed {seed}, {:?}", [n, f]);
    }
}

#[test]
fn fused_backward_matches_tensor_backward() {
    passes(gate::BWD);
}

fn small(recipe: &Recipe) -> Recipe {
    // The wave's structure (experts, loop, activation) at a size a debug CPU build runs fast.
    Recipe {
        batch: 2,
        seq_len: 3,
        d_model: 8,
        d_ffn: 5,
        ..recipe.clone()
    }
}

fn wave() -> Recipe {
    Recipe::parse(
        "situ.toml",
        include_str!("../../../repro/recipes/situ.toml"),
    )
    .unwrap()
}

/// The stack the gate compares is the recipe's: its calls, its doubled `gate_up`, its path.
#[test]
fn expert_stack_follows_the_recipe() {
    type B = Ad<NoCheckpointing>;
    let recipe = small(&wave());
    assert_eq!(
        recipe.activation,
        Activation::SituTensor,
        "situ.toml is the tensor-path arm"
    );
    let stack = ExpertStack::<B>::from_recipe(&recipe, 7, SOFT_CAP, &Default::default());
    assert_eq!(stack.calls() as u64, recipe.calls());
    assert_eq!(stack.activation, Activation::SituTensor);
    assert_eq!(
        stack.experts[0].w_gate_up.dims(),
        [8, 10],
        "gate_up is doubled to 2f"
    );
}

#[test]
fn the_tensor_path_is_the_ledgers_op_list() {
    let recipe = wave().with(Activation::SituTensor, Checkpointing::None);
    let ledger = expert_ledger(&recipe);
    let names: Vec<&str> = ledger.rows.iter().map(|r| r.name.as_str()).collect();
    let start = names
        .iter()
        .position(|n| *n == "gate = mid[:, :f]")
        .expect("the split is in the ledger");
    assert_eq!(
        &names[start..start + TENSOR_PATH_OPS.len()],
        TENSOR_PATH_OPS.as_slice()
    );
    assert_eq!(names[start + TENSOR_PATH_OPS.len()], "out = down(h)");
}

/// The rerun's training step on burn-ndarray: burn's Adam moves every parameter, the rest of
/// the model's parameters by the learning rate per step (a constant gradient normalises to
/// one), and every expert call of every step runs its recipe's path, forward and backward.
#[test]
fn the_training_step_trains_every_parameter_with_burns_adam() {
    use situ::train::{LEARNING_RATE, NoPool, Trainer, WaveStep};
    let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    let mut recipe = small(&wave());
    // A rest of the model: 7 activations of 2×8 elements over 4 iterations, 3 parameters.
    recipe.rest.tensor_bytes = 16 * 8;
    recipe.rest.live_bytes = 7 * 16 * 8;
    recipe.rest.params = 3;
    recipe.rest.persistent_bytes = 64;
    for (activation, path) in [
        (Activation::Silu, None),
        (Activation::SituTensor, Some("tensor")),
        (Activation::SituFused, Some("fused")),
    ] {
        for balanced in [false, true] {
            let r = recipe.with(activation, Checkpointing::None);
            let before = SituCounts::now();
            let (first, after, rest) = if balanced {
                train::<Ad<BalancedCheckpointing>>(&r)
            } else {
                train::<Ad<NoCheckpointing>>(&r)
            };
            for (i, (a, b)) in first.iter().zip(&after).enumerate() {
                assert!(
                    a.iter().zip(b).any(|(x, y)| x != y),
                    "{activation:?}: weight {i} never moved"
                );
            }
            for p in rest {
                assert!(
                    (p + 3.0 * LEARNING_RATE).abs() < 1e-6,
                    "{activation:?}: rest param {p}"
                );
            }
            let counts = SituCounts::since(before);
            let calls = 3 * recipe.calls();
            let expected = match path {
                None => "situ=tensor:0/0/0,fused:0/0/0".to_string(),
                Some("tensor") => format!("situ=tensor:{calls}/{}/{calls},fused:0/0/0", 11 * calls),
                Some(_) => format!("situ=tensor:0/0/0,fused:{calls}/{calls}/{calls}"),
            };
            assert_eq!(
                counts.to_string(),
                expected,
                "{activation:?} balanced={balanced}"
            );
        }
    }

    /// Three steps; the expert weights before and after, and the rest's parameters after.
    fn train<B: situ::train::TrainBackend<FloatElem = f64>>(
        r: &Recipe,
    ) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<f64>) {
        let device = Default::default();
        let weights = |t: &Trainer<B, WaveStep<B>>| -> Vec<Vec<f64>> {
            t.program()
                .model()
                .stack
                .experts
                .iter()
                .flat_map(|e| {
                    [
                        host(e.w_gate_up.clone().inner()),
                        host(e.w_down.clone().inner()),
                    ]
                })
                .collect()
        };
        let mut trainer = Trainer::new(WaveStep::<B>::new(r, 7, SOFT_CAP, &device));
        let first = weights(&trainer);
        for _ in 0..3 {
            let m = trainer
                .step(&NoPool, true)
                .expect("a CPU step cannot run out of memory");
            assert!(m.loss.is_some_and(f64::is_finite));
        }
        let rest = trainer
            .program()
            .model()
            .rest_params
            .clone()
            .unwrap()
            .inner();
        let rest = rest.into_data().convert::<f64>().to_vec::<f64>().unwrap();
        (first, weights(&trainer), rest)
    }
}
