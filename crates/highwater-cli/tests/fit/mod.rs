//! `highwater fit`: every model file trained dry on a small card, the largest batch, bad input.

use super::*;

/// Will it fit? The decoder on a 16 GiB card: per-step pool figures from burn's own code, dry.
#[test]
fn fit_prints_each_steps_pool_and_the_verdict() {
    let args = [
        "fit",
        "repro/models/decoder.toml",
        "--card",
        "16GiB",
        "--backend",
        "cube",
        "--steps",
        "3",
        "--burn",
        "0.21",
    ];
    let out = ok_snapshot("fit-decoder-16gib", &args);
    assert!(
        text(&out.stdout).contains("\nfits: at most "),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).is_empty(), "expected deaths stay quiet");
}

/// Every network file of repro/models trained dry on a small card, two steps, under burn 0.21
/// (the atlas, the bands): its per-step pool figures and verdict as `fit` prints them. Each
/// family's file has its own snapshot (`fit-FAMILY-*.txt`), and every file under repro/models
/// has one ([`every_model_file_has_a_fit_snapshot`]).
fn fit_snapshot(name: &str, model: &str, card: &str, extra: &[&str]) -> String {
    let path = format!("repro/models/{model}.toml");
    let args = [
        &[
            "fit",
            path.as_str(),
            "--card",
            card,
            "--steps",
            "2",
            "--burn",
            "0.21",
        ],
        extra,
    ]
    .concat();
    let out = ok_snapshot(name, &args);
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    text(&out.stdout).to_string()
}

#[test]
fn fit_mlp_on_a_1gib_card() {
    let out = fit_snapshot("fit-mlp-1gib", "mlp", "1GiB", &[]);
    assert!(out.contains("\nfits: at most "), "{out}");
}

/// On burn-fusion `reserved` is a band even with every kernel in the atlas: the schedules its
/// thread can meet the training thread in (`dryrun::schedule`), explored the same way on every
/// host, with the width `fit` reports.
#[test]
fn fit_mlp_on_fusion_is_banded_by_its_schedules() {
    let out = fit_snapshot(
        "fit-mlp-fusion-1gib",
        "mlp",
        "1GiB",
        &["--backend", "fusion"],
    );
    assert!(
        out.contains("\nburn-fusion: `reserved` is banded over 5 schedules"),
        "{out}"
    );
    assert!(!out.contains(" exact "), "a band on every step: {out}");
}

#[test]
fn fit_resnet_on_a_2gib_card() {
    let out = fit_snapshot("fit-resnet-2gib", "resnet", "2GiB", &[]);
    assert!(out.contains("\nfits: at most "), "{out}");
}

/// The ViT's 64 images do not fit a 4 GiB card: it dies in the first forward pass, and says
/// which reservation the card refused a page for.
#[test]
fn fit_vit_on_a_4gib_card_dies_in_the_first_forward() {
    let out = fit_snapshot("fit-vit-4gib", "vit", "4GiB", &[]);
    assert!(
        out.contains("\ndies in step 1 (forward): reserving "),
        "{out}"
    );
}

#[test]
fn fit_lstm_on_a_4gib_card() {
    let out = fit_snapshot("fit-lstm-4gib", "lstm", "4GiB", &[]);
    assert!(out.contains("\nfits: at most "), "{out}");
}

/// The BERT-style encoder: four sequences of 512 tokens pass forward and backward on an 8 GiB
/// card, and the first optimizer step, which creates Adam's state, is refused its page.
#[test]
fn fit_encoder_on_an_8gib_card_dies_in_the_first_optimizer_step() {
    let out = fit_snapshot("fit-encoder-8gib", "encoder", "8GiB", &["--batch", "4"]);
    assert!(
        out.contains("\ndies in step 1 (optimizer): reserving "),
        "{out}"
    );
    assert!(
        out.contains("\nerror: can't allocate buffer of size: "),
        "{out}"
    );
}

/// Each file under repro/models has a `fit` snapshot of its own (`fit-STEM-*.txt`): a model
/// file added without a test fails here.
#[test]
fn every_model_file_has_a_fit_snapshot() {
    let snapshots: Vec<String> =
        std::fs::read_dir(root().join("crates/highwater-cli/tests/snapshots"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    let mut models = 0;
    for entry in std::fs::read_dir(root().join("repro/models")).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let prefix = format!("fit-{stem}-");
        assert!(
            snapshots.iter().any(|s| s.starts_with(&prefix)),
            "{} has no fit snapshot ({prefix}*.txt)",
            path.display()
        );
        models += 1;
    }
    assert!(models >= 6, "{models} model files");
}

/// A bad network file is refused before any work with its file, line, key and reason, the line
/// quoted, and the book's page on the format.
#[test]
fn fit_names_a_bad_model_files_line_and_reason() {
    let tmp = scratch("bad-model");
    let dir = tmp.path();
    let encoder = std::fs::read_to_string(root().join("repro/models/encoder.toml")).unwrap();
    for (name, file, says) in [
        (
            "heads.toml",
            encoder.replace("n_heads = 12", "n_heads = 7"),
            "heads.toml:12: `encoder.n_heads` does not divide d_model = 768",
        ),
        (
            "zero.toml",
            encoder.replace("n_layers = 12", "n_layers = 0"),
            "zero.toml:13: `encoder.n_layers` must be at least 1",
        ),
        (
            "typo.toml",
            encoder.replace("d_ff =", "dff ="),
            "typo.toml:14: [encoder]: unknown field `dff`",
        ),
        (
            "missing.toml",
            encoder.replace("vocab = 30522\n", ""),
            "missing.toml:8: [encoder]: missing field `vocab`",
        ),
        (
            "backend.toml",
            encoder.replace("backend = \"cube\"", "backend = \"cuda\""),
            "backend.toml:20: `training.backend`: unknown variant `cuda`",
        ),
        (
            "misspelt.toml",
            encoder.replace("[encoder]", "[encodr]"),
            "read as a wave recipe: it has none of the network tables",
        ),
        (
            "two.toml",
            format!(
                "{encoder}\n[mlp]\ninputs = 4\nhidden = 4\nn_layers = 1\nclasses = 2\nbatch = 1\n"
            ),
            "found encoder and mlp",
        ),
    ] {
        std::fs::write(dir.join(name), file).unwrap();
        let args = ["fit", name];
        let out = Command::new(env!("CARGO_BIN_EXE_highwater"))
            .args(args)
            .current_dir(dir)
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("the binary runs");
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(out.stdout.is_empty(), "{name}");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{name}: {err}");
        assert!(
            err.contains("the book's page \"Model files\" (src/reference/model-files.md)"),
            "{name}: {err}"
        );
        assert!(
            err.contains(&format!("invalid model {name} (line ")),
            "{err}"
        );
        if name == "heads.toml" {
            snapshot("fit-bad-model", &transcript(&args, &out));
        }
    }
}

/// The search for the largest batch: every batch up to it fits, the next one dies, and says
/// where; the JSON carries the fitting batch's per-step report (the simulator's report type).
#[test]
fn fit_finds_the_largest_batch_and_where_the_next_one_dies() {
    let out = highwater(&[
        "fit",
        "repro/recipes/wave-stack.toml",
        "--card",
        "4GiB",
        "--steps",
        "2",
        "--largest-batch",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON object");
    let largest = v["largest_batch"].as_u64().expect("a batch fits");
    assert_eq!(v["smallest_failing_batch"].as_u64(), Some(largest + 1));
    for t in v["tried"].as_array().unwrap() {
        let (batch, fits) = (t[0].as_u64().unwrap(), t[1].as_bool().unwrap());
        assert_eq!(fits, batch <= largest, "{t}");
    }
    let report = &v["largest_report"];
    assert_eq!(report["died_at"], Value::Null);
    assert_eq!(report["reserved"].as_array().map(Vec::len), Some(2));
    let capacity = v["capacity"].as_u64().unwrap();
    assert!(report["reserved"][1].as_u64().unwrap() <= capacity);
    assert!(v["death_above"]["failed_pages"][0].as_u64().unwrap() > 0);
}

#[test]
fn fit_refuses_bad_input_before_any_work() {
    // Arguments, exit status (2: clap refused it), what stderr says.
    let decoder = "repro/models/decoder.toml";
    for (args, code, says) in [
        (vec![decoder, "--card", "16 furlongs"], 2, "not a unit"),
        (
            vec![decoder, "--batch", "18446744073709551615"],
            1,
            "larger than",
        ),
        (
            vec!["crates/highwater/tests/fixtures/bad-zero-batch.toml"],
            1,
            "bad-zero-batch.toml:2: `model.batch` must be at least 1",
        ),
        (
            vec![decoder, "--card", "no/such/card.json"],
            1,
            "no/such/card.json",
        ),
    ] {
        let out = highwater(&[&["fit"], args.as_slice()].concat());
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// burn 0.22, the default for a network file: the MLP trained dry through CubeCL 0.11's pools
/// (the cubecl-cuda stand-in), every step banded over the kernel choices autotune could make.
#[test]
fn fit_mlp_under_burn_0_22_by_default() {
    let args = [
        "fit",
        "repro/models/mlp.toml",
        "--card",
        "1GiB",
        "--steps",
        "2",
    ];
    let out = ok_snapshot("fit-mlp-1gib-burn022", &args);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("burn 0.22 (CubeCL 0.11)"), "{stdout}");
    assert!(stdout.contains("\nfits: "), "{stdout}");
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
}

/// The same model on a card too small under burn 0.22: it dies where a page is refused, and
/// `--json` says so with the simulator's report type.
#[test]
fn fit_under_burn_0_22_says_where_a_small_card_dies() {
    let out = highwater(&[
        "fit",
        "repro/models/mlp.toml",
        "--card",
        "1GiB",
        "--steps",
        "2",
        "--batch",
        "65536",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON object");
    assert_eq!(v["burn"], "0.22.1");
    assert_eq!(v["died_at"], 1, "{v}");
    assert!(!v["failures"].as_array().unwrap().is_empty(), "{v}");
}

/// A wave recipe is burn 0.21's only (its fused SiTU kernel): asked under 0.22, `fit` says so.
#[test]
fn fit_refuses_a_wave_recipe_under_burn_0_22() {
    let out = highwater(&["fit", "repro/recipes/wave-stack.toml", "--burn", "0.22"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("add --burn 0.21"),
        "{}",
        text(&out.stderr)
    );
}

/// A network on burn-fusion under burn 0.22, which switches fusion on for a whole build: `fit`
/// trains it in the fused build beside this executable where that is built (its table, as for
/// CubeBackend), and otherwise names the command that builds it.
#[test]
fn fit_under_burn_0_22_runs_burn_fusion_in_its_own_build_or_says_how_to_build_it() {
    let fused = std::path::Path::new(env!("CARGO_BIN_EXE_highwater"))
        .with_file_name(burn022::fused::BINARY);
    let out = highwater(&[
        "fit",
        "repro/models/mlp.toml",
        "--backend",
        "fusion",
        "--card",
        "1GiB",
        "--steps",
        "2",
    ]);
    if fused.is_file() {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("| fusion |"), "{stdout}");
        assert!(stdout.contains("burn 0.22 (CubeCL 0.11)"), "{stdout}");
        assert!(stdout.contains("\nfits: "), "{stdout}");
    } else {
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&burn022::fused::build_command(&fused)),
            "{stderr}"
        );
        assert!(stderr.contains("repro/models/mlp.toml"), "{stderr}");
    }
}
