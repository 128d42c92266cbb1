//! *The verdict*'s four ways of counting one surplus: what the SiTU tensor path keeps alive
//! until backward beyond the silu control and beyond the fused kernel, per training step.

use highwater::recipe::written_name;
use highwater::{Activation, Backend, Checkpointing, Recipe, ffn};

use crate::json::{Field, Json};
use crate::load::{Book, BookError, RESULTS};

/// The tensor path's surplus, in bytes per step (negative: it keeps less).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surplus {
    /// Over the silu control.
    pub over_control: i64,
    /// Over the fused SiTU kernel.
    pub over_fused: i64,
}

impl Surplus {
    /// The surplus from what each path keeps: tensor path, control, fused kernel.
    pub fn of(tensor: u64, control: u64, fused: u64) -> Surplus {
        let diff = |other: u64| tensor as i64 - other as i64;
        Surplus {
            over_control: diff(control),
            over_fused: diff(fused),
        }
    }
}

/// The simulator's ledger: the buffers autodiff keeps until backward in one expert call of
/// each path, times the calls of a step of `base`, under `checkpointing`.
pub fn ledger(base: &Recipe, checkpointing: Checkpointing) -> Surplus {
    let held = |a| ffn::expert_ledger(&base.with(a, checkpointing)).held_bytes() * base.calls();
    Surplus::of(
        held(Activation::SituTensor),
        held(Activation::Silu),
        held(Activation::SituFused),
    )
}

impl Book {
    /// The H200's wave stack (`repro/results/rerun-wave-stack-*`): pool bytes in use after the
    /// forward of step 2, the first step in steady state, of each path on `backend` under
    /// `checkpointing`.
    pub fn measured_surplus(
        &self,
        backend: Backend,
        checkpointing: Checkpointing,
    ) -> Result<Surplus, BookError> {
        let at_step_2 = |arm: &str| -> Result<u64, BookError> {
            let name = format!(
                "rerun-wave-stack-{arm}-{}-{}",
                written_name(&backend),
                written_name(&checkpointing)
            );
            let r = self.rerun_record(format!("{RESULTS}/{name}.json"))?;
            let step = r.steps.get(1).ok_or_else(|| BookError::Parse {
                path: format!("{RESULTS}/{name}.json"),
                reason: "fewer than 2 steps".into(),
            })?;
            Ok(step.in_use_after_forward)
        };
        Ok(Surplus::of(
            at_step_2("situ-tensor")?,
            at_step_2("silu")?,
            at_step_2("situ-fused")?,
        ))
    }

    /// The fix's benchmark on the H200 (`bench-situ-h200.json`): the live bytes one call of the
    /// tensor path adds until backward beyond one call of the fused kernel, without
    /// checkpointing, times `calls`. The benchmark has no control arm.
    pub fn bench_surplus_over_fused(&self, calls: u64) -> Result<i64, BookError> {
        let bench: Json = self.json(format!("{RESULTS}/bench-situ-h200.json"))?;
        let live = |path: &str| {
            bench
                .at("memory")
                .arr()
                .iter()
                .find(|m| m.at("path").str() == path && m.at("checkpointing").str() == "none")
                .map(|m| m.at("live_bytes_after_forward").num())
                .ok_or_else(|| BookError::Parse {
                    path: format!("{RESULTS}/bench-situ-h200.json"),
                    reason: format!("no `{path}` path without checkpointing"),
                })
        };
        Ok(((live("tensor")? - live("fused")?) * calls as f64) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_surplus_is_signed() {
        let s = Surplus::of(10, 4, 12);
        assert_eq!((s.over_control, s.over_fused), (6, -2));
    }
}
