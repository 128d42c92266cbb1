//! The dump's data: the graphs the driver reported, their memory maps, and their validation.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::reach::topological_order;
use super::{MAX_ACCESSES, MAX_EDGES, MAX_FILE_BYTES, MAX_NODES};
use crate::program::Stream;

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
