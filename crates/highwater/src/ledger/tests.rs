//! Unit tests of the ledger: retention, storage and backward replay against burn's.

use super::*;

#[test]
fn a_family_indexes_the_list_of_all() {
    for (i, f) in Family::ALL.into_iter().enumerate() {
        assert_eq!(f as usize, i, "{}", f.name());
    }
}

#[test]
fn forward_peak_counts_fresh_buffers_alive_at_once() {
    // a = x·w, e = a·c (in place over a on Cube), y = tanh(e): a and y at once, then the
    // output y alone. On Fusion the scale is fused into tanh, which writes y.
    let mut g = Graph::new(DType::F32);
    let x = g.input("x", [64, 32], true);
    let w = g.param("w", [32, 64]);
    let a = g.matmul("a", x, w);
    let e = g.mul_scalar("e", a);
    let y = g.tanh("y", e);
    g.output(y);
    let nh = 64 * 64 * 4;
    let cube = g.ledger(Checkpointing::None, Backend::Cube);
    assert_eq!(cube.rows[e.0].storage, Storage::InPlace(a));
    assert_eq!(cube.forward_peak(), 2 * nh);
    let balanced = g.ledger(Checkpointing::Balanced, Backend::Cube);
    assert!(balanced.forward_peak() >= balanced.held_bytes());
}

/// A buffer written in place through a view and kept says so under its own name.
#[test]
fn a_buffer_kept_through_an_in_place_write_names_its_keeper() {
    let mut g = Graph::new(DType::F32);
    let x = g.input("x", [512, 64], true);
    let w = g.param("w", [64, 256]);
    let mid = g.matmul("mid", x, w);
    let gate = g.slice("gate", mid, 1, 0, 128);
    let up = g.slice("up", mid, 1, 128, 256);
    let gc = g.div_scalar("g/c", gate);
    let uc = g.div_scalar("u/c", up);
    let tg = g.tanh("tanh(g/c)", gc);
    let tu = g.tanh("tanh(u/c)", uc);
    let h = g.mul("h", tg, tu);
    g.output(h);
    let ledger = g.ledger(Checkpointing::None, Backend::Cube);
    let row = &ledger.rows[mid.0];
    assert_eq!(ledger.rows[uc.0].storage, Storage::InPlace(up));
    assert_eq!(row.buffer_kept_by, Some(uc));
    assert_eq!(row.cells()[5], "its buffer");
    assert!(row.why().contains(&format!("#{} is written into it", uc.0)));
    assert!(ledger.held.iter().any(|(o, _)| *o == mid));
}

fn ffn_silu(g: &mut Graph) -> TensorId {
    let x = g.input("x", [4096, 768], true);
    let w1 = g.param("w_up", [768, 2048]);
    let w2 = g.param("w_down", [2048, 768]);
    let mid = g.linear("mid", x, w1);
    let h = g.silu("h", mid);
    let out = g.linear("out", h, w2);
    g.output(out);
    mid
}

#[test]
fn matmul_keeps_inputs_not_output() {
    let mut g = Graph::new(DType::F32);
    let x = g.input("x", [4, 8], true);
    let w = g.param("w", [8, 8]);
    let y = g.matmul("y", x, w);
    let z = g.add_scalar("z", y);
    g.output(z);
    let l = g.ledger(Checkpointing::None, Backend::Cube);
    assert_eq!(l.rows[y.0].kept, Kept::No);
    assert_eq!(l.rows[x.0].kept, Kept::External);
    // add_scalar keeps nothing and y is unique: it runs in place.
    assert_eq!(l.rows[z.0].storage, Storage::InPlace(y));
}

#[test]
fn silu_control_holds_three_intermediates() {
    let mut g = Graph::new(DType::F32);
    ffn_silu(&mut g);
    let l = g.ledger(Checkpointing::None, Backend::Cube);
    // mid (sigmoid's and mul's input), sigmoid(mid) (mul's rhs), h (down's input).
    assert_eq!(l.held_count(), 3, "{l}");
    assert_eq!(l.held_bytes(), 3 * 33_554_432);
}

#[test]
fn balanced_recomputes_memory_bound_and_backs_up_mid() {
    let mut g = Graph::new(DType::F32);
    let mid = ffn_silu(&mut g);
    let l = g.ledger(Checkpointing::Balanced, Backend::Cube);
    // Only mid (compute-bound, feeding memory-bound sigmoid) stays.
    assert!(
        matches!(l.rows[mid.0].kept, Kept::Saved(_) | Kept::Backup(_)),
        "{l}"
    );
    assert_eq!(l.held_count(), 1, "{l}");
}

#[test]
fn aligned_slices_are_views_unaligned_are_copies() {
    let mut g = Graph::new(DType::F32);
    let m = g.input("m", [4096, 4096], true);
    let a = g.slice("a", m, 1, 0, 2048);
    let b = g.slice("b", m, 1, 2048, 4096);
    let c = g.slice("c", m, 1, 1, 4096);
    for t in [a, b, c] {
        g.output(t);
    }
    let l = g.ledger(Checkpointing::None, Backend::Cube);
    assert_eq!(l.rows[a.0].storage, Storage::View(m));
    assert_eq!(l.rows[b.0].storage, Storage::View(m));
    assert_eq!(l.rows[c.0].storage, Storage::New);
}

/// Most buffers of `bytes` alive at once during the call's backward, held ones included.
fn backward_peak(l: &Ledger, bytes: u64) -> usize {
    let mut live: Vec<u64> = l.held.iter().map(|&(_, b)| b).collect();
    let mut sizes = std::collections::HashMap::new();
    let count = |live: &[u64]| live.iter().filter(|&&b| b == bytes).count();
    let mut peak = count(&live);
    let remove = |live: &mut Vec<u64>, b: u64| {
        let i = live.iter().position(|&x| x == b).expect("a live buffer");
        live.remove(i);
    };
    for e in &l.backward {
        match *e {
            BackwardEvent::Alloc { buf, bytes: b } => {
                sizes.insert(buf, b);
                live.push(b);
                peak = peak.max(count(&live));
            }
            BackwardEvent::Free { buf }
            | BackwardEvent::ParamGrad { buf, .. }
            | BackwardEvent::InputGrad { buf } => remove(&mut live, sizes[&buf]),
            BackwardEvent::FreeHeld { owner } => {
                let b = l.held.iter().find(|(o, _)| *o == owner).expect("held").1;
                remove(&mut live, b);
            }
        }
    }
    peak
}

#[test]
fn balanced_silu_backward_peaks_where_burns_does() {
    // Measured on the H200 (wave-stack silu/balanced/cube): one [N, f] page per call fewer
    // than a backward that allocates every gradient afresh. burn: recompute sigmoid(mid)
    // and h (two new), grad(h) (new); mul's backward then writes grad(mid) into the
    // retrieved sigmoid and grad(sigmoid) into grad(h), both unique: nothing new.
    let mut g = Graph::new(DType::F32);
    ffn_silu(&mut g);
    let l = g.ledger(Checkpointing::Balanced, Backend::Cube);
    assert_eq!(backward_peak(&l, 33_554_432), 4, "{:?}", l.backward);
    let none = g.ledger(Checkpointing::None, Backend::Cube);
    assert_eq!(backward_peak(&none, 33_554_432), 4, "{:?}", none.backward);
}

#[test]
fn balanced_situ_tensor_backward_recomputes_in_place() {
    // Measured on the H200 (wave-stack situ-tensor/balanced/cube): seven [N, f] buffers at
    // the peak, not ten. The retro-forwards overwrite a state at its last use: g' in place
    // over tanh(g/c), u' over tanh(u/c), and u/c over the view of `mid` itself once the
    // last backup of `mid` is taken.
    let recipe = crate::recipe::Recipe::parse(
        "small.toml",
        include_str!("../../../../repro/recipes/small.toml"),
    )
    .unwrap()
    .with(
        crate::recipe::Activation::SituTensor,
        Checkpointing::Balanced,
    );
    let l = crate::ffn::expert_ledger(&recipe);
    assert_eq!(backward_peak(&l, 33_554_432), 7, "{:?}", l.backward);
}
