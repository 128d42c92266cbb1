//! The known misses and known dry differences, as read from their files.

use serde::Deserialize;

/// A recorded run the simulator is known to miss, and why (`conform-known-misses.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownMiss {
    /// The record's name (`rerun-…`, without `.json`).
    pub run: String,
    /// Why the simulator misses it.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownMissFile {
    #[serde(default)]
    miss: Vec<KnownMiss>,
}

/// Parses a known-misses file; `origin` names it in errors.
pub fn parse_known_misses(origin: &str, text: &str) -> Result<Vec<KnownMiss>, String> {
    toml::from_str::<KnownMissFile>(text)
        .map(|f| f.miss)
        .map_err(|e| format!("{origin}: {e}"))
}

/// A recorded run whose dry replay is known to differ from the GPU beyond the GPU's own
/// spread, in which figures, and why (`conform-dry-known.toml`). Its other figures, how many
/// steps it completed and how it ended must still match.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownDryDifference {
    /// The record's name (without `.json`).
    pub run: String,
    /// `in_use_after_forward`, `in_use_after_backward` or `reserved`.
    pub figures: Vec<String>,
    /// Why they differ.
    pub reason: String,
    /// Known only on a host with fewer cores than this: where the difference is host timing,
    /// and with as many cores the replays were measured to agree with the GPU.
    #[serde(default)]
    pub below_cores: Option<usize>,
}

impl KnownDryDifference {
    /// Whether the difference is known on a host with `cores` cores.
    pub fn applies_on(&self, cores: usize) -> bool {
        self.below_cores.is_none_or(|n| cores < n)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownDryFile {
    #[serde(default)]
    difference: Vec<KnownDryDifference>,
}

/// Parses a known-dry-differences file; `origin` names it in errors (an unknown figure too).
pub fn parse_known_dry(origin: &str, text: &str) -> Result<Vec<KnownDryDifference>, String> {
    let known = toml::from_str::<KnownDryFile>(text)
        .map(|f| f.difference)
        .map_err(|e| format!("{origin}: {e}"))?;
    const FIGURES: [&str; 3] = ["in_use_after_forward", "in_use_after_backward", "reserved"];
    for k in &known {
        if let Some(f) = k.figures.iter().find(|f| !FIGURES.contains(&f.as_str())) {
            return Err(format!(
                "{origin}: run {}: `{f}` is not a figure ({FIGURES:?})",
                k.run
            ));
        }
    }
    Ok(known)
}
