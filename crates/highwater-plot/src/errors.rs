//! Signed percentages per step, one line per run: how far one series is from another that it
//! should match (a simulator's bytes from a GPU's), around a zero line and a tolerance.

use std::collections::BTreeMap;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{self, Area, DrawResult};
use crate::labels::{self, PxBox};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{
    self, CARD_DASH, DASHES, FG, Keys, LABEL_PX, SMALL_PX, WIDTH, arm_colours, clean_label, filled,
    stroke, text_width,
};

/// Signed percentages of several runs over one x axis, each line ending in a label with its
/// last value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorChart {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// E.g. `"step"`.
    pub x_desc: String,
    /// E.g. `"simulated − measured, % of measured"`.
    pub y_desc: String,
    /// Dashed lines at ± this many percent (the error a check allows); `None` draws none.
    pub tolerance: Option<f64>,
    /// Lines of one arm share the arm's colour ([`arm_colour`](crate::arm_colour)); lines with
    /// the same label share a dash, whatever their arm.
    pub lines: Vec<ErrorLine>,
}

/// One run's error at each x.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorLine {
    /// The colour family, and the legend row's heading.
    pub arm: String,
    /// This run within its arm (e.g. `"balanced / fusion"`).
    pub label: String,
    /// `(x, percent)`, in x order. Values that are not finite are left out.
    pub points: Vec<(f64, f64)>,
}

impl ErrorLine {
    /// The error of `simulated` against `measured`, `(simulated − measured) / measured` in
    /// percent, at every step of `measured` that `simulated` has too. Steps measured at zero
    /// have no relative error and are left out.
    ///
    /// ```
    /// use highwater_plot::ErrorLine;
    /// let gpu = [(1, 200), (2, 400), (3, 400)];
    /// let sim = [(1, 100), (2, 400)];
    /// let line = ErrorLine::between("silu", "none / cube", gpu, sim);
    /// assert_eq!(line.points, vec![(1.0, -50.0), (2.0, 0.0)]);
    /// ```
    pub fn between(
        arm: impl Into<String>,
        label: impl Into<String>,
        measured: impl IntoIterator<Item = (u64, u64)>,
        simulated: impl IntoIterator<Item = (u64, u64)>,
    ) -> Self {
        let simulated: BTreeMap<u64, u64> = simulated.into_iter().collect();
        let points = measured
            .into_iter()
            .filter(|&(_, m)| m > 0)
            .filter_map(|(step, m)| {
                let s = *simulated.get(&step)?;
                Some((step as f64, (s as f64 - m as f64) / m as f64 * 100.0))
            })
            .collect();
        ErrorLine {
            arm: arm.into(),
            label: label.into(),
            points,
        }
    }

    fn finite(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    }

    /// The text at the line's end: who it is and its last value.
    fn end_label(&self) -> Option<String> {
        let (_, v) = self.finite().last()?;
        let who = [clean_label(&self.arm), clean_label(&self.label)]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" · ");
        let value = if v == 0.0 {
            "0 %".to_string()
        } else {
            format!("{} %", minus(&format!("{v:+.2}")))
        };
        Some(if who.is_empty() {
            value
        } else {
            format!("{who}  {value}")
        })
    }
}

const PLOT_H: u32 = 380;
/// Between a line's end and its label: room for the leader.
const LEADER_W: i32 = 22;
const END_R: i32 = 3;
const LABEL_H: f64 = 14.0;

/// One drawn line: its colour and its key (colour and dash).
type Style = (RGBColor, RGBColor);

impl ErrorChart {
    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut keys = Keys::default();
        let tol_key = keys.key(None, CARD_DASH);
        let tol_text = keys.halo(None);
        let colours = arm_colours(self.lines.iter().map(|l| l.arm.as_str()));
        let mut dashes: Vec<String> = Vec::new();
        let styles: Vec<Style> = self
            .lines
            .iter()
            .zip(colours)
            .map(|(l, colour)| {
                let label = clean_label(&l.label);
                let i = dashes.iter().position(|d| *d == label).unwrap_or_else(|| {
                    dashes.push(label);
                    dashes.len() - 1
                });
                (colour, keys.key(Some(colour), DASHES[i % DASHES.len()]))
            })
            .collect();
        let groups = self.legend(&styles, tol_key);
        let title_h = frame::title_height(&self.title);
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + PLOT_H + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, &styles, (tol_key, tol_text))?;
            legend::draw(root, &groups, 16, (title_h + PLOT_H) as i32)
        })
    }

    fn legend(&self, styles: &[Style], tol_key: RGBColor) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for (l, (_, key)) in self.lines.iter().zip(styles) {
            let heading = Some(clean_label(&l.arm)).filter(|a| !a.is_empty());
            let entry = Entry {
                swatch: Swatch::Line(*key, 2),
                label: l.label.clone(),
            };
            match groups.iter_mut().find(|g| g.heading == heading) {
                Some(g) => g.entries.push(entry),
                None => groups.push(Group {
                    heading,
                    entries: vec![entry],
                }),
            }
        }
        if let Some(t) = self.tolerance.filter(|t| t.is_finite() && *t > 0.0) {
            groups.push(Group {
                heading: Some(String::new()),
                entries: vec![Entry {
                    swatch: Swatch::Line(tol_key, 1),
                    label: format!("tolerance (±{} %)", number(t)),
                }],
            });
        }
        groups
    }

    /// The last argument: the keys of the tolerance's lines and of its label.
    #[expect(
        clippy::too_many_lines,
        reason = "one plotters chart, drawn in layers (ranges, mesh, zero and tolerance lines, \
                  series, end labels) that all go through the same `chart` and its coordinates"
    )]
    fn draw(
        &self,
        root: &Area<'_>,
        title_h: u32,
        styles: &[Style],
        (tol_key, tol_text): (RGBColor, RGBColor),
    ) -> DrawResult {
        let (_, rest) = root.split_vertically(title_h);
        let (plot, _) = rest.split_vertically(PLOT_H);
        let ends: Vec<Option<String>> = self.lines.iter().map(ErrorLine::end_label).collect();
        let column_w = ends
            .iter()
            .flatten()
            .map(|t| text_width(t, SMALL_PX) as i32)
            .max()
            .map_or(0, |w| w + LEADER_W + 6);
        let (plot, _) = plot.split_horizontally(WIDTH as i32 - column_w);

        let xs = self.lines.iter().flat_map(|l| l.finite().map(|p| p.0));
        let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let (x0, x1) = match (x0.is_finite(), x1 > x0) {
            (true, true) => (x0, x1),
            (true, false) => (x0 - 1.0, x0 + 1.0),
            _ => (0.0, 1.0),
        };
        let tolerance = self.tolerance.filter(|t| t.is_finite() && *t > 0.0);
        let (y0, y1) = y_range(
            self.lines.iter().flat_map(|l| l.finite().map(|p| p.1)),
            tolerance,
        );
        let tick_w = [y0, y1]
            .iter()
            .map(|v| text_width(&tick(*v), LABEL_PX))
            .fold(0.0, f64::max);
        let integral = self
            .lines
            .iter()
            .flat_map(|l| l.finite())
            .all(|p| p.0.fract() == 0.0);
        let x_labels = if integral {
            ((x1 - x0) as usize + 1).min(12)
        } else {
            12
        };
        let pad = (x1 - x0) * 0.01;
        let mut chart = frame::chart_builder(&plot, 42, (tick_w + 40.0) as u32)
            .margin_right(6)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), y0..y1)?;
        let x_fmt = |v: &f64| number(*v);
        let y_fmt = |v: &f64| tick(*v);
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        // An empty description would be an empty text element.
        if !clean_label(&self.x_desc).is_empty() {
            mesh.x_desc(clean_label(&self.x_desc));
        }
        if !clean_label(&self.y_desc).is_empty() {
            mesh.y_desc(clean_label(&self.y_desc));
        }
        mesh.x_labels(x_labels)
            .y_labels(9)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .draw()?;

        // Zero, where a perfect match lies, firmer than the grid.
        chart.draw_series(LineSeries::new(
            [(x0 - pad, 0.0), (x1 + pad, 0.0)],
            stroke(FG.mix(0.55), 1),
        ))?;
        if let Some(t) = tolerance {
            for y in [t, -t] {
                chart.draw_series(LineSeries::new(
                    [(x0 - pad, y), (x1 + pad, y)],
                    stroke(tol_key.mix(0.8), 1),
                ))?;
            }
            let (x, y) = chart.backend_coord(&(x0 - pad, t));
            root.draw(&Text::new(
                format!("tolerance ±{} %", number(t)),
                (x + 6, y - 4),
                theme::font(SMALL_PX)
                    .color(&tol_text)
                    .pos(Pos::new(HPos::Left, VPos::Bottom)),
            ))?;
        }

        for (l, (_, key)) in self.lines.iter().zip(styles) {
            chart.draw_series(LineSeries::new(l.finite(), stroke(*key, 2)))?;
        }
        let (plot_x, plot_y) = chart.plotting_area().get_pixel_range();
        if self.lines.iter().all(|l| l.finite().next().is_none()) {
            frame::no_data(root, plot_x.clone(), plot_y.clone())?;
        }

        // Each line's end: a dot, and its label in a column to the right, spread apart where
        // lines end close together, with a leader from the dot.
        let ends: Vec<(usize, (i32, i32), String)> = self
            .lines
            .iter()
            .zip(ends)
            .enumerate()
            .filter_map(|(i, (l, text))| {
                let last = l.finite().last()?;
                Some((i, chart.backend_coord(&last), text?))
            })
            .collect();
        let wishes: Vec<f64> = ends.iter().map(|e| f64::from(e.1.1)).collect();
        let ys = labels::spread(
            &wishes,
            LABEL_H,
            f64::from(plot_y.start),
            f64::from(plot_y.end),
        );
        let x_text = plot_x.end + LEADER_W;
        for ((i, at, text), y) in ends.into_iter().zip(ys) {
            let colour = styles[i].0;
            root.draw(&Circle::new(at, END_R, filled(colour)))?;
            let y = y.round() as i32;
            labels::leader(
                root,
                at,
                END_R,
                &PxBox::new(x_text - 3, y, x_text - 3, y),
                colour,
            )?;
            root.draw(&Text::new(
                text,
                (x_text, y),
                theme::bold(SMALL_PX)
                    .color(&colour)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
        }
        Ok(())
    }
}

/// The y axis: zero, every value and the tolerance inside it, with some room, ends on round
/// numbers.
fn y_range(values: impl Iterator<Item = f64>, tolerance: Option<f64>) -> (f64, f64) {
    let (lo, hi) = values
        .chain(tolerance.into_iter().flat_map(|t| [t, -t]))
        .filter(|v| v.is_finite())
        .fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi - lo < 1e-9 {
        return (-1.0, 1.0);
    }
    let pad = (hi - lo) * 0.08;
    let raw = (hi - lo + 2.0 * pad) / 8.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (
        ((lo - pad) / step).floor() * step,
        ((hi + pad) / step).ceil() * step,
    )
}

/// `v` in as few digits as it needs (at most three decimals): `5`, `2.5`, `0.125`.
fn number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    minus(if s == "-0" { "0" } else { s })
}

/// A tick: `0 %`, `+2.5 %`, `−5 %` (a true minus sign).
fn tick(v: f64) -> String {
    if v.abs() < 1e-9 {
        "0 %".to_string()
    } else if v > 0.0 {
        format!("+{} %", number(v))
    } else {
        format!("{} %", number(v))
    }
}

/// ASCII hyphen-minus to U+2212, the sign a reader expects in a figure.
fn minus(s: &str) -> String {
    s.replace('-', "\u{2212}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_matches_steps_and_skips_what_it_cannot_divide() {
        let line = ErrorLine::between(
            "situ-tensor",
            "none / fusion",
            [(1, 1000), (2, 0), (3, 800), (4, 800)],
            [(1, 1100), (2, 5), (3, 780)],
        );
        assert_eq!(line.points, vec![(1.0, 10.0), (3.0, -2.5)]);
        assert_eq!(
            line.end_label().unwrap(),
            "situ-tensor · none / fusion  −2.50 %"
        );
        let exact = ErrorLine::between("silu", "", [(1, 5)], [(1, 5)]);
        assert_eq!(exact.end_label().unwrap(), "silu  0 %");
        assert_eq!(ErrorLine::default().end_label(), None);
    }

    #[test]
    fn the_axis_holds_zero_the_data_and_the_tolerance() {
        let (lo, hi) = y_range([-8.71, -2.1, 0.0].into_iter(), Some(5.0));
        assert!((-12.0..-8.71).contains(&lo), "{lo}");
        assert!(hi > 5.0 && hi <= 8.0, "{hi}");
        let (lo, hi) = y_range([0.3, 0.5].into_iter(), None);
        assert!(lo <= 0.0 && hi > 0.5 && hi < 1.0, "{lo} {hi}");
        assert_eq!(y_range(std::iter::empty(), None), (-1.0, 1.0));
        assert_eq!(y_range([f64::NAN].into_iter(), None), (-1.0, 1.0));
    }

    #[test]
    fn ticks_are_signed_with_a_true_minus() {
        assert_eq!(tick(0.0), "0 %");
        assert_eq!(tick(2.5), "+2.5 %");
        assert_eq!(tick(-5.0), "−5 %");
        assert_eq!(tick(-1e-12), "0 %");
        assert_eq!(number(-0.0001), "0");
    }

    #[test]
    fn every_line_is_drawn_and_labelled_at_its_end() {
        let chart = ErrorChart {
            title: "error".into(),
            x_desc: "step".into(),
            y_desc: "simulated − measured".into(),
            tolerance: Some(5.0),
            lines: vec![
                ErrorLine {
                    arm: "silu".into(),
                    label: "none / cube".into(),
                    points: (1..=50).map(|s| (f64::from(s), 0.0)).collect(),
                },
                ErrorLine {
                    arm: "situ-tensor".into(),
                    label: "none / cube".into(),
                    points: (1..=50).map(|s| (f64::from(s), 0.0)).collect(),
                },
                ErrorLine {
                    arm: "situ-tensor".into(),
                    label: "balanced / fusion".into(),
                    points: (1..=50).map(|s| (f64::from(s), -8.71)).collect(),
                },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && !svg.contains("\n\n"));
        let text = |t: &str| svg.lines().any(|l| l.trim() == t);
        for t in [
            "silu · none / cube  0 %",
            "situ-tensor · none / cube  0 %",
            "situ-tensor · balanced / fusion  −8.71 %",
            "tolerance ±5 %",
            "tolerance (±5 %)",
            "0 %",
        ] {
            assert!(text(t), "missing {t:?}");
        }
        // One dot per line's end, in its arm's colour.
        assert_eq!(svg.matches("<circle").count(), 3);
    }
}
