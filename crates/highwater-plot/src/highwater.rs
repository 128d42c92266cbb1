//! Per-step pool high-water of several arms × seeds against the card's capacity.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{self, Area, DrawResult};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{
    self, CARD_DASH, DASHES, Keys, LABEL_PX, PALETTE, SMALL_PX, WIDTH, clean_label, stroke,
    text_width,
};
use crate::units::{ByteUnit, format_bytes};

/// Per-step high-water of several runs against a horizontal card-capacity line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HighWaterChart {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// The card's capacity in bytes; `0` draws no capacity line.
    pub card_bytes: u64,
    /// One line per run. Runs with the same `arm` share a colour; each gets its own dash.
    pub series: Vec<Series>,
}

/// One run: its per-step high-water and, if it ran out of memory, the step it died at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    /// The colour family (e.g. `"SiTU tensor path"`); also the legend row's heading.
    pub arm: String,
    /// This run within its arm (e.g. `"seed 3"`).
    pub label: String,
    /// `(step, bytes)`, in step order.
    pub points: Vec<(u32, u64)>,
    /// The step at which a reservation failed, marked with a cross and its step number.
    pub died_at: Option<u32>,
}

/// Lines with more points than this are reduced to per-bucket maxima (peaks survive).
const MAX_POINTS: usize = 1600;
const PLOT_H: u32 = 400;
const DEATH: RGBColor = theme::FG;

impl HighWaterChart {
    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut keys = Keys::default();
        let card_key = keys.key(None, CARD_DASH);
        let arms = arm_colours(&self.series);
        let styled: Vec<(RGBColor, RGBColor)> = {
            let mut seen: Vec<(String, usize)> = Vec::new();
            self.series
                .iter()
                .map(|s| {
                    let n = match seen.iter_mut().find(|(a, _)| *a == s.arm) {
                        Some((_, n)) => {
                            *n += 1;
                            *n
                        }
                        None => {
                            seen.push((s.arm.clone(), 0));
                            0
                        }
                    };
                    let colour = arms.iter().find(|(a, _)| *a == s.arm).expect("arm").1;
                    (colour, keys.key(Some(colour), DASHES[n % DASHES.len()]))
                })
                .collect()
        };

        let groups = self.legend(&styled, card_key);
        let title_h = frame::title_height(&self.title);
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + PLOT_H + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, &styled, card_key)?;
            legend::draw(root, &groups, 16, (title_h + PLOT_H) as i32)
        })
    }

    fn legend(&self, styled: &[(RGBColor, RGBColor)], card_key: RGBColor) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for (s, (_, key)) in self.series.iter().zip(styled) {
            let heading = Some(clean_label(&s.arm)).filter(|a| !a.is_empty());
            let entry = Entry {
                swatch: Swatch::Line(*key, 2),
                label: s.label.clone(),
            };
            match groups.iter_mut().find(|g| g.heading == heading) {
                Some(g) => g.entries.push(entry),
                None => groups.push(Group {
                    heading,
                    entries: vec![entry],
                }),
            }
        }
        let mut extra = Group::default();
        if self.card_bytes > 0 {
            extra.entries.push(Entry {
                swatch: Swatch::Line(card_key, 2),
                label: format!("card capacity ({})", format_bytes(self.card_bytes)),
            });
        }
        if self.series.iter().any(|s| s.died_at.is_some()) {
            extra.entries.push(Entry {
                swatch: Swatch::Cross(DEATH),
                label: "out of memory at step N".into(),
            });
        }
        if !extra.entries.is_empty() {
            // An empty heading: a row of its own below the arms, with no heading text.
            extra.heading = Some(String::new());
            groups.push(extra);
        }
        groups
    }

    fn draw(
        &self,
        root: &Area<'_>,
        title_h: u32,
        styled: &[(RGBColor, RGBColor)],
        card_key: RGBColor,
    ) -> DrawResult {
        let (_, rest) = root.split_vertically(title_h);
        let (plot, _) = rest.split_vertically(PLOT_H);

        let max_step = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0).chain(s.died_at))
            .max()
            .unwrap_or(0);
        // Steps are counted from 0: a run of 400 steps ends at 399 and its axis at 400.
        let max_step = round_up(max_step.saturating_add(1));
        let max_bytes = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain([self.card_bytes])
            .max()
            .unwrap_or(0)
            // Below 8 bytes the ticks would be fractions of a byte.
            .max(8);
        let unit = ByteUnit::for_value(max_bytes);
        let min_bytes = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain((self.card_bytes > 0).then_some(self.card_bytes))
            .min()
            .unwrap_or(0);
        let (y_bottom, y_top) = y_range(unit.scale(min_bytes), unit.scale(max_bytes));
        let tick_w = (0..=8)
            .map(|i| {
                let v = y_bottom + (y_top - y_bottom) * f64::from(i) / 8.0;
                text_width(&unit.tick(v), LABEL_PX)
            })
            .fold(0.0, f64::max);

        let mut chart = frame::chart_builder(&plot, 42, (tick_w + 34.0) as u32)
            .build_cartesian_2d(0u32..max_step, y_bottom..y_top)?;
        let y_fmt = |v: &f64| unit.tick(*v);
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        mesh.x_desc("step")
            .y_desc("pool high-water")
            .x_labels(12)
            .y_labels(9)
            .y_label_formatter(&y_fmt)
            .draw()?;

        // Boxes already holding text in the plot: labels placed later must avoid them.
        let mut taken: Vec<PxBox> = Vec::new();
        let (plot_x, plot_y) = chart.plotting_area().get_pixel_range();
        if self.card_bytes > 0 {
            let card = unit.scale(self.card_bytes);
            chart.draw_series(LineSeries::new(
                [(0, card), (max_step, card)],
                stroke(card_key, 2),
            ))?;
            // At the left end: runs die on the right, where their labels go.
            let (x, y) = chart.backend_coord(&(0, card));
            let label = format!("card {}", format_bytes(self.card_bytes));
            let w = text_width(&label, SMALL_PX) as i32;
            taken.push(PxBox::new(x + 4, y - 18, x + 10 + w, y - 2));
            root.draw(&Text::new(
                label,
                (x + 6, y - 5),
                theme::font(SMALL_PX).pos(Pos::new(HPos::Left, VPos::Bottom)),
            ))?;
        }

        for (s, (_, key)) in self.series.iter().zip(styled) {
            let pts = decimate(&s.points, MAX_POINTS);
            chart.draw_series(LineSeries::new(
                pts.into_iter().map(|(x, b)| (x, unit.scale(b))),
                stroke(*key, 2),
            ))?;
        }

        // Death markers last, so they sit on top of every line.
        if self.series.iter().all(|s| s.points.is_empty()) {
            root.draw(&Text::new(
                "no data",
                (
                    (plot_x.start + plot_x.end) / 2,
                    (plot_y.start + plot_y.end) / 2,
                ),
                theme::font(LABEL_PX).pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
        }
        let mut deaths: Vec<Death> = Vec::new();
        for (i, (s, (colour, _))) in self.series.iter().zip(styled).enumerate() {
            let Some(step) = s.died_at else { continue };
            let bytes = s
                .points
                .iter()
                .filter(|p| p.0 <= step)
                .map(|p| p.1)
                .next_back()
                .unwrap_or(self.card_bytes);
            let at = chart.backend_coord(&(step, unit.scale(bytes)));
            legend::cross(root, at, 5, *colour)?;
            deaths.push(Death {
                series: i,
                step,
                at,
                colour: *colour,
            });
        }
        let bounds = PxBox::new(plot_x.start, plot_y.start, plot_x.end, plot_y.end);
        for d in label_order(&self.series, &deaths) {
            let label = d.step.to_string();
            let w = text_width(&label, SMALL_PX) as i32 + 4;
            if let Some(b) = place(d.at, w, 13, bounds, &taken) {
                taken.push(b);
                root.draw(&Text::new(
                    label,
                    ((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2),
                    theme::bold(SMALL_PX)
                        .color(&d.colour)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))?;
            }
        }
        Ok(())
    }
}

/// A run's death: where its cross is and whose it is.
#[derive(Clone, Copy, Debug)]
struct Death {
    series: usize,
    step: u32,
    at: (i32, i32),
    colour: RGBColor,
}

/// Labels go in this order, so when space runs out the informative ones are already placed:
/// each arm's earliest death, then each arm's latest, then the rest by step.
fn label_order(series: &[Series], deaths: &[Death]) -> Vec<Death> {
    let arm = |d: &Death| series[d.series].arm.as_str();
    let rank = |d: &Death| {
        let same = deaths.iter().filter(|o| arm(o) == arm(d));
        if same
            .clone()
            .all(|o| (o.step, o.series) >= (d.step, d.series))
        {
            0
        } else if same
            .clone()
            .all(|o| (o.step, o.series) <= (d.step, d.series))
        {
            1
        } else {
            2
        }
    };
    let mut out = deaths.to_vec();
    out.sort_by_key(|d| (rank(d), d.step, d.series));
    out
}

/// A pixel box `[x0, x1) × [y0, y1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PxBox {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl PxBox {
    fn new(x0: i32, y0: i32, x1: i32, y1: i32) -> Self {
        PxBox { x0, y0, x1, y1 }
    }

    fn overlaps(&self, o: &PxBox) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    fn inside(&self, o: &PxBox) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }
}

/// A free `w × h` slot for a label above the point `(x, y)`: straight above first, then
/// nudged sideways, then a row higher. `None` when every candidate is taken.
fn place((x, y): (i32, i32), w: i32, h: i32, bounds: PxBox, taken: &[PxBox]) -> Option<PxBox> {
    for row in 0..6 {
        let top = y - 9 - h - row * h;
        for dx in [0, w / 2 + 1, -w / 2 - 1, w + 2, -w - 2] {
            let cx = x + dx;
            let b = PxBox::new(cx - w / 2, top, cx - w / 2 + w, top + h);
            if b.inside(&bounds) && !taken.iter().any(|t| t.overlaps(&b)) {
                return Some(b);
            }
        }
    }
    None
}

/// `n` rounded up to two significant digits: 400 → 400, 157 → 160, 1234 → 1300.
fn round_up(n: u32) -> u32 {
    let mut unit = 1u32;
    while n / unit >= 100 {
        unit *= 10;
    }
    n.div_ceil(unit).saturating_mul(unit).max(1)
}

fn arm_colours(series: &[Series]) -> Vec<(String, RGBColor)> {
    let mut arms: Vec<(String, RGBColor)> = Vec::new();
    for s in series {
        if !arms.iter().any(|(a, _)| *a == s.arm) {
            let c = PALETTE[arms.len() % PALETTE.len()];
            arms.push((s.arm.clone(), c));
        }
    }
    arms
}

/// At most about `max` points: the largest value of each run of consecutive points.
fn decimate(points: &[(u32, u64)], max: usize) -> Vec<(u32, u64)> {
    if points.len() <= max {
        return points.to_vec();
    }
    let per = points.len().div_ceil(max / 2);
    let mut out = Vec::with_capacity(max + 2);
    for chunk in points.chunks(per) {
        // Keep the first point and the peak of each chunk, in step order.
        let first = chunk[0];
        let peak = *chunk.iter().max_by_key(|p| p.1).expect("non-empty chunk");
        out.push(first);
        if peak != first {
            out.push(peak);
        }
    }
    if let Some(&last) = points.last()
        && out.last() != Some(&last)
    {
        out.push(last);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimate_keeps_peaks_and_ends() {
        let pts: Vec<(u32, u64)> = (0..10_000u32)
            .map(|i| (i, if i == 4321 { 999 } else { u64::from(i % 7) }))
            .collect();
        let d = decimate(&pts, 1000);
        assert!(d.len() <= 1002, "{}", d.len());
        assert!(d.contains(&(4321, 999)));
        assert_eq!(d.first(), Some(&(0, 0)));
        assert_eq!(d.last(), pts.last());
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn labels_never_overlap_and_extremes_come_first() {
        let bounds = PxBox::new(0, 0, 800, 400);
        let mut taken = Vec::new();
        for i in 0..40 {
            if let Some(b) = place((300 + i * 3, 100), 24, 13, bounds, &taken) {
                assert!(b.inside(&bounds));
                assert!(taken.iter().all(|t: &PxBox| !t.overlaps(&b)));
                taken.push(b);
            }
        }
        assert!(taken.len() >= 10, "{}", taken.len());
        assert!(taken.len() < 40, "some labels must give way");

        let series: Vec<Series> = ["a", "a", "a", "b"]
            .iter()
            .map(|arm| Series {
                arm: (*arm).into(),
                ..Series::default()
            })
            .collect();
        let d = |series, step| Death {
            series,
            step,
            at: (0, 0),
            colour: PALETTE[0],
        };
        let order = label_order(&series, &[d(0, 250), d(1, 200), d(2, 300), d(3, 260)]);
        let steps: Vec<u32> = order.iter().map(|d| d.step).collect();
        // earliest of a (200), earliest of b (260); latest of a (300); the middle one last
        assert_eq!(steps, vec![200, 260, 300, 250]);
    }

    #[test]
    fn axis_ends_round() {
        assert_eq!(round_up(400), 400);
        assert_eq!(round_up(157), 160);
        assert_eq!(round_up(1234), 1300);
        assert_eq!(round_up(7), 7);
        assert_eq!(round_up(0), 1);
        assert!(round_up(u32::MAX) >= u32::MAX / 10 * 9);
    }

    #[test]
    fn arms_share_colours_in_order() {
        let s = |arm: &str| Series {
            arm: arm.into(),
            ..Series::default()
        };
        let c = arm_colours(&[s("a"), s("b"), s("a")]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].1, PALETTE[0]);
        assert_eq!(c[1].1, PALETTE[1]);
    }
}

/// The y axis, in display units. It starts at zero unless every value sits in a band high
/// above it (a pool near a card's edge): then it starts a whole unit below the band, so that
/// the differences that decide a run are visible rather than squeezed against the top.
fn y_range(lo: f64, hi: f64) -> (f64, f64) {
    if lo > 0.5 * hi {
        let span = (hi - lo).max(hi * 0.05);
        ((lo - span * 0.5).floor().max(0.0), hi + span * 0.15)
    } else {
        (0.0, hi * 1.15)
    }
}

#[cfg(test)]
mod y_range_tests {
    use super::y_range;

    #[test]
    fn starts_at_zero_unless_the_data_sit_high() {
        assert_eq!(y_range(1.0, 10.0), (0.0, 11.5));
        let (bottom, top) = y_range(12.1, 14.36);
        assert_eq!(bottom, 10.0);
        assert!(top > 14.36 && top < 15.0);
        // A flat line still gets a band around it.
        let (bottom, top) = y_range(8.0, 8.0);
        assert!(bottom < 8.0 && top > 8.0);
    }
}
