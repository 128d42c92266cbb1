//! `highwater order` and burn-fusion's dry replays held to the GPU's traced runs.

use super::*;

/// The decoder traced on the H200 (repro/results/fusion/order) held to dry replays traced the
/// same way: burn asks the dry server for the GPU's reservations, size for size, in the same
/// order (which pages they open, and so the bytes reserved, may differ: issue 27).
#[test]
fn order_holds_dry_replays_to_the_gpus_trace() {
    let out = highwater(&[
        "order",
        "repro/results/fusion/order/decoder-decoder-fusion-none-b16.json",
        "--replays",
        "2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table
            .starts_with("decoder-decoder-fusion-none-b16: the GPU's server met 2281 reservations"),
        "{table}"
    );
    // The persistent pool's pages, read from the committed trace (its README counts them).
    assert!(
        table.lines().next().is_some_and(|l| l.ends_with(
            "(persistent): 101 × 2359296 B, 40 × 9437184 B, 20 × 12582912 B, 18 × 50331648 B"
        )),
        "{table}"
    );
    let rows: Vec<&str> = table.lines().skip(3).take(2).collect();
    assert_eq!(rows.len(), 2, "{table}");
    // One thread, the training thread's order (no lag: `order` replays at
    // `dryrun::Schedule::IN_ORDER`): every replay the same, row for row, and none of them the
    // GPU's (its windows catch other parameters; `conform --dry` holds the record to its band).
    let cells = |row: &str| -> Vec<String> {
        row.split("  ")
            .filter(|c| !c.trim().is_empty())
            .skip(1)
            .map(|c| c.trim().to_string())
            .collect()
    };
    assert_eq!(cells(rows[0]), cells(rows[1]), "{table}");
    let per_step: Vec<i64> = cells(rows[0])[0]
        .split_whitespace()
        .map(|d| d.parse().unwrap())
        .collect();
    assert_eq!(per_step.len(), 2, "{table}");
    assert_eq!(
        table.lines().nth(5),
        Some("dry against dry, replays 2–2 against the first: first placed apart at none"),
        "{table}"
    );
}

/// `order` reads a trace committed xz-compressed and holds the MLP on burn-fusion to the GPU's
/// trace reservation by reservation. Replayed with no lag (`dryrun::Schedule::IN_ORDER`), it
/// makes the GPU's requests with the same bytes in use before each, but its persistent windows
/// catch seven 3 211 264-byte tensors the GPU's did not: the pages part at the second
/// reservation and it ends 16 MB above at step 1. At the prediction's schedule its band's
/// runs land on the GPU's pages (`conform_fusion_bands_hold_every_gpu_run_the_same_on_any_host`).
#[test]
fn order_reads_a_compressed_trace_and_the_mlp_meets_the_gpus_at_every_reservation() {
    let out = highwater(&[
        "order",
        "repro/results/fusion/order/traced-1/mlp-mlp-fusion-none-b256.json",
        "--replays",
        "1",
        "--autotune",
        "repro/cards/h200-sweep/mlp-h1024-b256-fused",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let mut lines = table.lines();
    assert_eq!(
        lines.next(),
        Some(
            "mlp-mlp-fusion-none-b256: the GPU's server met 252 reservations; pages of their \
             tensor's size (persistent): none"
        ),
        "{table}"
    );
    let row = lines.nth(2).unwrap_or_default();
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        [
            "1",
            "16117760 22564864 22564864 22564864",
            "yes",
            "none",
            "#2: -143380480 B",
            "#1: -143380480 B",
            "0",
            "0",
            "3211264: 0, 7"
        ],
        "{table}"
    );
}

/// Issue 38's check: every burn-fusion record's bytes reserved, on every GPU run the H200 made
/// of that program (the record, its two repeats, and the three of `repro/results/fusion/order/`),
/// lie inside the band of its schedules (`situ::band::schedules`), to the page (half the
/// smallest page: `situ::band::reserved_tolerance`); bytes in use are the GPU's; and the band
/// is the same, to the byte, on a second replay. It no longer depends on the host's cores: the
/// schedules are explored on one thread. CI runs it after the tests (`--ignored conform_`).
#[test]
#[ignore = "a minute of dry training on two cores: CI runs it after the tests (`.ci/run`: `--test cli -- --ignored conform_`)"]
fn conform_fusion_bands_hold_every_gpu_run_the_same_on_any_host() {
    let card = dryrun::CardProfile::read(&root().join("repro/cards/h200.json")).unwrap();
    // Half the smallest page: what bytes reserved may differ by and be the same pages.
    let page = situ::band::reserved_tolerance(&card, 0) as i64;
    let records = [
        (
            "repro/results",
            "decoder-decoder-fusion-none-b16.json",
            "repro/cards/h200-autotune",
        ),
        (
            "repro/results/fusion",
            "mlp-mlp-fusion-none-b256.json",
            "repro/cards/h200-atlas",
        ),
        (
            "repro/results/fusion",
            "lstm-lstm-fusion-none-b32.json",
            "repro/cards/h200-atlas",
        ),
    ];
    // Every GPU run of a record: (its folder, the repeat it becomes).
    let runs = [
        ("repeats/run-2", "repeats/run-2"),
        ("repeats/run-3", "repeats/run-3"),
        ("fusion/order/traced-1", "repeats/run-4"),
        ("fusion/order/untraced", "repeats/run-5"),
        ("fusion/order/traced-2", "repeats/run-6"),
    ];
    for (from, name, autotune) in records {
        // A folder holding only this record and every other GPU run of it as its repeats.
        let tmp = scratch(&format!("fusion-{name}"));
        let dir = tmp.path();
        std::fs::copy(root().join(from).join(name), dir.join(name)).unwrap();
        for (run, repeat) in runs {
            let source = match run.strip_prefix("fusion/") {
                Some(order) => root().join("repro/results/fusion").join(order),
                None => root().join(from).join(run),
            };
            std::fs::create_dir_all(dir.join(repeat)).unwrap();
            std::fs::copy(source.join(name), dir.join(repeat).join(name)).unwrap();
        }
        // Each step's bytes reserved on the GPU: the least and the most of its runs.
        let gpu: Vec<Vec<i64>> = std::iter::once(dir.join(name))
            .chain(runs.iter().map(|(_, repeat)| dir.join(repeat).join(name)))
            .map(|path| {
                let record: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
                let steps = record["steps"].as_array().unwrap();
                steps
                    .iter()
                    .map(|s| s["reserved"].as_i64().unwrap())
                    .collect()
            })
            .collect();
        let least = |i: usize| gpu.iter().map(|r| r[i]).min().unwrap();
        let most = |i: usize| gpu.iter().map(|r| r[i]).max().unwrap();
        let dir_arg = dir.display().to_string();
        let mut bands = Vec::new();
        for _ in 0..2 {
            let out = highwater(&[
                "conform",
                "--dry",
                "--json",
                &dir_arg,
                "--autotune",
                autotune,
            ]);
            let run = json_lines(&out).remove(0);
            assert_eq!(run["gpu_runs"], 6, "{name}: {run}");
            assert_eq!(run["passes"], true, "{name}: {run}");
            assert_eq!(run["reserved_outside"], serde_json::json!([]), "{run}");
            for d in run["differences"].as_array().unwrap() {
                assert_eq!(d["figure"], "reserved", "bytes in use are exact: {run}");
            }
            let band: Vec<(i64, i64)> = run["reserved_band"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e[0].as_i64().unwrap(), e[1].as_i64().unwrap()))
                .collect();
            // As `conform` allows: the GPU's own spread, or half the smallest page.
            let tolerance = page.max(run["gpu_spread"].as_i64().unwrap());
            for (i, &(l, h)) in band.iter().enumerate() {
                assert!(
                    l - tolerance <= least(i) && most(i) <= h + tolerance,
                    "{name}, step {}: the GPU's {} … {} B outside {l} … {h} B",
                    i + 1,
                    least(i),
                    most(i)
                );
            }
            bands.push(band);
        }
        assert_eq!(bands[0], bands[1], "{name}: the same band twice");
    }
}
