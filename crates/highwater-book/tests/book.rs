//! The loaders against fixture books (`tests/fixtures`) and against this repository, whose
//! files the chapters read; and the dry-run helper on the program *The dry run* measures.

use std::path::{Path, PathBuf};

use highwater::conform::conform;
use highwater::{Backend, Checkpointing};
use highwater_book::part1::verdict::surplus;
use highwater_book::part1::wall;
use highwater_book::series::{self, Pools};
use highwater_book::{Book, BookError};

fn fixture(name: &str) -> Book {
    Book::at(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
}

/// This repository: the book's root.
fn repo() -> Book {
    Book::at(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

#[test]
fn incidents_are_read_in_name_order_skipping_other_files() {
    let all = fixture("book").incidents().unwrap();
    let logs: Vec<&str> = all.iter().map(|i| i.log.as_str()).collect();
    assert_eq!(logs, ["a_moe_s1.log", "b_situ_s2.log"]);
    assert!(
        all[0].origin.ends_with("repro/incident/a_moe_s1.toml"),
        "{}",
        all[0].origin
    );
    let one = fixture("book").incident("b_situ_s2").unwrap();
    assert!(one.truncated);
}

#[test]
fn a_contradictory_incident_names_its_file_line_and_field() {
    let e = fixture("broken").incidents().unwrap_err();
    assert!(matches!(e, BookError::Input(_)), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("repro/incident/c_situ_s1.toml:5: `died_at`"),
        "{shown}"
    );
    assert!(
        shown.ends_with("lists 2 deaths for 1 attempt(s)"),
        "{shown}"
    );
}

#[test]
fn a_refused_recipe_names_its_file_line_and_field() {
    let e = fixture("book").recipe("zero-batch").unwrap_err();
    let shown = e.to_string();
    assert!(
        shown.contains("repro/recipes/zero-batch.toml:5: `model.batch`"),
        "{shown}"
    );
}

#[test]
fn a_missing_file_names_its_path() {
    let e = fixture("book").recipe("absent").unwrap_err();
    assert!(matches!(e, BookError::Read { .. }), "{e}");
    assert!(e.to_string().contains("repro/recipes/absent.toml"), "{e}");
    let e = fixture("broken").experiments().unwrap_err();
    assert!(e.to_string().contains("experiments.toml"), "{e}");
}

/// A scratch book holding a copy of this repository's `relative` with every `from` replaced by
/// `to`: a field renamed, as an edit to a writer would rename it.
fn renamed(relative: &str, from: &str, to: &str) -> (tempfile::TempDir, Book) {
    let text = repo().read(relative).unwrap();
    assert!(text.contains(from), "{relative} has no {from}");
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join(relative);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::write(&at, text.replace(from, to)).unwrap();
    let book = Book::at(dir.path());
    (dir, book)
}

#[test]
fn a_result_file_with_a_field_renamed_fails_naming_the_file_and_the_field() {
    use highwater::conform::RerunRecord;
    use highwater_book::part1::{fix_and_gate, rerun};

    type Read = fn(&Book) -> Result<(), String>;
    fn said<T, E: ToString>(r: Result<T, E>) -> Result<(), String> {
        r.map(drop).map_err(|e| e.to_string())
    }
    // The file, the field renamed in it (a key as the file spells it), how a chapter reads it.
    // An object that refuses fields it does not know names the renamed one among those it
    // expected; the gate's and the bench's top level cannot (they flatten their provenance),
    // and say the field is missing.
    let cases: [(&str, &str, Read); 6] = [
        (fix_and_gate::GATE, "finite_difference_eps", |b| {
            said(fix_and_gate::gate_thresholds_table(b))
        }),
        (fix_and_gate::GATE, "unwritten", |b| {
            said(fix_and_gate::gate_summary_table(b))
        }),
        (fix_and_gate::BENCH, "speedup_fused_over_tensor", |b| {
            said(fix_and_gate::bench_table(b))
        }),
        ("repro/results/graphrace-h200.json", "racing_replays", |b| {
            said(b.graphrace_gpu())
        }),
        (rerun::GPU_CELL_FREEZE, "command", |b| {
            said(rerun::gpu_cell_table(b))
        }),
        // A field of the record the freeze's body holds (a JSON string, its quotes escaped).
        (rerun::GPU_CELL_FREEZE, r#"\"recipe_path\""#, |b| {
            said(b.frozen::<RerunRecord>(rerun::GPU_CELL_FREEZE))
        }),
    ];
    for (file, key, read) in cases {
        assert_eq!(read(&repo()), Ok(()), "{file} as committed");
        let (written, field) = match key.strip_prefix(r#"\""#) {
            Some(escaped) => (key.to_string(), escaped.trim_end_matches(r#"\""#)),
            None => (format!("\"{key}\""), key),
        };
        let (_dir, book) = renamed(
            file,
            &format!("{written}:"),
            &format!("{}:", written.replace(field, "renamed")),
        );
        let e = read(&book).expect_err(field);
        assert!(e.contains(file), "{field}: {e}");
        assert!(e.contains(&format!("`{field}`")), "{field}: {e}");
    }
}

#[test]
fn experiments_are_found_by_their_model() {
    let book = fixture("book");
    let all = book.experiments().unwrap();
    assert_eq!(all.len(), 2);
    let fix = book.experiment("overlap-off").unwrap();
    assert_eq!(
        (fix.sessions(), fix.rounds(), fix.rates()),
        (vec![40, 60], Some(4), None)
    );
    assert_eq!(
        book.experiment("incident").unwrap().rates(),
        Some((0.15, 0.18))
    );
    let e = book.experiment("fp8").unwrap_err().to_string();
    assert!(e.ends_with("no experiment stands for `fp8`"), "{e}");
}

#[test]
fn the_repository_loads() {
    let book = repo();
    for name in ["small", "situ", "situ-fused", "situ-balanced", "wave-stack"] {
        book.recipe(name).unwrap_or_else(|e| panic!("{e}"));
    }
    let incidents = book.incidents().unwrap();
    let situ: Vec<u64> = incidents
        .iter()
        .filter(|i| i.arm == "situ")
        .map(|i| i.seed)
        .collect();
    assert_eq!((incidents.len(), situ), (7, vec![1, 2, 3]));
    let experiments = book.experiments().unwrap();
    assert!(experiments.len() >= 9);
    for e in experiments.iter().filter_map(|e| e.model.as_deref()) {
        book.graphrace_config(e)
            .unwrap_or_else(|err| panic!("{e}: {err}"));
    }
    let records = book.rerun_records().unwrap();
    assert!(!records.is_empty() && records.iter().all(|(n, r)| *n == r.name()));
    assert!(records.windows(2).all(|w| w[0].0 < w[1].0), "in name order");
    assert_eq!(book.known_misses().unwrap().len(), 2);
    book.h200().unwrap();
    let (record, repeats) = book.rerun_with_repeats(&records[0].0).unwrap();
    assert_eq!((record.name(), repeats.len()), (records[0].0.clone(), 2));
}

#[test]
fn wall_runs_are_ordered_by_candidate_then_seed_and_have_predictions() {
    let book = repo();
    let capped = book.wall_runs("capped").unwrap();
    let keys: Vec<(String, u64)> = capped
        .iter()
        .map(|r| (wall::candidate(r), r.seed))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(keys.iter().any(|(c, _)| c == "loader"), "{keys:?}");
    for r in &capped {
        let name = format!("{}-s{}", wall::candidate(r), r.seed);
        let dry = book
            .wall_prediction(&name)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dry.died_at, r.died.as_ref().map(|d| d.step), "{name}");
    }
}

/// *The verdict*'s claim: on CubeBackend the H200 measures the ledger's difference to the
/// fused kernel to within a MiB, while burn-fusion trims the surplus.
#[test]
fn the_ledger_surplus_is_what_the_h200_measured() {
    let book = repo();
    let base = book.recipe("small").unwrap();
    let ledger = surplus::ledger(&base, Checkpointing::None);
    let cube = book
        .measured_surplus(Backend::Cube, Checkpointing::None)
        .unwrap();
    let fusion = book
        .measured_surplus(Backend::Fusion, Checkpointing::None)
        .unwrap();
    assert!(
        (ledger.over_fused - cube.over_fused).abs() < 1 << 20,
        "{ledger:?} {cube:?}"
    );
    assert!(fusion.over_fused < cube.over_fused && fusion.over_fused > 0);
    let bench = book.bench_surplus_over_fused(base.calls()).unwrap();
    assert!(bench > ledger.over_fused, "the benchmark keeps `mid` too");
    let balanced = surplus::ledger(&base, Checkpointing::Balanced);
    assert!(
        balanced.over_fused < 0,
        "under Balanced the fused kernel keeps more"
    );
}

#[test]
fn a_record_and_its_replay_become_series() {
    let book = repo();
    let (_, record) = book
        .rerun_records()
        .unwrap()
        .into_iter()
        .find(|(_, r)| r.device.cap_bytes.is_some() && r.died.is_some())
        .expect("a capped run that died");
    let c = conform(&record).unwrap();
    let gpu = series::measured("situ-tensor", "GPU", &record, Pools::Trainer);
    assert_eq!(gpu.died_at, record.died.as_ref().map(|d| d.step as u32));
    assert_eq!(gpu.points.len(), record.steps.len());
    let sim = series::simulated("situ-tensor", "sim", &c);
    assert_eq!(sim.points.len(), c.simulated.reserved.len());
    assert_eq!(sim.died_at, c.predicted_died_at.map(|s| s as u32));
    let every =
        series::measured_points(&book.wall_runs("uncapped").unwrap()[0], Pools::EveryStream);
    assert!(
        every.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "one point per step"
    );
}

/// The program of *The dry run*: on CubeBackend burn's forward peak is the ledger's plus the
/// 32 bytes of a launch's metadata.
#[test]
fn a_forward_peak_measured_dry() {
    use burn::backend::Autodiff;
    use burn::tensor::backend::Backend as Burn;
    use burn::tensor::{Distribution, Tensor};
    use highwater::{DType, Graph};

    fn leaves<B: Burn>(device: &B::Device) -> [Tensor<B, 2>; 2] {
        [[64usize, 32], [32, 128]]
            .map(|shape| Tensor::random(shape, Distribution::Default, device).require_grad())
    }
    fn loss<B: Burn>([x, w]: [Tensor<B, 2>; 2]) -> Tensor<B, 1> {
        x.matmul(w).slice([32..64, 0..128]).mul_scalar(1.5).sum()
    }
    type Cube = Autodiff<situ::dry::DryCube>;
    let dry = repo().forward_peak(leaves::<Cube>, loss::<Cube>).unwrap();

    let mut g = Graph::new(DType::F32);
    let x = g.input("x", [64, 32], true);
    let w = g.param("w", [32, 128]);
    let a = g.matmul("a", x, w);
    let s = g.slice("s", a, 0, 32, 64);
    let y = g.mul_scalar("y", s);
    let out = g.reduce("loss", "sum", y);
    g.output(out);
    let ledger = g.ledger(Checkpointing::None, Backend::Cube).forward_peak();
    assert_eq!(dry, ledger + 32);
}

#[test]
fn paths_join_the_root() {
    assert_eq!(Book::here().path("repro/x"), PathBuf::from("repro/x"));
    assert_eq!(Book::at("/b").path("repro/x"), PathBuf::from("/b/repro/x"));
}
