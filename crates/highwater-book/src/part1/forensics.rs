//! *Forensics* (`src/part-1/forensics.md`): what its cells compute.

use cell_output::Table;
use highwater::forensics::AttemptPhase;

use crate::BookError;
use crate::text::steps;
use crate::{Book, bytes};

/// The SiTU arm's logs, a row each: attempts, the steps each attempt died at, and every reserve
/// failure by requested size, with when it happened (before step 0, after a step). The chapter
/// reads the defect from *when* and *what size*, so both are spelt out per failure.
pub fn situ_logs_table(book: &Book) -> Result<Table, BookError> {
    let mut table = Table::new([
        "log",
        "attempts",
        "died at",
        "reserve failures (size × count)",
        "when",
    ]);
    for i in book.incidents()?.iter().filter(|i| i.arm == "situ") {
        let died = match (&i.died_at[..], i.truncated) {
            ([], true) => "unknown: the log is truncated".to_string(),
            ([], false) => "—".to_string(),
            (died_at, _) => steps(died_at),
        };
        let size = |b: Option<u64>| b.map_or("?".into(), bytes::show);
        let sizes: Vec<String> = i
            .failures
            .iter()
            .map(|f| format!("{} × {}", size(f.bytes), f.count))
            .collect();
        let when: Vec<String> = i
            .failures
            .iter()
            .map(|f| match (f.phase, f.after_step) {
                (AttemptPhase::Init, _) => format!("{}: before step 0", size(f.bytes)),
                (_, Some(s)) => format!("{}: after step {s}", size(f.bytes)),
                _ => format!("{}: during the run", size(f.bytes)),
            })
            .collect();
        table.push([
            i.log.clone(),
            i.attempts.to_string(),
            died,
            sizes.join(", "),
            when.join("; "),
        ]);
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_situ_logs_show_seed_2_truncated_and_failures_after_step_0() {
        let book = Book::repository();
        let t = situ_logs_table(&book).unwrap();
        let situ = book
            .incidents()
            .unwrap()
            .iter()
            .filter(|i| i.arm == "situ")
            .count();
        assert_eq!(t.rows().len(), situ);
        // The text: seed 2's log was cut before its first step line.
        assert!(
            t.rows()
                .iter()
                .any(|row| row[2] == "unknown: the log is truncated"),
            "{:?}",
            t.rows()
        );
        // The text: failures after step 0, sized like activations (32 MiB).
        assert!(
            t.rows()
                .iter()
                .any(|row| row[4].contains("32 MiB: after step")),
            "{:?}",
            t.rows()
        );
    }
}
