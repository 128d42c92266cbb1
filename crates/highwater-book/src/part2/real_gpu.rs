//! *On a real GPU*'s record (`repro/results/graphrace-h200.json`), one point per arm,
//! concurrency and slowdown of the side's store, read with the type `graphrace-gpu` wrote it
//! with ([`graphrace::arms`]): a field missing fails the read, naming the file and the field.

use cell_output::{Markdown, Table};
use graphrace::arms::{ArmPoint, ArmsRecord};
use graphrace::{Captured, Draw, Replayer, Timing, Workload};
use highwater_plot::{Curve, RateChart};

use super::static_check::{older_layout, on_transient};
use crate::BookError;
use crate::bytes;
use crate::load::{Book, RESULTS};
use crate::text::{distinct, listed};

/// The GPU repro's record, under the book's root.
pub const GRAPHRACE_H200: &str = "graphrace-h200.json";

impl Book {
    /// The GPU repro's record ([`GRAPHRACE_H200`]): its provenance, settings and points.
    pub fn graphrace_gpu(&self) -> Result<ArmsRecord, BookError> {
        self.json(format!("{RESULTS}/{GRAPHRACE_H200}"))
    }
}

/// The overlap arm's points at the smallest slowdown, the configuration closest to the model.
pub fn overlap_at_first_stretch(ps: &[ArmPoint]) -> Vec<&ArmPoint> {
    let first = ps
        .iter()
        .map(|p| p.side_stretch)
        .fold(f64::INFINITY, f64::min);
    ps.iter()
        .filter(|p| p.arm == "overlap" && p.side_stretch == first)
        .collect()
}

/// Where, when and how the recorded run was made, as the file records it: the provenance a
/// reader checks before trusting any number below it.
pub fn provenance_table(run: &ArmsRecord) -> Table {
    let s = &run.settings;
    let list = |xs: &[String]| xs.join(", ");
    Table::new(["", ""])
        .row(["command", &run.command])
        .row(["built with", &s.build])
        .row(["GPU", &run.gpu])
        .row(["driver", &run.driver])
        .row(["date (UTC)", &run.date])
        .row(["git revision", &run.git_revision])
        .row([
            "SM clock, measured at start",
            &format!("{:.0} MHz", f64::from(run.sm_clock_khz) / 1000.0),
        ])
        .row([
            "concurrencies (sessions)",
            &list(&s.sessions.iter().map(u32::to_string).collect::<Vec<_>>()),
        ])
        .row([
            "slowdowns of the side's store",
            // As the file writes them (`1.0`, not `1`).
            &list(
                &s.side_stretch
                    .iter()
                    .map(|x| format!("×{x:?}"))
                    .collect::<Vec<_>>(),
            ),
        ])
        .row([
            "load tests per point × replays per load test",
            &format!("{} × {}", s.trials, s.replays_per_trial),
        ])
        .row(["thread blocks per kernel", &s.blocks_per_kernel.to_string()])
        .row(["bandwidth load on a third stream", &s.load.to_string()])
}

/// Each arm of `ps` as the model captures its configuration at `sessions`: the store's
/// stream, the tensors sharing bytes with `index_k`, and the static check's verdict. It shows
/// why the arms differ before any GPU number does.
pub fn arms_table(book: &Book, ps: &[ArmPoint], sessions: u32) -> Result<Table, BookError> {
    let mut t = Table::new([
        "arm",
        "configuration",
        "store runs on",
        "shares bytes with index_k",
        "static check",
    ]);
    for (arm, name) in distinct(ps.iter().map(|p| (p.arm.clone(), p.config.clone()))) {
        let c = Captured::new(&book.graphrace_config(&name)?, sessions)?;
        let g = &c.graph;
        let sharing = on_transient(g);
        let store = &g.nodes[g.node("index_k_store").ok_or("no store")?];
        let report = c.check();
        let races = report.races().count();
        t.push([
            arm,
            format!("repro/graphrace/{name}.toml"),
            format!("{} stream", store.kernel.stream.name()),
            if sharing.is_empty() {
                "nothing".to_string()
            } else {
                sharing.join(", ")
            },
            if races == 0 {
                "no race".to_string()
            } else {
                format!("{races} race(s)")
            },
        ]);
    }
    Ok(t)
}

/// The rates figure's chart: one curve for the overlap arm at each slowdown of the store, and
/// one for each other arm at its worst over all slowdowns (a fix must be clean at every one).
pub fn rates_chart(run: &ArmsRecord, ps: &[ArmPoint]) -> RateChart {
    let sessions = distinct(ps.iter().map(|p| p.sessions));
    let mut curves = vec![];
    for stretch in distinct(
        ps.iter()
            .filter(|p| p.arm == "overlap")
            .map(|p| p.side_stretch),
    ) {
        curves.push(Curve {
            arm: "overlap".into(),
            label: format!("overlap, store ×{stretch}"),
            points: ps
                .iter()
                .filter(|p| p.arm == "overlap" && p.side_stretch == stretch)
                .map(|p| (f64::from(p.sessions), p.percent()))
                .collect(),
        });
    }
    for arm in distinct(
        ps.iter()
            .filter(|p| p.arm != "overlap")
            .map(|p| p.arm.clone()),
    ) {
        curves.push(Curve {
            arm: arm.clone(),
            label: format!("{arm}, worst of all slowdowns"),
            points: sessions
                .iter()
                .map(|&s| {
                    let worst = ps
                        .iter()
                        .filter(|p| p.arm == arm && p.sessions == s)
                        .map(ArmPoint::percent)
                        .fold(0.0, f64::max);
                    (f64::from(s), worst)
                })
                .collect(),
        });
    }
    RateChart {
        title: format!("{}: sessions corrupted per load test", run.gpu),
        x_desc: "concurrent sessions (graph batch)".into(),
        y_desc: "sessions corrupted".into(),
        curves,
    }
}

/// Sessions corrupted per arm and slowdown (a column per concurrency), and the replays that
/// left a wrong row: every measured point, for the reader who wants the numbers.
pub fn results_table(ps: &[ArmPoint]) -> Table {
    let sessions = distinct(ps.iter().map(|p| p.sessions));
    let mut header = vec!["arm".to_string(), "store".to_string()];
    header.extend(sessions.iter().map(|s| format!("{s} sessions")));
    header.push("replays with a wrong row".to_string());
    let mut t = Table::new(header);
    for stretch in distinct(ps.iter().map(|p| p.side_stretch)) {
        for arm in distinct(ps.iter().map(|p| p.arm.clone())) {
            let row: Vec<&ArmPoint> = ps
                .iter()
                .filter(|p| p.arm == arm && p.side_stretch == stretch)
                .collect();
            let mut cells = vec![arm.clone(), format!("×{stretch}")];
            for &s in &sessions {
                cells.push(
                    row.iter()
                        .find(|p| p.sessions == s)
                        .map_or("–".into(), |p| format!("{:.1} %", p.percent())),
                );
            }
            let (racing, replays) = row
                .iter()
                .fold((0, 0), |(a, b), p| (a + p.racing_replays, b + p.replays));
            cells.push(format!("{racing} of {replays}"));
            t.push(cells);
        }
    }
    t
}

/// The chapter's verdict on the ordering claims, from the points: whether the overlap arm
/// corrupted at every point and every other arm stayed clean at every one. The prose's claim
/// is written from the data, so a rerun that broke it would say so.
pub fn claims_verdict(ps: &[ArmPoint]) -> Markdown {
    let overlap: Vec<&ArmPoint> = ps.iter().filter(|p| p.arm == "overlap").collect();
    let others: Vec<&ArmPoint> = ps.iter().filter(|p| p.arm != "overlap").collect();
    let lo = overlap
        .iter()
        .map(|p| p.percent())
        .fold(f64::INFINITY, f64::min);
    let hi = overlap.iter().map(|p| p.percent()).fold(0.0, f64::max);
    let all_raced = overlap
        .iter()
        .filter(|p| p.racing_replays == p.replays)
        .count();
    let overlap_positive = overlap.iter().all(|p| p.corrupted > 0);
    let clean = others
        .iter()
        .filter(|p| p.corrupted == 0 && p.racing_replays == 0)
        .count();
    let other_arms = distinct(others.iter().map(|p| p.arm.clone())).join(", ");
    let other_replays: u64 = others.iter().map(|p| p.replays).sum();
    let verdict = if overlap_positive && clean == others.len() {
        "**The ordering claims hold on the GPU.**"
    } else {
        "**The ordering claims do not all hold on the GPU**; the table above shows where."
    };
    Markdown(format!(
        "{verdict} The overlap arm corrupted sessions at {} of its {} points, between {lo:.1} % and \
         {hi:.1} % of them; at {all_raced} of those points every replay left a wrong row. The other \
         arms ({other_arms}) were clean at {clean} of their {} points: not one wrong row in \
         {other_replays} replays, at every concurrency and slowdown.",
        overlap.iter().filter(|p| p.corrupted > 0).count(),
        overlap.len(),
        others.len(),
    ))
}

/// Where the layout the GPU ran (the model's older allocator rules) differs from PyTorch's,
/// point by point, with what was measured there. An error if the logits ever leave the
/// transient between the two, since the verdicts rest on them lying on it.
pub fn layout_note(book: &Book, ps: &[ArmPoint]) -> Result<Markdown, BookError> {
    let mut moved = vec![];
    for s in distinct(ps.iter().map(|p| p.sessions)) {
        let mut arms = vec![];
        let mut change = None;
        for (arm, name) in distinct(ps.iter().map(|p| (p.arm.clone(), p.config.clone()))) {
            let cfg = book.graphrace_config(&name)?;
            let then = on_transient(&older_layout(&cfg, s)?);
            let now = on_transient(&Captured::new(&cfg, s)?.graph);
            if then == now {
                continue;
            }
            let logits = |v: &[String]| v.iter().any(|t| t == "logits");
            if logits(&then) != logits(&now) {
                return Err(format!("{arm} at {s}: the logits moved off the transient").into());
            }
            let worst = (ps.iter())
                .filter(|p| p.arm == arm && p.sessions == s)
                .map(ArmPoint::percent)
                .fold(0.0, f64::max);
            arms.push(format!("{arm} up to {worst:.1} %"));
            change = Some((then.join(" and "), now.join(" and ")));
        }
        if let Some((then, now)) = change {
            moved.push(format!(
                "at {s} sessions the GPU had {then} on `index_k`, where PyTorch's rules put {now} \
                 (measured: {})",
                listed(&arms, ", ")
            ));
        }
    }
    Ok(Markdown(if moved.is_empty() {
        "The GPU laid the tensors out by the model's older allocator rules; at every point above \
         the same tensors share `index_k` under PyTorch's."
            .to_string()
    } else {
        format!(
            "The GPU laid the tensors out by the model's older allocator rules (large segments \
             rounded to 2 MiB): {}. The logits lie on the transient in both layouts, so no verdict \
             moves.",
            listed(&moved, "; "),
        )
    }))
}

/// The overlap arm at the smallest slowdown beside the calibrated model's rate at the same
/// concurrency and the incident's rate at 60 sessions: three rates that answer different
/// questions, side by side.
pub fn vs_model_table(book: &Book, ps: &[ArmPoint]) -> Result<Table, BookError> {
    let seed = book.experiment("incident")?.rate;
    let cfg = book.graphrace_config("incident")?;
    let mut t = Table::new([
        "sessions",
        "GPU: sessions corrupted",
        "GPU: replays with a wrong row",
        "model: sessions corrupted",
        "model: replays with a collision",
        "incident",
    ]);
    for p in overlap_at_first_stretch(ps) {
        let m = Captured::new(&cfg, p.sessions)?.rate(Timing::default(), Workload::default());
        t.push([
            p.sessions.to_string(),
            format!("{:.1} %", p.percent()),
            format!("{} of {}", p.racing_replays, p.replays),
            format!("{:.1} %", 100.0 * m.fraction()),
            format!("{} of {}", m.racing_replays, m.replays),
            if p.sessions == 60 {
                seed.clone()
            } else {
                "–".into()
            },
        ]);
    }
    Ok(t)
}

/// What each kernel of `config`'s step moves per session on the GPU (the sweep kernel reads
/// word `c % input row` for each output word `c`), beside its nominal cost at `sessions`.
pub fn bytes_table(config: &graphrace::Config, sessions: u32) -> Table {
    let p = graphrace::decode_step(config, sessions);
    let mut t = Table::new([
        "kernel".to_string(),
        "stream".to_string(),
        "row read".to_string(),
        "row written".to_string(),
        format!("nominal cost at {sessions} sessions"),
    ]);
    for op in &p.ops {
        let graphrace::program::Op::Launch(k) = op else {
            continue;
        };
        let row = |ts: &[graphrace::program::TensorId]| {
            ts.iter().map(|t| p.tensors[t.0].row_bytes).sum::<u64>()
        };
        // The sweep kernel reads word `c % input row` for each output word `c`.
        let (read, written) = (row(&k.reads), row(&k.writes));
        t.push([
            k.name.clone(),
            k.stream.name().to_string(),
            bytes::show(read.min(written)),
            bytes::show(written),
            format!("{:.1} µs", k.cost.at(sessions)),
        ]);
    }
    t
}

/// Wall time per replay on the GPU at the smallest slowdown, per arm, beside the model's
/// nominal step and margin (no jitter) for the incident's configuration: how far the GPU's
/// replays are from the model's step.
pub fn time_table(book: &Book, ps: &[ArmPoint]) -> Result<Table, BookError> {
    let still = Timing {
        jitter_sigma: 0.0,
        ..Timing::default()
    };
    let first = ps
        .iter()
        .map(|p| p.side_stretch)
        .fold(f64::INFINITY, f64::min);
    let arms = distinct(ps.iter().map(|p| p.arm.clone()));
    let mut header = vec![
        "sessions".to_string(),
        "model: nominal step".to_string(),
        "model: nominal margin".to_string(),
    ];
    header.extend(arms.iter().map(|a| format!("GPU: {a}")));
    let mut t = Table::new(header);
    let incident = book.graphrace_config("incident")?;
    for s in distinct(ps.iter().map(|p| p.sessions)) {
        let c = Captured::new(&incident, s)?;
        let spans = Replayer::new(&c.graph, still).schedule(Draw {
            seed: 0,
            trial: 0,
            replay: 0,
        });
        let at = |name: &str| c.graph.node(name).map(|i| spans[i]);
        let (store, head) = (
            at("index_k_store").ok_or("no store")?,
            at("lm_head").ok_or("no lm_head")?,
        );
        let step = spans.iter().map(|x| x.end_us).fold(0.0, f64::max);
        let mut cells = vec![
            s.to_string(),
            format!("{step:.0} µs"),
            format!("{:.1} µs", head.start_us - store.end_us),
        ];
        for a in &arms {
            cells.push(
                ps.iter()
                    .find(|p| p.arm == *a && p.sessions == s && p.side_stretch == first)
                    .map_or("–".into(), |p| format!("{:.0} µs", p.us_per_replay)),
            );
        }
        t.push(cells);
    }
    Ok(t)
}

/// Why the wall times are not the fixes' costs, from the points: at how many points the
/// overlap arm was the slowest and the recorded arm the fastest, and the arms' time ratios.
pub fn wall_time_note(ps: &[ArmPoint]) -> Markdown {
    let sessions = distinct(ps.iter().map(|p| p.sessions));
    let stretches = distinct(ps.iter().map(|p| p.side_stretch));
    let points_n = sessions.len() * stretches.len();
    // At how many (sessions, slowdown) points each arm was the slowest / the fastest.
    let count = |arm: &str, slowest: bool| -> usize {
        sessions
            .iter()
            .flat_map(|&s| stretches.iter().map(move |&x| (s, x)))
            .filter(|&(s, x)| {
                let here: Vec<&ArmPoint> = ps
                    .iter()
                    .filter(|p| p.sessions == s && p.side_stretch == x)
                    .collect();
                let best = here.iter().map(|p| p.us_per_replay).fold(
                    if slowest { 0.0 } else { f64::INFINITY },
                    |a, b| {
                        if slowest { a.max(b) } else { a.min(b) }
                    },
                );
                here.iter().any(|p| p.arm == arm && p.us_per_replay == best)
            })
            .count()
    };
    let ratio = |a: &str, b: &str| -> f64 {
        let at = |arm: &str| {
            ps.iter()
                .filter(|p| p.arm == arm)
                .map(|p| p.us_per_replay)
                .sum::<f64>()
        };
        at(a) / at(b)
    };
    Markdown(format!(
        "Do not read these wall times as the cost of each fix. The overlap arm was the slowest at \
         {} of the {points_n} points although it runs the recorded arm's kernels ({:.1}× its time \
         over all points): the verify kernel does an atomic OR for every word that differs, so a \
         replay with many wrong rows costs more to check. The recorded arm was the fastest at {} \
         of the {points_n} points; the serialized arm took {:.1}× its time \
         ([The smallest fix, isolated](smallest-fix.md) weighs that trade in the model).",
        count("overlap", true),
        ratio("overlap", "recorded"),
        count("recorded", false),
        ratio("serialized", "recorded"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_reads_the_record_names_and_every_one_is_required() {
        let mut point = serde_json::json!({
            "arm": "overlap", "config": "incident", "sessions": 36, "side_stretch": 1.0,
            "corrupted": 135, "observed": 180, "rate": 0.75, "racing_replays": 1000,
            "replays": 1000, "us_per_replay": 1934.9
        });
        let p: ArmPoint = serde_json::from_value(point.clone()).unwrap();
        assert_eq!(
            (p.arm.as_str(), p.sessions, p.racing_replays),
            ("overlap", 36, 1000)
        );
        assert_eq!(p.percent(), 75.0);
        point.as_object_mut().unwrap().remove("racing_replays");
        let e = serde_json::from_value::<ArmPoint>(point).unwrap_err();
        assert!(e.to_string().contains("`racing_replays`"), "{e}");
    }

    fn recorded_points() -> (ArmsRecord, Vec<ArmPoint>) {
        let run = Book::repository().graphrace_gpu().unwrap();
        let ps = run.results.clone();
        (run, ps)
    }

    #[test]
    fn the_provenance_names_the_gpu_and_every_setting() {
        let (run, _) = recorded_points();
        let t = provenance_table(&run);
        assert_eq!(t.rows().len(), 12);
        assert!(t.rows()[2][1].contains("H200"), "{:?}", t.rows()[2]);
        // Every slowdown is written as a factor, as the file writes it.
        assert!(t.rows()[8][1].starts_with("×1.0, "), "{:?}", t.rows()[8]);
    }

    #[test]
    fn only_the_overlap_arm_races_in_the_model_at_60_sessions() {
        let (_, ps) = recorded_points();
        let t = arms_table(&Book::repository(), &ps, 60).unwrap();
        assert_eq!(t.rows().len(), 4, "{:?}", t.rows());
        for row in t.rows() {
            let racy = row[4] != "no race";
            assert_eq!(racy, row[0] == "overlap", "{row:?}");
        }
        // The serialized control shares bytes with index_k and still does not race.
        let serialized = t.rows().iter().find(|r| r[0] == "serialized").unwrap();
        assert_ne!(serialized[3], "nothing", "{serialized:?}");
    }

    #[test]
    fn the_results_hold_the_ordering_claims() {
        let (run, ps) = recorded_points();
        let verdict = claims_verdict(&ps).0;
        assert!(
            verdict.starts_with("**The ordering claims hold on the GPU.**"),
            "{verdict}"
        );
        let t = results_table(&ps);
        let arms = distinct(ps.iter().map(|p| p.arm.clone())).len();
        let stretches = distinct(ps.iter().map(|p| p.side_stretch)).len();
        assert_eq!(t.rows().len(), arms * stretches);
        for row in t.rows() {
            let clean = row[2..row.len() - 1].iter().all(|c| c == "0.0 %");
            assert_eq!(clean, row[0] != "overlap", "{row:?}");
        }
        let chart = rates_chart(&run, &ps);
        assert_eq!(chart.curves.len(), stretches + arms - 1);
        assert!(chart.title.contains("H200"), "{}", chart.title);
    }

    #[test]
    fn the_older_layout_keeps_the_logits_on_the_transient() {
        let (_, ps) = recorded_points();
        let note = layout_note(&Book::repository(), &ps).unwrap().0;
        assert!(note.starts_with("The GPU laid the tensors out"), "{note}");
    }

    #[test]
    fn the_gpu_rate_sits_far_above_the_model_and_the_incident() {
        let (_, ps) = recorded_points();
        let overlap = overlap_at_first_stretch(&ps);
        let t = vs_model_table(&Book::repository(), &ps).unwrap();
        assert_eq!(t.rows().len(), overlap.len());
        let at60 = t.rows().iter().find(|r| r[0] == "60").unwrap();
        assert_eq!(
            at60[5],
            Book::repository().experiment("incident").unwrap().rate
        );
        let pct = |c: &str| c.trim_end_matches(" %").parse::<f64>().unwrap();
        assert!(pct(&at60[1]) > 2.0 * pct(&at60[3]), "{at60:?}");
    }

    #[test]
    fn the_bytes_and_times_name_the_store_and_every_point() {
        let (_, ps) = recorded_points();
        let cfg = Book::repository().graphrace_config("incident").unwrap();
        let t = bytes_table(&cfg, 60);
        let kernels: Vec<&str> = t.rows().iter().map(|r| r[0].as_str()).collect();
        assert!(kernels.contains(&"index_k_store") && kernels.contains(&"lm_head"));
        let t = time_table(&Book::repository(), &ps).unwrap();
        assert_eq!(
            t.rows().len(),
            distinct(ps.iter().map(|p| p.sessions)).len()
        );
        let note = wall_time_note(&ps).0;
        assert!(
            note.contains("The overlap arm was the slowest at"),
            "{note}"
        );
    }
}
