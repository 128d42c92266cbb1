//! Tables several chapters print the same way.

use cell_output::Table;
use highwater::{Ledger, LedgerRow};

use crate::bytes;

/// A ledger op by op: op, tensor, shape, the bytes of a new buffer (`—` when the op takes
/// none), where its result lives, whether backward keeps it, and why.
pub fn ledger_table(ledger: &Ledger) -> Table {
    let mut t = Table::new([
        "op",
        "tensor",
        "shape",
        "new buffer",
        "storage",
        "kept",
        "why",
    ]);
    for row in &ledger.rows {
        let mut cells = row.cells();
        cells[3] = if row.bytes == 0 {
            "—".into()
        } else {
            bytes::show(row.bytes)
        };
        t.push(cells);
    }
    t
}

/// The ops of the expert's activation alone: the ledger rows between `mid` (the `gate_up`
/// projection) and the down projection (`out`), as [`highwater::ffn::expert_ledger`] names them.
pub fn activation_rows(ledger: &Ledger) -> Vec<&LedgerRow> {
    ledger
        .rows
        .iter()
        .skip_while(|r| !r.name.starts_with("mid"))
        .skip(1)
        .take_while(|r| !r.name.starts_with("out"))
        .collect()
}
