//! The view's data: which bands and steps are drawn, free space, and the JSON the script reads.

use std::fmt::Write;

use super::layout::{Lanes, json_str};
use super::{
    Band, DetailStep, FreeSpace, LANES_H, LEFT, MAX_BANDS, MemoryView, PLOT_W, SLICE_ALIGNMENT,
};

impl MemoryView {
    /// The pool's free space at event `at`: bytes free inside the pages held (of the pages
    /// the view shows) and the largest free gap, which bounds the largest reserve those pages
    /// can still take. Slices are laid out at the pool's 512-byte alignment.
    /// Only pages of `page_bytes` when given: the pages a reserve of one size class can use.
    pub fn free_space(&self, at: u64, page_bytes: Option<u64>) -> FreeSpace {
        self.free_in(&Self::live_by_page(self.bands.iter(), at), at, page_bytes)
    }

    /// [`MemoryView::free_space`] from the slices alive at `at`, by page.
    pub(super) fn free_in(
        &self,
        by_page: &std::collections::HashMap<u32, Vec<&Band>>,
        at: u64,
        page_bytes: Option<u64>,
    ) -> FreeSpace {
        let mut free = FreeSpace::default();
        for p in self
            .pages
            .iter()
            .filter(|p| p.since <= at && page_bytes.is_none_or(|b| b == p.bytes))
        {
            let slices = by_page.get(&p.number).map_or(&[][..], Vec::as_slice);
            let mut cursor = 0u64;
            for b in slices {
                let gap = b.offset.saturating_sub(cursor);
                free.bytes += gap;
                free.largest_gap = free.largest_gap.max(gap);
                cursor = cursor.max(b.offset + b.bytes.next_multiple_of(SLICE_ALIGNMENT));
            }
            let tail = p.bytes.saturating_sub(cursor);
            free.bytes += tail;
            free.largest_gap = free.largest_gap.max(tail);
            free.pages += 1;
        }
        free
    }

    /// The bands alive at `at`, by page, each page's in offset order.
    pub(super) fn live_by_page<'a>(
        bands: impl Iterator<Item = &'a Band>,
        at: u64,
    ) -> std::collections::HashMap<u32, Vec<&'a Band>> {
        let mut by_page: std::collections::HashMap<u32, Vec<&Band>> = Default::default();
        for b in bands.filter(|b| Self::alive_at(b, at)) {
            by_page.entry(b.page).or_default().push(b);
        }
        for slices in by_page.values_mut() {
            slices.sort_by_key(|b| b.offset);
        }
        by_page
    }

    /// The detailed steps within [`MAX_BANDS`], and the first step cut, if any.
    /// Each band counts once, at the first step it is alive in (steps are in event order);
    /// the first step is kept whole even past the budget, so that something is drawn.
    pub(super) fn budget(&self) -> (Vec<DetailStep>, Option<u64>) {
        let mut first_seen = vec![0usize; self.steps.len()];
        for b in &self.bands {
            let i = self.steps.partition_point(|s| s.end <= b.start);
            if let Some(s) = self.steps.get(i)
                && Self::alive_in(b, (s.start, s.end))
            {
                first_seen[i] += 1;
            }
        }
        let mut used = 0;
        for (i, s) in self.steps.iter().enumerate() {
            if used + first_seen[i] > MAX_BANDS && i > 0 {
                return (self.steps[..i].to_vec(), Some(s.step));
            }
            used += first_seen[i];
        }
        (self.steps.clone(), None)
    }

    /// Whether a band is alive during the window of events `(start, end)`.
    pub(super) fn alive_in(b: &Band, window: (u64, u64)) -> bool {
        b.start < window.1 && b.end.is_none_or(|e| e > window.0)
    }

    /// Whether a band is alive at event `at`.
    fn alive_at(b: &Band, at: u64) -> bool {
        b.start <= at && b.end.is_none_or(|e| e > at)
    }

    pub(super) fn data(
        &self,
        bands: &[&Band],
        steps: &[DetailStep],
        (initial, shown): (Option<u64>, Option<u64>),
        cut: Option<u64>,
        lanes: &Lanes,
    ) -> String {
        // Names repeat from step to step: each (tensor, op) is written once.
        let mut labels: Vec<(&str, &str)> = vec![];
        let mut label_of: std::collections::HashMap<(&str, &str), usize> = Default::default();
        let mut d = String::from("{\"bands\":[");
        for (i, b) in bands.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let key = (b.tensor.as_str(), b.op.as_str());
            let label = *label_of.entry(key).or_insert_with(|| {
                labels.push(key);
                labels.len() - 1
            });
            let _ = write!(
                d,
                "[{},{},{},{},{},{},{label},{}]",
                b.start,
                b.end.map_or("null".to_string(), |e| e.to_string()),
                b.page,
                b.offset,
                b.bytes,
                b.family,
                b.step * 2 + u64::from(b.late)
            );
        }
        d.push_str("],\"labels\":[");
        for (i, (tensor, op)) in labels.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let _ = write!(d, "[{},{}]", json_str(tensor), json_str(op));
        }
        d.push_str("],\"steps\":[");
        for (i, s) in steps.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let _ = write!(d, "[{},{},{}]", s.step, s.start, s.end);
        }
        d.push_str("],\"lanes\":[");
        for (i, p) in self.pages.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let (y, h) = lanes.lane(p.number);
            let _ = write!(d, "[{},{},{y:.2},{h:.2}]", p.number, p.bytes);
        }
        d.push_str("],\"families\":[");
        for (i, f) in self.families.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            d.push_str(&json_str(f));
        }
        let _ = write!(
            d,
            "],\"refusals\":[{}],\"overview\":[{}],\"initial\":{},\"shown\":{},\"cut\":{},\"geometry\":[{LEFT},{PLOT_W},{},{LANES_H}]}}",
            self.refusals
                .iter()
                .map(|r| format!(
                    "[{},{},{},{}]",
                    r.time,
                    r.bytes,
                    r.page_bytes,
                    json_str(&r.tensor)
                ))
                .collect::<Vec<_>>()
                .join(","),
            self.overview
                .iter()
                .map(|s| format!("[{},{},{},{}]", s.step, s.peak, s.reserved, s.failures))
                .collect::<Vec<_>>()
                .join(","),
            initial.map_or("null".into(), |s| s.to_string()),
            shown.map_or("null".into(), |s| s.to_string()),
            cut.map_or("null".into(), |s| s.to_string()),
            lanes.top,
        );
        d
    }
}
