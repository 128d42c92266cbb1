//! The generated cell crate: one module per cell, compiled once for the whole book.
//!
//! A compile error is mapped from rustc's JSON diagnostics back to the chapter lines of the
//! cell (or of its chapter's prelude) that caused it. Broken cells are replaced by stubs and
//! the crate is rebuilt, so one broken cell never takes the others down with it.

use crate::config::Config;
use crate::context::Context;
use crate::error::Error;
use crate::lines::{self, LineMap};
use crate::quick::{self, RustcCall};
use crate::shared;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// One cell's code, where it came from, and where it lands in the generated crate.
#[derive(Debug, Clone)]
pub(crate) struct CellSource {
    /// Module name, unique in the crate (also the cell's id for the harness).
    pub(crate) module: String,
    /// The chapter's file, as shown in messages (`src/intro.md`).
    pub(crate) chapter: String,
    /// What the chapter's cells share, in order (its parameters, its prelude): each part's
    /// code and the chapter line of its first line, as [`shared_for_modules`] prepares it once
    /// for all the chapter's cells.
    pub(crate) prelude: Arc<[(String, usize)]>,
    pub(crate) code: String,
    pub(crate) code_line: usize,
    /// Chapter line blamed for errors in the wrapper (the cell's value has the wrong type…).
    pub(crate) last_line: usize,
}

/// A compile error attributed to a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CellDiagnostic {
    pub(crate) line: usize,
    /// The error lies in the chapter's prelude, not in the cell itself.
    pub(crate) in_prelude: bool,
    /// The error rendered against the chapter's own file and lines.
    pub(crate) rendered: String,
}

/// The result of compiling the crate.
#[derive(Debug, Default)]
pub(crate) struct Compiled {
    /// The runnable binary, if anything could be built.
    pub(crate) binary: Option<PathBuf>,
    /// Errors per module; those modules were stubbed.
    pub(crate) errors: BTreeMap<String, Vec<CellDiagnostic>>,
    /// An error no cell is to blame for (a dependency failed to build, cargo is missing…).
    pub(crate) global: Option<String>,
}

pub(crate) struct CellCrate {
    dir: PathBuf,
    target_dir: PathBuf,
    maps: BTreeMap<String, LineMap>,
}

/// The Cargo.toml of a crate of cells named `name`: the book's `dependencies` and its `profile`
/// merged over the cells' defaults; not part of any enclosing workspace. `head` is its first
/// comment line.
pub(crate) fn manifest(
    head: &str,
    name: &str,
    dependencies: &toml::Table,
    profile: &toml::Table,
) -> Result<String, toml::ser::Error> {
    let mut table = toml::Table::new();
    table.insert(
        "profile".into(),
        toml::Table::from_iter([("dev".to_string(), dev_profile(profile).into())]).into(),
    );
    table.insert("dependencies".into(), dependencies.clone().into());
    Ok(format!(
        "# {head}\n[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[[bin]]\nname = \"{name}\"\npath = \"src/main.rs\"\n\n\
         # Not part of any enclosing workspace.\n[workspace]\n\n{}",
        toml::to_string(&table)?
    ))
}

/// The book's dependencies plus `cell-output`, which every cell crate needs.
pub(crate) fn cell_crate_dependencies(root: &Path, config: &Config, gpu: bool) -> toml::Table {
    let mut deps = config.absolute_dependencies(root, gpu);
    deps.entry("cell-output")
        .or_insert_with(|| env!("CARGO_PKG_VERSION").into());
    deps
}

/// The cell crate's `[profile.dev]`: cells compile unoptimized (fast edits) without debug
/// info, their dependencies at full speed; the book's `profile` table is merged over that, key
/// by key (`[preprocessor.cells.profile.package.situ] opt-level = 0`).
fn dev_profile(book: &toml::Table) -> toml::Table {
    let mut profile: toml::Table = toml::from_str(
        r#"
debug = 0
[package."*"]
opt-level = 3
"#,
    )
    .expect("the default profile parses");
    merge(&mut profile, book);
    profile
}

/// Merges `over` into `base`, tables key by key, anything else replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

impl CellCrate {
    /// Writes the book's crate of `cells` in its cache folder, with the book's dependencies
    /// (the GPU cells' too, when the build compiles them) and profile. Files whose content is
    /// unchanged are left alone, so cargo and incremental compilation see only what was edited.
    pub(crate) fn write(ctx: &Context<'_>, cells: &[CellSource]) -> Result<CellCrate, Error> {
        let dir = ctx.cache_dir().join("crate");
        let write = || {
            std::fs::create_dir_all(&dir)?;
            let head = "Generated by mdbook-cells from the book's cells; edits are overwritten.";
            let dependencies = cell_crate_dependencies(ctx.root, ctx.config, ctx.gpu.compiled());
            let manifest = manifest(head, "book-cells", &dependencies, &ctx.config.profile)
                .map_err(std::io::Error::other)?;
            write_if_changed(&dir.join("Cargo.toml"), &manifest)?;
            // Start from the book's lockfile so cells see the versions the project tested.
            let seed = ctx.root.join("Cargo.lock");
            if !dir.join("Cargo.lock").exists() && seed.exists() {
                std::fs::copy(seed, dir.join("Cargo.lock"))?;
            }
            CellCrate::write_sources(&dir, &ctx.cache_dir().join("target"), cells)
        };
        write().map_err(|source| Error::Crate {
            path: dir.clone(),
            source,
        })
    }

    /// Writes only the crate's sources (`src/`) for `cells` under `dir`: all that a quick
    /// build (rustc without cargo) reads.
    pub(crate) fn write_sources(
        dir: &Path,
        target_dir: &Path,
        cells: &[CellSource],
    ) -> std::io::Result<CellCrate> {
        let src = dir.join("src");
        std::fs::create_dir_all(&src)?;
        let mut maps = BTreeMap::new();
        let mut main = String::from("// Generated by mdbook-cells.\n");
        let mut keep = BTreeSet::from(["main.rs".to_string()]);
        for cell in cells {
            let (text, map) = module_text(cell);
            write_if_changed(&src.join(format!("{}.rs", cell.module)), &text)?;
            keep.insert(format!("{}.rs", cell.module));
            let _ = writeln!(main, "mod {};", cell.module);
            maps.insert(cell.module.clone(), map);
        }
        main.push_str("\nfn main() {\n    ::cell_output::harness::main(&[\n");
        for cell in cells {
            let _ = writeln!(main, "        (\"{0}\", {0}::run),", cell.module);
        }
        main.push_str("    ]);\n}\n");
        write_if_changed(&src.join("main.rs"), &main)?;
        for entry in std::fs::read_dir(&src)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) {
                let _ = std::fs::remove_file(src.join(name));
            }
        }
        Ok(CellCrate {
            dir: dir.to_path_buf(),
            target_dir: target_dir.to_path_buf(),
            maps,
        })
    }

    /// `cargo SUBCOMMAND` over the crate, its messages as JSON, in the cells' target folder and
    /// free of the variables of any cargo that started this process.
    fn cargo(&self, subcommand: &str) -> Command {
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or("cargo".into()));
        cargo
            .args([
                subcommand,
                "--quiet",
                "--message-format=json",
                "--manifest-path",
            ])
            .arg(self.dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &self.target_dir)
            .env_remove("CARGO_MANIFEST_DIR")
            .env_remove("CARGO_PRIMARY_PACKAGE");
        cargo
    }

    /// Builds the crate with cargo, or with rustc alone replaying `quick` (a quick build);
    /// modules that fail are stubbed and the build retried. cargo's call for the binary is
    /// recorded for the quick builds to come.
    pub(crate) fn compile(&self, quick: Option<&RustcCall>) -> Compiled {
        let mut compiled = Compiled::default();
        let mut command = match quick {
            Some(call) => call.command(&self.dir),
            None => {
                let mut cargo = self.cargo("build");
                match quick::recorder(&self.dir) {
                    Ok(recorder) => cargo.env("RUSTC_WORKSPACE_WRAPPER", recorder),
                    Err(e) => {
                        compiled.global = Some(format!("cannot write the rustc recorder: {e}"));
                        return compiled;
                    }
                };
                cargo
            }
        };
        // Each round stubs at least one module, or stops.
        for _ in 0..=self.maps.len().min(8) {
            let output = match command.output() {
                Ok(o) => o,
                Err(e) => {
                    compiled.global = Some(format!("cannot run cargo: {e}"));
                    return compiled;
                }
            };
            // cargo writes its JSON messages to stdout, rustc to stderr.
            let messages = [&output.stdout, &output.stderr].map(|o| String::from_utf8_lossy(o));
            let (errors, unattributed, binary) = self.read_messages(&messages.join("\n"));
            if output.status.success() {
                compiled.binary = binary;
                return compiled;
            }
            if errors.is_empty() {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let mut msg = unattributed.join("\n");
                if msg.is_empty() {
                    msg = stderr.trim().to_string();
                }
                compiled.global = Some(msg);
                return compiled;
            }
            for (module, diags) in errors {
                if let Err(e) =
                    write_if_changed(&self.dir.join("src").join(format!("{module}.rs")), STUB)
                {
                    compiled.global = Some(format!("cannot stub {module}: {e}"));
                    return compiled;
                }
                compiled.errors.entry(module).or_default().extend(diags);
            }
        }
        compiled.global =
            Some("the cell crate still fails after stubbing every broken cell".into());
        compiled
    }

    /// Runs clippy over the crate: its warnings whose place is a cell's or its chapter's shared
    /// code, each with its chapter (a warning in shared code comes once per chapter), or why
    /// clippy could not run.
    pub(crate) fn lint(&self) -> Result<Vec<(String, CellDiagnostic)>, String> {
        let output = self
            .cargo("clippy")
            .output()
            .map_err(|e| format!("cannot run cargo clippy: {e}"))?;
        let mut found: Vec<(String, CellDiagnostic)> = Vec::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(msg) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let diag = &msg["message"];
            if msg["reason"].as_str() != Some("compiler-message")
                || diag["level"].as_str() != Some("warning")
            {
                continue;
            }
            let Some((module, d)) = self.attribute(diag) else {
                continue;
            };
            let chapter = self.maps[&module].chapter.clone();
            if !found.iter().any(|(c, f)| c == &chapter && f == &d) {
                found.push((chapter, d));
            }
        }
        if !output.status.success() && found.is_empty() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!("cargo clippy failed: {}", stderr.trim()));
        }
        Ok(found)
    }

    /// Splits cargo's (or rustc's) JSON messages into errors per module, errors nobody owns,
    /// and the binary.
    fn read_messages(
        &self,
        stdout: &str,
    ) -> (
        BTreeMap<String, Vec<CellDiagnostic>>,
        Vec<String>,
        Option<PathBuf>,
    ) {
        let mut errors: BTreeMap<String, Vec<CellDiagnostic>> = BTreeMap::new();
        let mut unattributed = Vec::new();
        let mut binary = None;
        for line in stdout.lines() {
            let Ok(msg) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            // cargo's messages wrap rustc's: `{"reason": …, "message": diagnostic}`.
            let kind = msg["reason"].as_str().or(msg["$message_type"].as_str());
            match kind {
                Some("compiler-artifact") => {
                    if let Some(exe) = msg["executable"].as_str() {
                        binary = Some(PathBuf::from(exe));
                    }
                }
                Some("artifact") if msg["emit"].as_str() == Some("link") => {
                    binary = msg["artifact"].as_str().map(PathBuf::from);
                }
                Some("compiler-message" | "diagnostic") => {
                    let diag = if kind == Some("diagnostic") {
                        &msg
                    } else {
                        &msg["message"]
                    };
                    if diag["level"].as_str() != Some("error") {
                        continue;
                    }
                    match self.attribute(diag) {
                        Some((module, d)) => errors.entry(module).or_default().push(d),
                        None => {
                            // "aborting due to N errors" and friends carry no span.
                            let spanless = diag["spans"].as_array().is_none_or(Vec::is_empty);
                            let text = diag["rendered"].as_str().unwrap_or_default();
                            if !(spanless && text.contains("aborting due to")) {
                                unattributed.push(text.trim_end().to_string());
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        (errors, unattributed, binary)
    }

    /// The module and chapter position of a diagnostic whose primary span (or the macro call
    /// that produced it) lies in a cell module.
    fn attribute(&self, diag: &Value) -> Option<(String, CellDiagnostic)> {
        let spans = diag["spans"].as_array()?;
        let primary = spans
            .iter()
            .find(|s| s["is_primary"].as_bool() == Some(true))?;
        let mut span = primary;
        let (module, map) = loop {
            if let Some(found) = self.module_of(span) {
                break found;
            }
            span = span.get("expansion")?.get("span")?;
        };
        let generated = span["line_start"].as_u64()? as usize;
        let (line, in_prelude) = map.chapter_line(generated);
        let column = span["column_start"].as_u64().unwrap_or(1) as usize;
        let rendered = render_diagnostic(diag, span, &map.chapter, line, column, &|g| {
            map.chapter_line(g).0
        });
        Some((
            module.to_string(),
            CellDiagnostic {
                line,
                in_prelude,
                rendered,
            },
        ))
    }

    fn module_of(&self, span: &Value) -> Option<(&str, &LineMap)> {
        let file = span["file_name"].as_str()?;
        let stem = file.strip_prefix("src/")?.strip_suffix(".rs")?;
        self.maps.get_key_value(stem).map(|(k, v)| (k.as_str(), v))
    }

    /// A panic location `src/MODULE.rs:LINE` in a message, as the cache and store keep it.
    pub(crate) fn keep_panic_location(&self, message: &str) -> String {
        lines::keep_panic_location(&self.maps, message)
    }

    /// Where each module's lines came from.
    pub(crate) fn line_maps(&self) -> &BTreeMap<String, LineMap> {
        &self.maps
    }
}

const STUB: &str = "// This cell did not compile; see its error in the book.\n\
pub(crate) fn run() -> ::cell_output::Output {\n    \
::cell_output::Output::Error(\"did not compile\".into())\n}\n";

/// The module for one cell: the prelude's items, then the body wrapped so that its last
/// expression becomes the cell's value and `?` works on any error.
pub(crate) fn module_text(cell: &CellSource) -> (String, LineMap) {
    let mut text = String::from(
        "// Generated by mdbook-cells from a book cell.\n#![allow(unused_imports)]\nuse ::cell_output::prelude::*;\n",
    );
    let mut next_line = 4;
    let prelude = cell
        .prelude
        .iter()
        .map(|(code, line)| {
            let len = code.lines().count();
            text.push_str(code);
            let start = next_line;
            next_line += len;
            (start, len, *line)
        })
        .collect();
    // The wrapper's own shape (a closure called where it is made, a cell's `()` passed on) is
    // not the cell's to lint.
    text.push_str(
        "#[allow(clippy::redundant_closure_call, clippy::unit_arg)] pub fn run() -> ::cell_output::Output {\n    ::cell_output::finish((|| -> ::core::result::Result<_, ::cell_output::CellError> { ::core::result::Result::Ok({\n",
    );
    next_line += 2;
    let body = ensure_newline(&cell.code);
    let len = body.lines().count();
    text.push_str(&body);
    text.push_str("    }) })())\n}\n");
    let map = LineMap {
        chapter: cell.chapter.clone(),
        prelude,
        body: (next_line, len, cell.code_line),
        last_line: cell.last_line,
    };
    (text, map)
}

/// A chapter's shared code (`(code, first chapter line)` per part) as each of its cells' modules
/// holds it: every item allowed to go unused, each part ending in a newline. Once per chapter,
/// not per cell: marking the items parses the code.
pub(crate) fn shared_for_modules(parts: &[(String, usize)]) -> Arc<[(String, usize)]> {
    (parts.iter())
        .map(|(code, line)| (ensure_newline(&unused_allowed(code)), *line))
        .collect()
}

/// What [`unused_allowed`] puts before each shared item; a diagnostic's source line shows
/// the chapter's text without it.
const SHARED_ALLOW: &str = "#[allow(dead_code, unused_macros)] ";

/// `code` (a chapter's shared items) with each item allowed to go unused: every cell's module
/// holds them all, and each uses a few. (Items that no cell uses are the strict build's
/// problem: see `lint`.) The attribute goes on the item's own first line, so line numbers stay.
fn unused_allowed(code: &str) -> String {
    let mut lines: Vec<String> = code.lines().map(String::from).collect();
    for (line, column) in shared::item_starts(code).into_iter().rev() {
        let Some(text) = lines.get_mut(line - 1) else {
            continue;
        };
        let at = text
            .char_indices()
            .nth(column)
            .map_or(text.len(), |(i, _)| i);
        text.insert_str(at, SHARED_ALLOW);
    }
    let mut out = lines.join("\n");
    if code.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn ensure_newline(code: &str) -> String {
    if code.is_empty() || code.ends_with('\n') {
        code.to_string()
    } else {
        format!("{code}\n")
    }
}

/// `error[E0425]: …` with its location, source line and labels on the chapter's own lines.
fn render_diagnostic(
    diag: &Value,
    span: &Value,
    chapter: &str,
    line: usize,
    column: usize,
    to_chapter: &dyn Fn(usize) -> usize,
) -> String {
    let mut out = String::from(diag["level"].as_str().unwrap_or("error"));
    if let Some(code) = diag["code"]["code"].as_str() {
        let _ = write!(out, "[{code}]");
    }
    let _ = writeln!(out, ": {}", diag["message"].as_str().unwrap_or_default());
    // The line as the chapter has it: without the allowances put before shared items.
    let source = span["text"].as_array().and_then(|t| t.first());
    let line_text = source.and_then(|t| t["text"].as_str()).unwrap_or_default();
    let before = |at: usize| {
        let head: String = line_text.chars().take(at.saturating_sub(1)).collect();
        head.matches(SHARED_ALLOW).count() * SHARED_ALLOW.chars().count()
    };
    let column = column - before(column);
    let _ = writeln!(out, "  --> {chapter}:{line}:{column}");
    if let Some(text) = source {
        let source = line_text.replace(SHARED_ALLOW, "");
        let from = text["highlight_start"].as_u64().unwrap_or(1).max(1) as usize;
        let to = text["highlight_end"].as_u64().unwrap_or(from as u64 + 1) as usize;
        let (from, to) = (from - before(from), to - before(to));
        let gutter = line.to_string().len();
        let label = span["label"].as_str().unwrap_or_default();
        let _ = writeln!(out, "{:gutter$} |", "");
        let _ = writeln!(out, "{line} | {source}");
        let marks = "^".repeat(to.saturating_sub(from).max(1));
        let _ = writeln!(
            out,
            "{:gutter$} | {}{marks} {label}",
            "",
            " ".repeat(from - 1)
        );
    }
    for child in diag["children"].as_array().into_iter().flatten() {
        let level = child["level"].as_str().unwrap_or("note");
        let message = child["message"].as_str().unwrap_or_default();
        let at = child["spans"]
            .as_array()
            .and_then(|s| s.first())
            .filter(|s| {
                s["file_name"]
                    .as_str()
                    .is_some_and(|f| f.starts_with("src/"))
            })
            .and_then(|s| s["line_start"].as_u64())
            .map(|l| format!(" (line {})", to_chapter(l as usize)))
            .unwrap_or_default();
        let _ = writeln!(out, "  = {level}: {message}{at}");
    }
    out.trim_end().to_string()
}

fn write_if_changed(path: &Path, content: &str) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == content.as_bytes()) {
        return Ok(());
    }
    std::fs::write(path, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_books_profile_is_merged_over_the_defaults_key_by_key() {
        let book: toml::Table =
            toml::from_str("[package.situ]\nopt-level = 0\n[package.\"*\"]\ndebug = 1").unwrap();
        let p = dev_profile(&book);
        assert_eq!(p["debug"].as_integer(), Some(0));
        assert_eq!(p["package"]["*"]["opt-level"].as_integer(), Some(3));
        assert_eq!(p["package"]["*"]["debug"].as_integer(), Some(1));
        assert_eq!(p["package"]["situ"]["opt-level"].as_integer(), Some(0));
    }

    fn cell(prelude: Option<&str>) -> CellSource {
        CellSource {
            module: "intro_md_0".into(),
            chapter: "src/intro.md".into(),
            prelude: shared_for_modules(
                &prelude
                    .map(|p| (p.to_string(), 3))
                    .into_iter()
                    .collect::<Vec<_>>(),
            ),
            code: "let x = 1;\nx + y\n".into(),
            code_line: 20,
            last_line: 21,
        }
    }

    #[test]
    fn shared_items_may_go_unused_and_keep_their_lines() {
        let code =
            "/// Doc.\nfn a() {}\nconst B: u8 = 1; const C: u8 = 2;\nmacro_rules! m { () => {} }\n";
        let marked = unused_allowed(code);
        let allow = "#[allow(dead_code, unused_macros)] ";
        assert_eq!(
            marked,
            format!(
                "{allow}/// Doc.\nfn a() {{}}\n{allow}const B: u8 = 1; {allow}const C: u8 = 2;\n{allow}macro_rules! m {{ () => {{}} }}\n"
            )
        );
        assert_eq!(
            unused_allowed("fn broken("),
            "fn broken(",
            "left to the compiler"
        );
    }

    #[test]
    fn line_map_covers_prelude_body_and_wrapper() {
        let (text, map) = module_text(&cell(Some("use std::fmt;\nfn helper() {}\n")));
        let lines: Vec<&str> = text.lines().collect();
        // Generated lines are 1-based.
        assert_eq!(lines[map.body.0 - 1], "let x = 1;");
        assert_eq!(map.chapter_line(map.body.0 + 1), (21, false));
        let (p, _, _) = map.prelude[0];
        assert_eq!(
            lines[p - 1],
            "#[allow(dead_code, unused_macros)] use std::fmt;"
        );
        assert_eq!(map.chapter_line(p + 1), (4, true));
        assert_eq!(map.chapter_line(1), (21, false));
    }

    #[test]
    fn diagnostics_are_attributed_to_chapter_lines() {
        let (_, map) = module_text(&cell(None));
        let krate = CellCrate {
            dir: PathBuf::new(),
            target_dir: PathBuf::new(),
            maps: BTreeMap::from([("intro_md_0".to_string(), map.clone())]),
        };
        let body_line = map.body.0 + 1;
        let diag = serde_json::json!({
            "level": "error", "message": "cannot find value `y` in this scope",
            "code": {"code": "E0425"},
            "spans": [{"file_name": "src/intro_md_0.rs", "line_start": body_line,
                "column_start": 5, "is_primary": true, "label": "not found in this scope",
                "text": [{"text": "x + y", "highlight_start": 5, "highlight_end": 6}]}],
            "children": [{"level": "help", "message": "a local variable with a similar name exists", "spans": []}]
        });
        let (module, d) = krate.attribute(&diag).unwrap();
        assert_eq!(module, "intro_md_0");
        assert_eq!(d.line, 21);
        assert!(!d.in_prelude);
        assert_eq!(
            d.rendered,
            "error[E0425]: cannot find value `y` in this scope\n  --> src/intro.md:21:5\n   |\n21 | x + y\n   |     ^ not found in this scope\n  = help: a local variable with a similar name exists"
        );
        let kept = krate.keep_panic_location(&format!("boom at src/intro_md_0.rs:{body_line}"));
        assert_eq!(map.resolve_panic_location(&kept), "boom at src/intro.md:21");
    }
}
