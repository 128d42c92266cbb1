//! The runner of a chapter exported by `mdbook-cells export`: its cells in the chapter's order,
//! from the book's root (where they find the files they read), each value written under
//! `output/` beside the exported project and what it printed shown as it runs.

use crate::Output;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One exported cell.
pub struct Cell {
    /// `src/chapter.md:LINE`, where the cell is in the book.
    pub at: &'static str,
    /// Its id (`fig-…`), or a name made from its line: its output file's stem.
    pub name: &'static str,
    /// Its failure is its point (`expect-fail`).
    pub expect_fail: bool,
    /// The cell.
    pub run: fn() -> Output,
}

/// Runs `cells` from `book_root` (`MDBOOK_CELLS_ROOT` overrides it: the book moved) and writes
/// their values under `project/output/`; fails if a cell fails unexpectedly.
pub fn run(book_root: &str, project: &str, cells: &[Cell]) -> ExitCode {
    let root = std::env::var_os("MDBOOK_CELLS_ROOT")
        .map_or_else(|| PathBuf::from(book_root), PathBuf::from);
    let output = Path::new(project).join("output");
    if let Err(e) = std::env::set_current_dir(&root).and_then(|()| std::fs::create_dir_all(&output))
    {
        eprintln!(
            "cannot run from the book's root {} or write {}: {e}",
            root.display(),
            output.display()
        );
        return ExitCode::FAILURE;
    }
    let mut failed = 0;
    for cell in cells {
        println!("── {} ({})", cell.at, cell.name);
        let result = panic::catch_unwind(AssertUnwindSafe(cell.run));
        let written = match result {
            Ok(Output::Error(message)) if cell.expect_fail => {
                println!("failed, as expected: {message}");
                Ok(None)
            }
            Ok(Output::Error(message)) => {
                eprintln!("{}: returned an error: {message}", cell.at);
                failed += 1;
                Ok(None)
            }
            Ok(_) if cell.expect_fail => {
                eprintln!("{}: succeeded, but the book expects it to fail", cell.at);
                failed += 1;
                Ok(None)
            }
            Ok(value) => write(&output, cell.name, &value),
            Err(_) if cell.expect_fail => Ok(None),
            Err(_) => {
                eprintln!("{}: panicked (message above)", cell.at);
                failed += 1;
                Ok(None)
            }
        };
        match written {
            Ok(Some(path)) => println!("→ {}", path.display()),
            Ok(None) => {}
            Err(e) => {
                eprintln!("{}: cannot write its output: {e}", cell.at);
                failed += 1;
            }
        }
    }
    println!(
        "{} cell(s) run, {failed} failed; outputs in {}",
        cells.len(),
        output.display()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Writes a value as the file a reader would open it with; text is also printed.
fn write(dir: &Path, name: &str, value: &Output) -> std::io::Result<Option<PathBuf>> {
    let ext = match value {
        Output::Nothing | Output::Error(_) => return Ok(None),
        Output::Text(text) => {
            println!("{text}");
            "txt"
        }
        Output::Markdown(_) => "md",
        Output::Html(_) | Output::Table(_) => "html",
        Output::Figure(_) => "svg",
    };
    let path = dir.join(format!("{name}.{ext}"));
    std::fs::write(&path, value.body())?;
    Ok(Some(path))
}
