//! Pieces every figure shares: the SVG canvas, the title, the mesh style.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::theme::{self, FG, Keys, LABEL_PX, TITLE_PX, clean_label};

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
pub(crate) type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Height of the title band (0 without a title).
pub(crate) fn title_height(title: &str) -> u32 {
    if clean_label(title).is_empty() { 8 } else { 34 }
}

/// Render `draw` onto a fresh canvas of `size` and return the finished inline SVG.
pub(crate) fn render(
    title: &str,
    size: (u32, u32),
    keys: &Keys,
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> String {
    let mut raw = String::new();
    {
        let root = SVGBackend::with_string(&mut raw, size).into_drawing_area();
        let title = clean_label(title);
        if !title.is_empty() {
            root.draw(&Text::new(
                title.clone(),
                (12, 17),
                theme::bold(TITLE_PX).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .expect("drawing into a String cannot fail");
        }
        draw(&root).expect("drawing into a String cannot fail");
        root.present().expect("drawing into a String cannot fail");
    }
    keys.finish(&raw, size, &clean_label(title))
}

/// A chart on `plot` with the house margins and the given axis label bands (pixels).
pub(crate) fn chart_builder<'a, 'b>(
    plot: &'a Area<'b>,
    x_label_area: u32,
    y_label_area: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(plot);
    builder
        .margin_left(8)
        .margin_right(24)
        .margin_top(8)
        .margin_bottom(4)
        .x_label_area_size(x_label_area)
        .y_label_area_size(y_label_area);
    builder
}

/// The house mesh: faint grid, quiet axes, readable labels, all in `currentColor`.
pub(crate) fn style_mesh<X: Ranged, Y: Ranged, DB: DrawingBackend>(
    mesh: &mut plotters::chart::MeshStyle<'_, '_, X, Y, DB>,
) {
    mesh.label_style(theme::font(LABEL_PX))
        .axis_desc_style(theme::font(LABEL_PX))
        .bold_line_style(FG.mix(0.16))
        .light_line_style(TRANSPARENT)
        .axis_style(FG.mix(0.6))
        .set_all_tick_mark_size(4);
}

/// "no data" in the middle of a plotting area whose pixel ranges are `x` and `y`: a chart with
/// nothing to draw says so instead of an empty frame.
pub(crate) fn no_data(
    root: &Area<'_>,
    x: std::ops::Range<i32>,
    y: std::ops::Range<i32>,
) -> DrawResult {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    root.draw(&plotters::element::Text::new(
        "no data",
        ((x.start + x.end) / 2, (y.start + y.end) / 2),
        crate::theme::font(crate::theme::LABEL_PX).pos(Pos::new(HPos::Center, VPos::Center)),
    ))
}
