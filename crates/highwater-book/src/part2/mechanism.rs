//! *The mechanism* (`src/part-2/mechanism.md`): what its cells compute.
//!
//! The chapter's cells build the incident's decode step, capture it and replay it; those calls
//! stay on the page. What lives here is the plumbing around them: a host program or a replay
//! turned into a table or a timeline, a tensor looked up by name, the incident's load, and the
//! paragraphs that read the configurations' shapes and segment sizes (each checking the claims
//! it makes).

use cell_output::{Markdown, Table};
use graphrace::pool::{LARGE_SEGMENT, MIN_LARGE_ALLOC, ROUND_LARGE, Request};
use graphrace::program::{Home, Op, TensorId};
use graphrace::replay::Span;
use graphrace::{
    Captured, Costs, Draw, Graph, Program, Rate, Replay, Replayer, Stream, Timing, decode_step,
};
use highwater_plot::{Curve, Lane, Mark, Timeline};

use crate::Book;
use crate::BookError;
use crate::bytes::{self, Unit};
use crate::experiments::Experiment;
use crate::text::grouped;

/// The configurations of the rates figure, in legend order.
pub const CONFIGS: [&str; 7] = [
    "incident",
    "logits-cached",
    "clone",
    "fp8",
    "eager",
    "overlap-off",
    "record-stream",
];

/// The concurrencies swept: graph batch sizes up to 72 sessions.
pub fn sessions() -> impl Iterator<Item = u32> {
    (6..=72).step_by(6)
}

/// Offsets and sizes in the pool, in one unit so that a column reads as positions.
pub fn mib(bytes: u64) -> String {
    bytes::in_unit(bytes, Unit::MiB)
}

/// The tensor of `p` named `name`: the chapter names tensors as the configurations do.
fn tensor(p: &Program, name: &str) -> Result<TensorId, BookError> {
    Ok(p.tensor(name).ok_or(format!("no tensor `{name}`"))?)
}

/// One session's row of tensor `name` in `p`, in bytes.
pub fn row_bytes(p: &Program, name: &str) -> Result<u64, BookError> {
    Ok(p.tensors[tensor(p, name)?.0].row_bytes)
}

/// All of tensor `name` in `p` (its row times the sessions), in bytes.
pub fn tensor_bytes(p: &Program, name: &str) -> Result<u64, BookError> {
    Ok(p.bytes(tensor(p, name)?))
}

/// The sessions of the incident's load test, as the incident report gives its load (`60
/// sessions × 4 rounds`): the load the chapter's tables and figures are drawn at.
pub fn incident_sessions(book: &Book) -> Result<u32, BookError> {
    let incident = book.experiment("incident")?;
    match incident.sessions()[..] {
        [sessions] => Ok(sessions),
        _ => Err(format!(
            "the incident's load `{}` is not one session count",
            incident.load
        )
        .into()),
    }
}

/// The host program `p` as a table, one row per host action in issue order: the action, its
/// stream, the tensors it names (a launch: reads → writes) and the bytes an allocation takes
/// at `p`'s sessions (named in the column's header).
pub fn program_table(p: &Program) -> Table {
    let bytes = format!("bytes at {} sessions", p.sessions);
    let mut t = Table::new(["#", "host action", "stream", "tensor(s)", bytes.as_str()]);
    for (i, op) in p.ops.iter().enumerate() {
        let (what, stream, tensors, bytes) = match op {
            Op::Alloc { tensor, stream } => (
                "allocate",
                stream.name(),
                p.tensors[tensor.0].name.clone(),
                mib(p.bytes(*tensor)),
            ),
            Op::Free { tensor } => (
                "free (last reference dropped)",
                "",
                p.tensors[tensor.0].name.clone(),
                String::new(),
            ),
            Op::RecordStream { tensor, stream } => (
                "record_stream",
                stream.name(),
                p.tensors[tensor.0].name.clone(),
                String::new(),
            ),
            Op::Wait { waiter, on: _ } => (
                if *waiter == Stream::Side {
                    "fork: wait on main"
                } else {
                    "join: wait on side"
                },
                waiter.name(),
                String::new(),
                String::new(),
            ),
            Op::Launch(k) => {
                let names = |ts: &[TensorId]| {
                    ts.iter()
                        .map(|t| p.tensors[t.0].name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                (
                    "launch",
                    k.stream.name(),
                    format!("{}: {} → {}", k.name, names(&k.reads), names(&k.writes)),
                    String::new(),
                )
            }
        };
        t.push([
            i.to_string(),
            what.to_string(),
            stream.to_string(),
            tensors,
            bytes,
        ]);
    }
    t
}

/// The paragraph on the served model's shapes, read from the incident's and fp8's
/// configurations. It checks the one relation the chapter rests on: a row of bf16 index keys
/// is larger than a row of logits, a row of fp8 keys (with its scales) is not.
pub fn shapes_text(book: &Book) -> Result<Markdown, BookError> {
    let row = |cfg: &str, name: &str| -> Result<u64, BookError> {
        row_bytes(&decode_step(&book.graphrace_config(cfg)?, 1), name)
    };
    let (hidden, logits) = (row("incident", "x")?, row("incident", "logits")?);
    let (bf16, fp8) = (row("incident", "index_k")?, row("fp8", "index_k")?);
    // bf16 keys: positions × elements × 2 bytes; fp8 keys: positions × (elements + a 4-byte scale).
    let positions = (fp8 - bf16 / 2) / 4;
    let elements = bf16 / 2 / positions;
    let fp8_keys = positions * elements;
    if !(bf16 > logits && fp8_keys + 4 * positions <= logits) {
        return Err("the key rows no longer straddle the logits row".into());
    }
    Ok(Markdown(format!(
        "The shapes are the served model's: a hidden state of {} bf16 values, a vocabulary of {} \
         fp32 logits, {} compressed key positions of {} elements per session. One relation \
         matters: a session's row of bf16 index keys ({}) is larger than its row of logits ({}); a \
         row of fp8 keys ({} plus scales) is not.",
        grouped(hidden / 2),
        grouped(logits / 4),
        grouped(positions),
        grouped(elements),
        bytes::show(bf16),
        bytes::show(logits),
        bytes::show(fp8_keys),
    )))
}

/// The paragraph on why the freed bf16 transient takes the logits, at the incident's load read
/// from the incident report and the sizes from the incident configuration and graphrace's
/// allocator constants. It checks what it says: the transient is at least [`MIN_LARGE_ALLOC`],
/// so its segment is its size rounded up to [`ROUND_LARGE`], and capture puts the logits on it.
pub fn bf16_segment_text(book: &Book) -> Result<Markdown, BookError> {
    let sessions = incident_sessions(book)?;
    let cfg = book.graphrace_config("incident")?;
    let keys = tensor_bytes(&decode_step(&cfg, sessions), "index_k")?;
    let segment = Request::new(keys).segment;
    if keys < MIN_LARGE_ALLOC || segment != keys.next_multiple_of(ROUND_LARGE) {
        return Err(format!("the bf16 transient's segment is not its own size ({keys} B)").into());
    }
    let graph = Captured::new(&cfg, sessions)?.graph;
    let sharing = graph.sharing_bytes_with("index_k");
    if !sharing.iter().any(|&t| graph.tensor_name(t) == "logits") {
        return Err(format!("at {sessions} sessions the logits do not land on index_k").into());
    }
    Ok(Markdown(format!(
        "The allocator does not know that the side is still reading `index_k` unless told with \
         `record_stream`. At the incident's load, {sessions} sessions, the bf16 transient is {}, \
         not under {}, so its segment is its own size rounded up to {}; freed, it is the best fit \
         for the next main-stream request of about that size.",
        bytes::show(keys),
        bytes::show(MIN_LARGE_ALLOC),
        bytes::show(ROUND_LARGE),
    )))
}

/// Where capture put one tensor of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The tensor's name.
    pub tensor: String,
    /// The stream that allocated it, which alone may reuse its block.
    pub stream: Stream,
    /// Its bytes in the graph's pool.
    pub range: std::ops::Range<u64>,
    /// Whether any of those bytes are also `index_k`'s: the hazard the chapter is about.
    pub shares_with_index_k: bool,
}

/// The pool tensors of graph `g` (static ones have no place in the pool), in the step's
/// order, each with whether it shares bytes with the transient `index_k`.
pub fn pool_layout(g: &Graph) -> Result<Vec<Placed>, BookError> {
    let k = g.tensor("index_k").ok_or("the step has no index_k")?;
    g.placements[k.0].as_ref().ok_or("index_k not placed")?;
    let sharing = g.sharing_bytes_with("index_k");
    let mut placed = vec![];
    for (i, t) in g.tensors.iter().enumerate() {
        let Some(p) = &g.placements[i] else { continue };
        if t.home != Home::Pool {
            continue;
        }
        placed.push(Placed {
            tensor: t.name.clone(),
            stream: p.stream,
            range: p.range.clone(),
            shares_with_index_k: sharing.contains(&TensorId(i)),
        });
    }
    Ok(placed)
}

/// When the side's store of the index keys and the LM head ran in the first replay of `g`
/// under `timing` (seed, trial and replay 0): the chapter's margin is the gap between them.
pub fn store_and_lm_head(g: &Graph, timing: Timing) -> Result<(Span, Span), BookError> {
    let spans = Replayer::new(g, timing).schedule(Draw {
        seed: 0,
        trial: 0,
        replay: 0,
    });
    let at = |name: &str| -> Result<Span, BookError> {
        Ok(spans[g.node(name).ok_or(format!("no kernel `{name}`"))?])
    };
    Ok((at("index_k_store")?, at("lm_head")?))
}

/// Configuration `name`'s rates as one curve of the rates figure: percent of sessions
/// corrupted against concurrent sessions.
pub fn rate_curve(name: &str, rates: &[Rate]) -> Curve {
    Curve {
        arm: name.to_string(),
        label: name.to_string(),
        points: rates
            .iter()
            .map(|r| (f64::from(r.sessions), 100.0 * r.fraction()))
            .collect(),
    }
}

/// A load test's sessions corrupted, as a percentage and a count: `15.2 % (365 of 2400)`.
pub fn sessions_corrupted(r: &Rate) -> String {
    format!(
        "{:.1} % ({} of {})",
        100.0 * r.fraction(),
        r.corrupted,
        r.observed
    )
}

/// The rate the incident report gives for the first experiment that configuration `model`
/// stands for, or `not tried`.
pub fn reported_rate(experiments: &[Experiment], model: &str) -> String {
    let e = experiments
        .iter()
        .find(|e| e.model.as_deref() == Some(model));
    e.map_or("not tried".into(), |e| e.rate.clone())
}

/// The model's calibrated numbers (`timing`'s jitter, `costs`' LM head and clone) beside the
/// rate of the incident report each was fitted to, and the one number that was not fitted.
pub fn calibrated_table(book: &Book, timing: Timing, costs: &Costs) -> Result<Table, BookError> {
    let incident = book.experiment("incident")?;
    let (t, c) = (timing, costs);
    Ok(Table::new(["number", "value", "fitted to"])
        .row([
            "σ of the per-replay log-normal jitter".to_string(),
            format!("{}", t.jitter_sigma),
            format!("the incident's {} at {}", incident.rate, incident.load),
        ])
        .row([
            "LM head cost (fixed + per session)".to_string(),
            format!(
                "{} µs + {} µs",
                c.lm_head.fixed_us, c.lm_head.per_session_us
            ),
            format!(
                "{} with logits cached",
                book.experiment("logits-cached")?.rate
            ),
        ])
        .row([
            "clone cost (fixed + per session)".to_string(),
            format!("{} µs + {} µs", c.clone.fixed_us, c.clone.per_session_us),
            format!(
                "{} with the differential hooks",
                book.experiment("clone")?.rate
            ),
        ])
        .row([
            "contention factor (not fitted)".to_string(),
            format!("{}", t.contention),
            "—".to_string(),
        ]))
}

/// Replay `draw` of graph `g` as a timeline, titled with the graph's sessions: one lane per
/// stream, each kernel a span, and each collision shaded and labelled with the writer, the
/// tensor it overwrote and the sessions lost.
pub fn collision_timeline(g: &Graph, draw: Draw, replay: &Replay) -> Timeline {
    let lane = |s: Stream| Lane {
        label: format!("{} stream", s.name()),
        spans: replay
            .spans
            .iter()
            .filter(|x| g.nodes[x.node].kernel.stream == s)
            .map(|x| (g.nodes[x.node].kernel.name.clone(), x.start_us, x.end_us))
            .collect(),
    };
    let marks = replay
        .collisions
        .iter()
        .map(|k| Mark {
            label: format!(
                "{} over {}: sessions {}–{}",
                g.nodes[k.writer_node].kernel.name,
                g.tensor_name(k.victim.tensor),
                k.sessions.start,
                k.sessions.end - 1
            ),
            start: k.window_us.start,
            end: k.window_us.end,
        })
        .collect();
    Timeline {
        title: format!(
            "{} sessions, trial {}, replay {}: a collision",
            g.sessions, draw.trial, draw.replay
        ),
        x_desc: "µs into the replay".into(),
        lanes: vec![lane(Stream::Main), lane(Stream::Side)],
        marks,
    }
}

/// The most sessions at which fp8's transient `index_k` is still under [`MIN_LARGE_ALLOC`], so
/// gets a [`LARGE_SEGMENT`], read from the fp8 configuration. It checks what the chapter says of
/// it: the check finds a race there and none a session later, and the logits fit that segment.
pub fn fp8_last_shared_segment(book: &Book) -> Result<u32, BookError> {
    let cfg = book.graphrace_config("fp8")?;
    let p = decode_step(&cfg, 1);
    let (keys, logits) = (row_bytes(&p, "index_k")?, row_bytes(&p, "logits")?);
    // The most sessions whose fp8 transient is still under MIN_LARGE_ALLOC.
    let last = ((MIN_LARGE_ALLOC - 1) / keys) as u32;
    let races = |s: u32| -> Result<usize, BookError> {
        Ok(Captured::new(&cfg, s)?.check().races().count())
    };
    let segment = |s: u32| Request::new(keys * u64::from(s)).segment;
    if races(last)? == 0 || races(last + 1)? != 0 || segment(last) != LARGE_SEGMENT {
        return Err(format!("fp8's races do not end at {last} sessions").into());
    }
    if logits * u64::from(last) > LARGE_SEGMENT {
        return Err("the logits no longer fit a large segment".into());
    }
    Ok(last)
}

/// The paragraph that opens *Where fp8's race returns*: why fp8 keys are clean at the
/// incident's load. Up to [`fp8_last_shared_segment`] sessions (whose checks it relies on) the
/// fp8 transient is under [`MIN_LARGE_ALLOC`] and gets a [`LARGE_SEGMENT`] that the logits fit;
/// a session more and it gets a segment of its own size. The sizes come from the fp8
/// configuration and graphrace's allocator constants.
pub fn fp8_segments_text(book: &Book) -> Result<Markdown, BookError> {
    let last = fp8_last_shared_segment(book)?;
    if incident_sessions(book)? <= last {
        return Err("the incident's load no longer gives fp8's transient its own segment".into());
    }
    let logits = row_bytes(&decode_step(&book.graphrace_config("fp8")?, 1), "logits")?;
    Ok(Markdown(format!(
        "fp8 keys are clean at the incident's load because of sizes, not ordering. Up to {last} \
         sessions the fp8 transient is under {}, so the allocator gives it a {} segment; freed, \
         the whole segment is one block, and the logits ({} at {last} sessions) fit in it. From {} \
         sessions the transient gets a segment of its own size, too small for the logits:",
        bytes::show(MIN_LARGE_ALLOC),
        bytes::show(LARGE_SEGMENT),
        bytes::show(logits * u64::from(last)),
        last + 1,
    )))
}

#[cfg(test)]
mod tests {
    use graphrace::Workload;

    use super::*;

    /// The incident's load, as the report gives it.
    fn load() -> u32 {
        incident_sessions(&Book::repository()).unwrap()
    }

    #[test]
    fn the_incident_program_frees_index_k_while_the_side_stores_it() {
        let p = decode_step(
            &Book::repository().graphrace_config("incident").unwrap(),
            load(),
        );
        let t = program_table(&p);
        assert_eq!(t.rows().len(), p.ops.len());
        assert!(
            t.to_html()
                .contains(&format!("bytes at {} sessions", load()))
        );
        let row = |what: &str, tensors: &str| {
            t.rows()
                .iter()
                .position(|r| r[1] == what && r[3].starts_with(tensors))
                .unwrap_or_else(|| panic!("no `{what}` of `{tensors}`"))
        };
        // The side forks, stores index_k, and the host frees it before the side is joined.
        let store = row("launch", "index_k_store");
        let free = row("free (last reference dropped)", "index_k");
        let join = row("join: wait on side", "");
        assert!(row("fork: wait on main", "") < store && store < free && free < join);
        assert_eq!(t.rows()[store][2], "side");
        assert!(t.rows()[row("allocate", "index_k")][4].ends_with("MiB"));
    }

    #[test]
    fn the_shapes_put_bf16_keys_above_the_logits_and_fp8_below() {
        let text = shapes_text(&Book::repository()).unwrap().0;
        assert!(text.contains("bf16 index keys"), "{text}");
        let p = decode_step(&Book::repository().graphrace_config("incident").unwrap(), 1);
        assert!(row_bytes(&p, "index_k").unwrap() > row_bytes(&p, "logits").unwrap());
        assert!(row_bytes(&p, "no such tensor").is_err());
    }

    #[test]
    fn the_incidents_load_is_the_reports_60_sessions() {
        assert_eq!(load(), 60);
        let text = bf16_segment_text(&Book::repository()).unwrap().0;
        // 60 sessions of bf16 keys: over the 10 MiB below which a segment is 20 MiB, so the
        // segment is the transient's own size, a multiple of 2 MiB.
        let keys = tensor_bytes(
            &decode_step(
                &Book::repository().graphrace_config("incident").unwrap(),
                60,
            ),
            "index_k",
        )
        .unwrap();
        assert!(keys >= MIN_LARGE_ALLOC, "{keys}");
        assert_eq!(
            Request::new(keys).segment,
            keys.next_multiple_of(ROUND_LARGE)
        );
        for said in [
            "60 sessions".to_string(),
            format!("the bf16 transient is {}", bytes::show(keys)),
            "not under 10 MiB".to_string(),
            "rounded up to 2 MiB".to_string(),
        ] {
            assert!(text.contains(&said), "{said:?} not in {text}");
        }
    }

    #[test]
    fn at_the_incidents_load_the_logits_land_on_index_k_unless_recorded() {
        let shared = |name: &str| -> Vec<String> {
            let cfg = Book::repository().graphrace_config(name).unwrap();
            let c = Captured::new(&cfg, load()).unwrap();
            let layout = pool_layout(&c.graph).unwrap();
            assert!(layout.iter().any(|p| p.tensor == "index_k"));
            layout
                .into_iter()
                .filter(|p| p.shares_with_index_k)
                .map(|p| p.tensor)
                .collect()
        };
        // What the prose under the layout table says, configuration by configuration.
        assert!(shared("incident").contains(&"logits".to_string()));
        assert!(shared("logits-cached").contains(&"probs".to_string()));
        assert!(shared("fp8").is_empty());
        assert!(shared("record-stream").is_empty());
    }

    #[test]
    fn at_nominal_speed_the_store_ends_before_the_lm_head_by_a_shrinking_margin() {
        let still = Timing {
            jitter_sigma: 0.0,
            ..Timing::default()
        };
        let cfg = Book::repository().graphrace_config("incident").unwrap();
        let margin = |s: u32| {
            let c = Captured::new(&cfg, s).unwrap();
            let (store, head) = store_and_lm_head(&c.graph, still).unwrap();
            head.start_us - store.end_us
        };
        let (few, many) = (margin(6), margin(72));
        assert!(few > many && many > 0.0, "{few} µs at 6, {many} µs at 72");
    }

    #[test]
    fn the_rates_read_as_the_report_writes_them() {
        let experiments = Book::repository().experiments().unwrap();
        assert_eq!(reported_rate(&experiments, "incident"), "~15–18 %");
        assert_eq!(reported_rate(&experiments, "no-such-model"), "not tried");
        let light = Workload {
            trials: 2,
            replays: 20,
            ..Workload::default()
        };
        let c = Captured::new(
            &Book::repository().graphrace_config("overlap-off").unwrap(),
            12,
        )
        .unwrap();
        let r = c.rate(Timing::default(), light);
        assert_eq!(sessions_corrupted(&r), "0.0 % (0 of 24)");
        let curve = rate_curve("overlap-off", &[r]);
        assert_eq!(curve.points, vec![(12.0, 0.0)]);
        assert_eq!(sessions().count(), 12);
    }

    #[test]
    fn each_calibrated_number_names_the_rate_it_was_fitted_to() {
        let t =
            calibrated_table(&Book::repository(), Timing::default(), &Costs::default()).unwrap();
        assert_eq!(t.rows().len(), 4);
        assert!(t.rows()[0][2].contains("~15–18 %"), "{:?}", t.rows());
        assert_eq!(t.rows()[3][2], "—");
    }

    #[test]
    fn the_incidents_first_collision_is_the_lm_head_over_index_k() {
        let c = Captured::new(
            &Book::repository().graphrace_config("incident").unwrap(),
            load(),
        )
        .unwrap();
        let (draw, replay) = c
            .first_racing_replay(Timing::default(), Workload::default())
            .unwrap();
        let timeline = collision_timeline(&c.graph, draw, &replay);
        assert_eq!(timeline.lanes.len(), 2);
        assert!(
            timeline.title.starts_with("60 sessions, trial "),
            "{}",
            timeline.title
        );
        assert!(!timeline.marks.is_empty());
        assert!(
            timeline.marks[0].label.starts_with("lm_head over index_k"),
            "{}",
            timeline.marks[0].label
        );
    }

    #[test]
    fn fp8s_races_end_where_its_transient_outgrows_the_20_mib_segment() {
        let last = fp8_last_shared_segment(&Book::repository()).unwrap();
        // The incident's load is past it: that is why fp8 reads as a fix at 60 sessions.
        assert!(last > 12 && last < load(), "{last}");
        let text = fp8_segments_text(&Book::repository()).unwrap().0;
        assert!(
            text.contains(&format!("From {} sessions", last + 1)),
            "{text}"
        );
        let p = decode_step(
            &Book::repository().graphrace_config("fp8").unwrap(),
            last + 1,
        );
        assert!(tensor_bytes(&p, "index_k").unwrap() >= MIN_LARGE_ALLOC);
    }
}
