//! *The numbers close* (`src/part-1/numbers.md`): what its cells compute.

use std::collections::BTreeSet;

use cell_output::Table;
use highwater::forensics::AttemptPhase;

use crate::Book;
use crate::BookError;

/// The SiTU activation's tensors, each `(what, shape)`, against every size whose reservation
/// failed after step 0 in any incident log: a row per tensor (its shape, its bytes as
/// `bytes_of` sizes it, and whether a log failed on exactly that size). Panics if a logged size
/// is left over, a failure no tensor explains: the chapter says none is.
pub fn sizes_table(
    book: &Book,
    tensors: &[(&str, Vec<u64>)],
    bytes_of: impl Fn(&[u64]) -> u64,
) -> Result<Table, BookError> {
    // Every size whose reservation failed after step 0, in any log.
    let mut failed_mid_run: BTreeSet<u64> = book
        .incidents()?
        .iter()
        .flat_map(|i| i.sizes(AttemptPhase::Run))
        .collect();
    let mut t = Table::new(["tensor", "shape", "bytes", "a logged mid-run failure?"]);
    for (what, shape) in tensors {
        let bytes = bytes_of(shape);
        let seen = if failed_mid_run.remove(&bytes) {
            "yes, exactly"
        } else {
            "no"
        };
        t.push([
            what.to_string(),
            format!("{shape:?} f32"),
            bytes.to_string(),
            seen.to_string(),
        ]);
    }
    assert!(
        failed_mid_run.is_empty(),
        "a logged size no tensor explains: {failed_mid_run:?}"
    );
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sizes_that_failed_mid_run_are_one_situ_tensor_each() {
        let book = Book::repository();
        let r = book.recipe("situ").unwrap();
        let n = r.tokens();
        let tensors = [
            ("one [N, f] intermediate", vec![n, r.d_ffn]),
            ("mid", vec![n, r.gate_up_width()]),
        ];
        let f32_bytes = |shape: &[u64]| shape.iter().product::<u64>() * 4;
        let t = sizes_table(&book, &tensors, f32_bytes).unwrap();
        assert_eq!(t.rows().len(), 2);
        assert!(t.rows().iter().all(|row| row[3] == "yes, exactly"));
        // The panic's size: one [N, f] intermediate, to the byte.
        assert_eq!(t.rows()[0][2], "33554432");
    }
}
