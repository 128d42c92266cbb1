//! The view's band panel: each detailed step's bands by address, the legend, the marks.

use std::fmt::Write;

use super::layout::{Lanes, escape, x_span};
use super::{Band, DetailStep, FAMILY_COLOURS, LANES_H, LEFT, MemoryView};
use basics::bytes::axis;

impl MemoryView {
    /// The bands by address, each over its life clipped to `window`, the ones outside it
    /// hidden (a live band ends at `end`); then the empty group the stacked layout fills.
    pub(super) fn bands_svg(
        bands: &[&Band],
        end: u64,
        window: (u64, u64),
        lanes: &Lanes,
    ) -> String {
        let mut svg = String::new();
        // Bands, in the order of the data's band list (the script finds them by index).
        svg.push_str("<g class=\"hwv-bands\">");
        for b in bands {
            let (x, w) = x_span(b.start, b.end.unwrap_or(end), window);
            let (y, h) = lanes.y(b.page, b.offset, b.bytes);
            let hidden = if w <= 0.0 { " display=\"none\"" } else { "" };
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" class=\"c{}\"{hidden}/>",
                w.max(0.5),
                b.family % FAMILY_COLOURS.len()
            );
        }
        svg.push_str("</g><g class=\"hwv-stack\" display=\"none\"></g>");
        svg
    }

    pub(super) fn legend(&self, bands: &[&Band]) -> String {
        let mut out = String::from("<g class=\"hwv-legend\" font-size=\"12\">");
        let mut x = LEFT;
        for (i, name) in self.families.iter().enumerate() {
            if !bands.iter().any(|b| b.family == i) {
                continue;
            }
            let _ = write!(
                out,
                "<rect x=\"{x:.0}\" y=\"6\" width=\"10\" height=\"10\" class=\"c{}\"/>\
                 <text x=\"{:.0}\" y=\"15\">{}</text>",
                i % FAMILY_COLOURS.len(),
                x + 14.0,
                escape(name)
            );
            x += 22.0 + 7.0 * name.chars().count() as f64;
        }
        out.push_str("</g>");
        out
    }

    pub(super) fn step_marks(&self, steps: &[DetailStep], window: (u64, u64), top: f64) -> String {
        let mut out = String::from("<g class=\"hwv-marks\" font-size=\"11\">");
        for s in steps {
            let (x, w) = x_span(s.start, s.end, window);
            let hidden = if w <= 0.0 { " display=\"none\"" } else { "" };
            let _ = write!(
                out,
                "<g class=\"hwv-mark\"{hidden}><line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.0}\" \
                 y2=\"{:.0}\" stroke=\"currentColor\" opacity=\"0.5\"/><text x=\"{:.1}\" \
                 y=\"{:.0}\">step {}</text></g>",
                top - 12.0,
                top + LANES_H,
                x + 3.0,
                top - 3.0,
                s.step
            );
        }
        out.push_str("</g>");
        out
    }

    pub(super) fn refusal_marks(&self, window: (u64, u64), top: f64) -> String {
        let mut out = String::from("<g class=\"hwv-refusals\" font-size=\"11\">");
        for r in &self.refusals {
            let (x, w) = x_span(r.time, r.time + 1, window);
            let hidden = if w <= 0.0 { " display=\"none\"" } else { "" };
            let _ = write!(
                out,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{:.0}\" \
                 stroke=\"#DC267F\" stroke-width=\"1.5\" stroke-dasharray=\"3 2\"{hidden}>\
                 <title>refused: {} for {} (the driver refused a page of {})</title></line>",
                top + LANES_H,
                axis(r.bytes),
                escape(&r.tensor),
                axis(r.page_bytes)
            );
        }
        out.push_str("</g>");
        out
    }
}
