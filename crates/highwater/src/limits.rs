//! What one recipe or one command may ask of the simulator, in one place, each limit with the
//! reason for its value. A run's work and memory grow with these counts; past a limit the
//! request is refused before any work, and the error names the limit, rather than the process
//! panicking, allocating petabytes or growing without output. Within them a run holds a few MB
//! (its step's trace, its report) and a step replays in at most seconds; the CLI streams its
//! runs behind a progress bar. Every value leaves the recipes in `repro/recipes` and the
//! runs in the book at least ten times inside it (`tests/wave.rs` checks): the wave runs 2 000
//! steps × 3 seeds, 12 expert calls and 901 rest-of-model tensors per step (about 4 000 pool
//! events), and 208 late releases that lag at most 24 reserves.
//!
//! Errors that quote input (a TOML value, a key, a line) quote it through [`quote`], so that a
//! 50 MB string in a recipe is not echoed whole.

use std::borrow::Cow;
use std::fmt;

/// The largest value of a count, and how an error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The constant's name, so that an error says where the limit is set.
    pub name: &'static str,
    /// The largest value allowed.
    pub max: u64,
    /// What it counts, for errors: `steps per run`.
    pub counts: &'static str,
}

impl Limit {
    /// Whether `value` is within the limit.
    pub fn allows(&self, value: u64) -> bool {
        value <= self.max
    }

    /// `value` when within the limit; else why not, to follow what was asked for: `is 7, above
    /// the limit of 5 steps per run (limits::MAX_STEPS)`.
    pub fn check(&self, value: u64) -> Result<u64, String> {
        if self.allows(value) {
            Ok(value)
        } else {
            Err(format!("is {value}, above {self}"))
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the limit of {} {} (limits::{})",
            self.max, self.counts, self.name
        )
    }
}

/// Steps of one run (a recipe's `training.steps`, `simulate --steps`). A run keeps five figures
/// per step (36 bytes) and replays every step it cannot prove a repeat of an earlier one:
/// 50 × the book's longest runs (the wave's 2 000 steps), a report of 3.6 MB.
pub const MAX_STEPS: Limit = Limit {
    name: "MAX_STEPS",
    max: 100_000,
    counts: "steps per run",
};

/// Seeds of one call (a recipe's `training.seeds`, `simulate --seeds`): each seed is a whole
/// run, so a typo like `1..10000000` would run for days. The book runs each recipe's 3 seeds;
/// its calibration swept 10.
pub const MAX_SEEDS: Limit = Limit {
    name: "MAX_SEEDS",
    max: 100_000,
    counts: "seeds per call",
};

/// Expert calls per step (`n_experts × max_iter`). Each call puts about 45 pool events into
/// every step and keeps a few tensors until backward: 1 000 calls make some 45 000 events per
/// step, 83 × the wave's 12 calls (a 64-expert stack looped 8 times is 512).
pub const MAX_EXPERT_CALLS: Limit = Limit {
    name: "MAX_EXPERT_CALLS",
    max: 1_000,
    counts: "expert calls per step",
};

/// Rest-of-model tensors per step (`live_bytes / tensor_bytes`). Each puts four pool events
/// into every step (its activation, and in backward a gradient that dies at once) and stays
/// live until backward: 11 × the wave's 901 tensors. Live tensors cost more than their events:
/// CubeCL's first-fit walks a page's slices at every reserve, so a step's replay grows with the
/// square of the small tensors crowding a page. With [`MAX_EXPERT_CALLS`], a step is at most
/// some 85 000 events, replayed in well under a second at the wave's sizes and in a few seconds
/// at the worst (measured: 10 000 1-KiB tensors beside 1 000 calls of a 1-wide model).
pub const MAX_REST_TENSORS: Limit = Limit {
    name: "MAX_REST_TENSORS",
    max: 10_000,
    counts: "rest-of-model tensors per step",
};

/// Late releases drawn per step (`jitter.late_releases`). Every step draws them, whatever its
/// luck, so that arms stay on one random stream: 48 × the calibrated 208, and already more than
/// the wave's step has releases (about 1 950).
pub const MAX_LATE_RELEASES: Limit = Limit {
    name: "MAX_LATE_RELEASES",
    max: 10_000,
    counts: "late releases per step",
};

/// Reserves a late release may wait behind (`jitter.max_lag`). A pending release is checked at
/// every reserve until it lands, so with [`MAX_LATE_RELEASES`] this bounds that work to 10⁸
/// checks per step (measured: a small part of a step at the limits); 400 × the calibrated 24
/// (one expert call's worth of ops), and a lag fits the `u32` the replay keeps it in.
pub const MAX_LAG: Limit = Limit {
    name: "MAX_LAG",
    max: 10_000,
    counts: "reserves a late release may wait behind",
};

/// The largest tensor a recipe or a decoder may ask for (1 PiB): far above any card, low
/// enough that no size computed from the shapes overflows.
pub const MAX_TENSOR_BYTES: Limit = Limit {
    name: "MAX_TENSOR_BYTES",
    max: 1 << 50,
    counts: "bytes per tensor",
};

/// Bytes of a recipe or decoder file: room for [`MAX_SEEDS`] seeds of 20 digits (2.2 MB)
/// beside the rest; the recipes in `repro/recipes` are under 4 KB. The CLI reads no further.
pub const MAX_RECIPE_BYTES: Limit = Limit {
    name: "MAX_RECIPE_BYTES",
    max: 4 << 20,
    counts: "bytes per recipe file",
};

/// Bytes of an incident file (`repro/incident/*.toml`): the wave's are under 1 KB (a log's
/// outcome and a few failure groups); 64 × that leaves room for a log with hundreds of groups,
/// and the parser reads no further.
pub const MAX_INCIDENT_BYTES: Limit = Limit {
    name: "MAX_INCIDENT_BYTES",
    max: 64 << 10,
    counts: "bytes per incident file",
};

/// Seeds in one `simulate --svg` figure: it keeps every step's peak of every seed (12 bytes
/// each) and gives each seed a legend row; 100 seeds of [`MAX_STEPS`] are 120 MB of points.
/// The book's figures draw at most 9 runs (3 arms × 3 seeds).
pub const MAX_FIGURE_SEEDS: Limit = Limit {
    name: "MAX_FIGURE_SEEDS",
    max: 100,
    counts: "seeds per figure",
};

/// Steps of one dry run (`highwater fit --steps`): each runs burn's whole training step over the
/// dry runtime (up to about a second for the bundled decoder at a large batch), and the bundled
/// models' pools settle by their third step.
pub const MAX_DRY_STEPS: Limit = Limit {
    name: "MAX_DRY_STEPS",
    max: 10_000,
    counts: "dry-run steps",
};

/// Events of one traced run (`highwater simulate --trace`, the timeline view): a trace keeps
/// about 48 bytes per event and its JSON lines about 200, so this is at most 100 MB in memory
/// and 400 MB on disk; it holds 500 steps of the wave's incident recipe (about 4 000 events a
/// step) and 2 000 steps of any recipe a quarter its size.
pub const MAX_TRACE_EVENTS: Limit = Limit {
    name: "MAX_TRACE_EVENTS",
    max: 2_000_000,
    counts: "trace events",
};

/// The largest batch `highwater fit --largest-batch` tries: its search doubles the batch up to
/// here, then bisects; the bundled models stop fitting below 1 000.
pub const MAX_SEARCH_BATCH: Limit = Limit {
    name: "MAX_SEARCH_BATCH",
    max: 1 << 20,
    counts: "sequences per batch searched",
};

/// Characters of input an error quotes: a key, a value or a line written by hand fits (the
/// recipes' value lines are under 70); the rest is summarized by its length.
pub const MAX_QUOTE_CHARS: usize = 80;

/// Characters of a message from the TOML parser, once its quotes are cut to
/// [`MAX_QUOTE_CHARS`]: its longest about a recipe (an unknown `[model]` key, listing the eight
/// it expects) is under 200.
pub const MAX_MESSAGE_CHARS: usize = 320;

/// `text` as an error may quote it: whole when at most [`MAX_QUOTE_CHARS`] characters, else its
/// first [`MAX_QUOTE_CHARS`] then `… (N bytes)`, cut at a character boundary.
pub fn quote(text: &str) -> Cow<'_, str> {
    clip(text, MAX_QUOTE_CHARS)
}

/// A message written by another crate (toml, serde) that may quote input between backticks or
/// double quotes (`unknown field `…``, `invalid type: string "…"`): every stretch between two
/// such marks goes through [`quote`], then the whole is cut to [`MAX_MESSAGE_CHARS`].
pub(crate) fn quote_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4 * MAX_MESSAGE_CHARS));
    let mut rest = message;
    while let Some(at) = rest.find(['`', '"']) {
        out.push_str(&quote(&rest[..at]));
        out.push_str(&rest[at..=at]);
        rest = &rest[at + 1..];
    }
    out.push_str(&quote(rest));
    clip(&out, MAX_MESSAGE_CHARS).into_owned()
}

fn clip(text: &str, max_chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => Cow::Owned(format!("{}… ({} bytes)", &text[..cut], text.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_names_itself_and_its_value() {
        assert_eq!(MAX_STEPS.check(100_000), Ok(100_000));
        assert_eq!(
            MAX_STEPS.check(100_001).unwrap_err(),
            "is 100001, above the limit of 100000 steps per run (limits::MAX_STEPS)"
        );
    }

    #[test]
    fn short_text_is_quoted_whole() {
        assert_eq!(quote("activation = \"relu\""), "activation = \"relu\"");
        let exact = "é".repeat(MAX_QUOTE_CHARS);
        assert_eq!(quote(&exact), exact.as_str());
    }

    /// Cut after MAX_QUOTE_CHARS characters, never inside one, with the full length in bytes.
    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        let text = "é".repeat(1000);
        let q = quote(&text);
        assert_eq!(q, format!("{}… (2000 bytes)", "é".repeat(MAX_QUOTE_CHARS)));
    }

    #[test]
    fn quotes_in_a_message_are_cut_and_the_rest_kept() {
        let key = "k".repeat(1_000_000);
        let m = format!("unknown field `{key}`, expected one of `batch`, `seq_len`");
        let q = quote_message(&m);
        assert_eq!(
            q,
            format!(
                "unknown field `{}… (1000000 bytes)`, expected one of `batch`, `seq_len`",
                "k".repeat(MAX_QUOTE_CHARS)
            )
        );
        let m = format!("invalid type: string {:?}, expected u64", "s".repeat(500));
        assert!(quote_message(&m).ends_with("… (500 bytes)\", expected u64"));
        // Many short quotes still make a bounded message.
        let m = "\"a\"".repeat(100_000);
        assert!(quote_message(&m).chars().count() < MAX_MESSAGE_CHARS + 20);
    }
}
