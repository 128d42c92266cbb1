//! The reader on snapshots made here (a ring buffer's cut, streams, steps, broken fields) and
//! on the real ones `gpu/pytorch/train_programs.py` dumped (`repro/results/pytorch/programs`).

use super::*;
use crate::caching::{self, Conf};
use serde_pickle::{HashableValue, Value};
use std::collections::HashMap;

const MIB: u64 = 1 << 20;

fn s(x: &str) -> Value {
    Value::String(x.into())
}

fn d(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        pairs
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.into()), v))
            .collect(),
    )
}

fn ev(action: &str, addr: u64, size: u64, stream: u64, time_us: i64) -> Value {
    d(vec![
        ("action", s(action)),
        ("addr", Value::I64(addr as i64)),
        ("size", Value::I64(size as i64)),
        ("stream", Value::I64(stream as i64)),
        ("time_us", Value::I64(time_us)),
        (
            "frames",
            Value::List(vec![
                d(vec![
                    ("name", s("malloc")),
                    ("filename", s("CUDACachingAllocator.cpp")),
                    ("line", Value::I64(0)),
                ]),
                d(vec![
                    ("name", s("forward")),
                    ("filename", s("/job/train.py")),
                    ("line", Value::I64(42)),
                ]),
            ]),
        ),
    ])
}

fn pickle(top: Value) -> Vec<u8> {
    serde_pickle::value_to_vec(&top, serde_pickle::SerOptions::new()).unwrap()
}

fn snapshot(segments: Vec<Value>, trace: Vec<Value>, annotations: Vec<Value>) -> Vec<u8> {
    pickle(d(vec![
        ("segments", Value::List(segments)),
        ("device_traces", Value::List(vec![Value::List(trace)])),
        ("external_annotations", Value::List(annotations)),
    ]))
}

fn block(address: u64, size: u64, requested: u64, state: &str) -> Value {
    d(vec![
        ("address", Value::I64(address as i64)),
        ("size", Value::I64(size as i64)),
        ("requested_size", Value::I64(requested as i64)),
        ("state", s(state)),
    ])
}

fn segment_value(address: u64, total: u64, blocks: Vec<Value>) -> Value {
    d(vec![
        ("device", Value::I64(0)),
        ("address", Value::I64(address as i64)),
        ("total_size", Value::I64(total as i64)),
        ("stream", Value::I64(0)),
        (
            "segment_pool_id",
            Value::Tuple(vec![Value::I64(0), Value::I64(0)]),
        ),
        ("blocks", Value::List(blocks)),
    ])
}

fn end_of_step(time_us: i64) -> Value {
    d(vec![
        ("stage", s("END")),
        ("name", s("Optimizer.step#AdamW.step")),
        ("device", Value::I64(0)),
        ("time_us", Value::I64(time_us)),
    ])
}

#[test]
fn a_trace_cut_by_the_ring_buffer_starts_with_what_was_alive() {
    // A tensor at 0x1000 was made before the trace (its free is the first event); one at
    // 0x9000 lives through it (in use at the dump, never allocated in the trace).
    let bytes = snapshot(
        vec![segment_value(
            0x0,
            40 * MIB,
            vec![block(0x9000, 12 * MIB, 12 * MIB - 100, "active_allocated")],
        )],
        vec![
            ev("free_requested", 0x1000, 4 * MIB, 0, 1),
            ev("free_completed", 0x1000, 4 * MIB, 0, 2),
            ev("alloc", 0x2000, 8 * MIB, 0, 3),
            ev("free_completed", 0x2000, 8 * MIB, 0, 5),
            ev("alloc", 0x3000, 8 * MIB, 7, 7),
        ],
        vec![end_of_step(4)],
    );
    let snap = read(&bytes, None).unwrap();
    assert_eq!(snap.events[2].stack.python.len(), 1, "Python frames only");
    assert_eq!(snap.events[2].stack.python[0].line, 42);
    let r = snap.requests().unwrap();
    assert_eq!(r.before_trace, (2, 4 * MIB + 12 * MIB - 100));
    assert_eq!(
        r.steps, 2,
        "the alloc after the optimizer's end starts step 2"
    );
    assert!(r.annotated);
    assert_eq!(r.streams, 2);
    let replay = caching::replay(r.events.clone(), Conf::Default.into(), 1 << 30, &[]);
    assert_eq!(replay.refusal, None);
    // The early tensor is freed before the first alloc: step 1 peaks at 12 + 8 MiB.
    assert_eq!(replay.steps[0].max_allocated, 12 * MIB + 8 * MIB);
    assert_eq!(replay.steps[1].allocated, 12 * MIB + 8 * MIB);
}

#[test]
fn a_recorded_refusal_is_replayed_as_the_request_it_was() {
    let bytes = snapshot(
        vec![],
        vec![
            ev("alloc", 0x2000, 30 * MIB, 0, 1),
            d(vec![
                ("action", s("oom")),
                ("device_free", Value::I64(1 << 20)),
                ("size", Value::I64(64 * MIB as i64)),
                ("stream", Value::I64(0)),
                ("time_us", Value::I64(2)),
            ]),
            ev("free_completed", 0x2000, 30 * MIB, 0, 3),
        ],
        vec![],
    );
    let r = read(&bytes, None).unwrap().requests().unwrap();
    let at = r.recorded_refusal.unwrap();
    assert!(matches!(r.events[at], Event::Alloc { bytes, .. } if bytes == 64 * MIB));
    let replay = caching::replay(r.events.clone(), Conf::Default.into(), 80 * MIB, &[]);
    assert_eq!(replay.refusal.unwrap().index, at);
    let roomy = caching::replay(r.events, Conf::Default.into(), 200 * MIB, &[]);
    assert_eq!(roomy.refusal, None);
}

#[test]
fn what_is_not_a_snapshot_is_named() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not a pickle at all".to_vec(), "not a readable pickle"),
        (pickle(Value::List(vec![])), "holds a list, not a dict"),
        (
            pickle(d(vec![("segments", Value::List(vec![]))])),
            "no `segments` and `device_traces`",
        ),
        (snapshot(vec![], vec![], vec![]), "no allocator history"),
        (
            snapshot(vec![], vec![ev("teleport", 1, 2, 0, 0)], vec![]),
            "`device_traces[0][0].action`: action `teleport`",
        ),
        (
            snapshot(
                vec![],
                vec![d(vec![("action", s("alloc")), ("addr", Value::I64(1))])],
                vec![],
            ),
            "`device_traces[0][0].size`: missing",
        ),
        (
            snapshot(
                vec![],
                vec![d(vec![
                    ("action", s("alloc")),
                    ("addr", Value::I64(1)),
                    ("size", s("big")),
                ])],
                vec![],
            ),
            "`device_traces[0][0].size`: expected an integer, found a string",
        ),
        (
            snapshot(vec![Value::I64(3)], vec![ev("alloc", 1, 2, 0, 0)], vec![]),
            "`segments[0]`: expected a dict, found an integer",
        ),
    ];
    for (bytes, says) in cases {
        let e = read(&bytes, None).unwrap_err().to_string();
        assert!(e.contains(says), "{e}\n  wanted: {says}");
    }
    let mut cut = snapshot(vec![], vec![ev("alloc", 1, 2, 0, 0)], vec![]);
    cut.truncate(cut.len() / 2);
    assert!(matches!(read(&cut, None), Err(SnapshotError::NotPickle(_))));
}

fn recorded(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../repro/results/pytorch/programs/{name}.pickle.xz",
        env!("CARGO_MANIFEST_DIR")
    );
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut out).unwrap();
    out
}

#[test]
fn a_real_snapshot_reads_with_its_steps_and_setting() {
    let snap = read(&recorded("gpt--expandable--uncapped"), None).unwrap();
    assert_eq!(snap.setting.map(|s| s.layout), Some(Conf::Expandable));
    assert_eq!(snap.optimizer_steps.len(), 8);
    let r = snap.requests().unwrap();
    assert_eq!((r.steps, r.streams, r.before_trace), (8, 1, (0, 0)));
    assert_eq!(r.recorded_refusal, None);
    let alloc = snap
        .events
        .iter()
        .find(|e| e.action == Action::Alloc)
        .unwrap();
    assert!(
        alloc
            .stack
            .python
            .iter()
            .any(|f| f.filename.ends_with("train_programs.py"))
    );
}

/// A run of `gpu/pytorch/train_programs.py`, as far as the validation reads it.
#[derive(serde::Deserialize)]
struct ProgramRun {
    allowed: Option<u64>,
    steps: Vec<ProgramStep>,
    oom: Option<ProgramOom>,
}

#[derive(serde::Deserialize)]
struct ProgramStep {
    max_allocated: u64,
    max_reserved: u64,
    allocated: u64,
    reserved: u64,
}

#[derive(serde::Deserialize)]
struct ProgramOom {
    step: u64,
    message: String,
}

/// `after` .. `before` in `text`.
fn cut<'a>(text: &'a str, after: &str, before: &str) -> &'a str {
    let rest = &text[text.find(after).expect(after) + after.len()..];
    &rest[..rest.find(before).expect(before)]
}

/// Each program's uncapped snapshot, replayed under every cap it was then run under (60 to
/// 100 % of its default peak, both layouts): whether it fits, the step refused in, and the
/// message's figures (what it tried, allocated, reserved but unallocated) are real PyTorch's
/// in every run; an uncapped replay gives every step's figures.
#[test]
fn each_programs_snapshot_predicts_its_capped_runs() {
    use crate::caching::format_size;
    let dir = format!(
        "{}/../../repro/results/pytorch/programs",
        env!("CARGO_MANIFEST_DIR")
    );
    let read_run = |name: &str| -> ProgramRun {
        let path = format!("{dir}/{name}.json");
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let mut checked = (0, 0);
    for program in ["gpt", "cnn", "varlen"] {
        for layout in ["default", "expandable"] {
            let name = format!("{program}--{layout}--uncapped");
            let snap = read(&recorded(&name), None).unwrap();
            let requests = snap.requests().unwrap();
            let setting = snap.setting.unwrap();
            let free = verdict(&snap, &requests, setting, u64::MAX);
            let run = read_run(&name);
            assert_eq!(free.replay.steps.len(), run.steps.len(), "{name}");
            for (model, torch) in free.replay.steps.iter().zip(&run.steps) {
                let pairs = [
                    (model.max_allocated, torch.max_allocated),
                    (model.max_reserved, torch.max_reserved),
                    (model.allocated, torch.allocated),
                    (model.reserved, torch.reserved),
                ];
                assert!(
                    pairs.iter().all(|(m, t)| m == t),
                    "{name} step {}: {pairs:?}",
                    model.step
                );
            }
            for cap in ["cap60", "cap80", "cap90", "cap95", "cap100"] {
                let run = read_run(&format!("{program}--{layout}--{cap}"));
                let v = verdict(&snap, &requests, setting, run.allowed.unwrap());
                let at = format!("{program} {layout} {cap}");
                match (&run.oom, &v.refused) {
                    (None, None) => {}
                    (Some(torch), Some(model)) => {
                        assert_eq!(model.step, torch.step, "{at}");
                        let m = &torch.message;
                        assert_eq!(
                            format_size(model.error.tried),
                            cut(m, "Tried to allocate ", ". GPU"),
                            "{at}"
                        );
                        let figures = format!(
                            "{} is allocated by PyTorch, and {} is reserved",
                            format_size(model.error.allocated),
                            format_size(model.error.reserved - model.error.allocated)
                        );
                        assert_eq!(
                            figures,
                            cut(m, "Of the allocated memory ", " by PyTorch but"),
                            "{at}"
                        );
                        checked.1 += 1;
                    }
                    (torch, model) => panic!(
                        "{at}: PyTorch {:?}, the model {model:?}",
                        torch.as_ref().map(|o| o.step)
                    ),
                }
                checked.0 += 1;
            }
        }
    }
    assert_eq!(checked, (30, 11), "(capped runs, of them refused)");
}

mod mutated {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// The smallest real snapshot (the CNN's, 1.2 MB).
    fn real() -> &'static [u8] {
        static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
        BYTES.get_or_init(|| recorded("cnn--default--cap60"))
    }

    /// Reads, and replays what reads, under a small limit: any outcome but a panic.
    fn survives(bytes: &[u8]) {
        if let Ok(snap) = read(bytes, None)
            && let Ok(requests) = snap.requests()
        {
            let setting = snap.setting.unwrap_or(Conf::Default.into());
            let v = verdict(&snap, &requests, setting, 1 << 30);
            let _ = v.refused.map(|r| r.place());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// A real snapshot with bytes flipped, cut or spliced reads as an error or as a
        /// snapshot, never a panic or a hang.
        #[test]
        fn a_mutated_real_snapshot_never_panics(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            cut_it in any::<bool>(),
            splice in any::<prop::sample::Index>(),
            junk in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let mut bytes = real().to_vec();
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            let at = splice.index(bytes.len());
            bytes.splice(at..at, junk);
            if cut_it {
                bytes.truncate(cut.index(bytes.len()));
            }
            survives(&bytes);
        }
    }
}

/// The ring buffer, on a real snapshot: the GPT program's trace cut to its last half, as a
/// history of half the `max_entries` would have kept it. The tensors alive at the cut are
/// found again, each of them, and every step wholly inside the cut trace peaks within 1 MiB
/// of the full trace's allocated and 32 MiB of its reserved: what the allocator had cached
/// at the cut is not in the trace.
#[test]
fn a_real_trace_cut_in_half_finds_what_was_alive_at_the_cut() {
    let snap = read(&recorded("gpt--default--uncapped"), None).unwrap();
    let full = snap.requests().unwrap();
    let at = snap.events.len() / 2;
    let cut = Snapshot {
        events: snap.events[at..].to_vec(),
        ..snap.clone()
    };
    let r = cut.requests().unwrap();
    assert!(
        r.first_step > 1 && r.steps == 8,
        "{} to {}",
        r.first_step,
        r.steps
    );
    let setting = snap.setting.unwrap();
    // What the full trace held just before the cut: its tensors, from its own events.
    let mut live = HashMap::new();
    for e in &snap.events[..at] {
        match e.action {
            Action::Alloc => {
                live.insert(e.addr, e.size.div_ceil(512) * 512);
            }
            Action::FreeCompleted => {
                live.remove(&e.addr);
            }
            _ => {}
        }
    }
    let held: u64 = live.values().sum();
    assert_eq!(r.before_trace.0, live.len());
    let rounded: u64 = r.events[1..=r.before_trace.0]
        .iter()
        .map(|e| match e {
            Event::Alloc { bytes, .. } => bytes.div_ceil(512) * 512,
            _ => unreachable!("the tensors alive at the cut come first"),
        })
        .sum();
    assert_eq!(
        rounded, held,
        "{} tensors alive at the cut",
        r.before_trace.0
    );
    let whole = caching::replay(full.events.clone(), setting, u64::MAX, &[]);
    let part = caching::replay(r.events.clone(), setting, u64::MAX, &[]);
    for s in part.steps.iter().filter(|s| s.step > r.first_step) {
        let w = whole.steps.iter().find(|w| w.step == s.step).unwrap();
        // Measured: allocated 1 MiB over (a block left unsplit where the early tensors, laid
        // out afresh, leave other gaps), reserved 16 MiB over, in steps 6 to 8.
        let (a, r) = (
            s.max_allocated.abs_diff(w.max_allocated),
            s.max_reserved.abs_diff(w.max_reserved),
        );
        assert!(
            a <= 1 << 20 && r <= 32 << 20,
            "step {}: {a} B, {r} B",
            s.step
        );
    }
}

/// A block freed in a CUDA graph's private pool is not handed to an ordinary request: the
/// request at an address of the pool's segment (at the dump) is replayed in that pool.
#[test]
fn a_graphs_private_pool_keeps_its_blocks_to_itself() {
    let graph = 0x1_0000_0000;
    let mut pool_segment =
        segment_value(graph, 20 * MIB, vec![block(graph, 20 * MIB, 0, "inactive")]);
    if let Value::Dict(d) = &mut pool_segment {
        d.insert(
            HashableValue::String("segment_pool_id".into()),
            Value::Tuple(vec![Value::I64(1), Value::I64(0)]),
        );
    }
    let bytes = snapshot(
        vec![pool_segment],
        vec![
            ev("alloc", graph, 12 * MIB, 0, 1),
            ev("free_completed", graph, 12 * MIB, 0, 2),
            ev("alloc", 0x2_0000_0000, 12 * MIB, 0, 3),
        ],
        vec![],
    );
    let r = read(&bytes, None).unwrap().requests().unwrap();
    assert_eq!((r.private_pools, r.streams), (1, 2));
    let replay = caching::replay(r.events, Conf::Default.into(), 1 << 30, &[]);
    // 12 MiB asks a 12 MiB segment: one for the pool, one for the ordinary request (one
    // alone if the freed block were shared).
    assert_eq!(replay.peak_reserved, 24 * MIB, "a segment for each pool");
}
