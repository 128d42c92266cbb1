//! Part II's static check swept over concurrencies, as *Proving it without running it* reads
//! it.

use std::ops::RangeInclusive;

use cell_output::Markdown;
use graphrace::driver::{self, Comparison, DriverGraph, Witness};
use graphrace::program::Op;
use graphrace::suite::{Judged, SuiteRecord, Verdict};
use graphrace::{Captured, Config, Program, Stream, Timing, Workload};
use highwater_plot::{Lane, Mark, Timeline};

use crate::Book;
use crate::BookError;
use crate::bytes::show;
use crate::text::listed;

/// Where the static check flags a configuration, concurrency by concurrency.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// The session counts at which the captured graph has a race.
    pub races: Vec<u32>,
    /// Those at which it has a latent hazard (an unordered, unrecorded cross-stream free).
    pub latent: Vec<u32>,
}

/// The static check of `config`'s graph captured at every session count of `sessions`.
pub fn sweep(config: &Config, sessions: RangeInclusive<u32>) -> Result<Sweep, BookError> {
    sweep_each(config, sessions, |_, _| {})
}

/// [`sweep`], and a load test over the same captured graphs: the session counts at which
/// replaying under `timing` and `workload` corrupted at least one session, what a load test
/// sees against what the check finds without replaying.
pub fn sweep_and_load_test(
    config: &Config,
    sessions: RangeInclusive<u32>,
    timing: Timing,
    workload: Workload,
) -> Result<(Sweep, Vec<u32>), BookError> {
    let mut corrupted = vec![];
    let check = sweep_each(config, sessions, |s, captured| {
        if captured.rate(timing, workload).corrupted > 0 {
            corrupted.push(s);
        }
    })?;
    Ok((check, corrupted))
}

/// [`sweep`], handing each session count's captured graph to `each` as well.
fn sweep_each(
    config: &Config,
    sessions: RangeInclusive<u32>,
    mut each: impl FnMut(u32, &Captured),
) -> Result<Sweep, BookError> {
    let mut out = Sweep::default();
    for s in sessions {
        let captured = Captured::new(config, s)?;
        let report = captured.check();
        if report.races().next().is_some() {
            out.races.push(s);
        }
        if report.findings.iter().any(|f| !f.is_race()) {
            out.latent.push(s);
        }
        each(s, &captured);
    }
    Ok(out)
}

/// The session counts of `sessions` at which `config`'s transient `index_k` is small enough
/// for the allocator's small segments; at each, attention's output must land on its block
/// (the chapter's claim), else an error says where it does not.
pub fn small_transient(
    config: &Config,
    sessions: RangeInclusive<u32>,
) -> Result<Vec<u32>, BookError> {
    let mut small = vec![];
    for s in sessions {
        let g = Captured::new(config, s)?.graph;
        let at = |name: &str| g.placements[g.tensor(name)?.0].clone();
        let k = at("index_k").ok_or("index_k not placed")?;
        let attn = at("attn").ok_or("attn not placed")?;
        if k.range.end - k.range.start <= graphrace::pool::SMALL_LIMIT {
            if !(attn.range.start < k.block.end && k.block.start < attn.range.end) {
                let e = format!("attention's output is not on the transient at {s} sessions");
                return Err(e.into());
            }
            small.push(s);
        }
    }
    Ok(small)
}

/// The tensors of `graph` that share bytes with the transient `index_k`, in the program's
/// order; empty if the step has no `index_k`.
pub fn on_transient(graph: &graphrace::Graph) -> Vec<String> {
    (graph.sharing_bytes_with("index_k").into_iter())
        .map(|t| graph.tensor_name(t).to_string())
        .collect()
}

/// `config`'s step at `sessions` captured under the allocator rules the GPU records were laid
/// out by (every large segment rounded to 2 MiB; see `graphrace::pool::Rules`).
pub fn older_layout(config: &Config, sessions: u32) -> Result<graphrace::Graph, BookError> {
    let program = graphrace::decode_step(config, sessions);
    graphrace::capture::capture_with(&program, graphrace::pool::Rules::Rounded2MiB)
        .map_err(|e| e.to_string().into())
}

/// A graph CUDA built, set beside the model's graph at the same configuration and load.
pub struct AgainstModel {
    /// The model's graph.
    pub model: Captured,
    /// The order of their kernels compared.
    pub order: Comparison,
    /// Races on the driver's graph.
    pub on_driver: usize,
    /// Races on the model's.
    pub on_model: usize,
    /// Whether the GPU placed the tensors where the model places them now.
    pub same_layout: bool,
}

/// The driver's graph `g` against the model's graph of `config` at `g`'s load: the order of
/// their kernels, each graph's races, and whether the GPU placed the tensors as the model does.
pub fn against_model(config: &Config, g: &DriverGraph) -> Result<AgainstModel, BookError> {
    let model = Captured::new(config, g.sessions)?;
    Ok(AgainstModel {
        order: driver::compare(g, &model.graph),
        on_driver: driver::check(g).len(),
        on_model: model.check().races().count(),
        same_layout: driver::layout_differences(g, &model.graph).is_empty(),
        model,
    })
}

/// One row of the chapter's table of the graphs CUDA built: the driver's graph `g` beside the
/// model's.
pub fn driver_graph_row(g: &DriverGraph, a: &AgainstModel) -> [String; 8] {
    let AgainstModel {
        model,
        order,
        on_driver,
        on_model,
        same_layout,
    } = a;
    let model = &model.graph;
    let differs = order.only_driver_orders.len() + order.only_model_orders.len();
    [
        g.config.clone(),
        g.nodes.len().to_string(),
        g.edges.len().to_string(),
        format!("{} of {}", order.matched, model.nodes.len()),
        if order.agrees() {
            "same".to_string()
        } else {
            format!("differs in {differs} pairs")
        },
        on_driver.to_string(),
        on_model.to_string(),
        if *same_layout {
            "the model's".to_string()
        } else {
            "older rules".to_string()
        },
    ]
}

/// The paragraph under the table of the graphs CUDA built: every driver's graph holds the
/// model's kernels in its order plus the replay counter, and where the layouts agree so do the
/// races (an error says which graph breaks either); the graphs whose races moved with the
/// allocator's rules are named.
pub fn driver_graph_text(book: &Book) -> Result<Markdown, BookError> {
    let dump = book.graph_dump(crate::load::GRAPH_DUMP)?;
    // What the sentences below say, checked on every graph.
    let mut moved = vec![];
    for g in &dump.graphs {
        let a = against_model(&book.graphrace_config(&g.config)?, g)?;
        let (c, on_driver, on_model) = (&a.order, a.on_driver, a.on_model);
        if !c.agrees() || c.harness.len() != 1 || (a.same_layout && on_driver != on_model) {
            return Err(format!(
                "`{}`: the driver's graph is not the model's: {c:?}",
                g.config
            )
            .into());
        }
        if on_driver != on_model {
            moved.push(format!(
                "`{}` ({on_driver} on the GPU's graph, {on_model} now)",
                g.config
            ));
        }
    }
    let g = dump
        .graph("incident")
        .ok_or("no incident graph in the dump")?;
    Ok(Markdown(format!(
        "Every graph holds the model's kernels in the model's order, plus the arm's replay \
         counter, at {} sessions on the {} (driver {}). The GPU arm lays tensors out where the \
         model's allocator puts them, and the dump predates its move to PyTorch's segment sizes \
         (it rounded every large segment to {}). Where the layouts agree, so do the races. They \
         differ for {}: the fp8 transient, under {}, now gets a {} segment that the logits fit.",
        g.sessions,
        dump.gpu,
        dump.driver,
        show(graphrace::pool::ROUND_LARGE),
        listed(&moved, " and "),
        show(graphrace::pool::MIN_LARGE_ALLOC),
        show(graphrace::pool::LARGE_SEGMENT),
    )))
}

/// The witness `w` of a race on the driver's graph `g` drawn as a timeline: one lane per
/// stream (and one for the harness's replay counter), each node's kernel and stream found
/// through the host op of `program` that launched it, the two racing accesses marked.
pub fn witness_timeline(
    g: &DriverGraph,
    w: &Witness,
    program: &Program,
) -> Result<Timeline, BookError> {
    let kernel = |node: usize| match g.nodes[node].host_op.and_then(|op| program.ops.get(op)) {
        Some(Op::Launch(k)) => Some((k.name.clone(), k.stream)),
        _ => None,
    };
    let lane = |label: &str, stream: Option<Stream>| Lane {
        label: label.into(),
        spans: (w.schedule.iter())
            .filter_map(|s| {
                let k = kernel(s.node);
                (k.as_ref().map(|k| k.1) == stream).then(|| {
                    let name = k.map_or("replay counter".to_string(), |k| k.0);
                    (name, f64::from(s.start), f64::from(s.end))
                })
            })
            .collect(),
    };
    let step = w
        .schedule
        .iter()
        .find(|s| s.node == w.first.node)
        .ok_or("no slot")?;
    Ok(Timeline {
        title: "A schedule of the driver's graph in which the race happens".into(),
        x_desc: "step (one kernel each)".into(),
        lanes: vec![
            lane("harness", None),
            lane("main", Some(Stream::Main)),
            lane("side", Some(Stream::Side)),
        ],
        marks: vec![Mark {
            label: format!(
                "{} over {}, at the same step",
                w.second.tensor, w.first.tensor
            ),
            start: f64::from(step.start),
            end: f64::from(step.end),
        }],
    })
}

/// How the suite's table writes a verdict: the check's call against what the GPU did.
pub fn verdict_label(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::FlaggedCorrupted => "flagged, corrupted",
        Verdict::FlaggedClean => "flagged, never corrupted",
        Verdict::CleanCorrupted => "MISSED: clean, corrupted",
        Verdict::CleanClean => "clean, never corrupted",
    }
}

/// One row of the chapter's suite table: races (the driver's graph's; the model's, starred,
/// where nothing was captured), latent hazards, sessions and replays corrupted on the GPU, the
/// margin, the verdict, and the model's races now where the GPU ran the older layout.
pub fn suite_row(j: &Judged) -> [String; 8] {
    [
        j.variant.clone(),
        match j.driver_races {
            Some(n) => n.to_string(),
            None => format!("{}*", j.model_races),
        },
        j.latent.to_string(),
        format!("{} of {}", j.gpu.corrupted, j.gpu.observed),
        format!("{} of {}", j.gpu.racing_replays, j.gpu.replays),
        j.margin_us.map_or("–".into(), |m| format!("{m:+.1}")),
        verdict_label(j.verdict).to_string(),
        if j.moved.is_empty() {
            String::new()
        } else {
            format!("{} race(s)", j.model_races)
        },
    ]
}

/// The paragraph under the confusion table: how the suite was replayed, which variants the
/// check called clean yet the GPU corrupted, and how the margin's sign splits the flagged ones
/// (the range of margins and of replays corrupted on each side).
pub fn suite_text(book: &Book) -> Result<Markdown, BookError> {
    let judged = book.judged_suite()?;
    let record: SuiteRecord = book.json(crate::load::SUITE_RESULTS[0])?;
    let of = |v: Verdict| -> Vec<&Judged> { judged.iter().filter(|j| j.verdict == v).collect() };
    let missed = of(Verdict::CleanCorrupted);
    let flagged: Vec<&Judged> = (judged.iter())
        .filter(|j| matches!(j.verdict, Verdict::FlaggedCorrupted | Verdict::FlaggedClean))
        .collect();
    let names =
        |js: &[&Judged]| -> Vec<String> { js.iter().map(|j| format!("`{}`", j.variant)).collect() };
    // The flagged variants by the sign of their margin.
    let (closed, open): (Vec<&Judged>, Vec<_>) =
        (flagged.iter().copied()).partition(|j| j.margin_us.is_some_and(|m| m < 0.0));
    let span = |js: &[&Judged]| {
        let m = js.iter().filter_map(|j| j.margin_us);
        let lo = m.clone().fold(f64::INFINITY, f64::min);
        (lo, m.fold(f64::NEG_INFINITY, f64::max))
    };
    let least_closed = (closed.iter().map(|j| j.gpu.racing_replays).min()).unwrap_or(0);
    let open_corrupted: Vec<&Judged> = open
        .iter()
        .copied()
        .filter(|j| j.gpu.corrupted > 0)
        .collect();
    let most_open = open.iter().map(|j| j.gpu.racing_replays).max().unwrap_or(0);
    let ((closed_lo, closed_hi), (open_lo, open_hi)) = (span(&closed), span(&open));
    Ok(Markdown(format!(
        "On {} variants, replayed {} times each ({} trials of {}) on the {} under load, {} of the {} \
         the check calls clean corrupted{}. Of the {} it flags, the margin (from medians over {} \
         timed replays) decides: negative for {}, between {closed_lo:+.0} and {closed_hi:+.0} µs, \
         each corrupted in at least {least_closed} of its {} replays; positive for {} variants, \
         between {open_lo:+.0} and {open_hi:+.0} µs, at most {most_open} of {} corrupted{}.",
        judged.len(),
        record.trials * record.replays_per_trial,
        record.trials,
        record.replays_per_trial,
        record.gpu,
        if missed.is_empty() { "none" } else { "some" },
        judged.len() - flagged.len(),
        if missed.is_empty() {
            String::new()
        } else {
            format!(": {}", listed(&names(&missed), " and "))
        },
        flagged.len(),
        record.timed_replays,
        listed(&names(&closed), " and "),
        record.trials * record.replays_per_trial,
        open.len(),
        record.trials * record.replays_per_trial,
        if open_corrupted.is_empty() {
            String::new()
        } else {
            format!(
                " ({}: the medians describe the typical replay, not every one)",
                listed(&names(&open_corrupted), " and ")
            )
        },
    )))
}

/// The source of the property tests the chapter's trust rests on.
pub const PROPERTY_TESTS: &str = "crates/graphrace/tests/graphrace.rs";

/// The two properties the check is tested for, as a Markdown list whose parameters (the
/// jitter, as a multiple of the calibrated one; the range of sessions) are read from the
/// tests' own source, [`PROPERTY_TESTS`], so the text cannot drift from what is tested.
pub fn trust_text(book: &Book) -> Result<Markdown, BookError> {
    let src = book.read(PROPERTY_TESTS)?;
    // The number written after `key`, in the first item after `from`.
    let after = |from: &str, key: &str| -> Result<String, BookError> {
        let rest = &src[src.find(from).ok_or(format!("no `{from}` in the tests"))?..];
        let rest = &rest[rest.find(key).ok_or(format!("no `{key}` after `{from}`"))? + key.len()..];
        Ok(rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect())
    };
    fn number<T: std::str::FromStr<Err: std::fmt::Display>>(text: &str) -> Result<T, BookError> {
        text.trim().parse().map_err(|e| BookError::Parse {
            path: PROPERTY_TESTS.into(),
            reason: format!("`{text}`: {e}"),
        })
    }
    let wild: f64 = number(&after("const WILD", "jitter_sigma:")?)?;
    let times = wild / Timing::default().jitter_sigma;
    let times = if (times - times.round()).abs() < 1e-9 {
        format!("{times:.0}")
    } else {
        format!("{times:.1}")
    };
    let fixes = "fn the_fixes_are_never_flagged_and_never_corrupt";
    let from: u32 = number(&after(fixes, "sessions in ")?)?;
    let until: u32 = number(&after(fixes, "u32..")?)?;
    Ok(Markdown(format!(
        "- **Every collision was flagged.** Whatever pair collides in any replay, under a jitter \
           {times} times the calibrated one, the check reported it without replaying.\n\
         - **The fixes are never flagged.** With every cross-stream use recorded there is no reuse \
           race and no latent hazard; with one stream nothing collides; the decode step with overlap \
           off, eager or `record_stream` is clean and never corrupts, from {from} to {} sessions, \
           with any other switch.",
        until - 1,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_see_corruption_only_where_the_check_finds_a_race() {
        let config = Book::repository().graphrace_config("incident").unwrap();
        let load_test = Workload {
            trials: 10,
            ..Workload::default()
        };
        let (sessions, timing) = (1..=64, Timing::default());
        let (check, seen) = sweep_and_load_test(&config, sessions, timing, load_test).unwrap();
        // Every collision is flagged; the load test misses races timing leaves room for.
        assert!(!seen.is_empty(), "{check:?}");
        assert!(
            seen.iter().all(|s| check.races.contains(s)),
            "{seen:?} {check:?}"
        );
        assert!(seen.len() < check.races.len(), "{seen:?} {check:?}");
    }

    #[test]
    fn the_driver_graphs_hold_the_model_kernels_in_its_order() {
        let book = Book::repository();
        let dump = book.graph_dump(crate::load::GRAPH_DUMP).unwrap();
        for g in &dump.graphs {
            let a = against_model(&book.graphrace_config(&g.config).unwrap(), g).unwrap();
            let row = driver_graph_row(g, &a);
            assert_eq!(row[4], "same", "{row:?}");
            assert_eq!(
                row[3],
                format!("{0} of {0}", a.model.graph.nodes.len()),
                "{row:?}"
            );
        }
        // The text's own checks pass, and it names the graphs whose races moved.
        let text = driver_graph_text(&book).unwrap().0;
        assert!(text.contains("They differ for `"), "{text}");
    }

    #[test]
    fn the_witness_runs_the_store_and_the_lm_head_at_one_step() {
        let book = Book::repository();
        let dump = book.graph_dump(crate::load::GRAPH_DUMP).unwrap();
        let g = dump.graph("incident").unwrap();
        let races = driver::check(g);
        let [w] = races.as_slice() else {
            panic!("{} races on the incident's graph", races.len())
        };
        let config = book.graphrace_config("incident").unwrap();
        let program = graphrace::decode_step(&config, g.sessions);
        let t = witness_timeline(g, w, &program).unwrap();
        let at = |lane: usize, name: &str| {
            let span = t.lanes[lane].spans.iter().find(|s| s.0 == name);
            span.map(|s| (s.1, s.2))
                .unwrap_or_else(|| panic!("no {name}: {t:?}"))
        };
        assert_eq!(t.lanes.len(), 3);
        assert_eq!(at(2, "index_k_store"), at(1, "lm_head"));
        assert_eq!(t.lanes[0].spans.len(), 1, "one replay counter: {t:?}");
        assert_eq!((t.marks[0].start, t.marks[0].end), at(2, "index_k_store"));
    }

    #[test]
    fn no_variant_the_check_calls_clean_corrupted_on_the_gpu() {
        let book = Book::repository();
        let judged = book.judged_suite().unwrap();
        let rows: Vec<[String; 8]> = judged.iter().map(suite_row).collect();
        assert!(rows.len() > 10, "{rows:?}");
        assert!(rows.iter().all(|r| !r[6].starts_with("MISSED")), "{rows:?}");
        assert!(
            rows.iter().any(|r| r[6] == "flagged, corrupted"),
            "{rows:?}"
        );
        let text = suite_text(&book).unwrap().0;
        assert!(text.contains(" under load, none of the "), "{text}");
    }

    #[test]
    fn the_trust_text_reads_the_tests_parameters() {
        let text = trust_text(&Book::repository()).unwrap().0;
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains(" times the calibrated one"), "{text}");
        assert!(text.contains(" sessions, with any other switch."), "{text}");
    }
}
