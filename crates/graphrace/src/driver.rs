//! The graph CUDA built: what `graphrace-gpu --dump-graph` read back from the driver after
//! stream capture, and the static check run on it instead of on the model's graph.
//!
//! A dump holds, per configuration, the driver's nodes (type, kernel function, arguments
//! decoded with the kernels' known signatures, and the bytes each reads and writes), the
//! dependency edges, and the memory map the GPU arm laid out (each tensor's address range, with
//! when the host allocated and freed it). Nothing in it comes from the model's ordering: the
//! order is the driver's edges alone.
//!
//! The check ([`check`]) finds every pair of nodes that touch overlapping bytes, one writing,
//! with no path between them in the graph, and gives for each a [`Witness`]: the two accesses,
//! the bytes and the tensors they belong to, the free that handed the block from one tenant to
//! the next, the edge that would order them, and one schedule that keeps every edge of the
//! graph in which the two accesses run at once. [`compare`] says where the driver's ordering
//! differs from the model's.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::capture::Graph;
use crate::check::readable_bytes;
use crate::program::Stream;

/// A dump file larger than this is refused before it is read.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// The most nodes a graph may have: the check keeps a bit per ordered pair (50 MB at this size).
pub const MAX_NODES: usize = 20_000;
/// The most edges a graph may have.
pub const MAX_EDGES: usize = 1_000_000;
/// The most byte accesses a graph's nodes may have, all together.
pub const MAX_ACCESSES: usize = 1_000_000;
/// The most races [`check`] lists (each witness holds a schedule of every node): a graph with
/// more has bigger problems than the list.
pub const MAX_WITNESSES: usize = 100;

/// A dump file: provenance first (`command` is the very first field), then one graph per
/// configuration captured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphDump {
    /// The command that wrote the file.
    pub command: String,
    /// The GPU's name.
    pub gpu: String,
    /// The driver's version.
    pub driver: String,
    /// When (UTC).
    pub date: String,
    /// The repository's revision the binary was built from.
    pub git_revision: String,
    /// One per configuration.
    pub graphs: Vec<DriverGraph>,
}

/// One captured graph, as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverGraph {
    /// The configuration's name (`repro/graphrace/<name>.toml`), or in a suite's dump the
    /// variant's (`incident@36`: the configuration at that many sessions).
    pub config: String,
    /// Concurrent sessions it was captured for.
    pub sessions: u32,
    /// The memory map: every tensor (and harness buffer) the kernels were given.
    pub regions: Vec<Region>,
    /// The driver's nodes, in the order `cuGraphGetNodes` listed them.
    pub nodes: Vec<DriverNode>,
    /// Dependency edges `[from, to]`: `to` starts after `from` finishes.
    pub edges: Vec<[usize; 2]>,
}

/// A named range of device memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    /// The tensor's name in the step, or the harness buffer's.
    pub name: String,
    /// Its first byte's device address.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    /// Where it lives.
    pub home: RegionHome,
    /// For a pool tensor: the position among the step's host ops of its allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_op: Option<usize>,
    /// For a pool tensor the host freed: the position of the free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_op: Option<usize>,
    /// For a pool tensor: the stream it was allocated on (its pool tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<Stream>,
}

/// Where a region lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegionHome {
    /// Handed out by the graph's private pool: its bytes may have had another tenant.
    Pool,
    /// Allocated before capture and kept.
    Static,
    /// The GPU arm's own (the replay counter): not part of the step.
    Harness,
}

/// One node of the driver's graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverNode {
    /// The node's type as the driver reports it (`kernel`, `memset`, `event_record`, …).
    pub kind: String,
    /// A kernel node's function (`cuFuncGetName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The host op (its position among the step's ops, as in the memory map) whose launch
    /// created the node, as the capture itself reported it right after the launch
    /// (`cuStreamGetCaptureInfo`); `None` for the harness's own launches. It says which tenant
    /// of a reused block the node's bytes belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_op: Option<usize>,
    /// A kernel node's grid and block, `[grid_x, block_x]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<[u32; 2]>,
    /// A kernel node's arguments as read back from the driver, decoded with the kernel's
    /// signature, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<(String, u64)>,
    /// The bytes it reads and writes, from its arguments and what the kernel does with them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accesses: Vec<ByteAccess>,
}

/// A range of bytes one node reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByteAccess {
    /// First byte's address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// A write (else a read).
    pub write: bool,
}

/// A dump that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// The file cannot be read.
    #[error("{origin}: {reason}")]
    Unreadable {
        /// The file.
        origin: String,
        /// Why not.
        reason: String,
    },
    /// Larger than [`MAX_FILE_BYTES`].
    #[error("{origin}: {bytes} bytes, more than the {max} a graph dump may have")]
    TooLarge {
        /// The file.
        origin: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// Not JSON of the dump's shape.
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        /// The file.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// JSON of the right shape that no driver could have written.
    #[error("{origin}: graph `{config}`: {reason}")]
    Invalid {
        /// The file.
        origin: String,
        /// The graph's configuration.
        config: String,
        /// What is wrong, naming the node or edge.
        reason: String,
    },
}

impl GraphDump {
    /// Reads a dump from `text`, named `origin` in errors; every graph is validated
    /// ([`DriverGraph::validate`]).
    pub fn parse(origin: &str, text: &str) -> Result<GraphDump, DumpError> {
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(DumpError::TooLarge {
                origin: origin.into(),
                bytes: text.len() as u64,
                max: MAX_FILE_BYTES,
            });
        }
        let dump: GraphDump = serde_json::from_str(text).map_err(|e| DumpError::Syntax {
            origin: origin.into(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        for g in &dump.graphs {
            g.validate().map_err(|reason| DumpError::Invalid {
                origin: origin.into(),
                config: g.config.clone(),
                reason,
            })?;
        }
        Ok(dump)
    }

    /// Reads the dump at `path`, refusing a file over [`MAX_FILE_BYTES`] before reading it.
    pub fn read(path: &std::path::Path) -> Result<GraphDump, DumpError> {
        let origin = path.display().to_string();
        let unreadable = |e: std::io::Error| DumpError::Unreadable {
            origin: origin.clone(),
            reason: e.to_string(),
        };
        let bytes = std::fs::metadata(path).map_err(unreadable)?.len();
        if bytes > MAX_FILE_BYTES {
            return Err(DumpError::TooLarge {
                origin,
                bytes,
                max: MAX_FILE_BYTES,
            });
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        GraphDump::parse(&origin, &text)
    }

    /// The graph captured for `config`.
    pub fn graph(&self, config: &str) -> Option<&DriverGraph> {
        self.graphs.iter().find(|g| g.config == config)
    }
}

impl DriverGraph {
    /// Refuses what no capture could produce: sizes past the limits, an edge to a node that
    /// does not exist or to itself, a cycle, an empty or inverted byte range.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.nodes.len();
        if n > MAX_NODES {
            return Err(format!(
                "{n} nodes, more than the {MAX_NODES} the check takes"
            ));
        }
        if self.edges.len() > MAX_EDGES {
            return Err(format!(
                "{} edges, more than the {MAX_EDGES} the check takes",
                self.edges.len()
            ));
        }
        for (i, [from, to]) in self.edges.iter().enumerate() {
            if *from >= n || *to >= n {
                return Err(format!(
                    "edge {i} ({from} → {to}) names a node past the graph's {n}"
                ));
            }
            if from == to {
                return Err(format!("edge {i} runs from node {from} to itself"));
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(a) = node.accesses.iter().find(|a| a.start >= a.end) {
                return Err(format!(
                    "node {i} accesses an empty or inverted range {:#x}..{:#x}",
                    a.start, a.end
                ));
            }
        }
        let accesses: usize = self.nodes.iter().map(|n| n.accesses.len()).sum();
        if accesses > MAX_ACCESSES {
            return Err(format!(
                "{accesses} byte accesses, more than the {MAX_ACCESSES} the check takes"
            ));
        }
        if let Some(r) = (self.regions.iter())
            .find(|r| matches!((r.alloc_op, r.free_op), (Some(a), Some(f)) if f <= a))
        {
            return Err(format!(
                "region `{}` is freed before it is allocated",
                r.name
            ));
        }
        if let Some(r) = self.regions.iter().find(|r| r.start >= r.end) {
            return Err(format!(
                "region `{}` is empty or inverted ({:#x}..{:#x})",
                r.name, r.start, r.end
            ));
        }
        if topological_order(n, &self.edges).is_none() {
            return Err("its edges form a cycle".into());
        }
        Ok(())
    }

    /// What a node is called in reports: its function and what it writes (`sweep → logits`).
    pub fn node_name(&self, node: usize) -> String {
        let n = &self.nodes[node];
        let what = n.function.as_deref().unwrap_or(&n.kind);
        // What it writes of the step's; the harness's own buffers only if that is all.
        let written: Vec<&Region> = (n.accesses.iter())
            .filter(|a| a.write)
            .flat_map(|a| self.tenants(node, a.start..a.end))
            .collect();
        let of_step = written.iter().any(|r| r.home != RegionHome::Harness);
        let mut writes: Vec<&str> = (written.iter())
            .filter(|r| !of_step || r.home != RegionHome::Harness)
            .map(|r| r.name.as_str())
            .collect();
        writes.dedup();
        if writes.is_empty() {
            format!("#{node} {what}")
        } else {
            format!("#{node} {what} → {}", writes.join(", "))
        }
    }

    /// The regions whose bytes `node` touches in `bytes`: of a pool block's tenants, the one
    /// live when the host launched the node (every tenant, when the node's host op is unknown).
    pub fn tenants(&self, node: usize, bytes: Range<u64>) -> impl Iterator<Item = &Region> {
        let op = self.nodes[node].host_op;
        (self.regions.iter()).filter(move |r| {
            let live = match (op, r.home, r.alloc_op) {
                (Some(op), RegionHome::Pool, Some(alloc)) => {
                    alloc <= op && r.free_op.is_none_or(|free| op < free)
                }
                _ => true,
            };
            live && r.start < bytes.end && bytes.start < r.end
        })
    }
}

/// The nodes in an order that keeps every edge, or `None` if the edges form a cycle.
fn topological_order(n: usize, edges: &[[usize; 2]]) -> Option<Vec<usize>> {
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![vec![]; n];
    for &[from, to] in edges {
        indegree[to] += 1;
        out[from].push(to);
    }
    let mut ready: Vec<usize> = (0..n).rev().filter(|&v| indegree[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop() {
        order.push(v);
        for &w in out[v].iter().rev() {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(w);
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// Which nodes each node reaches: a bit per pair, filled in reverse topological order.
pub struct Reach {
    words: usize,
    bits: Vec<u64>,
    /// The nodes in an order that keeps every edge.
    order: Vec<usize>,
}

impl Reach {
    /// The reachability of a validated graph.
    pub fn of(graph: &DriverGraph) -> Reach {
        let n = graph.nodes.len();
        let words = n.div_ceil(64);
        let mut bits = vec![0u64; n * words];
        let mut out: Vec<Vec<usize>> = vec![vec![]; n];
        for &[from, to] in &graph.edges {
            out[from].push(to);
        }
        let order = topological_order(n, &graph.edges).expect("a validated graph has no cycle");
        for &v in order.iter().rev() {
            for &w in &out[v] {
                bits[v * words + w / 64] |= 1 << (w % 64);
                or_row(&mut bits, words, v, w);
            }
        }
        Reach { words, bits, order }
    }

    /// A path of edges leads from `a` to `b`.
    pub fn reaches(&self, a: usize, b: usize) -> bool {
        self.bits[a * self.words + b / 64] >> (b % 64) & 1 == 1
    }

    /// `a` and `b` are ordered one way or the other.
    pub fn ordered(&self, a: usize, b: usize) -> bool {
        self.reaches(a, b) || self.reaches(b, a)
    }
}

/// Row `dst` |= row `src` (`dst != src`: a validated graph has no edge to itself).
fn or_row(bits: &mut [u64], words: usize, dst: usize, src: usize) {
    let (to, from) = if dst < src {
        let (low, high) = bits.split_at_mut(src * words);
        (&mut low[dst * words..(dst + 1) * words], &high[..words])
    } else {
        let (low, high) = bits.split_at_mut(dst * words);
        (&mut high[..words], &low[src * words..(src + 1) * words])
    };
    for (t, f) in to.iter_mut().zip(from) {
        *t |= f;
    }
}

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

/// Where the driver's graph and the model's agree and differ.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// Model kernels found in the driver's graph (by the bytes they read and write).
    pub matched: usize,
    /// Driver nodes that no model kernel matched, named (in the GPU arm's graphs: its own
    /// replay counter).
    pub harness: Vec<String>,
    /// Model kernels the driver's graph lacks.
    pub missing: Vec<String>,
    /// Pairs the driver orders and the model does not, `(earlier, later)` by name.
    pub only_driver_orders: Vec<(String, String)>,
    /// Pairs the model orders and the driver does not.
    pub only_model_orders: Vec<(String, String)>,
}

impl Comparison {
    /// Same kernels, same order.
    pub fn agrees(&self) -> bool {
        self.missing.is_empty()
            && self.only_driver_orders.is_empty()
            && self.only_model_orders.is_empty()
    }
}

/// Compares the driver's graph with the model's for the same configuration: each model kernel
/// is looked for among the driver's nodes by the tensors it reads and writes (through the
/// memory map), then every pair of kernels found is compared for order.
pub fn compare(driver: &DriverGraph, model: &Graph) -> Comparison {
    let reach = Reach::of(driver);
    // A driver node's accesses as (tensor, write), through the memory map.
    let touches = |d: usize| {
        let mut t: Vec<(String, bool)> = (driver.nodes[d].accesses.iter())
            .flat_map(|a| (driver.tenants(d, a.start..a.end)).map(|r| (r.name.clone(), a.write)))
            .collect();
        t.sort();
        t.dedup();
        t
    };
    let driver_touches: Vec<Vec<(String, bool)>> = (0..driver.nodes.len()).map(touches).collect();
    let mut taken = vec![false; driver.nodes.len()];
    let mut found: Vec<(usize, usize)> = vec![];
    let mut comparison = Comparison::default();
    for (m, node) in model.nodes.iter().enumerate() {
        let mut want: Vec<(String, bool)> = (node.accesses.iter())
            .map(|a| (model.tensor_name(a.tensor).to_string(), a.write))
            .collect();
        want.sort();
        want.dedup();
        // Harness buffers the kernel also touches (the replay counter) are not the model's.
        let candidate = (0..driver.nodes.len()).find(|&d| {
            !taken[d] && {
                let model_part: Vec<&(String, bool)> = (driver_touches[d].iter())
                    .filter(|(name, _)| !is_harness(driver, name))
                    .collect();
                model_part.len() == want.len() && model_part.iter().zip(&want).all(|(a, b)| *a == b)
            }
        });
        match candidate {
            Some(d) => {
                taken[d] = true;
                found.push((m, d));
            }
            None => comparison.missing.push(node.kernel.name.clone()),
        }
    }
    comparison.matched = found.len();
    comparison.harness = (0..driver.nodes.len())
        .filter(|&d| !taken[d])
        .map(|d| driver.node_name(d))
        .collect();
    for (i, &(ma, da)) in found.iter().enumerate() {
        for &(mb, db) in &found[i + 1..] {
            let (a, b) = (&model.nodes[ma], &model.nodes[mb]);
            let name = |m: usize| model.nodes[m].kernel.name.clone();
            let model_ab = a.happens_before(b);
            let model_ba = b.happens_before(a);
            for (m1, m2, d1, d2, model_says) in
                [(ma, mb, da, db, model_ab), (mb, ma, db, da, model_ba)]
            {
                let driver_says = reach.reaches(d1, d2);
                if driver_says && !model_says {
                    comparison.only_driver_orders.push((name(m1), name(m2)));
                } else if model_says && !driver_says {
                    comparison.only_model_orders.push((name(m1), name(m2)));
                }
            }
        }
    }
    comparison
}

/// The pool tensors the driver's graph holds at other offsets than the model's capture puts
/// them, by name: the GPU arm laid out the tensors where the model's allocator of its day put
/// them, so a dump made before a change of the allocator's rules keeps the old layout.
/// Offsets are taken from the lowest pool address on each side.
pub fn layout_differences(driver: &DriverGraph, model: &Graph) -> Vec<String> {
    let pool: Vec<&Region> = (driver.regions.iter())
        .filter(|r| r.home == RegionHome::Pool)
        .collect();
    let driver_base = pool.iter().map(|r| r.start).min().unwrap_or(0);
    let model_base = (model.placements.iter().zip(&model.tensors))
        .filter(|(_, t)| t.home == crate::program::Home::Pool)
        .filter_map(|(p, _)| p.as_ref().map(|p| p.range.start))
        .min()
        .unwrap_or(0);
    let mut differ = vec![];
    for r in pool {
        let at = (model.tensors.iter().position(|t| t.name == r.name))
            .and_then(|i| model.placements[i].as_ref())
            .map(|p| (p.range.start - model_base, p.range.end - model_base));
        if at != Some((r.start - driver_base, r.end - driver_base)) {
            differ.push(r.name.clone());
        }
    }
    differ
}

fn is_harness(graph: &DriverGraph, name: &str) -> bool {
    (graph.regions.iter()).any(|r| r.name == name && r.home == RegionHome::Harness)
}
