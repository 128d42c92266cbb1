//! When runs die: a histogram of death steps over many seeds, survivors shown apart.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::frame::{self, Area, DrawResult};
use crate::legend::{self, Entry, Group, Swatch};
use crate::theme::{self, FG, Keys, LABEL_PX, SMALL_PX, WIDTH, arm_colours, filled, stroke};

/// The outcome of many seeded runs of one recipe: where each died, or that it survived.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeathHistogram {
    /// Shown above the plot; may be empty.
    pub title: String,
    /// The arm whose runs these are: the bars are in its colour
    /// ([`arm_colour`](crate::arm_colour)), the survivors a lighter shade of it.
    pub arm: String,
    /// How many steps every run attempted (the x axis spans `0..steps`).
    pub steps: u32,
    /// One entry per run: `Some(step)` where it ran out of memory, `None` if it survived.
    pub died_at: Vec<Option<u32>>,
    /// Width of a bin in steps; `None` picks a round width giving at most 40 bins.
    pub bin_width: Option<u32>,
}

const PLOT_H: u32 = 340;
const SURVIVOR_W: i32 = 120;
/// The survivors' shade of the arm's colour (over a dark page, a darker one), outlined in it.
const SURVIVED: f64 = 0.35;

impl DeathHistogram {
    fn colour(&self) -> RGBColor {
        arm_colours([self.arm.as_str()])[0]
    }

    /// Counts per bin: `(first step of the bin, runs that died in it)`, plus the survivors.
    pub fn bins(&self) -> (Vec<(u32, u32)>, u32) {
        let w = self.width();
        let last = self
            .died_at
            .iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.steps.saturating_sub(1));
        let n = last / w + 1;
        let mut bins: Vec<(u32, u32)> = (0..n).map(|k| (k * w, 0)).collect();
        let mut survived = 0;
        for d in &self.died_at {
            match d {
                Some(step) => bins[(step / w) as usize].1 += 1,
                None => survived += 1,
            }
        }
        (bins, survived)
    }

    fn width(&self) -> u32 {
        if let Some(w) = self.bin_width.filter(|w| *w > 0) {
            return w;
        }
        let span = self
            .died_at
            .iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.steps)
            .max(1);
        // The first of 1, 2, 5, 10, 20, 50, … that gives at most 40 bins.
        let mut mag = 1u32;
        loop {
            for m in [1u32, 2, 5] {
                let w = m.saturating_mul(mag);
                if span.div_ceil(w) <= 40 || w == u32::MAX {
                    return w;
                }
            }
            mag = mag.saturating_mul(10);
        }
    }

    /// The figure as a complete, inline-safe `<svg>` element.
    pub fn to_svg(&self) -> String {
        let keys = Keys::default();
        let colour = self.colour();
        let (bins, survived) = self.bins();
        let runs = self.died_at.len();
        let died = runs - survived as usize;
        let groups = vec![Group {
            heading: None,
            entries: vec![
                Entry {
                    swatch: Swatch::Block(colour.mix(1.0)),
                    label: format!("died: {died} of {runs} runs, per {}-step bin", self.width()),
                },
                Entry {
                    swatch: Swatch::Block(colour.mix(SURVIVED)),
                    label: format!("survived all {} steps: {survived} of {runs}", self.steps),
                },
            ],
        }];
        let title_h = frame::title_height(&self.title);
        let legend_h = legend::height(&groups, WIDTH - 10, 16);
        let size = (WIDTH, title_h + PLOT_H + legend_h);
        frame::render(&self.title, size, &keys, |root| {
            self.draw(root, title_h, &bins, survived, colour)?;
            legend::draw(root, &groups, 16, (title_h + PLOT_H) as i32)
        })
    }

    fn draw(
        &self,
        root: &Area<'_>,
        title_h: u32,
        bins: &[(u32, u32)],
        survived: u32,
        colour: RGBColor,
    ) -> DrawResult {
        let (_, rest) = root.split_vertically(title_h);
        let (plot, _) = rest.split_vertically(PLOT_H);
        let (hist, _) = plot.split_horizontally(WIDTH as i32 - SURVIVOR_W);
        let w = self.width();
        let x_end = bins.last().map_or(1, |b| b.0 + w).max(self.steps).max(1);
        let top = bins
            .iter()
            .map(|b| b.1)
            .chain([survived])
            .max()
            .unwrap_or(0)
            .max(1);
        let y_top = top + (top / 6).max(1);

        let mut chart = ChartBuilder::on(&hist)
            .margin_left(8)
            .margin_right(8)
            .margin_top(22)
            .margin_bottom(4)
            .x_label_area_size(42)
            .y_label_area_size(54)
            .build_cartesian_2d(0u32..x_end, 0u32..y_top)?;
        let mut mesh = chart.configure_mesh();
        frame::style_mesh(&mut mesh);
        mesh.disable_x_mesh()
            .x_desc("step of death")
            .y_desc("runs")
            .x_labels(12)
            .y_labels(y_top.min(8) as usize + 1)
            .draw()?;

        let count_style = theme::font(SMALL_PX).pos(Pos::new(HPos::Center, VPos::Bottom));
        for &(start, count) in bins {
            if count == 0 {
                continue;
            }
            let mut r = Rectangle::new([(start, 0), (start + w, count)], filled(colour));
            r.set_margin(0, 0, 1, 1);
            chart.draw_series([r])?;
            if bins.len() <= 40 {
                let (x0, y) = chart.backend_coord(&(start, count));
                let (x1, _) = chart.backend_coord(&(start + w, count));
                root.draw(&Text::new(
                    count.to_string(),
                    ((x0 + x1) / 2, y - 3),
                    count_style.clone(),
                ))?;
            }
        }

        // The survivors: one bar on the same count scale, set apart to the right.
        let (_, base) = chart.backend_coord(&(x_end, 0));
        let (xr, _) = chart.backend_coord(&(x_end, 0));
        let (_, y) = chart.backend_coord(&(x_end, survived));
        let (x0, x1) = (xr + 40, xr + SURVIVOR_W - 24);
        root.draw(&PathElement::new(
            vec![(x0 - 10, base), (x1 + 10, base)],
            stroke(FG.mix(0.6), 1),
        ))?;
        if survived > 0 {
            root.draw(&Rectangle::new(
                [(x0, y), (x1, base)],
                filled(colour.mix(SURVIVED)),
            ))?;
            root.draw(&Rectangle::new([(x0, y), (x1, base)], stroke(colour, 1)))?;
        }
        root.draw(&Text::new(
            survived.to_string(),
            ((x0 + x1) / 2, y - 3),
            count_style.clone(),
        ))?;
        root.draw(&Text::new(
            "survived",
            ((x0 + x1) / 2, base + 8),
            theme::font(LABEL_PX).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_count_every_run() {
        let h = DeathHistogram {
            steps: 400,
            died_at: vec![Some(0), Some(9), Some(10), Some(399), None, None],
            bin_width: Some(10),
            ..Default::default()
        };
        let (bins, survived) = h.bins();
        assert_eq!(survived, 2);
        assert_eq!(bins.len(), 40);
        assert_eq!(bins[0], (0, 2));
        assert_eq!(bins[1], (10, 1));
        assert_eq!(bins[39], (390, 1));
        assert_eq!(bins.iter().map(|b| b.1).sum::<u32>(), 4);
    }

    #[test]
    fn auto_width_is_round_and_bounded() {
        for (steps, want) in [
            (10, 1),
            (40, 1),
            (41, 2),
            (100, 5),
            (400, 10),
            (1000, 25),
            (5000, 200),
        ] {
            let h = DeathHistogram {
                steps,
                ..Default::default()
            };
            let w = h.width();
            assert!(steps.div_ceil(w) <= 40, "{steps}: {w}");
            assert!(w >= want, "{steps}: {w} < {want}");
        }
    }

    #[test]
    fn deaths_past_the_horizon_still_count() {
        let h = DeathHistogram {
            steps: 10,
            died_at: vec![Some(25)],
            bin_width: Some(5),
            ..Default::default()
        };
        let (bins, _) = h.bins();
        assert_eq!(bins.last(), Some(&(25, 1)));
    }
}
