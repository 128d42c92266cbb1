//! How the verdict moves with the one fitted figure under it: the stand-in for the rest of the
//! model (`rest_of_model.live_bytes`), the activations of the parts the simulator does not
//! model op by op. Nobody measured it; the recipe fits it to the logs. So the verdict says, with
//! it, for which stand-ins an arm's settled pool fits the card.

use highwater::{Recipe, simulate};

/// Steps simulated per trial: a fixed-shape step settles by its second.
const STEPS: u64 = 3;

/// The stand-in's thresholds for one arm and where the fitted value sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandIn {
    /// The fitted stand-in, bytes.
    pub fitted: u64,
    /// The largest stand-in (to `resolution`) with which the arm's settled pool fits the card
    /// and it survives its first steps, with no late release.
    pub fits_up_to: u64,
    /// Bytes the settled pool holds with the fitted stand-in.
    pub settled: u64,
    /// What the card leaves the pool.
    pub capacity: u64,
}

/// Whether `recipe` with a stand-in of `rest` bytes survives its first steps, releases in
/// order (no jitter), and what its pool then holds.
fn settles(recipe: &Recipe, rest: u64) -> Option<u64> {
    let mut r = recipe.clone();
    r.rest.live_bytes = rest;
    r.jitter.step_probability = 0.0;
    r.loss_read_every = 1;
    let report = simulate(&r, 1, STEPS);
    report
        .died_at
        .is_none()
        .then(|| report.reserved.last().copied().unwrap_or(0))
}

/// [`StandIn`] for `recipe`, the threshold found to within `resolution` bytes by bisection
/// (each trial simulates a few steps).
pub fn stand_in(recipe: &Recipe, resolution: u64) -> StandIn {
    let fitted = recipe.rest.live_bytes;
    let capacity = recipe.card.pool_capacity();
    let (mut fits, mut dies) = (0, capacity);
    while dies - fits > resolution.max(1) {
        let mid = fits + (dies - fits) / 2;
        if settles(recipe, mid).is_some() {
            fits = mid;
        } else {
            dies = mid;
        }
    }
    StandIn {
        fitted,
        fits_up_to: fits,
        settled: settles(recipe, fitted).unwrap_or(0),
        capacity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_situ_arm_sits_just_under_its_threshold_and_the_control_far_under() {
        let book = crate::Book::repository();
        let (situ, control) = (book.recipe("situ").unwrap(), book.recipe("small").unwrap());
        let s = stand_in(&situ, 1 << 20);
        let c = stand_in(&control, 1 << 20);
        // Fitted so that SiTU's settled pool sits under the edge by less than one 64 MiB page.
        assert!(s.fitted <= s.fits_up_to, "{s:?}");
        assert!(s.fits_up_to - s.fitted < 64 << 20, "{s:?}");
        assert!(
            s.settled <= s.capacity && s.capacity - s.settled < 128 << 20,
            "{s:?}"
        );
        // The control fits with gigabytes to spare: the surplus separates the arms.
        eprintln!("{s:?}\n{c:?}");
        assert_eq!(c.fitted, s.fitted);
        assert!(c.fits_up_to > s.fits_up_to + (1 << 30), "{c:?} {s:?}");
    }
}
