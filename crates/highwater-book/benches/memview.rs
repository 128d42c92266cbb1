//! The memory view's size and speed, printed as figures (`cargo bench -p highwater-book
//! --bench memview`): for the book's two views and for a 2 000-step trace, the HTML's size,
//! the time to trace and draw it, and the time headless Chromium takes to open it (from the
//! start of navigation to the end of the view's script, read in the page, median of 3; the
//! browser's own start-up is not counted, and is printed apart). Goals (issue 17): under
//! 2 MB and under 1 s for the 2 000-step trace. The last line is a trace near the event limit
//! (`limits::MAX_TRACE_EVENTS`): the view's cost stays bounded by its band budget.

use std::path::Path;
use std::time::Instant;

use highwater::Recipe;
use highwater_book::memview::{first_call, first_refusal, memory_view};
use highwater_plot::MemoryView;
use snapshots::browser::{Probe, chromium, probe};

/// A recipe of the small preset cut to one expert call and ten rest-of-model tensors per step,
/// so that 2 000 traced steps stay within the trace's event limit.
fn lean() -> Recipe {
    let text = include_str!("../../../repro/recipes/small.toml")
        .replace("n_experts = 3", "n_experts = 1")
        .replace("max_iter = 4", "max_iter = 1")
        .replace("live_bytes = 11345592320", "live_bytes = 125829120");
    Recipe::parse("small.toml, cut to one call", &text).expect("the cut recipe parses")
}

/// Milliseconds from navigation start to the end of the view's script, and the whole
/// browser run's, for `html` opened as a page.
fn open_in_chromium(chromium: &str, name: &str, html: &str) -> (f64, f64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let page = dir.join(format!("{name}.html"));
    std::fs::write(
        &page,
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"></head><body>{html}</body></html>"
        ),
    )
    .unwrap();
    let mut inner = vec![];
    let mut outer = vec![];
    for _ in 0..3 {
        let start = Instant::now();
        let answer = probe(
            chromium,
            &page,
            &Probe {
                head: "",
                script: "<script>document.body.setAttribute('data-ms', \
                         String(performance.now()));</script>",
                attr: "ms",
                tag: name,
            },
            dir,
        );
        outer.push(start.elapsed().as_secs_f64() * 1e3);
        inner.push(answer.parse::<f64>().expect("a time in ms"));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(inner), median(outer))
}

fn report(
    chromium: Option<&str>,
    name: &str,
    events: Option<usize>,
    built_ms: f64,
    view: &MemoryView,
) {
    let html = view.to_html();
    let opened = chromium.map(|c| open_in_chromium(c, name, &html));
    println!(
        "{name:<30} {:>9} events {:>6} bands {:>9} bytes of HTML  traced and drawn in \
         {built_ms:>6.0} ms  {}",
        events.map_or("—".into(), |n| n.to_string()),
        view.bands.len(),
        html.len(),
        opened.map_or("(no chromium)".into(), |(page, run)| format!(
            "opens in {page:>4.0} ms (browser run {run:.0} ms)"
        ))
    );
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let book = highwater_book::Book::at(&root);
    let chromium = chromium();
    for (name, recipe) in [
        ("one call, tensor path", "situ"),
        ("one call, fused", "situ-fused"),
    ] {
        let r = book.recipe(recipe).expect("the recipe loads");
        let start = Instant::now();
        let (view, _) = first_call(&r, name).expect("traced");
        report(
            chromium,
            name,
            None,
            start.elapsed().as_secs_f64() * 1e3,
            &view,
        );
    }
    let r = book.recipe("situ").expect("the recipe loads");
    let start = Instant::now();
    let view = first_refusal(&r, 1, "first refusal")
        .expect("traced")
        .expect("seed 1 fails");
    report(
        chromium,
        "SiTU seed 1, first refusal",
        None,
        start.elapsed().as_secs_f64() * 1e3,
        &view,
    );

    let r = lean();
    // 2 000 steps (the goal), then about as many events as a trace may hold.
    for (steps, name) in [
        (2_000, "2 000 steps, one call a step"),
        (10_000, "10 000 steps, the same"),
    ] {
        let start = Instant::now();
        let (run, trace) = highwater::simulate_traced(&r, 1, 1..=steps).expect("within the limits");
        let view = memory_view(&trace, &run, name, |_| true);
        let built = start.elapsed().as_secs_f64() * 1e3;
        report(chromium, name, Some(trace.events.len()), built, &view);
    }
}
