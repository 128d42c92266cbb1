//! *A primer: pools, pages and lifetimes* (`src/primer.md`): what its cells compute.
//!
//! The chapter's cells drive CubeCL 0.10's own pool ([`CardPool`]) on a 16 GiB card that
//! exists only as bookkeeping. The pool calls stay on the page, since they are what the
//! chapter teaches; the table rows they fill and the paragraphs that read the pool back
//! (each checking the claims it makes) live here.

use cell_output::{Markdown, Table};
use highwater::pool::{CardPool, SizeClass, size_classes};

use crate::BookError;
use crate::bytes;

/// One mebibyte, the unit the chapter's tensors are sized in.
pub const MIB: u64 = 1 << 20;
/// One gibibyte: the free memory of the chapter's full card.
pub const GIB: u64 = 1 << 30;
/// The incident's card.
pub const CARD: u64 = 16 * GIB;

/// The ratchet's five steps: the tensors (MiB) each reserves, all freed before the next.
pub const STEPS: [&[u64]; 5] = [
    &[256, 256],
    &[256, 256, 256],
    &[128],
    &[256, 256],
    &[512, 256, 256],
];

/// The ratchet table's columns, one row per step of [`STEPS`] (see [`step_row`]).
pub const RATCHET_COLUMNS: [&str; 5] = [
    "step",
    "tensors",
    "peak in use",
    "pages opened",
    "reserved after",
];

/// The pool burn-cuda builds on the card, allowed all of it.
pub fn card() -> CardPool {
    CardPool::cuda(CARD, CARD)
}

/// The size class a request of `size` bytes falls in on the card.
pub fn class_of(size: u64) -> SizeClass {
    *size_classes(CARD)
        .iter()
        .find(|c| (c.smallest..=c.largest).contains(&size))
        .expect("a size no pool takes")
}

/// One row of a pool's state: what just happened, bytes in use, bytes reserved, its pages.
pub fn state(t: &mut Table, what: &str, pool: &mut CardPool) {
    let u = pool.usage();
    let pages: Vec<String> = pool
        .storage()
        .page_sizes()
        .into_iter()
        .map(bytes::show)
        .collect();
    t.push([
        what.to_string(),
        bytes::show(u.in_use),
        bytes::show(u.reserved),
        pages.join(" + "),
    ]);
}

/// What the slices table shows, read back from a pool put through the same events: each
/// tensor's pool, pages kept once every tensor is gone, and kept pages reused.
pub fn slices_lessons() -> Result<Markdown, BookError> {
    let mut pool = card();
    let a = pool.reserve(64 * MIB)?;
    let own = pool.storage().page_sizes();
    let b = pool.reserve(64 * MIB)?;
    drop(a);
    let c = pool.reserve(32 * MIB)?;
    drop((b, c));
    let emptied = pool.usage();
    let d = pool.reserve(32 * MIB)?;
    let e = pool.reserve(32 * MIB)?;
    let reused = pool.usage().reserved == emptied.reserved;
    drop((d, e));
    let (big, small) = (class_of(64 * MIB), class_of(32 * MIB));
    assert_eq!((own[0], big.page), (64 * MIB, 64 * MIB));
    assert!(small.shared && emptied.in_use == 0 && reused);
    Ok(Markdown(format!(
        "Three things to take from it. The two tensors went to different pools: the 64 MiB one got \
         a page of its own, exactly {}, while the 32 MiB one went to a pool whose pages are {}, each \
         shared by several slices; the empty 64 MiB page was not that pool's to lend. When every \
         tensor is gone, in use is zero but reserved is still {}: **a page, once taken, is kept** \
         (CubeCL returns pages only on an explicit `memory_cleanup`, which training loops do not \
         call). And kept pages are reused: the last two tensors were cut from the {} page already \
         held, and reserved did not move.",
        bytes::show(own[0]),
        bytes::show(small.page),
        bytes::show(emptied.reserved),
        bytes::show(small.page),
    )))
}

/// What the persistent table shows, read back from a pool put through the same events: a
/// request of a weight's size outside persistent mode gets an exact page of the persistent
/// pool (`PersistentPool::has_size`), one of a new size goes to the ordinary pools.
pub fn persistent_lessons() -> Result<Markdown, BookError> {
    let mut pool = card();
    pool.set_persistent(true);
    let weights: Vec<_> = [48, 48, 96]
        .iter()
        .map(|m| pool.reserve(m * MIB))
        .collect::<Result<_, _>>()?;
    pool.set_persistent(false);
    let before = pool.storage().page_sizes();
    let gradient = pool.reserve(96 * MIB)?;
    let after_gradient = pool.storage().page_sizes();
    let activation = pool.reserve(40 * MIB)?;
    let after_activation = pool.storage().page_sizes();
    let added = |old: &[u64], new: &[u64]| new[old.len()..].to_vec();
    let (gradient_page, activation_page) = (
        added(&before, &after_gradient),
        added(&after_gradient, &after_activation),
    );
    let ordinary = class_of(96 * MIB);
    assert_eq!(
        gradient_page,
        vec![96 * MIB],
        "an exact page for a weight's size"
    );
    assert!(class_of(40 * MIB).shared);
    assert_eq!(activation_page, vec![class_of(40 * MIB).page]);
    drop(gradient);
    let again = pool.reserve(96 * MIB)?;
    let reused = pool.storage().page_sizes() == after_activation;
    assert!(reused, "a free persistent page of the size is reused");
    drop((weights, again, activation));
    let elsewhere = if ordinary.shared {
        format!("a slice of a {} page", bytes::show(ordinary.page))
    } else {
        format!("a page of {}", bytes::show(ordinary.page))
    };
    Ok(Markdown(format!(
        "The gradient matched a weight's size, so it got a page of exactly {}, though the \
         ordinary pools would have given it {elsewhere}; freed and asked for again, that page \
         is reused. The activation, of a size no weight has, took a slice of a {} page. So in a training \
         run the persistent pool grows past the parameters, as Part I's memory views show.",
        bytes::show(gradient_page[0]),
        bytes::show(activation_page[0]),
    )))
}

/// One row of the ratchet table ([`RATCHET_COLUMNS`]): step `step` reserved `sizes` (MiB) at
/// once, `peak` bytes in use, and has freed them; `before` lists the pages held before it, so
/// the row names the pages the step opened.
pub fn step_row(
    step: usize,
    sizes: &[u64],
    peak: u64,
    mut before: Vec<u64>,
    pool: &mut CardPool,
) -> [String; 5] {
    let mut opened = Vec::new();
    for page in pool.storage().page_sizes() {
        match before.iter().position(|&p| p == page) {
            Some(at) => _ = before.remove(at),
            None => opened.push(bytes::show(page)),
        }
    }
    let list: Vec<String> = sizes.iter().map(|s| bytes::show(s * MIB)).collect();
    [
        step.to_string(),
        list.join(", "),
        bytes::show(peak),
        if opened.is_empty() {
            "none".into()
        } else {
            opened.join(", ")
        },
        bytes::show(pool.usage().reserved),
    ]
}

/// What the ratchet shows, read back from the same five steps: reserved never falls, and the
/// smallest step opens a page because its tensor is of a class no earlier step used.
pub fn ratchet_lessons() -> Result<Markdown, BookError> {
    let mut pool = card();
    let (mut reserved, mut peaks) = (Vec::new(), Vec::new());
    for sizes in STEPS {
        let held: Vec<_> = sizes
            .iter()
            .map(|s| pool.reserve(s * MIB))
            .collect::<Result<_, _>>()?;
        peaks.push(pool.usage().in_use);
        drop(held);
        reserved.push(pool.usage().reserved);
    }
    assert!(
        reserved.windows(2).all(|w| w[1] >= w[0]),
        "reserved went down"
    );
    let most = *peaks.iter().max().unwrap_or(&0);
    let (quarter, eighth) = (class_of(256 * MIB), class_of(128 * MIB));
    assert!(!quarter.shared && eighth.shared && reserved[2] > reserved[1]);
    Ok(Markdown(format!(
        "Step 3 needed the least of all, yet it opened a page: a 128 MiB tensor belongs to the class \
         over {} up to {}, whose pages are {} and shared, and no such page existed yet; the three {} \
         pages it could have used belong to another class. At the end the pool holds {} for a run \
         whose largest step needed {} at once. Nothing leaked: the pool keeps every page it ever \
         opened.",
        bytes::show(eighth.smallest - 1),
        bytes::show(eighth.largest),
        bytes::show(eighth.page),
        bytes::show(quarter.page),
        bytes::show(reserved[4]),
        bytes::show(most),
    )))
}

/// The full card's table: one row per reservation that moved reserved, and one for the
/// refusal, which names the page the pool asked for.
#[derive(Debug, Default)]
pub struct ReserveLog {
    rows: Vec<[String; 4]>,
    last: u64,
}

impl ReserveLog {
    /// Reservation `i` succeeded: a row if it opened a page (reserved moved).
    pub fn reserved(&mut self, i: usize, pool: &CardPool) {
        if pool.usage().reserved != self.last {
            self.push(i, "ok, a new page".to_string(), pool);
        }
    }

    /// Reservation `i` was refused: the pool asked the card for a page of `page` bytes.
    pub fn refused(&mut self, i: usize, page: u64, pool: &CardPool) {
        let outcome = format!(
            "refused: the pool asked for a page of {}",
            bytes::show(page)
        );
        self.push(i, outcome, pool);
    }

    fn push(&mut self, i: usize, outcome: String, pool: &CardPool) {
        let u = pool.usage();
        self.rows.push([
            i.to_string(),
            outcome,
            bytes::show(u.in_use),
            bytes::show(u.reserved),
        ]);
        self.last = u.reserved;
    }

    /// The rows as the chapter's table.
    pub fn table(self) -> Table {
        let mut t = Table::new(["reserve", "outcome", "in use", "reserved"]);
        for row in self.rows {
            t.push(row);
        }
        t
    }
}

/// The exercise's answer: `count` 40 MiB tensors fit in 1 GiB before the pool asked for a page
/// of `refused` bytes, explained from the size classes.
pub fn exercise_answer(count: usize, refused: u64) -> Markdown {
    let class = class_of(40 * MIB);
    let (per_page, pages) = (class.page / (40 * MIB), GIB / class.page);
    Markdown(format!(
        "**{count}**, and a page of **{}**. 40 MiB lies in the class over {} up to {}, sliced from \
         {} pages; a page holds {per_page} slices of 40 MiB, leaving {} that no 40 MiB tensor can \
         use. 1 GiB holds {pages} pages: {count} tensors, and the next needs another page.",
        bytes::show(refused),
        bytes::show(class.smallest - 1),
        bytes::show(class.largest),
        bytes::show(class.page),
        bytes::show(class.page % (40 * MIB)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reserves `size`-byte tensors on a card with 1 GiB free until the pool is refused: how
    /// many fit, and the page refused (the loop the chapter's cells write).
    fn fill(size: u64) -> (usize, u64) {
        let mut pool = CardPool::cuda(CARD, GIB);
        let mut held = Vec::new();
        loop {
            match pool.reserve(size) {
                Ok(h) => held.push(h),
                Err(e) => return (held.len(), e.page),
            }
        }
    }

    #[test]
    fn the_slices_and_the_ratchet_read_back_as_the_text_says() {
        let slices = slices_lessons().unwrap().0;
        assert!(slices.contains("exactly 64 MiB"), "{slices}");
        let persistent = persistent_lessons().unwrap().0;
        assert!(persistent.contains("exactly 96 MiB"), "{persistent}");
        let ratchet = ratchet_lessons().unwrap().0;
        assert!(ratchet.starts_with("Step 3 needed the least"), "{ratchet}");
    }

    #[test]
    fn the_ratchet_rows_name_the_pages_each_step_opened() {
        let mut pool = card();
        let mut rows = Vec::new();
        for (i, sizes) in STEPS.iter().enumerate() {
            let before = pool.storage().page_sizes();
            let held: Vec<_> = sizes
                .iter()
                .map(|s| pool.reserve(s * MIB).unwrap())
                .collect();
            let peak = pool.usage().in_use;
            drop(held);
            rows.push(step_row(i + 1, sizes, peak, before, &mut pool));
        }
        // Step 3, the smallest, opens a page all the same; step 4 reuses what it finds.
        assert_ne!(rows[2][3], "none", "{rows:?}");
        assert_eq!(rows[3][3], "none", "{rows:?}");
        assert_eq!(rows[0][0], "1");
    }

    #[test]
    fn the_full_card_logs_new_pages_and_the_refusal() {
        let mut pool = CardPool::cuda(CARD, GIB);
        let mut log = ReserveLog::default();
        let mut held = Vec::new();
        for i in 1..=64 {
            match pool.reserve(32 * MIB) {
                Ok(h) => held.push(h),
                Err(e) => {
                    log.refused(i, e.page, &pool);
                    break;
                }
            }
            log.reserved(i, &pool);
        }
        let t = log.table();
        let (count, page) = fill(32 * MIB);
        let last = t.rows().last().unwrap();
        assert_eq!(last[0], (count + 1).to_string());
        assert!(last[1].ends_with(&bytes::show(page)), "{last:?}");
        // One row per page opened, then the refusal.
        assert_eq!(t.rows().len() as u64, GIB / class_of(32 * MIB).page + 1);
    }

    #[test]
    fn the_exercise_key_matches_the_pool() {
        let (count, page) = fill(40 * MIB);
        let class = class_of(40 * MIB);
        assert_eq!(
            (count as u64, page),
            ((class.page / (40 * MIB)) * (GIB / class.page), class.page)
        );
        let answer = exercise_answer(count, page).0;
        assert!(answer.starts_with(&format!("**{count}**")), "{answer}");
    }
}
