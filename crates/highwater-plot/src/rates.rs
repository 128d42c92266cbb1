//! Rates against a swept parameter: one line with markers per configuration, in percent.

use plotters::prelude::*;

use crate::frame::{self, Area, DrawResult};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{DASHES, Keys, WIDTH, arm_colours, filled, stroke};

/// Percentages (0–100) of several curves over one x axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateChart {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// The x axis' description.
    pub x_desc: String,
    /// The y axis' description.
    pub y_desc: String,
    /// Curves in legend order. Curves of one arm share the arm's colour
    /// ([`arm_colour`](crate::arm_colour)); each curve gets its own dash, so curves lying on top
    /// of each other (several at zero) stay distinguishable in the legend and at the markers.
    pub curves: Vec<Curve>,
}

/// One configuration's rate at each x.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// The arm (configuration) the curve belongs to, which gives its colour; empty: the
    /// label does.
    pub arm: String,
    /// Its legend entry.
    pub label: String,
    /// `(x, percent)`, in x order.
    pub points: Vec<(f64, f64)>,
}

const PLOT_H: u32 = 380;

impl RateChart {
    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut keys = Keys::default();
        let colours = arm_colours(self.curves.iter().map(|c| {
            if c.arm.trim().is_empty() {
                c.label.as_str()
            } else {
                c.arm.as_str()
            }
        }));
        let styles: Vec<(RGBColor, RGBColor)> = colours
            .into_iter()
            .enumerate()
            .map(|(i, colour)| (colour, keys.key(Some(colour), DASHES[i % DASHES.len()])))
            .collect();
        let groups = vec![Group {
            heading: None,
            entries: self
                .curves
                .iter()
                .zip(&styles)
                .map(|(c, (_, key))| Entry {
                    swatch: Swatch::Line(*key, 2),
                    label: c.label.clone(),
                })
                .collect(),
        }];
        let title_h = frame::title_height(&self.title);
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + PLOT_H + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, &styles)?;
            legend::draw(root, &groups, 16, (title_h + PLOT_H) as i32)
        })
    }

    fn draw(&self, root: &Area<'_>, title_h: u32, styles: &[(RGBColor, RGBColor)]) -> DrawResult {
        let (_, rest) = root.split_vertically(title_h);
        let (plot, _) = rest.split_vertically(PLOT_H);
        let xs = self
            .curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.0));
        let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let (x0, x1) = if x0.is_finite() && x1 > x0 {
            (x0, x1)
        } else {
            (0.0, 1.0)
        };
        let top = self
            .curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        // A round top with some headroom: 5, 10, 20, 25, 50, 100.
        let y_top = [5.0, 10.0, 20.0, 25.0, 40.0, 50.0, 75.0, 100.0]
            .into_iter()
            .find(|t| top * 1.08 <= *t)
            .unwrap_or(100.0);
        let pad = (x1 - x0) * 0.02;
        let mut chart = frame::chart_builder(&plot, 42, 62)
            .margin_top(10)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), 0.0..y_top)?;
        let y_fmt = |v: &f64| format!("{v:.0} %");
        let x_fmt = |v: &f64| format!("{v:.0}");
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        // An empty description would be an empty text element.
        if !self.x_desc.trim().is_empty() {
            mesh.x_desc(self.x_desc.as_str());
        }
        if !self.y_desc.trim().is_empty() {
            mesh.y_desc(self.y_desc.as_str());
        }
        mesh.x_labels(12)
            .y_labels(6)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .draw()?;
        for (c, (colour, key)) in self.curves.iter().zip(styles) {
            chart.draw_series(LineSeries::new(c.points.iter().copied(), stroke(*key, 2)))?;
            chart.draw_series(c.points.iter().map(|p| Circle::new(*p, 3, filled(*colour))))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_curve_and_its_label() {
        let chart = RateChart {
            title: "rates".into(),
            x_desc: "sessions".into(),
            y_desc: "corrupted".into(),
            curves: vec![
                Curve {
                    label: "on".into(),
                    points: vec![(10.0, 0.0), (60.0, 15.3)],
                    ..Curve::default()
                },
                Curve {
                    label: "off".into(),
                    points: vec![(10.0, 0.0), (60.0, 0.0)],
                    ..Curve::default()
                },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg"));
        let text = |t: &str| svg.lines().any(|l| l.trim() == t);
        assert!(text("on") && text("off"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(text("20 %"), "the top rounds up to 20 %");
    }

    #[test]
    fn curves_of_one_arm_share_its_colour() {
        let curve = |arm: &str, label: &str| Curve {
            arm: arm.into(),
            label: label.into(),
            points: vec![(1.0, 1.0), (2.0, 2.0)],
        };
        let chart = RateChart {
            curves: vec![
                curve("overlap", "overlap, ×1"),
                curve("overlap", "overlap, ×2"),
                curve("serialized", "serialized"),
            ],
            ..RateChart::default()
        };
        let svg = chart.to_svg();
        let hex = |c: RGBColor| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        let incident = crate::arm_colour("incident").unwrap();
        let control = crate::arm_colour("overlap-off").unwrap();
        // Two curves of two points: four markers in the overlap arm's colour, its
        // configuration's (incident).
        assert_eq!(svg.matches(&hex(incident)).count(), 4, "{svg}");
        assert_eq!(svg.matches(&hex(control)).count(), 2);
    }
}
