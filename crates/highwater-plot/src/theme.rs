//! The house style: palette, fonts, and the pass that turns plotters' SVG into an inline-safe,
//! theme-aware figure.
//!
//! plotters writes literal `#RRGGBB` colours and knows nothing about dash patterns. We draw with
//! *key colours* — reserved RGB values no real figure uses — and rewrite them afterwards: the
//! foreground key becomes `currentColor` (so text, axes and grid follow the mdbook theme), and
//! each registered key becomes a real paint plus extra stroke attributes (dash patterns).

use plotters::style::{FontFamily, FontStyle, RGBAColor, RGBColor, TextStyle};
use plotters::style::{IntoFont, ShapeStyle};

/// Foreground: replaced by `currentColor` in the final SVG.
pub(crate) const FG: RGBColor = RGBColor(0x01, 0x02, 0x03);

/// Series colours: mid-lightness (relative luminance ≈ 0.15–0.30) so each reads at ≥ 3:1 on
/// white and on mdbook's dark backgrounds (coal #1d1f21, navy #161923, ayu #0f1419), and drawn
/// from colour-blind-safe sets (IBM design, Okabe–Ito, Tol).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0x64, 0x8F, 0xFF), // blue
    RGBColor(0xFE, 0x61, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xDC, 0x26, 0x7F), // magenta
    RGBColor(0x78, 0x5E, 0xF0), // violet
    RGBColor(0xB0, 0x8A, 0x00), // dark gold
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x00, 0x99, 0x99), // teal
];

/// Which palette colour an arm owns, in every figure of the book: a reader who learnt that
/// orange is the SiTU tensor path in one figure must find it orange in the next.
///
/// Two experiments share the palette, and no figure shows both. Part I's SiTU wave (its recipes,
/// the activations the simulator and the reruns name, the arms of the incident's logs) owns six
/// colours; Part II's graph-capture race owns its configurations' (each GPU arm shares its
/// configuration's colour), and gives the same role the same colour as Part I where one exists:
/// the culprit orange, the control blue, the fix green. Reddish purple belongs to no arm: it
/// goes first to names no arm owns ([`arm_colours`]).
struct KnownArm {
    /// The name figures are keyed by.
    key: &'static str,
    /// The names cells write for it, normalised ([`normalise`]).
    aliases: &'static [&'static str],
    /// Index into [`PALETTE`].
    colour: usize,
}

const KNOWN_ARMS: [KnownArm; 13] = [
    // Part I: the SiTU wave.
    KnownArm {
        key: "silu",
        aliases: &["silu", "silu-control", "small"],
        colour: 0,
    },
    KnownArm {
        key: "situ-tensor",
        aliases: &["situ-tensor", "situ", "situ-tensor-path", "tensor-path"],
        colour: 1,
    },
    KnownArm {
        key: "situ-fused",
        aliases: &[
            "situ-fused",
            "situ-fused-kernel",
            "fused-situ-kernel",
            "fused-situ",
            "fused",
        ],
        colour: 2,
    },
    KnownArm {
        key: "situ-balanced",
        aliases: &["situ-balanced", "situ-tensor-balanced"],
        colour: 3,
    },
    KnownArm {
        key: "moe",
        aliases: &["moe"],
        colour: 4,
    },
    KnownArm {
        key: "attnres",
        aliases: &["attnres", "attn-res"],
        colour: 5,
    },
    // Part II: the graph-capture race, configurations and the GPU arms that run them.
    KnownArm {
        key: "incident",
        aliases: &["incident", "overlap"],
        colour: 1,
    },
    KnownArm {
        key: "overlap-off",
        aliases: &["overlap-off", "serialized"],
        colour: 0,
    },
    KnownArm {
        key: "record-stream",
        aliases: &["record-stream", "recorded"],
        colour: 2,
    },
    KnownArm {
        key: "clone",
        aliases: &["clone"],
        colour: 3,
    },
    KnownArm {
        key: "fp8",
        aliases: &["fp8"],
        colour: 4,
    },
    KnownArm {
        key: "logits-cached",
        aliases: &["logits-cached"],
        colour: 5,
    },
    KnownArm {
        key: "eager",
        aliases: &["eager"],
        colour: 7,
    },
];

/// `name` as aliases are written: lower case, parenthesised asides dropped, every run of other
/// characters than letters and digits one `-`. `"SiTU tensor path"` → `situ-tensor-path`,
/// `"silu (control)"` → `silu`.
fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0u32;
    for c in name.chars().flat_map(char::to_lowercase) {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            c if c.is_alphanumeric() => out.push(c),
            _ if !out.is_empty() && !out.ends_with('-') => out.push('-'),
            _ => {}
        }
    }
    out.trim_end_matches('-').to_string()
}

fn known(name: &str) -> Option<&'static KnownArm> {
    let n = normalise(name);
    KNOWN_ARMS.iter().find(|a| a.aliases.contains(&n.as_str()))
}

/// The arm `name` stands for (`"SiTU tensor path"`, `"situ"` → `"situ-tensor"`), or `None` for a
/// name no known arm goes by.
pub fn arm_key(name: &str) -> Option<&'static str> {
    known(name).map(|a| a.key)
}

/// The colour `name`'s arm has in every figure, or `None` for a name no known arm goes by
/// (a chart gives those a colour of its own: [`arm_colours`]).
///
/// ```
/// use highwater_plot::{PALETTE, arm_colour};
/// assert_eq!(arm_colour("situ-tensor"), arm_colour("SiTU tensor path"));
/// assert_eq!(arm_colour("silu (control)"), Some(PALETTE[0]));
/// assert_eq!(arm_colour("variant"), None);
/// ```
pub fn arm_colour(name: &str) -> Option<RGBColor> {
    known(name).map(|a| PALETTE[a.colour])
}

/// The colour of each of one chart's arms, in the order of `names` (which may repeat).
///
/// Known arms get their own colour ([`arm_colour`]). Names no known arm goes by are sorted, so
/// that their colours do not depend on the order they come in, and each takes the first colour
/// that no arm of this chart has: first the colours no known arm owns, then the others in
/// palette order. Only a chart with more arms than the palette has colours repeats one.
pub fn arm_colours<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<RGBColor> {
    let names: Vec<&str> = names.into_iter().collect();
    let mut taken: Vec<usize> = names
        .iter()
        .filter_map(|n| known(n).map(|a| a.colour))
        .collect();
    let mut unknown: Vec<(String, &str)> = names
        .iter()
        .filter(|n| known(n).is_none())
        .map(|n| (clean_label(n), *n))
        .collect();
    unknown.sort();
    unknown.dedup_by(|a, b| a.0 == b.0);
    let owned = |i: &usize| KNOWN_ARMS.iter().any(|a| a.colour == *i);
    let order: Vec<usize> = (0..PALETTE.len())
        .filter(|i| !owned(i))
        .chain((0..PALETTE.len()).filter(owned))
        .collect();
    let mut given: Vec<(String, usize)> = Vec::new();
    for (k, (name, _)) in unknown.iter().enumerate() {
        let i = order
            .iter()
            .copied()
            .find(|i| !taken.contains(i))
            .unwrap_or(order[k % order.len()]);
        taken.push(i);
        given.push((name.clone(), i));
    }
    names
        .iter()
        .map(|n| match known(n) {
            Some(a) => PALETTE[a.colour],
            None => {
                let n = clean_label(n);
                let i = given.iter().find(|(g, _)| *g == n).map_or(0, |g| g.1);
                PALETTE[i]
            }
        })
        .collect()
}

/// Stroke dash patterns for the series of one colour family (one per seed), cycled.
pub(crate) const DASHES: [&str; 8] = [
    "",
    "7 4",
    "2 3",
    "10 3 2 3",
    "4 7",
    "14 4",
    "1 6",
    "6 2 2 2 2 2",
];

/// Dash pattern of the card-capacity line.
pub(crate) const CARD_DASH: &str = "9 5";

/// Text sizes, in CSS pixels.
pub(crate) const TITLE_PX: f64 = 16.0;
pub(crate) const LABEL_PX: f64 = 12.5;
pub(crate) const SMALL_PX: f64 = 11.0;

/// The figure width (the SVG scales down responsively; this is its natural size).
pub(crate) const WIDTH: u32 = 820;

/// plotters writes `font-size = size / 1.24`; compensate so `px` is what the browser sees.
pub(crate) fn font(px: f64) -> TextStyle<'static> {
    (FontFamily::SansSerif, px * 1.24).into_font().color(&FG)
}

pub(crate) fn bold(px: f64) -> TextStyle<'static> {
    (FontFamily::SansSerif, px * 1.24, FontStyle::Bold)
        .into_font()
        .color(&FG)
}

/// A conservative estimate of the rendered width of `text` in a sans-serif font at `px`.
pub(crate) fn text_width(text: &str, px: f64) -> f64 {
    text.chars()
        .map(|c| match c {
            'i' | 'l' | 'j' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | ' ' | 'f' | 't' | 'r' => {
                0.34
            }
            'm' | 'w' | 'M' | 'W' | '@' => 0.9,
            c if c.is_ascii_uppercase() => 0.68,
            c if c.is_ascii_digit() => 0.56,
            _ => 0.56,
        })
        .sum::<f64>()
        * px
}

pub(crate) fn stroke(color: impl Into<RGBAColor>, width: u32) -> ShapeStyle {
    ShapeStyle {
        color: color.into(),
        filled: false,
        stroke_width: width,
    }
}

pub(crate) fn filled(color: impl Into<RGBAColor>) -> ShapeStyle {
    ShapeStyle {
        color: color.into(),
        filled: true,
        stroke_width: 0,
    }
}

/// Labels come from callers: keep them on one line (a newline inside an SVG inlined in markdown
/// could end the raw HTML block) and free of control characters.
pub(crate) fn clean_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
    }
    out.trim().to_string()
}

/// The paint a key colour stands for.
#[derive(Clone, Debug)]
pub(crate) struct Paint {
    /// `#RRGGBB` or `currentColor`.
    pub(crate) color: String,
    /// Value of `stroke-dasharray`, empty for a solid stroke.
    pub(crate) dash: String,
    /// Text drawn over a halo of the page's background, so that it reads across lines.
    pub(crate) halo: bool,
}

/// The halo behind labels that sit on data: the page's background (mdbook's `--bg`, white
/// where a page has none), painted under the glyphs.
pub(crate) const HALO: &str =
    " stroke=\"var(--bg, #FFFFFF)\" stroke-width=\"3\" paint-order=\"stroke\"";

/// Hands out key colours and remembers what each stands for.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    paints: Vec<Paint>,
}

impl Keys {
    /// A key colour that will be drawn as `color` with the given dash pattern.
    pub(crate) fn key(&mut self, color: Option<RGBColor>, dash: &str) -> RGBColor {
        self.paint(color, dash, false)
    }

    /// A key colour for text drawn as `color` over a halo of the page's background.
    pub(crate) fn halo(&mut self, color: Option<RGBColor>) -> RGBColor {
        self.paint(color, "", true)
    }

    fn paint(&mut self, color: Option<RGBColor>, dash: &str, halo: bool) -> RGBColor {
        let color = match color {
            Some(c) => hex(c),
            None => "currentColor".to_string(),
        };
        if let Some(i) = self
            .paints
            .iter()
            .position(|p| p.color == color && p.dash == dash && p.halo == halo)
        {
            return key_color(i);
        }
        assert!(self.paints.len() < 250, "too many distinct keyed styles");
        self.paints.push(Paint {
            color,
            dash: dash.to_string(),
            halo,
        });
        key_color(self.paints.len() - 1)
    }

    /// Rewrite plotters' output into the final inline SVG.
    pub(crate) fn finish(&self, raw: &str, size: (u32, u32), title: &str) -> String {
        let mut body = String::with_capacity(raw.len() + 512);
        // Drop plotters' own root tag (fixed pixel width/height); write ours.
        let rest = match raw.find('>') {
            Some(i) if raw.starts_with("<svg") => &raw[i + 1..],
            _ => raw,
        };
        let (w, h) = size;
        body.push_str(&format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"highwater-figure\" \
             viewBox=\"0 0 {w} {h}\" width=\"100%\" \
             style=\"max-width:{w}px;height:auto;display:block;margin:0 auto;color:inherit\" \
             role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" \
             stroke-linejoin=\"round\" stroke-linecap=\"butt\">",
            escape_attr(title)
        ));
        body.push_str(rest);
        let fg = hex(FG);
        let mut out = String::with_capacity(body.len());
        let mut rest = body.as_str();
        // Single pass over `="#RRGGBB"` attribute values (labels are escaped, so a quote
        // inside text content cannot start one).
        while let Some(i) = rest.find("=\"#") {
            let (head, tail) = rest.split_at(i);
            out.push_str(head);
            let value = tail.get(3..9).unwrap_or("");
            let is_stroke = head.ends_with("stroke");
            let closes = tail.as_bytes().get(9) == Some(&b'"');
            if closes && value.eq_ignore_ascii_case(&fg[1..]) {
                out.push_str("=\"currentColor\"");
                rest = &tail[10..];
            } else if let Some(paint) = closes.then(|| self.lookup(value)).flatten() {
                out.push_str(&format!("=\"{}\"", paint.color));
                if is_stroke && !paint.dash.is_empty() {
                    out.push_str(&format!(" stroke-dasharray=\"{}\"", paint.dash));
                }
                if !is_stroke && paint.halo {
                    out.push_str(HALO);
                }
                rest = &tail[10..];
            } else {
                out.push_str("=\"#");
                rest = &tail[3..];
            }
        }
        out.push_str(rest);
        // `opacity="1"` is plotters' default on every element: noise.
        let out = out.replace(" opacity=\"1\"", "");
        // No blank (or whitespace-only) line may survive: it would end the raw HTML block.
        let mut lines = String::with_capacity(out.len());
        for line in out.lines() {
            if !line.trim().is_empty() {
                lines.push_str(line.trim_end());
                lines.push('\n');
            }
        }
        lines
    }

    fn lookup(&self, value: &str) -> Option<&Paint> {
        let v = u32::from_str_radix(value, 16).ok()?;
        let (r, g, b) = ((v >> 16) as u8, (v >> 8) as u8, v as u8);
        if (r, g) != (KEY_R, KEY_G) {
            return None;
        }
        self.paints.get(usize::from(b))
    }
}

const KEY_R: u8 = 0x01;
const KEY_G: u8 = 0x03;

fn key_color(i: usize) -> RGBColor {
    RGBColor(KEY_R, KEY_G, u8::try_from(i).expect("at most 250 keys"))
}

pub(crate) fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

pub(crate) fn escape_attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_reused_and_rewritten() {
        let mut keys = Keys::default();
        let a = keys.key(Some(PALETTE[0]), "7 4");
        let b = keys.key(Some(PALETTE[0]), "7 4");
        let c = keys.key(None, CARD_DASH);
        let h = keys.halo(Some(PALETTE[0]));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(h, keys.key(Some(PALETTE[0]), ""));
        let raw = format!(
            "<svg width=\"10\" height=\"10\">\n<polyline stroke=\"{}\" opacity=\"1\"/>\n\n<text fill=\"{}\">#010203 a</text>\n<line stroke=\"{}\"/>\n<text fill=\"{}\">b</text>\n</svg>\n",
            hex(a),
            hex(FG),
            hex(c),
            hex(h)
        );
        let out = keys.finish(&raw, (10, 10), "t");
        assert!(out.contains("<polyline stroke=\"#648FFF\" stroke-dasharray=\"7 4\"/>"));
        assert!(
            out.contains("<text fill=\"currentColor\">#010203 a</text>"),
            "{out}"
        );
        assert!(out.contains("<line stroke=\"currentColor\" stroke-dasharray=\"9 5\"/>"));
        assert!(
            out.contains(&format!("<text fill=\"#648FFF\"{HALO}>b</text>")),
            "{out}"
        );
        assert!(!out.contains("\n\n"));
        assert!(!out.contains("opacity=\"1\""));
        assert!(out.starts_with("<svg xmlns"));
    }

    #[test]
    fn every_name_a_cell_writes_finds_its_arm() {
        for (names, key) in [
            (
                &["silu", "silu (control)", "silu control", "small", "SiLU"][..],
                "silu",
            ),
            (
                &["situ-tensor", "situ", "SiTU tensor path", "situ_tensor"][..],
                "situ-tensor",
            ),
            (
                &["situ-fused", "SiTU fused", "fused SiTU kernel", "fused"][..],
                "situ-fused",
            ),
            (&["situ-balanced"][..], "situ-balanced"),
            (&["moe", "MoE"][..], "moe"),
            (&["attnres"][..], "attnres"),
            (&["incident", "overlap"][..], "incident"),
            (&["overlap-off", "serialized"][..], "overlap-off"),
            (&["record-stream", "recorded"][..], "record-stream"),
        ] {
            for n in names {
                assert_eq!(arm_key(n), Some(key), "{n}");
            }
        }
        for n in [
            "variant",
            "batch 4 096",
            "",
            "situ-tensor / balanced / cube",
        ] {
            assert_eq!(arm_key(n), None, "{n}");
        }
    }

    #[test]
    fn arms_of_one_experiment_never_share_a_colour() {
        let part_1 = [
            "silu",
            "situ-tensor",
            "situ-fused",
            "situ-balanced",
            "moe",
            "attnres",
        ];
        let part_2 = [
            "incident",
            "overlap-off",
            "record-stream",
            "clone",
            "fp8",
            "logits-cached",
            "eager",
        ];
        for family in [&part_1[..], &part_2[..]] {
            let colours: Vec<RGBColor> = family.iter().map(|a| arm_colour(a).unwrap()).collect();
            for (i, c) in colours.iter().enumerate() {
                assert!(!colours[..i].contains(c), "{} repeats a colour", family[i]);
            }
        }
        // The same role, the same colour in both: the culprit, the control, the fix.
        assert_eq!(arm_colour("situ-tensor"), arm_colour("incident"));
        assert_eq!(arm_colour("silu"), arm_colour("serialized"));
        assert_eq!(arm_colour("situ-fused"), arm_colour("recorded"));
        assert!(part_1.len() + part_2.len() == KNOWN_ARMS.len());
    }

    #[test]
    fn unknown_arms_avoid_the_chart_s_known_ones_and_ignore_order() {
        let c = arm_colours(["variant", "silu", "variant"]);
        assert_eq!(c[0], c[2]);
        assert_eq!(c[1], PALETTE[0]);
        // First a colour no known arm owns.
        assert!(KNOWN_ARMS.iter().all(|a| PALETTE[a.colour] != c[0]));
        // Then known arms' colours, but never one of an arm in the chart.
        let names = ["b", "a", "situ-tensor", "c", "silu", "d"];
        let c = arm_colours(names);
        for (i, n) in names.iter().enumerate() {
            if arm_key(n).is_none() {
                assert_ne!(c[i], PALETTE[0]);
                assert_ne!(c[i], PALETTE[1]);
                assert!(
                    names.iter().zip(&c).all(|(m, d)| m == n || d != &c[i]),
                    "{n}"
                );
            }
        }
        // Unknown names are coloured by name, not by order of appearance.
        let reversed: Vec<&str> = names.iter().rev().copied().collect();
        let r = arm_colours(reversed.iter().copied());
        for (i, n) in names.iter().enumerate() {
            let j = reversed.iter().position(|m| m == n).unwrap();
            assert_eq!(c[i], r[j], "{n}");
        }
        // More arms than colours: each still gets one.
        let many: Vec<String> = (0..12).map(|i| format!("arm {i}")).collect();
        assert_eq!(arm_colours(many.iter().map(String::as_str)).len(), 12);
    }

    #[test]
    fn clean_label_flattens_newlines() {
        assert_eq!(clean_label(" a\n\n b\tc "), "a b c");
    }

    #[test]
    fn palette_reads_on_light_and_dark() {
        fn lum(c: RGBColor) -> f64 {
            let lin = |v: u8| {
                let v = f64::from(v) / 255.0;
                if v <= 0.03928 {
                    v / 12.92
                } else {
                    ((v + 0.055) / 1.055).powf(2.4)
                }
            };
            0.2126 * lin(c.0) + 0.7152 * lin(c.1) + 0.0722 * lin(c.2)
        }
        let contrast = |a: f64, b: f64| (a.max(b) + 0.05) / (a.min(b) + 0.05);
        for c in PALETTE {
            let l = lum(c);
            for bg in [
                RGBColor(255, 255, 255),
                RGBColor(0x1d, 0x1f, 0x21),
                RGBColor(0x16, 0x19, 0x23),
                RGBColor(0x0f, 0x14, 0x19),
            ] {
                let k = contrast(l, lum(bg));
                assert!(k >= 2.9, "{} on {}: contrast {k:.2}", hex(c), hex(bg));
            }
        }
    }
}
