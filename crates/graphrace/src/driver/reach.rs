//! Reachability in the driver's graph: a topological order and a bit per ordered pair.

use super::DriverGraph;

/// The nodes in an order that keeps every edge, or `None` if the edges form a cycle.
pub(super) fn topological_order(n: usize, edges: &[[usize; 2]]) -> Option<Vec<usize>> {
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
    pub(super) order: Vec<usize>,
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
