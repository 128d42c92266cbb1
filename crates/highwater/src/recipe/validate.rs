//! Stage two of reading a recipe: the checks that turn the file as written into a
//! [`Recipe`], apart from the recipe's own types because they are most of the module's lines.

use basics::line_of;
use toml::Spanned;

use super::file::{ModelFile, RecipeFile, WorkloadFile};
use super::{Card, Jitter, Recipe, RecipeError, RestOfModel, Workload};
use crate::limits::{
    self, MAX_EXPERT_CALLS, MAX_LAG, MAX_LATE_RELEASES, MAX_REST_TENSORS, MAX_SEEDS, MAX_STEPS,
    MAX_TENSOR_BYTES,
};

/// The factor with the largest value: the one an error blames, since it is the one to shrink.
fn largest<'a>(factors: &[(&'static str, &'a Spanned<u64>)]) -> (&'static str, &'a Spanned<u64>) {
    *factors
        .iter()
        .max_by_key(|(_, v)| *v.get_ref())
        .expect("at least one factor")
}

/// Multiplies named, spanned factors, blaming the largest on overflow (see `validate`).
type Product<'a> = dyn Fn(&[(&'static str, &Spanned<u64>)], &str) -> Result<u64, RecipeError> + 'a;

impl Recipe {
    /// `[workload]`, each key defaulting to the fixed step's.
    fn validate_workload(
        w: &WorkloadFile,
        m: &ModelFile,
        batch: u64,
        seq_len: u64,
        err: &dyn Fn(&'static str, std::ops::Range<usize>, String) -> RecipeError,
        product: &Product<'_>,
    ) -> Result<Workload, RecipeError> {
        let fixed = Workload::fixed(seq_len, batch);
        // A count of steps (0: never), held to the steps a run may have.
        let every = |field: &'static str, v: &Option<Spanned<u64>>| match v {
            None => Ok(0),
            Some(v) => MAX_STEPS
                .check(*v.get_ref())
                .map_err(|reason| err(field, v.span(), reason)),
        };
        // A length or a count that must be at least 1 and at most `max` (named `what`).
        let sized =
            |field: &'static str, v: &Option<Spanned<u64>>, default: u64, max: (u64, &str)| {
                let Some(v) = v else { return Ok(default) };
                match *v.get_ref() {
                    0 => Err(err(field, v.span(), "must be at least 1".into())),
                    x if x > max.0 => Err(err(field, v.span(), format!("is {x}, above {}", max.1))),
                    x => Ok(x),
                }
            };
        let model_seq = (seq_len, "model.seq_len");
        let workload = Workload {
            seq_len_min: sized("workload.seq_len_min", &w.seq_len_min, seq_len, model_seq)?,
            pad_to: sized("workload.pad_to", &w.pad_to, 1, model_seq)?,
            eval_every: every("workload.eval_every", &w.eval_every)?,
            eval_batch: sized("workload.eval_batch", &w.eval_batch, batch, (u64::MAX, ""))?,
            eval_seq_len: sized(
                "workload.eval_seq_len",
                &w.eval_seq_len,
                seq_len,
                (u64::MAX, ""),
            )?,
            loader_every: every("workload.loader_every", &w.loader_every)?,
            sync: w.sync.unwrap_or(fixed.sync),
            cleanup_every: every("workload.cleanup_every", &w.cleanup_every)?,
        };
        // The evaluation pass's activations, as the training step's are checked.
        let (eval_batch, eval_seq_len) = (
            w.eval_batch
                .clone()
                .unwrap_or_else(|| Spanned::new(0..0, batch)),
            w.eval_seq_len
                .clone()
                .unwrap_or_else(|| Spanned::new(0..0, seq_len)),
        );
        let dtype_size = Spanned::new(0..0, m.dtype.size() * 2);
        let bytes = product(
            &[
                ("workload.eval_batch", &eval_batch),
                ("workload.eval_seq_len", &eval_seq_len),
                ("model.d_ffn", &m.d_ffn),
                ("model.dtype", &dtype_size),
            ],
            "eval_batch × eval_seq_len × 2·d_ffn × dtype",
        )?;
        if !MAX_TENSOR_BYTES.allows(bytes) {
            let (field, v) = largest(&[
                ("workload.eval_batch", &eval_batch),
                ("workload.eval_seq_len", &eval_seq_len),
            ]);
            return Err(err(
                field,
                v.span(),
                format!(
                    "is {}: the evaluation pass's [N, gate_up] activation is larger than \
                     {MAX_TENSOR_BYTES}",
                    v.get_ref()
                ),
            ));
        }
        Ok(workload)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "the recipe's checks in file order, each blaming its own field and span through \
                  the shared `err`, `nonzero` and `product` closures; `[workload]` is apart already"
    )]
    pub(super) fn validate(origin: &str, text: &str, f: RecipeFile) -> Result<Recipe, RecipeError> {
        let err = |field: &'static str, span: std::ops::Range<usize>, reason: String| {
            RecipeError::Invalid {
                origin: origin.to_string(),
                line: line_of(text, span.start),
                field,
                reason,
            }
        };
        let nonzero = |field: &'static str, v: &Spanned<u64>| {
            if *v.get_ref() == 0 {
                Err(err(field, v.span(), "must be at least 1".into()))
            } else {
                Ok(*v.get_ref())
            }
        };
        let m = &f.model;
        let batch = nonzero("model.batch", &m.batch)?;
        let seq_len = nonzero("model.seq_len", &m.seq_len)?;
        let d_model = nonzero("model.d_model", &m.d_model)?;
        let d_ffn = nonzero("model.d_ffn", &m.d_ffn)?;
        let n_experts = nonzero("model.n_experts", &m.n_experts)?;
        let max_iter = nonzero("model.max_iter", &m.max_iter)?;
        let t = &f.training;
        let steps = nonzero("training.steps", &t.steps)?;
        let loss_read_every = nonzero("training.loss_read_every", &t.loss_read_every)?;
        let seeds = t.seeds.get_ref().len() as u64;
        if seeds == 0 {
            return Err(err(
                "training.seeds",
                t.seeds.span(),
                "lists no seed".into(),
            ));
        }
        let r = &f.rest_of_model;
        let tensor_bytes = nonzero("rest_of_model.tensor_bytes", &r.tensor_bytes)?;
        let j = &f.jitter;
        // The counts a run's work and memory grow with, refused here before any work.
        let within = |field: &'static str, v: &Spanned<u64>, limit: limits::Limit| {
            limit
                .check(*v.get_ref())
                .map_err(|reason| err(field, v.span(), reason))
        };
        within("training.steps", &t.steps, MAX_STEPS)?;
        if !MAX_SEEDS.allows(seeds) {
            return Err(err(
                "training.seeds",
                t.seeds.span(),
                format!("lists {seeds} seeds, above {MAX_SEEDS}"),
            ));
        }
        // Exact in 128 bits, so that the message never shows a wrapped product.
        let calls = u128::from(n_experts) * u128::from(max_iter);
        if calls > u128::from(MAX_EXPERT_CALLS.max) {
            let (field, v) = largest(&[
                ("model.n_experts", &m.n_experts),
                ("model.max_iter", &m.max_iter),
            ]);
            return Err(err(
                field,
                v.span(),
                format!(
                    "is {}: n_experts × max_iter makes {calls} expert calls per step, above \
                     {MAX_EXPERT_CALLS}",
                    v.get_ref()
                ),
            ));
        }
        // Blamed on the tensor size: a typo there (`1`) is what turns a step's few hundred
        // lumps into billions.
        let live_bytes = *r.live_bytes.get_ref();
        let rest_tensors = live_bytes / tensor_bytes;
        if !MAX_REST_TENSORS.allows(rest_tensors) {
            return Err(err(
                "rest_of_model.tensor_bytes",
                r.tensor_bytes.span(),
                format!(
                    "is {tensor_bytes}: rest_of_model.live_bytes ({live_bytes}) / tensor_bytes \
                     makes {rest_tensors} tensors per step, above {MAX_REST_TENSORS}"
                ),
            ));
        }
        within("jitter.late_releases", &j.late_releases, MAX_LATE_RELEASES)?;
        within("jitter.max_lag", &j.max_lag, MAX_LAG)?;
        // Every size the simulator multiplies out, checked here once so that no later product
        // can overflow; an overflow is blamed on the largest factor, the one to shrink.
        let product = |factors: &[(&'static str, &Spanned<u64>)], what: &str| {
            let mut acc = 1u64;
            for (i, (_, v)) in factors.iter().enumerate() {
                acc = match acc.checked_mul(*v.get_ref()) {
                    Some(a) => a,
                    None => {
                        let (field, v) = largest(&factors[..=i]);
                        return Err(err(
                            field,
                            v.span(),
                            format!("is {}: {what} overflows 64 bits", v.get_ref()),
                        ));
                    }
                };
            }
            Ok(acc)
        };
        let dtype_size = Spanned::new(0..0, m.dtype.size() * 2);
        // The stack's activations: [N, 2f] of the dtype, once per call.
        product(
            &[
                ("model.batch", &m.batch),
                ("model.seq_len", &m.seq_len),
                ("model.d_ffn", &m.d_ffn),
                ("model.dtype", &dtype_size),
                ("model.n_experts", &m.n_experts),
                ("model.max_iter", &m.max_iter),
            ],
            "batch × seq_len × 2·d_ffn × dtype × n_experts × max_iter",
        )?;
        // The experts' weights: n_experts × 3 · d_model × d_ffn (gate_up is 2f wide on SiTU),
        // then gradients and optimizer state, plus the rest of the model.
        let three = Spanned::new(0..0, 3);
        let expert_params = product(
            &[
                ("model.n_experts", &m.n_experts),
                ("model.d_model", &m.d_model),
                ("model.d_ffn", &m.d_ffn),
                ("model.d_ffn", &three),
            ],
            "n_experts × d_model × 3·d_ffn (the experts' parameters)",
        )?;
        let t_opt = &f.training.optimizer;
        let per_param = m.dtype.size() * (2 + t_opt.states_per_param());
        let weight_bytes = expert_params
            .checked_add(*r.params.get_ref())
            .and_then(|p| p.checked_mul(per_param))
            .and_then(|b| b.checked_add(*r.persistent_bytes.get_ref()));
        if weight_bytes.is_none() {
            // The largest term's largest factor: an expert size, or the rest of the model.
            let experts = largest(&[
                ("model.n_experts", &m.n_experts),
                ("model.d_model", &m.d_model),
                ("model.d_ffn", &m.d_ffn),
            ]);
            let rest = largest(&[
                ("rest_of_model.params", &r.params),
                ("rest_of_model.persistent_bytes", &r.persistent_bytes),
            ]);
            let experts_larger = expert_params >= *rest.1.get_ref();
            let (field, v) = if experts_larger { experts } else { rest };
            return Err(err(
                field,
                v.span(),
                format!(
                    "is {}: the weights, gradients and optimizer state overflow 64 bits",
                    v.get_ref()
                ),
            ));
        }
        let c = &f.card;
        let total = nonzero("card.total_bytes", &c.total_bytes)?;
        let held = c
            .desktop_bytes
            .get_ref()
            .checked_add(*c.cuda_context_bytes.get_ref());
        if held.is_none_or(|h| h >= total) {
            return Err(err(
                "card.desktop_bytes",
                c.desktop_bytes.span(),
                format!("plus card.cuda_context_bytes leaves nothing of the card's {total} bytes"),
            ));
        }
        let p = *j.step_probability.get_ref();
        if !(0.0..=1.0).contains(&p) {
            // Quoted as written: `1e308` would print as 309 digits.
            let span = j.step_probability.span();
            let written = text.get(span).map_or_else(|| p.to_string(), str::to_string);
            return Err(err(
                "jitter.step_probability",
                j.step_probability.span(),
                format!(
                    "is {}, not a probability in [0, 1]",
                    limits::quote(written.trim())
                ),
            ));
        }
        let workload = Self::validate_workload(&f.workload, m, batch, seq_len, &err, &product)?;
        let recipe = Recipe {
            origin: origin.to_string(),
            batch,
            seq_len,
            d_model,
            d_ffn,
            n_experts,
            max_iter,
            dtype: m.dtype,
            activation: m.activation,
            checkpointing: t.checkpointing,
            backend: t.backend,
            optimizer: t.optimizer,
            steps,
            seeds: t.seeds.get_ref().clone(),
            loss_read_every,
            card: Card {
                total_bytes: total,
                desktop_bytes: *c.desktop_bytes.get_ref(),
                cuda_context_bytes: *c.cuda_context_bytes.get_ref(),
            },
            rest: RestOfModel {
                live_bytes,
                tensor_bytes,
                params: *r.params.get_ref(),
                persistent_bytes: *r.persistent_bytes.get_ref(),
            },
            jitter: Jitter {
                step_probability: p,
                late_releases: *j.late_releases.get_ref(),
                max_lag: *j.max_lag.get_ref(),
            },
            workload,
        };
        if recipe.weight_bytes() < recipe.card.pool_capacity() {
            Ok(recipe)
        } else {
            Err(err(
                "card.total_bytes",
                c.total_bytes.span(),
                format!(
                    "leaves {} bytes for the pool, below the {} bytes of weights, gradients and \
                     optimizer state",
                    recipe.card.pool_capacity(),
                    recipe.weight_bytes()
                ),
            ))
        }
    }
}
