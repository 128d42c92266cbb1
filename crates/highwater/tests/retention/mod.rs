//! The ledger against real burn 0.21.0 (issue 3, item 5), and against the dry run (`dry.rs`).
//!
//! Each test writes one small graph once ([`program::Program`]), asks highwater's ledger what
//! burn-autodiff keeps alive for backward under `NoCheckpointing` and `BalancedCheckpointing`,
//! runs the same graph on `Autodiff<NdArray<f32>, C>` with a counting global allocator, drops
//! everything the user code holds except the leaves and the output, and compares the tensor
//! buffers still alive after forward, before backward: counted and sized (elements × 4 bytes).
//! Each test also states the expected retention explicitly, read off burn-autodiff 0.21.0's
//! source, so a failure says whether burn or the ledger moved.
//!
//! What is and is not comparable is spelled out on [`program::predicted`]: autodiff's retention
//! (which tensors, how many elements) is backend-independent — it lives in burn-autodiff's op
//! bodies and checkpointer, the same code over NdArray and over CubeCL — while the pitched
//! layout, the 512-byte rounding and slices-as-views are CubeCL's and are not tested here
//! (burn-ndarray 0.21 copies every slice; the ledger's view rule is CubeCL's).
//!
//! Measurement runs in a child process of this test binary ([`child`]), so the counting can be
//! process-wide: with burn's default features burn-ndarray allocates matmul outputs on rayon
//! workers, which a per-thread count would miss, and nothing else of this binary runs there.

mod counting;
mod dry;
mod program;

use std::process::Command;

use burn::backend::autodiff::checkpoint::strategy::{BalancedCheckpointing, NoCheckpointing};
use highwater::{Activation, Checkpointing, Recipe};

use counting::{LARGE, Snapshot};
use program::{Program, V, held_rows, predicted};

/// Tokens, model width, hidden width of the op-family graphs, FFN width.
const N: usize = 64;
const D: usize = 32;
const H: usize = 64;
/// 128 f32 = 512 bytes: the SiTU split of `mid [N, 2F]` is 512-byte aligned, a view on CubeCL
/// (the retention compared here does not depend on it).
const F: usize = 128;
/// Bytes of an `[N, H]` and an `[N, F]` f32 tensor.
const NH: usize = N * H * 4;
const NF: usize = N * F * 4;

/// Bytes autodiff's bookkeeping may leave per op (node, step, checkpoint actions; measured
/// ≈ 0.3–0.7 KiB): far below any tensor here, so no tensor hides in it.
const BOOKKEEPING_PER_OP: isize = 2048;

/// Names the graph a child process measures.
const CHILD_ENV: &str = "HIGHWATER_RETENTION_GRAPH";

/// Every graph the tests measure, by name.
fn catalogue() -> Vec<(String, Program)> {
    let mut all: Vec<(String, Program)> = vec![];
    let mut add = |name: &str, build: &dyn Fn(&mut Program) -> V| {
        let mut p = Program::default();
        let out = build(&mut p);
        p.output(out);
        all.push((name.to_string(), p));
    };
    type Unary = fn(&mut Program, &str, V) -> V;
    let unaries: [(&str, Unary); 5] = [
        ("tanh", Program::tanh),
        ("exp", Program::exp),
        ("sigmoid", Program::sigmoid),
        ("mul_scalar", Program::mul_scalar),
        ("div_scalar", Program::div_scalar),
    ];
    for (name, op) in unaries {
        // op(a), a compute-bound intermediate.
        add(&format!("{name}(a)"), &|p| {
            let a = after_matmul(p, H);
            let y = op(p, "y = op(a)", a);
            p.sum("loss", y)
        });
        // op(a·c), a memory-bound intermediate.
        add(&format!("{name}(a·c)"), &|p| {
            let a = after_matmul(p, H);
            let e = p.mul_scalar("e = a·c", a);
            let y = op(p, "y = op(e)", e);
            p.sum("loss", y)
        });
    }
    add("a·w2", &|p| {
        let a = after_matmul(p, H);
        let w2 = p.param("w2", [H, H]);
        let b = p.matmul("b = a·w2", a, w2);
        p.sum("loss", b)
    });
    add("u·w (u untracked)", &|p| {
        let x = p.input("u", [N, D], false);
        let w = p.param("w", [D, H]);
        p.matmul("a = u·w", x, w)
    });
    type Binary = fn(&mut Program, &str, V, V) -> V;
    let binaries: [(&str, Binary); 2] = [("mul", Program::mul), ("add", Program::add)];
    for (name, op) in binaries {
        add(&format!("{name}(a, b)"), &|p| {
            let x = p.input("x", [N, D], true);
            let w1 = p.param("w1", [D, H]);
            let w2 = p.param("w2", [D, H]);
            let a = p.matmul("a = x·w1", x, w1);
            let b = p.matmul("b = x·w2", x, w2);
            let y = op(p, "y = op(a, b)", a, b);
            p.sum("loss", y)
        });
        add(&format!("{name}(a, u) (u untracked)"), &|p| {
            let a = after_matmul(p, H);
            let u = p.input("u", [N, H], false);
            let y = op(p, "y = op(a, u)", a, u);
            p.sum("loss", y)
        });
    }
    add("mul_scalar(div_scalar(a))", &|p| {
        let a = after_matmul(p, H);
        let e = p.div_scalar("e = a/c", a);
        let y = p.mul_scalar("y = e·c", e);
        p.sum("loss", y)
    });
    add("silu(a)", &|p| {
        let a = after_matmul(p, H);
        let y = p.silu("y = silu(a)", a);
        p.sum("loss", y)
    });
    add("tanh(a[:, :2H])", &|p| {
        let a = after_matmul(p, 4 * H);
        let s = p.slice("s = a[:, :2H]", a, 1, 0, 2 * H);
        let y = p.tanh("y = tanh(s)", s);
        p.sum("loss", y)
    });
    add("a[N/2.., :]·c", &|p| {
        let a = after_matmul(p, 2 * H);
        let s = p.slice("s = a[N/2.., :]", a, 0, N / 2, N);
        let y = p.mul_scalar("y = s·c", s);
        p.sum("loss", y)
    });
    add("tanh(u)·a (u untracked)", &|p| {
        let a = after_matmul(p, H);
        let u = p.input("u", [N, H], false);
        let t = p.tanh("t = tanh(u)", u);
        let y = p.mul("y = t·a", t, a);
        p.sum("loss", y)
    });
    all.push(("silu expert".into(), expert(Activation::Silu)));
    all.push(("situ tensor expert".into(), expert(Activation::SituTensor)));
    all
}

fn program(name: &str) -> Program {
    catalogue()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no graph named {name:?}"))
        .1
}

/// The measurement, run by [`measure`] in a child process of this test binary, where nothing
/// else runs while the allocator counts. A no-op anywhere else.
#[test]
#[ignore = "a child process of the retention tests runs it"]
fn child() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let p = program(&name);
    // A first run pays one-time lazy initialisations; the second is measured.
    p.run::<NoCheckpointing>();
    let none = p.run::<NoCheckpointing>();
    p.run::<BalancedCheckpointing>();
    let balanced = p.run::<BalancedCheckpointing>();
    println!("retention-none {}", none.to_line());
    println!("retention-balanced {}", balanced.to_line());
}

/// Runs [`child`] for `name` and reads its two snapshots (None, Balanced).
fn measure(name: &str) -> [Snapshot; 2] {
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args(["--exact", "retention::child", "--ignored", "--nocapture"])
        .args(["--test-threads=1", "--quiet"])
        .env(CHILD_ENV, name)
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child for {name:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |tag: &str| {
        let l = stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag:?} in the child's output:\n{stdout}"));
        Snapshot::from_line(l)
    };
    [line("retention-none "), line("retention-balanced ")]
}

/// Runs graph `name` on burn under both strategies and checks the buffers alive after forward
/// against the ledger's and against the explicit expectation (`held_*`: buffers kept for
/// backward, in bytes, the output excluded).
fn check(name: &str, held_none: &[usize], held_balanced: &[usize]) {
    let p = program(name);
    let [none, balanced] = measure(name);
    for (ckpt, held, snap) in [
        (Checkpointing::None, held_none, none),
        (Checkpointing::Balanced, held_balanced, balanced),
    ] {
        let ledger = p.ledger(ckpt);
        // The output's buffer is alive too (the caller holds it); a `sum` is below `LARGE`.
        let output = Some(p.output_bytes()).filter(|&b| b >= LARGE);
        let mut expected: Vec<usize> = held.iter().chain(&output).copied().collect();
        expected.sort_unstable();
        let context = format!(
            "graph {name:?}, {ckpt:?}\nledger holds: {:#?}\n{ledger}\nburn: {snap:?}",
            held_rows(&ledger)
        );
        assert_eq!(
            snap.large, expected,
            "burn 0.21.0 keeps other buffers than expected\n{context}"
        );
        assert_eq!(
            predicted(&ledger),
            expected,
            "the ledger disagrees with burn 0.21.0\n{context}"
        );
        assert_eq!(program::kept(&ledger).len(), held.len(), "{context}");
        assert!(
            snap.small_bytes() <= BOOKKEEPING_PER_OP * p.ops() as isize,
            "more non-tensor memory than autodiff's bookkeeping explains\n{context}"
        );
    }
}

/// `x [N, D]` (tracked activation) and `a = x·w [N, width]`: a compute-bound intermediate.
fn after_matmul(p: &mut Program, width: usize) -> V {
    let x = p.input("x", [N, D], true);
    let w = p.param("w", [D, width]);
    p.matmul("a = x·w", x, w)
}

#[test]
fn tanh_exp_sigmoid_keep_their_input() {
    for op in ["tanh", "exp", "sigmoid"] {
        // op(a): the op keeps a (compute-bound) under both strategies.
        check(&format!("{op}(a)"), &[NH], &[NH]);
        // op(a·c): under None the op keeps e (in place over a); under Balanced e is
        // recomputed in backward and a is kept instead, as mul_scalar's backup of its
        // compute-bound parent.
        check(&format!("{op}(a·c)"), &[NH], &[NH]);
    }
}

#[test]
fn matmul_keeps_its_inputs_not_its_output() {
    // b = a·w2 keeps a (and w2, a parameter); neither matmul keeps its output.
    check("a·w2", &[NH], &[NH]);
    // u·w keeps u (the caller's) and w; nothing of the layer's.
    check("u·w (u untracked)", &[], &[]);
}

#[test]
fn mul_keeps_each_side_for_the_other() {
    check("mul(a, b)", &[NH, NH], &[NH, NH]);
    // a is not kept (its gradient needs only u); under Balanced the untracked parent makes
    // mul compute-bound (`CheckpointingError::UntrackedParent`), dropping a's backup too.
    check("mul(a, u) (u untracked)", &[], &[]);
}

#[test]
fn add_keeps_nothing_but_balanced_backs_up_its_parents() {
    // Balanced: add is memory-bound, so both compute-bound parents are backed up (held in the
    // checkpointer builder until backward builds the checkpointer and drops unused backups).
    check("add(a, b)", &[], &[NH, NH]);
    check("add(a, u) (u untracked)", &[], &[]);
}

#[test]
fn scalar_ops_keep_nothing_but_balanced_backs_up_their_parent() {
    check("mul_scalar(a)", &[], &[NH]);
    check("div_scalar(a)", &[], &[NH]);
    check("mul_scalar(a·c)", &[], &[NH]);
    check("div_scalar(a·c)", &[], &[NH]);
    check("mul_scalar(div_scalar(a))", &[], &[NH]);
}

#[test]
fn silu_keeps_its_input_and_the_sigmoid() {
    // silu(a) = a · sigmoid(a): sigmoid keeps a, mul keeps a and sigmoid(a). Balanced keeps a
    // only (sigmoid(a) is recomputed).
    check("silu(a)", &[NH, NH], &[NH]);
}

#[test]
fn slice_keeps_shapes_only() {
    // None: tanh keeps the slice s [N, 2H] (on CubeCL a view, so there a's whole buffer would
    // stay; burn-ndarray copies slices). Balanced: s is recomputed in backward from a [N, 4H],
    // which the slice (memory-bound) backs up.
    check("tanh(a[:, :2H])", &[2 * NH], &[4 * NH]);
    // Nothing keeps the slice; Balanced backs up a (slice is memory-bound).
    check("a[N/2.., :]·c", &[], &[2 * NH]);
}

#[test]
fn an_untracked_chain_is_kept_as_computed() {
    // tanh(u) of an untracked input is untracked and, under Balanced, compute-bound (its
    // parent cannot be checkpointed); mul(t, a) keeps t for a's gradient under both.
    check("tanh(u)·a (u untracked)", &[NH], &[NH]);
}

#[test]
fn silu_expert_ffn() {
    // None: mid, sigmoid(mid), h (down's input). Balanced: mid only.
    check("silu expert", &[NF, NF, NF], &[NF]);
}

#[test]
fn situ_tensor_path() {
    // Under None, seven [N, f] tensors: per branch tanh keeps z/c; then sigmoid keeps g', the
    // first mul keeps sigmoid(g') and g', the second keeps the product and u', down keeps h.
    // (On CubeCL u/c runs in place over `up`, a view of mid, so there its tanh keeps mid's whole
    // [N, 2f] buffer; not visible on burn-ndarray, which copies slices.)
    // Under Balanced: mid [N, 2f] only (backed up by the slices); the rest is recomputed.
    check("situ tensor expert", &[NF; 7], &[2 * NF]);
}

/// seed 000's recipe shrunk to `N = 64, d = 32, f = 128`, on `path`.
fn tiny(path: Activation) -> Recipe {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(dir.join("../../repro/recipes/small.toml")).unwrap();
    let mut r = Recipe::parse("small.toml", &text).unwrap();
    (r.batch, r.seq_len, r.d_model, r.d_ffn) = (1, N as u64, D as u64, F as u64);
    r.with(path, Checkpointing::None)
}

/// The expert call of `ffn.rs` for `path`, as a [`Program`]; checked to give the same ledger.
fn expert(path: Activation) -> Program {
    let r = tiny(path);
    let mut p = Program::default();
    let x = p.input("x", [N, D], true);
    let w_gu = p.param("w_gate_up", [D, r.gate_up_width() as usize]);
    let w_down = p.param("w_down", [F, D]);
    let mid = p.matmul("mid = gate_up(x)", x, w_gu);
    let h = match path {
        Activation::Silu => p.silu("h = silu(mid)", mid),
        Activation::SituTensor => {
            let gate = p.slice("gate = mid[:, :f]", mid, 1, 0, F);
            let up = p.slice("up = mid[:, f:]", mid, 1, F, 2 * F);
            let mut capped = vec![];
            for (name, z) in [("g", gate), ("u", up)] {
                let a = p.div_scalar(&format!("{name}/c"), z);
                let t = p.tanh(&format!("tanh({name}/c)"), a);
                capped.push(p.mul_scalar(&format!("{name}' = c·tanh({name}/c)"), t));
            }
            let (gc, uc) = (capped[0], capped[1]);
            let s = p.sigmoid("sigmoid(g')", gc);
            let prod = p.mul("sigmoid(g')·g'", s, gc);
            p.mul("h = sigmoid(g')·g'·u'", prod, uc)
        }
        Activation::SituFused => unreachable!("a custom kernel: not a burn graph"),
    };
    let out = p.matmul("out = down(h)", h, w_down);
    p.output(out);
    // Same ops, shapes and retention as highwater's own `expert_call`.
    for ckpt in [Checkpointing::None, Checkpointing::Balanced] {
        let ours = p.ledger(ckpt);
        let theirs = highwater::ffn::expert_call(&r).ledger(ckpt, highwater::Backend::Cube);
        let key = |l: &highwater::Ledger| {
            l.rows
                .iter()
                .map(|r| (r.op.clone(), r.shape.clone(), r.storage, r.kept.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&ours), key(&theirs), "{ckpt:?}\n{ours}\n{theirs}");
    }
    p
}
