//! *The allocation profile* (`src/part-1/allocation-profile.md`): what its cells compute.
//!
//! The report counted the SiTU tensor path's operations; the chapter counts its buffers. These
//! helpers sort the ledger's rows by what they cost ([`OutputCounts`]) and add up what each
//! path keeps until backward, per call and per step ([`bill_chart`], [`bill_table`]).

use cell_output::Table;
use highwater::ffn;
use highwater::ledger::{Kept, LedgerRow, Storage};
use highwater_plot::{Bar, StackedBars};

use crate::BookError;
use crate::{Book, bytes};

/// The three paths the chapter compares: the label it shows, and the recipe under
/// `repro/recipes` that runs it.
pub const PATHS: [(&str, &str); 3] = [
    ("silu", "small"),
    ("situ-tensor", "situ"),
    ("situ-fused", "situ-fused"),
];

/// An activation's op outputs, counted by what they cost: the report's "~11" against the
/// buffers they get and the ones autodiff keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCounts {
    /// Op outputs, whatever their storage.
    pub outputs: usize,
    /// Zero-copy views of their input (the aligned slices of `mid`).
    pub views: usize,
    /// Outputs written in place over their input's buffer.
    pub in_place: usize,
    /// Outputs that get a buffer of their own.
    pub new_buffers: usize,
    /// Outputs autodiff keeps for backward (saved or backed up).
    pub kept: usize,
}

impl OutputCounts {
    /// Counts `rows`, the activation's ops ([`crate::activation_rows`]).
    pub fn of(rows: &[&LedgerRow]) -> OutputCounts {
        let count = |f: fn(&LedgerRow) -> bool| rows.iter().filter(|r| f(r)).count();
        OutputCounts {
            outputs: rows.len(),
            views: count(|r| matches!(r.storage, Storage::View(_))),
            in_place: count(|r| matches!(r.storage, Storage::InPlace(_))),
            new_buffers: count(|r| matches!(r.storage, Storage::New)),
            kept: count(|r| matches!(r.kept, Kept::Saved(_) | Kept::Backup(_))),
        }
    }

    /// The counts as the chapter's table, the report's count first.
    pub fn table(&self) -> Table {
        Table::new(["", "count"])
            .row([
                "op outputs (the report's \"~11\")",
                &self.outputs.to_string(),
            ])
            .row(["zero-copy views of mid", &self.views.to_string()])
            .row([
                "computed in place over their input's buffer",
                &self.in_place.to_string(),
            ])
            .row(["new buffers", &self.new_buffers.to_string()])
            .row([
                "outputs autodiff keeps for backward",
                &self.kept.to_string(),
            ])
    }
}

/// The role a kept buffer plays, from its ledger row's name: the three paths keep different
/// tensors, and grouping them by role lets the bars compare at a glance.
pub fn role(name: &str) -> &'static str {
    if name.starts_with("mid") {
        "mid = gate_up(x)"
    } else if name.starts_with("h =") && !name.ends_with(".sigmoid") {
        "h, the activation's output"
    } else {
        "the activation's intermediates"
    }
}

/// What each of the [`PATHS`] keeps alive until backward in one expert call, as one bar per
/// path with a segment per [`role`] in the order first met.
pub fn bill_chart(book: &Book) -> Result<StackedBars, BookError> {
    let mut bars = Vec::new();
    for (label, name) in PATHS {
        let ledger = ffn::expert_ledger(&book.recipe(name)?);
        let mut segments: Vec<(String, u64)> = Vec::new();
        for (tensor, bytes) in &ledger.held {
            let r = role(&ledger.rows[tensor.0].name);
            match segments.iter_mut().find(|(n, _)| n == r) {
                Some((_, total)) => *total += bytes,
                None => segments.push((r.to_string(), *bytes)),
            }
        }
        bars.push(Bar {
            arm: name.into(),
            label: label.into(),
            segments,
        });
    }
    Ok(StackedBars {
        title: "Kept until backward, one expert call".into(),
        bars,
    })
}

/// Bytes each of the [`PATHS`] keeps for backward, per call and per step (every expert call of
/// a step), and per step over the silu control.
pub fn bill_table(book: &Book) -> Result<Table, BookError> {
    let control = book.recipe("small")?;
    let control_step = ffn::expert_ledger(&control).held_bytes() * control.calls();
    let mut t = Table::new([
        "path",
        "buffers kept per call",
        "per call",
        "per step",
        "over the control, per step",
    ]);
    for (label, name) in PATHS {
        let r = book.recipe(name)?;
        let ledger = ffn::expert_ledger(&r);
        let per_step = ledger.held_bytes() * r.calls();
        t.push([
            label.to_string(),
            ledger.held_count().to_string(),
            bytes::show(ledger.held_bytes()),
            bytes::show(per_step),
            bytes::signed(per_step as i64 - control_step as i64),
        ]);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tensor_path_has_about_eleven_outputs_but_fewer_buffers() {
        let ledger = ffn::expert_ledger(&Book::repository().recipe("situ").unwrap());
        let c = OutputCounts::of(&crate::activation_rows(&ledger));
        // The report's "about eleven"; the two slices of `mid` are views, and some ops write in
        // place, so fewer outputs get a buffer of their own.
        assert!((9..=13).contains(&c.outputs), "{c:?}");
        assert_eq!(c.views, 2, "{c:?}");
        assert!(c.in_place > 0, "{c:?}");
        assert_eq!(c.outputs, c.views + c.in_place + c.new_buffers, "{c:?}");
        assert!(c.kept > 0 && c.new_buffers < c.outputs, "{c:?}");
        assert_eq!(c.table().rows().len(), 5);
    }

    #[test]
    fn the_bill_is_the_ledgers_kept_bytes_and_the_tensor_path_keeps_most() {
        let book = Book::repository();
        let chart = bill_chart(&book).unwrap();
        assert_eq!(chart.bars.len(), PATHS.len());
        let total = |i: usize| chart.bars[i].segments.iter().map(|s| s.1).sum::<u64>();
        for (i, (_, name)) in PATHS.iter().enumerate() {
            let ledger = ffn::expert_ledger(&book.recipe(name).unwrap());
            assert_eq!(total(i), ledger.held_bytes(), "{name}");
        }
        // The tensor path keeps more than the control, and the fused kernel less than it.
        assert!(total(1) > total(0) && total(1) > total(2));
        assert!(
            chart.bars[2]
                .segments
                .iter()
                .any(|s| s.0 == "mid = gate_up(x)")
        );
        assert!(
            chart
                .to_svg()
                .contains("Kept until backward, one expert call")
        );
        let t = bill_table(&book).unwrap();
        assert_eq!(t.rows().len(), 3);
        assert_eq!(t.rows()[0][4], bytes::signed(0));
        assert!(t.rows()[1][4].starts_with('+'), "{:?}", t.rows());
    }
}
