//! The book's `[preprocessor.cells]` table.

use crate::error::Error;
use crate::parse::closest;
use crate::store::StoreMode;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Settings for the whole book.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Config {
    /// Dependencies of the generated cell crate, as in a `Cargo.toml` (relative `path`s are
    /// taken from the book root).
    #[serde(default)]
    pub dependencies: toml::Table,
    /// Where the cell crate, its build and the output cache live, relative to the book root.
    /// Never under `src/` (serve would rebuild forever) nor the build directory (wiped).
    #[serde(default = "default_cache_dir")]
    pub cache_dir: PathBuf,
    /// Fail the build on any unexpected cell failure. `MDBOOK_CELLS_STRICT=1` also sets it.
    #[serde(default)]
    pub strict: bool,
    /// Check the cells with rustfmt and clippy, each finding a problem at its chapter line.
    /// Unset: strict builds lint, others do not.
    #[serde(default)]
    pub lint: Option<bool>,
    /// Seconds of work a cell may do before it is killed (its CPU time, or its wall time when
    /// less); a cell that uses almost no CPU for this long of wall time is killed as stalled.
    #[serde(default = "default_timeout")]
    pub timeout: u64,
    /// Bytes of printed output or value kept per cell; the rest is cut with a note.
    #[serde(default = "default_output_limit")]
    pub output_limit: usize,
    /// A cell whose code is longer than this many lines shows its result first and its code
    /// folded under it, so a long cell never stands between a sentence and what supports it
    /// (`//| fold-code: false` keeps one cell's code above its result).
    #[serde(default = "default_fold_code_over")]
    pub fold_code_over: usize,
    /// Run `gpu` cells (on a machine with a CUDA GPU) and freeze their outputs.
    /// `MDBOOK_CELLS_GPU=1` also sets it.
    #[serde(default)]
    pub gpu: bool,
    /// The GPU's name for freeze badges, instead of asking `nvidia-smi` (a machine whose
    /// tool is elsewhere; tests). Setting it also says the machine has a GPU.
    #[serde(default)]
    pub gpu_name: Option<String>,
    /// Where GPU cells' frozen outputs live, relative to the book root (commit it).
    #[serde(default = "default_freeze_dir")]
    pub freeze_dir: PathBuf,
    /// Where every CPU cell's output is committed, relative to the book root, so that a fresh
    /// clone renders without running a cell (see [`crate::store`]); none: no store.
    #[serde(default)]
    pub store_dir: Option<PathBuf>,
    /// What the build does with the store: serve (the default), verify or refresh.
    /// `MDBOOK_CELLS_STORE` wins.
    #[serde(default)]
    pub store_mode: Option<StoreMode>,
    /// Dependencies only GPU cells need (a CUDA backend), added to the cell crate when GPU
    /// cells are compiled; CPU-only builds never compile them.
    #[serde(default)]
    pub gpu_dependencies: toml::Table,
    /// Compile the GPU cells into this folder instead of running them, for a GPU box without a
    /// Rust toolchain (`mdbook-cells run-bundle` runs them there). `MDBOOK_CELLS_GPU_BUNDLE`
    /// also sets it.
    #[serde(default)]
    pub gpu_bundle: Option<PathBuf>,
    /// Cargo profile settings for the cell crate, merged over its defaults (`debug = 0`, every
    /// dependency at `opt-level = 3`): `[preprocessor.cells.profile.package.NAME]` compiles one
    /// dependency otherwise (a crate whose generic code is large and whose speed cells do not
    /// need, at `opt-level = 0`).
    #[serde(default)]
    pub profile: toml::Table,
    /// Extra files or folders whose contents every cell's output depends on. The folders of
    /// path dependencies are always included.
    #[serde(default)]
    pub inputs: Vec<PathBuf>,
    /// Values for chapters' parameters, by name (`SEED = 3`), for every build of the book;
    /// `MDBOOK_CELLS_PARAM_<NAME>` overrides one for a build.
    #[serde(default)]
    pub parameters: toml::Table,
    /// Keys that belong to mdbook itself (`command`, `after`, …) or that we don't know.
    #[serde(flatten)]
    pub other: BTreeMap<String, toml::Value>,
}

fn default_cache_dir() -> PathBuf {
    PathBuf::from("target/mdbook-cells")
}
fn default_freeze_dir() -> PathBuf {
    PathBuf::from("freeze")
}
fn default_timeout() -> u64 {
    60
}
fn default_output_limit() -> usize {
    1 << 20
}
fn default_fold_code_over() -> usize {
    25
}

const KNOWN: &[&str] = &[
    "dependencies",
    "cache-dir",
    "strict",
    "lint",
    "timeout",
    "output-limit",
    "fold-code-over",
    "inputs",
    "gpu",
    "gpu-name",
    "freeze-dir",
    "store-dir",
    "store-mode",
    "gpu-dependencies",
    "gpu-bundle",
    "profile",
    "parameters",
];
const MDBOOK_KEYS: &[&str] = &["command", "before", "after", "renderers", "optional"];

impl Default for Config {
    fn default() -> Self {
        Config {
            dependencies: toml::Table::new(),
            cache_dir: default_cache_dir(),
            strict: false,
            lint: None,
            timeout: default_timeout(),
            output_limit: default_output_limit(),
            fold_code_over: default_fold_code_over(),
            inputs: Vec::new(),
            gpu: false,
            gpu_name: None,
            freeze_dir: default_freeze_dir(),
            store_dir: None,
            store_mode: None,
            gpu_dependencies: toml::Table::new(),
            gpu_bundle: None,
            profile: toml::Table::new(),
            parameters: toml::Table::new(),
            other: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Checks what serde cannot: misspelt keys, and a cache inside the book's source.
    pub fn validate(&self, root: &Path, src_dir: &Path) -> Result<(), Error> {
        for key in self.other.keys() {
            if MDBOOK_KEYS.contains(&key.as_str()) {
                continue;
            }
            let hint = closest(key, KNOWN)
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            return Err(Error::Config(format!(
                "unknown key `{key}` in [preprocessor.cells]{hint}"
            )));
        }
        if !(1..=crate::types::MAX_TIMEOUT_S).contains(&self.timeout) {
            return Err(Error::Config(format!(
                "timeout = {} is out of range: a cell's timeout is 1 to {} seconds",
                self.timeout,
                crate::types::MAX_TIMEOUT_S
            )));
        }
        if self.output_limit == 0 {
            return Err(Error::Config(
                "output-limit = 0 would cut every output; it is a number of bytes".into(),
            ));
        }
        let inside_src = |dir: &Path| root.join(dir).starts_with(root.join(src_dir));
        for (key, dir) in [
            ("cache-dir", Some(&self.cache_dir)),
            ("gpu-bundle", self.gpu_bundle.as_ref()),
            ("store-dir", self.store_dir.as_ref()),
        ] {
            if let Some(dir) = dir.filter(|d| inside_src(d)) {
                return Err(Error::Config(format!(
                    "{key} `{}` is inside the book's source: every write would trigger a rebuild",
                    dir.display()
                )));
            }
        }
        if let Some(store) = &self.store_dir {
            // A refresh removes the store's files no chapter needs: its folder holds nothing else.
            let store = root.join(store);
            let holds = |dir: &Path| root.join(dir).starts_with(&store);
            let overlaps = [("the book's root", Path::new("")), ("src", src_dir)]
                .into_iter()
                .chain([
                    ("freeze-dir", self.freeze_dir.as_path()),
                    ("cache-dir", &self.cache_dir),
                ])
                .find(|(_, dir)| holds(dir));
            if let Some((what, _)) = overlaps {
                return Err(Error::Config(format!(
                    "store-dir `{}` holds {what}: the output store needs a folder of its own",
                    self.store_dir
                        .as_ref()
                        .map_or(String::new(), |d| d.display().to_string())
                )));
            }
        }
        Ok(())
    }

    /// The `[preprocessor.cells]` table of the book at `root` and the book's source folder, as
    /// the commands that run outside mdbook (`export`, `fmt`) read them; validated.
    pub fn of_book(root: &Path) -> Result<(Config, PathBuf), Error> {
        let path = root.join("book.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::Config(format!(
                "cannot read {} (run from the book's root): {e}",
                path.display()
            ))
        })?;
        let book: toml::Table =
            toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        let config: Config = match book.get("preprocessor").and_then(|p| p.get("cells")) {
            Some(cells) => cells
                .clone()
                .try_into()
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?,
            None => Config::default(),
        };
        let src = book
            .get("book")
            .and_then(|b| b.get("src"))
            .and_then(|s| s.as_str())
            .unwrap_or("src");
        config.validate(root, Path::new(src))?;
        Ok((config, PathBuf::from(src)))
    }

    /// How the book runs this preprocessor (mdbook's `command` key), for the commands a page
    /// names.
    pub fn preprocessor_command(&self) -> String {
        match self.other.get("command") {
            Some(toml::Value::String(command)) => command.clone(),
            _ => "mdbook-cells".to_string(),
        }
    }

    /// The folders of the path dependencies, absolute.
    pub fn path_dependencies(&self, root: &Path) -> Vec<PathBuf> {
        path_dependencies(&self.dependencies, root)
    }

    /// The folders of the GPU cells' own path dependencies, absolute.
    pub fn gpu_path_dependencies(&self, root: &Path) -> Vec<PathBuf> {
        path_dependencies(&self.gpu_dependencies, root)
    }

    /// The dependency table with relative paths made absolute, for the generated crate; `gpu`:
    /// with the GPU cells' dependencies (which win where both name a crate).
    pub fn absolute_dependencies(&self, root: &Path, gpu: bool) -> toml::Table {
        let mut deps = self.dependencies.clone();
        if gpu {
            deps.extend(self.gpu_dependencies.clone());
        }
        for (_, dep) in deps.iter_mut() {
            if let Some(table) = dep.as_table_mut()
                && let Some(toml::Value::String(p)) = table.get_mut("path")
            {
                *p = root.join(p.as_str()).display().to_string();
            }
        }
        deps
    }
}

fn path_dependencies(deps: &toml::Table, root: &Path) -> Vec<PathBuf> {
    deps.values()
        .filter_map(|dep| dep.get("path")?.as_str())
        .map(|p| root.join(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Config {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn defaults_and_mdbook_keys_pass() {
        let c = parse("command = \"x\"\nafter = [\"links\"]\n");
        assert_eq!(c.timeout, 60);
        c.validate(Path::new("/b"), Path::new("src")).unwrap();
    }

    #[test]
    fn misspelt_key_is_named_with_a_suggestion() {
        let err = parse("timout = 3").validate(Path::new("/b"), Path::new("src"));
        let msg = err.unwrap_err().to_string();
        assert!(
            msg.contains("`timout`") && msg.contains("did you mean `timeout`"),
            "{msg}"
        );
    }

    #[test]
    fn timeouts_and_limits_out_of_range_are_refused() {
        for (toml, word) in [
            ("timeout = 0", "timeout = 0 is out of range"),
            ("timeout = 86401", "1 to 86400 seconds"),
            ("output-limit = 0", "output-limit = 0"),
        ] {
            let err = parse(toml).validate(Path::new("/b"), Path::new("src"));
            let msg = err.unwrap_err().to_string();
            assert!(msg.contains(word), "{toml}: {msg}");
        }
    }

    #[test]
    fn a_store_that_holds_other_folders_is_refused() {
        for (toml, what) in [
            ("store-dir = \".\"", "the book's root"),
            (
                "store-dir = \"repro\"\nfreeze-dir = \"repro/freeze\"",
                "freeze-dir",
            ),
            ("store-dir = \"target\"", "cache-dir"),
        ] {
            let err = parse(toml).validate(Path::new("/b"), Path::new("src"));
            let msg = err.unwrap_err().to_string();
            assert!(msg.contains(&format!("holds {what}")), "{toml}: {msg}");
        }
        let ok = parse("store-dir = \"repro/outputs\"\nfreeze-dir = \"repro/freeze\"");
        ok.validate(Path::new("/b"), Path::new("src")).unwrap();
    }

    #[test]
    fn cache_inside_src_is_refused() {
        let c = parse("cache-dir = \"src/cache\"");
        assert!(c.validate(Path::new("/b"), Path::new("src")).is_err());
    }

    #[test]
    fn relative_paths_become_absolute() {
        let c = parse("[dependencies]\nfoo = { path = \"crates/foo\" }\nbar = \"1\"\n");
        let deps = c.absolute_dependencies(Path::new("/book"), false);
        assert_eq!(deps["foo"]["path"].as_str(), Some("/book/crates/foo"));
        assert_eq!(deps["bar"].as_str(), Some("1"));
        assert_eq!(
            c.path_dependencies(Path::new("/book")),
            [Path::new("/book/crates/foo")]
        );
    }
}
