//! A timeline: what ran when on each lane (stream), with marked windows (collisions).

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{self, Area, DrawResult};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{self, FG, Keys, LABEL_PX, PALETTE, SMALL_PX, WIDTH, filled, text_width};

/// Lanes of labelled spans on one time axis, and windows to mark across all lanes.
///
/// Lanes are not arms: their spans are drawn in shades of the page's text colour, so that no
/// arm's colour takes another meaning here; only the marked windows are coloured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// The time axis' description, e.g. "µs into the replay".
    pub x_desc: String,
    /// Drawn top to bottom in this order.
    pub lanes: Vec<Lane>,
    /// Windows across every lane: shaded under the spans, outlined over them.
    pub marks: Vec<Mark>,
}

/// One lane (a stream) and its spans `(label, start, end)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lane {
    /// Written left of the lane.
    pub label: String,
    /// `(label, start, end)` in the x axis' units.
    pub spans: Vec<(String, f64, f64)>,
}

/// A window drawn across every lane, with its meaning in the legend.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mark {
    /// Its legend entry.
    pub label: String,
    /// Where the window opens, in the x axis' units.
    pub start: f64,
    /// Where it closes.
    pub end: f64,
}

const LANE_H: u32 = 64;
/// The marked windows: orange, the colour the book gives the race's culprit configuration.
const MARK: RGBColor = PALETTE[1];
/// Neighbouring spans of a lane alternate between these opacities of the text colour.
const SPAN: [f64; 2] = [0.45, 0.25];

impl Timeline {
    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        let keys = Keys::default();
        let mut entries: Vec<Entry> = Vec::new();
        if self.lanes.iter().any(|l| !l.spans.is_empty()) {
            entries.push(Entry {
                swatch: Swatch::Block(FG.mix(SPAN[0])),
                label: "a kernel on its stream (neighbours alternate in shade)".into(),
            });
        }
        entries.extend(self.marks.iter().map(|m| Entry {
            swatch: Swatch::Block(MARK.mix(1.0)),
            label: m.label.clone(),
        }));
        let groups = vec![Group {
            heading: None,
            entries,
        }];
        let plot_h = LANE_H * self.lanes.len().max(1) as u32 + 60;
        let title_h = frame::title_height(&self.title);
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + plot_h + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, plot_h)?;
            legend::draw(root, &groups, 16, (title_h + plot_h) as i32)
        })
    }

    fn draw(&self, root: &Area<'_>, title_h: u32, plot_h: u32) -> DrawResult {
        let (_, rest) = root.split_vertically(title_h);
        let (plot, _) = rest.split_vertically(plot_h);
        let end = self
            .lanes
            .iter()
            .flat_map(|l| l.spans.iter().map(|s| s.2))
            .chain(self.marks.iter().map(|m| m.end))
            .fold(1.0, f64::max);
        let lanes = self.lanes.len().max(1) as f64;
        let label_w = self
            .lanes
            .iter()
            .map(|l| text_width(&l.label, LABEL_PX))
            .fold(0.0, f64::max);
        let mut chart = frame::chart_builder(&plot, 42, (label_w + 20.0) as u32)
            .build_cartesian_2d(0.0..end * 1.02, 0.0..lanes)?;
        let x_fmt = |v: &f64| format!("{v:.0}");
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        mesh.disable_y_mesh()
            .y_labels(0)
            .x_desc(self.x_desc.as_str())
            .x_labels(12)
            .x_label_formatter(&x_fmt)
            .draw()?;
        // Lane 0 on top.
        let row = |i: usize| lanes - 1.0 - i as f64;
        for m in &self.marks {
            chart.draw_series([Rectangle::new(
                [(m.start, 0.0), (m.end, lanes)],
                filled(MARK.mix(0.28)),
            )])?;
        }
        // Labels follow the page's text colour, on a bar (a faint shade of that colour) as
        // beside it.
        let inside = theme::font(SMALL_PX).pos(Pos::new(HPos::Center, VPos::Center));
        let beside = theme::font(SMALL_PX).pos(Pos::new(HPos::Center, VPos::Center));
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = row(i);
            let (lx, ly) = chart.backend_coord(&(0.0, y + 0.5));
            root.draw(&Text::new(
                lane.label.clone(),
                (lx - 8, ly),
                theme::font(LABEL_PX).pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
            for (k, (label, start, stop)) in lane.spans.iter().enumerate() {
                // Neighbouring spans alternate between two shades.
                chart.draw_series([Rectangle::new(
                    [(*start, y + 0.18), (*stop, y + 0.82)],
                    filled(FG.mix(SPAN[k % 2])),
                )])?;
                let (x0, yc) = chart.backend_coord(&(*start, y + 0.5));
                let (x1, _) = chart.backend_coord(&(*stop, y + 0.5));
                // Labels alternate above and below the bars when they do not fit inside.
                if text_width(label, SMALL_PX) + 6.0 < f64::from(x1 - x0) {
                    root.draw(&Text::new(
                        label.clone(),
                        ((x0 + x1) / 2, yc),
                        inside.clone(),
                    ))?;
                } else {
                    let dy = if k % 2 == 0 { -22 } else { 22 };
                    root.draw(&Text::new(
                        label.clone(),
                        ((x0 + x1) / 2, yc + dy),
                        beside.clone(),
                    ))?;
                }
            }
        }
        // The marked windows' edges, over the bars: a translucent window alone can vanish on a
        // dark theme where it crosses a bar of a similar lightness.
        for m in &self.marks {
            chart.draw_series([Rectangle::new(
                [(m.start, 0.0), (m.end, lanes)],
                ShapeStyle::from(&MARK).stroke_width(2),
            )])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_span_and_mark_is_drawn() {
        let t = Timeline {
            title: "one replay".into(),
            x_desc: "µs".into(),
            lanes: vec![
                Lane {
                    label: "main".into(),
                    spans: vec![("trunk".into(), 0.0, 60.0), ("lm_head".into(), 60.0, 70.0)],
                },
                Lane {
                    label: "side".into(),
                    spans: vec![("store".into(), 60.0, 120.0)],
                },
            ],
            marks: vec![Mark {
                label: "collision".into(),
                start: 60.0,
                end: 70.0,
            }],
        };
        let svg = t.to_svg();
        assert!(svg.starts_with("<svg"));
        for label in ["trunk", "lm_head", "store", "collision", "main", "side"] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(!svg.contains("\n\n"));
    }
}
