//! The decode step the incident captured, stylised: what the host does, in order, for one
//! token of every concurrent session.
//!
//! ```text
//!  main                                        side (overlap on, captured)
//!  trunk            hidden_in → x
//!  index_k_proj     x → index_k   (the read path's transient, allocated on main)
//!  ── fork ─────────────────────────────────►  index_k_store   index_k → index_k_cache
//!  (host frees index_k: its last use was the launch on side; not recorded)
//!  attention        x → attn
//!  moe              attn → moe_out
//!  [clone]          moe_out → stash           (the differential test's perturbation)
//!  lm_head          moe_out → logits          (or into a cached buffer outside the pool)
//!  softmax          logits → probs
//!  sample           probs → tokens_out
//!  ◄─ join ──────────────────────────────────  (nothing in the step waits for side before)
//! ```
//!
//! Shapes are the served model's (hidden 7168 in bf16, vocabulary 129 280 in fp32 logits, an
//! index key of 128 elements per compressed position, 8192 tokens of context compressed 4×).
//! Only their ratios matter to the mechanism: a bf16 `index_k` block holds a row of logits per
//! session, an fp8 one does not; but an fp8 transient under 10 MiB (38 sessions or fewer) gets
//! a 20 MiB segment from the allocator, and that holds the logits.
//!
//! The costs are stylised, not measured: the side's store streams its rows, so it grows with
//! the sessions and with the key size; the main stream's kernels are dominated by their weights
//! and grow slowly. At nominal speed the store ends before `lm_head` starts, so a race needs
//! jitter; more sessions leave less margin.

use crate::config::{Config, IndexKeys, Join};
use crate::program::{Cost, Program, Stream};

const HIDDEN_ROW: u64 = 7168 * 2;
const LOGITS_ROW: u64 = 129_280 * 4;
const TOKEN_ROW: u64 = 8;
/// A norm per index position, f32.
const NORMS_ROW: u64 = INDEX_POSITIONS * 4;
/// Compressed positions of the index-K cache one session's step reads.
const INDEX_POSITIONS: u64 = 8192 / 4;
const INDEX_DIM: u64 = 128;

/// Bytes of one session's gathered index keys: bf16 elements, or fp8 elements plus one fp32
/// scale per position.
pub(crate) fn index_k_row(keys: IndexKeys) -> u64 {
    match keys {
        IndexKeys::Bf16 => INDEX_POSITIONS * INDEX_DIM * 2,
        IndexKeys::Fp8 => INDEX_POSITIONS * (INDEX_DIM + 4),
    }
}

const fn cost(fixed_us: f64, per_session_us: f64) -> Cost {
    Cost {
        fixed_us,
        per_session_us,
    }
}

/// The stylised kernel costs (µs at full speed: fixed + per session).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Costs {
    /// The trunk: `hidden_in → x`.
    pub trunk: Cost,
    /// The indexer's key projection: `x → index_k`, the transient the side reads.
    pub index_k_proj: Cost,
    /// The side's store: a fixed launch cost plus, per session, this many µs per KiB of the
    /// session's index keys (it streams them, so bf16 keys take twice as long as fp8).
    pub index_k_store_fixed_us: f64,
    /// See `index_k_store_fixed_us`.
    pub index_k_store_us_per_kib: f64,
    /// `x → attn`.
    pub attention: Cost,
    /// `attn → moe_out`.
    pub moe: Cost,
    /// CALIBRATED: the clone's cost, fitted so that the clone on top of cached logits gives
    /// the seed's ~3 % at 60 sessions.
    pub clone: Cost,
    /// CALIBRATED: the LM head's cost, fitted so that cached logits give the seed's ~7 % at 60
    /// sessions (with logits cached, the LM head is what stands between the side's store and
    /// the next tensor that lands on its block).
    pub lm_head: Cost,
    /// `logits → probs`.
    pub softmax: Cost,
    /// `probs → tokens_out`.
    pub sample: Cost,
    /// The second side kernel (`second_side_kernel`): `index_k → index_k_norms`.
    pub index_k_norm: Cost,
    /// The cache reader (`cache_reader`): `index_k_cache → topk`.
    pub topk_select: Cost,
}

impl Default for Costs {
    fn default() -> Costs {
        Costs {
            trunk: cost(40.0, 0.30),
            index_k_proj: cost(6.0, 0.10),
            index_k_store_fixed_us: 4.0,
            index_k_store_us_per_kib: 0.0022,
            attention: cost(14.0, 0.25),
            moe: cost(60.0, 0.20),
            clone: cost(2.0, 0.04),
            lm_head: cost(4.0, 0.05),
            softmax: cost(3.0, 0.06),
            sample: cost(3.0, 0.03),
            index_k_norm: cost(4.0, 0.40),
            topk_select: cost(3.0, 0.10),
        }
    }
}

impl Costs {
    /// The side's store: streams every session's index keys.
    pub fn index_k_store(&self, keys: IndexKeys) -> Cost {
        cost(
            self.index_k_store_fixed_us,
            self.index_k_store_us_per_kib * (index_k_row(keys) as f64 / 1024.0),
        )
    }
}

/// The host program of one decode step of `config` at `sessions` concurrent sessions, at the
/// stylised costs.
pub fn decode_step(config: &Config, sessions: u32) -> Program {
    decode_step_with(config, sessions, &Costs::default())
}

/// [`decode_step`] at other costs.
pub fn decode_step_with(config: &Config, sessions: u32, costs: &Costs) -> Program {
    use Stream::Main;
    let side = if config.uses_side_stream() {
        Stream::Side
    } else {
        Main
    };
    let mut p = Program::new(sessions);
    let hidden_in = p.fixed("hidden_in", HIDDEN_ROW);
    let index_cache = p.fixed("index_k_cache", index_k_row(config.index_keys));
    let tokens_out = p.fixed("tokens_out", TOKEN_ROW);

    let x = p.alloc("x", Main, HIDDEN_ROW);
    p.launch("trunk", Main, costs.trunk, &[hidden_in], &[x]);
    let index_k = p.alloc("index_k", Main, index_k_row(config.index_keys));
    p.launch("index_k_proj", Main, costs.index_k_proj, &[x], &[index_k]);
    if side == Stream::Side {
        p.wait(Stream::Side, Main);
    }
    let store = costs.index_k_store(config.index_keys);
    p.launch("index_k_store", side, store, &[index_k], &[index_cache]);
    if config.second_side_kernel {
        let norms = p.fixed("index_k_norms", NORMS_ROW);
        p.launch(
            "index_k_norm",
            side,
            costs.index_k_norm,
            &[index_k],
            &[norms],
        );
    }
    if config.record_stream && side == Stream::Side {
        p.record_stream(index_k, Stream::Side);
    }
    // Where the side joins back: once, at the place the configuration says.
    let mut joined = side == Stream::Main;
    let mut join_at = |p: &mut Program, here: Join| {
        if !joined && config.join == here {
            p.wait(Main, Stream::Side);
            joined = true;
        }
    };
    join_at(&mut p, Join::BeforeFree);
    // Python drops the transient as soon as the side's kernel is launched.
    p.free(index_k);

    let attn = p.alloc("attn", Main, HIDDEN_ROW);
    p.launch("attention", Main, costs.attention, &[x], &[attn]);
    join_at(&mut p, Join::AfterAttention);
    p.free(x);
    let moe_out = p.alloc("moe_out", Main, HIDDEN_ROW);
    p.launch("moe", Main, costs.moe, &[attn], &[moe_out]);
    p.free(attn);
    if config.cache_reader {
        let topk = p.fixed("topk", index_k_row(config.index_keys));
        p.launch(
            "topk_select",
            Main,
            costs.topk_select,
            &[index_cache],
            &[topk],
        );
    }
    let stash = config.perturbing_clone.then(|| {
        let stash = p.alloc("stash", Main, HIDDEN_ROW);
        p.launch("clone", Main, costs.clone, &[moe_out], &[stash]);
        stash
    });
    let logits = if config.logits_cached {
        p.fixed("logits_cache", LOGITS_ROW)
    } else {
        p.alloc("logits", Main, LOGITS_ROW)
    };
    join_at(&mut p, Join::BeforeLmHead);
    p.launch("lm_head", Main, costs.lm_head, &[moe_out], &[logits]);
    p.free(moe_out);
    let probs = p.alloc("probs", Main, LOGITS_ROW);
    p.launch("softmax", Main, costs.softmax, &[logits], &[probs]);
    if !config.logits_cached {
        p.free(logits);
    }
    p.launch("sample", Main, costs.sample, &[probs], &[tokens_out]);
    p.free(probs);
    if let Some(stash) = stash {
        // The differential test reads its stash after the step.
        p.free(stash);
    }
    join_at(&mut p, Join::End);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::capture;

    fn placed_on_index_k(config: &Config, sessions: u32) -> Vec<String> {
        let program = decode_step(config, sessions);
        let g = capture(&program).unwrap();
        let id = |name: &str| g.tensor(name).unwrap();
        let block = g.placement(id("index_k")).block.clone();
        g.tensors
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                t.name != "index_k"
                    && g.placements[*i]
                        .as_ref()
                        .is_some_and(|p| p.range.start < block.end && block.start < p.range.end)
            })
            .map(|(_, t)| t.name.clone())
            .collect()
    }

    #[test]
    fn bf16_logits_land_on_the_transient_and_fp8_ones_only_in_a_20_mib_segment() {
        let bf16 = Config::incident();
        assert_eq!(placed_on_index_k(&bf16, 60), ["logits"]);
        let cached = Config {
            logits_cached: true,
            ..bf16.clone()
        };
        assert_eq!(placed_on_index_k(&cached, 60), ["probs"]);
        let fp8 = Config {
            index_keys: IndexKeys::Fp8,
            ..bf16.clone()
        };
        // Below 39 sessions the fp8 transient is under 10 MiB: PyTorch gives it a 20 MiB
        // segment, and freed, the whole segment is one block that takes the logits.
        for sessions in 4..=38 {
            assert_eq!(placed_on_index_k(&fp8, sessions), ["logits"], "{sessions}");
        }
        for sessions in 39..=128 {
            assert_eq!(placed_on_index_k(&fp8, sessions), Vec::<String>::new());
        }
        let recorded = Config {
            record_stream: true,
            ..bf16
        };
        assert_eq!(placed_on_index_k(&recorded, 60), Vec::<String>::new());
    }

    #[test]
    fn without_the_side_stream_the_step_is_one_stream() {
        for config in [
            Config {
                overlap: false,
                ..Config::incident()
            },
            Config {
                mode: crate::config::Mode::Eager,
                ..Config::incident()
            },
        ] {
            let program = decode_step(&config, 60);
            let g = capture(&program).unwrap();
            assert!(g.nodes.iter().all(|n| n.kernel.stream == Stream::Main));
        }
    }

    #[test]
    fn at_nominal_speed_the_store_ends_before_the_lm_head_starts() {
        use crate::replay::{Draw, Replayer, Timing};
        let g = capture(&decode_step(&Config::incident(), 60)).unwrap();
        let still = Timing {
            jitter_sigma: 0.0,
            ..Timing::default()
        };
        let spans = Replayer::new(&g, still).schedule(Draw {
            seed: 0,
            trial: 0,
            replay: 0,
        });
        let at = |name: &str| spans[g.node(name).unwrap()];
        let store = at("index_k_store");
        let margin = at("lm_head").start_us - store.end_us;
        // Open, but narrower than the store itself: a slow replay of it closes the margin.
        assert!(margin > 0.0, "margin {margin} µs");
        assert!(
            margin < 0.5 * (store.end_us - store.start_us),
            "margin {margin} µs"
        );
    }
}
