//! *Rerun on a GPU* (`src/part-1/rerun.md`): what its cells compute.
//!
//! Every recorded rerun (`repro/results/rerun-*.json`) replayed through the simulator, and
//! the chapter's tables, figures and sentences built from the pairs: where the runs come from,
//! how close the simulator comes, what the capped card does, and the GPU cell's own run.

use std::collections::BTreeSet;

use cell_output::{CellValue, Figure, Markdown, Output, Table};
use highwater::conform::{
    Compared, Conformance, IN_USE_TOLERANCE, RESERVED_TOLERANCE, RerunRecord, conform,
};
use highwater::recipe::written_name;
use highwater_plot::{ErrorChart, ErrorLine, HighWaterChart, Series};

use crate::BookError;
use crate::load::{Book, RESULTS};
use crate::{bytes, reports};

/// Where the GPU cell's frozen output is, under the book's root: its body is the run record.
pub const GPU_CELL_FREEZE: &str = "repro/freeze/part-1/rerun/gpu-1.json";

/// Every recorded rerun, in name order, with the simulator's judgement of it.
pub fn checked(book: &Book) -> Result<Vec<(RerunRecord, Conformance)>, BookError> {
    book.rerun_records()?
        .into_iter()
        .map(|(_, r)| {
            let c = conform(&r)?;
            Ok((r, c))
        })
        .collect()
}

/// A relative error as the chapter writes it: `+1.25 %`.
pub fn pct(e: f64) -> String {
    format!("{:+.2} %", e * 100.0)
}

/// A record's arm, `situ-tensor / balanced / cube`, as the tables name a run.
pub fn arm(r: &RerunRecord) -> String {
    format!(
        "{} / {} / {}",
        written_name(&r.activation),
        written_name(&r.checkpointing),
        written_name(&r.backend)
    )
}

/// Where the recorded reruns come from: the GPU, its memory, the software, the source
/// revisions and dates, and one command that wrote a record (@tbl-rerun-provenance).
pub fn provenance_table(book: &Book) -> Result<Table, BookError> {
    let runs = book.rerun_records()?;
    let first = &runs.first().ok_or("no rerun recorded")?.1.provenance;
    let mut revisions: Vec<&str> = runs
        .iter()
        .map(|(_, r)| r.provenance.git_revision.as_str())
        .collect();
    revisions.sort();
    revisions.dedup();
    let mut dates: Vec<&str> = runs
        .iter()
        .map(|(_, r)| r.provenance.date.as_str())
        .collect();
    dates.sort();
    let device = &runs[0].1.device;
    Ok(Table::new(["", ""])
        .row([
            "GPU",
            &format!(
                "{} ({}), driver {}, CUDA {}",
                first.gpu, first.gpu_memory, first.driver, first.cuda
            ),
        ])
        .row([
            "total memory the driver reports",
            &format!(
                "{} B ({})",
                device.total_bytes,
                bytes::show(device.total_bytes)
            ),
        ])
        .row([
            "free once the CUDA context exists",
            &bytes::show(device.free_at_start),
        ])
        .row([
            "software",
            &format!(
                "burn {}, cubecl {}, {}",
                first.versions.burn, first.versions.cubecl, first.versions.rustc
            ),
        ])
        .row(["binary", &first.versions.build])
        .row([
            "source revisions",
            &revisions
                .iter()
                .map(|r| &r[..r.len().min(10)])
                .collect::<Vec<_>>()
                .join(", "),
        ])
        .row([
            "recorded",
            &format!("{} to {}", dates[0], dates[dates.len() - 1]),
        ])
        .row(["runs", &runs.len().to_string()])
        .row(["one command, for instance", &runs[0].1.provenance.command]))
}

/// Each recorded run against the simulator: worst errors, deaths on both sides, and the
/// verdict, a known miss told apart from a new one (@tbl-conform).
pub fn conform_table(book: &Book) -> Result<Table, BookError> {
    let known = book.known_misses()?;
    let mut t = Table::new([
        "run",
        "card",
        "steps",
        "live after fwd (GPU), error",
        "reserved (GPU), error",
        "died at (GPU / sim)",
        "verdict",
    ]);
    for (r, c) in checked(book)? {
        let card = r.device.cap_bytes.map_or("H200".to_string(), |cap| {
            format!("cap {}", bytes::show(cap))
        });
        let fig = |x: Option<Compared>| match x {
            Some(x) => format!("{}, {}", bytes::show(x.measured), pct(x.error)),
            None => "–".into(),
        };
        let died = |d: Option<u64>| d.map_or("–".to_string(), |s| s.to_string());
        let verdict = match (c.passes(), known.iter().any(|k| k.run == c.name)) {
            (true, _) => "conforms",
            (false, true) => "known miss",
            (false, false) => "MISS",
        };
        t = t.row([
            arm(&r),
            card,
            c.steps.to_string(),
            fig(c.in_use_after_forward),
            fig(c.reserved),
            format!(
                "{} / {}",
                died(c.measured_died_at),
                died(c.predicted_died_at)
            ),
            verdict.to_string(),
        ]);
    }
    Ok(t)
}

/// The tolerances, and the largest difference in live bytes after forward over every step
/// that both the GPU and the simulator completed, with the run and step where it lies.
pub fn live_bytes_note(book: &Book) -> Result<Markdown, BookError> {
    let mut worst: (u64, String) = (0, String::new());
    let mut steps = 0;
    let mut runs = 0;
    for (r, c) in checked(book)? {
        runs += 1;
        for (i, m) in r.steps.iter().enumerate() {
            let Some(&sim) = c.simulated.in_use_after_forward.get(i) else {
                continue;
            };
            steps += 1;
            let d = m.in_use_after_forward.abs_diff(sim);
            if d >= worst.0 {
                worst = (d, format!("{} step {}", arm(&r), m.step));
            }
        }
    }
    // Where the largest difference lies, unless there is none.
    let at = if worst.0 == 0 {
        String::new()
    } else {
        format!(" ({})", worst.1)
    };
    Ok(Markdown(format!(
        "Tolerances: {:.0} % for live bytes after forward, {:.0} % for bytes reserved. Over the \
         {steps} steps completed by the {runs} recorded runs, live bytes after forward differ by \
         at most **{} bytes**{at}.",
        IN_USE_TOLERANCE * 100.0,
        RESERVED_TOLERANCE * 100.0,
        worst.0,
    )))
}

/// The uncapped CubeBackend runs whose bytes reserved the simulator predicts to the byte from
/// step 2 on; fails if one is not, since the text says every one is.
pub fn cube_reserved_note(book: &Book) -> Result<Markdown, BookError> {
    let mut exact = vec![];
    let mut other = vec![];
    for (r, c) in checked(book)?
        .iter()
        .filter(|(r, _)| r.device.cap_bytes.is_none() && r.backend == highwater::Backend::Cube)
    {
        // Step 1 is left out: the pool has not settled (kernels compile, autotune).
        let same = r
            .steps
            .iter()
            .skip(1)
            .zip(c.simulated.reserved.iter().skip(1))
            .all(|(m, &s)| m.reserved == s);
        if same {
            exact.push(arm(r))
        } else {
            other.push(arm(r))
        }
    }
    let mut out = format!(
        "CubeBackend runs whose bytes reserved the simulator predicts to the byte at every step \
         from step 2 on: **{} of {}**.",
        exact.len(),
        exact.len() + other.len(),
    );
    if !other.is_empty() {
        out.push_str(&format!(" Not to the byte: {}.", other.join("; ")));
    }
    assert!(
        other.is_empty(),
        "the text below says: every CubeBackend run, to the byte"
    );
    Ok(Markdown(out))
}

/// The simulator's error in bytes reserved at each step of every uncapped run, one line per
/// run, against the tolerance (@fig-rerun-steps).
pub fn reserved_error_figure(book: &Book) -> Result<Figure, BookError> {
    let lines = checked(book)?
        .into_iter()
        .filter(|(r, _)| r.device.cap_bytes.is_none())
        .map(|(r, c)| {
            let gpu = r.steps.iter().map(|m| (m.step, m.reserved));
            let sim = c
                .simulated
                .reserved
                .iter()
                .enumerate()
                .map(|(i, &b)| (i as u64 + 1, b));
            let config = format!(
                "{} / {}",
                written_name(&r.checkpointing),
                written_name(&r.backend)
            );
            ErrorLine::between(written_name(&r.activation), config, gpu, sim)
        })
        .collect();
    Ok(Figure::svg(
        ErrorChart {
            title: "Simulator against GPU: bytes reserved per step, H200".into(),
            x_desc: "step".into(),
            y_desc: "simulated − measured, % of measured".into(),
            tolerance: Some(RESERVED_TOLERANCE * 100.0),
            lines,
        }
        .to_svg(),
    ))
}

/// The capped runs, `(record, judgement)`, in name order.
fn capped(book: &Book) -> Result<Vec<(RerunRecord, Conformance)>, BookError> {
    let mut runs = checked(book)?;
    runs.retain(|(r, _)| r.device.cap_bytes.is_some());
    Ok(runs)
}

/// Pages held per step by the wave's three arms on the capped H200, measured and simulated,
/// each death marked, against what the cap leaves the pool (@fig-rerun-capped).
pub fn capped_figure(book: &Book) -> Result<Figure, BookError> {
    let mut series = vec![];
    let mut capacity = 0;
    for (r, c) in capped(book)? {
        capacity = r.device.pool_capacity;
        let name = written_name(&r.activation);
        let mut gpu: Vec<(u32, u64)> = r
            .steps
            .iter()
            .map(|m| (m.step as u32, m.reserved))
            .collect();
        if gpu.is_empty() && r.died.is_some() {
            // Died in step 1: what the pool held when it refused is not on record; the simulated
            // pool at that moment stands in, marked by the death.
            gpu = c
                .simulated
                .reserved
                .iter()
                .take(1)
                .map(|&b| (1, b))
                .collect();
        }
        series.push(Series {
            arm: name.clone(),
            label: format!("{name} GPU"),
            points: gpu,
            died_at: c.measured_died_at.map(|s| s as u32),
        });
        series.push(Series {
            arm: name.clone(),
            label: format!("{name} sim"),
            points: c
                .simulated
                .reserved
                .iter()
                .enumerate()
                .map(|(i, &b)| (i as u32 + 1, b))
                .collect(),
            died_at: c.predicted_died_at.map(|s| s as u32),
        });
    }
    Ok(Figure::svg(
        HighWaterChart {
            title: "capped H200: pages held per step".into(),
            card_bytes: capacity,
            series,
        }
        .to_svg(),
    ))
}

/// The log `highwater rerun` wrote beside the record judged as `c`, read for its refusals.
fn run_log(book: &Book, c: &Conformance) -> Result<highwater::LogForensics, BookError> {
    let log_path = format!("{RESULTS}/{}.log", c.name);
    Ok(highwater::parse_log(&log_path, &book.read(&log_path)?))
}

/// The capped runs: what the pool may take, its fullest step and the headroom left, each
/// run's fate and refused pages on the GPU and in the simulator (@tbl-rerun-capped).
pub fn capped_table(book: &Book) -> Result<Table, BookError> {
    let mut t = Table::new([
        "arm",
        "capped H200's edge",
        "fullest step (GPU)",
        "headroom",
        "GPU",
        "failed pages (GPU log)",
        "simulator",
    ]);
    for (r, c) in capped(book)? {
        let name = written_name(&r.activation);
        let fullest = r.steps.iter().map(|m| m.reserved).max();
        let log = run_log(book, &c)?;
        let pages = log
            .failures
            .iter()
            .map(|f| format!("{} ×{}", bytes::show(f.bytes), f.count))
            .collect::<Vec<_>>()
            .join(", ");
        let sim_pages = reports::refused_pages(&c.simulated.failures);
        let sim = match c.predicted_died_at {
            Some(s) => format!(
                "dies at step {s}: {}",
                sim_pages
                    .iter()
                    .map(|(p, n)| format!("{} ×{n}", bytes::show(*p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "survives".into(),
        };
        let fate = match &r.died {
            Some(d) => format!("dies at step {} ({:?})", d.step, d.phase).to_lowercase(),
            None => format!("survives {} steps", r.steps.len()),
        };
        t = t.row([
            name,
            bytes::show(r.device.pool_capacity),
            fullest.map_or("–".into(), bytes::show),
            fullest.map_or("–".into(), |f| bytes::show(r.device.pool_capacity - f)),
            fate,
            if pages.is_empty() {
                "none".into()
            } else {
                pages
            },
            sim,
        ]);
    }
    Ok(t)
}

/// For each run that died on the GPU: where, where the simulator kills it, and whether every
/// page size the GPU refused is one the simulator refuses too.
pub fn capped_deaths_note(book: &Book) -> Result<Markdown, BookError> {
    let mut out = vec![];
    for (r, c) in checked(book)? {
        let Some(death) = &r.died else { continue };
        let log = run_log(book, &c)?;
        let gpu: BTreeSet<u64> = log.failures.iter().map(|f| f.bytes).collect();
        let sim: BTreeSet<u64> = c.simulated.failures.iter().map(|f| f.page).collect();
        let list = |s: &BTreeSet<u64>| {
            s.iter()
                .map(|&b| bytes::show(b))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(format!(
            "{}: GPU died at step {} (in {}), simulator at step {}. Page sizes refused on the GPU: \
             {}; by the simulator: {}. Every size the GPU refused, the simulator refuses: {}. {}",
            written_name(&r.activation),
            death.step,
            written_name(&death.phase),
            c.predicted_died_at.map_or("–".into(), |s| s.to_string()),
            list(&gpu),
            list(&sim),
            if gpu.is_subset(&sim) { "yes" } else { "no" },
            match list(&sim.difference(&gpu).copied().collect()) {
                extra if extra.is_empty() => "The simulator refuses no other size.".to_string(),
                extra => format!(
                    "The simulator also refuses sizes the GPU never reached: {extra} (it \
                    replays the whole step; the GPU run stopped when the matmul autotuner failed in \
                    backward)."
                ),
            },
        ));
    }
    Ok(Markdown(out.join("\n\n")))
}

/// Each capped run checked against the recipe text it recorded: where today's recipe gives
/// the rest of the model other live bytes, the fate simulated with each.
pub fn recipe_drift_note(book: &Book) -> Result<Markdown, BookError> {
    let fate = |c: &Conformance| {
        c.predicted_died_at
            .map_or("survives".to_string(), |s| format!("dies in step {s}"))
    };
    let mut changed = vec![];
    for (name, r) in book
        .rerun_records()?
        .into_iter()
        .filter(|(_, r)| r.device.cap_bytes.is_some())
    {
        let text = book.read(&r.recipe_path)?;
        let now = highwater::Recipe::parse(&r.recipe_path, &text)?;
        let then = r.recipe()?;
        if now.rest.live_bytes != then.rest.live_bytes {
            let today = RerunRecord {
                recipe_toml: text,
                ..r.clone()
            };
            changed.push(format!(
                "{}: the rest of the model's live bytes were {}, are {} now; simulated, it {} \
                 with the recorded recipe and {} with today's.",
                name.trim_start_matches("rerun-"),
                bytes::show(then.rest.live_bytes),
                bytes::show(now.rest.live_bytes),
                fate(&conform(&r)?),
                fate(&conform(&today)?),
            ));
        }
    }
    Ok(Markdown(if changed.is_empty() {
        "Each capped run is checked against the recipe it recorded; all hold today's calibration."
            .to_string()
    } else {
        format!(
            "Each capped run is checked against the recipe text it recorded. Today's recipes \
             differ: {}",
            changed.join(" ")
        )
    }))
}

/// The GPU cell's run ([`GPU_CELL_FREEZE`]) against today's simulator: the card, the worst
/// errors and the step times (@tbl-rerun-live). With no freeze yet, a line saying so (the GPU
/// cell already reports its missing or stale freeze, which a strict build fails on); an error
/// if the freeze or its record lacks a field, or if the simulator misses the run.
pub fn gpu_cell_table(book: &Book) -> Result<Output, BookError> {
    let path = GPU_CELL_FREEZE;
    // The freeze is the cell's output; its body is the record, as JSON text.
    let Some(r) = book.frozen::<RerunRecord>(path)? else {
        return Ok(Markdown(format!(
            "*No run recorded by the GPU cell in `{path}` yet.*"
        ))
        .into_output());
    };
    let c = conform(&r)?;
    let (live, reserved) = (
        c.in_use_after_forward.ok_or("no step completed")?,
        c.reserved.ok_or("no step completed")?,
    );
    if !c.passes() {
        return Err(format!("the simulator misses the GPU cell's run: {c:?}").into());
    }
    // The first step compiles and autotunes: the mean is over the others.
    let later: Vec<f64> = r.steps.iter().skip(1).map(|s| s.step_ms).collect();
    let dash = || "–".to_string();
    Ok(Table::new(["", "GPU", "simulated", "error"])
        .row(["card".into(), r.provenance.gpu.clone(), dash(), dash()])
        .row([
            "total memory (cuDeviceTotalMem)".into(),
            bytes::show(r.device.total_bytes),
            dash(),
            dash(),
        ])
        .row([
            "driver / CUDA".into(),
            format!("{} / {}", r.provenance.driver, r.provenance.cuda),
            dash(),
            dash(),
        ])
        .row([
            format!("live after forward (step {})", live.step),
            bytes::show(live.measured),
            bytes::show(live.predicted),
            pct(live.error),
        ])
        .row([
            format!("reserved (step {})", reserved.step),
            bytes::show(reserved.measured),
            bytes::show(reserved.predicted),
            pct(reserved.error),
        ])
        .row([
            "steps".into(),
            r.steps.len().to_string(),
            c.steps.to_string(),
            dash(),
        ])
        .row([
            "first step (compiles, autotunes)".into(),
            format!("{:.1} s", r.steps[0].step_ms / 1e3),
            dash(),
            dash(),
        ])
        .row([
            "later steps, mean".into(),
            format!("{:.1} ms", later.iter().sum::<f64>() / later.len() as f64),
            dash(),
            dash(),
        ])
        .into_output())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn html(output: Output) -> String {
        match output {
            Output::Table(html) | Output::Figure(html) | Output::Markdown(html) => html,
            other => panic!("not a table, figure or markdown: {other:?}"),
        }
    }

    #[test]
    fn runs_are_named_by_arm_and_errors_signed() {
        let runs = checked(&Book::repository()).unwrap();
        assert!(runs.len() >= 15, "{}", runs.len());
        let (r, _) = runs
            .iter()
            .find(|(r, _)| r.device.cap_bytes.is_none())
            .unwrap();
        assert_eq!(arm(r).matches(" / ").count(), 2, "{}", arm(r));
        assert_eq!(pct(-0.0209), "-2.09 %");
        assert_eq!(pct(0.0), "+0.00 %");
    }

    #[test]
    fn provenance_and_conformance_cover_every_run() {
        let book = Book::repository();
        let runs = checked(&book).unwrap().len();
        let provenance = provenance_table(&book).unwrap();
        assert_eq!(provenance.rows().len(), 9);
        assert_eq!(provenance.rows()[7], ["runs".to_string(), runs.to_string()]);
        let conformance = conform_table(&book).unwrap();
        assert_eq!(conformance.rows().len(), runs);
        // The text: two runs still miss, both Balanced on burn-fusion, and both are known.
        let verdicts: Vec<(&str, &str)> = conformance
            .rows()
            .iter()
            .map(|row| (row[0].as_str(), row[6].as_str()))
            .collect();
        assert!(!verdicts.iter().any(|(_, v)| *v == "MISS"), "{verdicts:?}");
        let misses: Vec<_> = verdicts
            .iter()
            .filter(|(_, v)| *v == "known miss")
            .collect();
        assert_eq!(misses.len(), 2, "{verdicts:?}");
        assert!(
            misses
                .iter()
                .all(|(arm, _)| arm.ends_with("/ balanced / fusion")),
            "{misses:?}"
        );
    }

    #[test]
    fn live_bytes_and_cube_reserved_match_to_the_byte() {
        let book = Book::repository();
        let live = live_bytes_note(&book).unwrap().0;
        assert!(live.ends_with("at most **0 bytes**."), "{live}");
        // Panics if a CubeBackend run is off by a byte; all six arms are named.
        let cube = cube_reserved_note(&book).unwrap().0;
        assert!(cube.ends_with("**6 of 6**."), "{cube}");
    }

    #[test]
    fn figures_draw_every_arm() {
        let book = Book::repository();
        let steps = html(reserved_error_figure(&book).unwrap().into_output());
        let capped = html(capped_figure(&book).unwrap().into_output());
        for activation in ["silu", "situ-fused", "situ-tensor"] {
            assert!(steps.contains(activation), "{activation}");
            assert!(
                capped.contains(&format!("{activation} GPU")),
                "{activation}"
            );
            assert!(
                capped.contains(&format!("{activation} sim")),
                "{activation}"
            );
        }
        assert!(steps.contains("bytes reserved per step, H200"));
    }

    #[test]
    fn on_the_capped_card_only_the_tensor_path_dies_at_once() {
        let book = Book::repository();
        let table = capped_table(&book).unwrap();
        let fates: Vec<(&str, &str, &str)> = table
            .rows()
            .iter()
            .map(|row| (row[0].as_str(), row[4].as_str(), row[6].as_str()))
            .collect();
        assert_eq!(fates.len(), 3, "{fates:?}");
        for (arm, gpu, sim) in &fates {
            if *arm == "situ-tensor" {
                assert_eq!(*gpu, "dies at step 1 (forward)");
                assert!(sim.starts_with("dies at step 1: "), "{sim}");
            } else {
                assert!(gpu.starts_with("survives "), "{arm}: {gpu}");
                assert_eq!(*sim, "survives", "{arm}");
            }
        }
        let deaths = capped_deaths_note(&book).unwrap().0;
        assert!(
            deaths.starts_with("situ-tensor: GPU died at step 1"),
            "{deaths}"
        );
        assert!(!deaths.contains("\n\n"), "one death only: {deaths}");
        assert!(deaths.contains("the simulator refuses: yes."), "{deaths}");
        // The recorded recipes are today's: the fates above hold the current calibration.
        let drift = recipe_drift_note(&book).unwrap().0;
        assert!(drift.ends_with("all hold today's calibration."), "{drift}");
    }

    #[test]
    fn the_gpu_cells_run_conforms_or_is_missing() {
        let table = html(gpu_cell_table(&Book::repository()).unwrap());
        assert!(
            table.contains("<td>steps</td><td>50</td><td>50</td>"),
            "{table}"
        );
        assert!(table.contains("later steps, mean"), "{table}");
        // No freeze yet: a line saying so, not an error.
        let none = gpu_cell_table(&Book::at("/nonexistent")).unwrap();
        assert!(html(none).contains("No run recorded by the GPU cell"));
    }
}
