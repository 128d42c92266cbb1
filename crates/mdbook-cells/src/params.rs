//! A chapter's parameters (papermill's and Quarto's idea, in Rust): one cell marked
//! `//| parameters` declares them as constants with their defaults,
//!
//! ```text
//! const CARD_GIB: u64 = 16;
//! const ARM: &str = "silu";
//! ```
//!
//! and a build may set any of them, by name, book-wide: `MDBOOK_CELLS_PARAM_CARD_GIB=24`, or
//! `CARD_GIB = 24` under `[preprocessor.cells.parameters]` (the environment wins). Every cell of
//! the chapter sees the constants with the values of this build; the page shows which values
//! those were and what set them. The values are part of every cell's cache key, like the rest
//! of the chapter's prelude.

use std::collections::BTreeMap;

/// The environment variable that sets parameter `name`.
pub(crate) fn env_var(name: &str) -> String {
    format!("MDBOOK_CELLS_PARAM_{name}")
}

/// One parameter as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    /// The constant's name.
    pub(crate) name: String,
    /// Its Rust type, as written.
    pub(crate) ty: String,
    /// Its default, as written.
    pub(crate) default: String,
    /// Its value in this build, as Rust.
    pub(crate) value: String,
    /// What set the value: `default`, `book.toml` or the environment variable.
    pub(crate) set_by: String,
    /// Its line in the parameters cell's code (0-based).
    pub(crate) line: usize,
}

/// What a build sets: parameter values by name, and where each came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    values: BTreeMap<String, (String, String)>,
}

impl Overrides {
    /// `book.toml`'s `[preprocessor.cells.parameters]`, then the environment over it.
    pub(crate) fn new(book: &toml::Table, env: impl Iterator<Item = (String, String)>) -> Self {
        let mut values = BTreeMap::new();
        for (name, value) in book {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            values.insert(name.clone(), (text, "book.toml".to_string()));
        }
        for (var, value) in env {
            if let Some(name) = var.strip_prefix("MDBOOK_CELLS_PARAM_")
                && !name.is_empty()
            {
                values.insert(name.to_string(), (value, var.clone()));
            }
        }
        Overrides { values }
    }

    /// The names set by this build.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
}

/// The parameters declared in `code` with this build's values, the code to compile in its place
/// (the same lines, each constant with its value), and the problems with it by 0-based line
/// (when there are any, the code is not to be compiled; the parameters still name what the
/// chapter declares).
pub(crate) fn apply(
    code: &str,
    overrides: &Overrides,
) -> (Vec<Param>, String, Vec<(usize, String)>) {
    let mut params: Vec<Param> = Vec::new();
    let mut errors = Vec::new();
    let mut out = String::with_capacity(code.len());
    for (i, line) in code.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let Some((name, ty, default)) = declaration(trimmed) else {
            errors.push((
                i,
                format!(
                    "a parameters cell holds only `const NAME: TYPE = VALUE;` lines and \
                     comments, not `{trimmed}`"
                ),
            ));
            continue;
        };
        if params.iter().any(|p| p.name == name) {
            errors.push((i, format!("parameter `{name}` is declared twice")));
            continue;
        }
        let (value, set_by) = match overrides.values.get(name) {
            Some((text, from)) => match value_of(text, ty) {
                Ok(value) => (value, from.clone()),
                Err(why) => {
                    errors.push((i, format!("{from} sets `{name}` to {why}")));
                    (default.to_string(), "default".to_string())
                }
            },
            None => (default.to_string(), "default".to_string()),
        };
        out.push_str(&format!("const {name}: {ty} = {value};\n"));
        params.push(Param {
            name: name.to_string(),
            ty: ty.to_string(),
            default: default.to_string(),
            value,
            set_by,
            line: i,
        });
    }
    (params, out, errors)
}

/// `const NAME: TYPE = VALUE;` (optionally `pub`) as its three parts.
fn declaration(line: &str) -> Option<(&str, &str, &str)> {
    let rest = line.strip_prefix("pub ").unwrap_or(line).trim_start();
    let rest = rest.strip_prefix("const ")?;
    let (name, rest) = rest.split_once(':')?;
    let (ty, value) = rest.split_once('=')?;
    let value = value.trim().strip_suffix(';')?.trim();
    let name = name.trim();
    let is_name = name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    (is_name && !ty.trim().is_empty() && !value.is_empty()).then(|| (name, ty.trim(), value))
}

/// An override's text as the Rust value of type `ty`: a string parameter takes the text as it
/// is (quoted here); any other takes it as a Rust expression on one line, which the compiler
/// then checks against the type (an error shows at the parameter's line).
fn value_of(text: &str, ty: &str) -> Result<String, String> {
    if text.contains(['\n', '\r', ';']) {
        return Err(format!(
            "`{}`, which is not one expression on one line",
            text.escape_debug()
        ));
    }
    if text.trim().is_empty() {
        return Err("nothing".into());
    }
    let is_str = matches!(ty.replace(' ', "").as_str(), "&str" | "&'staticstr");
    Ok(if is_str && !text.starts_with('"') {
        format!("{text:?}")
    } else {
        text.trim().to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(pairs: &[(&str, &str)], book: &str) -> Overrides {
        let env = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Overrides::new(&toml::from_str(book).unwrap(), env)
    }

    const CELL: &str =
        "// The card.\nconst CARD_GIB: u64 = 16;\n\npub const ARM: &str = \"silu\";\n";

    #[test]
    fn defaults_book_toml_and_environment_in_that_order() {
        let (params, code, errors) = apply(CELL, &Overrides::default());
        assert!(errors.is_empty());
        assert_eq!(
            code,
            "// The card.\nconst CARD_GIB: u64 = 16;\n\nconst ARM: &str = \"silu\";\n"
        );
        assert_eq!((params[0].line, params[1].line), (1, 3));
        assert!(
            params
                .iter()
                .all(|p| p.set_by == "default" && p.value == p.default)
        );

        let set = overrides(
            &[("MDBOOK_CELLS_PARAM_CARD_GIB", "24")],
            "CARD_GIB = 20\nARM = \"fused\"",
        );
        let (params, code, errors) = apply(CELL, &set);
        assert!(errors.is_empty());
        assert_eq!(
            code,
            "// The card.\nconst CARD_GIB: u64 = 24;\n\nconst ARM: &str = \"fused\";\n"
        );
        assert_eq!(params[0].set_by, "MDBOOK_CELLS_PARAM_CARD_GIB");
        assert_eq!(params[1].set_by, "book.toml");
        assert_eq!(
            code.lines().count(),
            CELL.lines().count(),
            "lines stay where they were"
        );
        assert_eq!(set.names().collect::<Vec<_>>(), ["ARM", "CARD_GIB"]);
    }

    #[test]
    fn anything_else_is_refused_at_its_line() {
        let (_, _, errors) = apply(
            "const A: u8 = 1;\nlet b = 2;\nconst A: u8 = 3;\n",
            &Overrides::default(),
        );
        assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), [1, 2]);
        assert!(errors[0].1.contains("only `const NAME: TYPE = VALUE;`"));
        assert!(errors[1].1.contains("declared twice"));
        let set = overrides(&[("MDBOOK_CELLS_PARAM_A", "1; std::process::exit(1)")], "");
        let (params, _, errors) = apply("const A: u8 = 1;\n", &set);
        assert!(
            errors[0].1.contains("not one expression on one line"),
            "{errors:?}"
        );
        assert_eq!(params[0].name, "A", "still declared");
    }

    /// The parameters cells of the book and the fixtures, mutated: applying never panics, keeps
    /// every line where it was, and whatever it accepts is one constant per declared line.
    #[test]
    fn fuzz_mutated_parameters_cells() {
        use snapshots::fuzz::{self, Budget, Verdict};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seeds = Vec::new();
        for (name, bytes) in fuzz::seeds_in(&root.join("../../src"), "md")
            .into_iter()
            .chain(fuzz::seeds_in(&root.join("tests/fixtures"), "md"))
        {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            for segment in crate::parse::split(&text).segments {
                if let crate::parse::Segment::Cell(c) = segment
                    && c.options.parameters
                {
                    seeds.push((name.clone(), c.code.into_bytes()));
                }
            }
        }
        seeds.push(("unit".into(), CELL.as_bytes().to_vec()));
        let set = overrides(&[("MDBOOK_CELLS_PARAM_ROWS", "7")], "GREETING = \"hi\"");
        let tally = fuzz::run("parameters", &seeds, Budget::from_env(400), |bytes| {
            let code = String::from_utf8_lossy(bytes);
            let (params, out, errors) = apply(&code, &set);
            assert!(errors.iter().all(|(line, _)| *line < code.lines().count()));
            if !errors.is_empty() {
                return Verdict::Refused;
            }
            assert_eq!(
                out.lines().count(),
                code.lines().count(),
                "lines stay in place"
            );
            for p in &params {
                let line = out.lines().nth(p.line).unwrap();
                assert_eq!(line, format!("const {}: {} = {};", p.name, p.ty, p.value));
            }
            Verdict::Accepted
        });
        tally.assert_no_panics();
    }
}
