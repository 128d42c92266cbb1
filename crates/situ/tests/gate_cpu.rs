//! The gate on CPU (burn-ndarray, f64): the seed's three tests, plus the recipe and counter
//! wiring. Inputs are fresh each run (the seed is printed on failure), never zero.
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

use std::sync::Mutex;

use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};
use highwater::ffn::expert_ledger;
use highwater::recipe::{Activation, Checkpointing, Recipe};
use situ::reference::{self, SplitMix64, rel_err};
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

fn inputs(seed: u64, [n, f]: [usize; 2]) -> (Vec<f64>, Vec<f64>) {
    let mut rng = SplitMix64::new(seed);
    let c = f64::from(SOFT_CAP);
    (
        rng.vec(n * 2 * f, -3.0 * c, 3.0 * c),
        rng.vec(n * f, -1.0, 1.0),
    )
}

fn path<B: situ::SituBackend>(mid: Tensor<B, 2>, fused: bool) -> Tensor<B, 2> {
    if fused {
        situ_glu_fused(mid, SOFT_CAP)
    } else {
        situ_glu_tensor(mid, SOFT_CAP)
    }
}

/// `(h, d(mid))` for loss = Σ h·w.
fn run<C: CheckpointStrategy>(
    mid: &[f64],
    w: &[f64],
    [n, f]: [usize; 2],
    fused: bool,
) -> (Vec<f64>, Vec<f64>) {
    let x = t::<Ad<C>>(mid, [n, 2 * f]).require_grad();
    let h = path(x.clone(), fused);
    let grads = (h.clone() * t::<Ad<C>>(w, [n, f])).sum().backward();
    (host(h.inner()), host(x.grad(&grads).unwrap()))
}

#[test]
fn situ_grad_matches_finite_difference() {
    // It runs both paths, so it moves the counters other tests read.
    let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    let seed = SplitMix64::fresh_seed();
    for shape @ [n, f] in SHAPES {
        let (mid, w) = inputs(seed, shape);
        let loss = |x: &[f64], fused: bool| -> f64 {
            host(path(t::<Host>(x, [n, 2 * f]), fused))
                .iter()
                .zip(&w)
                .map(|(a, b)| a * b)
                .sum()
        };
        for fused in [false, true] {
            let (h, grad) = run::<NoCheckpointing>(&mid, &w, shape, fused);
            let (step, tol) = if fused { (1e-6, 1e-7) } else { (1e-3, 1e-4) };
            let eps: Vec<f64> = mid.iter().map(|x| step * x.abs().max(1.0)).collect();
            let fd: Vec<f64> = (0..mid.len())
                .map(|i| {
                    let (mut p, mut m) = (mid.clone(), mid.clone());
                    p[i] += eps[i];
                    m[i] -= eps[i];
                    (loss(&p, fused) - loss(&m, fused)) / (2.0 * eps[i])
                })
                .collect();
            // The tensor path's loss carries sigmoid's f32 rounding: its input g' (|g'| ≤ 8c/… ≤ 24
            // here) and its output are rounded to 2^-24, which moves h by up to ~(1 + |g'|/4)·2^-24
            // ≤ 7·2^-24 of |h|; two evaluations per quotient, over 2ε. We allow 2^-20·Σ|h·w|/ε
            // per component (a margin of 2). A relative bound alone flakes whenever the true
            // gradient is tiny (a saturated gate).
            let rounding = if fused {
                0.0
            } else {
                let scale: f64 = h.iter().zip(&w).map(|(a, b)| (a * b).abs()).sum();
                let per_component = |e: &f64| scale * 2f64.powi(-20) / e;
                eps.iter()
                    .map(|e| per_component(e).powi(2))
                    .sum::<f64>()
                    .sqrt()
            };
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
            let diff = norm(&mut grad.iter().zip(&fd).map(|(a, b)| a - b));
            let bound = tol * norm(&mut fd.iter().copied()) + rounding;
            assert!(
                diff <= bound,
                "seed {seed}, {shape:?}, fused={fused}: ‖Δ‖ = {diff:e} > {bound:e} (‖Δ‖/‖fd‖ = {:e})",
                rel_err(&grad, &fd)
            );
        }
    }
}

#[test]
fn situ_fused_matches_tensor() {
    let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    let seed = SplitMix64::fresh_seed();
    for shape @ [n, f] in SHAPES {
        let (mid, _) = inputs(seed, shape);
        let tensor = host(path(t::<Host>(&mid, [n, 2 * f]), false));
        let fused = host(path(t::<Host>(&mid, [n, 2 * f]), true));
        let reference = reference::forward(&mid, n, f, f64::from(SOFT_CAP));
        assert!(
            rel_err(&fused, &reference) < 1e-13,
            "seed {seed}, {shape:?}"
        );
        assert!(rel_err(&fused, &tensor) < 1e-6, "seed {seed}, {shape:?}");
        // And in f32, where the host fused path rounds once and the tensor path per op.
        let t32 = host(path(t::<NdArray<f32>>(&mid, [n, 2 * f]), false));
        let f32_ = host(path(t::<NdArray<f32>>(&mid, [n, 2 * f]), true));
        assert!(rel_err(&f32_, &t32) < 1e-5, "seed {seed}, {shape:?}");
    }
}

fn backward_pair<C: CheckpointStrategy>(seed: u64) {
    for shape @ [n, f] in SHAPES {
        let (mid, w) = inputs(seed, shape);
        let before = SituCounts::now();
        let (hf, df) = run::<C>(&mid, &w, shape, true);
        let fused = SituCounts::since(before);
        let before = SituCounts::now();
        let (ht, dt) = run::<C>(&mid, &w, shape, false);
        let tensor = SituCounts::since(before);
        let reference = reference::backward(&mid, &w, n, f, f64::from(SOFT_CAP));
        assert!(rel_err(&hf, &ht) < 1e-6, "seed {seed}, {shape:?}");
        assert!(
            rel_err(&df, &reference) < 1e-13,
            "seed {seed}, {shape:?}: d(mid) fused vs reference"
        );
        assert!(
            rel_err(&df, &dt) < 1e-6,
            "seed {seed}, {shape:?}: d(mid) fused vs tensor"
        );
        // The counters say which path ran, and that each got through its backward.
        assert_eq!(fused.to_string(), "situ=tensor:0/0/0,fused:1/1/1");
        assert_eq!(
            tensor.to_string(),
            format!("situ=tensor:1/{}/1,fused:0/0/0", TENSOR_PATH_OPS.len())
        );
    }
}

#[test]
fn fused_backward_matches_tensor_backward() {
    let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    let seed = SplitMix64::fresh_seed();
    backward_pair::<NoCheckpointing>(seed);
    backward_pair::<BalancedCheckpointing>(seed);
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

#[test]
fn expert_stack_follows_the_recipe_and_paths_agree() {
    let _g = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    type B = Ad<NoCheckpointing>;
    let seed = SplitMix64::fresh_seed();
    let recipe = small(&wave());
    assert_eq!(
        recipe.activation,
        Activation::SituTensor,
        "situ.toml is the tensor-path arm"
    );
    let tensor_stack = ExpertStack::<B>::from_recipe(&recipe, seed, SOFT_CAP, &Default::default());
    assert_eq!(tensor_stack.calls() as u64, recipe.calls());
    assert_eq!(
        tensor_stack.experts[0].w_gate_up.dims(),
        [8, 10],
        "gate_up is doubled to 2f"
    );
    let fused_stack = tensor_stack.with_activation(Activation::SituFused);
    let (n, d) = (recipe.tokens() as usize, recipe.d_model as usize);
    let mut rng = SplitMix64::new(seed);
    let (xv, rv) = (rng.vec(n * d, -1.0, 1.0), rng.vec(n * d, -1.0, 1.0));
    let grads_of = |stack: &ExpertStack<B>| {
        let x = t::<B>(&xv, [n, d]).require_grad();
        let y = stack.forward(x.clone());
        let g = (y.clone() * t::<B>(&rv, [n, d])).sum().backward();
        let mut all = vec![host(y.inner()), host(x.grad(&g).unwrap())];
        for e in &stack.experts {
            all.push(host(e.w_gate_up.grad(&g).unwrap()));
            all.push(host(e.w_down.grad(&g).unwrap()));
        }
        all
    };
    let before = SituCounts::now();
    let a = grads_of(&tensor_stack);
    let mid_counts = SituCounts::since(before);
    let b = grads_of(&fused_stack);
    let all_counts = SituCounts::since(before);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(rel_err(y, x) < 1e-6, "seed {seed}: tensor #{i} differs");
    }
    let calls = recipe.calls();
    assert_eq!(
        mid_counts.to_string(),
        format!("situ=tensor:{calls}/{}/{calls},fused:0/0/0", 11 * calls)
    );
    assert_eq!(
        all_counts.fused.to_string(),
        format!("{calls}/{calls}/{calls}")
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
