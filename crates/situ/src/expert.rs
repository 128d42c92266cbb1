//! The expert FFN and the wave's expert stack, sized by the recipe the simulator reads.

use basics::SplitMix64;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use highwater::recipe::{Activation, Recipe};

use crate::fused::{SituBackend, situ_glu_fused};
use crate::reference::nonzero_uniforms;
use crate::tensor_path::{silu_control, situ_glu_tensor};

/// The activation `recipe.activation` names, on the `gate_up` output `mid`.
pub fn activation<B: SituBackend>(mid: Tensor<B, 2>, path: Activation, cap: f32) -> Tensor<B, 2> {
    match path {
        Activation::Silu => silu_control(mid),
        Activation::SituTensor => situ_glu_tensor(mid, cap),
        Activation::SituFused => situ_glu_fused(mid, cap),
    }
}

/// One expert: `out = down(act(gate_up(x)))`, no biases — the graph `highwater::ffn::expert_call`
/// builds: `x [N, d]`, `w_gate_up [d, gate_up_width]`, `w_down [f, d]`.
#[derive(Debug, Clone)]
pub struct Expert<B: Backend> {
    /// `[d, gate_up_width]`.
    pub w_gate_up: Tensor<B, 2>,
    /// `[f, d]`.
    pub w_down: Tensor<B, 2>,
}

impl<B: SituBackend> Expert<B> {
    /// `x [N, d]` → `[N, d]`.
    pub fn forward(&self, x: Tensor<B, 2>, path: Activation, cap: f32) -> Tensor<B, 2> {
        let mid = x.matmul(self.w_gate_up.clone());
        activation(mid, path, cap).matmul(self.w_down.clone())
    }
}

/// `n_experts` experts applied one after another as residual updates, the whole stack looped
/// `max_iter` times: `n_experts × max_iter` expert calls per forward, as `Recipe::calls` counts.
#[derive(Debug, Clone)]
pub struct ExpertStack<B: Backend> {
    /// Applied in this order.
    pub experts: Vec<Expert<B>>,
    /// Times the whole stack runs per forward.
    pub max_iter: usize,
    /// Which activation every expert runs.
    pub activation: Activation,
    /// The SiTU soft-cap ([`crate::SOFT_CAP`]).
    pub cap: f32,
}

impl<B: SituBackend> ExpertStack<B> {
    /// Weights for `recipe` (`d_model`, `d_ffn`, `gate_up_width()`, `n_experts`, `max_iter`,
    /// `activation`), uniform in `±1/√fan_in` from `seed`, tracked for gradients.
    pub fn from_recipe(recipe: &Recipe, seed: u64, cap: f32, device: &B::Device) -> Self {
        let (d, f, w) = (
            recipe.d_model as usize,
            recipe.d_ffn as usize,
            recipe.gate_up_width() as usize,
        );
        let mut rng = SplitMix64::new(seed);
        let mut param = |rows: usize, cols: usize| {
            let bound = 1.0 / (rows as f64).sqrt();
            let data = TensorData::new(
                nonzero_uniforms(&mut rng, rows * cols, -bound, bound),
                [rows, cols],
            );
            Tensor::<B, 2>::from_data(data, device).require_grad()
        };
        let experts = (0..recipe.n_experts)
            .map(|_| Expert {
                w_gate_up: param(d, w),
                w_down: param(f, d),
            })
            .collect();
        ExpertStack {
            experts,
            max_iter: recipe.max_iter as usize,
            activation: recipe.activation,
            cap,
        }
    }

    /// The same weights, another path (the gate compares paths on identical weights). Fails
    /// when the gate_up width differs (silu uses `f`, SiTU `2f`).
    pub(crate) fn with_activation(&self, activation: Activation) -> Self {
        ExpertStack {
            activation,
            ..self.clone()
        }
    }

    /// `x [N, d]` → `[N, d]`: `x ← x + expert(x)` for each expert, `max_iter` times.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = x;
        for _ in 0..self.max_iter {
            for e in &self.experts {
                x = x.clone() + e.forward(x, self.activation, self.cap);
            }
        }
        x
    }

    /// Expert calls per forward.
    pub fn calls(&self) -> usize {
        self.experts.len() * self.max_iter
    }
}
