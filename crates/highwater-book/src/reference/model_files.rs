//! *Model files* (`src/reference/model-files.md`): the format `highwater fit` reads. Its tables
//! are printed from the parser's own description of the format (`highwater::network::KEYS`,
//! held by the parser's tests to the keys, defaults and names it reads), its limits from
//! `highwater::limits`, and its errors are the parser's, run on broken copies of a bundled file:
//! the page cannot drift from the code.

use cell_output::Table;
use highwater::limits::{
    Limit, MAX_DRY_STEPS, MAX_RECIPE_BYTES, MAX_SEARCH_BATCH, MAX_TENSOR_BYTES,
};
use highwater::network::{Allowed, FAMILY_DOCS, Key, Network, Written, keys_of};

use crate::BookError;
use crate::{Book, bytes};

/// The values a key accepts, as the tables write them.
pub fn allowed(key: &Key) -> String {
    match key.allowed {
        Allowed::Count("") => "whole, ≥ 1".into(),
        Allowed::Count(rule) => format!("whole, ≥ 1; {rule}"),
        Allowed::Any => format!("whole, 0 to {}", u64::MAX),
        Allowed::OneOf(names) => names
            .iter()
            .map(|n| format!("`\"{n}\"`"))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// Whether a key must be written, as the tables write it.
pub fn written(key: &Key) -> String {
    match key.written {
        Written::Required => "required".into(),
        Written::Default(value) => format!("default `{value}`"),
    }
}

/// The families: each table's name, what it builds of burn's modules and what its `batch`
/// counts; each has a bundled file, `repro/models/TABLE.toml` (checked to be there).
pub fn families_table(book: &Book) -> Result<Table, BookError> {
    // The name as plain text: a browser may break code anywhere, and gave the name's column
    // so little room that `[decoder]` broke mid-word.
    let mut t = Table::new(["table", "the model, in burn's modules; what a batch counts"]);
    for f in FAMILY_DOCS {
        let file = format!("repro/models/{}.toml", f.table);
        if !book.path(&file).exists() {
            return Err(format!("{file} is missing").into());
        }
        t.push([
            format!("[{}]", f.table),
            format!("{}; `batch` counts {}", f.builds, f.example),
        ]);
    }
    Ok(t)
}

/// Every key of the architecture tables under a row naming its table (families with the same
/// keys share rows): the key, what it counts, what it may be and what it builds. Every one is
/// required.
pub fn keys_table() -> Result<Table, BookError> {
    let mut t = Table::new(["key", "unit", "allowed", "sets"]);
    // Families whose keys are the same but for their table's name share one group of rows.
    let mut groups: Vec<(Vec<&str>, Vec<&Key>)> = Vec::new();
    for f in FAMILY_DOCS {
        let keys: Vec<&Key> = keys_of(f.table).collect();
        let same = |a: &[&Key], b: &[&Key]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    (x.name(), x.unit, x.allowed, x.sets) == (y.name(), y.unit, y.allowed, y.sets)
                })
        };
        match groups.iter_mut().find(|(_, k)| same(k, &keys)) {
            Some((tables, _)) => tables.push(f.table),
            None => groups.push((vec![f.table], keys)),
        }
    }
    for (tables, keys) in groups {
        let header: Vec<String> = tables.iter().map(|t| format!("`[{t}]`")).collect();
        t.push([
            header.join(" "),
            String::new(),
            String::new(),
            String::new(),
        ]);
        for k in keys {
            if k.written != Written::Required {
                return Err(format!("{}: the table says every key is required", k.field).into());
            }
            t.push([
                format!("`{}`", k.name()),
                k.unit.to_string(),
                allowed(k),
                k.sets.to_string(),
            ]);
        }
    }
    Ok(t)
}

/// `[training]`'s keys and `batch`: what each sets, and what `highwater fit` and `highwater
/// rerun --model` do with it.
pub fn training_table() -> Table {
    let mut t = Table::new(["key", "written", "allowed", "sets", "fit and rerun"]);
    let batch = keys_of(FAMILY_DOCS[0].table).find(|k| k.name() == "batch");
    for k in batch.into_iter().chain(keys_of("training")) {
        let name = match k.table() {
            "training" => format!("`{}`", k.name()),
            _ => format!("`{}` (in the family's table)", k.name()),
        };
        t.push([
            name,
            written(k),
            allowed(k),
            k.sets.to_string(),
            k.commands.to_string(),
        ]);
    }
    t
}

/// The limits a model file meets, with what each bounds and who holds it to it.
pub fn limits_table() -> Table {
    let row = |l: Limit, value: String, bounds: &str, held: &str| {
        [
            format!("`{}`", l.name),
            value,
            bounds.to_string(),
            held.to_string(),
        ]
    };
    Table::new(["limit", "value", "bounds", "held by"])
        .row(row(
            MAX_RECIPE_BYTES,
            bytes::show(MAX_RECIPE_BYTES.max),
            "the file; no more is read",
            "the parser",
        ))
        .row(row(
            MAX_TENSOR_BYTES,
            bytes::show(MAX_TENSOR_BYTES.max),
            "the tensors the shapes and the batch make, at 4 bytes an element: the parameters, \
             their gradients and Adam's two moments together; each of the largest activations \
             (logits, attention scores, feature maps, hidden states)",
            "the parser, and `--batch`",
        ))
        .row(row(
            MAX_SEARCH_BATCH,
            MAX_SEARCH_BATCH.max.to_string(),
            "the largest batch `--largest-batch` tries",
            "`fit`",
        ))
        .row(row(
            MAX_DRY_STEPS,
            MAX_DRY_STEPS.max.to_string(),
            "`fit --steps`",
            "`fit`",
        ))
}

/// A mistake made in a copy of a bundled file: a line rewritten, or left out.
#[derive(Debug, Clone, Copy)]
pub enum Mistake {
    /// This line written as that one.
    Rewrite(&'static str, &'static str),
    /// This line left out.
    Omit(&'static str),
}

impl Mistake {
    /// `text` with the mistake made; an error when the line is not in it.
    pub fn make(self, text: &str) -> Result<String, BookError> {
        let (line, to) = match self {
            Mistake::Rewrite(line, to) => (line, Some(to)),
            Mistake::Omit(line) => (line, None),
        };
        let mut made = false;
        let mut out = String::with_capacity(text.len());
        for l in text.lines() {
            match (l == line && !made, to) {
                (true, Some(to)) => out.push_str(&format!("{to}\n")),
                (true, None) => {}
                (false, _) => out.push_str(&format!("{l}\n")),
            }
            made |= l == line;
        }
        match made {
            true => Ok(out),
            false => Err(format!("`{line}` is not a line of the file").into()),
        }
    }

    /// How the table writes it.
    pub fn describe(self) -> String {
        match self {
            Mistake::Rewrite(from, to) => format!("`{from}` written `{to}`"),
            Mistake::Omit(line) => format!("`{line}` left out"),
        }
    }
}

/// The mistakes the page shows, each in a copy of `repro/models/vit.toml`.
pub const MISTAKES: [Mistake; 7] = [
    Mistake::Rewrite("d_ff = 1536", "d_ffn = 1536"),
    Mistake::Omit("classes = 1000"),
    Mistake::Rewrite("n_layers = 6", "n_layers = 0"),
    Mistake::Rewrite("n_heads = 6", "n_heads = 5"),
    Mistake::Rewrite("patch = 16", "patch = 15"),
    Mistake::Rewrite("batch = 64", "batch = 10000000000"),
    Mistake::Rewrite("backend = \"cube\"", "backend = \"cuda\""),
];

/// Each of [`MISTAKES`] made in `repro/models/vit.toml` and the parser's error for it, as
/// `highwater fit` prints it under `caused by:`. Fails if a mistake is accepted.
pub fn mistakes_table(book: &Book) -> Result<Table, BookError> {
    let text = book.read("repro/models/vit.toml")?;
    let mut t = Table::new(["the mistake", "the error"]);
    for m in MISTAKES {
        match Network::parse("vit.toml", &m.make(&text)?) {
            Ok(_) => return Err(format!("{} was accepted", m.describe()).into()),
            Err(e) => t.push([m.describe(), e.to_string()]),
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use highwater::network::{FAMILIES, FORMAT_PAGE, KEYS};

    #[test]
    fn every_key_is_in_a_table() {
        let keys = keys_table().unwrap();
        let training = training_table();
        // The decoder's and the encoder's keys share rows, each group under a header row (one
        // fewer than the families); `batch` is in both tables.
        let shared = keys_of("encoder").count();
        assert_eq!(
            keys.rows().len() + training.rows().len(),
            KEYS.len() - shared + (FAMILIES.len() - 1) + 1
        );
        assert!(keys.rows()[0][0].contains("[decoder]") && keys.rows()[0][0].contains("[encoder]"));
        for family in FAMILIES {
            assert!(
                keys.rows()
                    .iter()
                    .any(|r| r[0].contains(&format!("[{family}]"))),
                "{family}"
            );
        }
        assert_eq!(
            families_table(&Book::repository()).unwrap().rows().len(),
            FAMILIES.len()
        );
        assert_eq!(limits_table().rows().len(), 4);
    }

    #[test]
    fn every_mistake_is_refused_naming_its_line_and_the_page() {
        let t = mistakes_table(&Book::repository()).unwrap();
        assert_eq!(t.rows().len(), MISTAKES.len());
        for row in t.rows() {
            assert!(row[1].starts_with("vit.toml:"), "{row:?}");
            assert!(row[1].contains(FORMAT_PAGE), "{row:?}");
            println!("{} | {}", row[0], row[1]);
        }
        // The unknown key, the missing one and the zero each name the key.
        assert!(t.rows()[0][1].contains("`d_ffn`"), "{:?}", t.rows()[0]);
        assert!(t.rows()[1][1].contains("`classes`"), "{:?}", t.rows()[1]);
        assert!(
            t.rows()[2][1].contains("`vit.n_layers`"),
            "{:?}",
            t.rows()[2]
        );
        assert!(Mistake::Omit("no such line").make("a\nb\n").is_err());
    }
}
