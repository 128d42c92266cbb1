//! *Apply it to your job* (`src/apply.md`): what its cells compute.

use std::collections::BTreeSet;

use cell_output::Table;

use crate::Book;
use crate::BookError;

/// The fields of the recipe at `path` (under the book's root), each with its table, its value as
/// written (a byte count also in binary units, so that it reads at a glance) and whether it was
/// fitted to the incident's logs: marked `CALIBRATED` in its own comment or in the comment
/// block just above it.
pub fn recipe_fields(book: &Book, path: &str) -> Result<Table, BookError> {
    let text = book.read(path)?;
    let file: toml::Table = book.toml(path)?;
    let calibrated = calibrated_fields(&text);
    let mut t = Table::new(["table", "field", "value", "fitted to the logs?"]);
    for (table, fields) in &file {
        for (key, value) in fields.as_table().into_iter().flatten() {
            let fitted = if calibrated.contains(key) {
                "yes: calibrated"
            } else {
                "no"
            };
            let shown = match value.as_integer() {
                Some(b) if key.ends_with("bytes") => {
                    format!("{b} ({})", crate::bytes::show(b.unsigned_abs()))
                }
                _ => value.to_string(),
            };
            t.push([table.clone(), key.clone(), shown, fitted.to_string()]);
        }
    }
    Ok(t)
}

/// The keys of a recipe's text that its comments mark `CALIBRATED`: on the key's own line, or
/// in the comment block just above it (a blank line does not end a block; a field does).
fn calibrated_fields(text: &str) -> BTreeSet<String> {
    let mut calibrated = BTreeSet::new();
    let mut marked = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            marked |= line.contains("CALIBRATED");
        } else if let Some((key, _)) = line.split_once('=') {
            if marked || line.contains("CALIBRATED") {
                calibrated.insert(key.trim().to_string());
            }
            marked = false;
        }
    }
    calibrated
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SiTU recipe: every field of its five tables, and exactly the three the chapter's
    /// recipe comments mark as fitted to the logs.
    #[test]
    fn the_situ_recipe_marks_three_fields_as_fitted() {
        let book = Book::repository();
        let t = recipe_fields(&book, "repro/recipes/situ.toml").unwrap();
        let fitted: Vec<&str> = t
            .rows()
            .iter()
            .filter(|r| r[3] == "yes: calibrated")
            .map(|r| r[1].as_str())
            .collect();
        assert_eq!(
            fitted,
            ["late_releases", "step_probability", "live_bytes"],
            "{:?}",
            t.rows()
        );
        let total = t.rows().iter().find(|r| r[1] == "total_bytes").unwrap();
        assert_eq!(total[2], "17179869184 (16 GiB)");
        // One row per field of every table, none left out.
        let file: toml::Table =
            toml::from_str(&book.read("repro/recipes/situ.toml").unwrap()).unwrap();
        let fields: usize = file
            .values()
            .filter_map(toml::Value::as_table)
            .map(toml::Table::len)
            .sum();
        assert_eq!(t.rows().len(), fields);
    }

    #[test]
    fn a_field_is_calibrated_by_its_own_comment_or_the_block_above() {
        let text = "# CALIBRATED: why\n\na = 1\nb = 2\nc = 3 # CALIBRATED\n";
        let keys: Vec<String> = calibrated_fields(text).into_iter().collect();
        assert_eq!(keys, ["a", "c"]);
    }
}
