//! A chapter exported as a cargo project runs alone and reproduces the book's outputs.

use super::*;

/// `mdbook-cells export` takes a chapter away as a cargo project whose `cargo run` reproduces
/// the chapter's outputs, with this build's parameter values.
#[test]
fn an_exported_chapter_runs_alone_and_reproduces_its_outputs() {
    let root = fixture("features");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exported-figures");
    let _ = std::fs::remove_dir_all(&dir);
    let export = |dir: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mdbook-cells"))
            .args(["export", "src/figures.md"])
            .arg(dir)
            .current_dir(&root)
            .output()
            .unwrap()
    };
    let out = export(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("2 cell(s) of src/figures.md written to"),
        "{stdout}"
    );
    // A second export into the same folder is refused: nothing of the first is lost.
    let again = export(&dir);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));

    let run = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
        .args(["run", "--quiet"])
        .current_dir(&dir)
        // The dependencies the fixture's own builds compiled.
        .env("CARGO_TARGET_DIR", cache_dir("export-run"))
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("── src/figures.md:12 (tbl-squares)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hello from book.toml"),
        "the book.toml value: {stdout}"
    );
    let table = std::fs::read_to_string(dir.join("output/tbl-squares.html")).unwrap();
    let (docs, _) = run_features_again();
    assert!(
        docs[1].content.contains(&table),
        "the book shows the same table:\n{table}"
    );
}
