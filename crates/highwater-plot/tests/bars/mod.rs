//! Stacked bars and the death histogram: every segment labelled, arms in their colours.

use super::*;

pub(crate) fn ledger() -> StackedBars {
    let seg = |n: &str, b: u64| (n.to_string(), b);
    StackedBars {
        title: "Ledger".into(),
        bars: vec![
            Bar {
                arm: String::new(),
                label: "tensor <path> & Disabled".into(),
                segments: vec![
                    seg("matmul inputs", 64 * MIB),
                    seg("x·σ(x) <products>", 96 * MIB),
                    seg("tiny", 1024),
                ],
            },
            Bar {
                label: "fused".into(),
                segments: vec![seg("matmul inputs", 64 * MIB), seg("saved", 32 * MIB)],
                ..Bar::default()
            },
        ],
    }
}

#[test]
fn stacked_bars_label_every_bar_segment_and_total() {
    let svg = ledger().to_svg();
    let doc = inline_safe(&svg);
    let t = texts(&doc);
    for want in [
        "Ledger",
        "tensor <path> & Disabled",
        "fused",
        "matmul inputs",
        "x·σ(x) <products>",
        "tiny",
        "saved",
        // totals, in binary units
        "160 MiB",
        "96 MiB",
        // segment values that fit inside their segment
        "64 MiB",
        "32 MiB",
    ] {
        assert!(t.iter().any(|x| x == want), "missing {want:?} in {t:?}");
    }
    assert!(
        !t.iter().any(|x| x == "1 KiB"),
        "a 1 KiB sliver has no room for a label"
    );
    // One legend entry per distinct segment name, however many bars use it.
    assert_eq!(t.iter().filter(|x| *x == "matmul inputs").count(), 1);
    // Bars that are not arms: a colour per kind of segment, the same in both bars and the
    // legend swatch, and none an arm would have in this chart.
    let fills = |c: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(c))
            .count()
    };
    let kinds = arm_colours(["matmul inputs", "x·σ(x) <products>", "tiny", "saved"]);
    assert_eq!(fills(&rgb(kinds[0])), 3, "matmul inputs: two bars + legend");
    assert_eq!(fills(&rgb(kinds[1])), 2, "products: one bar + legend");
    // Segment values are black ink on the fill, whatever the theme.
    assert!(
        doc.descendants()
            .any(|n| n.has_tag_name("text") && n.attribute("fill") == Some("#000000"))
    );
}

#[test]
fn bars_that_are_arms_take_the_arm_s_colour_and_shade_their_segments() {
    let mut b = ledger();
    b.bars[0].arm = "situ-tensor".into();
    b.bars[1].arm = "situ-fused".into();
    let svg = b.to_svg();
    let doc = inline_safe(&svg);
    let rects = |c: &str| -> Vec<Option<String>> {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(c))
            .map(|n| n.attribute("opacity").map(str::to_string))
            .collect()
    };
    // The tensor path: its three segments in its colour, a shade each; the fused kernel's
    // two in its own, the same shades for the same kinds.
    assert_eq!(
        rects(&arm("situ-tensor")),
        vec![None, Some("0.75".into()), Some("0.5".into())]
    );
    assert_eq!(rects(&arm("situ-fused")), vec![None, Some("0.25".into())]);
    // The legend shows the shades in the page's text colour, not in an arm's.
    let swatches: Vec<Option<&str>> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some("currentColor"))
        .map(|n| n.attribute("opacity"))
        .collect();
    assert_eq!(
        swatches,
        vec![None, Some("0.75"), Some("0.5"), Some("0.25")]
    );
    // A value on a full shade is black ink; on a lighter one, the page's text colour.
    let ink = |value: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("text") && text(*n) == value)
            .and_then(|n| n.attribute("fill"))
            .map(str::to_string)
    };
    assert_eq!(ink("64 MiB").as_deref(), Some("#000000"));
    assert_eq!(ink("32 MiB").as_deref(), Some("currentColor"));
}

#[test]
fn stacked_bars_shorten_very_long_labels() {
    let mut b = ledger();
    b.bars[0].label = "a very long path name ".repeat(20);
    let svg = b.to_svg();
    let doc = inline_safe(&svg);
    assert!(texts(&doc).iter().any(|t| t.ends_with('…')));
}

#[test]
fn death_histogram_counts_and_sets_survivors_apart() {
    let mut died_at: Vec<Option<u32>> = vec![None; 7];
    died_at.extend([Some(201), Some(205), Some(207), Some(310)]);
    let h = DeathHistogram {
        title: "When they die".into(),
        arm: "situ".into(),
        steps: 400,
        died_at,
        bin_width: None,
    };
    let (bins, survived) = h.bins();
    assert_eq!(survived, 7);
    assert_eq!(bins.iter().map(|b| b.1).sum::<u32>(), 4);
    let svg = h.to_svg();
    let doc = inline_safe(&svg);
    let t = texts(&doc);
    for want in [
        "When they die",
        "survived",
        "7",
        "3",
        "died: 4 of 11 runs, per 10-step bin",
        "survived all 400 steps: 7 of 11",
        "step of death",
        "runs",
    ] {
        assert!(t.iter().any(|x| x == want), "missing {want:?} in {t:?}");
    }
    // Died and survived in the arm's colour, the survivors in a lighter shade: two bins +
    // swatch, one bar + swatch.
    let fills = |opacity: Option<&str>| {
        doc.descendants()
            .filter(|n| {
                n.has_tag_name("rect")
                    && n.attribute("fill") == Some(arm("situ-tensor").as_str())
                    && n.attribute("opacity") == opacity
            })
            .count()
    };
    assert_eq!(fills(None), 3);
    assert_eq!(fills(Some("0.35")), 2);
}
