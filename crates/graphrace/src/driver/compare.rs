//! The driver's graph against the model's: kernels matched, orderings and layouts that differ.

use serde::Serialize;

use super::dump::{DriverGraph, Region, RegionHome};
use super::reach::Reach;
use crate::capture::Graph;

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
        let at = (model.tensor(&r.name))
            .and_then(|i| model.placements[i.0].as_ref())
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
