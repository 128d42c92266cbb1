//! The recipe module's tests, apart so that the module's code stays short enough to read.

use super::*;
use crate::limits::{
    MAX_EXPERT_CALLS, MAX_LAG, MAX_LATE_RELEASES, MAX_REST_TENSORS, MAX_SEEDS, MAX_STEPS,
};

/// SMALL with `line` (`key = …`) given `value`: the reason it is refused, after checking
/// that the error blames `field` at that line.
fn refused_at(line: &str, value: &str, field: &str) -> String {
    let key = line.split(" = ").next().unwrap();
    let text = SMALL.replace(line, &format!("{key} = {value}"));
    let at = text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    match Recipe::parse("x.toml", &text) {
        Err(RecipeError::Invalid {
            line,
            field: f,
            reason,
            ..
        }) => {
            assert_eq!((line, f), (at, field), "{key} = {value}: {reason}");
            reason
        }
        other => panic!("{key} = {value}: {other:?}"),
    }
}

const SMALL: &str = include_str!("../../../../repro/recipes/small.toml");

/// SMALL with a `[workload]` table of `lines`.
fn with_workload(lines: &str) -> Result<Recipe, RecipeError> {
    Recipe::parse("w.toml", &format!("{SMALL}\n[workload]\n{lines}\n"))
}

#[test]
fn no_workload_is_the_fixed_step() {
    let r = Recipe::parse("small.toml", SMALL).unwrap();
    assert_eq!(r.workload, Workload::fixed(512, 8));
    assert!(r.workload.is_fixed(r.seq_len));
    assert!((1..100).all(|step| r.seq_len_at(3, step) == 512));
}

#[test]
fn dynamic_padding_draws_padded_lengths_in_range_by_seed() {
    let r = with_workload("seq_len_min = 128\npad_to = 64").unwrap();
    assert!(!r.workload.is_fixed(r.seq_len));
    let lengths = |seed| (1..=500).map(|s| r.seq_len_at(seed, s)).collect::<Vec<_>>();
    let (a, b) = (lengths(1), lengths(2));
    assert!(
        a.iter().all(|&l| (128..=512).contains(&l) && l % 64 == 0),
        "{a:?}"
    );
    let distinct: std::collections::BTreeSet<_> = a.iter().collect();
    assert_eq!(
        distinct.len(),
        7,
        "every padded length 128..=512 occurs: {distinct:?}"
    );
    assert_ne!(a, b, "the schedule follows the seed");
    assert_eq!(a, lengths(1), "and only the seed");
}

#[test]
fn dynamic_lengths_are_pinned() {
    // Pinned: the wall's recorded reruns drew these lengths on the GPU.
    let r = with_workload("seq_len_min = 1").unwrap();
    let first: Vec<u64> = (1..=8).map(|s| r.seq_len_at(1, s)).collect();
    assert_eq!(first, [104, 67, 394, 49, 249, 410, 29, 2]);
    let sum = |seed| (1..=1000).fold(0u64, |h, s| h.wrapping_mul(31) ^ r.seq_len_at(seed, s));
    assert_eq!(
        [sum(1), sum(u64::MAX)],
        [1787878381131048927, 9388569711452266364]
    );
}

#[test]
fn workload_errors_name_the_key_and_its_line() {
    let at = |lines: &str, field: &str| match with_workload(lines) {
        Err(RecipeError::Invalid {
            line,
            field: f,
            reason,
            ..
        }) => {
            let want = SMALL.lines().count()
                + 2
                + lines
                    .lines()
                    .position(|l| l.starts_with(field.trim_start_matches("workload.")))
                    .unwrap()
                + 1;
            assert_eq!((f, line), (field, want), "{lines}: {reason}");
            reason
        }
        other => panic!("{lines}: {other:?}"),
    };
    assert!(at("seq_len_min = 600", "workload.seq_len_min").contains("above model.seq_len"));
    assert!(at("pad_to = 0", "workload.pad_to").contains("at least 1"));
    assert!(at("eval_every = 99999999999", "workload.eval_every").contains("MAX_STEPS"));
    assert!(
        at(
            "eval_batch = 1000000000\neval_seq_len = 1000000",
            "workload.eval_batch"
        )
        .contains("larger than")
    );
    assert!(matches!(
        with_workload("sync = \"never\""),
        Err(RecipeError::Syntax { .. })
    ));
    assert!(matches!(
        with_workload("loader = 3"),
        Err(RecipeError::Syntax { .. })
    ));
}

#[test]
fn small_parses() {
    let r = Recipe::parse("small.toml", SMALL).unwrap();
    assert_eq!(r.tokens(), 4096);
    assert_eq!(r.calls(), 12);
    assert_eq!(r.activation, Activation::Silu);
}

/// Sizes whose products overflow 64 bits are refused, naming the factor to shrink at its
/// line, never a panic or a wrapped product.
#[test]
fn overflowing_sizes_name_the_field_to_shrink() {
    let huge = "18446744073709551615";
    for (line, field) in [
        ("batch = 8", "model.batch"),
        ("seq_len = 512", "model.seq_len"),
        ("d_model = 768", "model.d_model"),
        ("d_ffn = 2048", "model.d_ffn"),
        ("n_experts = 3", "model.n_experts"),
        ("max_iter = 4", "model.max_iter"),
        ("params = 153486", "rest_of_model.params"),
        (
            "persistent_bytes = 76800000",
            "rest_of_model.persistent_bytes",
        ),
    ] {
        let reason = refused_at(line, huge, field);
        assert!(reason.contains(huge), "{line}: {reason}");
    }
    // The experts' weights overflowing only with gradients and optimizer state.
    let text = SMALL.replace("d_model = 768", "d_model = 70368744177664");
    let e = Recipe::parse("x.toml", &text).unwrap_err();
    assert!(
        matches!(
            e,
            RecipeError::Invalid {
                field: "model.d_model",
                ..
            }
        ),
        "{e}"
    );
    // Two factors that overflow only together: the larger is blamed.
    let text = SMALL
        .replace("n_experts = 3", "n_experts = 4294967296")
        .replace("max_iter = 4", "max_iter = 4294967297");
    let e = Recipe::parse("x.toml", &text).unwrap_err();
    assert!(
        matches!(
            e,
            RecipeError::Invalid {
                field: "model.max_iter",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn zero_is_refused_with_its_line() {
    let text = SMALL.replace("batch = 8", "batch = 0");
    let e = Recipe::parse("x.toml", &text).unwrap_err();
    let line = text.lines().position(|l| l.starts_with("batch")).unwrap() + 1;
    assert_eq!(
        e,
        RecipeError::Invalid {
            origin: "x.toml".into(),
            line,
            field: "model.batch",
            reason: "must be at least 1".into()
        }
    );
    assert!(
        e.to_string()
            .starts_with(&format!("x.toml:{line}: `model.batch`"))
    );
}

#[test]
fn unknown_key_is_a_syntax_error_with_a_line() {
    let text = SMALL.replace("batch = 8", "batch = 8\nbatchh = 8");
    let e = Recipe::parse("x.toml", &text).unwrap_err();
    assert!(matches!(e, RecipeError::Syntax { .. }), "{e}");
    assert!(e.to_string().contains("batchh"), "{e}");
    assert!(e.line() > 1);
}

#[test]
fn overflow_is_refused() {
    let text = SMALL.replace("d_ffn = 2048", "d_ffn = 9223372036854775807");
    let e = Recipe::parse("x.toml", &text).unwrap_err();
    assert!(e.to_string().contains("overflow"), "{e}");
}

/// Counts that set a run's work are refused past their limit, at the field to change,
/// naming the limit; the values (issue 12, item 14) and u64::MAX alike.
#[test]
fn unbounded_work_is_refused_naming_the_limit() {
    for (line, value, field, limit) in [
        ("steps = 2000", "1000000000000", "training.steps", MAX_STEPS),
        (
            "late_releases = 208",
            "100000000",
            "jitter.late_releases",
            MAX_LATE_RELEASES,
        ),
        (
            "late_releases = 208",
            "3000000000000000000",
            "jitter.late_releases",
            MAX_LATE_RELEASES,
        ),
        (
            "max_lag = 24",
            "18446744073709551615",
            "jitter.max_lag",
            MAX_LAG,
        ),
        (
            "n_experts = 3",
            "1000000000",
            "model.n_experts",
            MAX_EXPERT_CALLS,
        ),
        (
            "max_iter = 4",
            "1000000000",
            "model.max_iter",
            MAX_EXPERT_CALLS,
        ),
        (
            "tensor_bytes = 12582912",
            "1",
            "rest_of_model.tensor_bytes",
            MAX_REST_TENSORS,
        ),
    ] {
        let reason = refused_at(line, value, field);
        assert!(reason.contains(&limit.to_string()), "{reason}");
    }
}

/// Every limit is inclusive: a recipe at each is accepted.
#[test]
fn work_at_the_limits_is_accepted() {
    let text = SMALL
        .replace("steps = 2000", &format!("steps = {}", MAX_STEPS.max))
        .replace("n_experts = 3", "n_experts = 1")
        .replace(
            "max_iter = 4",
            &format!("max_iter = {}", MAX_EXPERT_CALLS.max),
        )
        .replace(
            "tensor_bytes = 12582912",
            &format!("tensor_bytes = {}", 11345592320 / MAX_REST_TENSORS.max),
        )
        .replace(
            "late_releases = 208",
            &format!("late_releases = {}", MAX_LATE_RELEASES.max),
        )
        .replace("max_lag = 24", &format!("max_lag = {}", MAX_LAG.max));
    let r = Recipe::parse("x.toml", &text).unwrap();
    assert_eq!(r.calls(), MAX_EXPERT_CALLS.max);
    assert_eq!(
        r.rest.live_bytes / r.rest.tensor_bytes,
        MAX_REST_TENSORS.max
    );
}

/// Seeds listed in the file obey the CLI's cap, and a file past the size limit is refused
/// before the TOML parser sees it (6.5 M seeds make some 20 MB).
#[test]
fn seeds_and_size_are_capped() {
    let seeds = |n: u64| {
        let list = vec!["1"; n as usize].join(",");
        SMALL.replace("seeds = [1, 2, 3]", &format!("seeds = [{list}]"))
    };
    let r = Recipe::parse("x.toml", &seeds(MAX_SEEDS.max)).unwrap();
    assert_eq!(r.seeds.len() as u64, MAX_SEEDS.max);
    let e = Recipe::parse("x.toml", &seeds(MAX_SEEDS.max + 1)).unwrap_err();
    assert!(
        matches!(&e, RecipeError::Invalid { field: "training.seeds", reason, .. }
            if reason.contains(&MAX_SEEDS.to_string())),
        "{e}"
    );
    let e = Recipe::parse("x.toml", &seeds(6_500_000)).unwrap_err();
    assert!(
        matches!(&e, RecipeError::Syntax { line: 1, reason, .. }
            if reason.contains(&MAX_RECIPE_BYTES.to_string())),
        "{e}"
    );
}

/// Input an error quotes is cut (issue 12, item 15): a long key, string or variant in the
/// TOML parser's messages, a float written with hundreds of digits in ours.
#[test]
fn errors_quote_input_cut() {
    let long = "x".repeat(1_000_000);
    for text in [
        SMALL.replace("batch = 8", &format!("{long} = 8")),
        SMALL.replace("batch = 8", &format!("batch = \"{long}\"")),
        SMALL.replace("activation = \"silu\"", &format!("activation = \"{long}\"")),
        SMALL.replace("[model]", &format!("[{long}]")),
    ] {
        let e = Recipe::parse("x.toml", &text).unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("… (1000000 bytes)"), "{e}");
    }
    let text = SMALL.replace("step_probability = 0.08", "step_probability = 1e308");
    let e = Recipe::parse("x.toml", &text).unwrap_err().to_string();
    assert!(e.ends_with("is 1e308, not a probability in [0, 1]"), "{e}");
}

#[test]
fn card_below_the_weights_is_refused() {
    let text = SMALL.replace("total_bytes = 17179869184", "total_bytes = 1500000000");
    let e = Recipe::parse("x.toml", &text).unwrap_err();
    assert!(
        matches!(&e, RecipeError::Invalid { field, .. } if *field == "card.desktop_bytes" || *field == "card.total_bytes"),
        "{e}"
    );
}
