//! The gate: the seed's three tests of the fused path, one walk for every backend.
//!
//! `situ-gate` runs it on CUDA in `f32` (feature `cuda`) and records it; `tests/gate_cpu.rs`
//! runs it on burn-ndarray in `f64` on every machine. Per shape, with fresh inputs never near
//! zero: the kernels alone into outputs filled with NaN, where the backend has kernels of its
//! own; both paths through autodiff under both checkpoint strategies, compared with each other
//! and with the `f64` host formula ([`crate::reference`]), and the path counters of each run; a
//! finite difference of each path's gradient. Then the expert stack of a recipe: every
//! gradient, fused vs tensor. What differs between backends is the [`GatePlan`]: the shapes, the
//! thresholds and how the finite difference is taken.
//!
//! Before each run the pool's free slices of the output sizes are filled with NaN too, so an
//! element a kernel never wrote shows as NaN ([`Check::unwritten`]) instead of hiding behind
//! an old value.

use basics::SplitMix64;
use burn::backend::NdArray;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData};
use highwater::recipe::{Activation, Recipe};
use serde::{Deserialize, Serialize};

use crate::counters::{PathCounts, SituCounts};
use crate::fused::{SituBackend, to_f64};
use crate::reference::{self, nonzero_uniforms, rel_err};
use crate::{ExpertStack, SOFT_CAP, TENSOR_PATH_OPS, situ_glu_fused, situ_glu_tensor};

/// The fused forward against the tensor path and the host formula.
pub const FWD: &str = "situ_fused_matches_tensor";
/// The fused backward against the tensor path's gradient and the host formula.
pub const BWD: &str = "fused_backward_matches_tensor_backward";
/// Each path's gradient against a central difference of its loss.
pub const FD: &str = "situ_grad_matches_finite_difference";

/// The shapes, thresholds and finite difference a backend is held to. Every comparison is
/// `‖Δ‖/‖reference‖` against its threshold.
#[derive(Debug, Clone)]
pub struct GatePlan<'a> {
    /// `[N, f]` of each case: `mid` is `[N, 2f]`.
    pub shapes: &'a [[usize; 2]],
    /// Fused vs tensor path, forward.
    pub forward: f64,
    /// Fused vs tensor path, `d(mid)`.
    pub backward: f64,
    /// The fused path vs the `f64` host formula, forward and `d(mid)`.
    pub fused_vs_reference: f64,
    /// The tensor path vs the `f64` host formula, forward and `d(mid)`.
    pub tensor_vs_reference: f64,
    /// How each path's gradient is checked against its loss.
    pub finite_difference: FiniteDifference,
    /// Every gradient of the expert stack, fused vs tensor (matrix products amplify the
    /// activation's last-bit differences, so it is looser than one call's).
    pub expert_stack: f64,
    /// Whose expert stack (its structure and sizes) is compared.
    pub recipe: &'a Recipe,
}

/// How a gradient is held to a central difference of the loss `Σ h·w`.
#[derive(Debug, Clone, Copy)]
pub enum FiniteDifference {
    /// Along one random ±1 direction `v`: `|fd − ∇·v| / |∇·v|`, step `eps`. Two loss
    /// evaluations per path: what the wave's shapes afford.
    Directional {
        /// The step along `v`.
        eps: f64,
        /// The largest relative error that passes.
        threshold: f64,
    },
    /// Every component, each path with its own step and tolerance.
    Componentwise {
        /// The fused path's.
        fused: Componentwise,
        /// The tensor path's.
        tensor: Componentwise,
    },
}

/// A componentwise finite difference: `‖∇ − fd‖ ≤ threshold·‖fd‖ + rounding`, with
/// `rounding² = Σᵢ (loss_rounding·Σ|h·w| / εᵢ)²`, the error the loss's own rounding puts in
/// each difference quotient. A relative bound alone flakes where the true gradient is tiny
/// (a saturated gate).
#[derive(Debug, Clone, Copy)]
pub struct Componentwise {
    /// Component `i` steps by `εᵢ = step·max(1, |xᵢ|)`.
    pub step: f64,
    /// The relative part of the bound.
    pub threshold: f64,
    /// The relative rounding of the loss's terms (0 when the loss is exact).
    pub loss_rounding: f64,
}

/// One comparison, as recorded (in `situ-gate`'s file, [`crate::results::Gate`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// What was compared with what.
    pub what: String,
    /// `[N, f]`.
    pub shape: [usize; 2],
    /// `none`, `balanced`, or `-` for a kernel run alone.
    pub checkpointing: String,
    /// The kernel's vector width, for a kernel run alone (null otherwise, never absent).
    #[serde(deserialize_with = "Option::deserialize")]
    pub vector: Option<usize>,
    /// Cubes launched, for a kernel run alone (null otherwise, never absent).
    #[serde(deserialize_with = "Option::deserialize")]
    pub cubes: Option<u64>,
    /// The error measured.
    pub value: f64,
    /// The largest error that passes.
    pub threshold: f64,
    /// Values left NaN: elements nobody wrote. Any fails the check.
    pub unwritten: usize,
    /// A finite value within the threshold, every element written.
    pub pass: bool,
}

/// One of the three tests and its checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestResult {
    /// [`FWD`], [`BWD`] or [`FD`].
    pub name: String,
    /// Every check passed.
    pub pass: bool,
    /// In the order they ran.
    pub checks: Vec<Check>,
}

/// The gate's verdict.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What the inputs were drawn from: a failure replays with `SITU_SEED`.
    pub seed: u64,
    /// Every test passed.
    pub pass: bool,
    /// [`FWD`], [`BWD`], [`FD`], in that order.
    pub tests: Vec<TestResult>,
}

/// What the gate records of a kernel's launch.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    /// Elements per vector load/store.
    pub vector: usize,
    /// Cubes launched.
    pub cubes: u64,
}

/// A backend the gate runs on: the fused op, and its kernels alone where it has its own.
pub trait GateBackend: SituBackend {
    /// The forward kernel alone, `mid [N, 2f]` into the gate's NaN-filled `out [N, f]`; `None`
    /// where the fused path is the host formula itself (burn-ndarray), which the autodiff runs
    /// already hold to the formula.
    fn forward_into(
        _mid: FloatTensor<Self>,
        _out: &FloatTensor<Self>,
        _cap: f32,
    ) -> Option<Launch> {
        None
    }

    /// The backward kernel alone, `(mid, dh)` into the gate's NaN-filled `dmid [N, 2f]`.
    fn backward_into(
        _mid: FloatTensor<Self>,
        _dh: FloatTensor<Self>,
        _dmid: &FloatTensor<Self>,
        _cap: f32,
    ) -> Option<Launch> {
        None
    }
}

impl GateBackend for NdArray<f32> {}
impl GateBackend for NdArray<f64> {}

#[cfg(feature = "cube")]
impl<R, F, I, BT> GateBackend for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::BoolElement,
{
    fn forward_into(mid: FloatTensor<Self>, out: &FloatTensor<Self>, cap: f32) -> Option<Launch> {
        Some(crate::cube::forward_into::<R, F>(mid, out, cap).into())
    }

    fn backward_into(
        mid: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        dmid: &FloatTensor<Self>,
        cap: f32,
    ) -> Option<Launch> {
        Some(crate::cube::backward_into::<R, F>(mid, dh, dmid, cap).into())
    }
}

#[cfg(feature = "cube")]
impl From<crate::cube::LaunchInfo> for Launch {
    fn from(l: crate::cube::LaunchInfo) -> Launch {
        Launch {
            vector: l.vector,
            cubes: l.cubes,
        }
    }
}

/// Runs the gate on backend `B` (autodiff wraps it), inputs drawn from `seed`. Prints each
/// check as it is made: on a GPU the walk takes minutes.
pub fn run<B: GateBackend>(device: &B::Device, plan: &GatePlan<'_>, seed: u64) -> Outcome {
    let mut checks = Checks(vec![]);
    let c = f64::from(SOFT_CAP);
    for (k, &[n, f]) in plan.shapes.iter().enumerate() {
        // One stream per shape, drawn as the recorded gate drew it: `SITU_SEED` replays its inputs.
        let mut rng = SplitMix64::new(seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9));
        let mid = nonzero_uniforms(&mut rng, n * 2 * f, -3.0 * c, 3.0 * c);
        let w = nonzero_uniforms(&mut rng, n * f, -1.0, 1.0);
        // The reference sees the inputs as the device holds them (rounded to f32 on a GPU).
        let mid_dev = to_f64(tensor::<B>(&mid, [n, 2 * f], device));
        let w_dev = to_f64(tensor::<B>(&w, [n, f], device));
        let h_ref = reference::forward(&mid_dev, n, f, c);
        let d_ref = reference::backward(&mid_dev, &w_dev, n, f, c);
        let case = Case {
            shape: [n, f],
            mid: &mid,
            w: &w,
            h_ref: &h_ref,
            d_ref: &d_ref,
        };

        kernels_alone::<B>(&mut checks, device, plan, &case);
        autodiff_pair::<B, NoCheckpointing>(&mut checks, device, plan, &case);
        autodiff_pair::<B, BalancedCheckpointing>(&mut checks, device, plan, &case);
        finite_difference::<B>(&mut checks, device, plan, &case, &w_dev, &mut rng);
    }
    expert_stack::<B>(&mut checks, device, plan, seed);

    let mut tests: Vec<TestResult> = [FWD, BWD, FD]
        .into_iter()
        .map(|name| TestResult {
            name: name.to_string(),
            pass: true,
            checks: vec![],
        })
        .collect();
    for (name, check) in checks.0 {
        let t = tests
            .iter_mut()
            .find(|t| t.name == name)
            .expect("known test");
        t.pass &= check.pass;
        t.checks.push(check);
    }
    Outcome {
        seed,
        pass: tests.iter().all(|t| t.pass),
        tests,
    }
}

/// A checkpoint strategy's name, for the records.
pub fn strategy_name<C: CheckpointStrategy>() -> &'static str {
    let name = std::any::type_name::<C>();
    if name.ends_with("BalancedCheckpointing") {
        "balanced"
    } else {
        "none"
    }
}

/// One shape's inputs and the host formula's answers.
struct Case<'a> {
    shape: [usize; 2],
    mid: &'a [f64],
    w: &'a [f64],
    h_ref: &'a [f64],
    d_ref: &'a [f64],
}

struct Checks(Vec<(&'static str, Check)>);

impl Checks {
    #[expect(
        clippy::too_many_arguments,
        reason = "one gate check's row: each argument is a column it prints and judges"
    )]
    fn push(
        &mut self,
        test: &'static str,
        what: String,
        shape: [usize; 2],
        ckpt: &'static str,
        launch: Option<Launch>,
        value: f64,
        threshold: f64,
        unwritten: usize,
    ) {
        let pass = value.is_finite() && value <= threshold && unwritten == 0;
        println!(
            "{test:40} {what:48} {shape:?} {ckpt:8} {value:.3e} <= {threshold:.0e} unwritten {unwritten} {}",
            if pass { "ok" } else { "FAIL" }
        );
        self.0.push((
            test,
            Check {
                what,
                shape,
                checkpointing: ckpt.to_string(),
                vector: launch.map(|l| l.vector),
                cubes: launch.map(|l| l.cubes),
                value,
                threshold,
                unwritten,
                pass,
            },
        ));
    }
}

/// The kernels alone (the fused path without autodiff), into outputs filled with NaN.
fn kernels_alone<B: GateBackend>(
    checks: &mut Checks,
    device: &B::Device,
    plan: &GatePlan<'_>,
    case: &Case<'_>,
) {
    let [n, f] = case.shape;
    let mid = tensor::<B>(case.mid, [n, 2 * f], device);
    let out = Tensor::<B, 2>::full([n, f], f32::NAN, device);
    if let Some(launch) = B::forward_into(primitive(&mid), &primitive(&out), SOFT_CAP) {
        let h = to_f64(out);
        checks.push(
            FWD,
            "forward kernel vs f64 reference (NaN-poisoned out)".into(),
            case.shape,
            "-",
            Some(launch),
            rel_err(&h, case.h_ref),
            plan.fused_vs_reference,
            unwritten(&h),
        );
    }
    let dh = tensor::<B>(case.w, [n, f], device);
    let dmid = Tensor::<B, 2>::full([n, 2 * f], f32::NAN, device);
    if let Some(launch) =
        B::backward_into(primitive(&mid), primitive(&dh), &primitive(&dmid), SOFT_CAP)
    {
        let d = to_f64(dmid);
        checks.push(
            BWD,
            "backward kernel vs f64 reference (NaN-poisoned d(mid))".into(),
            case.shape,
            "-",
            Some(launch),
            rel_err(&d, case.d_ref),
            plan.fused_vs_reference,
            unwritten(&d),
        );
    }
}

/// One forward and backward through autodiff under `C`: `(h, d(mid))` on the host, for the
/// loss `Σ h·w`.
fn ad_grad<B: GateBackend, C: CheckpointStrategy>(
    device: &B::Device,
    [n, f]: [usize; 2],
    mid: &[f64],
    w: &[f64],
    fused: bool,
) -> (Vec<f64>, Vec<f64>) {
    poison::<B>(&[[n, f], [n, 2 * f]], device);
    let x = tensor::<Autodiff<B, C>>(mid, [n, 2 * f], device).require_grad();
    let wt = tensor::<Autodiff<B, C>>(w, [n, f], device);
    let h = path(x.clone(), fused);
    let grads = (h.clone() * wt).sum().backward();
    let d = x.grad(&grads).expect("mid is tracked");
    let out = (to_f64(h.inner()), to_f64(d));
    sync::<B>(device);
    out
}

/// SiTU-GLU of `mid` by the fused kernel or the tensor path.
pub fn path<B: SituBackend>(mid: Tensor<B, 2>, fused: bool) -> Tensor<B, 2> {
    if fused {
        situ_glu_fused(mid, SOFT_CAP)
    } else {
        situ_glu_tensor(mid, SOFT_CAP)
    }
}

/// Both paths through autodiff under `C`: with each other, with the host formula, and the
/// counters of each run.
fn autodiff_pair<B: GateBackend, C: CheckpointStrategy>(
    checks: &mut Checks,
    device: &B::Device,
    plan: &GatePlan<'_>,
    case: &Case<'_>,
) {
    let ck = strategy_name::<C>();
    let shape = case.shape;
    let before = SituCounts::now();
    let (hf, df) = ad_grad::<B, C>(device, shape, case.mid, case.w, true);
    let fused = SituCounts::since(before);
    let before = SituCounts::now();
    let (ht, dt) = ad_grad::<B, C>(device, shape, case.mid, case.w, false);
    let tensor = SituCounts::since(before);
    let compared: [(_, _, &[f64], &[f64], _); 6] = [
        (
            FWD,
            "autodiff forward: fused vs tensor path",
            &hf,
            &ht,
            plan.forward,
        ),
        (
            FWD,
            "autodiff forward: fused path vs f64 reference",
            &hf,
            case.h_ref,
            plan.fused_vs_reference,
        ),
        (
            FWD,
            "autodiff forward: tensor path vs f64 reference",
            &ht,
            case.h_ref,
            plan.tensor_vs_reference,
        ),
        (BWD, "d(mid): fused vs tensor path", &df, &dt, plan.backward),
        (
            BWD,
            "d(mid): fused path vs f64 reference",
            &df,
            case.d_ref,
            plan.fused_vs_reference,
        ),
        (
            BWD,
            "d(mid): tensor path vs f64 reference",
            &dt,
            case.d_ref,
            plan.tensor_vs_reference,
        ),
    ];
    for (test, what, a, b, threshold) in compared {
        checks.push(
            test,
            what.into(),
            shape,
            ck,
            None,
            rel_err(a, b),
            threshold,
            unwritten(a),
        );
    }
    // The counters must say which path ran, how far it got, and that the other did not run.
    let ok = fused == one_call(1, 0) && tensor == one_call(0, 1);
    checks.push(
        BWD,
        format!("path counters: fused run {fused}, tensor run {tensor}"),
        shape,
        ck,
        None,
        if ok { 0.0 } else { 1.0 },
        0.0,
        0,
    );
}

/// The counts of `fused` fused calls and `tensor` tensor-path calls, each through backward.
fn one_call(fused: u64, tensor: u64) -> SituCounts {
    let ops = TENSOR_PATH_OPS.len() as u64;
    SituCounts {
        tensor: PathCounts {
            entry: tensor,
            fwd: ops * tensor,
            bwd: tensor,
        },
        fused: PathCounts {
            entry: fused,
            fwd: fused,
            bwd: fused,
        },
    }
}

/// Each path's gradient (autodiff, no checkpointing) against a central difference of its loss
/// `Σ h·w`, evaluated without autodiff.
fn finite_difference<B: GateBackend>(
    checks: &mut Checks,
    device: &B::Device,
    plan: &GatePlan<'_>,
    case: &Case<'_>,
    w: &[f64],
    rng: &mut SplitMix64,
) {
    let [n, f] = case.shape;
    let loss = |x: &[f64], fused: bool| -> f64 {
        let h = to_f64(path(tensor::<B>(x, [n, 2 * f], device), fused));
        h.iter().zip(w).map(|(a, b)| a * b).sum()
    };
    match plan.finite_difference {
        FiniteDifference::Directional { eps, threshold } => {
            let v: Vec<f64> = (0..case.mid.len())
                .map(|_| if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 })
                .collect();
            let plus: Vec<f64> = case.mid.iter().zip(&v).map(|(x, d)| x + eps * d).collect();
            let minus: Vec<f64> = case.mid.iter().zip(&v).map(|(x, d)| x - eps * d).collect();
            for fused in [true, false] {
                let fd = (loss(&plus, fused) - loss(&minus, fused)) / (2.0 * eps);
                let grad =
                    ad_grad::<B, NoCheckpointing>(device, case.shape, case.mid, case.w, fused).1;
                let an: f64 = grad.iter().zip(&v).map(|(g, d)| g * d).sum();
                let what = format!(
                    "{} path: d(loss)/dv, autodiff vs central difference",
                    path_name(fused)
                );
                checks.push(
                    FD,
                    what,
                    case.shape,
                    "none",
                    None,
                    (fd - an).abs() / an.abs(),
                    threshold,
                    unwritten(&grad),
                );
            }
        }
        FiniteDifference::Componentwise {
            fused: fc,
            tensor: tc,
        } => {
            for (fused, c) in [(true, fc), (false, tc)] {
                let (h, grad) =
                    ad_grad::<B, NoCheckpointing>(device, case.shape, case.mid, case.w, fused);
                let eps: Vec<f64> = case.mid.iter().map(|x| c.step * x.abs().max(1.0)).collect();
                let fd: Vec<f64> = (0..case.mid.len())
                    .map(|i| {
                        let (mut p, mut m) = (case.mid.to_vec(), case.mid.to_vec());
                        p[i] += eps[i];
                        m[i] -= eps[i];
                        (loss(&p, fused) - loss(&m, fused)) / (2.0 * eps[i])
                    })
                    .collect();
                let scale: f64 = h.iter().zip(w).map(|(a, b)| (a * b).abs()).sum();
                let rounding = eps
                    .iter()
                    .map(|e| (c.loss_rounding * scale / e).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
                let fd_norm = norm(&mut fd.iter().copied());
                let what = format!(
                    "{} path: d(loss)/d(mid), autodiff vs central differences",
                    path_name(fused)
                );
                checks.push(
                    FD,
                    what,
                    case.shape,
                    "none",
                    None,
                    rel_err(&grad, &fd),
                    c.threshold + rounding / fd_norm,
                    unwritten(&grad),
                );
            }
        }
    }
}

fn path_name(fused: bool) -> &'static str {
    if fused { "fused" } else { "tensor" }
}

/// The expert stack of `plan.recipe` (no checkpointing): every gradient, fused vs tensor on the
/// same weights and inputs, and the counters of each run.
fn expert_stack<B: GateBackend>(
    checks: &mut Checks,
    device: &B::Device,
    plan: &GatePlan<'_>,
    seed: u64,
) {
    type Ad<B> = Autodiff<B, NoCheckpointing>;
    let recipe = plan.recipe;
    let (n, d) = (recipe.tokens() as usize, recipe.d_model as usize);
    let fused = ExpertStack::<Ad<B>>::from_recipe(
        &recipe.with(Activation::SituFused, recipe.checkpointing),
        seed,
        SOFT_CAP,
        device,
    );
    let tensor_stack = fused.with_activation(Activation::SituTensor);
    let mut rng = SplitMix64::new(seed.rotate_left(17));
    let x_host = nonzero_uniforms(&mut rng, n * d, -1.0, 1.0);
    let r_host = nonzero_uniforms(&mut rng, n * d, -1.0, 1.0);
    let shape = [n, recipe.d_ffn as usize];
    let run = |stack: &ExpertStack<Ad<B>>| {
        poison::<B>(&[[n, shape[1]], [n, 2 * shape[1]], [n, d]], device);
        let x = tensor::<Ad<B>>(&x_host, [n, d], device).require_grad();
        let r = tensor::<Ad<B>>(&r_host, [n, d], device);
        let y = stack.forward(x.clone());
        let grads = (y.clone() * r).sum().backward();
        let mut all = vec![
            ("out".to_string(), to_f64(y.inner())),
            (
                "d(x)".to_string(),
                to_f64(x.grad(&grads).expect("x tracked")),
            ),
        ];
        for (e, ex) in stack.experts.iter().enumerate() {
            all.push((
                format!("d(w_gate_up[{e}])"),
                to_f64(ex.w_gate_up.grad(&grads).expect("tracked")),
            ));
            all.push((
                format!("d(w_down[{e}])"),
                to_f64(ex.w_down.grad(&grads).expect("tracked")),
            ));
        }
        all
    };
    let before = SituCounts::now();
    let a = run(&fused);
    let fused_counts = SituCounts::since(before);
    let before = SituCounts::now();
    let b = run(&tensor_stack);
    let tensor_counts = SituCounts::since(before);
    let calls = fused.calls();
    for ((name, fa), (_, tb)) in a.iter().zip(&b) {
        let test = if name == "out" { FWD } else { BWD };
        checks.push(
            test,
            format!("expert stack ({calls} calls): {name}, fused vs tensor"),
            shape,
            "none",
            None,
            rel_err(fa, tb),
            plan.expert_stack,
            unwritten(fa),
        );
    }
    let calls = calls as u64;
    let ok = fused_counts == one_call(calls, 0) && tensor_counts == one_call(0, calls);
    checks.push(
        BWD,
        format!("expert stack path counters: fused run {fused_counts}, tensor run {tensor_counts}"),
        shape,
        "none",
        None,
        if ok { 0.0 } else { 1.0 },
        0.0,
        0,
    );
}

/// The primitive under a float tensor, still owned by it.
fn primitive<B: Backend>(t: &Tensor<B, 2>) -> FloatTensor<B> {
    t.clone().into_primitive().tensor()
}

/// Host values → a tensor on `device`, in the backend's float type.
fn tensor<B: Backend>(values: &[f64], shape: [usize; 2], device: &B::Device) -> Tensor<B, 2> {
    let data = TensorData::new(values.to_vec(), shape).convert::<B::FloatElem>();
    Tensor::from_data(data, device)
}

/// Values that are not finite: elements left NaN, which no kernel wrote.
fn unwritten(values: &[f64]) -> usize {
    values.iter().filter(|x| !x.is_finite()).count()
}

/// Leaves NaN in the pool's free slices of these sizes, so that the next allocations of those
/// sizes (the op outputs and gradients) start out poisoned. Harmless where the backend has no
/// pool.
fn poison<B: Backend>(shapes: &[[usize; 2]], device: &B::Device) {
    let held: Vec<_> = shapes
        .iter()
        .map(|&s| Tensor::<B, 2>::full(s, f32::NAN, device))
        .collect();
    sync::<B>(device);
    drop(held);
    sync::<B>(device);
}

fn sync<B: Backend>(device: &B::Device) {
    B::sync(device).expect("device sync");
}
