//! The incident's card and what Part I derives from it, each figure under one name wherever it
//! appears: **the card** (what the driver reports), **the cap** (the card less the desktop's
//! framebuffers: what `--cap card` leaves a run on the H200), **the pool's edge** (the cap less
//! the recipes' CUDA context: what the simulator's pool may take) and **the capped H200's edge**
//! (the cap less the H200's own context, as measured there).

use crate::{Book, BookError, bytes};

/// The capped rerun whose device figures [`CardFigures`] reads (every capped rerun records the
/// same device).
pub const CAPPED_RERUN: &str = "repro/results/rerun-situ-situ-tensor-cube-none-cap14.75GiB.json";

/// The card's figures, from the SiTU recipe's `[card]` and the capped rerun's device record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardFigures {
    /// The card, as the driver reports it.
    pub card: u64,
    /// What the desktop holds before the job starts.
    pub desktop: u64,
    /// The card less the desktop.
    pub cap: u64,
    /// The recipes' CUDA context.
    pub recipe_context: u64,
    /// The cap less the recipes' context: what the simulator's pool may take.
    pub edge: u64,
    /// The H200's CUDA context: what its capped pool did not get of the cap (its context as
    /// measured at start-up, to within a driver chunk).
    pub h200_context: u64,
    /// The cap less the H200's context: what the pool may take on the capped H200, measured.
    pub capped_edge: u64,
}

impl CardFigures {
    /// Reads the recipe and the capped rerun; refuses figures that do not add up.
    pub fn of(book: &Book) -> Result<CardFigures, BookError> {
        let card = book.recipe("situ")?.card;
        let device = book.rerun_record(CAPPED_RERUN)?.device;
        let cap = device
            .cap_bytes
            .ok_or_else(|| BookError::Refused("the capped rerun records no cap".into()))?;
        let f = CardFigures {
            card: card.total_bytes,
            desktop: card.desktop_bytes,
            cap,
            recipe_context: card.cuda_context_bytes,
            edge: card.pool_capacity(),
            h200_context: cap.saturating_sub(device.pool_capacity),
            capped_edge: device.pool_capacity,
        };
        // What the capped pool did not get of the cap is the H200's context, to a driver chunk.
        let context = device.total_bytes - device.free_at_start;
        if f.cap != f.card - f.desktop || f.h200_context.abs_diff(context) > 1 << 20 {
            return Err(BookError::Refused(format!(
                "the cap and the edges do not add up: {f:?}"
            )));
        }
        Ok(f)
    }

    /// The sentence that names them all, as the rerun chapter gives it; `edge_link` is a
    /// markdown link to where the pool's edge is used.
    pub fn sentence(&self, edge_link: &str) -> String {
        let s = bytes::show;
        format!(
            "The card is **{}**; less the desktop's {}, the cap is **{}**. Less the recipes' CUDA \
             context ({}), the pool's edge, {edge_link}, is **{}**; less the H200's own ({}), \
             the capped H200's edge is **{}**.",
            s(self.card),
            s(self.desktop),
            s(self.cap),
            s(self.recipe_context),
            s(self.edge),
            s(self.h200_context),
            s(self.capped_edge),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edges_are_the_cap_less_a_context() {
        let book = Book::repository();
        let f = CardFigures::of(&book).unwrap();
        assert_eq!(f.card, 16 << 30);
        assert!(
            f.capped_edge < f.edge && f.edge < f.cap && f.cap < f.card,
            "{f:?}"
        );
        assert!(f.sentence("[x](x.md)").contains("the cap is"));
    }
}
