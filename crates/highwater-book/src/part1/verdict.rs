//! *The verdict*'s one account of the death: each question the incident raises, answered by the
//! source that can answer it (the H200, the dry run, the calibrated simulator, the logs), every
//! figure read from the repository's records or computed here (the arms dry on the card).

use cell_output::Table;
use highwater::recipe::written_name;
use highwater::trace::Phase;
use highwater::{Backend, Checkpointing, simulate};

use crate::part1::wall;
use crate::{Book, BookError, bytes};

pub mod dry;
pub mod stand_in;
pub mod surplus;

pub use surplus::surplus_table;

use crate::part1::card::CardFigures;
use dry::{DryFate, DryOnCard};
use stand_in::{StandIn, stand_in};

/// The capped H200 reruns of the wave's three arms, by recipe and arm.
const CAPPED: [&str; 3] = ["situ-situ-tensor", "small-silu", "situ-fused-situ-fused"];

/// The wall's candidates that kill a settled run late, at one step for every seed (padding's
/// deaths move with the seed but come within the first steps).
const LATE_KILLERS: [&str; 2] = ["loader", "eval"];

/// The figures behind the account.
#[derive(Debug, Clone)]
pub struct Account {
    /// Bytes in use after the forward, step 2, over the control: the H200, CubeBackend.
    pub surplus_over_control: i64,
    /// The SiTU arm against the fitted stand-in.
    pub situ: StandIn,
    /// The control against the same stand-in.
    pub control: StandIn,
    /// The capped tensor path's death on the H200: step and phase.
    pub capped_death: (u64, Phase),
    /// Steps the capped control and fused kernel ran, all of them alive.
    pub survivors_ran: usize,
    /// The H200's memory, which sizes its pages.
    pub gpu_bytes: u64,
    /// The incident's card, its cap and the pool's edges.
    pub card: CardFigures,
    /// The arms trained dry on the card's own pages.
    pub dry: DryOnCard,
    /// The sizes whose reservations failed after step 0 in the SiTU logs, each one tensor of the
    /// activation.
    pub failed: Vec<u64>,
    /// The first and last step at which the loader's and the evaluation's capped runs died on
    /// the H200.
    pub wall_deaths: (u64, u64),
    /// The calibrated model's death step per seed of the SiTU recipe (`None`: survived).
    pub modelled: Vec<(u64, Option<u64>)>,
    /// The death steps each SiTU log records, by seed, attempt after attempt (none: cut short).
    pub logged: Vec<(u64, Vec<u32>)>,
}

impl Account {
    /// Reads and computes every figure (seconds: the SiTU recipe's seeds simulated, four short
    /// dry runs).
    pub fn of(book: &Book) -> Result<Account, BookError> {
        let refused = |what: &str| BookError::Refused(what.to_string());
        let surplus = book.measured_surplus(Backend::Cube, Checkpointing::None)?;
        let (situ, control) = (book.recipe("situ")?, book.recipe("small")?);
        let capped = CAPPED
            .iter()
            .map(|name| {
                book.rerun_record(format!(
                    "repro/results/rerun-{name}-cube-none-cap14.75GiB.json"
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let death = capped[0]
            .died
            .as_ref()
            .ok_or_else(|| refused("the capped tensor path survived"))?;
        if capped[1..].iter().any(|r| r.died.is_some()) {
            return Err(refused("a capped control or fused run died"));
        }
        // Each late killer dies at one step for every seed, and the dry run predicts it.
        let runs = book.wall_runs("capped")?;
        let mut wall = Vec::new();
        for name in LATE_KILLERS {
            let mut steps = Vec::new();
            for r in runs.iter().filter(|r| wall::candidate(r) == name) {
                steps.push(wall::predicted_death(book, r)?.step);
            }
            if steps.windows(2).any(|w| w[0] != w[1]) {
                return Err(refused("a late killer died at different steps"));
            }
            wall.extend(steps);
        }
        // Every size that failed mid-run is one tensor of the activation: `[N, f]` or `[N, 2f]`.
        let tensors = [situ.d_ffn, situ.gate_up_width()]
            .map(|width| highwater::Shape::from([situ.tokens(), width]).bytes(situ.dtype));
        let mut failed: Vec<u64> = book
            .incidents()?
            .iter()
            .filter(|i| i.arm == "situ")
            .flat_map(|i| {
                i.sizes(highwater::forensics::AttemptPhase::Run)
                    .collect::<Vec<_>>()
            })
            .collect();
        failed.sort_unstable();
        failed.dedup();
        if failed.is_empty() || failed.iter().any(|b| !tensors.contains(b)) {
            return Err(refused(
                "a mid-run failure is not one of the activation's tensors",
            ));
        }
        let first = *wall
            .iter()
            .min()
            .ok_or_else(|| refused("no capped wall death"))?;
        let last = *wall.iter().max().unwrap_or(&first);
        let card = CardFigures::of(book)?;
        Ok(Account {
            surplus_over_control: surplus.over_control,
            situ: stand_in(&situ, 1 << 20),
            control: stand_in(&control, 1 << 20),
            capped_death: (death.step, death.phase),
            survivors_ran: capped[1].steps.len().min(capped[2].steps.len()),
            gpu_bytes: capped[0].device.total_bytes,
            card,
            dry: DryOnCard::of(book, &card)?,
            failed,
            wall_deaths: (first, last),
            modelled: situ
                .seeds
                .iter()
                .map(|&seed| (seed, simulate(&situ, seed, situ.steps).died_at))
                .collect(),
            logged: book
                .incidents()?
                .into_iter()
                .filter(|i| i.arm == "situ")
                .map(|i| (i.seed, i.died_at))
                .collect(),
        })
    }

    /// The account as the chapter shows it: question, answer, evidence.
    pub fn table(&self) -> Table {
        let (s, c, card) = (&self.situ, &self.control, &self.card);
        let (step, phase) = self.capped_death;
        let (first, last) = self.wall_deaths;
        let show = bytes::show;
        let rows = [
            (
                "Does the tensor path hold more than the control?",
                format!(
                    "Yes: {} more in use after the forward, per step, on the H200.",
                    show(self.surplus_over_control.unsigned_abs())
                ),
                "measured",
            ),
            (
                "Does that alone overflow the incident's card?",
                format!(
                    "Unknown: it depends on the rest of the model, which no log sizes. With a \
                     stand-in fitted to the logs ({}), the simulated arm settles {} under the \
                     pool's edge ({}) and the control {}. A stand-in over {} kills the arm in \
                     its first steps, against the logs; the control fits up to {}.",
                    show(s.fitted),
                    show(s.capacity - s.settled),
                    show(card.edge),
                    show(c.capacity - c.settled),
                    show(s.fits_up_to),
                    show(c.fits_up_to)
                ),
                "simulated, fitted",
            ),
            (
                "Does it fit a card capped to what the incident's left?",
                format!(
                    "No: on the capped H200 (its edge {}) the tensor path dies in step {step} \
                     ({}); the control and the fused kernel run all {} steps. The H200's pages \
                     are sized for its {}, larger than a {} card's.",
                    show(card.capped_edge),
                    written_name(&phase),
                    self.survivors_ran,
                    show(self.gpu_bytes),
                    show(card.card)
                ),
                "measured",
            ),
            (
                "And on a 16 GiB card's own pages?",
                self.dry_answer(),
                "dry, fitted",
            ),
            (
                "Can a run whose step fits die hundreds of steps in?",
                format!(
                    "Yes: data-loader threads and an evaluation pass grow other pools and kill \
                     capped runs at steps {first} to {last}, the same step for every seed, each \
                     predicted to the step by the dry run."
                ),
                "measured, dry",
            ),
            (
                "Why did the incident's death step move with the seed?",
                format!(
                    "Not known. Logged: {}. Simulated, with late releases fitted to those logs: \
                     {}; {}. No run on hardware has shown such releases.",
                    self.logged_deaths(),
                    self.simulated_deaths(),
                    self.differences()
                ),
                "incident; simulated, fitted",
            ),
            (
                "What failed?",
                format!(
                    "Reservations of {}: each exactly one tensor of the activation at the \
                     recipe's shapes.",
                    self.failed
                        .iter()
                        .map(|&b| show(b))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "incident, derived",
            ),
        ];
        let mut t = Table::new(["question", "what the evidence shows", "evidence"]);
        for (question, answer, evidence) in rows {
            t.push([question.to_string(), answer, evidence.to_string()]);
        }
        t
    }

    /// The arms dry on the card's own pages, under each edge.
    fn dry_answer(&self) -> String {
        let (card, dry) = (&self.card, &self.dry);
        let fate = |f: DryFate, edge: u64| match f {
            DryFate::Settles(reserved) => {
                format!("settles {} under it", bytes::show(edge - reserved))
            }
            DryFate::Dies(step, phase) => {
                format!("dies in step {step} ({})", written_name(&phase))
            }
        };
        format!(
            "It turns on the CUDA context, which no log sizes. Dry, with the fitted stand-in: \
             under the pool's edge ({}, the recipes' context) the tensor path {}; under the \
             capped H200's edge ({}, the H200's context) it {}, where the control {} and the \
             fused kernel {}.",
            bytes::show(card.edge),
            fate(dry.situ_at_edge, card.edge),
            bytes::show(card.capped_edge),
            fate(dry.situ_at_capped_edge, card.capped_edge),
            fate(dry.control, card.capped_edge),
            fate(dry.fused, card.capped_edge)
        )
    }

    /// Each SiTU log's deaths: `seed 1: 400 then 300`, or that it was cut short.
    fn logged_deaths(&self) -> String {
        let per_seed = self.logged.iter().map(|(seed, steps)| {
            if steps.is_empty() {
                format!("seed {seed}: cut before any step")
            } else {
                let steps: Vec<String> = steps.iter().map(u32::to_string).collect();
                format!("seed {seed}: {}", steps.join(" then "))
            }
        });
        per_seed.collect::<Vec<_>>().join("; ")
    }

    /// The calibrated model's death per seed.
    fn simulated_deaths(&self) -> String {
        let per_seed = self.modelled.iter().map(|(seed, d)| match d {
            Some(step) => format!("seed {seed}: {step}"),
            None => format!("seed {seed}: none"),
        });
        per_seed.collect::<Vec<_>>().join("; ")
    }

    /// Simulated against logged, for each seed whose log records a death: which attempt it
    /// matches, else how many steps from the nearest.
    fn differences(&self) -> String {
        let mut out = Vec::new();
        for (seed, simulated) in &self.modelled {
            let logged = self.logged.iter().find(|(s, _)| s == seed);
            let (Some(sim), Some((_, steps))) = (simulated, logged) else {
                continue;
            };
            if let Some(k) = steps.iter().position(|&l| u64::from(l) == *sim) {
                out.push(format!("seed {seed} dies where its attempt {} did", k + 1));
            } else if let Some(&near) = steps.iter().min_by_key(|&&l| u64::from(l).abs_diff(*sim)) {
                let (by, way) = (
                    u64::from(near).abs_diff(*sim),
                    if *sim < u64::from(near) {
                        "earlier"
                    } else {
                        "later"
                    },
                );
                out.push(format!("seed {seed} dies {by} steps {way} than its log"));
            }
        }
        out.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_reads_every_source_and_keeps_them_apart() {
        let book = Book::repository();
        let a = Account::of(&book).unwrap();
        assert!(a.surplus_over_control > 1 << 30, "{a:?}");
        assert_eq!(a.capped_death.0, 1, "{a:?}");
        assert!(a.survivors_ran >= 100 && a.wall_deaths.0 >= 100, "{a:?}");
        // The calibrated model kills every seed of the recipe; the logs record each death.
        assert!(a.modelled.iter().all(|(_, d)| d.is_some()), "{a:?}");
        assert!(a.logged.iter().any(|(_, steps)| !steps.is_empty()));
        assert!(
            a.gpu_bytes > 8 * a.card.card && !a.failed.is_empty(),
            "{a:?}"
        );
        // Dry on the card's own pages: the context decides the tensor path; the others settle.
        assert!(matches!(a.dry.situ_at_edge, DryFate::Settles(_)), "{a:?}");
        assert!(
            matches!(a.dry.situ_at_capped_edge, DryFate::Dies(..)),
            "{a:?}"
        );
        assert!(matches!(a.dry.control, DryFate::Settles(_)), "{a:?}");
        assert!(matches!(a.dry.fused, DryFate::Settles(_)), "{a:?}");
        let t = a.table();
        assert_eq!(t.rows().len(), 7);
        eprintln!("{}", a.differences());
        assert!(!a.differences().is_empty());
    }
}
