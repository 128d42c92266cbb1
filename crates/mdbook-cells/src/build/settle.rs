//! The end of stage 2 ([`super::build`]): the committed output store settled against the build's outcomes —
//! in a serve build, counted for what it lacks; verifying, held to every output; refreshing,
//! rewritten to them.

use super::Got;
use crate::cache;
use crate::error::Error;
use crate::outcome::Stored;
use crate::plan::{Plan, PlannedCell};
use crate::store::{self, Check, Layout, Store, StoreAccess, StoreMode, StoreOutcome};
use crate::types::{Document, Problem, Source, StoreNote};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// The store's part once every cell has its outcome: in a serve build, how many outputs it
/// lacks; verifying, every way it fails the build's outputs; refreshing, rewritten to them.
pub(crate) fn settle_store(
    root: &Path,
    docs: &[Document],
    plan: &Plan,
    got: &HashMap<String, Got>,
    store: StoreAccess<'_>,
) -> Result<StoreOutcome, Error> {
    let (Some(dir), mode) = (store.dir, store.mode) else {
        return Ok(StoreOutcome::default());
    };
    let Some((opened, problems)) = store.opened else {
        return Ok(StoreOutcome {
            note: Some(StoreNote::NotRead),
            ..StoreOutcome::default()
        });
    };
    let mut held = StoreOutcome {
        problems,
        ..StoreOutcome::default()
    };
    held.note = Some(match mode {
        StoreMode::Serve => {
            let missing = (plan.cells.iter())
                .filter(|f| f.key.as_ref().is_some_and(|k| opened.get(k).is_none()))
                .filter(|f| (got.get(&f.module)).is_some_and(|g| worth_keeping(plan, f, &g.stored)))
                .count();
            StoreNote::Served { missing }
        }
        StoreMode::Verify => {
            let layout = verified_layout(docs, plan, got);
            verify(plan, &opened, got, &mut held);
            for (file, why) in opened.misfiled(root, dir, &layout) {
                held.problems.push(Problem {
                    file: file.display().to_string(),
                    line: 0,
                    reason: format!("{why}: `{}` rewrites it", crate::types::REFRESH_COMMAND),
                });
            }
            StoreNote::Verified
        }
        StoreMode::Refresh => {
            let chapters = stored_chapters(docs, plan, got, Some(&opened));
            let (written, removed) =
                opened
                    .write(root, dir, &chapters)
                    .map_err(|source| Error::Store {
                        path: root.join(dir),
                        source,
                    })?;
            StoreNote::Refreshed {
                written: written.len(),
                removed: removed.len(),
            }
        }
    });
    Ok(held)
}

/// Holds the store's entries to this build's outputs (every cell ran): each cell's key must be
/// there with the same output (a `varies` cell: there, whatever its output).
fn verify(plan: &Plan, store: &Store, got: &HashMap<String, Got>, held: &mut StoreOutcome) {
    for f in &plan.cells {
        let (Some(key), Some(now)) = (&f.key, got.get(&f.module)) else {
            continue;
        };
        if !worth_keeping(plan, f, &now.stored) {
            // A failure: already a problem of its own.
            continue;
        }
        let check = match store.get(key) {
            None => Some(Check::Missing),
            Some(_) if plan.block(f).options.varies.is_some() => None,
            Some(entry) => {
                store::difference(&entry.stored, &now.stored).map(|why| Check::Differs {
                    computed: entry.computed.clone(),
                    why,
                })
            }
        };
        if let Some(check) = check {
            held.checks.insert(f.module.clone(), check);
        }
    }
}

/// Each chapter's cells as the store should file them, verifying: a cell that failed where it
/// should not counts as filed (its failure is a problem of its own, not a stale entry).
fn verified_layout(docs: &[Document], plan: &Plan, got: &HashMap<String, Got>) -> Vec<Layout> {
    let failed = |f: &PlannedCell| {
        (got.get(&f.module)).is_some_and(|g| {
            !worth_keeping(plan, f, &g.stored) && !plan.block(f).options.expect_fail
        })
    };
    let stored = stored_chapters(docs, plan, got, None);
    (stored.iter().enumerate())
        .map(|(d, (chapter, entries))| Layout {
            chapter: chapter.clone(),
            cells: (plan.cells.iter().filter(|f| f.doc == d))
                .filter(|f| entries.iter().any(|e| e.cell == f.store_name) || failed(f))
                .filter_map(|f| Some((f.store_name.clone(), f.key.clone()?)))
                .collect(),
        })
        .collect()
}

/// Whether an outcome belongs in the cache and the store: an output, or a failure that is the
/// cell's content (an expected failure that would happen again).
pub(crate) fn worth_keeping(plan: &Plan, f: &PlannedCell, stored: &Stored) -> bool {
    match stored.outcome.failure() {
        None => true,
        Some(kind) => plan.block(f).options.expect_fail && kind.is_deterministic(),
    }
}

/// Every chapter's outputs worth keeping, in page order, as the store files them: the time of
/// the run that computed each (this build's, or the one the cache or store kept). An output the
/// `previous` store already holds under the same key keeps its entry's date and run time: a
/// rerun that reproduced it changes nothing to commit.
fn stored_chapters(
    docs: &[Document],
    plan: &Plan,
    got: &HashMap<String, Got>,
    previous: Option<&Store>,
) -> Vec<(String, Vec<store::Entry>)> {
    let now = provenance::utc_now();
    docs.iter()
        .enumerate()
        .map(|(d, doc)| {
            let entries = (plan.cells.iter().filter(|f| f.doc == d))
                .filter_map(|f| {
                    let (key, got) = (f.key.as_ref()?, got.get(&f.module)?);
                    if !worth_keeping(plan, f, &got.stored) {
                        return None;
                    }
                    let same = previous
                        .and_then(|p| p.get(key))
                        .filter(|e| e.stored == got.stored);
                    if let Some(entry) = same {
                        return Some(store::Entry {
                            cell: f.store_name.clone(),
                            ..entry.clone()
                        });
                    }
                    let (ran, computed) = match &got.source {
                        Source::Ran(t) => (*t, now.clone()),
                        // An expected compile failure: found now, nothing ran.
                        Source::Compiled => (Duration::ZERO, now.clone()),
                        Source::Cached { ran, computed } => (
                            ran.unwrap_or_default(),
                            computed.clone().unwrap_or_else(|| now.clone()),
                        ),
                        Source::Stored { ran, computed } => (*ran, computed.clone()),
                        _ => return None,
                    };
                    Some(store::Entry {
                        cell: f.store_name.clone(),
                        key: key.clone(),
                        computed,
                        ran_ms: cache::millis(ran),
                        stored: got.stored.clone(),
                    })
                })
                .collect();
            (doc.source.clone(), entries)
        })
        .collect()
}
