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

mod compare;
mod dump;
mod race;
mod reach;

pub use compare::{Comparison, compare, layout_differences};
pub use dump::{ByteAccess, DriverGraph, DriverNode, DumpError, GraphDump, Region, RegionHome};
pub use race::{Handoff, NodeAccess, Slot, Witness, check, keeps_every_edge};
pub use reach::Reach;

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
