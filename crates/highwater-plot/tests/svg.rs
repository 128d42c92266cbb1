//! Structural checks on every figure: the SVG must parse, be safe to inline into markdown,
//! follow the theme, and carry what the reader needs (legend, markers, escaped labels).

use highwater_plot::{
    Bar, Curve, DeathHistogram, ErrorChart, ErrorLine, HighWaterChart, PALETTE, RateChart, Series,
    StackedBars, arm_colour, arm_colours,
};
use roxmltree::{Document, Node};

mod bars;
mod memview;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn hex(i: usize) -> String {
    rgb(PALETTE[i])
}

fn rgb(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// How a known arm is painted, as the SVG writes it.
fn arm(name: &str) -> String {
    rgb(arm_colour(name).expect("a known arm"))
}

/// Everything that must hold for any figure; returns the parsed document.
fn inline_safe(svg: &str) -> Document<'_> {
    assert!(svg.starts_with("<svg "), "must start with the svg element");
    assert!(svg.ends_with("</svg>\n"));
    for bad in [
        "<?xml",
        "<!DOCTYPE",
        "<script",
        "href",
        "url(",
        "<image",
        "@import",
    ] {
        assert!(!svg.contains(bad), "contains {bad}");
    }
    for (i, line) in svg.lines().enumerate() {
        assert!(
            !line.trim().is_empty(),
            "blank line {i} would end the HTML block"
        );
    }
    // The opening tag must sit on one line by itself (CommonMark HTML block, type 7).
    let first = svg.lines().next().unwrap();
    assert!(first.starts_with("<svg ") && first.ends_with('>'));
    // No key colour or foreground sentinel may leak through the rewrite.
    assert!(!svg.contains("#010203"), "foreground sentinel leaked");
    assert!(!svg.contains("\"#0103"), "key colour leaked");
    assert!(svg.contains("currentColor"));

    let doc = Document::parse(svg).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let vb: Vec<f64> = root
        .attribute("viewBox")
        .expect("viewBox")
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(vb.len(), 4);
    assert!(vb[2] > 100.0 && vb[3] > 100.0);
    assert_eq!(root.attribute("width"), Some("100%"));
    assert_eq!(root.attribute("height"), None, "height follows the viewBox");
    let style = root.attribute("style").unwrap();
    assert!(style.contains(&format!("max-width:{}px", vb[2])));
    for n in doc.descendants().filter(|n| n.is_element()) {
        // Text, axes and grid in currentColor; no white or black backgrounds.
        if n.has_tag_name("rect") {
            let w: f64 = n.attribute("width").unwrap().parse().unwrap();
            let h: f64 = n.attribute("height").unwrap().parse().unwrap();
            assert!(
                w < vb[2] * 0.95 || h < vb[3] * 0.5,
                "a rect covers the canvas"
            );
            assert_ne!(n.attribute("fill"), Some("#FFFFFF"));
        }
        if n.has_tag_name("text") {
            assert_eq!(n.attribute("font-family"), Some("sans-serif"));
            assert!(!text(n).is_empty(), "empty text element");
        }
        // Every paint is currentColor, a palette colour, black ink, or none; a label's halo
        // is the page's background.
        for attr in ["fill", "stroke"] {
            if let Some(v) = n.attribute(attr) {
                let halo = attr == "stroke"
                    && n.has_tag_name("text")
                    && v == "var(--bg, #FFFFFF)"
                    && n.attribute("paint-order") == Some("stroke");
                assert!(
                    halo || v == "currentColor"
                        || v == "none"
                        || v == "#000000"
                        || (0..PALETTE.len()).any(|i| v == hex(i)),
                    "{attr}={v} on <{}>",
                    n.tag_name().name()
                );
            }
        }
    }
    // Text and axes are in currentColor (not just the grid).
    assert!(
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .any(|n| n.attribute("fill") == Some("currentColor"))
    );
    doc
}

fn text(n: Node<'_, '_>) -> String {
    n.text().unwrap_or("").trim().to_string()
}

fn texts(doc: &Document<'_>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(text)
        .collect()
}

fn run(arm: &str, label: &str, steps: u32, per_step: u64, died_at: Option<u32>) -> Series {
    Series {
        arm: arm.into(),
        label: label.into(),
        points: (0..steps)
            .map(|s| (s, GIB + u64::from(s) * per_step))
            .collect(),
        died_at,
    }
}

fn chart() -> HighWaterChart {
    HighWaterChart {
        title: "High-water <& friends>".into(),
        card_bytes: 16 * GIB,
        series: vec![
            run("tensor <Disabled> & co", "seed 0", 240, 64 * MIB, Some(239)),
            run("tensor <Disabled> & co", "seed 1", 200, 80 * MIB, Some(199)),
            run("fused", "seed 0", 400, MIB, None),
            run("fused", "seed 1", 400, 2 * MIB, None),
        ],
    }
}

#[test]
fn high_water_is_inline_safe_and_complete() {
    let svg = chart().to_svg();
    let doc = inline_safe(&svg);
    let t = texts(&doc);
    // Title, arms (legend headings) and seeds, escaped and round-tripped.
    for want in [
        "High-water <& friends>",
        "tensor <Disabled> & co",
        "fused",
        "seed 0",
        "seed 1",
        "card capacity (16 GiB)",
        "card 16 GiB",
        "step",
        "pool reserved",
    ] {
        assert!(
            t.iter().any(|x| x == want),
            "missing text {want:?} in {t:?}"
        );
    }
    assert!(svg.contains("tensor &lt;Disabled&gt; &amp; co"));
    assert_eq!(
        doc.root_element().attribute("aria-label"),
        Some("High-water <& friends>")
    );
    // Byte ticks in binary units.
    assert!(t.iter().any(|x| x == "15 GiB"), "{t:?}");
    assert!(
        t.iter().any(|x| x == "400"),
        "x axis ends at a round step: {t:?}"
    );
}

/// The colours `chart()` gives its two arms: an unknown one and the fused SiTU kernel.
fn chart_colours() -> (String, String) {
    let c = arm_colours(["tensor <Disabled> & co", "fused"]);
    (rgb(c[0]), rgb(c[1]))
}

#[test]
fn a_death_marker_per_died_series() {
    let c = chart();
    let svg = c.to_svg();
    let doc = inline_safe(&svg);
    let (tensor, fused) = chart_colours();
    assert_eq!(fused, arm("situ-fused"));
    // Each death is labelled beside its cross with its run and step, in its arm's colour,
    // over a halo of the page's background.
    for label in ["s0 †239", "s1 †199"] {
        let n = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && text(*n) == label)
            .collect::<Vec<_>>();
        assert_eq!(n.len(), 1, "death label {label}");
        assert_eq!(n[0].attribute("fill"), Some(tensor.as_str()));
        assert_eq!(n[0].attribute("paint-order"), Some("stroke"));
    }
    // A cross is two 3-px strokes: two per death in the arm colour, two in the legend.
    let crosses = |colour: &str| {
        doc.descendants()
            .filter(|n| {
                n.has_tag_name("polyline")
                    && n.attribute("stroke-width") == Some("3")
                    && n.attribute("stroke") == Some(colour)
            })
            .count()
    };
    assert_eq!(crosses(&tensor), 4);
    assert_eq!(crosses(&fused), 0, "the fused arm never died");
    assert_eq!(crosses("currentColor"), 2, "legend cross");

    // No death, no marker, no legend entry for it.
    let mut alive = c.clone();
    for s in &mut alive.series {
        s.died_at = None;
    }
    let svg = alive.to_svg();
    let doc = inline_safe(&svg);
    assert!(!texts(&doc).iter().any(|t| t.contains("out of memory")));
    assert!(
        !doc.descendants()
            .any(|n| n.attribute("stroke-width") == Some("3"))
    );
}

#[test]
fn seeds_of_an_arm_share_a_colour_and_differ_in_dash() {
    let svg = chart().to_svg();
    let doc = inline_safe(&svg);
    // The data lines: 2-px polylines with many points.
    let lines: Vec<(String, Option<String>)> = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("polyline") && n.attribute("points").unwrap().split(' ').count() > 100
        })
        .map(|n| {
            (
                n.attribute("stroke").unwrap().to_string(),
                n.attribute("stroke-dasharray").map(str::to_string),
            )
        })
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let (tensor, fused) = chart_colours();
    assert_ne!(tensor, fused);
    assert_eq!(lines[0].0, tensor);
    assert_eq!(lines[1].0, tensor);
    assert_eq!(lines[2].0, fused);
    assert_eq!(lines[3].0, fused);
    assert_eq!(lines[0].1, None);
    assert!(lines[1].1.is_some());
    assert_ne!(lines[0].1, lines[1].1);
    // The card line is dashed and follows the theme.
    assert!(
        doc.descendants()
            .any(|n| n.attribute("stroke") == Some("currentColor")
                && n.attribute("stroke-dasharray").is_some())
    );
    // The grid is faint.
    assert!(doc.descendants().any(|n| {
        n.has_tag_name("line")
            && n.attribute("stroke") == Some("currentColor")
            && n.attribute("opacity")
                .and_then(|o| o.parse::<f64>().ok())
                .is_some_and(|o| o < 0.5)
    }));
}

#[test]
fn newlines_in_labels_cannot_end_the_html_block() {
    let mut c = chart();
    c.title = "two\n\nparagraphs".into();
    c.series[0].label = "seed\n\n 0".into();
    c.series[0].arm = "\n\n".into();
    let svg = c.to_svg();
    inline_safe(&svg);
    assert!(svg.contains("two paragraphs"));
}

#[test]
fn degenerate_inputs_still_draw() {
    let empty = HighWaterChart::default().to_svg();
    let doc = inline_safe(&empty);
    let t = texts(&doc);
    assert!(t.iter().any(|x| x == "no data"));
    assert!(
        !t.iter().any(|x| x.contains('.')),
        "fractional byte ticks: {t:?}"
    );
    for c in [
        HighWaterChart {
            card_bytes: 0,
            series: vec![Series {
                points: vec![(0, 0)],
                died_at: Some(0),
                ..Series::default()
            }],
            ..HighWaterChart::default()
        },
        HighWaterChart {
            card_bytes: u64::MAX,
            series: vec![run("a", "b", 3, u64::MAX / 8, None)],
            ..HighWaterChart::default()
        },
    ] {
        inline_safe(&c.to_svg());
    }
    inline_safe(&StackedBars::default().to_svg());
    inline_safe(
        &StackedBars {
            bars: vec![Bar::default()],
            ..StackedBars::default()
        }
        .to_svg(),
    );
    inline_safe(&DeathHistogram::default().to_svg());
}

#[test]
fn many_arms_cycle_the_palette() {
    let series = (0..12)
        .map(|i| run(&format!("arm {i}"), "only", 10, MIB, None))
        .collect();
    let svg = HighWaterChart {
        card_bytes: 2 * GIB,
        series,
        ..HighWaterChart::default()
    }
    .to_svg();
    let doc = inline_safe(&svg);
    assert!(texts(&doc).iter().any(|t| t == "arm 11"));
}

#[test]
fn mdbook_lowercased_viewbox_is_still_valid_markup() {
    // mdbook 0.5 rewrites `viewBox` to `viewbox`; browsers fix the case for inline SVG
    // (checked in Chromium with examples/gallery.rs). The markup stays well-formed.
    let svg = chart().to_svg().replace("viewBox=", "viewbox=");
    let doc = Document::parse(&svg).unwrap();
    assert!(doc.root_element().attribute("viewbox").is_some());
}

#[test]
fn output_is_deterministic() {
    // The preprocessor caches by content hash: the same data must give the same bytes.
    assert_eq!(chart().to_svg(), chart().to_svg());
    assert_eq!(bars::ledger().to_svg(), bars::ledger().to_svg());
}

#[test]
fn many_points_are_thinned_but_keep_their_peak() {
    let mut s = run("a", "b", 50_000, 0, None);
    s.points[31_337].1 = 12 * GIB;
    let svg = HighWaterChart {
        card_bytes: 16 * GIB,
        series: vec![s],
        ..HighWaterChart::default()
    }
    .to_svg();
    inline_safe(&svg);
    assert!(svg.len() < 200_000, "{} bytes", svg.len());
    // The peak is drawn: some vertex of the line sits well above the 1 GiB floor.
    let doc = Document::parse(&svg).unwrap();
    let line = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("polyline")
                && n.attribute("stroke") == Some(rgb(arm_colours(["a"])[0]).as_str())
        })
        .max_by_key(|n| n.attribute("points").unwrap().len())
        .unwrap();
    let ys: Vec<i32> = line
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    let (lo, hi) = (ys.iter().min().unwrap(), ys.iter().max().unwrap());
    assert!(hi - lo > 150, "peak lost: y span {lo}..{hi}");
}

#[test]
fn an_arm_has_one_colour_in_every_chart() {
    // The SiTU tensor path under the names cells give it, beside the silu control, in
    // whichever order: always the same colour, and never the control's.
    let (tensor, silu) = (arm("situ-tensor"), arm("silu"));
    assert_ne!(tensor, silu);
    let high_water = HighWaterChart {
        series: vec![
            run("silu", "seed 1", 10, MIB, None),
            run("situ", "seed 1", 10, 2 * MIB, Some(9)),
        ],
        ..HighWaterChart::default()
    };
    let rates = RateChart {
        curves: vec![
            Curve {
                arm: "situ-tensor".into(),
                label: "tensor".into(),
                points: vec![(1.0, 5.0)],
            },
            Curve {
                arm: "silu".into(),
                label: "control".into(),
                points: vec![(1.0, 1.0)],
            },
        ],
        ..RateChart::default()
    };
    let bars = StackedBars {
        bars: vec![
            Bar {
                arm: "situ-tensor".into(),
                label: "SiTU tensor path".into(),
                segments: vec![("mid".into(), 64 * MIB), ("products".into(), 96 * MIB)],
            },
            Bar {
                arm: "silu".into(),
                label: "silu (control)".into(),
                segments: vec![("mid".into(), 32 * MIB)],
            },
        ],
        ..StackedBars::default()
    };
    let errors = ErrorChart {
        lines: vec![
            ErrorLine::between("situ-tensor", "none / cube", [(1, 10)], [(1, 11)]),
            ErrorLine::between("silu", "none / cube", [(1, 10)], [(1, 10)]),
        ],
        ..ErrorChart::default()
    };
    let deaths = DeathHistogram {
        arm: "situ".into(),
        steps: 10,
        died_at: vec![Some(3), None],
        ..DeathHistogram::default()
    };
    for (name, svg) in [
        ("high-water", high_water.to_svg()),
        ("rates", rates.to_svg()),
        ("bars", bars.to_svg()),
        ("errors", errors.to_svg()),
    ] {
        inline_safe(&svg);
        assert!(
            svg.contains(&format!("=\"{tensor}\"")),
            "{name}: no {tensor}"
        );
        assert!(svg.contains(&format!("=\"{silu}\"")), "{name}: no {silu}");
        // Only the two arms' colours paint anything.
        for i in 0..PALETTE.len() {
            let c = hex(i);
            assert!(
                c == tensor || c == silu || !svg.contains(&format!("=\"{c}\"")),
                "{name} uses {c}"
            );
        }
    }
    let svg = deaths.to_svg();
    inline_safe(&svg);
    assert!(svg.contains(&format!("fill=\"{tensor}\"")));
    // Listed the other way round, the arms keep their colours.
    let mut swapped = high_water.clone();
    swapped.series.reverse();
    let lines = |svg: &str| {
        let doc = Document::parse(svg).unwrap();
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
            .filter_map(|n| n.attribute("stroke").map(str::to_string))
            .filter(|c| c.starts_with('#'))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(lines(&high_water.to_svg()), lines(&swapped.to_svg()));
}

#[test]
fn every_death_is_labelled_even_when_deaths_crowd() {
    // Sixteen runs of two arms dying within a few steps of each other at the card's edge.
    let mut series = Vec::new();
    for (a, arm) in ["situ-tensor", "situ-balanced"].iter().enumerate() {
        for seed in 0..8u32 {
            let die = 200 + seed * 4 + a as u32 * 2;
            series.push(Series {
                arm: (*arm).into(),
                label: format!("seed {seed}"),
                points: (0..=die)
                    .map(|s| (s, GIB + u64::from(s) * 70 * MIB))
                    .collect(),
                died_at: Some(die),
            });
        }
    }
    let c = HighWaterChart {
        card_bytes: 16 * GIB,
        series,
        ..HighWaterChart::default()
    };
    let svg = c.to_svg();
    let doc = inline_safe(&svg);
    // Every label once, and no two overlapping (boxes estimated generously from the text).
    let mut boxes: Vec<(String, f64, f64, f64, f64)> = Vec::new();
    for s in &c.series {
        let label = s.death_label();
        let found: Vec<Node<'_, '_>> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && text(*n) == label)
            .collect();
        assert_eq!(found.len(), 1, "{label}");
        let n = found[0];
        assert_eq!(n.attribute("text-anchor"), Some("middle"));
        let x: f64 = n.attribute("x").unwrap().parse().unwrap();
        let y: f64 = n.attribute("y").unwrap().parse().unwrap();
        let half = label.chars().count() as f64 * 11.0 * 0.55 / 2.0;
        boxes.push((label, x - half, y - 6.0, x + half, y + 6.0));
    }
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[..i] {
            let apart = a.3 <= b.1 || b.3 <= a.1 || a.4 <= b.2 || b.4 <= a.2;
            assert!(apart, "{} overlaps {}", a.0, b.0);
        }
    }
}

#[test]
fn error_chart_is_inline_safe_and_labels_each_line() {
    let gpu: Vec<(u64, u64)> = (1..=50).map(|s| (s, 2 * GIB)).collect();
    let chart = ErrorChart {
        title: "Simulator <vs> GPU & co".into(),
        x_desc: "step".into(),
        y_desc: "simulated − measured, % of measured".into(),
        tolerance: Some(5.0),
        lines: vec![
            ErrorLine::between("silu", "none / cube", gpu.clone(), gpu.clone()),
            ErrorLine::between(
                "situ-tensor",
                "balanced / fusion",
                gpu.clone(),
                gpu.iter().map(|&(s, b)| (s, b - b / 10)),
            ),
        ],
    };
    let svg = chart.to_svg();
    let doc = inline_safe(&svg);
    let t = texts(&doc);
    for want in [
        "Simulator <vs> GPU & co",
        "silu · none / cube  0 %",
        "situ-tensor · balanced / fusion  −10.00 %",
        "tolerance ±5 %",
        "0 %",
        "step",
    ] {
        assert!(t.iter().any(|x| x == want), "missing {want:?} in {t:?}");
    }
    // Signed ticks with a true minus sign.
    assert!(
        t.iter().any(|x| x.starts_with('−') && x.ends_with(" %")),
        "{t:?}"
    );
    assert!(
        t.iter().any(|x| x.starts_with('+') && x.ends_with(" %")),
        "{t:?}"
    );
    inline_safe(&ErrorChart::default().to_svg());
    assert!(
        texts(&Document::parse(&ErrorChart::default().to_svg()).unwrap())
            .iter()
            .any(|x| x == "no data")
    );
}
