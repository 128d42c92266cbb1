//! *The fix and its gate* (`src/part-1/fix-and-gate.md`): what its cells compute.
//!
//! The fused SiTU kernel's gate and benchmark ran on an H200 and wrote JSON files; these
//! helpers render them as the chapter's tables, leniently (a missing field shows as `–`, see
//! [`crate::json`]), so that a table shows what the run recorded rather than failing on it.

use cell_output::{CellError, Table};

use crate::Book;
use crate::json::{Field, Json};

/// The gate's record: every check of the report's three tests, with its error and threshold.
pub const GATE: &str = "repro/results/gate-situ-h200.json";

/// The benchmark's record: times, bandwidth and live bytes of both paths at the wave's shape.
pub const BENCH: &str = "repro/results/bench-situ-h200.json";

/// One line per test of the gate ([`GATE`]): its result, the checks passed, and its worst
/// check relative to that check's threshold (checks without a threshold left out).
pub fn gate_summary_table(book: &Book) -> Result<Table, CellError> {
    let g: Json = book.json(GATE)?;
    let mut t = Table::new([
        "test",
        "result",
        "checks passed",
        "worst check",
        "its error",
        "its threshold",
    ]);
    for test in g.at("tests").arr() {
        let checks = test.at("checks").arr();
        let passed = checks.iter().filter(|c| c.at("pass").yes()).count();
        let worst = checks
            .iter()
            .filter(|c| c.at("threshold").num() > 0.0)
            .max_by(|a, b| {
                (a.at("value").num() / a.at("threshold").num())
                    .total_cmp(&(b.at("value").num() / b.at("threshold").num()))
            });
        t.push([
            test.at("name").str().to_string(),
            if test.at("pass").yes() {
                "pass".into()
            } else {
                "FAIL".into()
            },
            format!("{passed} / {}", checks.len()),
            worst.map_or("–".into(), |c| {
                format!("{} {}", c.at("what").str(), c.at("shape").text())
            }),
            worst.map_or("–".into(), |c| format!("{:.1e}", c.at("value").num())),
            worst.map_or("–".into(), |c| format!("{:.0e}", c.at("threshold").num())),
        ]);
    }
    Ok(t)
}

/// One line per shape `[N, f]` the gate ran ([`GATE`]), in the order first checked: the vector
/// width its kernels ran with, and the fused-vs-tensor errors and the finite-difference check.
pub fn gate_shapes_table(book: &Book) -> Result<Table, CellError> {
    let g: Json = book.json(GATE)?;
    let all: Vec<&Json> = g
        .at("tests")
        .arr()
        .iter()
        .flat_map(|t| t.at("checks").arr())
        .collect();
    let find = |shape: &str, what: &str, ck: &str| {
        all.iter()
            .find(|c| {
                c.at("shape").text() == shape
                    && c.at("what").str().starts_with(what)
                    && c.at("checkpointing").str() == ck
            })
            .map_or("–".to_string(), |c| {
                format!("{:.1e}", c.at("value").num())
            })
    };
    // The shapes the kernels ran at: the checks that record a vector width.
    let mut shapes: Vec<String> = vec![];
    for c in &all {
        let s = c.at("shape").text();
        if c.at("vector").num().is_finite() && !shapes.contains(&s) {
            shapes.push(s);
        }
    }
    let mut t = Table::new([
        "[N, f]",
        "vector",
        "forward",
        "d(mid), none",
        "d(mid), balanced",
        "finite difference",
    ]);
    for s in &shapes {
        let v = all
            .iter()
            .find(|c| &c.at("shape").text() == s && c.at("vector").num().is_finite())
            .map_or("–".into(), |c| c.at("vector").text());
        t.push([
            s.clone(),
            v,
            find(s, "autodiff forward: fused vs tensor", "none"),
            find(s, "d(mid): fused vs tensor", "none"),
            find(s, "d(mid): fused vs tensor", "balanced"),
            find(s, "fused path: d(loss)/dv", "none"),
        ]);
    }
    Ok(t)
}

/// The gate's thresholds ([`GATE`]), one per kind of comparison, as the binary fixed them
/// before it ran.
pub fn gate_thresholds_table(book: &Book) -> Result<Table, CellError> {
    let g: Json = book.json(GATE)?;
    let th = g.at("thresholds");
    Ok(Table::new(["comparison", "threshold"])
        .row([
            "fused vs tensor path, forward",
            &format!("{:.0e}", th.at("fused_vs_tensor_forward").num()),
        ])
        .row([
            "fused vs tensor path, d(mid)",
            &format!("{:.0e}", th.at("fused_vs_tensor_backward").num()),
        ])
        .row([
            "either path vs the f64 host formula",
            &format!("{:.0e}", th.at("vs_f64_reference").num()),
        ])
        .row([
            "directional finite difference",
            &format!(
                "{:.0e} (step {:.0e})",
                th.at("finite_difference").num(),
                th.at("finite_difference_eps").num()
            ),
        ])
        .row([
            "expert stack, every gradient",
            &format!("{:.0e}", th.at("expert_stack").num()),
        ]))
}

/// The benchmark's times ([`BENCH`]): the copy that sets the yardstick, the fused kernels alone
/// (forward, backward, both, with their bandwidth), then each path through autodiff, against
/// the bandwidth floor.
pub fn bench_table(book: &Book) -> Result<Table, CellError> {
    let b: Json = book.json(BENCH)?;
    let k = b.at("fused_kernels");
    let copy = b.at("copy");
    let ms = |x: f64| format!("{x:.3} ms");
    let mut t = Table::new(["measurement", "median", "GB/s", "× bandwidth floor"]);
    t.push([
        "device-to-device copy (yardstick)".to_string(),
        ms(copy.at("median_ms").num()),
        format!("{:.0}", copy.at("gb_per_s").num()),
        "–".into(),
    ]);
    // Bytes per millisecond / 1e6 = GB/s.
    t.push([
        "fused kernels: forward".to_string(),
        ms(k.at("median_ms_forward").num()),
        format!(
            "{:.0}",
            k.at("forward_bytes").num() / k.at("median_ms_forward").num() / 1e6
        ),
        "–".into(),
    ]);
    t.push([
        "fused kernels: backward".to_string(),
        ms(k.at("median_ms_backward").num()),
        format!(
            "{:.0}",
            k.at("backward_bytes").num() / k.at("median_ms_backward").num() / 1e6
        ),
        "–".into(),
    ]);
    t.push([
        "fused kernels: forward + backward".to_string(),
        ms(k.at("median_ms_pair").num()),
        format!("{:.0}", k.at("gb_per_s").num()),
        format!("{:.2}", k.at("ratio_to_floor").num()),
    ]);
    for p in b.at("paths").arr() {
        t.push([
            format!(
                "{} path through autodiff, forward + backward",
                p.at("path").str()
            ),
            ms(p.at("median_ms").num()),
            "–".into(),
            format!("{:.2}", p.at("ratio_to_floor").num()),
        ]);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gates_three_tests_pass_every_check() {
        let t = gate_summary_table(&Book::repository()).unwrap();
        let rows = t.rows();
        assert_eq!(rows.len(), 3, "{rows:?}");
        for r in rows {
            assert_eq!(r[1], "pass", "{r:?}");
            let (passed, all) = r[2].split_once(" / ").unwrap();
            assert_eq!(passed, all, "{r:?}");
            // The worst error sits below its threshold.
            let (err, th): (f64, f64) = (r[4].parse().unwrap(), r[5].parse().unwrap());
            assert!(err < th, "{r:?}");
        }
    }

    #[test]
    fn the_gate_ran_shapes_with_narrower_vectors_under_both_strategies() {
        let t = gate_shapes_table(&Book::repository()).unwrap();
        let rows = t.rows();
        assert!(rows.len() >= 2, "{rows:?}");
        // Some shapes' `f` is not a multiple of the widest vector: their kernels ran narrower.
        let widths: Vec<u32> = rows.iter().map(|r| r[1].parse().unwrap()).collect();
        let widest = *widths.iter().max().unwrap();
        assert!(widths.iter().any(|&w| w < widest), "{widths:?}");
        // Every shape has its forward and its d(mid) under the strategy the gate always runs.
        assert!(rows.iter().all(|r| r[2] != "–" && r[3] != "–"), "{rows:?}");
        assert!(rows.iter().any(|r| r[4] != "–"), "{rows:?}");
    }

    #[test]
    fn the_thresholds_are_the_gates_own() {
        let t = gate_thresholds_table(&Book::repository()).unwrap();
        let rows = t.rows();
        assert_eq!(rows.len(), 5);
        assert!(rows.iter().all(|r| !r[1].contains("NaN")), "{rows:?}");
        assert_eq!(rows[0][1], "1e-5");
        assert_eq!(rows[3][1], "1e-2 (step 1e-2)");
    }

    #[test]
    fn the_fused_path_is_faster_than_the_tensor_path_through_autodiff() {
        let t = bench_table(&Book::repository()).unwrap();
        let rows = t.rows();
        assert_eq!(rows.len(), 6, "{rows:?}");
        let ms = |path: &str| -> f64 {
            let r = rows.iter().find(|r| r[0].starts_with(path)).unwrap();
            r[1].trim_end_matches(" ms").parse().unwrap()
        };
        // The prose's goal: at least 5× faster.
        assert!(ms("tensor path") > 5.0 * ms("fused path"), "{rows:?}");
        assert!(rows.iter().all(|r| !r.iter().any(|c| c.contains("NaN"))));
    }
}
