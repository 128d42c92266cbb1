//! Real PyTorch training programs (`repro/results/pytorch/programs`, written on an H100 by
//! `gpu/pytorch/train_programs.py`): each program's uncapped memory snapshot replayed
//! ([`graphrace::snapshot`], what `highwater replay` runs) under the caps the same program
//! then ran under, beside what PyTorch 2.11 did under them.

use std::path::Path;

use serde::Deserialize;

use crate::{Book, BookError};
use cell_output::Table;
use graphrace::caching::format_size;
use graphrace::snapshot::{self, Snapshot, verdict};

/// The programs, the layouts and the caps (of the default uncapped run's peak reserved).
const PROGRAMS: [&str; 3] = ["gpt", "cnn", "varlen"];
const LAYOUTS: [&str; 2] = ["default", "expandable"];
const CAPS: [&str; 5] = ["cap60", "cap80", "cap90", "cap95", "cap100"];

/// A capped run, as far as the comparison reads it.
#[derive(Deserialize)]
struct ProgramRun {
    allowed: Option<u64>,
    oom: Option<ProgramOom>,
}

#[derive(Deserialize)]
struct ProgramOom {
    step: u64,
    message: String,
}

/// The text of `message` between `after` and `before`.
fn between<'a>(message: &'a str, after: &str, before: &str) -> Option<&'a str> {
    let rest = &message[message.find(after)? + after.len()..];
    Some(&rest[..rest.find(before)?])
}

/// A refusal as the table shows it: the step, what was tried and the message's two figures.
fn outcome(step: u64, tried: &str, allocated: &str, unallocated: &str) -> String {
    format!(
        "step {step}: tried {tried}; {allocated} allocated, {unallocated} reserved but unallocated"
    )
}

fn read_snapshot(path: &Path) -> Result<Snapshot, BookError> {
    let name = path.display().to_string();
    let raw = std::fs::read(path).map_err(|source| BookError::Read {
        path: name.clone(),
        source,
    })?;
    let mut bytes = Vec::new();
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut bytes).map_err(|e| BookError::Parse {
        path: name.clone(),
        reason: format!("not xz: {e}"),
    })?;
    snapshot::read(&bytes, None).map_err(|e| BookError::Parse {
        path: name,
        reason: e.to_string(),
    })
}

/// Every capped run either side refused, PyTorch's outcome beside the replay's (the step,
/// "Tried to allocate", and "allocated by PyTorch" / "reserved … but unallocated"), then the
/// count of runs both say live.
pub fn snapshot_replays(book: &Book) -> Result<Table, BookError> {
    let dir = book.path("repro/results/pytorch/programs");
    let mut t = Table::new([
        "program · allocator · cap",
        "PyTorch 2.11, H100",
        "replay of the uncapped snapshot",
    ]);
    let mut both_live = 0;
    for program in PROGRAMS {
        for layout in LAYOUTS {
            let snap =
                read_snapshot(&dir.join(format!("{program}--{layout}--uncapped.pickle.xz")))?;
            let requests = snap.requests().map_err(|e| e.to_string())?;
            let setting = snap
                .setting
                .ok_or("the snapshot names no allocator settings")?;
            for cap in CAPS {
                let path = dir.join(format!("{program}--{layout}--{cap}.json"));
                let text = std::fs::read_to_string(&path).map_err(|source| BookError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                let run: ProgramRun =
                    serde_json::from_str(&text).map_err(|e| BookError::Parse {
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })?;
                let allowed = run.allowed.ok_or("a capped run without its cap")?;
                let v = verdict(&snap, &requests, setting, allowed);
                let torch = run.oom.as_ref().map(|o| {
                    let m = &o.message;
                    let figure = |after, before| between(m, after, before).unwrap_or("?");
                    outcome(
                        o.step,
                        figure("Tried to allocate ", ". GPU"),
                        figure("Of the allocated memory ", " is allocated by PyTorch"),
                        figure("allocated by PyTorch, and ", " is reserved by PyTorch but"),
                    )
                });
                let model = v.refused.as_ref().map(|r| {
                    outcome(
                        r.step,
                        &format_size(r.error.tried),
                        &format_size(r.error.allocated),
                        &format_size(r.error.reserved - r.error.allocated),
                    )
                });
                if torch.is_none() && model.is_none() {
                    both_live += 1;
                    continue;
                }
                let lives = || "lives".to_string();
                t.push([
                    format!("{program} · {layout} · {}", cap.replace("cap", "") + " %"),
                    torch.unwrap_or_else(lives),
                    model.unwrap_or_else(lives),
                ]);
            }
        }
    }
    t.push([
        format!("the other {both_live} runs"),
        "lives".into(),
        "lives".into(),
    ]);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chapter's table: every refused run is the replay's to the printed digit, and the
    /// rest live on both sides.
    #[test]
    fn the_replay_of_each_snapshot_is_pytorchs_in_every_capped_run() {
        let t = snapshot_replays(&Book::repository()).unwrap();
        let rows = t.rows();
        assert_eq!(rows.len(), 12, "11 refused runs and the others");
        for row in rows {
            assert_eq!(row[1], row[2], "{}", row[0]);
        }
        assert_eq!(rows[11][0], "the other 19 runs");
    }
}
