//! Part II's incident as data: the experiments of the hunt
//! (`repro/incident/graphrace/experiments.toml`).

use serde::Deserialize;

/// One experiment of the hunt, as the incident report gives it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// What the responders called it (`baseline`, `eager`, …).
    pub name: String,
    /// What was changed.
    pub change: String,
    /// The load it was measured under, as written (`60 sessions × 4 rounds`).
    pub load: String,
    /// The rate as the report wrote it (`~15–18 %`).
    pub rate: String,
    /// The rate's numeric reading, a fraction of sessions, where the report gives a number.
    pub rate_low: Option<f64>,
    /// The high end of that reading.
    pub rate_high: Option<f64>,
    /// What the result excluded.
    pub ruled_out: String,
    /// The configuration in `repro/graphrace/` that stands for it, where the model has one.
    pub model: Option<String>,
}

impl Experiment {
    /// The session counts the load names, in order: `3 runs at 40 sessions; then 60 sessions ×
    /// 4 rounds` gives 40 and 60.
    pub fn sessions(&self) -> Vec<u32> {
        let chunks: Vec<&str> = self.load.split(" sessions").collect();
        chunks[..chunks.len() - 1]
            .iter()
            .filter_map(|c| c.rsplit(' ').next()?.parse().ok())
            .collect()
    }

    /// The rounds of each session, where the load names them (`× 4 rounds`).
    pub fn rounds(&self) -> Option<u32> {
        let (before, _) = self.load.split_once(" rounds")?;
        before.rsplit(' ').next()?.parse().ok()
    }

    /// The numeric rate, low and high, where the report gives a number.
    pub fn rates(&self) -> Option<(f64, f64)> {
        Some((self.rate_low?, self.rate_high?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_load(load: &str) -> Experiment {
        Experiment {
            name: "x".into(),
            change: String::new(),
            load: load.into(),
            rate: String::new(),
            rate_low: Some(0.1),
            rate_high: None,
            ruled_out: String::new(),
            model: None,
        }
    }

    #[test]
    fn loads_name_sessions_and_rounds() {
        let e = with_load("60 sessions × 4 rounds");
        assert_eq!((e.sessions(), e.rounds()), (vec![60], Some(4)));
        let e = with_load("3 runs at 40 sessions; then 60 sessions × 4 rounds");
        assert_eq!((e.sessions(), e.rounds()), (vec![40, 60], Some(4)));
        let e = with_load("one run, step 3546");
        assert_eq!((e.sessions(), e.rounds()), (vec![], None));
        assert_eq!(e.rates(), None, "a low without a high is no rate");
    }
}
