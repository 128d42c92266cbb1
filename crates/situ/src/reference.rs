//! The SiTU math on the host, in `f64`: the definition both paths are checked against, and the
//! body of the fused path on backends without CubeCL kernels (burn-ndarray).
//!
//! For one position with gate `g`, up `u` and cap `c`:
//!
//! ```text
//! g' = c·tanh(g/c)            u' = c·tanh(u/c)            s = sigmoid(g')
//! h  = s·g'·u'
//! ∂h/∂g = u'·s·(1 + g'·(1 − s)) · (1 − (g'/c)²)
//! ∂h/∂u = s·g' · (1 − (u'/c)²)
//! ```
//!
//! `mid` is row-major `[n, 2f]`: row `r` holds the gate in columns `0..f` and up in `f..2f`.

use basics::SplitMix64;

/// `h` at one position.
pub(crate) fn forward_elem(g: f64, u: f64, cap: f64) -> f64 {
    let gc = cap * (g / cap).tanh();
    let uc = cap * (u / cap).tanh();
    sigmoid(gc) * gc * uc
}

/// `(∂L/∂g, ∂L/∂u)` at one position, given `dh = ∂L/∂h`.
pub(crate) fn backward_elem(g: f64, u: f64, dh: f64, cap: f64) -> (f64, f64) {
    let (tg, tu) = ((g / cap).tanh(), (u / cap).tanh());
    let (gc, uc) = (cap * tg, cap * tu);
    let s = sigmoid(gc);
    let dg = dh * uc * s * (1.0 + gc * (1.0 - s)) * (1.0 - tg * tg);
    let du = dh * s * gc * (1.0 - tu * tu);
    (dg, du)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Forward over `mid [n, 2f]`: returns `h [n, f]`.
pub fn forward(mid: &[f64], n: usize, f: usize, cap: f64) -> Vec<f64> {
    assert_eq!(mid.len(), n * 2 * f, "mid must be [n, 2f]");
    let mut out = Vec::with_capacity(n * f);
    for row in mid.chunks_exact(2 * f) {
        let (gate, up) = row.split_at(f);
        out.extend(gate.iter().zip(up).map(|(&g, &u)| forward_elem(g, u, cap)));
    }
    out
}

/// Backward over `mid [n, 2f]` and `dh [n, f]`: returns `d(mid) [n, 2f]`.
pub fn backward(mid: &[f64], dh: &[f64], n: usize, f: usize, cap: f64) -> Vec<f64> {
    assert_eq!(mid.len(), n * 2 * f, "mid must be [n, 2f]");
    assert_eq!(dh.len(), n * f, "dh must be [n, f]");
    let mut out = vec![0.0; n * 2 * f];
    for ((row, drow), orow) in mid
        .chunks_exact(2 * f)
        .zip(dh.chunks_exact(f))
        .zip(out.chunks_exact_mut(2 * f))
    {
        let (gate, up) = row.split_at(f);
        let (dgate, dup) = orow.split_at_mut(f);
        for j in 0..f {
            let (dg, du) = backward_elem(gate[j], up[j], drow[j], cap);
            dgate[j] = dg;
            dup[j] = du;
        }
    }
    out
}

/// `‖a − b‖₂ / ‖b‖₂`: the gate's error measure (`b` is the reference).
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

/// A seed that differs from run to run (clock and address entropy), or `SITU_SEED`'s.
pub fn fresh_seed() -> u64 {
    // A failure prints its seed; `SITU_SEED=…` replays it.
    if let Some(seed) = std::env::var("SITU_SEED").ok().and_then(|s| s.parse().ok()) {
        return seed;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    nanos ^ ((&local as *const u8 as u64).rotate_left(32)) ^ u64::from(std::process::id())
}

/// Uniform in `[lo, hi)`, never near zero (zeros hide missing terms in a gradient).
fn nonzero_uniform(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    loop {
        let x = lo + (hi - lo) * rng.unit();
        if x.abs() > 1e-3 * (hi - lo).abs() {
            return x;
        }
    }
}

/// `len` values uniform in `[lo, hi)`, none near zero: the draws the models' weights and the
/// gate's inputs take.
pub fn nonzero_uniforms(rng: &mut SplitMix64, len: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..len).map(|_| nonzero_uniform(rng, lo, hi)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_elem_is_the_derivative_of_forward_elem() {
        let mut rng = SplitMix64::new(fresh_seed());
        let cap = 8.0;
        for _ in 0..1000 {
            let (g, u, dh) = (
                nonzero_uniform(&mut rng, -24.0, 24.0),
                nonzero_uniform(&mut rng, -24.0, 24.0),
                nonzero_uniform(&mut rng, -2.0, 2.0),
            );
            let (dg, du) = backward_elem(g, u, dh, cap);
            let eps = 1e-5;
            let fd_g =
                dh * (forward_elem(g + eps, u, cap) - forward_elem(g - eps, u, cap)) / (2.0 * eps);
            let fd_u =
                dh * (forward_elem(g, u + eps, cap) - forward_elem(g, u - eps, cap)) / (2.0 * eps);
            assert!(
                (dg - fd_g).abs() <= 1e-6 * (1.0 + fd_g.abs()),
                "g={g} u={u}: {dg} vs {fd_g}"
            );
            assert!(
                (du - fd_u).abs() <= 1e-6 * (1.0 + fd_u.abs()),
                "g={g} u={u}: {du} vs {fd_u}"
            );
        }
    }

    #[test]
    fn draws_are_pinned() {
        // Pinned: the expert weights (`ExpertStack::from_recipe`) and the gate's inputs.
        let mut rng = SplitMix64::new(42);
        let bits: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            bits,
            [
                13679457532755275413,
                2949826092126892291,
                5139283748462763858
            ]
        );
        assert_eq!(
            nonzero_uniforms(&mut rng, 3, -1.0, 1.0),
            [
                -0.31161856695272494,
                -0.9239396629195076,
                0.7364561530930647
            ]
        );
    }

    #[test]
    fn the_cap_bounds_the_output() {
        let c = 8.0;
        assert!(forward_elem(1e6, 1e6, c) <= c * c);
        assert!((forward_elem(0.5, 0.5, c) - 0.5 * 0.5 / (1.0 + (-0.5f64).exp())).abs() < 1e-2);
    }
}
