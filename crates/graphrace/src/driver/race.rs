//! The static check on the driver's graph: every unordered conflicting pair, with its witness.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde::Serialize;

use super::MAX_WITNESSES;
use super::dump::{ByteAccess, DriverGraph};
use super::reach::Reach;
use crate::check::readable_bytes;

/// One side of a race: a node and what it does to the bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeAccess {
    /// The node's index in the dump.
    pub node: usize,
    /// Its name in reports ([`DriverGraph::node_name`]).
    pub name: String,
    /// The tensor (region) of the access that overlaps the other side's.
    pub tensor: String,
    /// A write (else a read).
    pub write: bool,
}

/// How a block passed from one tenant to the next, from the memory map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Handoff {
    /// The earlier tenant.
    pub from: String,
    /// The host op that freed it.
    pub freed_at_op: usize,
    /// The later tenant.
    pub to: String,
    /// The host op that allocated it.
    pub allocated_at_op: usize,
}

/// One node's place in the witness schedule, in steps of one node's duration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Slot {
    /// The node.
    pub node: usize,
    /// When it starts.
    pub start: u32,
    /// When it ends.
    pub end: u32,
}

/// A race on the driver's graph, with everything needed to see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Witness {
    /// The access that should come first (the earlier tenant's, for a reuse).
    pub first: NodeAccess,
    /// The other.
    pub second: NodeAccess,
    /// Bytes both touch: the overlap of the first pair of their accesses found (one row, where a
    /// kernel reads row by row).
    pub bytes: Range<u64>,
    /// For a reuse: how the block changed hands (`None`: both touch the same tensor).
    pub handoff: Option<Handoff>,
    /// The edge that would order them: `[first.node, second.node]`.
    pub missing_edge: [usize; 2],
    /// A schedule keeping every edge of the graph in which `first` and `second` overlap:
    /// everything either depends on, one node at a time, then the two at once, then the rest.
    pub schedule: Vec<Slot>,
}

impl std::fmt::Display for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = |a: &NodeAccess| {
            let verb = if a.write { "writes" } else { "reads" };
            format!("{} {verb} `{}`", a.name, a.tensor)
        };
        writeln!(
            f,
            "race: {} and {} touch {} at {:#x}, with no path between them",
            side(&self.first),
            side(&self.second),
            readable_bytes(self.bytes.end - self.bytes.start),
            self.bytes.start
        )?;
        if let Some(h) = &self.handoff {
            writeln!(
                f,
                "  the block went from `{}` (freed by host op {}) to `{}` (allocated by op {})",
                h.from, h.freed_at_op, h.to, h.allocated_at_op
            )?;
        }
        writeln!(
            f,
            "  missing edge: #{} → #{}",
            self.missing_edge[0], self.missing_edge[1]
        )?;
        let at = |n: usize| self.schedule.iter().find(|s| s.node == n);
        if let (Some(a), Some(b)) = (at(self.first.node), at(self.second.node)) {
            write!(
                f,
                "  a schedule keeping every edge: {} nodes before, then #{} and #{} both at step {}",
                a.start.min(b.start),
                self.first.node,
                self.second.node,
                a.start
            )?;
        }
        Ok(())
    }
}

/// Every race in `graph`: each pair of nodes touching overlapping bytes, one writing, with no
/// path between them; one witness per pair of nodes and pair of tensors.
pub fn check(graph: &DriverGraph) -> Vec<Witness> {
    let reach = Reach::of(graph);
    // Every access, sorted by start: overlapping pairs are found by a sweep, not all pairs.
    let mut accesses: Vec<(usize, ByteAccess)> = (graph.nodes.iter().enumerate())
        .flat_map(|(i, n)| n.accesses.iter().map(move |a| (i, *a)))
        .collect();
    accesses.sort_by_key(|(node, a)| (a.start, a.end, *node));
    let mut found: Vec<Witness> = vec![];
    // One witness per pair of nodes and the tensors they hold the bytes as, and at most
    // MAX_WITNESSES: the key is made before the witness (whose schedule is the costly part).
    let mut seen: HashSet<[(usize, String); 2]> = HashSet::new();
    let tenant = |node: usize, bytes: Range<u64>| {
        graph
            .tenants(node, bytes)
            .next()
            .map(|r| r.name.clone())
            .unwrap_or_default()
    };
    'sweep: for (i, (na, a)) in accesses.iter().enumerate() {
        for (nb, b) in &accesses[i + 1..] {
            if b.start >= a.end {
                break;
            }
            if na == nb || !(a.write || b.write) || reach.ordered(*na, *nb) {
                continue;
            }
            let bytes = a.start.max(b.start)..a.end.min(b.end);
            let mut key = [
                (*na, tenant(*na, bytes.clone())),
                (*nb, tenant(*nb, bytes.clone())),
            ];
            key.sort();
            if !seen.insert(key) {
                continue;
            }
            found.push(witness(graph, &reach, (*na, a), (*nb, b), bytes));
            if found.len() == MAX_WITNESSES {
                break 'sweep;
            }
        }
    }
    found
}

/// The witness of a race between access `a` of node `na` and `b` of `nb` over `bytes`.
fn witness(
    graph: &DriverGraph,
    reach: &Reach,
    (na, a): (usize, &ByteAccess),
    (nb, b): (usize, &ByteAccess),
    bytes: Range<u64>,
) -> Witness {
    // The tensor each side holds the contested bytes as.
    let tenant = |node: usize| graph.tenants(node, bytes.clone()).next();
    let side = |node: usize, x: &ByteAccess| NodeAccess {
        node,
        name: graph.node_name(node),
        tensor: tenant(node).map_or_else(|| format!("{:#x}", bytes.start), |r| r.name.clone()),
        write: x.write,
    };
    let (ra, rb) = (tenant(na), tenant(nb));
    let (mut first, mut second) = (side(na, a), side(nb, b));
    // Both on one tensor: the access launched first should come first.
    let launched = |n: usize| (graph.nodes[n].host_op, n);
    if ra.map(|r| &r.name) == rb.map(|r| &r.name) && launched(nb) < launched(na) {
        std::mem::swap(&mut first, &mut second);
    }
    let mut handoff = None;
    if let (Some(ra), Some(rb)) = (ra, rb)
        && ra.name != rb.name
        && let (Some(alloc_a), Some(alloc_b)) = (ra.alloc_op, rb.alloc_op)
    {
        // The tenant allocated first held the block first: its access is the one to order
        // before the next tenant's.
        let (earlier, later) = if alloc_a <= alloc_b {
            (ra, rb)
        } else {
            std::mem::swap(&mut first, &mut second);
            (rb, ra)
        };
        handoff = earlier.free_op.map(|freed_at_op| Handoff {
            from: earlier.name.clone(),
            freed_at_op,
            to: later.name.clone(),
            allocated_at_op: later.alloc_op.unwrap_or_default(),
        });
    }
    let schedule = overlapping_schedule(reach, first.node, second.node);
    Witness {
        missing_edge: [first.node, second.node],
        first,
        second,
        bytes,
        handoff,
        schedule,
    }
}

/// A schedule of unit-length nodes that keeps every edge and runs `a` and `b` (unordered)
/// at the same step: their ancestors one per step in topological order, then both, then every
/// other node in topological order.
fn overlapping_schedule(reach: &Reach, a: usize, b: usize) -> Vec<Slot> {
    let order = &reach.order;
    let before = |v: usize| v != a && v != b && (reach.reaches(v, a) || reach.reaches(v, b));
    let mut slots = vec![];
    let mut t = 0;
    for &v in order.iter().filter(|&&v| before(v)) {
        slots.push(Slot {
            node: v,
            start: t,
            end: t + 1,
        });
        t += 1;
    }
    for v in [a, b] {
        slots.push(Slot {
            node: v,
            start: t,
            end: t + 1,
        });
    }
    t += 1;
    for &v in order.iter().filter(|&&v| v != a && v != b && !before(v)) {
        slots.push(Slot {
            node: v,
            start: t,
            end: t + 1,
        });
        t += 1;
    }
    slots
}

/// Whether `schedule` keeps every edge of `graph` (each node starts after all its
/// predecessors end) and places every node once.
pub fn keeps_every_edge(graph: &DriverGraph, schedule: &[Slot]) -> bool {
    let mut at: HashMap<usize, &Slot> = HashMap::new();
    for s in schedule {
        let known = s.node < graph.nodes.len();
        if !known || s.start >= s.end || at.insert(s.node, s).is_some() {
            return false;
        }
    }
    at.len() == graph.nodes.len()
        && (graph.edges.iter()).all(|[from, to]| match (at.get(from), at.get(to)) {
            (Some(f), Some(t)) => f.end <= t.start,
            _ => false,
        })
}
