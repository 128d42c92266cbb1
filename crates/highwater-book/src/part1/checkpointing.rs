//! *Checkpointing changes the bill* (`src/part-1/checkpointing.md`): what its cells compute.

use cell_output::Table;
use highwater::{Activation, Checkpointing, Recipe, ffn};

use crate::bytes;

/// Bytes kept for backward by one expert call, per call and over a step's calls, for each
/// activation path of the wave under each checkpointing strategy, from `base` (the control's
/// recipe). The review priced one strategy and the wave ran the other: the table puts the same
/// recipe under both.
pub fn kept_table(base: &Recipe) -> Table {
    let mut t = Table::new([
        "path",
        "checkpointing",
        "buffers kept per call",
        "per call",
        "per step",
    ]);
    for activation in [
        Activation::Silu,
        Activation::SituTensor,
        Activation::SituFused,
    ] {
        for ckpt in [Checkpointing::None, Checkpointing::Balanced] {
            let r = base.with(activation, ckpt);
            let ledger = ffn::expert_ledger(&r);
            t.push([
                format!("{activation:?}"),
                format!("{ckpt:?}"),
                ledger.held_count().to_string(),
                bytes::show(ledger.held_bytes()),
                bytes::show(ledger.held_bytes() * r.calls()),
            ]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Book;

    #[test]
    fn balanced_checkpointing_shrinks_the_tensor_paths_bill_and_keeps_one_buffer() {
        let book = Book::repository();
        let base = book.recipe("small").unwrap();
        let t = kept_table(&base);
        assert_eq!(t.rows().len(), 6, "three paths under two strategies");
        let row = |path: &str, ckpt: &str| {
            t.rows()
                .iter()
                .find(|r| r[0] == path && r[1] == ckpt)
                .unwrap()
                .clone()
        };
        // The text: under Balanced the tensor path's call holds one buffer, `mid`, into backward.
        assert_eq!(row("SituTensor", "Balanced")[2], "1");
        let (none, balanced) = (
            ffn::expert_ledger(&base.with(Activation::SituTensor, Checkpointing::None)),
            ffn::expert_ledger(&base.with(Activation::SituTensor, Checkpointing::Balanced)),
        );
        assert!(balanced.held_bytes() < none.held_bytes());
        assert_eq!(row("SituTensor", "None")[3], bytes::show(none.held_bytes()));
    }
}
