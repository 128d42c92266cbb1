//! The static check: happens-before over the captured graph, no replay needed.
//!
//! Three kinds of finding, from the most to the least specific:
//! - [`Finding::UnorderedReuse`]: the pool gave a block (or part of one) to a new tensor while
//!   an access of the previous tenant, on another stream, is not ordered before an access of
//!   the new one, and one of them writes. This is the incident's race.
//! - [`Finding::UnorderedAccess`]: two kernels on different streams touch the same tensor, one
//!   writes, and nothing orders them.
//! - [`Finding::UnrecordedFree`]: a tensor used on another stream was freed before that use is
//!   ordered, without `record_stream`. With the sizes at hand no tensor may have landed on the
//!   block, but any change of layout can turn it into a reuse race: it is latent.
//!
//! Kernels on the same stream are always ordered, so only cross-stream pairs are examined.

use std::ops::Range;

use serde::Serialize;

use crate::capture::{Graph, Node};
use crate::program::Stream;

/// One access as the report names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Use {
    /// The tensor's name.
    pub tensor: String,
    /// The kernel's name.
    pub kernel: String,
    /// The kernel's stream.
    pub stream: Stream,
    /// A write (else a read).
    pub write: bool,
}

/// A hazard the check found (see the module docs for the three kinds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// A block's previous and new tenant touched it unordered: the incident's race.
    UnorderedReuse {
        /// The bytes both tenants occupy.
        overlap: Range<u64>,
        /// The previous tenant's access.
        earlier: Use,
        /// The new tenant's.
        later: Use,
    },
    /// Two streams touch one tensor unordered, one of them writing.
    UnorderedAccess {
        /// One access.
        first: Use,
        /// The other.
        second: Use,
    },
    /// A cross-stream use not ordered before the free, and not recorded: latent.
    UnrecordedFree {
        /// The tensor freed.
        tensor: String,
        /// The allocating stream, which the pool hands the block back to.
        freed_on: Stream,
        /// The cross-stream use the free is not ordered after.
        used_by: Use,
    },
}

impl Finding {
    /// A race in this layout (as opposed to a latent hazard).
    pub fn is_race(&self) -> bool {
        !matches!(self, Finding::UnrecordedFree { .. })
    }

    /// A race's two accesses, the one that should come first first (the earlier tenant's, or
    /// the earlier launch's); `None` for a latent hazard.
    pub fn race_pair(&self) -> Option<(&Use, &Use)> {
        match self {
            Finding::UnorderedReuse { earlier, later, .. } => Some((earlier, later)),
            Finding::UnorderedAccess { first, second } => Some((first, second)),
            Finding::UnrecordedFree { .. } => None,
        }
    }
}

/// `29.59 MiB (31027200 B)`: the project's byte policy ([`basics::bytes::show`]), then the count
/// whole and ungrouped, to search a log for.
pub(crate) fn readable_bytes(b: u64) -> String {
    let shown = basics::bytes::show(b);
    if b < basics::bytes::Unit::KiB.size() {
        shown
    } else {
        format!("{shown} ({b} B)")
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let u = |u: &Use| {
            format!(
                "{} {} `{}` on {}",
                u.kernel,
                if u.write { "writes" } else { "reads" },
                u.tensor,
                u.stream.name()
            )
        };
        match self {
            Finding::UnorderedReuse {
                overlap,
                earlier,
                later,
            } => write!(
                f,
                "race: reuse of {} at +{:#x}: {}, unordered with {}",
                readable_bytes(overlap.end - overlap.start),
                overlap.start,
                u(earlier),
                u(later)
            ),
            Finding::UnorderedAccess { first, second } => {
                write!(f, "race: {}, unordered with {}", u(first), u(second))
            }
            Finding::UnrecordedFree {
                tensor,
                freed_on,
                used_by,
            } => write!(
                f,
                "latent: `{tensor}` goes back to {}'s pool before {} is ordered, and the use is not recorded",
                freed_on.name(),
                u(used_by)
            ),
        }
    }
}

/// Everything the check found, races first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Races first, then latent hazards.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The findings that race in this layout.
    pub fn races(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.is_race())
    }

    /// Nothing found, not even a latent hazard.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

fn overlap(a: &Range<u64>, b: &Range<u64>) -> Option<Range<u64>> {
    let r = a.start.max(b.start)..a.end.min(b.end);
    (r.start < r.end).then_some(r)
}

fn ordered(a: &Node, b: &Node) -> bool {
    a.happens_before(b) || b.happens_before(a)
}

/// Checks every cross-stream pair of accesses to overlapping bytes, and every free.
pub fn check(graph: &Graph) -> Report {
    let use_of = |node: &Node, tensor, write| Use {
        tensor: graph.tensor_name(tensor).to_string(),
        kernel: node.kernel.name.clone(),
        stream: node.kernel.stream,
        write,
    };
    let mut races = vec![];
    for (i, a) in graph.nodes.iter().enumerate() {
        for b in &graph.nodes[i + 1..] {
            if a.kernel.stream == b.kernel.stream || ordered(a, b) {
                continue;
            }
            for x in &a.accesses {
                for y in &b.accesses {
                    if !(x.write || y.write) {
                        continue;
                    }
                    let (px, py) = (graph.placement(x.tensor), graph.placement(y.tensor));
                    let Some(bytes) = overlap(&px.range, &py.range) else {
                        continue;
                    };
                    let (ux, uy) = (use_of(a, x.tensor, x.write), use_of(b, y.tensor, y.write));
                    let finding = if x.tensor == y.tensor {
                        Finding::UnorderedAccess {
                            first: ux,
                            second: uy,
                        }
                    } else {
                        // The tenant allocated first is the earlier one.
                        let (earlier, later) = if px.alloc_op < py.alloc_op {
                            (ux, uy)
                        } else {
                            (uy, ux)
                        };
                        Finding::UnorderedReuse {
                            overlap: bytes,
                            earlier,
                            later,
                        }
                    };
                    if !races.contains(&finding) {
                        races.push(finding);
                    }
                }
            }
        }
    }
    let mut latent = vec![];
    for (t, p) in graph.placements.iter().enumerate() {
        let Some((p, free_clock)) = p.as_ref().and_then(|p| Some((p, p.free_clock?))) else {
            continue;
        };
        for node in &graph.nodes {
            let s = node.kernel.stream;
            let uses = node.accesses.iter().filter(|a| a.tensor.0 == t);
            for access in uses {
                let after_free = node.clock[s.index()] > free_clock[s.index()];
                if s != p.stream && !p.recorded.contains(&s) && after_free {
                    let finding = Finding::UnrecordedFree {
                        tensor: graph.tensors[t].name.clone(),
                        freed_on: p.stream,
                        used_by: use_of(node, access.tensor, access.write),
                    };
                    if !latent.contains(&finding) {
                        latent.push(finding);
                    }
                }
            }
        }
    }
    races.extend(latent);
    Report { findings: races }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::capture;
    use crate::program::{Cost, Program};
    use Stream::*;

    const C: Cost = Cost {
        fixed_us: 1.0,
        per_session_us: 0.0,
    };
    const MIB: u64 = 1 << 20;

    /// The incident in six lines: main allocates, side reads, the host frees at once, main
    /// reuses the block for its own output.
    fn handoff(record: bool, join_before_free: bool) -> Program {
        let mut p = Program::new(2);
        let scratch = p.alloc("scratch", Main, 4 * MIB);
        p.launch("fill", Main, C, &[], &[scratch]);
        p.wait(Side, Main);
        p.launch("consume", Side, C, &[scratch], &[]);
        if record {
            p.record_stream(scratch, Side);
        }
        if join_before_free {
            p.wait(Main, Side);
        }
        p.free(scratch);
        let out = p.alloc("out", Main, 4 * MIB);
        p.launch("produce", Main, C, &[], &[out]);
        p.wait(Main, Side);
        p
    }

    #[test]
    fn finds_the_unordered_reuse_and_the_free_behind_it() {
        let report = check(&capture(&handoff(false, false)).unwrap());
        let text: Vec<String> = report.findings.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            text,
            [
                "race: reuse of 8 MiB (8388608 B) at +0x0: consume reads `scratch` on side, unordered with produce writes `out` on main",
                "latent: `scratch` goes back to main's pool before consume reads `scratch` on side is ordered, and the use is not recorded",
            ]
        );
    }

    #[test]
    fn recording_the_use_or_joining_first_leaves_nothing() {
        assert!(check(&capture(&handoff(true, false)).unwrap()).is_clean());
        assert!(check(&capture(&handoff(false, true)).unwrap()).is_clean());
    }

    #[test]
    fn an_unordered_write_to_one_tensor_is_a_race_too() {
        let mut p = Program::new(1);
        let t = p.fixed("cache", 64);
        p.launch("w", Main, C, &[], &[t]);
        p.launch("r", Side, C, &[t], &[]);
        let report = check(&capture(&p).unwrap());
        assert!(matches!(
            report.findings[..],
            [Finding::UnorderedAccess { .. }]
        ));
    }
}
