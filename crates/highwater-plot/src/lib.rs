//! The book's figures in one house style: [plotters] drawing into SVG strings that can be
//! inlined into mdbook pages.
//!
//! Every figure is plain data in, a complete `<svg>` element out:
//! - [`HighWaterChart`]: per-step pool high-water of arms × seeds against the card's capacity,
//!   with the step each run died at marked and labelled;
//! - [`ErrorChart`]: signed percentages per step, e.g. a simulator's error against a GPU;
//! - [`StackedBars`]: what each path keeps alive per call, stacked by op, in bytes;
//! - [`DeathHistogram`]: when runs die over many seeds, survivors set apart;
//! - [`MemoryView`]: every allocation over time, interactive HTML (the one output here that
//!   carries a script: see its module).
//!
//! The SVG is theme-aware and inline-safe:
//! - text, axes and grid are drawn in `currentColor` (the grid at reduced opacity), the
//!   background is transparent, and series use a colour-blind-safe palette of mid-lightness
//!   that reads on mdbook's light and dark themes alike;
//! - an arm has one colour in every figure ([`arm_colour`]): series are coloured by their arm,
//!   and what differs within an arm (seeds, configurations, parts of a bar) by dash or shade;
//! - no XML declaration, no script, no external reference, no blank line (a blank line would
//!   end the raw HTML block in CommonMark), `width="100%"` with the `viewBox` kept, so the
//!   figure scales down with the page. A lowercased `viewbox` (mdbook 0.5 lowercases raw-HTML
//!   attribute names) is fixed back by the browser's HTML parser for inline SVG.
//! - text is `<text>` in a generic `sans-serif`: no font files, no system font lookup.
//!
//! This crate deliberately knows nothing about the simulator: callers convert their results
//! into these types.

mod bars;
mod deaths;
mod errors;
mod frame;
mod highwater;
mod labels;
mod legend;
mod memview;
mod rates;
mod theme;
mod timeline;

pub use bars::{Bar, StackedBars};
pub use deaths::DeathHistogram;
pub use errors::{ErrorChart, ErrorLine};
pub use highwater::{HighWaterChart, Series};
pub use memview::{
    Band, DetailStep, FAMILY_COLOURS, FreeSpace, MAX_BANDS, MemoryView, Page, Refusal, StepTotals,
};
pub use rates::{Curve, RateChart};
pub use theme::{PALETTE, arm_colour, arm_colours, arm_key};
pub use timeline::{Lane, Mark, Timeline};
