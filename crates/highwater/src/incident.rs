//! What the incident's trainer logs said, as data: one `repro/incident/*.toml` per log, its
//! facts transcribed once from the incident report so that every table is computed from them.
//! Read like a [`Recipe`](crate::Recipe): the TOML as written (serde, unknown keys refused),
//! then checked for what no log can say (more deaths than attempts, a run both completed and
//! cut short, a failure counted zero times), each error with its file, line and reason. The
//! library never opens files: callers pass the text and a name for it.
//!
//! ```toml
//! log = "ab2000_situ_s3.log"
//! arm = "situ"
//! seed = 3
//! attempts = 1               # attempts appended to the log
//! died_at = [200]            # the step each dying attempt died at, in log order
//! completed = false          # the last attempt printed its done line
//! truncated = false          # the log is cut short
//! death = "train failed: step {step}: device error (loss is not a scalar)"
//!
//! [[failures]]               # failed reserves of one size in one phase
//! bytes = 33554432           # the size asked for; left out where the report gives none
//! count = 8
//! phase = "run"              # `init`: before step 0 printed; `run`: after it
//! after_step = 100           # the last step line before the first of them, if known
//! ```

use serde::Deserialize;
use toml::Spanned;

use crate::forensics::AttemptPhase;
use crate::limits::{self, MAX_INCIDENT_BYTES, MAX_TENSOR_BYTES};
use crate::recipe::{InputError, from_toml};
use basics::line_of;

/// What is wrong with an incident file, and where: the error of every checked input file.
pub type IncidentError = InputError;

/// Failed reserves of one size in one phase, as the log counted them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedFailure {
    /// The size asked for; `None` where the report gives only the count.
    pub bytes: Option<u64>,
    /// How many reserves of it failed (at least 1).
    pub count: u32,
    /// Before step 0 printed, or after.
    pub phase: AttemptPhase,
    /// For [`AttemptPhase::Run`]: the last step line printed before the first of them, if known.
    pub after_step: Option<u32>,
}

/// One trainer log's facts, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    /// Where it came from (a file name, or whatever the caller says).
    pub origin: String,
    /// The log's file name.
    pub log: String,
    /// The arm that wrote it (`situ`, `moe`, …).
    pub arm: String,
    /// The seed the attempts ran with.
    pub seed: u64,
    /// Attempts appended to the log (at least 1).
    pub attempts: u32,
    /// The step each dying attempt died at, in log order.
    pub died_at: Vec<u32>,
    /// The last attempt printed its done line.
    pub completed: bool,
    /// The log is cut short (no header, or a last attempt that neither died nor completed).
    pub truncated: bool,
    /// The death line as the log prints it, `{step}` standing for the step.
    pub death: Option<String>,
    /// Failed reserves by size and phase, in the file's order.
    pub failures: Vec<LoggedFailure>,
}

/// `[[failures]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureFile {
    bytes: Option<Spanned<u64>>,
    count: Spanned<u32>,
    phase: Spanned<AttemptPhase>,
    after_step: Option<Spanned<u32>>,
}

/// Stage one: the file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IncidentFile {
    log: Spanned<String>,
    arm: Spanned<String>,
    seed: u64,
    attempts: Spanned<u32>,
    died_at: Spanned<Vec<u32>>,
    completed: Spanned<bool>,
    truncated: Spanned<bool>,
    death: Option<Spanned<String>>,
    #[serde(default)]
    failures: Vec<FailureFile>,
}

impl Incident {
    /// Parses and checks `text`; `origin` names it in errors. Text past
    /// [`MAX_INCIDENT_BYTES`] is refused unread.
    pub fn parse(origin: &str, text: &str) -> Result<Incident, IncidentError> {
        let file: IncidentFile = from_toml(origin, text, MAX_INCIDENT_BYTES)?;
        Self::validate(origin, text, file)
    }

    fn validate(origin: &str, text: &str, f: IncidentFile) -> Result<Incident, IncidentError> {
        let err = |field: &'static str, span: std::ops::Range<usize>, reason: String| {
            IncidentError::Invalid {
                origin: origin.to_string(),
                line: line_of(text, span.start),
                field,
                reason,
            }
        };
        for (field, v) in [("log", &f.log), ("arm", &f.arm)] {
            if v.get_ref().trim().is_empty() {
                return Err(err(field, v.span(), "is empty".into()));
            }
        }
        let attempts = *f.attempts.get_ref();
        if attempts == 0 {
            return Err(err(
                "attempts",
                f.attempts.span(),
                "must be at least 1: a log holds at least one attempt".into(),
            ));
        }
        // Every attempt but the last ended in a death (a new attempt is appended only then);
        // the last died, completed or was cut short.
        let deaths = f.died_at.get_ref().len() as u64;
        let (completed, truncated) = (*f.completed.get_ref(), *f.truncated.get_ref());
        let attempts = u64::from(attempts);
        if deaths > attempts {
            return Err(err(
                "died_at",
                f.died_at.span(),
                format!("lists {deaths} deaths for {attempts} attempt(s)"),
            ));
        }
        if completed && truncated {
            return Err(err(
                "truncated",
                f.truncated.span(),
                "is true, but `completed` says the last attempt printed its done line".into(),
            ));
        }
        if completed && deaths != attempts - 1 {
            return Err(err(
                "completed",
                f.completed.span(),
                format!(
                    "is true, so {} of the {attempts} attempt(s) died before the last, but \
                     `died_at` lists {deaths}",
                    attempts - 1
                ),
            ));
        }
        if !completed && !truncated && deaths != attempts {
            return Err(err(
                "died_at",
                f.died_at.span(),
                format!(
                    "lists {deaths} deaths for {attempts} attempt(s), and the log is neither \
                     completed nor truncated: every attempt died"
                ),
            ));
        }
        if let Some(death) = &f.death {
            if deaths == 0 {
                return Err(err(
                    "death",
                    death.span(),
                    "is given, but `died_at` lists no death".into(),
                ));
            }
            if !death.get_ref().contains("{step}") {
                return Err(err(
                    "death",
                    death.span(),
                    format!(
                        "is {}, without the `{{step}}` the step goes in",
                        limits::quote(&format!("{:?}", death.get_ref()))
                    ),
                ));
            }
        }
        let failures = Self::validate_failures(&f.failures, &err)?;
        Ok(Incident {
            origin: origin.to_string(),
            log: f.log.into_inner(),
            arm: f.arm.into_inner(),
            seed: f.seed,
            attempts: *f.attempts.get_ref(),
            died_at: f.died_at.into_inner(),
            completed,
            truncated,
            death: f.death.map(Spanned::into_inner),
            failures,
        })
    }

    /// The `[[failures]]` groups, each checked and none repeating an earlier one's phase and
    /// size; `err` blames a field at a span.
    fn validate_failures(
        groups: &[FailureFile],
        err: &dyn Fn(&'static str, std::ops::Range<usize>, String) -> IncidentError,
    ) -> Result<Vec<LoggedFailure>, IncidentError> {
        let mut failures: Vec<LoggedFailure> = Vec::with_capacity(groups.len());
        for g in groups {
            let phase = *g.phase.get_ref();
            if *g.count.get_ref() == 0 {
                return Err(err(
                    "failures.count",
                    g.count.span(),
                    "must be at least 1: a group is the failures that happened".into(),
                ));
            }
            if let Some(b) = &g.bytes {
                MAX_TENSOR_BYTES
                    .check(*b.get_ref())
                    .map_err(|reason| err("failures.bytes", b.span(), reason))?;
                if *b.get_ref() == 0 {
                    return Err(err(
                        "failures.bytes",
                        b.span(),
                        "must be at least 1: no reserve of 0 bytes fails".into(),
                    ));
                }
            }
            if let (AttemptPhase::Init, Some(s)) = (phase, &g.after_step) {
                return Err(err(
                    "failures.after_step",
                    s.span(),
                    "is given for failures before step 0 (phase `init`)".into(),
                ));
            }
            // A size counts once per phase; without a size, the phase's count is given once.
            let bytes = g.bytes.as_ref().map(|b| *b.get_ref());
            if failures
                .iter()
                .any(|h| h.phase == phase && h.bytes == bytes)
            {
                let (field, span) = match &g.bytes {
                    Some(b) => ("failures.bytes", b.span()),
                    None => ("failures.phase", g.phase.span()),
                };
                let what = bytes.map_or("a count without a size".into(), |b| format!("{b} bytes"));
                return Err(err(
                    field,
                    span,
                    format!("repeats an earlier group of the same phase: {what}"),
                ));
            }
            failures.push(LoggedFailure {
                bytes,
                count: *g.count.get_ref(),
                phase,
                after_step: g.after_step.as_ref().map(|s| *s.get_ref()),
            });
        }
        Ok(failures)
    }

    /// The failure groups of `phase`, in the file's order.
    pub fn failures_in(&self, phase: AttemptPhase) -> impl Iterator<Item = &LoggedFailure> {
        self.failures.iter().filter(move |f| f.phase == phase)
    }

    /// Failed reserves in `phase`, over all sizes.
    pub fn failure_count(&self, phase: AttemptPhase) -> u64 {
        self.failures_in(phase).map(|f| u64::from(f.count)).sum()
    }

    /// The sizes that failed in `phase`, where the log gives them, in the file's order.
    pub fn sizes(&self, phase: AttemptPhase) -> impl Iterator<Item = u64> {
        self.failures_in(phase).filter_map(|f| f.bytes)
    }

    /// The log's death line for a death at `step`, if the file gives its shape.
    pub fn death_line(&self, step: u32) -> Option<String> {
        let death = self.death.as_ref()?;
        Some(death.replace("{step}", &step.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = include_str!("../../../repro/incident/ab2000_situ_s1.toml");
    const S2: &str = include_str!("../../../repro/incident/ab2000_situ_s2.toml");
    const MOE: &str = include_str!("../../../repro/incident/ab2000_moe_s1.toml");

    /// `text` with `from` replaced by `to`: the field and line the error blames, and its reason.
    fn refused(text: &str, from: &str, to: &str) -> (&'static str, usize, String) {
        assert!(text.contains(from), "{from:?} is not in the file");
        let edited = text.replacen(from, to, 1);
        match Incident::parse("x.toml", &edited) {
            Err(IncidentError::Invalid {
                field,
                line,
                reason,
                origin,
            }) => {
                assert_eq!(origin, "x.toml");
                (field, line, reason)
            }
            other => panic!("{from:?} → {to:?}: {other:?}"),
        }
    }

    /// The 1-based line of `text` that starts with `key`, after `skip` earlier ones.
    fn line(text: &str, key: &str, skip: usize) -> usize {
        text.lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with(key))
            .nth(skip)
            .map(|(i, _)| i + 1)
            .unwrap_or_else(|| panic!("no {key} line"))
    }

    #[test]
    fn the_wave_logs_parse() {
        let s1 = Incident::parse("s1.toml", S1).unwrap();
        assert_eq!((s1.attempts, s1.died_at.as_slice()), (2, &[400, 300][..]));
        assert_eq!(s1.failure_count(AttemptPhase::Init), 7);
        assert_eq!(s1.failure_count(AttemptPhase::Run), 104 + 49);
        assert_eq!(
            s1.sizes(AttemptPhase::Run).collect::<Vec<_>>(),
            [32 << 20, 64 << 20]
        );
        assert_eq!(
            s1.death_line(300).as_deref(),
            Some("train failed: step 300: device error (loss is not a scalar)")
        );
        let s2 = Incident::parse("s2.toml", S2).unwrap();
        assert!(s2.truncated && !s2.completed && s2.died_at.is_empty());
        assert_eq!(s2.death_line(1), None);
        let moe = Incident::parse("moe.toml", MOE).unwrap();
        assert!(moe.completed);
        assert_eq!(moe.failures[0].bytes, None);
        assert_eq!(moe.failure_count(AttemptPhase::Init), 13);
    }

    #[test]
    fn impossible_outcomes_name_the_field_and_its_line() {
        let (field, at, reason) = refused(S1, "attempts = 2", "attempts = 0");
        assert_eq!((field, at), ("attempts", line(S1, "attempts", 0)));
        assert!(reason.contains("at least 1"), "{reason}");

        let (field, at, reason) = refused(S1, "attempts = 2", "attempts = 1");
        assert_eq!((field, at), ("died_at", line(S1, "died_at", 0)));
        assert_eq!(reason, "lists 2 deaths for 1 attempt(s)");

        let (field, at, _) = refused(MOE, "truncated = false", "truncated = true");
        assert_eq!((field, at), ("truncated", line(MOE, "truncated", 0)));

        let (field, at, reason) = refused(MOE, "died_at = []", "died_at = [5]");
        assert_eq!((field, at), ("completed", line(MOE, "completed", 0)));
        assert!(reason.contains("lists 1"), "{reason}");

        // Neither completed nor cut short, yet an attempt did not die.
        let (field, _, reason) = refused(S1, "died_at = [400, 300]", "died_at = [400]");
        assert_eq!(field, "died_at");
        assert!(reason.contains("every attempt died"), "{reason}");
    }

    #[test]
    fn death_lines_need_a_death_and_a_step() {
        let (field, at, reason) = refused(S1, "{step}", "400");
        assert_eq!((field, at), ("death", line(S1, "death", 0)));
        assert!(reason.contains("{step}"), "{reason}");
        let (field, at, reason) = refused(
            S2,
            "died_at = []",
            "died_at = []\ndeath = \"train failed: step {step}\"",
        );
        assert_eq!((field, at), ("death", line(S2, "died_at", 0) + 1));
        assert!(reason.contains("no death"), "{reason}");
    }

    #[test]
    fn failure_groups_are_checked_at_their_own_line() {
        let (field, at, _) = refused(S1, "count = 104", "count = 0");
        assert_eq!((field, at), ("failures.count", line(S1, "count", 1)));

        let (field, at, _) = refused(S1, "bytes = 33554432", "bytes = 0");
        assert_eq!((field, at), ("failures.bytes", line(S1, "bytes", 1)));

        let (field, _, reason) = refused(S1, "bytes = 33554432", "bytes = 2251799813685248");
        assert_eq!(field, "failures.bytes");
        assert!(reason.contains("MAX_TENSOR_BYTES"), "{reason}");

        let (field, at, _) = refused(S1, "phase = \"init\"", "phase = \"init\"\nafter_step = 3");
        assert_eq!(field, "failures.after_step");
        assert_eq!(at, line(S1, "phase", 0) + 1);

        // The same size twice in one phase.
        let (field, at, reason) = refused(S1, "bytes = 67108864", "bytes = 33554432");
        assert_eq!((field, at), ("failures.bytes", line(S1, "bytes", 2)));
        assert!(reason.contains("33554432 bytes"), "{reason}");

        let (field, _, reason) = refused(
            MOE,
            "phase = \"init\"",
            "phase = \"init\"\n\n[[failures]]\ncount = 2\nphase = \"init\"",
        );
        assert_eq!(field, "failures.phase");
        assert!(reason.contains("a count without a size"), "{reason}");
    }

    #[test]
    fn shape_errors_are_syntax_errors_with_a_line() {
        for (from, to, key) in [
            ("arm = \"situ\"", "arm = \"situ\"\narms = 2", "arms"),
            ("phase = \"run\"", "phase = \"later\"", "later"),
            ("seed = 1", "seed = \"one\"", "one"),
        ] {
            let text = S1.replacen(from, to, 1);
            let e = Incident::parse("x.toml", &text).unwrap_err();
            assert!(matches!(e, IncidentError::Syntax { .. }), "{e}");
            assert!(e.to_string().starts_with("x.toml:"), "{e}");
            assert!(e.to_string().contains(key), "{e}");
            let want = text.lines().position(|l| l.contains(key)).unwrap() + 1;
            assert_eq!(e.line(), want, "{e}");
        }
        let e = Incident::parse("x.toml", &S1.replace("log = ", "# log = ")).unwrap_err();
        assert!(e.to_string().contains("missing field `log`"), "{e}");
    }

    #[test]
    fn size_and_quotes_are_bounded() {
        let long = format!("{S1}\n# {}\n", "x".repeat(MAX_INCIDENT_BYTES.max as usize));
        let e = Incident::parse("x.toml", &long).unwrap_err();
        assert_eq!(e.line(), 1);
        assert!(e.to_string().contains("MAX_INCIDENT_BYTES"), "{e}");
        let key = "k".repeat(10_000);
        let e = Incident::parse(
            "x.toml",
            &S1.replace("arm = ", &format!("{key} = 1\narm = ")),
        )
        .unwrap_err()
        .to_string();
        assert!(e.len() < 400 && e.contains("… (10000 bytes)"), "{e}");
        let (_, _, reason) = refused(S1, "{step}", &"y".repeat(5_000));
        assert!(reason.len() < 300, "{reason}");
    }

    #[test]
    fn empty_names_are_refused() {
        let (field, at, _) = refused(S1, "arm = \"situ\"", "arm = \" \"");
        assert_eq!((field, at), ("arm", line(S1, "arm", 0)));
        let (field, _, _) = refused(S1, "log = \"ab2000_situ_s1.log\"", "log = \"\"");
        assert_eq!(field, "log");
    }
}
