//! The dry run as the book's pages use it: a recorded run replayed on the H200's profile with
//! the GPU's kernels, and a program of a page's own measured on a dry H200.

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use cell_output::CellError;
use dryrun::{CardProfile, DryDevice, OnRefusal};
use highwater::conform::{Exactness, RerunRecord};
use situ::dry::{DryOutcome, pool_usage};

use crate::load::Book;

impl Book {
    /// The H200's card profile, shared as the dry runtime takes it.
    pub fn h200_card(&self) -> Result<Arc<CardProfile>, CellError> {
        Ok(Arc::new(self.h200()?))
    }

    /// `repro/results/NAME.json` replayed dry on the H200 with its autotune cache, against the
    /// record and its repeats: the record, the dry outcome, how close they are.
    pub fn replay(&self, name: &str) -> Result<(RerunRecord, DryOutcome, Exactness), CellError> {
        let (record, repeats) = self.rerun_with_repeats(name)?;
        let autotune = self.h200_autotune();
        let (outcome, exactness) =
            situ::dry::replay(&record, &repeats, self.h200_card()?, Some(&autotune))?;
        Ok((record, outcome, exactness))
    }

    /// The most bytes in use while burn runs `loss` on a dry H200, over what its inputs hold:
    /// `inputs` makes them (leaves that require grad, say), `loss` is the forward pass. Run
    /// three times, backward included, so that the first runs tune what the cache lacks; the
    /// last is measured.
    pub fn forward_peak<B, I>(
        &self,
        inputs: impl Fn(&DryDevice) -> I,
        loss: impl Fn(I) -> Tensor<B, 1>,
    ) -> Result<u64, CellError>
    where
        B: AutodiffBackend<Device = DryDevice>,
        I: Clone,
    {
        let card = self.h200_card()?;
        let capacity = card.free_at_start;
        let autotune = self.h200_autotune();
        let device = DryDevice::new(
            card,
            capacity,
            OnRefusal::Refuse,
            Some(&autotune),
            dryrun::TieBreak::First,
        )?;
        let mut peak = 0;
        for _ in 0..3 {
            let held = inputs(&device);
            let before = pool_usage::<B>(&device)?.in_use;
            device.memory().take_peak_in_use();
            let loss = loss(held.clone());
            pool_usage::<B>(&device)?;
            peak = device.memory().take_peak_in_use() - before;
            drop(loss.backward());
        }
        Ok(peak)
    }
}

/// [`Book::replay`] from the cells' directory.
pub fn replay(name: &str) -> Result<(RerunRecord, DryOutcome, Exactness), CellError> {
    Book::here().replay(name)
}

/// [`Book::forward_peak`] from the cells' directory.
pub fn forward_peak<B, I>(
    inputs: impl Fn(&DryDevice) -> I,
    loss: impl Fn(I) -> Tensor<B, 1>,
) -> Result<u64, CellError>
where
    B: AutodiffBackend<Device = DryDevice>,
    I: Clone,
{
    Book::here().forward_peak(inputs, loss)
}

/// [`Book::h200_card`] from the cells' directory.
pub fn h200_card() -> Result<Arc<CardProfile>, CellError> {
    Book::here().h200_card()
}
