//! Our own legend: laid out below the plot in flowing rows, so it never covers data and its
//! height is known before the SVG is sized.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::theme::{self, LABEL_PX, clean_label, filled, font, stroke, text_width};

/// What sits in front of a legend label.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Swatch {
    /// A short line in a (key) colour.
    Line(RGBColor, u32),
    /// A filled square (a colour at some opacity: a shade of it).
    Block(RGBAColor),
    /// The death marker.
    Cross(RGBColor),
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) swatch: Swatch,
    pub(crate) label: String,
}

/// A group of entries; a heading (e.g. the arm) starts a new row.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    pub(crate) heading: Option<String>,
    pub(crate) entries: Vec<Entry>,
}

const ROW_H: i32 = 22;
const SWATCH_W: i32 = 28;
const GAP: i32 = 18;

enum Item {
    Heading(String),
    Entry(Entry),
}

struct Placed {
    x: i32,
    row: i32,
    item: Item,
}

fn layout(groups: &[Group], width: i32, left: i32) -> (Vec<Placed>, i32) {
    let mut placed = Vec::new();
    let mut row = 0;
    let mut x = left;
    let mut any = false;
    // Headings form a column, so the entries of every row line up.
    let heading_w = groups
        .iter()
        .filter_map(|g| g.heading.as_deref())
        .map(|h| text_width(&clean_label(h), LABEL_PX) as i32 + 14)
        .max()
        .unwrap_or(0);
    for g in groups {
        if g.entries.is_empty() {
            continue;
        }
        // Each headed group starts its own row; unheaded groups flow on.
        if any && g.heading.is_some() {
            row += 1;
            x = left;
        }
        let mut indent = left;
        if let Some(h) = g.heading.as_deref().map(clean_label) {
            if !h.is_empty() {
                placed.push(Placed {
                    x,
                    row,
                    item: Item::Heading(h),
                });
            }
            x += heading_w;
            indent = x;
        }
        for e in &g.entries {
            let label = clean_label(&e.label);
            let w = SWATCH_W + 6 + text_width(&label, LABEL_PX) as i32;
            if x + w > width && x > indent {
                row += 1;
                x = indent;
            }
            placed.push(Placed {
                x,
                row,
                item: Item::Entry(Entry {
                    swatch: e.swatch,
                    label,
                }),
            });
            x += w + GAP;
        }
        any = true;
    }
    let height = if any { (row + 1) * ROW_H + 8 } else { 0 };
    (placed, height)
}

/// Height in pixels the legend needs at `width`.
pub(crate) fn height(groups: &[Group], width: u32, left: u32) -> u32 {
    layout(groups, width as i32, left as i32).1 as u32
}

/// Draw the legend with its top-left corner at `(left, top)` of `area`.
pub(crate) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    groups: &[Group],
    left: i32,
    top: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let width = area.dim_in_pixel().0 as i32 - 10;
    let (placed, _) = layout(groups, width, left);
    let label_style = font(LABEL_PX).pos(Pos::new(HPos::Left, VPos::Center));
    let heading_style = theme::bold(LABEL_PX).pos(Pos::new(HPos::Left, VPos::Center));
    for p in placed {
        let y = top + p.row * ROW_H + ROW_H / 2;
        match p.item {
            Item::Heading(h) => {
                area.draw(&Text::new(h, (p.x, y), heading_style.clone()))?;
            }
            Item::Entry(e) => {
                let (x0, x1) = (p.x, p.x + SWATCH_W);
                match e.swatch {
                    Swatch::Line(c, w) => {
                        area.draw(&PathElement::new(vec![(x0, y), (x1, y)], stroke(c, w)))?;
                    }
                    Swatch::Block(c) => {
                        let s = 11;
                        let mid = (x0 + x1) / 2;
                        area.draw(&Rectangle::new(
                            [(mid - s / 2 - 2, y - s / 2), (mid + s / 2 + 2, y + s / 2)],
                            filled(c),
                        ))?;
                    }
                    Swatch::Cross(c) => {
                        cross(area, ((x0 + x1) / 2, y), 5, c)?;
                    }
                }
                if !e.label.is_empty() {
                    area.draw(&Text::new(e.label, (x1 + 6, y), label_style.clone()))?;
                }
            }
        }
    }
    Ok(())
}

/// The death marker: an ×, drawn as two strokes.
pub(crate) fn cross<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    r: i32,
    c: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.draw(&PathElement::new(
        vec![(x - r, y - r), (x + r, y + r)],
        stroke(c, 3),
    ))?;
    area.draw(&PathElement::new(
        vec![(x - r, y + r), (x + r, y - r)],
        stroke(c, 3),
    ))?;
    Ok(())
}
