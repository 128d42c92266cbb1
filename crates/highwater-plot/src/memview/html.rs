//! The view's HTML: the controls, the SVG's assembly, the style and the script around it.

use std::fmt::Write;

use super::layout::{Lanes, escape};
use super::{
    Band, DetailStep, FAMILY_COLOURS, LANES_H, MAX_BANDS, MemoryView, OVERVIEW_H, OVERVIEW_TOP,
    SCRIPT, W,
};

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
        svg.push_str(&Self::bands_svg(&bands, window.1, initial, &lanes));
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
        html.push_str(&Self::controls(&steps, initial_step));
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

    /// The controls above the SVG: the step selector (`initial` selected) and the layout switch.
    fn controls(steps: &[DetailStep], initial: Option<u64>) -> String {
        let mut html = String::new();
        html.push_str("<div class=\"hwv-controls\"><label>Steps <select class=\"hwv-step\">");
        let _ = write!(
            html,
            "<option value=\"all\">all {} drawn</option>",
            steps.len()
        );
        for s in steps {
            let selected = if Some(s.step) == initial {
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
        html
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
