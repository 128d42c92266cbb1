//! Stacked horizontal bars: what each path keeps alive per call, by op, in bytes.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{self, Area, DrawResult};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{
    self, FG, Keys, LABEL_PX, SMALL_PX, WIDTH, arm_colours, clean_label, filled, stroke, text_width,
};
use basics::bytes::{Unit, axis, axis_tick};

/// One stacked bar per path (e.g. the activation ledger of one call), segments by kind.
///
/// When the bars are arms (any bar names one), each bar is drawn in its arm's colour
/// ([`arm_colour`](crate::arm_colour)) and the kinds of segment differ by shade, the same in
/// every bar, so that a colour keeps meaning one arm; otherwise each kind of segment has a
/// colour of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackedBars {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// Drawn top to bottom in this order.
    pub bars: Vec<Bar>,
}

/// One bar: its label and its segments `(name, bytes)`, stacked left to right.
/// Segments with the same name share a colour or shade (and one legend entry) across bars.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bar {
    /// The arm the bar shows (e.g. `"situ-tensor"`), or empty when the bars are not arms.
    pub arm: String,
    /// Written left of the bar.
    pub label: String,
    /// `(name, bytes)`, left to right.
    pub segments: Vec<(String, u64)>,
}

const PITCH: u32 = 38;
const AXIS_H: u32 = 46;
const MAX_LABEL_W: f64 = 300.0;
/// Segment labels are black on a full (mid-lightness) fill, whatever the theme; on a lighter
/// shade they follow the theme's text colour, which reads on it in both.
const INK: RGBColor = RGBColor(0, 0, 0);
/// When the bars are arms, the kinds of segment are shades of the arm's colour, from full down
/// to this opacity (on a light page lighter shades, on a dark one darker), each outlined in
/// the arm's colour.
const LIGHTEST: f64 = 0.25;
/// A value on a shade at least this strong is black ink; on a lighter one, the text colour.
const INK_FROM: f64 = 0.5;

/// How the segments are painted: one colour per bar and a shade per kind, or a colour per kind.
struct Paint {
    /// The distinct segment names, cleaned, in order of first appearance.
    names: Vec<String>,
    /// One colour per bar when the bars are arms.
    bars: Option<Vec<RGBColor>>,
    /// One colour per segment name otherwise.
    kinds: Vec<RGBColor>,
}

impl Paint {
    fn new(bars: &[Bar]) -> Self {
        let mut names: Vec<String> = Vec::new();
        for (name, _) in bars.iter().flat_map(|b| &b.segments) {
            let name = clean_label(name);
            if !names.contains(&name) {
                names.push(name);
            }
        }
        if bars.iter().any(|b| !clean_label(&b.arm).is_empty()) {
            // A bar without an arm among arms is keyed by its label.
            let arms = bars.iter().map(|b| {
                if clean_label(&b.arm).is_empty() {
                    b.label.as_str()
                } else {
                    b.arm.as_str()
                }
            });
            Paint {
                bars: Some(arm_colours(arms)),
                kinds: Vec::new(),
                names,
            }
        } else {
            Paint {
                bars: None,
                kinds: arm_colours(names.iter().map(String::as_str)),
                names,
            }
        }
    }

    fn kind(&self, name: &str) -> usize {
        let name = clean_label(name);
        self.names.iter().position(|n| *n == name).unwrap_or(0)
    }

    /// The opacity of kind `k` when the bars are arms: evenly from full to [`LIGHTEST`].
    fn shade(&self, k: usize) -> f64 {
        let n = self.names.len();
        if n < 2 {
            return 1.0;
        }
        let o = 1.0 - (1.0 - LIGHTEST) * k as f64 / (n - 1) as f64;
        (o * 100.0).round() / 100.0
    }

    /// Fill, outline and the ink of its value, for a segment named `name` of bar `bar`.
    fn segment(&self, bar: usize, name: &str) -> (RGBAColor, Option<RGBColor>, RGBColor) {
        let k = self.kind(name);
        match &self.bars {
            Some(colours) => {
                let shade = self.shade(k);
                let ink = if shade >= INK_FROM { INK } else { FG };
                (colours[bar].mix(shade), Some(colours[bar]), ink)
            }
            None => (self.kinds[k].mix(1.0), None, INK),
        }
    }

    /// The legend: a swatch per kind, in the page's text colour at the kind's shade when the
    /// bars are arms (the bars' own labels say which arm each is).
    fn legend(&self) -> Vec<Group> {
        let entries = self
            .names
            .iter()
            .enumerate()
            .map(|(k, n)| Entry {
                swatch: Swatch::Block(match self.bars {
                    Some(_) => FG.mix(self.shade(k)),
                    None => self.kinds[k].mix(1.0),
                }),
                label: n.clone(),
            })
            .collect();
        vec![Group {
            heading: None,
            entries,
        }]
    }
}

impl StackedBars {
    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        let keys = Keys::default();
        let paint = Paint::new(&self.bars);
        let groups = paint.legend();
        let title_h = frame::title_height(&self.title);
        let plot_h = PITCH * self.bars.len().max(1) as u32 + AXIS_H + 12;
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + plot_h + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, plot_h, &paint)?;
            legend::draw(root, &groups, 16, (title_h + plot_h) as i32)
        })
    }

    fn draw(&self, root: &Area<'_>, title_h: u32, plot_h: u32, paint: &Paint) -> DrawResult {
        let (_, rest) = root.split_vertically(title_h);
        let (plot, _) = rest.split_vertically(plot_h);
        let labels: Vec<String> = self
            .bars
            .iter()
            .map(|b| ellipsize(&clean_label(&b.label), LABEL_PX, MAX_LABEL_W))
            .collect();
        let label_w = labels
            .iter()
            .map(|l| text_width(l, LABEL_PX))
            .fold(40.0, f64::max);
        let totals: Vec<u64> = self
            .bars
            .iter()
            .map(|b| {
                b.segments
                    .iter()
                    .map(|s| s.1)
                    .fold(0u64, u64::saturating_add)
            })
            .collect();
        let max_total = totals.iter().copied().max().unwrap_or(0).max(1);
        let unit = Unit::of(max_total);
        let x_top = unit.scale(max_total) * 1.14;
        let n = self.bars.len().max(1) as f64;

        let mut chart = frame::chart_builder(&plot, AXIS_H - 4, (label_w + 16.0) as u32)
            .build_cartesian_2d(0f64..x_top, 0f64..n)?;
        let x_fmt = |v: &f64| axis_tick(*v, unit);
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        mesh.disable_y_mesh()
            .y_labels(0)
            .x_labels(8)
            .x_label_formatter(&x_fmt)
            .x_desc("bytes")
            .draw()?;

        for (i, bar) in self.bars.iter().enumerate() {
            let row = n - 1.0 - i as f64;
            let (y0, y1) = (row + 0.2, row + 0.8);
            let mut at = 0u64;
            for (name, bytes) in &bar.segments {
                let (fill, outline, ink) = paint.segment(i, name);
                let x0 = unit.scale(at);
                at = at.saturating_add(*bytes);
                let x1 = unit.scale(at);
                if *bytes == 0 {
                    continue;
                }
                chart.draw_series([Rectangle::new([(x0, y0), (x1, y1)], filled(fill))])?;
                if let Some(c) = outline {
                    chart.draw_series([Rectangle::new([(x0, y0), (x1, y1)], stroke(c, 1))])?;
                }
                let (px0, py) = chart.backend_coord(&(x0, row + 0.5));
                let (px1, _) = chart.backend_coord(&(x1, row + 0.5));
                let text = axis(*bytes);
                if f64::from(px1 - px0) > text_width(&text, SMALL_PX) + 8.0 {
                    root.draw(&Text::new(
                        text,
                        ((px0 + px1) / 2, py),
                        theme::font(SMALL_PX)
                            .color(&ink)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    ))?;
                }
            }
            let (x, y) = chart.backend_coord(&(0.0, row + 0.5));
            if !labels[i].is_empty() {
                root.draw(&Text::new(
                    labels[i].clone(),
                    (x - 8, y),
                    theme::font(LABEL_PX).pos(Pos::new(HPos::Right, VPos::Center)),
                ))?;
            }
            let (xe, _) = chart.backend_coord(&(unit.scale(totals[i]), row + 0.5));
            root.draw(&Text::new(
                axis(totals[i]),
                (xe + 6, y),
                theme::bold(SMALL_PX).pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
        }
        Ok(())
    }
}

/// Shorten `s` with an ellipsis so it fits in `max` pixels.
fn ellipsize(s: &str, px: f64, max: f64) -> String {
    if text_width(s, px) <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().collect();
    while !out.is_empty() && text_width(&out, px) + text_width("…", px) > max {
        out.pop();
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ellipsize_fits() {
        let long = "x".repeat(200);
        let e = ellipsize(&long, 12.0, 100.0);
        assert!(e.ends_with('…'));
        assert!(text_width(&e, 12.0) <= 100.0);
        assert_eq!(ellipsize("short", 12.0, 100.0), "short");
    }
}
