//! The memory view as a reader meets it: its SVG without the script (every band drawn, the
//! initial step's page view shown), and in headless Chromium in mdbook's five themes
//! (text in the theme's colour, the tooltip naming the band under the pointer, the step
//! selector and the layout switch changing what is drawn, no console error).

use std::path::Path;

use highwater_plot::{Band, DetailStep, MemoryView, Page, Refusal, StepTotals};
use roxmltree::Document;
use snapshots::browser::{Probe, chromium, probe};

const MIB: u64 = 1 << 20;

/// Two steps over three pages: a 64 MiB page shared by short-lived slices, a long-lived
/// `held.mid` (reserved in step 1, freed in step 2), a refusal in step 2; 2 000 steps of
/// overview.
fn view() -> MemoryView {
    MemoryView {
        title: "two steps <of> a test".into(),
        families: [
            "weights",
            "input",
            "matmul",
            "elementwise",
            "reduce",
            "kernel",
            "rest",
            "backward",
        ]
        .map(String::from)
        .to_vec(),
        bands: bands(),
        pages: vec![
            Page {
                number: 0,
                bytes: 8 * MIB,
                since: 0,
            },
            Page {
                number: 1,
                bytes: 64 * MIB,
                since: 0,
            },
            Page {
                number: 2,
                bytes: 16 * MIB,
                since: 3,
            },
        ],
        steps: vec![
            DetailStep {
                step: 1,
                start: 0,
                end: 63,
            },
            DetailStep {
                step: 2,
                start: 63,
                end: 160,
            },
        ],
        overview: (1..=2000)
            .map(|step| StepTotals {
                step,
                peak: 40 * MIB + step * 1000,
                reserved: 88 * MIB,
                failures: u32::from(step == 2),
            })
            .collect(),
        refusals: vec![Refusal {
            time: 120,
            bytes: 40 * MIB,
            page_bytes: 64 * MIB,
            tensor: "big".into(),
        }],
        capacity: 100 * MIB,
        died_at: Some(100),
        initial: Some(2),
    }
}

/// The view's bands: `weights` for good, `held.mid` across both steps, and 40 pairs of
/// short-lived slices (`tempK` on page 1, `gradK` on page 2), 20 a step.
fn bands() -> Vec<Band> {
    let band = |start, end, page, offset, bytes: u64, family, tensor: &str, step| Band {
        start,
        end,
        page,
        offset,
        bytes,
        family,
        tensor: tensor.into(),
        op: "mul".into(),
        step,
        late: false,
    };
    let mut bands = vec![
        band(0, None, 0, 0, 8 * MIB, 0, "weights", 0),
        band(2, Some(150), 1, 0, 32 * MIB, 3, "held.mid", 1),
    ];
    for k in 0..40u64 {
        let t = 3 + 3 * k;
        bands.push(band(
            t,
            Some(t + 2),
            1,
            32 * MIB,
            8 * MIB,
            2,
            // One name carries markup that would end or escape the data's <script> if it
            // were not escaped.
            &if k == 7 {
                "temp7<!--<script></script>".to_string()
            } else {
                format!("temp{k}")
            },
            1 + k / 20,
        ));
        bands.push(band(
            t,
            Some(t + 1),
            2,
            0,
            4 * MIB,
            7,
            &format!("grad{k}"),
            1 + k / 20,
        ));
    }
    bands
}

/// Without the script: one rect per band in data order, the initial step's page view shown
/// and the other hidden, its refusal explained in words, and everything escaped.
#[test]
fn the_svg_reads_without_the_script() {
    let v = view();
    let html = v.to_html();
    assert!(
        !html.lines().any(|l| l.trim().is_empty()),
        "no blank line (markdown)"
    );
    let start = html.find("<svg").unwrap();
    let end = html.find("</svg>").unwrap() + "</svg>".len();
    let doc = Document::parse(&html[start..end]).expect("the SVG is well-formed XML");
    let bands = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("hwv-bands"))
        .unwrap();
    let rects: Vec<_> = bands.children().filter(|n| n.is_element()).collect();
    assert_eq!(rects.len(), v.bands.len());
    // Step 2 is initial: bands of step 1 only are hidden; held.mid spans both and shows.
    let shown = |i: usize| rects[i].attribute("display") != Some("none");
    assert!(shown(1), "held.mid lives into step 2");
    assert!(!shown(2), "temp0 ended in step 1");
    let pages: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("hwv-pages"))
        .map(|n| (n.attribute("data-step").unwrap(), n.attribute("display")))
        .collect();
    assert_eq!(pages, [("1", Some("none")), ("2", None)]);
    assert!(html.contains("two steps &lt;of&gt; a test"));
    assert!(
        !html.contains("temp7<!--"),
        "markup in a name is escaped everywhere"
    );
    assert!(html.contains("temp7\\u003c!--\\u003cscript\\u003e"));
    // Before its first event a page is not held: it adds no free space.
    assert_eq!(v.free_space(2, None).pages, 2);
    assert_eq!(v.free_space(3, None).pages, 3);
    // A view with nothing in it still renders, and says nothing.
    let empty = MemoryView {
        bands: vec![],
        pages: vec![],
        steps: vec![],
        refusals: vec![],
        ..view()
    }
    .to_html();
    assert!(empty.contains("<svg") && empty.contains("all 0 drawn"));
    assert!(
        html.contains("the refused reserve (40 MiB for big) could only go to a page of 64 MiB")
    );
    // At the refusal (event 120), the 64 MiB page holds held.mid and temp39: 24 MiB free,
    // one gap.
    let free = v.free_space(120, Some(64 * MIB));
    assert_eq!(
        (free.bytes, free.largest_gap, free.pages),
        (24 * MIB, 24 * MIB, 1)
    );
    assert_eq!(
        v.page_instant(2),
        Some((120, "at its first refused reserve"))
    );
}

/// 2 000 steps of overview cost a polyline of at most a point per pixel column, not a point
/// per step; a view past its band budget draws what fits and says where it cut.
#[test]
fn the_view_aggregates_what_cannot_be_seen() {
    let mut v = view();
    let small = v.to_html().len();
    v.overview.extend((2001..=200_000).map(|step| StepTotals {
        step,
        peak: 0,
        reserved: 0,
        failures: 0,
    }));
    assert!(
        v.to_html().len() < small + 200_000 * 40,
        "the data keeps steps, compactly"
    );
    let mut v = view();
    let steps: Vec<DetailStep> = (0..100)
        .map(|s| DetailStep {
            step: s + 1,
            start: s * 1000,
            end: (s + 1) * 1000,
        })
        .collect();
    v.bands = (0..100_000u64)
        .map(|t| Band {
            start: t,
            end: Some(t + 1),
            page: 1,
            offset: 0,
            bytes: MIB,
            family: 2,
            tensor: format!("t{t}"),
            op: "matmul".into(),
            step: t / 1000 + 1,
            late: false,
        })
        .collect();
    v.steps = steps;
    v.refusals.clear();
    v.initial = None;
    let html = v.to_html();
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
    assert!(
        html.contains("Steps from 13 on are in the overview only"),
        "cut at 12 000 bands"
    );
}

/// What the probe reports, as JSON in `body[data-probe]`.
const PROBE: &str = r#"<script>
const out = { errors: window.__errors };
const root = document.querySelector('.hwv');
const svg = root.querySelector('svg');
const rects = [...svg.querySelector('.hwv-bands').children];
const visible = () => rects.flatMap((r, i) => r.getAttribute('display') !== 'none' ? [i] : []);
const data = JSON.parse(root.querySelector('.hwv-data').textContent);
out.visibleInitial = visible();
const hover = (el) => {
  const r = el.getBoundingClientRect();
  svg.dispatchEvent(new MouseEvent('mousemove',
    { clientX: r.x + r.width / 2, clientY: r.y + r.height / 2, bubbles: true }));
  const tip = root.querySelector('.hwv-tip');
  return tip.hidden ? null : tip.textContent;
};
out.tipHeld = hover(rects[data.bands.findIndex(b => data.labels[b[6]][0] === 'held.mid')]);
const step = root.querySelector('.hwv-step');
step.value = '1'; step.dispatchEvent(new Event('change'));
out.visibleStep1 = visible();
out.tipTemp = hover(rects[data.bands.findIndex(b => data.labels[b[6]][0] === 'temp5')]);
out.pagesShown = [...svg.querySelectorAll('.hwv-pages')]
  .filter(g => g.getAttribute('display') !== 'none').map(g => g.dataset.step);
svg.querySelector('.hwv-pick[data-step="2"]').dispatchEvent(new MouseEvent('click', { bubbles: true }));
out.afterClick = step.value;
const layout = root.querySelector('.hwv-layout');
layout.value = 'stack'; layout.dispatchEvent(new Event('change'));
out.stackPaths = svg.querySelectorAll('.hwv-stack path').length;
out.tipStack = hover(svg.querySelector('.hwv-stack path'));
const text = getComputedStyle(svg.querySelector('text')).fill;
out.textColour = text;
out.pageColour = getComputedStyle(document.body).color;
out.errors = window.__errors;
document.body.setAttribute('data-probe', JSON.stringify(out));
</script>"#;

/// mdbook 0.5's five themes, as far as the view reads them: background and text colours.
const THEMES: [(&str, &str, &str); 5] = [
    ("light", "#ffffff", "#000000"),
    ("rust", "#e1e1db", "#262625"),
    ("coal", "#141617", "#98a3ad"),
    ("navy", "#161923", "#bcbdd0"),
    ("ayu", "#0f1419", "#c5c5c5"),
];

#[test]
fn in_chromium_the_view_answers_the_pointer_and_the_controls() {
    let Some(chromium) = chromium() else { return };
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for (theme, bg, fg) in THEMES {
        let page = scratch.join(format!("memview-{theme}.html"));
        std::fs::write(
            &page,
            format!(
                "<!doctype html><html class=\"{theme}\"><head><meta charset=\"utf-8\"><style>\
                 :root{{--bg:{bg};--fg:{fg}}} body{{background:{bg};color:{fg};width:800px}}\
                 </style></head><body>{}</body></html>",
                view().to_html()
                    + &MemoryView {
                        bands: vec![],
                        pages: vec![],
                        steps: vec![],
                        refusals: vec![],
                        ..view()
                    }
                    .to_html()
            ),
        )
        .unwrap();
        let head = "<script>window.__errors = []; \
            window.addEventListener('error', e => window.__errors.push(e.message)); \
            const ce = console.error; \
            console.error = (...a) => { window.__errors.push(a.join(' ')); ce(...a); };</script>";
        let answer = probe(
            chromium,
            &page,
            &Probe {
                head,
                script: PROBE,
                attr: "probe",
                tag: &format!("memview-{theme}"),
            },
            scratch,
        );
        let out: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(out["errors"], serde_json::json!([]), "{theme}: {out}");
        let tip = out["tipHeld"]
            .as_str()
            .unwrap_or_else(|| panic!("{theme}: no tooltip: {out}"));
        assert!(
            tip.contains("held.mid") && tip.contains("32 MiB") && tip.contains("page 1"),
            "{theme}: {tip}"
        );
        assert!(
            tip.contains("reserved in step 1") && tip.contains("freed in step 2"),
            "{tip}"
        );
        let temp = out["tipTemp"].as_str().unwrap_or_default();
        assert!(
            temp.contains("temp5") && temp.contains("8 MiB"),
            "{theme}: {temp}"
        );
        // Step 2 first (initial), then step 1: different bands drawn.
        let drawn = |key: &str| out[key].as_array().map_or(0, Vec::len);
        assert!(
            drawn("visibleInitial") > 2 && drawn("visibleStep1") > 2,
            "{theme}: {out}"
        );
        assert_ne!(
            out["visibleInitial"], out["visibleStep1"],
            "{theme}: the step changes what is drawn"
        );
        assert_eq!(out["pagesShown"], serde_json::json!(["1"]), "{theme}");
        assert_eq!(
            out["afterClick"], "2",
            "a click in the overview selects its step"
        );
        assert!(out["stackPaths"].as_u64().unwrap() >= 3, "{theme}: {out}");
        assert!(
            out["tipStack"]
                .as_str()
                .is_some_and(|t| t.contains("in use")),
            "{theme}: {out}"
        );
        assert_eq!(
            out["textColour"], out["pageColour"],
            "{theme}: text follows the theme"
        );
    }
}
