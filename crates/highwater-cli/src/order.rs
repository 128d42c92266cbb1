//! `highwater order`: dry replays of a record traced on the GPU, held to its trace.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use dryrun::traced::{PageCounts, Reservation, compare, exact_size_pages};
use highwater::conform::NetworkRecord;

use crate::args::OrderArgs;
use crate::conform::read_record;
use crate::quiet::{quiet_device_threads, quietly};
use basics::text_table::{Align, Rule, render};

pub(crate) fn order(a: OrderArgs) -> Result<()> {
    let record: NetworkRecord = read_record(&a.record)?;
    let gpu = read_trace(&a.record)
        .context("the GPU's trace: made by `highwater rerun --trace-server`")?;
    let card = Arc::new(dryrun::CardProfile::read(&a.card)?);
    quiet_device_threads();
    let gpu_pages = exact_size_pages(&gpu);
    println!(
        "{}: the GPU's server met {} reservations; pages of their tensor's size (persistent): {}",
        record.name(),
        gpu.len(),
        pages_text(&gpu_pages)
    );
    let mut rows = Vec::new();
    // Where each replay placed a tensor apart from the first replay: dry against dry.
    let mut first_trace: Option<Vec<Reservation>> = None;
    let mut apart_from_first = Vec::new();
    for replay in 1..=a.replays {
        let outcome =
            quietly(|| situ::dry::replay_network_traced(&record, card.clone(), Some(&a.autotune)))
                .with_context(|| format!("cannot replay {}", a.record.display()))?;
        let c = compare(&gpu, &outcome.server_trace);
        if let Some(t) = &first_trace {
            apart_from_first.push(compare(t, &outcome.server_trace).first_placed_apart);
        }
        let reserved: Vec<String> = record
            .steps
            .iter()
            .zip(&outcome.steps)
            .map(|(g, d)| (d.reserved as i64 - g.reserved as i64).to_string())
            .collect();
        let first = |d: Option<(usize, u64, u64)>| {
            d.map_or("none".into(), |(i, g, d)| {
                format!("#{i}: {} B", d as i64 - g as i64)
            })
        };
        rows.push(vec![
            replay.to_string(),
            reserved.join(" "),
            if c.same_requests { "yes" } else { "no" }.into(),
            first(c.first_in_use_difference),
            first(c.first_reserved_difference),
            first(c.first_placed_apart),
            c.more_released.to_string(),
            c.fewer_released.to_string(),
            pages_apart(&gpu_pages, &exact_size_pages(&outcome.server_trace)),
        ]);
        first_trace.get_or_insert(outcome.server_trace);
    }
    let headers = [
        ("replay", Align::Right),
        ("reserved − GPU, per step (B)", Align::Left),
        ("same requests", Align::Left),
        ("first in use apart", Align::Left),
        ("first reserved apart", Align::Left),
        ("first placed apart", Align::Left),
        ("more released", Align::Right),
        ("fewer released", Align::Right),
        ("persistent pages apart (size: GPU, dry)", Align::Left),
    ];
    println!("{}", render(&headers, &rows, Rule::Dashed).trim_end());
    if !apart_from_first.is_empty() {
        let at: Vec<String> = apart_from_first
            .iter()
            .map(|d| d.map_or("none".into(), |(i, _, _)| format!("#{i}")))
            .collect();
        println!(
            "dry against dry, replays 2–{} against the first: first placed apart at {}",
            a.replays,
            at.join(", ")
        );
    }
    Ok(())
}

/// The trace beside `record`: NAME.server.json, or NAME.server.json.xz as
/// `scripts/gpu-fusion-order` commits it.
fn read_trace(record: &Path) -> Result<Vec<Reservation>> {
    let plain = record.with_extension("server.json");
    if plain.exists() {
        return read_record(&plain);
    }
    let packed = record.with_extension("server.json.xz");
    let bytes =
        std::fs::read(&packed).with_context(|| format!("cannot read {}", packed.display()))?;
    let mut json = Vec::new();
    lzma_rs::xz_decompress(&mut bytes.as_slice(), &mut json)
        .with_context(|| format!("{} is not xz", packed.display()))?;
    serde_json::from_slice(&json).with_context(|| format!("{} is not a trace", packed.display()))
}

/// `count × size` for each size, largest count first.
fn pages_text(pages: &PageCounts) -> String {
    let mut by_count: Vec<(&u64, &usize)> = pages.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    listed(by_count.iter().map(|(s, n)| format!("{n} × {s} B")), ", ")
}

/// The sizes whose count of persistent pages differs between the GPU's trace and a replay's.
fn pages_apart(gpu: &PageCounts, dry: &PageCounts) -> String {
    let sizes: std::collections::BTreeSet<&u64> = gpu.keys().chain(dry.keys()).collect();
    listed(
        sizes.into_iter().filter_map(|size| {
            let (g, d) = (gpu.get(size).copied(), dry.get(size).copied());
            (g != d).then(|| format!("{size}: {}, {}", g.unwrap_or(0), d.unwrap_or(0)))
        }),
        "; ",
    )
}

/// The items joined by `separator`, or "none".
fn listed(items: impl Iterator<Item = String>, separator: &str) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(separator)
    }
}
