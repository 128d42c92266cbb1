//! *The smallest fix, isolated* (`src/part-2/smallest-fix.md`): what its cells compute.

use cell_output::Table;
use graphrace::{Captured, Config, Draw, Replayer, Timing, Workload};

use crate::BookError;
use crate::bytes;

/// A switch as the tables write it.
pub fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// The factorial table: for each of `configs` (combinations of overlap, logits cache and
/// clone), its rate at `sessions` (one of the swept counts), its worst rate over 6 to 72
/// sessions in steps of 6, and the static check's races at `sessions`. Which switch clears the
/// race is read off its rows.
pub fn factorial_table(configs: &[Config], sessions: u32) -> Result<Table, BookError> {
    let at = format!("at {sessions} sessions");
    let races = format!("races at {sessions}");
    let mut t = Table::new([
        "overlap",
        "logits cached",
        "clone",
        at.as_str(),
        "worst, 6–72 sessions",
        races.as_str(),
    ]);
    for c in configs {
        let mut worst = (0.0, 0);
        let mut at_load = None;
        for s in super::mechanism::sessions() {
            let captured = Captured::new(c, s)?;
            let r = captured.rate(Timing::default(), Workload::default());
            if r.fraction() > worst.0 {
                worst = (r.fraction(), s);
            }
            // Its rate and its races at `sessions` are taken from the sweep's capture, not
            // captured and measured again.
            if s == sessions {
                at_load = Some((r, captured.check().races().count()));
            }
        }
        let (rate, races_at_load) = at_load.ok_or(format!("{sessions} sessions not swept"))?;
        t.push([
            on_off(c.overlap).to_string(),
            on_off(c.logits_cached).to_string(),
            on_off(c.perturbing_clone).to_string(),
            format!("{:.1} %", 100.0 * rate.fraction()),
            if worst.1 == 0 {
                "0 %".to_string()
            } else {
                format!("{:.1} % at {}", 100.0 * worst.0, worst.1)
            },
            races_at_load.to_string(),
        ]);
    }
    Ok(t)
}

/// What each named fix costs in the model at `sessions`: the sessions it corrupts, its mean
/// replay time over the default workload's replays (the same dice for every configuration),
/// and the graph pool's bytes. Serialising costs time, `record_stream` costs memory.
pub fn fix_cost_table(fixes: &[(&str, Config)], sessions: u32) -> Result<Table, BookError> {
    let w = Workload::default();
    let mut t = Table::new([
        "configuration",
        "sessions corrupted",
        "mean replay (µs)",
        "graph pool",
    ]);
    for (name, c) in fixes {
        let cap = Captured::new(c, sessions)?;
        let replayer = Replayer::new(&cap.graph, Timing::default());
        let mut total = 0.0;
        for replay in 0..w.replays {
            total += replayer
                .schedule(Draw {
                    seed: w.seed,
                    trial: 0,
                    replay,
                })
                .iter()
                .map(|s| s.end_us)
                .fold(0.0, f64::max);
        }
        let r = cap.rate(Timing::default(), w);
        t.push([
            name.to_string(),
            format!("{:.1} %", 100.0 * r.fraction()),
            format!("{:.1}", total / f64::from(w.replays)),
            bytes::show(cap.graph.pool_bytes),
        ]);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Book;

    fn base() -> Config {
        let book = Book::repository();
        book.graphrace_config("incident").unwrap()
    }

    #[test]
    fn overlap_alone_decides_the_factorial() {
        let mut configs = vec![];
        for overlap in [true, false] {
            for cached in [false, true] {
                for clone in [false, true] {
                    configs.push(Config {
                        overlap,
                        logits_cached: cached,
                        perturbing_clone: clone,
                        ..base()
                    });
                }
            }
        }
        let t = factorial_table(&configs, 60).unwrap();
        assert_eq!(t.rows().len(), 8);
        for row in t.rows() {
            // Overlap on: every row corrupts and races; off: clean everywhere and to the check.
            let clean = row[3] == "0.0 %" && row[4] == "0 %" && row[5] == "0";
            let racy = row[3] != "0.0 %" && row[4] != "0 %" && row[5] != "0";
            assert!(if row[0] == "on" { racy } else { clean }, "{row:?}");
        }
    }

    #[test]
    fn serialising_costs_time_and_record_stream_costs_pool() {
        let fixes = [
            ("incident (overlap on)", base()),
            (
                "overlap off",
                Config {
                    overlap: false,
                    ..base()
                },
            ),
            (
                "record_stream",
                Config {
                    record_stream: true,
                    ..base()
                },
            ),
        ];
        let t = fix_cost_table(&fixes, 60).unwrap();
        let rows = t.rows();
        assert_eq!(rows.len(), 3);
        assert_ne!(rows[0][1], "0.0 %", "{:?}", rows[0]);
        assert!(rows[1..].iter().all(|r| r[1] == "0.0 %"), "{rows:?}");
        let mean = |r: &[String]| r[2].parse::<f64>().unwrap();
        assert!(mean(&rows[1]) > mean(&rows[0]), "{rows:?}");
        assert!(mean(&rows[2]) < mean(&rows[1]), "{rows:?}");
        let pool = |c: &Config| Captured::new(c, 60).unwrap().graph.pool_bytes;
        assert!(pool(&fixes[2].1) > pool(&fixes[0].1));
    }
}
