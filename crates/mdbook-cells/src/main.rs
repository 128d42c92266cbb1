//! The `mdbook-cells` preprocessor binary: mdbook's protocol around the library, and
//! `mdbook-cells run-bundle DIR [--gpu-name NAME]`, which runs a GPU-cell bundle on a GPU box
//! from the book's root (see `mdbook_cells::bundle`).

use anyhow::Context;
use mdbook_cells::Cells;
use mdbook_preprocessor::Preprocessor;
use std::io::Write;
use std::process::ExitCode;

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
    if args.first().is_some_and(|a| a == "run-bundle") {
        return match run_bundle(&args[1..]) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("mdbook-cells run-bundle: error: {e:#}");
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
    let (ctx, book) = mdbook_preprocessor::parse_input(std::io::stdin().lock())
        .context("reading the book from mdbook")?;
    let book = Cells.run(&ctx, book)?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &book).context("writing the book back to mdbook")?;
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
