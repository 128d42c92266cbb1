//! The repository's inputs, read as the cells read them: paths from the book's root, which is
//! the directory mdbook-cells runs the cells in, so that an error names the file as the
//! chapter's `reads:` line does (`repro/recipes/situ.toml:12: …`).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use cell_output::freeze::Freeze;
use highwater::conform::{KnownMiss, NetworkRecord, RerunRecord, parse_known_misses};
use highwater::{Incident, Recipe};

use crate::BookError;
use serde::de::DeserializeOwned;

use crate::experiments::Experiment;

/// Where the recipes are, under the book's root.
pub const RECIPES: &str = "repro/recipes";
/// Where the incident's log facts are (Part I), one file per log.
pub const INCIDENTS: &str = "repro/incident";
/// Part II's incident: the experiments of the hunt, in the report's order.
pub const EXPERIMENTS: &str = "repro/incident/graphrace/experiments.toml";
/// Part II's configurations.
pub const GRAPHRACE: &str = "repro/graphrace";
/// Runs recorded on a GPU.
pub const RESULTS: &str = "repro/results";
/// The graphs CUDA built for Part II's configurations on the H200, read back from the driver.
pub const GRAPH_DUMP: &str = "repro/results/graphrace-graph-h200.json";
/// The variants the static check is judged on.
pub const SUITE: &str = "repro/graphrace-suite.toml";
/// The suite replayed on the H200, and the graph of each captured variant.
pub const SUITE_RESULTS: [&str; 2] = [
    "repro/results/graphrace-suite-h200.json",
    "repro/results/graphrace-suite-graphs-h200.json",
];
/// The H200's card profile, which the dry run starts from.
pub const H200: &str = "repro/cards/h200.json";
/// The H200's autotune cache: the kernels the GPU picked, for the dry run to pick.
pub const H200_AUTOTUNE: &str = "repro/cards/h200-autotune";
/// The H200's atlas: every problem the recorded models and the sweep tuned on it.
pub const H200_ATLAS: &str = "repro/cards/h200-atlas";
/// The atlas sweep's caches on the H200, one folder per line of `repro/cards/h200-sweep.grid`.
pub const SWEEP: &str = "repro/cards/h200-sweep";
/// The models of `repro/models` recorded on the H200: warm, repeated, cold, and their caches.
pub const MODELS: &str = "repro/results/models";

/// The book's root: every path below is relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Book {
    root: PathBuf,
}

impl Book {
    /// The directory the cells run in, which mdbook-cells makes the book's root.
    pub fn here() -> Book {
        Book {
            root: PathBuf::new(),
        }
    }

    /// The book whose root is `root` (a test's fixture, another checkout).
    pub fn at(root: impl Into<PathBuf>) -> Book {
        Book { root: root.into() }
    }

    /// This repository, as the crate's own tests read it.
    #[cfg(test)]
    pub(crate) fn repository() -> Book {
        Book::at(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    /// `relative`, under the root.
    pub fn path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.root.join(relative)
    }

    /// The text of `relative`.
    pub fn read(&self, relative: impl AsRef<Path>) -> Result<String, BookError> {
        read(&self.path(relative))
    }

    /// The files of directory `relative` ending in `.ext`, sorted by name (not recursive).
    pub fn files(&self, relative: impl AsRef<Path>, ext: &str) -> Result<Vec<PathBuf>, BookError> {
        let mut paths = entries(&self.path(relative))?;
        paths.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == ext));
        Ok(paths)
    }

    /// `repro/recipes/NAME.toml`, parsed and checked.
    pub fn recipe(&self, name: &str) -> Result<Recipe, BookError> {
        let path = self.path(format!("{RECIPES}/{name}.toml"));
        let text = read(&path)?;
        Ok(Recipe::parse(&path.display().to_string(), &text)?)
    }

    /// `repro/incident/NAME.toml` (`ab2000_situ_s1`), parsed and checked.
    pub fn incident(&self, name: &str) -> Result<Incident, BookError> {
        incident_at(&self.path(format!("{INCIDENTS}/{name}.toml")))
    }

    /// Every log of the incident (`repro/incident/*.toml`), in file-name order.
    pub fn incidents(&self) -> Result<Vec<Incident>, BookError> {
        self.files(INCIDENTS, "toml")?
            .iter()
            .map(|p| incident_at(p))
            .collect()
    }

    /// Part II's experiments, in the order the incident report gives them.
    pub fn experiments(&self) -> Result<Vec<Experiment>, BookError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            experiment: Vec<Experiment>,
        }
        let file: File = self.toml(EXPERIMENTS)?;
        Ok(file.experiment)
    }

    /// The first experiment that configuration `model` (`repro/graphrace/MODEL.toml`) stands
    /// for.
    pub fn experiment(&self, model: &str) -> Result<Experiment, BookError> {
        self.experiments()?
            .into_iter()
            .find(|e| e.model.as_deref() == Some(model))
            .ok_or_else(|| BookError::Parse {
                path: self.path(EXPERIMENTS).display().to_string(),
                reason: format!("no experiment stands for `{model}`"),
            })
    }

    /// `repro/graphrace/NAME.toml`, parsed and checked.
    pub fn graphrace_config(&self, name: &str) -> Result<graphrace::Config, BookError> {
        let path = self.path(format!("{GRAPHRACE}/{name}.toml"));
        let text = read(&path)?;
        Ok(graphrace::Config::parse(
            &path.display().to_string(),
            &text,
        )?)
    }

    /// A dump of the graphs CUDA built (`graphrace-gpu --dump-graph`), checked.
    pub fn graph_dump(&self, relative: &str) -> Result<graphrace::driver::GraphDump, BookError> {
        graphrace::driver::GraphDump::read(&self.path(relative))
            .map_err(|e| BookError::Refused(e.to_string()))
    }

    /// The suite ([`SUITE`]), each variant judged: the static check on the graph the H200
    /// built for it against the H200's replays ([`SUITE_RESULTS`]).
    pub fn judged_suite(&self) -> Result<Vec<graphrace::suite::Judged>, BookError> {
        let text = read(&self.path(SUITE))?;
        let suite = graphrace::suite::Suite::parse(SUITE, &text, |name| {
            self.graphrace_config(name).map_err(|e| e.to_string())
        })?;
        let record: graphrace::suite::SuiteRecord = self.json(SUITE_RESULTS[0])?;
        let graphs = self.graph_dump(SUITE_RESULTS[1])?;
        graphrace::suite::judge(&suite, &record, &graphs)
            .map_err(|e| BookError::Refused(e.to_string()))
    }

    /// A JSON file read into `T`.
    pub fn json<T: DeserializeOwned>(&self, relative: impl AsRef<Path>) -> Result<T, BookError> {
        json_at(&self.path(relative))
    }

    /// The value a GPU cell froze at `relative` (a [`Freeze`] whose output's body is `T` as
    /// JSON), or `None` while the cell has no freeze. A freeze that lacks a field, or whose body
    /// is not a `T`, is an error naming the file and the field.
    pub fn frozen<T: DeserializeOwned>(
        &self,
        relative: impl AsRef<Path>,
    ) -> Result<Option<T>, BookError> {
        let path = self.path(relative);
        let freeze: Freeze = match json_at(&path) {
            Err(BookError::Read { source, .. }) if source.kind() == ErrorKind::NotFound => {
                return Ok(None);
            }
            other => other?,
        };
        serde_json::from_str(&freeze.output.body)
            .map(Some)
            .map_err(|e| BookError::Parse {
                path: path.display().to_string(),
                reason: format!("the frozen output's body: {e}"),
            })
    }

    /// A TOML file read into `T`.
    pub fn toml<T: DeserializeOwned>(&self, relative: impl AsRef<Path>) -> Result<T, BookError> {
        let path = self.path(relative);
        toml::from_str(&read(&path)?).map_err(|e| BookError::Parse {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// A record written by `highwater rerun`, from its path under the root.
    pub fn rerun_record(&self, relative: impl AsRef<Path>) -> Result<RerunRecord, BookError> {
        self.json(relative)
    }

    /// `repro/results/NAME.json`, as recorded, and its repeats on the same GPU
    /// (`repro/results/repeats/*/NAME.json`, in directory order).
    pub fn rerun_with_repeats(
        &self,
        name: &str,
    ) -> Result<(RerunRecord, Vec<RerunRecord>), BookError> {
        self.with_repeats(name)
    }

    /// A network's record (`repro/results/NAME.json`) and its repeats, as for reruns.
    pub fn network_with_repeats(
        &self,
        name: &str,
    ) -> Result<(NetworkRecord, Vec<NetworkRecord>), BookError> {
        self.with_repeats(name)
    }

    fn with_repeats<T: DeserializeOwned>(&self, name: &str) -> Result<(T, Vec<T>), BookError> {
        self.with_repeats_in(RESULTS, name)
    }

    /// `DIR/NAME.json` and its repeats (`DIR/repeats/*/NAME.json`, in directory order).
    pub(crate) fn with_repeats_in<T: DeserializeOwned>(
        &self,
        dir: &str,
        name: &str,
    ) -> Result<(T, Vec<T>), BookError> {
        let repeats = self.repeats_in(dir, name)?;
        Ok((self.json(format!("{dir}/{name}.json"))?, repeats))
    }

    /// The repeats of `DIR/NAME.json` alone (`DIR/repeats/*/NAME.json`, in directory order).
    pub(crate) fn repeats_in<T: DeserializeOwned>(
        &self,
        dir: &str,
        name: &str,
    ) -> Result<Vec<T>, BookError> {
        let mut dirs = entries(&self.path(format!("{dir}/repeats")))?;
        dirs.retain(|p| p.is_dir());
        dirs.iter()
            .map(|d| json_at(&d.join(format!("{name}.json"))))
            .collect()
    }

    /// Every run `highwater rerun` recorded (`repro/results/rerun-*.json`), by name (the file
    /// stem), in name order.
    pub fn rerun_records(&self) -> Result<Vec<(String, RerunRecord)>, BookError> {
        self.files(RESULTS, "json")?
            .into_iter()
            .filter_map(|p| {
                let name = p.file_stem()?.to_str()?.to_string();
                name.starts_with("rerun-").then_some((name, p))
            })
            .map(|(name, p)| Ok((name, json_at(&p)?)))
            .collect()
    }

    /// The recorded runs the simulator is known to miss, with the reasons
    /// (`repro/results/conform-known-misses.toml`).
    pub fn known_misses(&self) -> Result<Vec<KnownMiss>, BookError> {
        let path = self.path(format!("{RESULTS}/conform-known-misses.toml"));
        parse_known_misses(&path.display().to_string(), &read(&path)?).map_err(BookError::Refused)
    }

    /// The H200's card profile.
    pub fn h200(&self) -> Result<dryrun::CardProfile, BookError> {
        let path = self.path(H200);
        dryrun::CardProfile::read(&path).map_err(|e| BookError::Parse {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// The H200's autotune cache directory, for the dry runs that pick the GPU's kernels.
    pub fn h200_autotune(&self) -> PathBuf {
        self.path(H200_AUTOTUNE)
    }
}

/// What directory `dir` holds, sorted by name.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, BookError> {
    let unreadable = |source| BookError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut paths = std::fs::read_dir(dir)
        .map_err(unreadable)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    paths.sort();
    Ok(paths)
}

fn read(path: &Path) -> Result<String, BookError> {
    std::fs::read_to_string(path).map_err(|source| BookError::Read {
        path: path.display().to_string(),
        source,
    })
}

pub(crate) fn json_at<T: DeserializeOwned>(path: &Path) -> Result<T, BookError> {
    serde_json::from_str(&read(path)?).map_err(|e| BookError::Parse {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn incident_at(path: &Path) -> Result<Incident, BookError> {
    let text = read(path)?;
    Ok(Incident::parse(&path.display().to_string(), &text)?)
}
