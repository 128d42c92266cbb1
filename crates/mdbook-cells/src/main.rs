//! The `mdbook-cells` preprocessor binary: mdbook's protocol around the library.

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
