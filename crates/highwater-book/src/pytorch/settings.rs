//! The reference page on PyTorch's allocator (`src/reference/pytorch-allocator.md`): each
//! `PYTORCH_CUDA_ALLOC_CONF` the model covers, tried on the book's trace, beside how the model
//! held to real PyTorch's capped replays of that same trace under it ([`super::record`]).

use super::record::{Held, ReplayRecord, hold};
use super::{limit, outcome, replay_placed};
use crate::{Book, BookError};
use basics::bytes;
use cell_output::Table;
use highwater::memtrace::MemTrace;
use highwater::recipe::Card;

/// For each setting real PyTorch replayed `trace` under (the records of
/// `repro/results/pytorch/replay` named `{stem}--*`), on `card`: bytes reserved at the last
/// step with no other process, what happens with another holding `tenant`, and how many of the
/// GPU's capped runs the model reproduced to the byte. Errors if a record replayed another
/// trace than `trace`, or a setting the model does not take.
pub fn settings_table(
    book: &Book,
    stem: &str,
    trace: &MemTrace,
    card: &Card,
    tenant: u64,
) -> Result<Table, BookError> {
    let mut records = Vec::new();
    for path in book.files("repro/results/pytorch/replay", "xz")? {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.strip_prefix(stem).is_some_and(|r| r.starts_with("--")) {
            records.push((name.into_owned(), ReplayRecord::read(&path)?));
        }
    }
    if records.is_empty() {
        return Err(format!("no record of PyTorch replaying {stem}").into());
    }
    let mut rows = Vec::new();
    for (name, record) in &records {
        if record.trace.last_step != trace.last_step {
            return Err(format!(
                "{name} replayed steps {}..={}, the trace has {}",
                record.trace.first_step, record.trace.last_step, trace.last_step
            )
            .into());
        }
        let setting = record
            .setting()
            .ok_or_else(|| format!("{name}: a setting the model does not take"))?;
        let alone = replay_placed(trace, setting, limit(card, 0)?, &[]);
        let crowded = replay_placed(trace, setting, limit(card, tenant)?, &[]);
        let (mut exact, mut placed, mut card_refused, mut differs) = (0, 0, 0, 0);
        for run in &record.runs {
            match hold(run, trace, setting) {
                Held::Exact => exact += 1,
                Held::ExactWithTheDriversAddresses(_) => placed += 1,
                Held::RefusedByTheCard => card_refused += 1,
                Held::Differs(_) => differs += 1,
            }
        }
        let mut held = format!("{} of {}", exact + placed, exact + placed + differs);
        if placed > 0 {
            held += &format!(" ({placed} with the driver's addresses)");
        }
        if card_refused > 0 {
            held += &format!("; {card_refused} refused by the card, not held");
        }
        let reserved = alone
            .steps
            .last()
            .map_or("–".to_string(), |s| bytes::show(s.reserved));
        rows.push((setting.to_string(), reserved, outcome(&crowded), held));
    }
    // The default first, then by name.
    rows.sort_by(|a, b| (a.0 != "default", &a.0).cmp(&(b.0 != "default", &b.0)));
    let mut t = Table::new([
        "PYTORCH_CUDA_ALLOC_CONF".to_string(),
        "reserved at the last step, the card to itself".to_string(),
        format!("another process holds {}", bytes::show(tenant)),
        "real PyTorch's capped runs reproduced to the byte".to_string(),
    ]);
    for (setting, reserved, crowded, held) in rows {
        t.push([setting, reserved, crowded, held]);
    }
    Ok(t)
}
