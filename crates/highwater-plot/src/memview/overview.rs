//! The overview: every step's peak in use and reserved against the capacity.

use std::fmt::Write;

use super::{
    DetailStep, FAMILY_COLOURS, LEFT, MemoryView, OVERVIEW_H, OVERVIEW_TOP, PLOT_W, StepTotals,
};
use basics::bytes::axis;

impl MemoryView {
    pub(super) fn overview_svg(&self, steps: &[DetailStep]) -> String {
        let mut out = String::from("<g class=\"hwv-overview\" font-size=\"11\">");
        let top = self
            .overview
            .iter()
            .map(|s| s.peak.max(s.reserved))
            .max()
            .unwrap_or(1)
            .max(self.capacity)
            .max(1) as f64;
        let y = |v: u64| OVERVIEW_TOP + OVERVIEW_H * (1.0 - v as f64 / top);
        let n = self.overview.len().max(1);
        let x = |i: usize| LEFT + PLOT_W * (i as f64 + 0.5) / n as f64;
        // One point per pixel column at most: the maximum of the steps it covers.
        let columns = (PLOT_W as usize).min(n);
        let line = |value: fn(&StepTotals) -> u64| {
            let mut pts = String::new();
            for c in 0..columns {
                let (a, b) = (
                    c * n / columns,
                    ((c + 1) * n / columns).max(c * n / columns + 1),
                );
                let v = self.overview[a..b.min(self.overview.len())]
                    .iter()
                    .map(value)
                    .max()
                    .unwrap_or(0);
                let _ = write!(pts, "{:.1},{:.1} ", x((a + b - 1) / 2), y(v));
            }
            pts
        };
        let heading = format!(
            "Every step, {}–{}: peak in use (orange), reserved (line), capacity (dashed); the \
             shaded steps are drawn below",
            self.overview.first().map_or(0, |s| s.step),
            self.overview.last().map_or(0, |s| s.step),
        );
        let _ = write!(
            out,
            "<text x=\"{LEFT}\" y=\"{:.0}\">{heading}</text>\
             <line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"currentColor\" \
             stroke-dasharray=\"4 3\" opacity=\"0.7\"/>\
             <text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">capacity {}</text>",
            OVERVIEW_TOP - 4.0,
            LEFT + PLOT_W,
            y(self.capacity),
            y(self.capacity),
            LEFT + PLOT_W - 4.0,
            y(self.capacity) + 12.0,
            axis(self.capacity)
        );
        let _ = write!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\
             <polyline points=\"{}\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"1\" \
             opacity=\"0.8\"/>",
            line(|s| s.peak),
            FAMILY_COLOURS[3],
            line(|s| s.reserved)
        );
        for s in steps {
            if let Some(i) = self.overview.iter().position(|o| o.step == s.step) {
                let _ = write!(
                    out,
                    "<rect class=\"hwv-pick\" data-step=\"{}\" x=\"{:.1}\" y=\"{OVERVIEW_TOP}\" \
                     width=\"{:.1}\" height=\"{OVERVIEW_H}\" fill=\"currentColor\" \
                     opacity=\"0.15\"/>",
                    s.step,
                    x(i) - (PLOT_W / n as f64 / 2.0).max(2.0),
                    (PLOT_W / n as f64).max(4.0)
                );
            }
        }
        if let Some(d) = self.died_at
            && let Some(i) = self.overview.iter().position(|o| o.step == d)
        {
            let _ = write!(
                out,
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{OVERVIEW_TOP}\" y2=\"{1:.1}\" \
                 stroke=\"#DC267F\" stroke-width=\"2\"/><text x=\"{0:.1}\" y=\"{2:.1}\" \
                 text-anchor=\"end\">died at step {d} </text>",
                x(i),
                OVERVIEW_TOP + OVERVIEW_H,
                OVERVIEW_TOP + OVERVIEW_H + 12.0
            );
        }
        out.push_str("</g>");
        out
    }
}
