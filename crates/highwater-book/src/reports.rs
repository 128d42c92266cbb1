//! What a run's refusals come to, counted the ways the tables count them.

use std::collections::BTreeMap;

use highwater::Failure;

/// How many reserves of each requested size the run was refused, smallest size first.
pub fn refused_sizes(failures: &[Failure]) -> Vec<(u64, usize)> {
    let mut sizes: BTreeMap<u64, usize> = BTreeMap::new();
    for f in failures {
        *sizes.entry(f.requested).or_default() += 1;
    }
    sizes.into_iter().collect()
}

/// How many times each page size was refused (the driver's side of a refusal), in the order
/// the pages were first refused.
pub fn refused_pages(failures: &[Failure]) -> Vec<(u64, u32)> {
    let mut pages: Vec<(u64, u32)> = vec![];
    for f in failures {
        match pages.iter_mut().find(|(p, _)| *p == f.page) {
            Some((_, n)) => *n += 1,
            None => pages.push((f.page, 1)),
        }
    }
    pages
}

#[cfg(test)]
mod tests {
    use super::*;
    use highwater::trace::Phase;

    fn failure(requested: u64, page: u64) -> Failure {
        Failure {
            step: 1,
            requested,
            page,
            phase: Phase::Forward,
        }
    }

    #[test]
    fn refusals_count_by_size_and_by_page() {
        let fs = [
            failure(64, 256),
            failure(32, 256),
            failure(64, 128),
            failure(64, 256),
        ];
        assert_eq!(refused_sizes(&fs), [(32, 1), (64, 3)]);
        assert_eq!(refused_pages(&fs), [(256, 3), (128, 1)]);
        assert!(refused_sizes(&[]).is_empty());
    }
}
