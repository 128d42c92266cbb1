//! The expert FFN of each activation path, written with the [`Graph`] builder.

use crate::ledger::{Graph, Ledger, TensorId};
use crate::recipe::{Activation, Recipe};

/// Builds one expert call for `recipe`'s activation path: `x [N, d]` in, `out [N, d]` out.
pub fn expert_call(recipe: &Recipe) -> Graph {
    let n = recipe.tokens();
    let (d, f) = (recipe.d_model, recipe.d_ffn);
    let mut g = Graph::new(recipe.dtype);
    let x = g.input("x", [n, d], true);
    let w_gu = g.param("w_gate_up", [d, recipe.gate_up_width()]);
    let w_down = g.param("w_down", [f, d]);
    let mid = g.linear("mid = gate_up(x)", x, w_gu);
    let h = match recipe.activation {
        Activation::Silu => g.silu("h = silu(mid)", mid),
        Activation::SituTensor => situ_tensor(&mut g, mid, f),
        Activation::SituFused => {
            // One kernel: [N, f] out, its backward recomputes from `mid` and writes d(mid).
            g.custom("h = situ_fused(mid)", vec![mid], [n, f], vec![])
        }
    };
    let out = g.linear("out = down(h)", h, w_down);
    g.output(out);
    g
}

/// `situ_glu_tensor`: split the doubled gate_up, soft-cap each branch `c·tanh(z/c)`, then
/// `sigmoid(g)·g·u`.
fn situ_tensor(g: &mut Graph, mid: TensorId, f: u64) -> TensorId {
    let gate = g.slice("gate = mid[:, :f]", mid, 1, 0, f);
    let up = g.slice("up = mid[:, f:]", mid, 1, f, 2 * f);
    let mut capped = vec![];
    for (name, z) in [("g", gate), ("u", up)] {
        let a = g.div_scalar(&format!("{name}/c"), z);
        let t = g.tanh(&format!("tanh({name}/c)"), a);
        capped.push(g.mul_scalar(&format!("{name}' = c·tanh({name}/c)"), t));
    }
    let (gc, uc) = (capped[0], capped[1]);
    let s = g.sigmoid("sigmoid(g')", gc);
    let p = g.mul("sigmoid(g')·g'", s, gc);
    g.mul("h = sigmoid(g')·g'·u'", p, uc)
}

/// The per-call ledger of `recipe`'s path under its checkpointing and backend.
pub fn expert_ledger(recipe: &Recipe) -> Ledger {
    expert_call(recipe).ledger(recipe.checkpointing, recipe.backend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::Checkpointing;

    const MIB: u64 = 1 << 20;

    fn recipe(a: Activation, c: Checkpointing) -> Recipe {
        Recipe::parse(
            "small.toml",
            include_str!("../../../repro/recipes/small.toml"),
        )
        .unwrap()
        .with(a, c)
    }

    #[test]
    fn held_bytes_per_path() {
        let held = |a, c| expert_ledger(&recipe(a, c)).held_bytes() / MIB;
        // silu: mid, sigmoid(mid), h.
        assert_eq!(held(Activation::Silu, Checkpointing::None), 96);
        // situ tensor: g/c, u/c (in place over mid's 64 MiB), g', sigmoid(g'), the product, u', h.
        let situ = held(Activation::SituTensor, Checkpointing::None);
        assert!(situ >= 7 * 32, "{situ}");
        // fused: mid [N, 2f] and h.
        assert_eq!(held(Activation::SituFused, Checkpointing::None), 96);
        // balanced: only mid, backed up for the recompute.
        assert_eq!(held(Activation::SituTensor, Checkpointing::Balanced), 64);
    }
}
