//! The search for the largest batch a card allows ([`largest_batch`]): doubling then bisecting
//! over any dry run, apart from how each run is made.

use super::DryOutcome;

/// What the search for the largest batch found.
#[derive(Debug, Clone)]
pub struct BatchSearch {
    /// The largest batch whose steps all fit, and its run; `None` when not even the smallest
    /// does.
    pub largest: Option<(u64, DryOutcome)>,
    /// The smallest batch that does not fit, and its run (where it dies); `None` when every
    /// batch up to the limit fit.
    pub smallest_failing: Option<(u64, DryOutcome)>,
    /// Every batch tried, in order, and whether it fit.
    pub tried: Vec<(u64, bool)>,
}

/// The largest batch in `1..=limit` whose run fits, by doubling from 1 and then bisecting, so
/// about 2·log2 of the answer runs. Assumes what a step holds grows with the batch (true of
/// every model whose tensors scale with it). `run(batch)` is a dry run that refuses pages.
pub fn largest_batch<E>(
    limit: u64,
    mut run: impl FnMut(u64) -> Result<DryOutcome, E>,
) -> Result<BatchSearch, E> {
    let mut tried = Vec::new();
    let mut probe = |batch: u64, tried: &mut Vec<(u64, bool)>| -> Result<_, E> {
        let outcome = run(batch)?;
        let fits = outcome.died.is_none();
        tried.push((batch, fits));
        Ok((fits, outcome))
    };
    let mut fitting: Option<(u64, DryOutcome)> = None;
    let mut failing: Option<(u64, DryOutcome)> = None;
    let mut batch = 1;
    while batch <= limit {
        let (fits, outcome) = probe(batch, &mut tried)?;
        if !fits {
            failing = Some((batch, outcome));
            break;
        }
        fitting = Some((batch, outcome));
        batch = if batch == limit {
            limit + 1
        } else {
            (batch * 2).min(limit)
        };
    }
    while let (Some((lo, _)), Some((hi, _))) = (&fitting, &failing) {
        if hi - lo <= 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        let (fits, outcome) = probe(mid, &mut tried)?;
        if fits {
            fitting = Some((mid, outcome));
        } else {
            failing = Some((mid, outcome));
        }
    }
    Ok(BatchSearch {
        largest: fitting,
        smallest_failing: failing,
        tried,
    })
}
