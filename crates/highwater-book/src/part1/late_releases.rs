//! *The calibrated hypothesis: late releases* (`src/part-1/late-releases.md`): what its cells
//! compute.
//!
//! The chapter's cells keep on the page the calls that matter (a recipe read, [`simulate`]d
//! per seed, against the seed's log); the rows those calls fill, and the paragraph that checks
//! what the simulator and the logs agree on, live here.

use std::collections::BTreeSet;

use cell_output::{Markdown, Table};
use highwater::forensics::AttemptPhase;
use highwater::{Incident, Recipe, RunReport, simulate};

use crate::BookError;
use crate::part1::wall::{merge_seeds, seed_list};
use crate::reports::refused_sizes;
use crate::text::steps;
use crate::{Book, bytes};

/// The model's inputs as a table: each value of the recipe's card, stand-in and jitter, and
/// what it was fitted to (the fitted ones are the hypothesis; the rest are measured).
pub fn inputs_table(r: &Recipe) -> Table {
    let (card, j) = (r.card, r.jitter);
    let not_fitted = "not fitted";
    Table::new(["input", "value", "fitted to"])
        .row([
            "the card, as the driver reports it",
            &bytes::show(card.total_bytes),
            not_fitted,
        ])
        .row([
            "held by the desktop",
            &bytes::show(card.desktop_bytes),
            "not fitted: only its sum with the stand-in matters",
        ])
        .row([
            "the trainer's CUDA context",
            &bytes::show(card.cuda_context_bytes),
            not_fitted,
        ])
        .row([
            "the pool's edge: the card less the two above",
            &bytes::show(card.pool_capacity()),
            "—",
        ])
        .row([
            "stand-in: the rest of the model's activations",
            &bytes::show(r.rest.live_bytes),
            "the control fits with room to spare; the SiTU arm settles less than a page under the pool's edge",
        ])
        .row([
            "chance that a step is unlucky",
            &j.step_probability.to_string(),
            "the logged deaths, with the next row",
        ])
        .row([
            "releases made late in an unlucky step",
            &j.late_releases.to_string(),
            "the logged deaths, with the row above",
        ])
        .row([
            "reservations that may overtake a late one, at most",
            &j.max_lag.to_string(),
            not_fitted,
        ])
}

/// The columns of the per-arm table, one row per arm ([`arm_row`]).
pub const ARM_COLUMNS: [&str; 7] = [
    "arm",
    "seeds",
    "died at",
    "first failed reserve",
    "failed sizes",
    "peak in use",
    "reserved at the end",
];

/// Bytes that vary a little between seeds, as their range.
fn range(v: &[u64]) -> String {
    match (v.iter().min(), v.iter().max()) {
        (Some(lo), Some(hi)) if lo != hi => {
            format!("{}–{}", bytes::show(*lo), bytes::show(*hi))
        }
        (Some(b), _) => bytes::show(*b),
        _ => "—".into(),
    }
}

/// One arm's row of the per-arm table ([`ARM_COLUMNS`]): `runs` are the recipe's seeds
/// simulated, in the order of `r.seeds`. Steps that differ between seeds name their seeds
/// ([`merge_seeds`]); bytes give their range.
pub fn arm_row(r: &Recipe, runs: &[RunReport]) -> [String; 7] {
    assert_eq!(r.seeds.len(), runs.len(), "one run per seed of {}", r.arm());
    let mut columns: [Vec<(u64, String)>; 3] = Default::default();
    let (mut peak, mut end) = (Vec::new(), Vec::new());
    for (&seed, run) in r.seeds.iter().zip(runs) {
        let sizes: BTreeSet<u64> = run.failures.iter().map(|f| f.requested).collect();
        let values = [
            run.died_at
                .map_or("survived".into(), |s| format!("step {s}")),
            run.first_failure()
                .map_or("—".into(), |s| format!("step {s}")),
            sizes
                .iter()
                .map(|&b| bytes::show(b))
                .collect::<Vec<_>>()
                .join(", "),
        ];
        for (column, value) in columns.iter_mut().zip(values) {
            column.push((seed, value));
        }
        peak.push(run.high_water());
        end.push(run.final_reserved());
    }
    let [died, first, sizes] = columns.map(|c| merge_seeds(&c));
    [
        r.arm(),
        seed_list(&r.seeds),
        died,
        first,
        sizes,
        range(&peak),
        range(&end),
    ]
}

/// The columns of the simulated-against-logged table: per seed, a row from its log
/// ([`log_row`]) and one from the simulator ([`simulated_row`]).
pub const SIM_VS_LOG_COLUMNS: [&str; 5] = [
    "seed",
    "",
    "died at",
    "first failure after step 0",
    "failed sizes × count",
];

/// An empty cell as a dash.
fn or_dash(s: String) -> String {
    if s.is_empty() { "—".to_string() } else { s }
}

/// Seed `seed`'s logged row ([`SIM_VS_LOG_COLUMNS`]): its deaths, its first failure after
/// step 0, and each failed size with its count, as the log reports them.
pub fn log_row(seed: u64, log: &Incident) -> [String; 5] {
    let died = match (steps(&log.died_at), log.truncated) {
        (died, true) if died.is_empty() => "unknown (log cut short)".into(),
        (died, _) => or_dash(died),
    };
    let first = log
        .failures_in(AttemptPhase::Run)
        .find_map(|f| f.after_step);
    let sizes: Vec<String> = log
        .failures_in(AttemptPhase::Run)
        .map(|f| format!("{} × {}", f.bytes.map_or("?".into(), bytes::show), f.count))
        .collect();
    let first = first.map_or("—".into(), |s| format!("after step {s}"));
    [
        seed.to_string(),
        "log".into(),
        died,
        first,
        or_dash(sizes.join(", ")),
    ]
}

/// A simulated run's row ([`SIM_VS_LOG_COLUMNS`]), under its seed's logged one: its death,
/// its first failure, and each refused size with its count.
pub fn simulated_row(run: &RunReport) -> [String; 5] {
    let sizes: Vec<String> = refused_sizes(&run.failures)
        .iter()
        .map(|(b, c)| format!("{} × {c}", bytes::show(*b)))
        .collect();
    [
        String::new(),
        "simulated".to_string(),
        run.died_at
            .map_or("survived".into(), |s| format!("step {s}")),
        run.first_failure()
            .map_or("—".into(), |s| format!("at step {s}")),
        sizes.join(", "),
    ]
}

/// What the simulated SiTU arm and its logs agree on, checked: every seed dies on a logging
/// step, after failing to reserve one of the arm's activation sizes, at a step that depends on
/// the seed; and the window of those steps against the logged deaths'.
pub fn agreement(book: &Book) -> Result<Markdown, BookError> {
    let r = book.recipe("situ")?;
    let activation_sizes = [r.tokens() * r.d_ffn * 4, r.tokens() * r.gate_up_width() * 4];
    let mut simulated = Vec::new();
    let mut logged = Vec::new();
    for &seed in &r.seeds {
        let run = simulate(&r, seed, r.steps);
        let step = run.died_at.expect("every simulated SiTU run dies");
        assert_eq!(
            step % r.loss_read_every,
            0,
            "seed {seed} died off a logging step"
        );
        let first = run
            .failures
            .first()
            .expect("a run that dies has a failed reservation");
        assert!(
            activation_sizes.contains(&first.requested),
            "seed {seed}: first failure not an activation's size"
        );
        simulated.push(step);
        logged.extend(book.incident(&format!("ab2000_situ_s{seed}"))?.died_at);
    }
    simulated.sort();
    simulated.dedup();
    assert!(simulated.len() > 1, "the seeds all die at the same step");
    let (lo, hi) = (simulated[0], simulated[simulated.len() - 1]);
    let (log_lo, log_hi) = (
        logged.iter().min().expect("a logged death"),
        logged.iter().max().expect("a logged death"),
    );
    let logs = if (lo, hi) == (u64::from(*log_lo), u64::from(*log_hi)) {
        "the window the logged deaths fall in".to_string()
    } else {
        format!("where the logged deaths fall between steps {log_lo} and {log_hi}")
    };
    Ok(Markdown(format!(
        "What agrees: every simulated SiTU run dies on a logging step, at a step that depends on the \
         seed — between steps {lo} and {hi}, {logs} — after a failed reservation of one of the arm's \
         activation sizes, and no other arm dies."
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inputs_name_what_was_fitted() {
        let t = inputs_table(&Book::repository().recipe("situ").unwrap());
        assert_eq!(t.rows().len(), 8);
        // The hypothesis is the two jitter values fitted to the logged deaths.
        let fitted = t
            .rows()
            .iter()
            .filter(|r| r[2].starts_with("the logged deaths"));
        assert_eq!(fitted.count(), 2);
    }

    #[test]
    fn the_situ_arm_dies_in_the_simulator_and_in_its_logs() {
        let book = Book::repository();
        let r = book.recipe("situ").unwrap();
        let runs: Vec<RunReport> = r.seeds.iter().map(|&s| simulate(&r, s, r.steps)).collect();
        let row = arm_row(&r, &runs);
        assert_eq!(row[0], r.arm());
        assert!(!row[2].contains("survived"), "{row:?}");
        for (&seed, run) in r.seeds.iter().zip(&runs) {
            let log = log_row(
                seed,
                &book.incident(&format!("ab2000_situ_s{seed}")).unwrap(),
            );
            assert_eq!(
                (log[0].as_str(), log[1].as_str()),
                (&*seed.to_string(), "log")
            );
            let simulated = simulated_row(run);
            assert!(simulated[2].starts_with("step "), "{simulated:?}");
            assert_ne!(simulated[4], "", "{simulated:?}");
        }
        let text = agreement(&book).unwrap().0;
        assert!(
            text.starts_with("What agrees: every simulated SiTU run"),
            "{text}"
        );
    }

    #[test]
    fn the_control_survives_every_seed() {
        let r = Book::repository().recipe("small").unwrap();
        let runs: Vec<RunReport> = r.seeds.iter().map(|&s| simulate(&r, s, r.steps)).collect();
        let row = arm_row(&r, &runs);
        assert_eq!(
            (row[2].as_str(), row[3].as_str()),
            ("survived", "—"),
            "{row:?}"
        );
    }
}
