//! The GPU gate: the seed's three tests, run on CUDA, written to one JSON file.
//!
//! `situ-gate --out gate.json`. Exit status 0 only when every check passes. Each check records
//! its shape, vector width, checkpoint strategy, metric, value and threshold; the file begins
//! with the command that produced it, then the GPU, driver, versions, revision and date.

use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::tensor::Tensor;
use highwater::recipe::{Activation, Recipe};
use serde::Serialize;
use situ::cube::{self, LaunchInfo};
use situ::gpu::{
    Cube, CubeAd, CudaDevice, CudaRuntime, host, poison_pool, strategy_name, sync, tensor,
    unwritten,
};
use situ::provenance::{self, Provenance};
use situ::reference::{self, SplitMix64, rel_err};
use situ::{ExpertStack, SOFT_CAP, SituCounts, situ_glu_fused, situ_glu_tensor};

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

#[derive(Serialize)]
struct Gate {
    #[serde(flatten)]
    provenance: Provenance,
    seed: u64,
    soft_cap: f32,
    thresholds: Thresholds,
    pass: bool,
    tests: Vec<TestResult>,
    counters_after: String,
}

#[derive(Serialize)]
struct Thresholds {
    fused_vs_tensor_forward: f64,
    fused_vs_tensor_backward: f64,
    vs_f64_reference: f64,
    finite_difference: f64,
    finite_difference_eps: f64,
    expert_stack: f64,
}

#[derive(Serialize)]
struct TestResult {
    name: &'static str,
    pass: bool,
    checks: Vec<Check>,
}

#[derive(Serialize, Clone)]
struct Check {
    what: String,
    shape: [usize; 2],
    checkpointing: &'static str,
    vector: Option<usize>,
    cubes: Option<u64>,
    value: f64,
    threshold: f64,
    unwritten: usize,
    pass: bool,
}

struct Checks(Vec<(&'static str, Check)>);

impl Checks {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        test: &'static str,
        what: String,
        shape: [usize; 2],
        ckpt: &'static str,
        launch: Option<LaunchInfo>,
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
                checkpointing: ckpt,
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

const FWD: &str = "situ_fused_matches_tensor";
const BWD: &str = "fused_backward_matches_tensor_backward";
const FD: &str = "situ_grad_matches_finite_difference";

fn main() {
    let out = situ::gpu::out_arg("gate.json");
    let provenance = provenance::collect("cargo build --release --locked -p situ --features cuda");
    let seed = SplitMix64::fresh_seed();
    println!(
        "situ gate: seed {seed}, cap {SOFT_CAP}, {} on driver {}",
        provenance.gpu, provenance.driver
    );
    let device = CudaDevice::default();
    let mut checks = Checks(vec![]);
    let c = f64::from(SOFT_CAP);

    for (k, &[n, f]) in SHAPES.iter().enumerate() {
        let mut rng = SplitMix64::new(seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9));
        let mid = rng.vec(n * 2 * f, -3.0 * c, 3.0 * c);
        let w = rng.vec(n * f, -1.0, 1.0);
        // The reference sees the f32-rounded inputs the device sees.
        let mid32: Vec<f64> = mid.iter().map(|&x| f64::from(x as f32)).collect();
        let w32: Vec<f64> = w.iter().map(|&x| f64::from(x as f32)).collect();
        let h_ref = reference::forward(&mid32, n, f, c);
        let d_ref = reference::backward(&mid32, &w32, n, f, c);

        // 1. The kernels alone, into outputs filled with NaN.
        let mid_t = tensor::<Cube>(&mid, [n, 2 * f], &device);
        let out = Tensor::<Cube, 2>::full([n, f], f32::NAN, &device);
        let info = cube::forward_into::<CudaRuntime, f32>(
            mid_t.clone().into_primitive().tensor(),
            &out.clone().into_primitive().tensor(),
            SOFT_CAP,
        );
        let h = host(out);
        checks.push(
            FWD,
            "forward kernel vs f64 reference (NaN-poisoned out)".into(),
            [n, f],
            "-",
            Some(info),
            rel_err(&h, &h_ref),
            T_REF,
            unwritten(&h),
        );
        let dmid = Tensor::<Cube, 2>::full([n, 2 * f], f32::NAN, &device);
        let dh_t = tensor::<Cube>(&w, [n, f], &device);
        let info = cube::backward_into::<CudaRuntime, f32>(
            mid_t.into_primitive().tensor(),
            dh_t.into_primitive().tensor(),
            &dmid.clone().into_primitive().tensor(),
            SOFT_CAP,
        );
        let d = host(dmid);
        checks.push(
            BWD,
            "backward kernel vs f64 reference (NaN-poisoned d(mid))".into(),
            [n, f],
            "-",
            Some(info),
            rel_err(&d, &d_ref),
            T_REF,
            unwritten(&d),
        );

        // 2. Through autodiff, both checkpoint strategies.
        autodiff_pair::<NoCheckpointing>(&mut checks, &device, [n, f], &mid, &w, &h_ref, &d_ref);
        autodiff_pair::<BalancedCheckpointing>(
            &mut checks,
            &device,
            [n, f],
            &mid,
            &w,
            &h_ref,
            &d_ref,
        );

        // 3. Finite differences along a random ±1 direction.
        let v: Vec<f64> = (0..mid.len())
            .map(|_| if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 })
            .collect();
        let loss = |x: &[f64], fused: bool| -> f64 {
            let t = tensor::<Cube>(x, [n, 2 * f], &device);
            let h = if fused {
                situ_glu_fused(t, SOFT_CAP)
            } else {
                situ_glu_tensor(t, SOFT_CAP)
            };
            host(h).iter().zip(&w32).map(|(a, b)| a * b).sum()
        };
        let plus: Vec<f64> = mid.iter().zip(&v).map(|(x, d)| x + FD_EPS * d).collect();
        let minus: Vec<f64> = mid.iter().zip(&v).map(|(x, d)| x - FD_EPS * d).collect();
        for fused in [true, false] {
            let fd = (loss(&plus, fused) - loss(&minus, fused)) / (2.0 * FD_EPS);
            let grad = ad_grad::<NoCheckpointing>(&device, [n, f], &mid, &w, fused).1;
            let an: f64 = grad.iter().zip(&v).map(|(g, d)| g * d).sum();
            let what = format!(
                "{} path: d(loss)/dv, autodiff vs central difference",
                if fused { "fused" } else { "tensor" }
            );
            checks.push(
                FD,
                what,
                [n, f],
                "none",
                None,
                (fd - an).abs() / an.abs(),
                T_FD,
                unwritten(&grad),
            );
        }
    }

    expert_stack(&mut checks, &device, seed);

    let mut tests: Vec<TestResult> = [FWD, BWD, FD]
        .into_iter()
        .map(|name| TestResult {
            name,
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
    let pass = tests.iter().all(|t| t.pass);
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
        pass,
        tests,
        counters_after: situ::situ_field(),
    };
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&gate).expect("serializable") + "\n",
    )
    .expect("write the gate's JSON");
    println!(
        "{} -> {out}",
        if pass { "GATE PASSED" } else { "GATE FAILED" }
    );
    println!("{}", situ::situ_field());
    std::process::exit(if pass { 0 } else { 1 });
}

/// One forward+backward through autodiff: `(h, d(mid))` on the host, loss = Σ h·w.
fn ad_grad<C: CheckpointStrategy>(
    device: &CudaDevice,
    [n, f]: [usize; 2],
    mid: &[f64],
    w: &[f64],
    fused: bool,
) -> (Vec<f64>, Vec<f64>) {
    poison_pool(&[[n, f], [n, 2 * f]], device);
    let x = tensor::<CubeAd<C>>(mid, [n, 2 * f], device).require_grad();
    let wt = tensor::<CubeAd<C>>(w, [n, f], device);
    let h = if fused {
        situ_glu_fused(x.clone(), SOFT_CAP)
    } else {
        situ_glu_tensor(x.clone(), SOFT_CAP)
    };
    let grads = (h.clone() * wt).sum().backward();
    let d = x.grad(&grads).expect("mid is tracked");
    let out = (host(h.inner()), host(d));
    sync(device);
    out
}

fn autodiff_pair<C: CheckpointStrategy>(
    checks: &mut Checks,
    device: &CudaDevice,
    shape: [usize; 2],
    mid: &[f64],
    w: &[f64],
    h_ref: &[f64],
    d_ref: &[f64],
) {
    let ck = strategy_name::<C>();
    let before = SituCounts::now();
    let (hf, df) = ad_grad::<C>(device, shape, mid, w, true);
    let fused = SituCounts::since(before);
    let before = SituCounts::now();
    let (ht, dt) = ad_grad::<C>(device, shape, mid, w, false);
    let tensor = SituCounts::since(before);
    checks.push(
        FWD,
        "autodiff forward: fused vs tensor path".into(),
        shape,
        ck,
        None,
        rel_err(&hf, &ht),
        T_FWD,
        unwritten(&hf),
    );
    checks.push(
        FWD,
        "autodiff forward: tensor path vs f64 reference".into(),
        shape,
        ck,
        None,
        rel_err(&ht, h_ref),
        T_REF,
        unwritten(&ht),
    );
    checks.push(
        BWD,
        "d(mid): fused vs tensor path".into(),
        shape,
        ck,
        None,
        rel_err(&df, &dt),
        T_BWD,
        unwritten(&df),
    );
    checks.push(
        BWD,
        "d(mid): tensor path vs f64 reference".into(),
        shape,
        ck,
        None,
        rel_err(&dt, d_ref),
        T_REF,
        unwritten(&dt),
    );
    // The counters must say which path ran: fused 1/1/1, tensor 1/11/1, and nothing else.
    let ok = fused.fused.entry == 1
        && fused.fused.fwd == 1
        && fused.fused.bwd == 1
        && fused.tensor.entry == 0
        && tensor.tensor.entry == 1
        && tensor.tensor.fwd == 11
        && tensor.tensor.bwd == 1
        && tensor.fused.entry == 0;
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

/// The wave's expert stack from `repro/recipes/situ.toml`: every gradient, fused vs tensor.
fn expert_stack(checks: &mut Checks, device: &CudaDevice, seed: u64) {
    type Ad = CubeAd<NoCheckpointing>;
    let recipe = Recipe::parse(
        "situ.toml",
        include_str!("../../../../repro/recipes/situ.toml"),
    )
    .expect("the wave recipe parses");
    let (n, d) = (recipe.tokens() as usize, recipe.d_model as usize);
    let fused = ExpertStack::<Ad>::from_recipe(
        &recipe.with(Activation::SituFused, recipe.checkpointing),
        seed,
        SOFT_CAP,
        device,
    );
    let tensor_stack = fused.with_activation(Activation::SituTensor);
    let mut rng = SplitMix64::new(seed.rotate_left(17));
    let x_host = rng.vec(n * d, -1.0, 1.0);
    let r_host = rng.vec(n * d, -1.0, 1.0);
    let shape = [n, recipe.d_ffn as usize];
    let run = |stack: &ExpertStack<Ad>| {
        poison_pool(&[[n, shape[1]], [n, 2 * shape[1]], [n, d]], device);
        let x = tensor::<Ad>(&x_host, [n, d], device).require_grad();
        let r = tensor::<Ad>(&r_host, [n, d], device);
        let y = stack.forward(x.clone());
        let grads = (y.clone() * r).sum().backward();
        let mut all = vec![
            ("out".to_string(), host(y.inner())),
            ("d(x)".to_string(), host(x.grad(&grads).expect("x tracked"))),
        ];
        for (e, ex) in stack.experts.iter().enumerate() {
            all.push((
                format!("d(w_gate_up[{e}])"),
                host(ex.w_gate_up.grad(&grads).expect("tracked")),
            ));
            all.push((
                format!("d(w_down[{e}])"),
                host(ex.w_down.grad(&grads).expect("tracked")),
            ));
        }
        all
    };
    let before = SituCounts::now();
    let a = run(&fused);
    let b = run(&tensor_stack);
    let counts = SituCounts::since(before);
    for ((name, fa), (_, tb)) in a.iter().zip(&b) {
        let test = if name == "out" { FWD } else { BWD };
        checks.push(
            test,
            format!(
                "expert stack ({} calls): {name}, fused vs tensor",
                fused.calls()
            ),
            shape,
            "none",
            None,
            rel_err(fa, tb),
            T_STACK,
            unwritten(fa),
        );
    }
    println!("expert stack counters: {counts}");
}
