//! *The fix and its gate* (`src/part-1/fix-and-gate.md`): what its cells compute.
//!
//! The fused SiTU kernel's gate and benchmark ran on an H200 and wrote JSON files; these
//! helpers read them with the types the binaries wrote them with ([`situ::results`]) and render
//! them as the chapter's tables. A file that lacks a field fails to read, naming the file and
//! the field, so a renamed field fails the build instead of showing a dash on the page.

use cell_output::{Markdown, Table};
use highwater::conform::Provenance;
use situ::gate::Check;
use situ::results::{Bench, Gate};

use crate::Book;
use crate::BookError;

/// The gate's record: every check of the report's three tests, with its error and threshold.
pub const GATE: &str = "repro/results/gate-situ-h200.json";

/// The benchmark's record: times, bandwidth and live bytes of both paths at the wave's shape.
pub const BENCH: &str = "repro/results/bench-situ-h200.json";

/// The gate's record ([`GATE`]).
pub fn gate_record(book: &Book) -> Result<Gate, BookError> {
    book.json(GATE)
}

/// The benchmark's record ([`BENCH`]).
pub fn bench_record(book: &Book) -> Result<Bench, BookError> {
    book.json(BENCH)
}

/// Where a record was made, above the tables made from it: "*Recorded on the GPU:* NVIDIA
/// H200 (143771 MiB, driver …, CUDA …), date, revision `…`, by `situ-gate …`."
pub fn recorded(p: &Provenance) -> Markdown {
    Markdown(format!(
        "*Recorded on the GPU:* {} ({}, driver {}, CUDA {}), {}, revision `{}`, by `{}`.",
        p.gpu, p.gpu_memory, p.driver, p.cuda, p.date, p.git_revision, p.command
    ))
}

/// A shape as the gate's file writes it: `[N, f]`.
fn shape([n, f]: [usize; 2]) -> String {
    format!("[{n}, {f}]")
}

/// One line per test of the gate ([`GATE`]): its result, the checks passed, and its worst
/// check relative to that check's threshold (checks without a threshold left out).
pub fn gate_summary_table(book: &Book) -> Result<Table, BookError> {
    let g = gate_record(book)?;
    let mut t = Table::new([
        "test",
        "result",
        "checks passed",
        "worst check",
        "its error",
        "its threshold",
    ]);
    for test in &g.tests {
        let checks = &test.checks;
        let passed = checks.iter().filter(|c| c.pass).count();
        let worst = checks
            .iter()
            .filter(|c| c.threshold > 0.0)
            .max_by(|a, b| (a.value / a.threshold).total_cmp(&(b.value / b.threshold)));
        t.push([
            test.name.clone(),
            if test.pass {
                "pass".into()
            } else {
                "FAIL".into()
            },
            format!("{passed} / {}", checks.len()),
            worst.map_or("–".into(), |c| format!("{} {}", c.what, shape(c.shape))),
            worst.map_or("–".into(), |c| format!("{:.1e}", c.value)),
            worst.map_or("–".into(), |c| format!("{:.0e}", c.threshold)),
        ]);
    }
    Ok(t)
}

/// One line per shape `[N, f]` the gate ran ([`GATE`]), in the order first checked: the vector
/// width its kernels ran with, and the fused-vs-tensor errors and the finite-difference check.
pub fn gate_shapes_table(book: &Book) -> Result<Table, BookError> {
    let g = gate_record(book)?;
    let all: Vec<&Check> = g.tests.iter().flat_map(|t| &t.checks).collect();
    let find = |shape: [usize; 2], what: &str, ck: &str| {
        all.iter()
            .find(|c| c.shape == shape && c.what.starts_with(what) && c.checkpointing == ck)
            .map_or("–".to_string(), |c| format!("{:.1e}", c.value))
    };
    // The shapes the kernels ran at: the checks that record a vector width.
    let mut shapes: Vec<[usize; 2]> = vec![];
    for c in &all {
        if c.vector.is_some() && !shapes.contains(&c.shape) {
            shapes.push(c.shape);
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
    for &s in &shapes {
        let v = all
            .iter()
            .find_map(|c| c.vector.filter(|_| c.shape == s))
            .map_or("–".into(), |v| v.to_string());
        t.push([
            shape(s),
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
pub fn gate_thresholds_table(book: &Book) -> Result<Table, BookError> {
    let th = gate_record(book)?.thresholds;
    Ok(Table::new(["comparison", "threshold"])
        .row([
            "fused vs tensor path, forward",
            &format!("{:.0e}", th.fused_vs_tensor_forward),
        ])
        .row([
            "fused vs tensor path, d(mid)",
            &format!("{:.0e}", th.fused_vs_tensor_backward),
        ])
        .row([
            "either path vs the f64 host formula",
            &format!("{:.0e}", th.vs_f64_reference),
        ])
        .row([
            "directional finite difference",
            &format!(
                "{:.0e} (step {:.0e})",
                th.finite_difference, th.finite_difference_eps
            ),
        ])
        .row([
            "expert stack, every gradient",
            &format!("{:.0e}", th.expert_stack),
        ]))
}

/// The benchmark's times ([`BENCH`]): the copy that sets the yardstick, the fused kernels alone
/// (forward, backward, both, with their bandwidth), then each path through autodiff, against
/// the bandwidth floor.
pub fn bench_table(book: &Book) -> Result<Table, BookError> {
    let b = bench_record(book)?;
    let (k, copy) = (&b.fused_kernels, &b.copy);
    let ms = |x: f64| format!("{x:.3} ms");
    let mut t = Table::new(["measurement", "median", "GB/s", "× bandwidth floor"]);
    t.push([
        "device-to-device copy (yardstick)".to_string(),
        ms(copy.median_ms),
        format!("{:.0}", copy.gb_per_s),
        "–".into(),
    ]);
    // Bytes per millisecond / 1e6 = GB/s.
    t.push([
        "fused kernels: forward".to_string(),
        ms(k.median_ms_forward),
        format!("{:.0}", k.forward_bytes as f64 / k.median_ms_forward / 1e6),
        "–".into(),
    ]);
    t.push([
        "fused kernels: backward".to_string(),
        ms(k.median_ms_backward),
        format!(
            "{:.0}",
            k.backward_bytes as f64 / k.median_ms_backward / 1e6
        ),
        "–".into(),
    ]);
    t.push([
        "fused kernels: forward + backward".to_string(),
        ms(k.median_ms_pair),
        format!("{:.0}", k.gb_per_s),
        format!("{:.2}", k.ratio_to_floor),
    ]);
    for p in &b.paths {
        t.push([
            format!("{} path through autodiff, forward + backward", p.path),
            ms(p.median_ms),
            "–".into(),
            format!("{:.2}", p.ratio_to_floor),
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
