//! GPU cells and their frozen outputs (Quarto's `freeze`).
//!
//! A cell marked `gpu` runs only when GPU runs are on (`gpu = true` under
//! `[preprocessor.cells]`, or `MDBOOK_CELLS_GPU=1`) *and* the machine has a CUDA GPU
//! (`nvidia-smi` names one). Each such run writes the cell's output to a freeze file, committed
//! with the book: `<freeze-dir>/<chapter>/gpu-<n>.json`, `n` counting the chapter's GPU cells
//! from 1. Everywhere else the freeze is rendered under a badge saying where, when and by which
//! command it was made. The freeze records a hash of what the output depends on (`source_key`):
//! the cell's code and the prelude items it uses, as tokens (reformatting either, or editing a
//! prelude item the cell does not use, changes nothing), its options that change a run, and the
//! files it `reads`; not the toolchain or dependency versions (a CPU machine would otherwise see
//! every freeze go stale with each compiler update). When that hash no longer matches, the
//! freeze is *stale*: shown, flagged, and a problem (strict builds fail).
//!
//! A GPU box without Rust makes the same freezes from a bundle compiled elsewhere (see
//! [`crate::bundle`]); their badge names the bundle's two commands instead.

use std::path::{Path, PathBuf};

use crate::key::KeyHasher;
use crate::outcome::Stored;
use crate::parse::{self, CellBlock, Segment};
use crate::shared;

/// What a GPU cell's freeze is keyed on (see the module docs): the chapter's `shared` code (its
/// parameters and prelude) as far as `cell` uses it, the cell's own code, the options that
/// change a run, and `reads`, the digest of each file or folder the cell declares it reads, in
/// the order it declares them.
pub(crate) fn source_key(shared: &[(String, usize)], cell: &CellBlock, reads: &[String]) -> String {
    let shared: String = shared.iter().map(|(code, _)| code.as_str()).collect();
    let mut h = keyed_code(&shared, cell);
    for (read, digest) in cell.options.reads.iter().zip(reads) {
        h.part(read, digest.as_bytes());
    }
    h.finish()
}

/// What the freezes of a chapter's GPU cells key on in its text, one entry per GPU cell: an
/// edit that leaves these as they were (`mdbook-cells fmt`'s, say) leaves every freeze current.
pub(crate) fn chapter_sources(segments: &[Segment]) -> Vec<String> {
    let cells = || parse::cells(segments);
    let shared: String = (cells().filter(|c| c.options.shared().is_some()))
        .map(|c| c.code.as_str())
        .collect();
    (cells().filter(|c| c.options.gpu))
        .map(|c| keyed_code(&shared, c).finish())
        .collect()
}

fn keyed_code(shared: &str, cell: &CellBlock) -> KeyHasher {
    let mut h = KeyHasher::default();
    // Freezes made before this scheme (whole prelude, file contents) are stale once, by design.
    h.part("freeze key", b"2");
    for item in shared::used_prelude(shared, &cell.code) {
        h.part("prelude item", item.as_bytes());
    }
    let code = shared::tokens(&cell.code).unwrap_or_else(|| cell.code.clone());
    h.part("code", code.as_bytes())
        .part("timeout", &cell.options.timeout.unwrap_or(0).to_le_bytes())
        .part("expect-fail", &[u8::from(cell.options.expect_fail)]);
    h
}

/// One GPU cell's recorded output, its outcome parsed: the file's type is
/// [`cell_output::freeze::Freeze`], which a book's library reads too.
pub type Freeze = cell_output::freeze::Freeze<Stored>;

/// The command that makes freezes, as the badge names it.
pub const COMMAND: &str = "MDBOOK_CELLS_GPU=1 mdbook build";

/// Freezes `output` at `path` as made on `gpu` by `command`, unless the freeze there already
/// holds the same output from the same inputs on the same GPU (its date then stays: no commit
/// noise from reruns that changed nothing). Returns whether it wrote.
pub fn record(
    path: &Path,
    source: &str,
    gpu: &str,
    command: &str,
    output: &Stored,
) -> std::io::Result<bool> {
    let same = read(path).is_ok_and(|c| c.source == source && &c.output == output && c.gpu == gpu);
    if same {
        return Ok(false);
    }
    let frozen = Freeze {
        source: source.to_string(),
        gpu: gpu.to_string(),
        date: provenance::utc_now(),
        command: command.to_string(),
        output: output.clone(),
    };
    write(path, &frozen).map(|()| true)
}

/// Where chapter `chapter`'s `n`-th GPU cell (1-based) is frozen.
pub fn path(root: &Path, freeze_dir: &Path, chapter: &str, n: usize) -> PathBuf {
    let chapter = Path::new(chapter);
    let chapter = chapter.strip_prefix("src").unwrap_or(chapter);
    root.join(freeze_dir)
        .join(chapter.with_extension(""))
        .join(format!("gpu-{n}.json"))
}

/// Where a GPU cell's freeze is, and the hash of its inputs a current freeze carries.
#[derive(Debug, Clone)]
pub(crate) struct FreezeAt {
    pub(crate) path: PathBuf,
    pub(crate) source: String,
}

/// The freeze at `path`, or why there is none, as "the GPU cell … at PATH" goes on: a freeze
/// holds one output of a known kind (parsing checks it), never a failure (those are not frozen).
pub fn read(path: &Path) -> Result<Freeze, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("has no frozen output".into());
        }
        Err(e) => return Err(format!("has a frozen output that cannot be read ({e})")),
    };
    let freeze: Freeze = serde_json::from_str(&text)
        .map_err(|e| format!("has a frozen output that is not a freeze ({e})"))?;
    if let Some(kind) = freeze.output.outcome.failure() {
        return Err(format!(
            "has a frozen output of kind `{}`, which no GPU run freezes",
            kind.name()
        ));
    }
    Ok(freeze)
}

/// Writes `freeze` to `path` atomically (a reader sees the old file or the new one).
pub fn write(path: &Path, freeze: &Freeze) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(freeze).map_err(std::io::Error::other)? + "\n";
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Whether GPU runs were asked for: the config or `MDBOOK_CELLS_GPU`.
pub fn requested(config_gpu: bool) -> bool {
    config_gpu || std::env::var("MDBOOK_CELLS_GPU").is_ok_and(|v| v == "1" || v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{FailureKind, Outcome, OutputKind};

    #[test]
    fn a_freeze_of_an_unknown_kind_or_a_failure_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A folder not there yet: `write` makes it.
        let path = dir.path().join("freezes/gpu-1.json");
        assert_eq!(read(&path).unwrap_err(), "has no frozen output");
        let mut freeze = Freeze {
            source: "s".into(),
            gpu: "H200".into(),
            date: "2026-12-01T00:00:00Z".into(),
            command: COMMAND.into(),
            output: Stored::of(Outcome::Value {
                kind: OutputKind::Text,
                body: "ok".into(),
            }),
        };
        write(&path, &freeze).unwrap();
        assert_eq!(read(&path), Ok(freeze.clone()));
        freeze.output.outcome = Outcome::failed(FailureKind::Panic, "boom");
        write(&path, &freeze).unwrap();
        let why = read(&path).unwrap_err();
        assert!(why.contains("`panic`, which no GPU run freezes"), "{why}");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"panic\"", "\"<script>\"")).unwrap();
        let why = read(&path).unwrap_err();
        assert!(why.contains("not one this engine writes"), "{why}");
        assert!(!why.contains('<'), "quoted escaped: {why}");
        std::fs::write(&path, "{").unwrap();
        assert!(read(&path).unwrap_err().contains("not a freeze"));
    }
}
