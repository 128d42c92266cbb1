//! The wave's arms trained dry on the incident's card: burn's own step over the H200's chip given
//! the card's memory, so that the pool's pages are sized as on a 16 GiB card and not as on the
//! capped H200. Under each edge of [`CardFigures`]: whose CUDA context is assumed decides it.

use std::sync::Arc;

use dryrun::{OnRefusal, TieBreak};
use highwater::trace::Phase;
use situ::dry::{DryPlan, dry_run};

use crate::part1::card::CardFigures;
use crate::{Book, BookError};

/// Steps per dry run: a fixed-shape step's pool settles by its third.
const STEPS: u64 = 3;

/// One arm trained dry with its pool held to one edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryFate {
    /// It ran every step; bytes reserved at the last.
    Settles(u64),
    /// The card refused it a page: step and phase.
    Dies(u64, Phase),
}

/// The three arms dry on the card: each under the capped H200's edge (the tighter), and the
/// SiTU arm under the pool's edge too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DryOnCard {
    /// The SiTU tensor path under the pool's edge (the recipes' context).
    pub situ_at_edge: DryFate,
    /// The SiTU tensor path under the capped H200's edge (the H200's context).
    pub situ_at_capped_edge: DryFate,
    /// The silu control under the capped H200's edge.
    pub control: DryFate,
    /// The fused kernel under the capped H200's edge.
    pub fused: DryFate,
}

impl DryOnCard {
    /// Four dry runs of a few steps each, on CubeBackend with the H200's kernels.
    pub fn of(book: &Book, card: &CardFigures) -> Result<DryOnCard, BookError> {
        let chip = Arc::new(book.h200()?.with_memory(card.card));
        let autotune = book.h200_autotune();
        let run = |recipe: &str, capacity: u64| -> Result<DryFate, BookError> {
            let plan = DryPlan {
                steps: STEPS,
                seed: 1,
                capacity,
                on_refusal: OnRefusal::Refuse,
                log_every: STEPS,
                tie_break: TieBreak::First,
                schedule: dryrun::Schedule::default(),
            };
            let outcome = dry_run(&book.recipe(recipe)?, &plan, chip.clone(), Some(&autotune))
                .map_err(|e| BookError::Refused(e.to_string()))?;
            Ok(match (&outcome.died, outcome.steps.last()) {
                (Some(d), _) => DryFate::Dies(d.step, d.phase),
                (None, Some(last)) => DryFate::Settles(last.reserved),
                (None, None) => return Err(BookError::Refused(format!("{recipe}: no step ran"))),
            })
        };
        Ok(DryOnCard {
            situ_at_edge: run("situ", card.edge)?,
            situ_at_capped_edge: run("situ", card.capped_edge)?,
            control: run("small", card.capped_edge)?,
            fused: run("situ-fused", card.capped_edge)?,
        })
    }
}
