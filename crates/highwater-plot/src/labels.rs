//! Placing small labels beside what they name without covering each other: near a point (a
//! death marker), nudged or stacked further out when closer slots are taken; or in a column
//! (the ends of lines), spread apart just enough.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::theme::stroke;

/// A pixel box `[x0, x1) × [y0, y1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PxBox {
    pub(crate) x0: i32,
    pub(crate) y0: i32,
    pub(crate) x1: i32,
    pub(crate) y1: i32,
}

impl PxBox {
    pub(crate) fn new(x0: i32, y0: i32, x1: i32, y1: i32) -> Self {
        PxBox { x0, y0, x1, y1 }
    }

    /// A `2r × 2r` box around `(x, y)`: what a marker covers.
    pub(crate) fn around((x, y): (i32, i32), r: i32) -> Self {
        PxBox::new(x - r, y - r, x + r + 1, y + r + 1)
    }

    pub(crate) fn overlaps(&self, o: &PxBox) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    pub(crate) fn inside(&self, o: &PxBox) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }

    pub(crate) fn centre(&self) -> (i32, i32) {
        ((self.x0 + self.x1) / 2, (self.y0 + self.y1) / 2)
    }

    /// The point of the box's outline nearest to `(x, y)`.
    fn nearest(&self, (x, y): (i32, i32)) -> (i32, i32) {
        (x.clamp(self.x0, self.x1), y.clamp(self.y0, self.y1))
    }
}

/// Space between a marker's centre and its label.
const GAP: i32 = 7;
/// How far out labels are stacked before one is allowed to cover another.
const MAX_ROWS: i32 = 40;

/// The slot for a `w × h` label of the mark at `(x, y)`: straight above it if free, else the
/// nearest free one above or below, nudged sideways by up to two label widths and stacked up
/// to [`MAX_ROWS`] rows out (above wins a tie). Inside `bounds` whenever the label fits there.
/// Always a slot: when every candidate is taken, the nearest one in bounds (the label then
/// covers another: with forty rows of candidates, only a figure with hundreds of marks on
/// one spot gets there).
pub(crate) fn place((x, y): (i32, i32), w: i32, h: i32, bounds: PxBox, taken: &[PxBox]) -> PxBox {
    let mut candidates: Vec<(i32, PxBox)> = Vec::new();
    let nudges = [0, w / 2 + 2, w + 4, 3 * w / 2 + 6, 2 * w + 8];
    for row in 0..MAX_ROWS {
        for (side, top) in [(0, y - GAP - h - row * h), (1, y + GAP + row * h)] {
            for dx in nudges.iter().flat_map(|&d| [d, -d]) {
                let cx = x + dx;
                let b = PxBox::new(cx - w / 2, top, cx - w / 2 + w, top + h);
                // Cost: the distance moved, sideways counted a little cheaper than outwards.
                let cost = 4 * row * h + 3 * dx.abs() + side;
                candidates.push((cost, b));
            }
        }
    }
    candidates.sort_by_key(|c| c.0);
    let in_bounds = || candidates.iter().map(|c| c.1).filter(|b| b.inside(&bounds));
    in_bounds()
        .find(|b| !taken.iter().any(|t| t.overlaps(b)))
        .or_else(|| in_bounds().next())
        .unwrap_or(candidates[0].1)
}

/// Whether a label at `b` sits far enough from its mark at `at` to need a line to it.
pub(crate) fn needs_leader(at: (i32, i32), b: &PxBox) -> bool {
    let (nx, ny) = b.nearest(at);
    (nx - at.0).abs() > 2 || (ny - at.1).abs() > GAP + 2
}

/// A thin line from a mark at `at` (leaving its radius `r` clear) to its label at `b`.
pub(crate) fn leader<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    r: i32,
    b: &PxBox,
    colour: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let to = b.nearest(at);
    let (dx, dy) = (f64::from(to.0 - at.0), f64::from(to.1 - at.1));
    let len = dx.hypot(dy);
    if len <= f64::from(r) + 1.0 {
        return Ok(());
    }
    let from = (
        at.0 + (dx / len * f64::from(r + 1)).round() as i32,
        at.1 + (dy / len * f64::from(r + 1)).round() as i32,
    );
    area.draw(&PathElement::new(vec![from, to], stroke(colour, 1)))
}

/// Centres for labels `h` tall that want to sit at `desired` (one each) in a column from `lo`
/// to `hi`: each as near its wish as it can be with none overlapping. Labels that would overlap
/// form a block centred on their wishes' mean; blocks are kept inside `[lo, hi]` when they fit.
/// The labels keep the order of their wishes (ties in the order given).
pub(crate) fn spread(desired: &[f64], h: f64, lo: f64, hi: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..desired.len()).collect();
    order.sort_by(|&a, &b| desired[a].total_cmp(&desired[b]));
    // Blocks of consecutive labels (in `order`): (first, count, centre).
    let mut blocks: Vec<(usize, usize, f64)> = Vec::new();
    let clamp = |c: f64, n: usize| {
        let half = n as f64 * h / 2.0;
        c.min(hi - half).max(lo + half)
    };
    for (k, &i) in order.iter().enumerate() {
        blocks.push((k, 1, clamp(desired[i], 1)));
        while blocks.len() > 1 {
            let (f1, n1, c1) = blocks[blocks.len() - 1];
            let (f0, n0, c0) = blocks[blocks.len() - 2];
            if c0 + n0 as f64 * h / 2.0 <= c1 - n1 as f64 * h / 2.0 + 1e-9 {
                break;
            }
            let n = n0 + n1;
            let mean = order[f0..f1 + n1].iter().map(|&j| desired[j]).sum::<f64>() / n as f64;
            blocks.truncate(blocks.len() - 2);
            blocks.push((f0, n, clamp(mean, n)));
        }
    }
    let mut out = vec![0.0; desired.len()];
    for (first, n, c) in blocks {
        let top = c - n as f64 * h / 2.0 + h / 2.0;
        for (k, &i) in order[first..first + n].iter().enumerate() {
            out[i] = top + k as f64 * h;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_gets_a_free_slot_while_there_is_room() {
        let bounds = PxBox::new(0, 0, 800, 400);
        let mut taken = Vec::new();
        // Forty marks on nearly one spot near the top: all labelled, none overlapping.
        for i in 0..40 {
            let b = place((300 + i * 3, 30), 44, 13, bounds, &taken);
            assert!(b.inside(&bounds));
            assert!(taken.iter().all(|t: &PxBox| !t.overlaps(&b)), "label {i}");
            taken.push(b);
        }
        // A free spot straight above is used as is, with no leader.
        let b = place((600, 200), 44, 13, bounds, &[]);
        assert_eq!(b.centre().0, 600);
        assert!(b.y1 <= 200 - GAP);
        assert!(!needs_leader((600, 200), &b));
        // Far from its mark, a label gets a leader.
        assert!(needs_leader((300, 30), taken.last().unwrap()));
    }

    #[test]
    fn a_full_plot_still_labels_every_mark() {
        let bounds = PxBox::new(0, 0, 100, 40);
        let taken = vec![bounds];
        let b = place((50, 20), 30, 13, bounds, &taken);
        assert!(b.inside(&bounds));
    }

    #[test]
    fn spread_keeps_order_and_separates() {
        let got = spread(&[100.0, 100.0, 100.0, 300.0, 10.0], 10.0, 0.0, 400.0);
        // Three wishing for 100 centre on it, 10 apart; the lone ones stay put.
        assert_eq!(got, vec![90.0, 100.0, 110.0, 300.0, 10.0]);
        // Against the edge a block is pushed inside, and pulls in a neighbour it now meets.
        let got = spread(&[2.0, 2.0, 14.0], 10.0, 0.0, 400.0);
        assert_eq!(got, vec![5.0, 15.0, 25.0]);
        let got = spread(&[398.0, 399.0], 10.0, 0.0, 400.0);
        assert_eq!(got, vec![385.0, 395.0]);
        for w in spread(&[5.0; 12], 13.0, 0.0, 400.0).windows(2) {
            assert!((w[1] - w[0] - 13.0).abs() < 1e-9);
        }
    }
}
