//! Figures: the static check on graphs CUDA built — the incident's, as dumped on the H200, and
//! a synthetic one of 10 000 nodes shaped like many decode steps captured back to back (two
//! streams, a fork and a join every few kernels, a pool whose blocks are reused every step).
//! `cargo bench -p graphrace --bench check_graph` (harness-free; prints, asserts nothing).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use basics::SplitMix64;
use graphrace::driver::{self, ByteAccess, DriverGraph, DriverNode, GraphDump, Region, RegionHome};

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

/// `steps` decode-like steps captured back to back, 10 nodes each. Main: `k0` writes block A,
/// then three kernels on blocks of their own, then `k4` writes A again (the pool reused it).
/// The side forks after `k0`, reads A and writes its own block; the join that orders the side
/// before `k4` is dropped one step in eight: those steps race. Blocks come from a pool of 16,
/// reused step after step.
fn synthetic(steps: usize, rng: &mut SplitMix64) -> DriverGraph {
    const BLOCK: u64 = 1 << 20;
    const BLOCKS: u64 = 16;
    let mut nodes = vec![];
    let mut edges = vec![];
    let access = |block: u64, write: bool| ByteAccess {
        start: block * BLOCK,
        end: (block + 1) * BLOCK,
        write,
    };
    let node = |kind: &str, accesses: Vec<ByteAccess>| DriverNode {
        kind: kind.into(),
        function: (kind == "kernel").then(|| "sweep".into()),
        host_op: None,
        launch: None,
        args: vec![],
        accesses,
    };
    let mut push = |nodes: &mut Vec<DriverNode>, n: DriverNode, after: &[usize]| {
        let at = nodes.len();
        nodes.push(n);
        edges.extend(after.iter().map(|&a| [a, at]));
        at
    };
    let mut last: Option<usize> = None;
    for step in 0..steps as u64 {
        let block = |k: u64| (step * 5 + k) % BLOCKS;
        let a = block(0);
        let prev: Vec<usize> = last.into_iter().collect();
        let k0 = push(&mut nodes, node("kernel", vec![access(a, true)]), &prev);
        let s1 = push(&mut nodes, node("kernel", vec![access(a, false)]), &[k0]);
        let s2 = push(
            &mut nodes,
            node("kernel", vec![access(block(4), true)]),
            &[s1],
        );
        let mut m = k0;
        for k in 1..4 {
            m = push(
                &mut nodes,
                node("kernel", vec![access(block(k), true)]),
                &[m],
            );
        }
        let join = if rng.below(8) == 0 {
            vec![m]
        } else {
            vec![push(&mut nodes, node("empty", vec![]), &[m, s2])]
        };
        let k4 = push(&mut nodes, node("kernel", vec![access(a, true)]), &join);
        last = Some(push(
            &mut nodes,
            node("kernel", vec![access(block(1), false)]),
            &[k4, s2],
        ));
    }
    let regions = (0..BLOCKS)
        .map(|b| Region {
            name: format!("block{b}"),
            start: b * BLOCK,
            end: (b + 1) * BLOCK,
            home: RegionHome::Pool,
            alloc_op: None,
            free_op: None,
            stream: None,
        })
        .collect();
    DriverGraph {
        config: "synthetic".into(),
        sessions: 1,
        regions,
        nodes,
        edges,
    }
}

fn main() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/results/graphrace-graph-h200.json");
    let text = std::fs::read_to_string(&file).expect("the committed dump");
    let read = median(51, || {
        black_box(GraphDump::parse("dump", &text).unwrap());
    });
    let dump = GraphDump::parse("dump", &text).unwrap();
    let incident = dump.graph("incident").unwrap();
    let check = median(1001, || {
        black_box(driver::check(incident));
    });
    println!(
        "the incident's graph from the H200 ({} nodes): check {:.1} µs; reading the whole dump \
         ({} graphs, {} KiB) {:.2} ms",
        incident.nodes.len(),
        check.as_secs_f64() * 1e6,
        dump.graphs.len(),
        text.len() / 1024,
        read.as_secs_f64() * 1e3
    );

    let mut rng = SplitMix64::new(7);
    let big = synthetic(1_127, &mut rng);
    big.validate().unwrap();
    let mut races = 0;
    let took = median(5, || races = driver::check(black_box(&big)).len());
    println!(
        "a synthetic graph of {} nodes and {} edges: check {:.0} ms ({races} races found)",
        big.nodes.len(),
        big.edges.len(),
        took.as_secs_f64() * 1e3
    );
}
