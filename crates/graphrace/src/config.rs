//! A configuration of the serving step: the switches the incident's experiments flipped.
//!
//! Configurations are TOML files, one per configuration (`repro/graphrace/*.toml`), rather
//! than CLI flags: the book's cells and the `graphrace` binary read the same files, each file
//! says in a comment which experiment of the incident it stands for, and a rate printed
//! anywhere can be traced back to one named file. Every switch defaults to the setting that
//! corrupted, so a file states only what its experiment changed.

use basics::line_of;
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Element type of the indexer's keys, which sets the size of the transient the side reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKeys {
    /// Two bytes per element: the incident's.
    #[default]
    Bf16,
    /// One byte per element plus a scale per position: a transient too small for a row of
    /// logits.
    Fp8,
}

/// Whether the step is captured as a CUDA graph and replayed, or launched op by op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Captured once, replayed every step: the incident's.
    #[default]
    Captured,
    /// Launched op by op, not captured (in the model, on the main stream only: see
    /// [`Config::uses_side_stream`]).
    Eager,
}

/// Where the side stream joins back into main (`main` waits on the side's last kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Join {
    /// At the end of the step, after the LM head and the sampler: the incident's.
    #[default]
    End,
    /// Before the host frees the transient: everything after the free is ordered after the
    /// side's use of it.
    BeforeFree,
    /// Right after attention is launched.
    AfterAttention,
    /// Right before the LM head is launched.
    BeforeLmHead,
}

/// One configuration, validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Config {
    /// One word (the file's `name`) that labels the configuration in tables and figures.
    pub name: String,
    /// The element type of the indexer's keys.
    pub index_keys: IndexKeys,
    /// Captured or eager.
    pub mode: Mode,
    /// Multi-stream overlap: the indexer's work forked onto the side stream.
    pub overlap: bool,
    /// The LM head writes into a buffer kept outside the graph pool.
    pub logits_cached: bool,
    /// The differential test's hook: a clone of the MoE output stashed before the LM head.
    pub perturbing_clone: bool,
    /// `record_stream` on the side's use of the transient.
    pub record_stream: bool,
    /// Where the side joins main.
    pub join: Join,
    /// A second kernel on the side after the store, reading the transient too (a norm of the
    /// index keys): the side's use of the block lasts longer.
    pub second_side_kernel: bool,
    /// Main reads the index-K cache the side writes (the sparse attention's top-k selection,
    /// after the MoE): a race on memory the pool never hands out.
    pub cache_reader: bool,
}

impl Config {
    /// The configuration that corrupted: bf16 keys, captured, overlap on, nothing else.
    pub fn incident() -> Config {
        Config {
            name: "incident".into(),
            index_keys: IndexKeys::Bf16,
            mode: Mode::Captured,
            overlap: true,
            logits_cached: false,
            perturbing_clone: false,
            record_stream: false,
            join: Join::End,
            second_side_kernel: false,
            cache_reader: false,
        }
    }

    /// Whether the side stream exists in this configuration: overlap is on and the step is
    /// captured. In the model the eager step takes the single-stream path; see the book's
    /// "The mechanism" for why that is an assumption.
    pub fn uses_side_stream(&self) -> bool {
        self.overlap && self.mode == Mode::Captured
    }

    /// Parses and validates a configuration file's text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Config, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError {
            origin: origin.to_string(),
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            reason: e.message().trim().to_string(),
        })?;
        let name = file.name.get_ref().trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(ConfigError {
                origin: origin.to_string(),
                line: line_of(text, file.name.span().start),
                reason: "`name` must be one word, not empty".into(),
            });
        }
        if let (Some(record), false) = (&file.record_stream, file.overlap.unwrap_or(true))
            && *record.get_ref()
        {
            return Err(ConfigError {
                origin: origin.to_string(),
                line: line_of(text, record.span().start),
                reason: "`record_stream` needs `overlap = true`: without the side stream there is no cross-stream use to record".into(),
            });
        }
        let d = Config::incident();
        Ok(Config {
            name: name.to_string(),
            index_keys: file.index_keys.unwrap_or(d.index_keys),
            mode: file.mode.unwrap_or(d.mode),
            overlap: file.overlap.unwrap_or(d.overlap),
            logits_cached: file.logits_cached.unwrap_or(d.logits_cached),
            perturbing_clone: file.perturbing_clone.unwrap_or(d.perturbing_clone),
            record_stream: file.record_stream.is_some_and(|r| r.into_inner()),
            join: file.join.unwrap_or(d.join),
            second_side_kernel: file.second_side_kernel.unwrap_or(d.second_side_kernel),
            cache_reader: file.cache_reader.unwrap_or(d.cache_reader),
        })
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    name: Spanned<String>,
    index_keys: Option<IndexKeys>,
    mode: Option<Mode>,
    overlap: Option<bool>,
    logits_cached: Option<bool>,
    perturbing_clone: Option<bool>,
    record_stream: Option<Spanned<bool>>,
    join: Option<Join>,
    second_side_kernel: Option<bool>,
    cache_reader: Option<bool>,
}

/// A configuration file that cannot be used: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}: {reason}")]
pub struct ConfigError {
    /// The file (or the name the text was given).
    pub origin: String,
    /// 1-based.
    pub line: usize,
    /// What is wrong, in a sentence.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_incident() {
        let c = Config::parse("x.toml", "name = \"incident\"\n").unwrap();
        assert_eq!(c, Config::incident());
        let c = Config::parse("x.toml", "name = \"fp8\"\nindex_keys = \"fp8\"\n").unwrap();
        assert_eq!(c.index_keys, IndexKeys::Fp8);
        assert!(c.uses_side_stream());
    }

    #[test]
    fn errors_name_the_line() {
        let e = Config::parse("x.toml", "name = \"a\"\n\nindex_keys = \"fp4\"\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("unknown variant `fp4`"), "{e}");
        let e = Config::parse("x.toml", "name = \"a\"\noverlapp = true\n").unwrap_err();
        assert_eq!(
            (e.line, e.to_string().contains("unknown field `overlapp`")),
            (2, true)
        );
        let e = Config::parse("x.toml", "name = \"\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.toml:1: `name` must be one word, not empty"
        );
        let e = Config::parse(
            "x.toml",
            "name = \"a\"\noverlap = false\nrecord_stream = true\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
    }
}
