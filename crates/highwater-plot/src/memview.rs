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

use std::fmt::Write;

use crate::units::format_bytes;

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

impl MemoryView {
    /// The view as HTML: a `<div>` holding the controls, the SVG, the data and the script.
    pub fn to_html(&self) -> String {
        let id = self.id();
        let (steps, cut) = self.budget();
        let window = (
            steps.first().map_or(0, |s| s.start),
            steps.last().map_or(1, |s| s.end),
        );
        let bands: Vec<&Band> = self
            .bands
            .iter()
            .filter(|b| Self::alive_in(b, window))
            .collect();
        // The step selected first, if it is drawn, and the step whose page view shows when
        // all steps are selected.
        let initial_step = self.initial.filter(|s| steps.iter().any(|d| d.step == *s));
        let shown = initial_step.or(steps.last().map(|s| s.step));
        let initial = initial_step
            .and_then(|s| steps.iter().find(|d| d.step == s))
            .map_or(window, |d| (d.start, d.end));
        // A run of one step has no overview to draw.
        let with_overview = self.overview.len() > 1;
        let lanes_top = if with_overview {
            OVERVIEW_TOP + OVERVIEW_H + 34.0
        } else {
            OVERVIEW_TOP + 4.0
        };
        let lanes = Lanes::new(&self.pages, lanes_top);
        let mut svg = String::new();
        let height = lanes_top + LANES_H + 40.0 + self.pages_height() + 30.0;
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"hwv-svg\" width=\"100%\" \
             viewBox=\"0 0 {W} {height:.0}\" role=\"img\" aria-label=\"{}\">",
            escape(&self.title)
        );
        svg.push_str(&self.legend(&bands));
        if with_overview {
            svg.push_str(&self.overview_svg(&steps));
        }
        svg.push_str(&lanes.axis(&self.pages));
        // Bands, in the order of the data's band list (the script finds them by index).
        svg.push_str("<g class=\"hwv-bands\">");
        for b in &bands {
            let (x, w) = x_span(b.start, b.end.unwrap_or(window.1), initial);
            let (y, h) = lanes.y(b.page, b.offset, b.bytes);
            let hidden = if w <= 0.0 { " display=\"none\"" } else { "" };
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" class=\"c{}\"{hidden}/>",
                w.max(0.5),
                b.family % FAMILY_COLOURS.len()
            );
        }
        svg.push_str("</g><g class=\"hwv-stack\" display=\"none\"></g>");
        svg.push_str(&self.step_marks(&steps, initial, lanes.top));
        svg.push_str(&self.refusal_marks(initial, lanes.top));
        let (page_steps, notes) = self.page_views(&bands, &steps, shown, &lanes, &id);
        svg.push_str(&page_steps);
        svg.push_str("</svg>");

        let data = self.data(&bands, &steps, (initial_step, shown), cut, &lanes);
        let mut html = String::new();
        let _ = write!(
            html,
            "<div class=\"hwv\" id=\"{id}\"><style>{}</style>",
            self.style(&id)
        );
        html.push_str("<div class=\"hwv-controls\"><label>Steps <select class=\"hwv-step\">");
        let _ = write!(
            html,
            "<option value=\"all\">all {} drawn</option>",
            steps.len()
        );
        for s in &steps {
            let selected = if Some(s.step) == initial_step {
                " selected"
            } else {
                ""
            };
            let _ = write!(
                html,
                "<option value=\"{}\"{selected}>step {}</option>",
                s.step, s.step
            );
        }
        html.push_str(
            "</select></label> <label>Layout <select class=\"hwv-layout\">\
             <option value=\"address\">by address (pages)</option>\
             <option value=\"stack\">stacked by family</option></select></label></div>",
        );
        html.push_str(&svg);
        html.push_str(&notes);
        html.push_str("<div class=\"hwv-tip\" hidden></div>");
        if let Some(first_cut) = cut {
            let _ = write!(
                html,
                "<p class=\"hwv-note\">Steps from {first_cut} on are in the overview only: \
                 drawing their bands would pass the view's budget of {MAX_BANDS} bands.</p>"
            );
        }
        let _ = write!(
            html,
            "<script type=\"application/json\" class=\"hwv-data\">{}</script>",
            data
        );
        let _ = write!(
            html,
            "<script>{}\nhwMemView(document.getElementById(\"{id}\"));</script></div>",
            // A blank line would end the HTML block in markdown.
            SCRIPT
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        );
        html
    }

    /// The pool's free space at event `at`: bytes free inside the pages held (of the pages
    /// the view shows) and the largest free gap, which bounds the largest reserve those pages
    /// can still take. Slices are laid out at the pool's 512-byte alignment.
    /// Only pages of `page_bytes` when given: the pages a reserve of one size class can use.
    pub fn free_space(&self, at: u64, page_bytes: Option<u64>) -> FreeSpace {
        self.free_in(&Self::live_by_page(self.bands.iter(), at), at, page_bytes)
    }

    /// [`MemoryView::free_space`] from the slices alive at `at`, by page.
    fn free_in(
        &self,
        by_page: &std::collections::HashMap<u32, Vec<&Band>>,
        at: u64,
        page_bytes: Option<u64>,
    ) -> FreeSpace {
        let mut free = FreeSpace::default();
        for p in self
            .pages
            .iter()
            .filter(|p| p.since <= at && page_bytes.is_none_or(|b| b == p.bytes))
        {
            let slices = by_page.get(&p.number).map_or(&[][..], Vec::as_slice);
            let mut cursor = 0u64;
            for b in slices {
                let gap = b.offset.saturating_sub(cursor);
                free.bytes += gap;
                free.largest_gap = free.largest_gap.max(gap);
                cursor = cursor.max(b.offset + b.bytes.next_multiple_of(SLICE_ALIGNMENT));
            }
            let tail = p.bytes.saturating_sub(cursor);
            free.bytes += tail;
            free.largest_gap = free.largest_gap.max(tail);
            free.pages += 1;
        }
        free
    }

    /// The bands alive at `at`, by page, each page's in offset order.
    fn live_by_page<'a>(
        bands: impl Iterator<Item = &'a Band>,
        at: u64,
    ) -> std::collections::HashMap<u32, Vec<&'a Band>> {
        let mut by_page: std::collections::HashMap<u32, Vec<&Band>> = Default::default();
        for b in bands.filter(|b| Self::alive_at(b, at)) {
            by_page.entry(b.page).or_default().push(b);
        }
        for slices in by_page.values_mut() {
            slices.sort_by_key(|b| b.offset);
        }
        by_page
    }

    /// A stable id from the content, so two views on one page do not collide.
    fn id(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |v: u64| {
            for b in v.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        };
        for c in self.title.bytes() {
            feed(u64::from(c));
        }
        for b in &self.bands {
            feed(b.start ^ (b.offset << 7) ^ u64::from(b.page));
        }
        feed(self.overview.len() as u64);
        format!("hwv-{:012x}", h & 0xffff_ffff_ffff)
    }

    /// The detailed steps within [`MAX_BANDS`], and the first step cut, if any.
    /// Each band counts once, at the first step it is alive in (steps are in event order);
    /// the first step is kept whole even past the budget, so that something is drawn.
    fn budget(&self) -> (Vec<DetailStep>, Option<u64>) {
        let mut first_seen = vec![0usize; self.steps.len()];
        for b in &self.bands {
            let i = self.steps.partition_point(|s| s.end <= b.start);
            if let Some(s) = self.steps.get(i)
                && Self::alive_in(b, (s.start, s.end))
            {
                first_seen[i] += 1;
            }
        }
        let mut used = 0;
        for (i, s) in self.steps.iter().enumerate() {
            if used + first_seen[i] > MAX_BANDS && i > 0 {
                return (self.steps[..i].to_vec(), Some(s.step));
            }
            used += first_seen[i];
        }
        (self.steps.clone(), None)
    }

    /// Whether a band is alive during the window of events `(start, end)`.
    fn alive_in(b: &Band, window: (u64, u64)) -> bool {
        b.start < window.1 && b.end.is_none_or(|e| e > window.0)
    }

    /// Whether a band is alive at event `at`.
    fn alive_at(b: &Band, at: u64) -> bool {
        b.start <= at && b.end.is_none_or(|e| e > at)
    }

    fn legend(&self, bands: &[&Band]) -> String {
        let mut out = String::from("<g class=\"hwv-legend\" font-size=\"12\">");
        let mut x = LEFT;
        for (i, name) in self.families.iter().enumerate() {
            if !bands.iter().any(|b| b.family == i) {
                continue;
            }
            let _ = write!(
                out,
                "<rect x=\"{x:.0}\" y=\"6\" width=\"10\" height=\"10\" class=\"c{}\"/>\
                 <text x=\"{:.0}\" y=\"15\">{}</text>",
                i % FAMILY_COLOURS.len(),
                x + 14.0,
                escape(name)
            );
            x += 22.0 + 7.0 * name.chars().count() as f64;
        }
        out.push_str("</g>");
        out
    }

    fn overview_svg(&self, steps: &[DetailStep]) -> String {
        let mut out = String::from("<g class=\"hwv-overview\" font-size=\"11\">");
        let top = self
            .overview
            .iter()
            .map(|s| s.peak.max(s.reserved))
            .max()
            .unwrap_or(1)
            .max(self.capacity)
            .max(1) as f64;
        let y = |v: u64| OVERVIEW_TOP + OVERVIEW_H * (1.0 - v as f64 / top);
        let n = self.overview.len().max(1);
        let x = |i: usize| LEFT + PLOT_W * (i as f64 + 0.5) / n as f64;
        // One point per pixel column at most: the maximum of the steps it covers.
        let columns = (PLOT_W as usize).min(n);
        let line = |value: fn(&StepTotals) -> u64| {
            let mut pts = String::new();
            for c in 0..columns {
                let (a, b) = (
                    c * n / columns,
                    ((c + 1) * n / columns).max(c * n / columns + 1),
                );
                let v = self.overview[a..b.min(self.overview.len())]
                    .iter()
                    .map(value)
                    .max()
                    .unwrap_or(0);
                let _ = write!(pts, "{:.1},{:.1} ", x((a + b - 1) / 2), y(v));
            }
            pts
        };
        let heading = format!(
            "Every step, {}–{}: peak in use (orange), reserved (line), capacity (dashed); the \
             shaded steps are drawn below",
            self.overview.first().map_or(0, |s| s.step),
            self.overview.last().map_or(0, |s| s.step),
        );
        let _ = write!(
            out,
            "<text x=\"{LEFT}\" y=\"{:.0}\">{heading}</text>\
             <line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"currentColor\" \
             stroke-dasharray=\"4 3\" opacity=\"0.7\"/>\
             <text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">capacity {}</text>",
            OVERVIEW_TOP - 4.0,
            LEFT + PLOT_W,
            y(self.capacity),
            y(self.capacity),
            LEFT + PLOT_W - 4.0,
            y(self.capacity) + 12.0,
            format_bytes(self.capacity)
        );
        let _ = write!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\
             <polyline points=\"{}\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"1\" \
             opacity=\"0.8\"/>",
            line(|s| s.peak),
            FAMILY_COLOURS[3],
            line(|s| s.reserved)
        );
        for s in steps {
            if let Some(i) = self.overview.iter().position(|o| o.step == s.step) {
                let _ = write!(
                    out,
                    "<rect class=\"hwv-pick\" data-step=\"{}\" x=\"{:.1}\" y=\"{OVERVIEW_TOP}\" \
                     width=\"{:.1}\" height=\"{OVERVIEW_H}\" fill=\"currentColor\" \
                     opacity=\"0.15\"/>",
                    s.step,
                    x(i) - (PLOT_W / n as f64 / 2.0).max(2.0),
                    (PLOT_W / n as f64).max(4.0)
                );
            }
        }
        if let Some(d) = self.died_at
            && let Some(i) = self.overview.iter().position(|o| o.step == d)
        {
            let _ = write!(
                out,
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{OVERVIEW_TOP}\" y2=\"{1:.1}\" \
                 stroke=\"#DC267F\" stroke-width=\"2\"/><text x=\"{0:.1}\" y=\"{2:.1}\" \
                 text-anchor=\"end\">died at step {d} </text>",
                x(i),
                OVERVIEW_TOP + OVERVIEW_H,
                OVERVIEW_TOP + OVERVIEW_H + 12.0
            );
        }
        out.push_str("</g>");
        out
    }

    fn step_marks(&self, steps: &[DetailStep], window: (u64, u64), top: f64) -> String {
        let mut out = String::from("<g class=\"hwv-marks\" font-size=\"11\">");
        for s in steps {
            let (x, w) = x_span(s.start, s.end, window);
            let hidden = if w <= 0.0 { " display=\"none\"" } else { "" };
            let _ = write!(
                out,
                "<g class=\"hwv-mark\"{hidden}><line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.0}\" \
                 y2=\"{:.0}\" stroke=\"currentColor\" opacity=\"0.5\"/><text x=\"{:.1}\" \
                 y=\"{:.0}\">step {}</text></g>",
                top - 12.0,
                top + LANES_H,
                x + 3.0,
                top - 3.0,
                s.step
            );
        }
        out.push_str("</g>");
        out
    }

    fn refusal_marks(&self, window: (u64, u64), top: f64) -> String {
        let mut out = String::from("<g class=\"hwv-refusals\" font-size=\"11\">");
        for r in &self.refusals {
            let (x, w) = x_span(r.time, r.time + 1, window);
            let hidden = if w <= 0.0 { " display=\"none\"" } else { "" };
            let _ = write!(
                out,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{:.0}\" \
                 stroke=\"#DC267F\" stroke-width=\"1.5\" stroke-dasharray=\"3 2\"{hidden}>\
                 <title>refused: {} for {} (the driver refused a page of {})</title></line>",
                top + LANES_H,
                format_bytes(r.bytes),
                escape(&r.tensor),
                format_bytes(r.page_bytes)
            );
        }
        out.push_str("</g>");
        out
    }

    fn pages_height(&self) -> f64 {
        let (bars, groups) = self.page_rows();
        (bars.len().div_ceil(PAGES_COLUMNS) + groups.len()) as f64 * PAGE_ROW + 24.0
    }

    /// The page view's rows: the largest [`PAGE_BARS`] pages one bar each (indices into
    /// `pages`, largest first), the rest one row per size: (bytes, page numbers).
    fn page_rows(&self) -> (Vec<usize>, Vec<(u64, Vec<u32>)>) {
        let mut order: Vec<usize> = (0..self.pages.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(self.pages[i].bytes), self.pages[i].number));
        let rest = order.split_off(order.len().min(PAGE_BARS));
        let mut groups: Vec<(u64, Vec<u32>)> = vec![];
        for i in rest {
            let p = self.pages[i];
            match groups.last_mut() {
                Some((bytes, numbers)) if *bytes == p.bytes => numbers.push(p.number),
                _ => groups.push((p.bytes, vec![p.number])),
            }
        }
        (order, groups)
    }

    /// For every detailed step, its pages at the instant that matters; the group of the step
    /// [`MemoryView::initial`] names (else the last) is shown, the others wait for the script.
    /// Returns the SVG groups and, for steps with a refusal, a paragraph that explains it.
    fn page_views(
        &self,
        bands: &[&Band],
        steps: &[DetailStep],
        shown: Option<u64>,
        lanes: &Lanes,
        id: &str,
    ) -> (String, String) {
        let top = lanes.top + LANES_H + 40.0;
        let mut out = String::new();
        let mut notes = String::new();
        let col_w = (PLOT_W + LEFT - 20.0) / PAGES_COLUMNS as f64;
        // A page view costs about as much as a step's bands: only a few steps get one, the
        // one shown first, those with a refusal, then the last ones.
        let mut chosen: Vec<u64> = shown.into_iter().collect();
        for s in steps.iter().filter(|s| {
            self.refusals
                .iter()
                .any(|r| (s.start..s.end).contains(&r.time))
        }) {
            chosen.push(s.step);
        }
        chosen.extend(steps.iter().rev().map(|s| s.step));
        let mut seen = std::collections::BTreeSet::new();
        chosen.retain(|s| seen.insert(*s));
        chosen.truncate(PAGE_VIEWS);
        chosen.sort_unstable();
        if chosen.len() < steps.len() {
            let list = chosen
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                out,
                "<text class=\"hwv-nopages\" x=\"10\" y=\"{:.0}\" font-size=\"12\" \
                 display=\"none\">The page view is drawn for steps {list} only.</text>",
                top + 10.0
            );
        }
        for s in steps.iter().filter(|s| chosen.contains(&s.step)) {
            let (at, why) = self.instant(bands, s);
            let live = Self::live_by_page(bands.iter().copied(), at);
            let hidden = if Some(s.step) == shown {
                ""
            } else {
                " display=\"none\""
            };
            let free = self.free_in(&live, at, None);
            let refused = self.refusals.iter().find(|r| r.time == at);
            if let Some(r) = refused {
                let class = self.free_in(&live, at, Some(r.page_bytes));
                let _ = write!(
                    notes,
                    "<p class=\"hwv-says\" data-step=\"{}\"{}>In step {}, the refused reserve ({} for {}) could only go to a page of {}: the \
                         largest gap among those {} pages is {}, so the pool asked the driver \
                         for one more, and the card had no room left.</p>",
                    s.step,
                    if hidden.is_empty() { "" } else { " hidden" },
                    s.step,
                    format_bytes(r.bytes),
                    escape(&r.tensor),
                    format_bytes(r.page_bytes),
                    class.pages,
                    format_bytes(class.largest_gap)
                );
            }
            let mut body = String::new();
            let (bars, groups) = self.page_rows();
            for (k, p) in bars.iter().enumerate() {
                let page = self.pages[*p];
                let (col, row) = (k % PAGES_COLUMNS, k / PAGES_COLUMNS);
                let x0 = 10.0 + col as f64 * col_w;
                let y0 = top + 18.0 + row as f64 * PAGE_ROW;
                let bar = col_w - 16.0;
                let slices = live.get(&page.number).map_or(&[][..], Vec::as_slice);
                let _ = write!(
                    body,
                    "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{bar:.1}\" height=\"9\" \
                     fill=\"url(#{id}-hatch)\" stroke=\"currentColor\" stroke-width=\"0.4\" \
                     data-page=\"{}\"/>",
                    page.number
                );
                for b in slices {
                    let x = x0 + bar * b.offset as f64 / page.bytes as f64;
                    let w = (bar * b.bytes as f64 / page.bytes as f64).max(0.4);
                    let _ = write!(
                        body,
                        "<rect x=\"{x:.1}\" y=\"{y0:.1}\" width=\"{w:.1}\" height=\"9\" class=\"c{}\"/>",
                        b.family % FAMILY_COLOURS.len()
                    );
                }
            }
            // Pages past the bars: one row per size, a cell per page, filled when it holds
            // a slice.
            let first_row = bars.len().div_ceil(PAGES_COLUMNS);
            for (g, (bytes, numbers)) in groups.iter().enumerate() {
                let y0 = top + 18.0 + (first_row + g) as f64 * PAGE_ROW;
                let used: Vec<bool> = numbers.iter().map(|n| live.contains_key(n)).collect();
                let in_use = used.iter().filter(|u| **u).count();
                let label = format!(
                    "{} more pages of {}: {in_use} hold a slice, {} are empty",
                    numbers.len(),
                    format_bytes(*bytes),
                    numbers.len() - in_use
                );
                let width = 1.3 * col_w;
                let cell = width / numbers.len() as f64;
                let _ = write!(
                    body,
                    "<rect x=\"10\" y=\"{y0:.1}\" width=\"{width:.1}\" height=\"9\" \
                     fill=\"url(#{id}-hatch)\" stroke=\"currentColor\" stroke-width=\"0.4\"/>"
                );
                // Runs of pages in use, one rect each.
                let mut k = 0;
                while k < used.len() {
                    if !used[k] {
                        k += 1;
                        continue;
                    }
                    let start = k;
                    while k < used.len() && used[k] {
                        k += 1;
                    }
                    let _ = write!(
                        body,
                        "<rect x=\"{:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"9\" \
                         fill=\"currentColor\" opacity=\"0.55\"/>",
                        10.0 + start as f64 * cell,
                        (k - start) as f64 * cell
                    );
                }
                let _ = write!(
                    body,
                    "<text x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
                    18.0 + width,
                    y0 + 8.5
                );
            }
            let _ = write!(
                out,
                "<g class=\"hwv-pages\" data-step=\"{}\"{hidden} font-size=\"12\"><text x=\"10\" \
                 y=\"{:.0}\">Pages in step {} {why}: {} free inside the {} pages drawn, the \
                 largest free gap {}.</text>{body}</g>",
                s.step,
                top + 10.0,
                s.step,
                format_bytes(free.bytes),
                free.pages,
                format_bytes(free.largest_gap)
            );
        }
        let svg = format!(
            "<defs><pattern id=\"{id}-hatch\" width=\"4\" height=\"4\" \
             patternUnits=\"userSpaceOnUse\"><path d=\"M0,4 L4,0\" stroke=\"currentColor\" \
             stroke-width=\"0.6\" opacity=\"0.6\"/></pattern></defs>{out}"
        );
        (svg, notes)
    }

    /// The instant the page view of `step` shows, and why: its first refused reserve, else its
    /// peak in use (`None`: not a detailed step).
    pub fn page_instant(&self, step: u64) -> Option<(u64, &'static str)> {
        let s = self.steps.iter().find(|s| s.step == step)?;
        let bands: Vec<&Band> = self.bands.iter().collect();
        Some(self.instant(&bands, s))
    }

    fn instant(&self, bands: &[&Band], s: &DetailStep) -> (u64, &'static str) {
        if let Some(r) = self
            .refusals
            .iter()
            .find(|r| (s.start..s.end).contains(&r.time))
        {
            return (r.time, "at its first refused reserve");
        }
        let mut changes: Vec<(u64, i64)> = vec![];
        for b in bands {
            if Self::alive_in(b, (s.start, s.end)) {
                changes.push((b.start.max(s.start), b.bytes as i64));
                if let Some(e) = b.end.filter(|&e| e < s.end) {
                    changes.push((e, -(b.bytes as i64)));
                }
            }
        }
        // Frees before reserves at one instant: a free and a reserve never share one.
        changes.sort_unstable();
        let (mut now, mut peak, mut at) = (0i64, i64::MIN, s.start);
        for (t, d) in changes {
            now += d;
            if now > peak {
                (peak, at) = (now, t);
            }
        }
        (at, "at its peak in use")
    }

    fn data(
        &self,
        bands: &[&Band],
        steps: &[DetailStep],
        (initial, shown): (Option<u64>, Option<u64>),
        cut: Option<u64>,
        lanes: &Lanes,
    ) -> String {
        // Names repeat from step to step: each (tensor, op) is written once.
        let mut labels: Vec<(&str, &str)> = vec![];
        let mut label_of: std::collections::HashMap<(&str, &str), usize> = Default::default();
        let mut d = String::from("{\"bands\":[");
        for (i, b) in bands.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let key = (b.tensor.as_str(), b.op.as_str());
            let label = *label_of.entry(key).or_insert_with(|| {
                labels.push(key);
                labels.len() - 1
            });
            let _ = write!(
                d,
                "[{},{},{},{},{},{},{label},{}]",
                b.start,
                b.end.map_or("null".to_string(), |e| e.to_string()),
                b.page,
                b.offset,
                b.bytes,
                b.family,
                b.step * 2 + u64::from(b.late)
            );
        }
        d.push_str("],\"labels\":[");
        for (i, (tensor, op)) in labels.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let _ = write!(d, "[{},{}]", json_str(tensor), json_str(op));
        }
        d.push_str("],\"steps\":[");
        for (i, s) in steps.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let _ = write!(d, "[{},{},{}]", s.step, s.start, s.end);
        }
        d.push_str("],\"lanes\":[");
        for (i, p) in self.pages.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            let (y, h) = lanes.lane(p.number);
            let _ = write!(d, "[{},{},{y:.2},{h:.2}]", p.number, p.bytes);
        }
        d.push_str("],\"families\":[");
        for (i, f) in self.families.iter().enumerate() {
            if i > 0 {
                d.push(',');
            }
            d.push_str(&json_str(f));
        }
        let _ = write!(
            d,
            "],\"refusals\":[{}],\"overview\":[{}],\"initial\":{},\"shown\":{},\"cut\":{},\"geometry\":[{LEFT},{PLOT_W},{},{LANES_H}]}}",
            self.refusals
                .iter()
                .map(|r| format!(
                    "[{},{},{},{}]",
                    r.time,
                    r.bytes,
                    r.page_bytes,
                    json_str(&r.tensor)
                ))
                .collect::<Vec<_>>()
                .join(","),
            self.overview
                .iter()
                .map(|s| format!("[{},{},{},{}]", s.step, s.peak, s.reserved, s.failures))
                .collect::<Vec<_>>()
                .join(","),
            initial.map_or("null".into(), |s| s.to_string()),
            shown.map_or("null".into(), |s| s.to_string()),
            cut.map_or("null".into(), |s| s.to_string()),
            lanes.top,
        );
        d
    }

    fn style(&self, id: &str) -> String {
        let mut css = String::new();
        for (i, c) in FAMILY_COLOURS.iter().enumerate() {
            let _ = write!(css, "#{id} .c{i}{{fill:{c}}}");
        }
        let _ = write!(
            css,
            "#{id}{{position:relative;margin:1em 0}}\
             #{id} svg{{font-family:sans-serif;display:block}}\
             #{id} svg text{{fill:currentColor}}\
             #{id} .hwv-controls{{font-size:0.85em;margin-bottom:0.3em}}\
             #{id} .hwv-controls select{{margin-right:1em}}\
             #{id} .hwv-pick{{cursor:pointer}}\
             #{id} .hwv-tip{{position:absolute;pointer-events:none;z-index:10;max-width:24em;\
             padding:0.4em 0.6em;font-size:0.8em;line-height:1.35;border-radius:4px;\
             background:var(--bg,#fff);color:var(--fg,#000);\
             border:1px solid var(--table-border-color,#888);box-shadow:0 2px 6px rgba(0,0,0,0.3)}}\
             #{id} .hwv-note{{font-size:0.85em}}"
        );
        css
    }
}

/// Where a time interval falls on the x axis for a window of event numbers: (x, width); a
/// width ≤ 0 means outside the window.
fn x_span(start: u64, end: u64, window: (u64, u64)) -> (f64, f64) {
    let (w0, w1) = window;
    let span = (w1.saturating_sub(w0)).max(1) as f64;
    let a = start.max(w0);
    let b = end.min(w1);
    if b <= a {
        return (LEFT, 0.0);
    }
    let x = LEFT + PLOT_W * (a - w0) as f64 / span;
    let w = PLOT_W * (b - a) as f64 / span;
    (x, w)
}

/// The address layout: one lane per page, in page order, as tall as its bytes with a floor.
struct Lanes {
    /// Top of the first lane.
    top: f64,
    /// Per page number: its bytes, its lane's top and height.
    geometry: std::collections::BTreeMap<u32, (u64, f64, f64)>,
}

impl Lanes {
    fn new(pages: &[Page], top: f64) -> Self {
        let total: u64 = pages.iter().map(|p| p.bytes).sum::<u64>().max(1);
        // The floor shrinks when there are many pages, so that the lanes keep their height.
        let floor = LANE_FLOOR.min(0.3 * LANES_H / pages.len().max(1) as f64);
        let floors = floor * pages.len() as f64;
        let room = (LANES_H - floors).max(0.0);
        let mut y = top;
        let geometry = pages
            .iter()
            .map(|p| {
                let h = floor + room * p.bytes as f64 / total as f64;
                let lane = (p.number, (p.bytes.max(1), y, h));
                y += h;
                lane
            })
            .collect();
        Lanes { top, geometry }
    }

    fn lane(&self, page: u32) -> (f64, f64) {
        self.geometry
            .get(&page)
            .map_or((self.top, 0.0), |&(_, y, h)| (y, h))
    }

    /// A slice's top and height in its lane.
    fn y(&self, page: u32, offset: u64, bytes: u64) -> (f64, f64) {
        let Some(&(page_bytes, y, h)) = self.geometry.get(&page) else {
            return (self.top, 0.0);
        };
        let top = y + h * offset as f64 / page_bytes as f64;
        let height = (h * bytes as f64 / page_bytes as f64).max(0.5);
        (top, height)
    }

    /// Labels left of the lanes: runs of same-size pages named once.
    fn axis(&self, pages: &[Page]) -> String {
        let mut out = String::from("<g class=\"hwv-axis\" font-size=\"11\">");
        let mut i = 0;
        while i < pages.len() {
            let mut j = i;
            while j + 1 < pages.len() && pages[j + 1].bytes == pages[i].bytes {
                j += 1;
            }
            let (y0, _) = self.lane(pages[i].number);
            let (y1, h1) = self.lane(pages[j].number);
            let n = j - i + 1;
            let label = if n == 1 {
                format!("page {}: {}", pages[i].number, format_bytes(pages[i].bytes))
            } else {
                format!("{n} × {}", format_bytes(pages[i].bytes))
            };
            if y1 + h1 - y0 >= 10.0 {
                let _ = write!(
                    out,
                    "<text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                    LEFT - 6.0,
                    (y0 + y1 + h1) / 2.0 + 4.0
                );
            }
            let _ = write!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{y0:.1}\" y2=\"{y0:.1}\" \
                 stroke=\"currentColor\" stroke-width=\"0.5\" opacity=\"0.4\"/>",
                LEFT + PLOT_W
            );
            i = j + 1;
        }
        let _ = write!(
            out,
            "<rect x=\"{LEFT}\" y=\"{}\" width=\"{PLOT_W}\" height=\"{LANES_H}\" \
             fill=\"none\" stroke=\"currentColor\" stroke-width=\"0.6\"/></g>",
            self.top
        );
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // `<`, `>` and `&` too: the data sits in a <script>, which markup in a name could
            // otherwise end or turn into an escaped state.
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
