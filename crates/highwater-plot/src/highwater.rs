//! Per-step pool high-water of several arms × seeds against the card's capacity.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{self, Area, DrawResult};
use crate::labels::{self, PxBox};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{
    self, CARD_DASH, DASHES, Keys, LABEL_PX, SMALL_PX, WIDTH, arm_colours, clean_label, stroke,
    text_width,
};
use basics::bytes::{Unit, axis, axis_tick};

/// Per-step high-water of several runs against a horizontal card-capacity line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HighWaterChart {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// The card's capacity in bytes; `0` draws no capacity line.
    pub card_bytes: u64,
    /// One line per run. Runs with the same `arm` share a colour, the arm's in every figure
    /// ([`arm_colour`](crate::arm_colour)); each gets its own dash.
    pub series: Vec<Series>,
}

/// One run: its per-step high-water and, if it ran out of memory, the step it died at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    /// The colour family (e.g. `"situ-tensor"`); also the legend row's heading.
    pub arm: String,
    /// This run within its arm (e.g. `"seed 3"`).
    pub label: String,
    /// `(step, bytes)`, in step order.
    pub points: Vec<(u32, u64)>,
    /// The step at which a reservation failed, marked with a cross labelled with the run and
    /// the step: `s3 †250` for `"seed 3"` ([`Series::death_label`]).
    pub died_at: Option<u32>,
}

/// Lines with more points than this are reduced to per-bucket maxima (peaks survive).
const MAX_POINTS: usize = 1600;
const PLOT_H: u32 = 400;
const DEATH: RGBColor = theme::FG;
/// Half the width of a death's cross.
const CROSS_R: i32 = 5;

impl Series {
    /// What a death marker says: the run within its arm, shortened, and the step it died at.
    /// The arm is left out (the label is in its colour) and `seed N` is written `sN`:
    /// `"seed 3"` → `s3 †250`; `"situ-tensor GPU"` of arm `situ-tensor` → `GPU †1`.
    pub fn death_label(&self) -> String {
        let step = self.died_at.map_or(String::new(), |s| format!("†{s}"));
        let arm = clean_label(&self.arm);
        let mut run = clean_label(&self.label);
        if !arm.is_empty()
            && run.len() > arm.len()
            && run.is_char_boundary(arm.len())
            && run[..arm.len()].eq_ignore_ascii_case(&arm)
        {
            let rest = &run[arm.len()..];
            if rest.starts_with([' ', ':', ',', '/', '-', '·']) {
                run = rest
                    .trim_start_matches([' ', ':', ',', '/', '-', '·'])
                    .to_string();
            }
        }
        let words: Vec<&str> = run.split(' ').collect();
        let mut short: Vec<String> = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let seed = words[i].eq_ignore_ascii_case("seed")
                && words
                    .get(i + 1)
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
            if seed {
                short.push(format!("s{}", words[i + 1]));
                i += 2;
            } else {
                short.push(words[i].to_string());
                i += 1;
            }
        }
        let run = short.join(" ");
        match (run.is_empty(), step.is_empty()) {
            (true, _) => step,
            (false, true) => run,
            (false, false) => format!("{run} {step}"),
        }
    }
}

/// What a chart's y axis shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scale {
    /// The series' bytes, against the card's capacity line.
    Reserved,
    /// What the card leaves free, on a logarithmic axis of powers of two.
    Headroom,
}

impl HighWaterChart {
    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        self.render(Scale::Reserved)
    }

    /// The same runs as headroom: per step, what the card leaves the pool
    /// ([`card_bytes`](Self::card_bytes)) minus the series' bytes, on a logarithmic axis, so
    /// that a run walking towards the card's edge is seen approaching zero. A death's cross sits
    /// on the headroom of the run's last measured step; a headroom of zero is drawn at the
    /// axis' floor.
    pub fn to_headroom_svg(&self) -> String {
        let headroom = HighWaterChart {
            series: self
                .series
                .iter()
                .map(|s| Series {
                    points: s
                        .points
                        .iter()
                        .map(|&(step, b)| (step, self.card_bytes.saturating_sub(b)))
                        .collect(),
                    ..s.clone()
                })
                .collect(),
            ..self.clone()
        };
        headroom.render(Scale::Headroom)
    }

    fn render(&self, scale: Scale) -> String {
        let mut keys = Keys::default();
        let card_key = keys.key(None, CARD_DASH);
        let colours = arm_colours(self.series.iter().map(|s| s.arm.as_str()));
        let styled: Vec<Style> = {
            let mut seen: Vec<(String, usize)> = Vec::new();
            self.series
                .iter()
                .zip(colours)
                .map(|(s, colour)| {
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
                    Style {
                        colour,
                        line: keys.key(Some(colour), DASHES[n % DASHES.len()]),
                        label: keys.halo(Some(colour)),
                    }
                })
                .collect()
        };

        let groups = self.legend(&styled, (scale == Scale::Reserved).then_some(card_key));
        let title_h = frame::title_height(&self.title);
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + PLOT_H + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, &styled, card_key, scale)?;
            legend::draw(root, &groups, 16, (title_h + PLOT_H) as i32)
        })
    }

    fn legend(&self, styled: &[Style], card_key: Option<RGBColor>) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for (s, style) in self.series.iter().zip(styled) {
            let heading = Some(clean_label(&s.arm)).filter(|a| !a.is_empty());
            let entry = Entry {
                swatch: Swatch::Line(style.line, 2),
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
        if let Some(card_key) = card_key.filter(|_| self.card_bytes > 0) {
            extra.entries.push(Entry {
                swatch: Swatch::Line(card_key, 2),
                label: format!("card capacity ({})", axis(self.card_bytes)),
            });
        }
        if self.series.iter().any(|s| s.died_at.is_some()) {
            extra.entries.push(Entry {
                swatch: Swatch::Cross(DEATH),
                label: "out of memory: run †step".into(),
            });
        }
        if !extra.entries.is_empty() {
            // An empty heading: a row of its own below the arms, with no heading text.
            extra.heading = Some(String::new());
            groups.push(extra);
        }
        groups
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one plotters chart, drawn in layers (scale, mesh, card line, series, death \
                  crosses and their labels) that all go through one `chart` and share `taken`"
    )]
    fn draw(
        &self,
        root: &Area<'_>,
        title_h: u32,
        styled: &[Style],
        card_key: RGBColor,
        scale: Scale,
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
        let unit = Unit::of(max_bytes);
        let values = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
        };
        let (y_bottom, y_top) = match scale {
            Scale::Reserved => {
                let min_bytes = values()
                    .chain((self.card_bytes > 0).then_some(self.card_bytes))
                    .min()
                    .unwrap_or(0);
                y_range(unit.scale(min_bytes), unit.scale(max_bytes))
            }
            Scale::Headroom => log2_range(
                values().filter(|&b| b > 0).min(),
                values().max().unwrap_or(0),
            ),
        };
        // A value as drawn: in the axis' unit, or its base-2 logarithm (zero at the floor).
        let y_of = |b: u64| match scale {
            Scale::Reserved => unit.scale(b),
            Scale::Headroom if b == 0 => y_bottom,
            Scale::Headroom => (b as f64).log2().max(y_bottom),
        };
        // Headroom's ticks are the powers of two only.
        let tick = |v: f64| match scale {
            Scale::Reserved => axis_tick(v, unit),
            Scale::Headroom if v.fract() == 0.0 => axis(v.exp2() as u64),
            Scale::Headroom => String::new(),
        };
        let y_labels = match scale {
            Scale::Reserved => 9,
            Scale::Headroom => (y_top - y_bottom) as usize + 1,
        };
        let tick_w = (0..=y_labels)
            .map(|i| {
                let v = y_bottom + (y_top - y_bottom) * i as f64 / y_labels as f64;
                let v = if scale == Scale::Headroom {
                    v.round()
                } else {
                    v
                };
                text_width(&tick(v), LABEL_PX)
            })
            .fold(0.0, f64::max);

        let mut chart = frame::chart_builder(&plot, 42, (tick_w + 34.0) as u32)
            .build_cartesian_2d(0u32..max_step, y_bottom..y_top)?;
        let y_fmt = |v: &f64| tick(*v);
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        mesh.x_desc("step")
            .y_desc(match scale {
                Scale::Reserved => "pool reserved",
                Scale::Headroom => "headroom (log scale)",
            })
            .x_labels(12)
            .y_labels(y_labels)
            .y_label_formatter(&y_fmt)
            .draw()?;

        // Boxes already holding text in the plot: labels placed later must avoid them.
        let mut taken: Vec<PxBox> = Vec::new();
        let (plot_x, plot_y) = chart.plotting_area().get_pixel_range();
        if self.card_bytes > 0 && scale == Scale::Reserved {
            let card = unit.scale(self.card_bytes);
            chart.draw_series(LineSeries::new(
                [(0, card), (max_step, card)],
                stroke(card_key, 2),
            ))?;
            // At the left end: runs die on the right, where their labels go.
            let (x, y) = chart.backend_coord(&(0, card));
            let label = format!("card {}", axis(self.card_bytes));
            let w = text_width(&label, SMALL_PX) as i32;
            taken.push(PxBox::new(x + 4, y - 18, x + 10 + w, y - 2));
            root.draw(&Text::new(
                label,
                (x + 6, y - 5),
                theme::font(SMALL_PX).pos(Pos::new(HPos::Left, VPos::Bottom)),
            ))?;
        }

        for (s, style) in self.series.iter().zip(styled) {
            let pts = decimate(&s.points, MAX_POINTS);
            chart.draw_series(LineSeries::new(
                pts.into_iter().map(|(x, b)| (x, y_of(b))),
                stroke(style.line, 2),
            ))?;
        }

        // Death markers last, so they sit on top of every line.
        if self.series.iter().all(|s| s.points.is_empty()) {
            frame::no_data(root, plot_x.clone(), plot_y.clone())?;
        }
        let mut deaths: Vec<Death> = Vec::new();
        for (i, (s, style)) in self.series.iter().zip(styled).enumerate() {
            let Some(step) = s.died_at else { continue };
            let bytes = s
                .points
                .iter()
                .filter(|p| p.0 <= step)
                .map(|p| p.1)
                .next_back()
                .unwrap_or(self.card_bytes);
            let at = chart.backend_coord(&(step, y_of(bytes)));
            legend::cross(root, at, CROSS_R, style.colour)?;
            taken.push(PxBox::around(at, CROSS_R));
            deaths.push(Death {
                series: i,
                step,
                at,
                colour: style.colour,
                halo: style.label,
            });
        }
        // Every cross gets its label; where crosses crowd, labels move out and a thin line
        // leads back to the cross.
        let bounds = PxBox::new(plot_x.start, plot_y.start, plot_x.end, plot_y.end);
        for d in label_order(&self.series, &deaths) {
            let label = self.series[d.series].death_label();
            let w = text_width(&label, SMALL_PX) as i32 + 4;
            let b = labels::place(d.at, w, 13, bounds, &taken);
            taken.push(b);
            if labels::needs_leader(d.at, &b) {
                labels::leader(root, d.at, CROSS_R, &b, d.colour)?;
            }
            root.draw(&Text::new(
                label,
                b.centre(),
                theme::bold(SMALL_PX)
                    .color(&d.halo)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
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
    /// The key its label is drawn with: the colour over a halo.
    halo: RGBColor,
}

/// How one series is drawn.
#[derive(Clone, Copy, Debug)]
struct Style {
    /// Its arm's colour.
    colour: RGBColor,
    /// The key of its line: the colour and its dash.
    line: RGBColor,
    /// The key of its death label: the colour over a halo.
    label: RGBColor,
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

/// `n` rounded up to two significant digits: 400 → 400, 157 → 160, 1234 → 1300.
fn round_up(n: u32) -> u32 {
    let mut unit = 1u32;
    while n / unit >= 100 {
        unit *= 10;
    }
    n.div_ceil(unit).saturating_mul(unit).max(1)
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
    fn extremes_are_labelled_first() {
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
            colour: theme::PALETTE[0],
            halo: theme::PALETTE[0],
        };
        let order = label_order(&series, &[d(0, 250), d(1, 200), d(2, 300), d(3, 260)]);
        let steps: Vec<u32> = order.iter().map(|d| d.step).collect();
        // earliest of a (200), earliest of b (260); latest of a (300); the middle one last
        assert_eq!(steps, vec![200, 260, 300, 250]);
    }

    #[test]
    fn death_labels_name_the_run_briefly() {
        let s = |arm: &str, label: &str, died_at| Series {
            arm: arm.into(),
            label: label.into(),
            died_at,
            ..Series::default()
        };
        assert_eq!(s("silu", "silu seed 2", Some(312)).death_label(), "s2 †312");
        assert_eq!(s("situ", "seed 12", Some(7)).death_label(), "s12 †7");
        assert_eq!(
            s("situ-tensor", "situ-tensor GPU", Some(1)).death_label(),
            "GPU †1"
        );
        assert_eq!(
            s("batch 4 096", "batch 4 096: reserved", Some(2)).death_label(),
            "reserved †2"
        );
        assert_eq!(
            s("a", "seeds galore", Some(3)).death_label(),
            "seeds galore †3"
        );
        assert_eq!(s("situ", "situ", Some(3)).death_label(), "situ †3");
        assert_eq!(s("", "", Some(9)).death_label(), "†9");
        assert_eq!(s("x", "seed 1", None).death_label(), "s1");
    }

    #[test]
    fn headroom_is_the_card_less_the_pool() {
        const MIB: u64 = 1 << 20;
        let chart = HighWaterChart {
            title: String::new(),
            card_bytes: 1024 * MIB,
            series: vec![Series {
                arm: "situ".into(),
                label: "seed 1".into(),
                points: vec![(1, 512 * MIB), (2, 1000 * MIB), (3, 1024 * MIB)],
                died_at: Some(3),
            }],
        };
        let svg = chart.to_headroom_svg();
        let has = |text: &str| svg.lines().any(|l| l == text);
        // Ticks at powers of two from 8 MiB (one below 24 MiB's) to 512 MiB, no capacity line;
        // the death at zero headroom sits on the floor, labelled.
        for text in [
            "headroom (log scale)",
            "8 MiB",
            "16 MiB",
            "512 MiB",
            "s1 †3",
        ] {
            assert!(has(text), "{text} missing");
        }
        assert!(!svg.contains("card capacity") && !has("1 GiB") && !has("12 MiB"));
        assert_eq!(
            chart.to_svg(),
            chart.clone().to_svg(),
            "the chart is unchanged"
        );
        assert!(chart.to_svg().contains("card capacity (1 GiB)"));
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

/// The headroom axis, in base-2 logarithms of bytes: from the power of two below the least
/// headroom above zero (one lower still, so that a zero sits below every line) to the one above
/// the largest.
fn log2_range(least: Option<u64>, most: u64) -> (f64, f64) {
    let most = (most.max(2) as f64).log2().ceil();
    let least = least.map_or(most - 4.0, |b| (b as f64).log2().floor());
    ((least - 1.0).max(0.0), most.max(least + 1.0))
}

#[cfg(test)]
mod y_range_tests {
    use super::{log2_range, y_range};

    #[test]
    fn headroom_spans_whole_powers_of_two() {
        // 5 MiB to 2.4 GiB: from 2 MiB (one below 4 MiB) to 4 GiB.
        assert_eq!(log2_range(Some(5 << 20), 2_400 << 20), (21.0, 32.0));
        // Nothing but zeros: a few powers of two under the largest.
        assert_eq!(log2_range(None, 0), (0.0, 1.0));
        assert_eq!(log2_range(Some(1 << 30), 1 << 30), (29.0, 31.0));
    }

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
