//! The page view: one step's pages at the instant that matters, slices and free gaps.

use std::fmt::Write;

use super::layout::{Lanes, escape};
use super::{
    Band, DetailStep, FAMILY_COLOURS, LANES_H, LEFT, MemoryView, PAGE_BARS, PAGE_ROW, PAGE_VIEWS,
    PAGES_COLUMNS, PLOT_W,
};
use basics::bytes::axis;

impl MemoryView {
    pub(super) fn pages_height(&self) -> f64 {
        let (bars, groups) = self.page_rows();
        (bars.len().div_ceil(PAGES_COLUMNS) + groups.len()) as f64 * PAGE_ROW + 24.0
    }

    /// The page view's rows: the largest [`PAGE_BARS`] pages one bar each (indices into
    /// `pages`, largest first), the rest one row per size: (bytes, page numbers).
    fn page_rows(&self) -> (Vec<usize>, Vec<(u64, Vec<u32>)>) {
        let mut order: Vec<usize> = (0..self.pages.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(self.pages[i].bytes), self.pages[i].number));
        let rest = order.split_off(order.len().min(PAGE_BARS));
        let mut groups: Vec<(u64, Vec<u32>)> = vec![];
        for i in rest {
            let p = self.pages[i];
            match groups.last_mut() {
                Some((bytes, numbers)) if *bytes == p.bytes => numbers.push(p.number),
                _ => groups.push((p.bytes, vec![p.number])),
            }
        }
        (order, groups)
    }

    /// For every detailed step, its pages at the instant that matters; the group of the step
    /// [`MemoryView::initial`] names (else the last) is shown, the others wait for the script.
    /// Returns the SVG groups and, for steps with a refusal, a paragraph that explains it.
    pub(super) fn page_views(
        &self,
        bands: &[&Band],
        steps: &[DetailStep],
        shown: Option<u64>,
        lanes: &Lanes,
        id: &str,
    ) -> (String, String) {
        let top = lanes.top + LANES_H + 40.0;
        let mut out = String::new();
        let mut notes = String::new();
        // A page view costs about as much as a step's bands: only a few steps get one, the
        // one shown first, those with a refusal, then the last ones.
        let mut chosen: Vec<u64> = shown.into_iter().collect();
        for s in steps.iter().filter(|s| {
            self.refusals
                .iter()
                .any(|r| (s.start..s.end).contains(&r.time))
        }) {
            chosen.push(s.step);
        }
        chosen.extend(steps.iter().rev().map(|s| s.step));
        let mut seen = std::collections::BTreeSet::new();
        chosen.retain(|s| seen.insert(*s));
        chosen.truncate(PAGE_VIEWS);
        chosen.sort_unstable();
        if chosen.len() < steps.len() {
            let list = chosen
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                out,
                "<text class=\"hwv-nopages\" x=\"10\" y=\"{:.0}\" font-size=\"12\" \
                 display=\"none\">The page view is drawn for steps {list} only.</text>",
                top + 10.0
            );
        }
        for s in steps.iter().filter(|s| chosen.contains(&s.step)) {
            let (group, note) = self.page_view(bands, s, shown, top, id);
            out.push_str(&group);
            notes.push_str(&note);
        }
        let svg = format!(
            "<defs><pattern id=\"{id}-hatch\" width=\"4\" height=\"4\" \
             patternUnits=\"userSpaceOnUse\"><path d=\"M0,4 L4,0\" stroke=\"currentColor\" \
             stroke-width=\"0.6\" opacity=\"0.6\"/></pattern></defs>{out}"
        );
        (svg, notes)
    }

    /// The page view of step `s` at its instant: its SVG group, shown when it is the step
    /// `shown`, and, when a reserve was refused then, the paragraph that explains it.
    fn page_view(
        &self,
        bands: &[&Band],
        s: &DetailStep,
        shown: Option<u64>,
        top: f64,
        id: &str,
    ) -> (String, String) {
        let col_w = (PLOT_W + LEFT - 20.0) / PAGES_COLUMNS as f64;
        let mut notes = String::new();
        let (at, why) = self.instant(bands, s);
        let live = Self::live_by_page(bands.iter().copied(), at);
        let hidden = if Some(s.step) == shown {
            ""
        } else {
            " display=\"none\""
        };
        let free = self.free_in(&live, at, None);
        let refused = self.refusals.iter().find(|r| r.time == at);
        if let Some(r) = refused {
            let class = self.free_in(&live, at, Some(r.page_bytes));
            let _ = write!(
                notes,
                "<p class=\"hwv-says\" data-step=\"{}\"{}>In step {}, the refused reserve ({} for {}) could only go to a page of {}: the \
                     largest gap among those {} pages is {}, so the pool asked the driver \
                     for one more, and the card had no room left.</p>",
                s.step,
                if hidden.is_empty() { "" } else { " hidden" },
                s.step,
                axis(r.bytes),
                escape(&r.tensor),
                axis(r.page_bytes),
                class.pages,
                axis(class.largest_gap)
            );
        }
        let (bars, groups) = self.page_rows();
        let mut body = self.page_bars(&bars, &live, top, col_w, id);
        let first_row = bars.len().div_ceil(PAGES_COLUMNS);
        body.push_str(&Self::page_groups(
            &groups, first_row, &live, top, col_w, id,
        ));
        // Past the bars, pages are counted by size, not drawn one by one: say how many are bars.
        let drawn = if groups.is_empty() {
            String::new()
        } else {
            format!("; bars: the {} largest", bars.len())
        };
        let mut out = String::new();
        let _ = write!(
            out,
            "<g class=\"hwv-pages\" data-step=\"{}\"{hidden} font-size=\"12\"><text x=\"10\" \
             y=\"{:.0}\">Step {} {why}: {} free in its {} pages (largest gap {}){drawn}.</text>\
             {body}</g>",
            s.step,
            top + 10.0,
            s.step,
            axis(free.bytes),
            free.pages,
            axis(free.largest_gap)
        );
        (out, notes)
    }

    /// The page view's bars: one per page of `bars` (indices into `pages`), its live slices
    /// in colour over the hatched free bytes.
    fn page_bars(
        &self,
        bars: &[usize],
        live: &std::collections::HashMap<u32, Vec<&Band>>,
        top: f64,
        col_w: f64,
        id: &str,
    ) -> String {
        let mut body = String::new();
        for (k, p) in bars.iter().enumerate() {
            let page = self.pages[*p];
            let (col, row) = (k % PAGES_COLUMNS, k / PAGES_COLUMNS);
            let x0 = 10.0 + col as f64 * col_w;
            let y0 = top + 18.0 + row as f64 * PAGE_ROW;
            let bar = col_w - 16.0;
            let slices = live.get(&page.number).map_or(&[][..], Vec::as_slice);
            let _ = write!(
                body,
                "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{bar:.1}\" height=\"9\" \
                 fill=\"url(#{id}-hatch)\" stroke=\"currentColor\" stroke-width=\"0.4\" \
                 data-page=\"{}\"/>",
                page.number
            );
            for b in slices {
                let x = x0 + bar * b.offset as f64 / page.bytes as f64;
                let w = (bar * b.bytes as f64 / page.bytes as f64).max(0.4);
                let _ = write!(
                    body,
                    "<rect x=\"{x:.1}\" y=\"{y0:.1}\" width=\"{w:.1}\" height=\"9\" class=\"c{}\"/>",
                    b.family % FAMILY_COLOURS.len()
                );
            }
        }
        body
    }

    /// Pages past the bars: one row per size, a cell per page, filled when it holds
    /// a slice; the rows start at row `first_row`.
    fn page_groups(
        groups: &[(u64, Vec<u32>)],
        first_row: usize,
        live: &std::collections::HashMap<u32, Vec<&Band>>,
        top: f64,
        col_w: f64,
        id: &str,
    ) -> String {
        let mut body = String::new();
        for (g, (bytes, numbers)) in groups.iter().enumerate() {
            let y0 = top + 18.0 + (first_row + g) as f64 * PAGE_ROW;
            let used: Vec<bool> = numbers.iter().map(|n| live.contains_key(n)).collect();
            let in_use = used.iter().filter(|u| **u).count();
            let label = format!(
                "{} more pages of {}: {in_use} hold a slice, {} are empty",
                numbers.len(),
                axis(*bytes),
                numbers.len() - in_use
            );
            let width = 1.3 * col_w;
            let cell = width / numbers.len() as f64;
            let _ = write!(
                body,
                "<rect x=\"10\" y=\"{y0:.1}\" width=\"{width:.1}\" height=\"9\" \
                 fill=\"url(#{id}-hatch)\" stroke=\"currentColor\" stroke-width=\"0.4\"/>"
            );
            // Runs of pages in use, one rect each.
            let mut k = 0;
            while k < used.len() {
                if !used[k] {
                    k += 1;
                    continue;
                }
                let start = k;
                while k < used.len() && used[k] {
                    k += 1;
                }
                let _ = write!(
                    body,
                    "<rect x=\"{:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"9\" \
                     fill=\"currentColor\" opacity=\"0.55\"/>",
                    10.0 + start as f64 * cell,
                    (k - start) as f64 * cell
                );
            }
            let _ = write!(
                body,
                "<text x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
                18.0 + width,
                y0 + 8.5
            );
        }
        body
    }

    /// The instant the page view of `step` shows, and why: its first refused reserve, else its
    /// peak in use (`None`: not a detailed step).
    pub fn page_instant(&self, step: u64) -> Option<(u64, &'static str)> {
        let s = self.steps.iter().find(|s| s.step == step)?;
        let bands: Vec<&Band> = self.bands.iter().collect();
        Some(self.instant(&bands, s))
    }

    fn instant(&self, bands: &[&Band], s: &DetailStep) -> (u64, &'static str) {
        if let Some(r) = self
            .refusals
            .iter()
            .find(|r| (s.start..s.end).contains(&r.time))
        {
            return (r.time, "at its first refused reserve");
        }
        let mut changes: Vec<(u64, i64)> = vec![];
        for b in bands {
            if Self::alive_in(b, (s.start, s.end)) {
                changes.push((b.start.max(s.start), b.bytes as i64));
                if let Some(e) = b.end.filter(|&e| e < s.end) {
                    changes.push((e, -(b.bytes as i64)));
                }
            }
        }
        // Frees before reserves at one instant: a free and a reserve never share one.
        changes.sort_unstable();
        let (mut now, mut peak, mut at) = (0i64, i64::MIN, s.start);
        for (t, d) in changes {
            now += d;
            if now > peak {
                (peak, at) = (now, t);
            }
        }
        (at, "at its peak in use")
    }
}
