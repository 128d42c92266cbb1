//! Shared layout and text: the time axis, the address lanes, escaping for HTML and JSON.

use std::fmt::Write;

use super::{LANE_FLOOR, LANES_H, LEFT, PLOT_W, Page};
use basics::bytes::axis;

/// Where a time interval falls on the x axis for a window of event numbers: (x, width); a
/// width ≤ 0 means outside the window.
pub(super) fn x_span(start: u64, end: u64, window: (u64, u64)) -> (f64, f64) {
    let (w0, w1) = window;
    let span = (w1.saturating_sub(w0)).max(1) as f64;
    let a = start.max(w0);
    let b = end.min(w1);
    if b <= a {
        return (LEFT, 0.0);
    }
    let x = LEFT + PLOT_W * (a - w0) as f64 / span;
    let w = PLOT_W * (b - a) as f64 / span;
    (x, w)
}

/// The address layout: one lane per page, in page order, as tall as its bytes with a floor.
pub(super) struct Lanes {
    /// Top of the first lane.
    pub(super) top: f64,
    /// Per page number: its bytes, its lane's top and height.
    geometry: std::collections::BTreeMap<u32, (u64, f64, f64)>,
}

impl Lanes {
    pub(super) fn new(pages: &[Page], top: f64) -> Self {
        let total: u64 = pages.iter().map(|p| p.bytes).sum::<u64>().max(1);
        // The floor shrinks when there are many pages, so that the lanes keep their height.
        let floor = LANE_FLOOR.min(0.3 * LANES_H / pages.len().max(1) as f64);
        let floors = floor * pages.len() as f64;
        let room = (LANES_H - floors).max(0.0);
        let mut y = top;
        let geometry = pages
            .iter()
            .map(|p| {
                let h = floor + room * p.bytes as f64 / total as f64;
                let lane = (p.number, (p.bytes.max(1), y, h));
                y += h;
                lane
            })
            .collect();
        Lanes { top, geometry }
    }

    pub(super) fn lane(&self, page: u32) -> (f64, f64) {
        self.geometry
            .get(&page)
            .map_or((self.top, 0.0), |&(_, y, h)| (y, h))
    }

    /// A slice's top and height in its lane.
    pub(super) fn y(&self, page: u32, offset: u64, bytes: u64) -> (f64, f64) {
        let Some(&(page_bytes, y, h)) = self.geometry.get(&page) else {
            return (self.top, 0.0);
        };
        let top = y + h * offset as f64 / page_bytes as f64;
        let height = (h * bytes as f64 / page_bytes as f64).max(0.5);
        (top, height)
    }

    /// Labels left of the lanes: runs of same-size pages named once.
    pub(super) fn axis(&self, pages: &[Page]) -> String {
        let mut out = String::from("<g class=\"hwv-axis\" font-size=\"11\">");
        let mut i = 0;
        while i < pages.len() {
            let mut j = i;
            while j + 1 < pages.len() && pages[j + 1].bytes == pages[i].bytes {
                j += 1;
            }
            let (y0, _) = self.lane(pages[i].number);
            let (y1, h1) = self.lane(pages[j].number);
            let n = j - i + 1;
            let label = if n == 1 {
                format!("page {}: {}", pages[i].number, axis(pages[i].bytes))
            } else {
                format!("{n} × {}", axis(pages[i].bytes))
            };
            if y1 + h1 - y0 >= 10.0 {
                let _ = write!(
                    out,
                    "<text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                    LEFT - 6.0,
                    (y0 + y1 + h1) / 2.0 + 4.0
                );
            }
            let _ = write!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{y0:.1}\" y2=\"{y0:.1}\" \
                 stroke=\"currentColor\" stroke-width=\"0.5\" opacity=\"0.4\"/>",
                LEFT + PLOT_W
            );
            i = j + 1;
        }
        let _ = write!(
            out,
            "<rect x=\"{LEFT}\" y=\"{}\" width=\"{PLOT_W}\" height=\"{LANES_H}\" \
             fill=\"none\" stroke=\"currentColor\" stroke-width=\"0.6\"/></g>",
            self.top
        );
        out
    }
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // `<`, `>` and `&` too: the data sits in a <script>, which markup in a name could
            // otherwise end or turn into an escaped state.
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
