//! Writes an HTML page with every figure inlined twice — on a light and on a dark background —
//! the way mdbook 0.5 would inline it (attribute names lowercased), for a look in a browser:
//!
//! ```sh
//! cargo run -p highwater-plot --example gallery -- /tmp/gallery.html
//! chromium --headless --no-sandbox --disable-gpu --user-data-dir=$(mktemp -d) \
//!     --screenshot=/tmp/gallery.png --window-size=1700,2600 file:///tmp/gallery.html
//! ```
//!
//! Each figure is also written alone as `<path>.<name>.svg`; `crowded` (16 seeds dying within
//! 50 steps) and `empty` are there to show the edge cases.

use highwater_plot::{
    Bar, DeathHistogram, ErrorChart, ErrorLine, HighWaterChart, Series, StackedBars,
};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A tiny deterministic generator, so the gallery is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn high_water() -> HighWaterChart {
    let card = 16 * GIB;
    let mut series = Vec::new();
    let arms: [(&str, f64, f64); 3] = [
        ("situ-tensor", 9.0, 0.030),
        ("situ-fused", 8.0, 0.002),
        ("silu", 6.5, 0.001),
    ];
    for (a, (arm, base, growth)) in arms.iter().enumerate() {
        for seed in 0..3u64 {
            let mut rng = Rng(0x9E37_79B9 + seed * 7919 + a as u64 * 104_729);
            let mut hw = 0u64;
            let mut points = Vec::new();
            let mut died_at = None;
            for step in 0..400u32 {
                let want =
                    (base + growth * f64::from(step) * (0.6 + 0.8 * rng.next()) + 1.2 * rng.next())
                        * GIB as f64;
                hw = hw.max(want as u64);
                if hw > card {
                    died_at = Some(step);
                    points.push((step, card));
                    break;
                }
                points.push((step, hw));
            }
            series.push(Series {
                arm: (*arm).into(),
                label: format!("seed {seed}"),
                points,
                died_at,
            });
        }
    }
    HighWaterChart {
        title: "Pool high-water per step, 16 GiB card".into(),
        card_bytes: card,
        series,
    }
}

fn ledger() -> StackedBars {
    let seg = |n: &str, b: u64| (n.to_string(), b);
    StackedBars {
        title: "What one SiTU call keeps alive for backward".into(),
        bars: vec![
            Bar {
                arm: "situ-tensor".into(),
                label: "tensor path, checkpointing Disabled".into(),
                segments: vec![
                    seg("matmul inputs", 64 * MIB),
                    seg("tanh input", 32 * MIB),
                    seg("sigmoid input", 32 * MIB),
                    seg("products <x·σ(x)>", 96 * MIB),
                    seg("saved output", 32 * MIB),
                ],
            },
            Bar {
                arm: "situ-balanced".into(),
                label: "tensor path, Balanced".into(),
                segments: vec![
                    seg("matmul inputs", 64 * MIB),
                    seg("tanh input", 32 * MIB),
                    seg("saved output", 32 * MIB),
                ],
            },
            Bar {
                arm: "situ-fused".into(),
                label: "fused kernel".into(),
                segments: vec![
                    seg("matmul inputs", 64 * MIB),
                    seg("saved output", 32 * MIB),
                ],
            },
            Bar {
                arm: "silu".into(),
                label: "silu control".into(),
                segments: vec![
                    seg("matmul inputs", 64 * MIB),
                    seg("sigmoid input", 32 * MIB),
                ],
            },
        ],
    }
}

fn deaths() -> DeathHistogram {
    let mut rng = Rng(42);
    let died_at = (0..60)
        .map(|_| {
            let r = rng.next();
            (r < 0.8).then(|| (200.0 + 200.0 * rng.next() * rng.next().sqrt()) as u32)
        })
        .collect();
    DeathHistogram {
        title: "Step of death over 60 seeds (tensor path, Disabled)".into(),
        arm: "situ-tensor".into(),
        steps: 400,
        died_at,
        bin_width: None,
    }
}

/// Many seeds dying close together: death labels must stay legible.
fn crowded() -> HighWaterChart {
    let mut series = Vec::new();
    for (a, arm) in ["situ-tensor", "situ-balanced"].iter().enumerate() {
        for seed in 0..8u32 {
            let die = 200 + seed * 7 + a as u32 * 3;
            let points = (0..=die)
                .map(|s| {
                    let f = f64::from(s) / f64::from(die);
                    (s, ((4.0 + 12.0 * f * f) * GIB as f64) as u64)
                })
                .collect();
            series.push(Series {
                arm: (*arm).into(),
                label: format!("seed {seed}"),
                points,
                died_at: Some(die),
            });
        }
    }
    HighWaterChart {
        title: String::new(),
        card_bytes: 16 * GIB,
        series,
    }
}

/// A simulator against a GPU, per step: most runs exact after the first step, some off.
fn errors() -> ErrorChart {
    let mut lines = Vec::new();
    for (a, arm) in ["silu", "situ-tensor", "situ-fused"].iter().enumerate() {
        for (c, config) in [
            "none / cube",
            "balanced / cube",
            "none / fusion",
            "balanced / fusion",
        ]
        .iter()
        .enumerate()
        {
            let gpu: Vec<(u64, u64)> = (1..=50)
                .map(|s| (s, 2 * GIB + (s > 1) as u64 * GIB / 8))
                .collect();
            let off = if c >= 2 { (a + c) as u64 * GIB / 40 } else { 0 };
            let sim: Vec<(u64, u64)> = gpu
                .iter()
                .map(|&(s, b)| (s, b - off - (s == 1) as u64 * MIB * 64))
                .collect();
            lines.push(ErrorLine::between(*arm, *config, gpu, sim));
        }
    }
    ErrorChart {
        title: "Simulated − measured bytes reserved, per step".into(),
        x_desc: "step".into(),
        y_desc: "error, % of the GPU's".into(),
        tolerance: Some(5.0),
        lines,
    }
}

/// What mdbook 0.5 does to raw HTML attribute names.
fn as_mdbook_inlines(svg: &str) -> String {
    svg.replace("viewBox=", "viewbox=")
}

fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/highwater-gallery.html".into());
    let figures = [
        ("high-water", high_water().to_svg()),
        ("ledger", ledger().to_svg()),
        ("deaths", deaths().to_svg()),
        ("crowded", crowded().to_svg()),
        ("errors", errors().to_svg()),
        ("empty", HighWaterChart::default().to_svg()),
    ];
    let mut html = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>highwater-plot gallery</title>\n\
         <style>body{margin:0;font-family:sans-serif}.row{display:flex}\
         .pane{flex:1;padding:12px;min-width:0}\
         .light{background:#ffffff;color:#000000;--bg:#ffffff}.dark{background:#1d1f21;color:#c5c8c6;--bg:#1d1f21}</style>\n\
         </head><body>\n",
    );
    for (name, svg) in &figures {
        let svg = as_mdbook_inlines(svg);
        html.push_str(&format!(
            "<div class=\"row\" id=\"{name}\">\n<div class=\"pane light\">\n{svg}</div>\n\
             <div class=\"pane dark\">\n{svg}</div>\n</div>\n"
        ));
        std::fs::write(format!("{path}.{name}.svg"), svg)?;
    }
    html.push_str("</body></html>\n");
    std::fs::write(&path, html)?;
    eprintln!("wrote {path}");
    Ok(())
}
