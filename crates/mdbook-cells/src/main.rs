//! The `mdbook-cells` preprocessor binary: mdbook's protocol around the library, and from the
//! book's root: `mdbook-cells run-bundle DIR [--gpu-name NAME]`, which runs a GPU-cell bundle
//! on a GPU box (see `mdbook_cells::bundle`); `mdbook-cells export CHAPTER DIR`, which writes a
//! chapter's cells as a cargo project (see `mdbook_cells::export`); `mdbook-cells fmt`, which
//! rewrites every cell as rustfmt would (see `mdbook_cells::lint`).

use anyhow::Context;
use mdbook_cells::Cells;
use mdbook_preprocessor::Preprocessor;
use std::io::{Read, Write};
use std::process::ExitCode;

/// A subcommand: its arguments in, its exit code out.
type Command = fn(&[String]) -> anyhow::Result<ExitCode>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [supports, renderer] = args.as_slice()
        && supports == "supports"
    {
        return match Cells.supports_renderer(renderer) {
            Ok(true) => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        };
    }
    let command: Option<(&str, Command)> = match args.first().map(String::as_str) {
        Some("run-bundle") => Some(("run-bundle", run_bundle)),
        Some("export") => Some(("export", export)),
        Some("fmt") => Some(("fmt", fmt)),
        _ => None,
    };
    if let Some((name, command)) = command {
        return match command(&args[1..]) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("mdbook-cells {name}: error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mdbook-cells: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    // Read whole, then parsed from memory, and written in one go: parsing through a reader
    // and writing through stdout's line buffer took a fifth of a fully cached build.
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("reading the book from mdbook")?;
    let (ctx, book): (
        mdbook_preprocessor::PreprocessorContext,
        mdbook_preprocessor::book::Book,
    ) = serde_json::from_slice(&input).context("reading the book from mdbook")?;
    drop(input);
    let book = Cells.run(&ctx, book)?;
    let output = serde_json::to_vec(&book).context("writing the book back to mdbook")?;
    let mut out = std::io::stdout().lock();
    out.write_all(&output)?;
    out.flush()?;
    Ok(())
}

fn run_bundle(args: &[String]) -> anyhow::Result<ExitCode> {
    const USAGE: &str = "usage: mdbook-cells run-bundle DIR [--gpu-name NAME]\n\
        Runs the GPU cells bundled in DIR (by `MDBOOK_CELLS_GPU_BUNDLE=DIR mdbook build`) on this \
        machine's GPU and writes their freezes. Run it from the book's root.";
    let (dir, gpu_name) = match args {
        [flag] if flag == "--help" || flag == "-h" => {
            println!("{USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
        [dir] => (dir, None),
        [dir, flag, name] if flag == "--gpu-name" => (dir, Some(name.clone())),
        _ => anyhow::bail!("{USAGE}"),
    };
    let run = mdbook_cells::bundle::run(
        std::path::Path::new(dir),
        std::path::Path::new("."),
        gpu_name,
    )
    .with_context(|| format!("running the bundle in {dir}"))?;
    for path in &run.frozen {
        println!("froze {}", path.display());
    }
    for failure in &run.failed {
        eprintln!("{failure}");
    }
    println!(
        "{} GPU cell(s) frozen, {} failed",
        run.frozen.len(),
        run.failed.len()
    );
    Ok(if run.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn export(args: &[String]) -> anyhow::Result<ExitCode> {
    const USAGE: &str = "usage: mdbook-cells export CHAPTER DIR\n\
        Writes the cells of CHAPTER (`src/part-1/wall.md`) as a cargo project in DIR (new or \
        empty): the chapter's prelude and parameters, the book's dependencies and lockfile. \
        `cargo run` in DIR runs the cells from the book's root and writes their outputs under \
        DIR/output. Run it from the book's root; set CARGO_TARGET_DIR to the book's \
        cache-dir/target to reuse the dependencies the book already compiled.";
    let [chapter, dir] = args else {
        if args.len() == 1 && (args[0] == "--help" || args[0] == "-h") {
            println!("{USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
        anyhow::bail!("{USAGE}");
    };
    let root = std::path::Path::new(".");
    let (config, _) = mdbook_cells::config::Config::of_book(root)?;
    let exported = mdbook_cells::export::export(root, &config, chapter, std::path::Path::new(dir))?;
    println!(
        "{} cell(s) of {chapter} written to {}{}; run them: cd {} && cargo run",
        exported.cells,
        exported.dir.display(),
        match exported.gpu_cells {
            0 => String::new(),
            n => format!(" ({n} GPU cell(s) left out: they run on a GPU box)"),
        },
        exported.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn fmt(args: &[String]) -> anyhow::Result<ExitCode> {
    const USAGE: &str = "usage: mdbook-cells fmt\n\
        Rewrites every cell of the book (run from its root) as rustfmt would, at the book's \
        rustfmt width; strict builds report the cells it would change.";
    if !args.is_empty() {
        if args.len() == 1 && (args[0] == "--help" || args[0] == "-h") {
            println!("{USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
        anyhow::bail!("{USAGE}");
    }
    let root = std::path::Path::new(".");
    let (_, src) = mdbook_cells::config::Config::of_book(root)?;
    let done = mdbook_cells::lint::fmt_book(root, &src)?;
    for file in &done.files {
        println!("formatted {}", file.display());
    }
    println!(
        "{} cell(s) rewritten in {} chapter(s)",
        done.cells,
        done.files.len()
    );
    Ok(ExitCode::SUCCESS)
}
