//! GPU cells: frozen on a GPU, bundled for a GPU box without Rust, and rendered frozen elsewhere.

use super::*;

#[test]
fn gpu_cells_freeze_on_a_gpu_and_render_frozen_elsewhere() {
    let freeze = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cells-gpu-freeze");
    let _ = std::fs::remove_dir_all(&freeze);
    let chapter = |code: &str| format!("# GPU\n\n```cell\n//| gpu\n{code}\n```\n");
    let cpu = || {
        let f = freeze.clone();
        move |c: &mut Config| c.freeze_dir = f
    };
    let gpu = || {
        let f = freeze.clone();
        move |c: &mut Config| {
            c.freeze_dir = f;
            c.gpu = true;
            c.gpu_name = Some("Test GPU H0".into());
        }
    };

    let (page, report) = run_text("gpu", &chapter("6 * 7"), cpu());
    assert!(page.contains("needs a GPU run"), "{page}");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0].reason.contains("no frozen output"));

    let (page, report) = run_text("gpu", &chapter("6 * 7"), gpu());
    assert!(
        page.contains("42") && !page.contains("cell-badge"),
        "{page}"
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let file = freeze.join("inline/gpu-1.json");
    let frozen = std::fs::read_to_string(&file).expect("the run wrote its freeze");
    assert!(frozen.contains("Test GPU H0") && frozen.contains("MDBOOK_CELLS_GPU=1 mdbook build"));

    let (page, report) = run_text("gpu", &chapter("6 * 7"), cpu());
    assert!(
        page.contains("GPU output recorded on Test GPU H0 at "),
        "{page}"
    );
    assert!(page.contains("42") && !page.contains("stale"), "{page}");
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    let (page, report) = run_text("gpu", &chapter("6 * 8"), cpu());
    assert!(page.contains("42") && page.contains("cell-stale"), "{page}");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0].reason.contains("stale"));
    assert_eq!(
        report.problems[0].line, 3,
        "the problem is at the cell's fence"
    );
}

/// A freeze keys on the prelude items its cell uses, as tokens: editing others, or reformatting
/// and commenting the cell and its items, leaves it current; changing what it uses does not.
#[test]
fn a_freeze_stales_only_when_what_its_cell_uses_changes() {
    let freeze = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cells-gpu-prelude");
    let _ = std::fs::remove_dir_all(&freeze);
    let chapter = |prelude: &str, code: &str| {
        format!("# GPU\n\n```cell\n//| prelude\n{prelude}\n```\n\n```cell\n//| gpu\n{code}\n```\n")
    };
    let config = |gpu: bool| {
        let f = freeze.clone();
        move |c: &mut Config| {
            c.freeze_dir = f;
            c.gpu = gpu;
            c.gpu_name = Some("Test GPU H0".into());
        }
    };
    let prelude = "fn answer(a: u32, b: u32) -> u32 { a * b }\nfn unused() -> u32 { 1 }";
    let (page, report) = run_text("gpu", &chapter(prelude, "answer(6, 7)"), config(true));
    assert!(page.contains("42") && report.problems.is_empty(), "{page}");

    let current = [
        // The prelude: an item the cell does not use edited, one added, the used one reformatted.
        chapter(
            "/// Multiplies.\nfn answer(\n    a: u32,\n    b: u32,\n) -> u32 {\n    a * b\n}\n\
             fn unused() -> u32 { 2 }\nfn added() {}",
            "answer(6, 7)",
        ),
        // The cell: reformatted and commented.
        chapter(prelude, "// The answer.\nanswer(\n    6,\n    7,\n)"),
    ];
    for text in current {
        let (page, report) = run_text("gpu", &text, config(false));
        assert!(!page.contains("cell-stale"), "{text}\n{page}");
        assert!(report.problems.is_empty(), "{text}\n{:?}", report.problems);
    }
    let stale = [
        chapter(&prelude.replace("a * b", "a + b"), "answer(6, 7)"),
        chapter(prelude, "answer(7, 6)"),
    ];
    for text in stale {
        let (page, report) = run_text("gpu", &text, config(false));
        assert!(page.contains("cell-stale"), "{text}\n{page}");
        assert_eq!(report.problems.len(), 1, "{text}\n{:?}", report.problems);
    }
}

#[test]
fn gpu_cells_bundle_here_run_on_the_gpu_box_and_render_frozen() {
    let book = scratch_book("gpu-bundle");
    let root = book.path();
    let (freeze, bundle_dir) = (PathBuf::from("freeze"), root.join("bundle"));
    let chapter = "# GPU\n\n```cell\n//| gpu\n6 * 7\n```\n\n```cell\n//| gpu\n\
                   panic!(\"no device\")\n```\n\n```cell\n1 + 1\n```\n";
    let settings = |bundle: bool| {
        let (f, b) = (freeze.clone(), bundle_dir.clone());
        move |c: &mut Config| {
            c.freeze_dir = f;
            c.gpu_bundle = bundle.then_some(b);
        }
    };

    // Here: the CPU cell runs, the GPU cells are compiled into the bundle, not run.
    let (page, report) = run_text_in(root, "bundle", chapter, settings(true));
    assert_eq!((report.cells, report.ran), (1, 1), "{report}");
    assert!(page.contains("needs a GPU run"), "{page}");
    let manifest: mdbook_cells::bundle::Bundle = serde_json::from_str(
        &std::fs::read_to_string(bundle_dir.join("bundle.json")).expect("a manifest"),
    )
    .unwrap();
    assert_eq!(manifest.cells.len(), 2);
    assert_eq!(
        (manifest.cells[0].chapter.as_str(), manifest.cells[0].line),
        ("src/inline.md", 3)
    );
    assert!(bundle_dir.join("cells").exists() && bundle_dir.join("mdbook-cells").exists());

    // On the GPU box: the good cell is frozen, the panic is reported at its own chapter line.
    let run = mdbook_cells::bundle::run(&bundle_dir, root, Some("Test GPU B1".into())).unwrap();
    assert_eq!(run.frozen.len(), 1, "{run:?}");
    assert_eq!(run.failed.len(), 1, "{run:?}");
    assert!(
        run.failed[0].starts_with(
            "src/inline.md:8: GPU cell failed: panicked: no device at src/inline.md:10"
        ),
        "{}",
        run.failed[0]
    );

    // Back here: rendered from the freeze, whose badge names both commands.
    let (page, report) = run_text_in(root, "bundle", chapter, settings(false));
    assert!(
        page.contains("GPU output recorded on Test GPU B1 at "),
        "{page}"
    );
    assert!(
        page.contains("run-bundle") && page.contains(">42</pre>"),
        "{page}"
    );
    assert!(!page.contains("cell-stale"), "{page}");
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems.len(),
        1,
        "only the failed cell lacks a freeze: {problems:?}"
    );
    assert!(problems[0].starts_with("src/inline.md:8:"), "{problems:?}");
}

#[test]
fn a_freeze_made_in_one_checkout_is_current_in_another() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cells-two-checkouts");
    let _ = std::fs::remove_dir_all(&tmp);
    let chapter = "# GPU\n\n```cell\n//| gpu\n//| reads: data/answer.txt\n\
                   std::fs::read_to_string(\"data/answer.txt\")?.trim().to_string()\n```\n";
    let build = |root: &Path, gpu: bool| {
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("data/answer.txt"), "42\n").unwrap();
        let mut config = config(&fixture("basic"), &cache_dir("two-checkouts"));
        config.freeze_dir = "freeze".into();
        let cell_output = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cell-output");
        config.dependencies = toml::from_str(&format!(
            "cell-output = {{ path = {:?} }}",
            cell_output.display().to_string()
        ))
        .unwrap();
        config.gpu = gpu;
        config.gpu_name = gpu.then(|| "Test GPU C1".into());
        let mut docs = vec![Document {
            source: "src/gpu.md".into(),
            html_path: "gpu.html".into(),
            number: None,
            title: "GPU".into(),
            content: chapter.into(),
        }];
        let report = process(root, &config, &mut docs).unwrap();
        (docs.remove(0).content, report)
    };
    let (here, there) = (tmp.join("here"), tmp.join("elsewhere/clone"));
    let (_, report) = build(&here, true);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let freeze = Path::new("freeze/gpu/gpu-1.json");
    std::fs::create_dir_all(there.join("freeze/gpu")).unwrap();
    std::fs::copy(here.join(freeze), there.join(freeze)).unwrap();

    let (page, report) = build(&there, false);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        page.contains("Test GPU C1") && !page.contains("cell-stale"),
        "{page}"
    );
}

#[test]
fn a_gpu_cell_that_does_not_compile_fails_the_bundle_build_and_leaves_no_bundle() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cells-gpu-bundle-broken");
    let _ = std::fs::remove_dir_all(&tmp);
    let bundle_dir = tmp.join("bundle");
    std::fs::create_dir_all(&bundle_dir).unwrap();
    std::fs::write(bundle_dir.join("bundle.json"), "{} from an earlier build").unwrap();
    std::fs::write(bundle_dir.join("notes.txt"), "not the bundle's").unwrap();
    let chapter = "# GPU\n\n```cell\n//| gpu\nlet n: u32 = \"no\";\nn\n```\n";
    let (page, report) = run_text("bundle-broken", chapter, |c| {
        c.freeze_dir = tmp.join("freeze");
        c.gpu_bundle = Some(bundle_dir.clone());
    });
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems.len(),
        1,
        "only the compile error, no missing freeze: {problems:?}"
    );
    assert!(
        problems[0].starts_with("src/inline.md:5: cell failed: compile error: error[E0308]"),
        "{problems:?}"
    );
    assert!(page.contains("E0308"), "{page}");
    assert!(
        !bundle_dir.join("bundle.json").exists(),
        "the old bundle is gone"
    );
    assert!(bundle_dir.join("notes.txt").exists(), "other files stay");
}
