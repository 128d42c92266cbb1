//! `mdbook-cells export CHAPTER DIR`: a chapter's cells taken away as a standalone cargo
//! project — the same prelude and parameters (with this build's values), the same dependencies
//! (path dependencies made absolute) and lockfile — whose `cargo run` runs the cells in the
//! chapter's order from the book's root and writes their outputs under `DIR/output/`.
//! GPU cells stay behind: they need the GPU dependencies and a GPU (see [`crate::bundle`]).

use crate::compile::{self, CellSource};
use crate::config::Config;
use crate::error::Error;
use crate::params::{self, Overrides};
use crate::parse;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The project's folder.
    pub dir: PathBuf,
    /// Cells in the program.
    pub cells: usize,
    /// GPU cells left out.
    pub gpu_cells: usize,
}

/// The command that exports `chapter`, as a page names it (`command` runs the preprocessor).
pub fn command(command: &str, chapter: &str) -> String {
    format!("{command} export {chapter} DIR")
}

/// Writes the project for `chapter` (a path under the book's `src`, as messages name it:
/// `src/part-1/wall.md`) into `dir`, which must be empty or absent.
#[expect(
    clippy::too_many_lines,
    reason = "one project written top to bottom (checks, main.rs, Cargo.toml, lockfile), each step a few lines that read in order"
)]
pub fn export(root: &Path, config: &Config, chapter: &str, dir: &Path) -> Result<Exported, Error> {
    let fail = |reason: String| Error::Export {
        chapter: chapter.to_string(),
        reason,
    };
    let markdown = std::fs::read_to_string(root.join(chapter))
        .map_err(|e| fail(format!("cannot read {}: {e}", root.join(chapter).display())))?;
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(fail(format!(
            "{} is not empty; export writes a new project",
            dir.display()
        )));
    }
    let parsed = parse::split(&markdown);
    let cells: Vec<&parse::CellBlock> = parse::cells(&parsed.segments).collect();
    if let Some(bad) = cells.iter().find(|c| !c.option_errors.is_empty()) {
        return Err(fail(format!(
            "the cell at line {} has bad options ({}); the book shows them",
            bad.fence_line, bad.option_errors[0]
        )));
    }

    // What the cells share: the parameters with this build's values, then the prelude.
    let overrides = Overrides::new(&config.parameters, std::env::vars());
    let mut shared = Vec::new();
    for c in cells.iter().filter(|c| c.options.parameters) {
        let (_, code, problems) = params::apply(&c.code, &overrides);
        if let Some((line, why)) = problems.first() {
            return Err(fail(format!("line {}: {why}", c.code_line + line)));
        }
        shared.push((code, c.code_line));
    }
    shared.extend(
        cells
            .iter()
            .filter(|c| c.options.prelude)
            .map(|c| (c.code.clone(), c.code_line)),
    );
    let shared = compile::shared_for_modules(&shared);

    let src = dir.join("src");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| Error::Crate { path, source: e }
    };
    std::fs::create_dir_all(&src).map_err(io(&src))?;
    let mut main = format!(
        "//! The cells of {chapter}, exported by mdbook-cells: `cargo run` runs them in the \
         chapter's\n//! order from the book's root and writes their outputs under `output/`.\n\n"
    );
    let mut list = String::new();
    let runnable: Vec<_> = cells
        .iter()
        .filter(|c| !(c.options.shared().is_some() || c.options.gpu))
        .collect();
    for c in &runnable {
        let module = format!("cell_{}", c.fence_line);
        let (text, _) = compile::module_text(&CellSource {
            module: module.clone(),
            chapter: chapter.to_string(),
            prelude: shared.clone(),
            code: c.code.clone(),
            code_line: c.code_line,
            last_line: c.last_code_line(),
        });
        let file = src.join(format!("{module}.rs"));
        std::fs::write(&file, text).map_err(io(&file))?;
        let caption = c.options.caption.as_deref().map(|c| format!(": {c}"));
        let caption = caption.unwrap_or_default();
        let _ = writeln!(main, "mod {module}; // line {}{caption}", c.fence_line);
        let name = c.options.id.clone().unwrap_or_else(|| module.clone());
        let _ = writeln!(
            list,
            "        Cell {{ at: \"{chapter}:{}\", name: \"{name}\", expect_fail: {}, run: {module}::run }},",
            c.fence_line, c.options.expect_fail
        );
    }
    let root = root
        .canonicalize()
        .map_err(|e| fail(format!("cannot resolve the book's root: {e}")))?;
    let _ = write!(
        main,
        "\nuse cell_output::export::Cell;\n\n/// The book's root, where the cells read their \
         files (`MDBOOK_CELLS_ROOT` overrides it).\nconst BOOK_ROOT: &str = {:?};\n\nfn main() \
         -> std::process::ExitCode {{\n    let cells = [\n{list}    ];\n    \
         cell_output::export::run(BOOK_ROOT, env!(\"CARGO_MANIFEST_DIR\"), &cells)\n}}\n",
        root.display().to_string()
    );
    let file = src.join("main.rs");
    std::fs::write(&file, main).map_err(io(&file))?;

    let stem: String = Path::new(chapter)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let mut dependencies = compile::cell_crate_dependencies(&root, config, false);
    for (_, dep) in dependencies.iter_mut() {
        if let Some(toml::Value::String(path)) = dep.get_mut("path")
            && let Ok(real) = Path::new(path.as_str()).canonicalize()
        {
            *path = real.display().to_string();
        }
    }
    let manifest = compile::manifest(
        &format!("Exported by mdbook-cells from {chapter}; yours to edit."),
        &format!("{}-cells", stem.trim_matches('-')),
        &dependencies,
        &config.profile,
    )
    .map_err(|e| fail(e.to_string()))?;
    let file = dir.join("Cargo.toml");
    std::fs::write(&file, manifest).map_err(io(&file))?;
    // The versions the book was built and tested with.
    if root.join("Cargo.lock").exists() {
        let file = dir.join("Cargo.lock");
        std::fs::copy(root.join("Cargo.lock"), &file).map_err(io(&file))?;
    }
    Ok(Exported {
        dir: dir.to_path_buf(),
        cells: runnable.len(),
        gpu_cells: cells.iter().filter(|c| c.options.gpu).count(),
    })
}
