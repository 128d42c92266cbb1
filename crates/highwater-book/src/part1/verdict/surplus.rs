//! *The verdict*'s four ways of counting one surplus: what the SiTU tensor path keeps alive
//! until backward beyond the silu control and beyond the fused kernel, per training step.

use cell_output::Table;
use highwater::recipe::written_name;
use highwater::{Activation, Backend, Checkpointing, Recipe, ffn};

use crate::BookError;
use crate::bytes::signed;
use crate::load::{Book, RESULTS};
use crate::part1::fix_and_gate::{BENCH, bench_record};

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
        let bench = bench_record(self)?;
        let live = |path: &str| {
            bench
                .memory(path, "none")
                .map(|m| m.live_bytes_after_forward)
                .ok_or_else(|| BookError::Parse {
                    path: BENCH.into(),
                    reason: format!("no `{path}` path without checkpointing"),
                })
        };
        Ok((live("tensor")? - live("fused")?) * calls as i64)
    }
}

/// The chapter's table of the four sources side by side (the incident report, the ledger, the
/// H200's wave stack, the fix's benchmark): what each counts, over the control and over the
/// fused kernel. Asserts what the text says: on CubeBackend the H200 measures the ledger's
/// difference to the fused kernel exactly.
pub fn surplus_table(book: &Book) -> Result<Table, BookError> {
    let base = book.recipe("small")?;
    let mut t = Table::new([
        "source",
        "what it counts",
        "over the silu control",
        "over the fused kernel",
    ]);
    let mut row = |source: String, what: &str, control: String, fused: String| {
        t.push([source, what.to_string(), control, fused])
    };
    // The report's figures, as printed (the incident report, §§ verdict and 3).
    let report = "11 live `[N, f]` intermediates and the doubled `mid`, every call";
    row(
        "the incident report".into(),
        report,
        "+4.6 GiB (≈ 4.2 + 0.4, as printed)".into(),
        "—".into(),
    );
    // The ledger: buffers autodiff keeps until backward in one call, times the calls of a step.
    for ck in [Checkpointing::None, Checkpointing::Balanced] {
        let s = ledger(&base, ck);
        let source = format!(
            "the simulator's ledger, checkpointing {}",
            written_name(&ck)
        );
        let what = "buffers autodiff keeps until backward";
        row(source, what, signed(s.over_control), signed(s.over_fused));
    }
    // The H200: pool bytes in use after the forward of step 2, the first step in steady state.
    for (backend, ck) in [
        (Backend::Cube, Checkpointing::None),
        (Backend::Fusion, Checkpointing::None),
        (Backend::Cube, Checkpointing::Balanced),
    ] {
        let s = book.measured_surplus(backend, ck)?;
        let source = format!(
            "the H200, the wave's expert stack, backend {}, checkpointing {}",
            written_name(&backend),
            written_name(&ck)
        );
        let what = "pool bytes in use after the forward, step 2";
        row(source, what, signed(s.over_control), signed(s.over_fused));
    }
    let bench = book.bench_surplus_over_fused(base.calls())?;
    let source = "the H200, one call in the fix's benchmark, × the calls of a step";
    let what = "bytes one call adds until backward; the benchmark itself keeps `mid`";
    row(source.into(), what, "—".into(), signed(bench));
    // The text: on CubeBackend the H200 measures the ledger's difference to the fused kernel exactly.
    let ledger = ledger(&base, Checkpointing::None).over_fused;
    let measured = book
        .measured_surplus(Backend::Cube, Checkpointing::None)?
        .over_fused;
    assert!(
        (ledger - measured).abs() < 1 << 20,
        "ledger {ledger} vs H200 {measured}"
    );
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_surplus_is_signed() {
        let s = Surplus::of(10, 4, 12);
        assert_eq!((s.over_control, s.over_fused), (6, -2));
    }

    /// The four sources' seven rows, and the orders of magnitude the text reads off them: the
    /// tensor path keeps gigabytes over the control without checkpointing on CubeBackend, and
    /// under balanced checkpointing the fused kernel keeps more (the surplus over it is negative).
    #[test]
    fn the_surplus_table_has_every_source_and_the_signs_the_text_reads() {
        let book = Book::repository();
        let t = surplus_table(&book).unwrap();
        let rows = t.rows();
        assert_eq!(rows.len(), 7, "{rows:?}");
        assert_eq!(rows[0][0], "the incident report");
        let cube_none = rows
            .iter()
            .find(|r| r[0].contains("backend cube, checkpointing none"))
            .expect("the H200's CubeBackend row");
        assert!(
            cube_none[2].starts_with('+') && cube_none[2].contains("GiB"),
            "{cube_none:?}"
        );
        let balanced = rows
            .iter()
            .find(|r| r[0] == "the simulator's ledger, checkpointing balanced")
            .expect("the balanced ledger's row");
        assert!(balanced[3].starts_with('-'), "{balanced:?}");
    }
}
