//! A network file as written, read key by key, parsed and checked into a [`Network`].

use serde::Deserialize;
use toml::Spanned;

use crate::limits::MAX_RECIPE_BYTES;
use basics::line_of;

use crate::recipe::{Backend, Checkpointing, RecipeError, from_toml};

use super::keys::{self, Key};
use super::{Arch, FAMILIES, Network, Precision};

/// `[training]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrainingFile {
    backend: Backend,
    checkpointing: Checkpointing,
    #[serde(default)]
    precision: Precision,
    steps: Spanned<u64>,
    seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    // Architecture tables are read as plain tables, then checked key by key (`shape`), so
    // that an error can name the key's line.
    decoder: Option<toml::Table>,
    encoder: Option<toml::Table>,
    resnet: Option<toml::Table>,
    vit: Option<toml::Table>,
    lstm: Option<toml::Table>,
    mlp: Option<toml::Table>,
    training: TrainingFile,
}

/// The 1-based line of `key = …` in `[family]`, else of the table's header, else 1.
fn key_line(text: &str, family: &str, key: &str) -> usize {
    let Some(table) = text.find(&format!("[{family}]")) else {
        return 1;
    };
    let header = line_of(text, table);
    text[table..]
        .lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(header, |i| header + i)
}

/// Reads one architecture table: its shape (unknown keys refused, every size a whole number at
/// least 1) and its batch.
fn shape<T: serde::de::DeserializeOwned>(
    origin: &str,
    text: &str,
    family: &'static str,
    table: &toml::Table,
) -> Result<(T, u64), RecipeError> {
    let mut table = table.clone();
    let syntax = |line, reason: String| RecipeError::Syntax {
        origin: origin.to_string(),
        line,
        reason,
    };
    // Every key of a family is a count: checked here, so that the error names the key; a key
    // the format lacks is left to serde, whose error lists the keys it expects.
    for (name, value) in &table {
        let Some(key) = keys::key(family, name) else {
            continue;
        };
        let reason = match value.as_integer() {
            Some(n) if n >= 1 => continue,
            Some(_) => "must be at least 1".to_string(),
            None => format!(
                "must be a whole number, not `{}`",
                crate::limits::quote(&value.to_string())
            ),
        };
        return Err(RecipeError::Invalid {
            origin: origin.to_string(),
            line: key_line(text, family, name),
            field: key.field,
            reason,
        });
    }
    let batch = match table.remove("batch") {
        None => {
            return Err(syntax(
                key_line(text, family, "batch"),
                format!("[{family}]: missing field `batch`"),
            ));
        }
        Some(v) => v
            .as_integer()
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| {
                syntax(
                    key_line(text, family, "batch"),
                    format!("[{family}]: `batch` must be a positive integer"),
                )
            })?,
    };
    let shape = T::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        let message = e.message().to_string();
        // serde names the offending key in backquotes: point at its line.
        let line = message
            .split('`')
            .nth(1)
            .map_or_else(|| key_line(text, family, ""), |k| key_line(text, family, k));
        syntax(
            line,
            format!("[{family}]: {}", crate::limits::quote_message(&message)),
        )
    })?;
    Ok((shape, batch))
}

/// The key written on `line` (1-based, `key = …`) and the table above it, if the format has
/// such a key: what a TOML reader's error at that line is about.
fn key_at(text: &str, line: usize) -> Option<&'static Key> {
    let mut table = None;
    for (i, l) in text.lines().enumerate().take(line) {
        let l = l.trim();
        if i + 1 == line {
            let (name, _) = l.split_once('=')?;
            return keys::key(table?, name.trim());
        }
        if let Some(header) = l.strip_prefix('[').and_then(|h| h.split_once(']')) {
            table = Some(header.0.trim());
        }
    }
    None
}

/// `e` as the reader should get it: naming the key its line holds when the TOML reader did
/// not, then where the format is documented.
fn pointed(text: &str, e: RecipeError) -> RecipeError {
    let see = super::see_format();
    match e {
        RecipeError::Syntax {
            origin,
            line,
            reason,
        } => {
            let reason = match key_at(text, line) {
                Some(k) if !reason.contains(&format!("`{}`", k.name())) => {
                    format!("`{}`: {reason}", k.field)
                }
                _ => reason,
            };
            RecipeError::Syntax {
                origin,
                line,
                reason: format!("{reason}; {see}"),
            }
        }
        RecipeError::Invalid {
            origin,
            line,
            field,
            reason,
        } => RecipeError::Invalid {
            origin,
            line,
            field,
            reason: format!("{reason}; {see}"),
        },
    }
}

impl Network {
    /// Parses and checks `text`; `origin` names it in errors, each of which names the file, the
    /// line, the key where there is one, and [`FORMAT_PAGE`](super::FORMAT_PAGE).
    pub fn parse(origin: &str, text: &str) -> Result<Network, RecipeError> {
        Self::read(origin, text).map_err(|e| pointed(text, e))
    }

    fn read(origin: &str, text: &str) -> Result<Network, RecipeError> {
        let f: File = from_toml(origin, text, MAX_RECIPE_BYTES)?;
        let invalid = |field: &'static str, at: usize, reason: String| RecipeError::Invalid {
            origin: origin.to_string(),
            line: line_of(text, at),
            field,
            reason,
        };
        let mut tables = Vec::new();
        let mut arch = None;
        let mut batch = None;
        macro_rules! table {
            ($name:ident, $variant:ident) => {
                if let Some(t) = &f.$name {
                    tables.push(stringify!($name));
                    let (shape, b) = shape(origin, text, stringify!($name), t)?;
                    arch = Some(Arch::$variant(shape));
                    batch = Some((concat!(stringify!($name), ".batch"), b));
                }
            };
        }
        table!(decoder, Decoder);
        table!(encoder, Encoder);
        table!(resnet, Resnet);
        table!(vit, Vit);
        table!(lstm, Lstm);
        table!(mlp, Mlp);
        let (Some(arch), Some((batch_field, batch)), [_]) = (arch, batch, tables.as_slice()) else {
            return Err(RecipeError::Syntax {
                origin: origin.to_string(),
                line: 1,
                reason: format!(
                    "a network file has exactly one architecture table ({}); found {}",
                    FAMILIES.map(|f| format!("[{f}]")).join(", "),
                    if tables.is_empty() {
                        "none".to_string()
                    } else {
                        tables.join(" and ")
                    }
                ),
            });
        };
        let t = &f.training;
        if *t.steps.get_ref() == 0 {
            return Err(invalid(
                "training.steps",
                t.steps.span().start,
                "must be at least 1".into(),
            ));
        }
        let network = Network {
            origin: origin.to_string(),
            arch,
            batch,
            backend: t.backend,
            checkpointing: t.checkpointing,
            precision: t.precision,
            steps: *t.steps.get_ref(),
            seed: t.seed,
        };
        let family = network.arch.family();
        let at = |field: &'static str, key: &str, reason: String| RecipeError::Invalid {
            origin: origin.to_string(),
            line: key_line(text, family, key),
            field,
            reason,
        };
        if let Some((field, key, reason)) = network.arch.inconsistency() {
            return Err(at(field, key, reason));
        }
        match network.oversize(network.batch) {
            None => Ok(network),
            Some(reason) => Err(at(batch_field, "batch", reason)),
        }
    }
}
