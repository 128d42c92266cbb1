//! [`MemoryView`]: every allocation of a traced run over time, as one self-contained block of
//! HTML (an inline SVG, its data and a small script; no network, no external file).
//!
//! - **Overview** (top): every step of the run, peak in use and reserved against the capacity.
//!   A run of thousands of steps is aggregated to one point per pixel column (the maximum), so
//!   its size does not grow with the steps; the detailed steps are marked and can be clicked.
//! - **Timeline**: the detailed steps' allocations as bands over time (one event, one unit),
//!   by address: each page of the pool is a lane, as tall as its bytes (with a floor so small
//!   pages stay visible), and a slice sits at its offset. Gaps between bands inside a lane are
//!   free bytes of a page the pool holds. A second layout stacks the bytes in use by family.
//! - **Pages**: for one step, every page at the instant that matters (its first refused
//!   reserve, else its peak): slices in colour, free gaps hatched, and in words how much is
//!   free and the largest gap: fragmentation made visible.
//!
//! Without the script the SVG still reads: every step's bands, the overview, the page view of
//! the step [`MemoryView::initial`] names. The script adds the step selector, the layout switch
//! and the tooltips (tensor, op, size, lifetime, page). Colours are fills that read on light
//! and dark themes; text and axes use `currentColor`; the tooltip takes mdbook's theme
//! variables.
//!
//! Size: about 70 bytes of SVG and 40 of data per band. [`MemoryView::to_html`] draws at most
//! [`MAX_BANDS`] bands; steps past that budget stay in the overview and are named as cut.

mod bands;
mod data;
mod html;
mod layout;
mod overview;
mod pages;

/// Bands one view draws at most: about 1.3 MB of HTML.
pub const MAX_BANDS: usize = 12_000;

/// Fill colours of the families, in the order [`MemoryView::families`] lists them: mid
/// lightness (each reads at ≥ 3:1 on white and on mdbook's dark themes), hues apart.
pub const FAMILY_COLOURS: [&str; 11] = [
    "#8C8C8C", // grey
    "#648FFF", // blue
    "#785EF0", // violet
    "#FE6100", // orange
    "#B08A00", // dark gold
    "#009E73", // bluish green
    "#009999", // teal
    "#DC267F", // magenta
    "#CC79A7", // reddish purple
    "#B35F30", // sienna
    "#4A7A2A", // olive
];

/// One allocation's life.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// When it was reserved (an event number), or when the traced range began.
    pub start: u64,
    /// When it was freed; `None`: still live when the trace ends.
    pub end: Option<u64>,
    /// Its page's number.
    pub page: u32,
    /// Its offset in the page.
    pub offset: u64,
    /// Bytes the tensor asked for.
    pub bytes: u64,
    /// Index into [`MemoryView::families`].
    pub family: usize,
    /// The tensor's name.
    pub tensor: String,
    /// The op that made it.
    pub op: String,
    /// Step it was reserved in (0: before step one).
    pub step: u64,
    /// Its free reached the pool late.
    pub late: bool,
}

/// A page the pool held during the detailed steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Its number.
    pub number: u32,
    /// Its bytes.
    pub bytes: u64,
    /// The event it was first held at (allocated, or held when the trace began).
    pub since: u64,
}

/// A step drawn in detail: the event numbers it spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetailStep {
    /// The step.
    pub step: u64,
    /// Its first event.
    pub start: u64,
    /// One past its last event.
    pub end: u64,
}

/// One step of the overview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepTotals {
    /// The step.
    pub step: u64,
    /// Peak bytes in use.
    pub peak: u64,
    /// Bytes of pages held at its end.
    pub reserved: u64,
    /// Reserves refused.
    pub failures: u32,
}

/// A refused reserve.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// Its event number.
    pub time: u64,
    /// Bytes the tensor asked for.
    pub bytes: u64,
    /// The page the driver refused.
    pub page_bytes: u64,
    /// The tensor.
    pub tensor: String,
}

/// Free space inside the pages at one instant ([`MemoryView::free_space`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes free inside the pages held.
    pub bytes: u64,
    /// The largest free gap in one page.
    pub largest_gap: u64,
    /// Pages held.
    pub pages: usize,
}

/// The whole view's data; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryView {
    /// What the view shows, for its label and the screen readers.
    pub title: String,
    /// Family names; a band's `family` indexes this, and [`FAMILY_COLOURS`] paints it.
    pub families: Vec<String>,
    /// Allocations of the detailed steps.
    pub bands: Vec<Band>,
    /// Pages held during the detailed steps.
    pub pages: Vec<Page>,
    /// Steps drawn in detail, in order.
    pub steps: Vec<DetailStep>,
    /// Every step of the run.
    pub overview: Vec<StepTotals>,
    /// Refused reserves within the detailed steps.
    pub refusals: Vec<Refusal>,
    /// Bytes the pool could take.
    pub capacity: u64,
    /// The step the trainer died at, if it did.
    pub died_at: Option<u64>,
    /// The step selected when the page opens (and drawn without the script); `None`: all.
    pub initial: Option<u64>,
}

const W: f64 = 820.0;
const LEFT: f64 = 118.0;
const RIGHT: f64 = 12.0;
const PLOT_W: f64 = W - LEFT - RIGHT;
const OVERVIEW_TOP: f64 = 34.0;
const OVERVIEW_H: f64 = 64.0;
const LANES_H: f64 = 360.0;
const LANE_FLOOR: f64 = 2.5;
const PAGES_COLUMNS: usize = 3;
const PAGE_ROW: f64 = 13.0;
/// The pool's offset alignment (cubecl-cuda's 512 bytes): a slice takes its bytes rounded up.
const SLICE_ALIGNMENT: u64 = 512;
/// Steps that get a page view.
const PAGE_VIEWS: usize = 8;
/// Pages the page view draws one bar each; the rest are summed up by size.
const PAGE_BARS: usize = 60;

/// The script, shared by every view on a page (it defines itself once).
const SCRIPT: &str = include_str!("memview.js");
