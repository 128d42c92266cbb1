//! Reading what the commands are given: recipes and model files, bounded, with errors that
//! name the file and quote the line.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use highwater::Recipe;
use highwater::limits::{MAX_RECIPE_BYTES, quote};

/// Reads and validates a recipe; errors name the file, line, field and reason, and quote
/// the line.
pub(crate) fn load_recipe(path: &Path) -> Result<Recipe> {
    Ok(read_recipe(path)?.0)
}

/// [`load_recipe`], and the file's text.
pub(crate) fn read_recipe(path: &Path) -> Result<(Recipe, String)> {
    let origin = path.display().to_string();
    let text = read_input(path, "recipe")?;
    let recipe = Recipe::parse(&origin, &text).map_err(|e| {
        let quoted = quoted_line(&text, e.line());
        anyhow!(e).context(format!("invalid recipe {origin}{quoted}"))
    })?;
    Ok((recipe, text))
}

/// The text of a recipe or model file (`what` names it in errors), read no further than
/// [`MAX_RECIPE_BYTES`]: a file past it is refused before it is read whole.
pub(crate) fn read_input(path: &Path, what: &str) -> Result<String> {
    use std::io::Read as _;
    let origin = path.display().to_string();
    let cannot = || format!("cannot read {what} {origin}");
    let mut bytes = vec![];
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_RECIPE_BYTES.max + 1).read_to_end(&mut bytes))
        .with_context(cannot)?;
    if !MAX_RECIPE_BYTES.allows(bytes.len() as u64) {
        bail!("{what} {origin} is longer than {MAX_RECIPE_BYTES}");
    }
    String::from_utf8(bytes).with_context(cannot)
}

/// ` (line N: `…`)`: the line an error points at, as [`quote`] cuts it; empty past the end.
pub(crate) fn quoted_line(text: &str, line: usize) -> String {
    text.lines()
        .nth(line.saturating_sub(1))
        .map(|l| format!(" (line {line}: `{}`)", quote(l.trim())))
        .unwrap_or_default()
}
