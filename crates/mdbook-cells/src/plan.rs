//! Stage 1, plan: every chapter parsed, each chapter's prelude found, every figure and table
//! numbered, and every runnable cell keyed by a hash of everything its output depends on.

use crate::compile::{self, CellSource};
use crate::context::Context;
use crate::freeze::{self, FreezeAt};
use crate::key::{KeyHasher, Memo};
use crate::outcome::SharedPart;
use crate::params::{self, Overrides, Param};
use crate::parse::{self, CellBlock, OptionError, Segment};
use crate::store;
use crate::types::{Document, Label, Labels, Problem};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Bumped whenever the generated code or the stored format changes meaning.
const ENGINE: &str = concat!("mdbook-cells ", env!("CARGO_PKG_VERSION"), " wire 3");

/// A cell found in the book, with what it needs to be run and shown.
pub(crate) struct PlannedCell {
    /// Its chapter, as an index into the build's documents.
    pub(crate) doc: usize,
    /// Its segment in the chapter.
    pub(crate) segment: usize,
    /// Its module in the generated crate.
    pub(crate) module: String,
    /// Its name in the chapter's file of the output store (its id, or `cell N`).
    pub(crate) store_name: String,
    /// The cache key; `None` for cells that are not compiled (preludes, bad options, GPU cells
    /// in a build that neither runs nor bundles them).
    pub(crate) key: Option<String>,
    /// A GPU cell's freeze file and the hash its freeze must carry to be current.
    pub(crate) freeze: Option<FreezeAt>,
    /// Its figure or table label, unless it has no id or another cell took it first.
    pub(crate) label: Option<Label>,
    /// What is wrong with it before it runs (its options, a second prelude, a taken id).
    pub(crate) errors: Vec<CellError>,
    /// A cell with nothing wrong of its own is not run when its chapter's parameters are in
    /// error: the parameters cell's fence line.
    pub(crate) blocked: Option<usize>,
}

/// Something wrong with a cell, found before it could run.
#[derive(Debug, Clone)]
pub(crate) enum CellError {
    /// An option, or where the cell stands (`parse` finds these).
    Option(OptionError),
    /// A chapter's second prelude or parameters cell.
    SecondShared(SharedPart),
    /// A parameter that cannot be set, at its chapter line.
    Parameter { line: usize, why: String },
    /// An id another cell took first: that cell's label and page.
    IdTaken { id: String, by: Label },
}

impl fmt::Display for CellError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellError::Option(e) => e.fmt(f),
            CellError::SecondShared(part) => {
                write!(f, "a chapter has one {} cell; merge them", part.name())
            }
            CellError::Parameter { line, why } => write!(f, "line {line}: {why}"),
            CellError::IdTaken { id, by } => {
                write!(
                    f,
                    "id `{id}` is already used by {} ({})",
                    by.name, by.html_path
                )
            }
        }
    }
}

/// Every chapter parsed and every cell planned.
pub(crate) struct Plan {
    /// Each chapter's segments: prose and cells.
    pub(crate) chapters: Vec<Vec<Segment>>,
    /// Cells where they cannot run (in a list, a blockquote), by chapter.
    pub(crate) misplaced: Vec<Vec<OptionError>>,
    /// What each chapter's cells share, in order: its parameters (with this build's values)
    /// and its prelude, each part's code and first line.
    pub(crate) preludes: Vec<Vec<(String, usize)>>,
    /// Each chapter's parameters with this build's values.
    pub(crate) params: Vec<Vec<Param>>,
    /// Problems of the build as a whole (a parameter set that no chapter declares).
    pub(crate) problems: Vec<Problem>,
    /// Every cell of the book, in book order.
    pub(crate) cells: Vec<PlannedCell>,
    /// Every figure and table, by id.
    pub(crate) labels: Labels,
    /// The hash of everything every cell depends on besides its own inputs (engine, toolchain,
    /// dependencies and their sources): what a compiled cell binary was built against.
    pub(crate) environment: String,
}

impl Plan {
    /// The parsed cell a planned one stands for.
    pub(crate) fn block(&self, cell: &PlannedCell) -> &CellBlock {
        match &self.chapters[cell.doc][cell.segment] {
            Segment::Cell(c) => c,
            Segment::Prose(_) => unreachable!("planned cells point at cells"),
        }
    }

    /// The code of each runnable cell that `include` keeps, as the cell crate's modules.
    pub(crate) fn cell_sources(
        &self,
        docs: &[Document],
        include: impl Fn(&PlannedCell) -> bool,
    ) -> Vec<CellSource> {
        let mut shared = HashMap::new();
        (self.cells.iter())
            .filter(|f| f.key.is_some() && include(f))
            .map(|f| {
                let c = self.block(f);
                let prelude = (shared.entry(f.doc))
                    .or_insert_with(|| compile::shared_for_modules(&self.preludes[f.doc]));
                CellSource {
                    module: f.module.clone(),
                    chapter: docs[f.doc].source.clone(),
                    prelude: Arc::clone(prelude),
                    code: c.code.clone(),
                    code_line: c.code_line,
                    last_line: c.last_code_line(),
                }
            })
            .collect()
    }
}

/// Plans the build; when it compiles GPU cells (to run them here or to bundle them), every cell
/// is keyed with their dependencies.
pub(crate) fn plan(ctx: &Context<'_>, docs: &[Document]) -> Plan {
    let (root, config) = (ctx.root, ctx.config);
    let gpu_compiled = ctx.gpu.compiled();
    let (chapters, misplaced): (Vec<Vec<Segment>>, Vec<Vec<OptionError>>) = docs
        .iter()
        .map(|d| {
            let chapter = parse::split(&d.content);
            (chapter.segments, chapter.misplaced)
        })
        .unzip();
    let mut errors: HashMap<(usize, usize), Vec<CellError>> = HashMap::new();
    let overrides = Overrides::new(&config.parameters, std::env::vars());
    let Shared {
        code: preludes,
        params,
        broken,
    } = find_shared(&chapters, &overrides, &mut errors);
    let problems = unknown_parameters(&overrides, &params);
    let (labels, mut label_of) = number_labels(docs, &chapters, &mut errors);

    // When GPU cells are compiled, every cell is compiled with their dependencies too: a CPU
    // cell that only compiles with them must not leave a cached success for CPU builds.
    let mut memo = Memo::open(ctx.cache_dir().join("digests.json"));
    let environment = environment_key(ctx, &mut memo);
    let environment = if gpu_compiled {
        gpu_environment_key(ctx, &environment, &mut memo)
    } else {
        environment
    };
    let mut cells = Vec::new();
    let mut trees = HashMap::new();
    for (d, segments) in chapters.iter().enumerate() {
        let mut gpu_cells = 0;
        let mut nth = 0;
        for (s, seg) in segments.iter().enumerate() {
            let Segment::Cell(c) = seg else { continue };
            // The store numbers the cells that run: a prelude added does not rename the rest.
            nth += usize::from(c.options.shared().is_none());
            let mut cell_errors: Vec<CellError> = c
                .option_errors
                .iter()
                .cloned()
                .map(CellError::Option)
                .collect();
            cell_errors.extend(errors.remove(&(d, s)).unwrap_or_default());
            let shared = c.options.shared().is_some();
            let blocked = broken[d].filter(|_| !shared && cell_errors.is_empty());
            let valid = !shared && cell_errors.is_empty() && blocked.is_none();
            let reads = valid.then(|| read_digests(root, c, &mut trees, &mut memo));
            let inputs = reads
                .as_ref()
                .map(|reads| inputs_key(&preludes[d], c, reads));
            let freeze = reads.as_ref().filter(|_| c.options.gpu).map(|reads| {
                gpu_cells += 1;
                FreezeAt {
                    path: freeze::path(root, &config.freeze_dir, &docs[d].source, gpu_cells),
                    source: freeze::source_key(&preludes[d], c, reads),
                }
            });
            let runnable = !c.options.gpu || gpu_compiled;
            let key = inputs.filter(|_| runnable).map(|inputs| {
                let mut h = environment.clone();
                h.part("cell", inputs.as_bytes());
                h.finish()
            });
            cells.push(PlannedCell {
                doc: d,
                segment: s,
                module: module_name(&docs[d].source, s),
                store_name: store::cell_name(c.options.id.as_deref(), nth),
                key,
                freeze,
                label: label_of.remove(&(d, s)),
                errors: cell_errors,
                blocked,
            });
        }
    }
    memo.save();
    Plan {
        chapters,
        misplaced,
        preludes,
        params,
        problems,
        cells,
        labels,
        environment: environment.finish(),
    }
}

/// What each chapter's cells share, by chapter.
struct Shared {
    /// The code: parameters (with this build's values), then prelude; each part's first line.
    code: Vec<Vec<(String, usize)>>,
    /// The parameters with this build's values.
    params: Vec<Vec<Param>>,
    /// The parameters cell's line, where it is in error.
    broken: Vec<Option<usize>>,
}

/// What each chapter's cells share: its one parameters cell (with this build's values) and its
/// one prelude, in that order; a second of either, or a parameter that cannot be set, is an
/// error on its cell. Also: each chapter's parameters cell's line, where it is in error.
fn find_shared(
    chapters: &[Vec<Segment>],
    overrides: &Overrides,
    errors: &mut HashMap<(usize, usize), Vec<CellError>>,
) -> Shared {
    let mut shared = vec![Vec::new(); chapters.len()];
    let mut params = vec![Vec::new(); chapters.len()];
    let mut broken = vec![None; chapters.len()];
    for (d, segments) in chapters.iter().enumerate() {
        let (mut parameters, mut prelude) = (None, None);
        for (s, seg) in segments.iter().enumerate() {
            let Segment::Cell(c) = seg else { continue };
            let (slot, part) = match (c.options.parameters, c.options.prelude) {
                (true, false) => (&mut parameters, SharedPart::Parameters),
                (false, true) => (&mut prelude, SharedPart::Prelude),
                _ => continue,
            };
            if slot.is_some() {
                let error = CellError::SecondShared(part);
                errors.entry((d, s)).or_default().push(error);
                continue;
            }
            let code = if c.options.parameters {
                let (declared, code, problems) = params::apply(&c.code, overrides);
                params[d] = declared;
                if !problems.is_empty() {
                    broken[d] = Some(c.fence_line);
                    let lines = (problems.into_iter()).map(|(line, why)| CellError::Parameter {
                        line: c.code_line + line,
                        why,
                    });
                    errors.entry((d, s)).or_default().extend(lines);
                    continue;
                }
                code
            } else {
                c.code.clone()
            };
            *slot = Some((code, c.code_line));
        }
        shared[d] = parameters.into_iter().chain(prelude).collect();
    }
    Shared {
        code: shared,
        params,
        broken,
    }
}

/// A parameter set for this build that no chapter declares (a misspelt name would otherwise
/// change nothing, silently).
fn unknown_parameters(overrides: &Overrides, params: &[Vec<Param>]) -> Vec<Problem> {
    let declared: Vec<&str> = params.iter().flatten().map(|p| p.name.as_str()).collect();
    overrides
        .names()
        .filter(|name| !declared.contains(name))
        .map(|name| Problem {
            file: "book.toml".into(),
            line: 0,
            reason: format!(
                "parameter `{name}` (set by book.toml or `{}`) is declared by no chapter; the \
                 book's parameters: {}",
                params::env_var(name),
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            ),
        })
        .collect()
}

/// Numbers every figure and table by chapter. The first cell to take an id keeps it:
/// references lead there, and a duplicate is an error on its cell, with no anchor or number.
fn number_labels(
    docs: &[Document],
    chapters: &[Vec<Segment>],
    errors: &mut HashMap<(usize, usize), Vec<CellError>>,
) -> (Labels, HashMap<(usize, usize), Label>) {
    let mut labels = Labels::new();
    let mut label_of = HashMap::new();
    for (d, segments) in chapters.iter().enumerate() {
        let mut counts = HashMap::new();
        for (s, seg) in segments.iter().enumerate() {
            let Segment::Cell(c) = seg else { continue };
            let Some(id) = &c.options.id else { continue };
            if let Some(first) = labels.get(id) {
                errors.entry((d, s)).or_default().push(CellError::IdTaken {
                    id: id.clone(),
                    by: first.clone(),
                });
                continue;
            }
            let n = counts.entry(&id[..4]).or_insert(0);
            *n += 1;
            let label = Label {
                id: id.clone(),
                name: label_name(id, docs[d].number.as_deref(), *n),
                html_path: docs[d].html_path.clone(),
            };
            labels.insert(id.clone(), label.clone());
            label_of.insert((d, s), label);
        }
    }
    (labels, label_of)
}

/// The label prefix for the n-th figure or table of a chapter numbered `number` ("2.1.").
fn label_name(id: &str, number: Option<&str>, n: usize) -> String {
    let word = if id.starts_with("fig-") {
        "Figure"
    } else {
        "Table"
    };
    match number
        .map(|s| s.trim_end_matches('.'))
        .filter(|s| !s.is_empty())
    {
        Some(chapter) => format!("{word} {chapter}.{n}"),
        None => format!("{word} {n}"),
    }
}

/// What a cell's run depends on in the book itself: its chapter's shared code (parameters and
/// prelude), its code, the options that change a run (captions, ids and hide-… are free) and
/// `reads`, the digest of each file it reads ([`read_digests`]). A GPU cell's freeze keys on
/// less: [`freeze::source_key`].
fn inputs_key(shared: &[(String, usize)], c: &CellBlock, reads: &[String]) -> String {
    let mut h = KeyHasher::default();
    // One part, as before parameters existed: a chapter without them keeps its keys.
    let shared: String = shared.iter().map(|(code, _)| code.as_str()).collect();
    if !shared.is_empty() {
        h.part("prelude", shared.as_bytes());
    }
    h.part("code", c.code.as_bytes())
        .part("timeout", &c.options.timeout.unwrap_or(0).to_le_bytes())
        .part("expect-fail", &[u8::from(c.options.expect_fail)]);
    for digest in reads {
        h.part("tree digest", digest.as_bytes());
    }
    h.finish()
}

/// The digest of each file or folder `c` reads, computed once per build however many cells
/// read it (a results folder read by twenty cells is hashed once, not twenty times), from file
/// digests the memo keeps between builds.
fn read_digests(
    root: &Path,
    c: &CellBlock,
    trees: &mut HashMap<String, String>,
    memo: &mut Memo,
) -> Vec<String> {
    (c.options.reads.iter())
        .map(|read| {
            let digest = trees.entry(read.clone()).or_insert_with(|| {
                let mut tree = KeyHasher::default();
                tree.tree_digest(root, Path::new(read), memo).finish()
            });
            digest.clone()
        })
        .collect()
}

/// A module name unique in the book and stable while the chapter's cells keep their order. The
/// readable stem loses case and punctuation (`a-b.md` and `a_b.md` share it), so a hash of the
/// exact path keeps two chapters apart.
fn module_name(source: &str, segment: usize) -> String {
    let path = KeyHasher::default()
        .part("chapter", source.as_bytes())
        .finish();
    let stem: String = source
        .trim_start_matches("src/")
        .trim_end_matches(".md")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("c_{stem}_{}_{segment}", &path[..8])
}

/// Everything every cell's output depends on besides its own code.
fn environment_key(ctx: &Context<'_>, memo: &mut Memo) -> KeyHasher {
    let (root, config) = (ctx.root, ctx.config);
    let mut h = KeyHasher::default();
    h.part("engine", ENGINE.as_bytes());
    h.part("rustc", toolchain(root).as_bytes());
    h.part(
        "dependencies",
        toml::to_string(&config.dependencies)
            .unwrap_or_default()
            .as_bytes(),
    );
    h.part(
        "lockfile",
        &std::fs::read(root.join("Cargo.lock")).unwrap_or_default(),
    );
    for dir in config.path_dependencies(root) {
        h.tree_digest(root, &dir, memo);
    }
    for input in &config.inputs {
        h.tree_digest(root, input, memo);
    }
    // The limit caps the files a cell's process writes, so it can change what a cell computes
    // (a library's cache file cut short), not only what the page shows.
    h.part("output-limit", &config.output_limit.to_le_bytes());
    h
}

/// The environment of a build that compiles GPU cells: the CPU cells' and the GPU cells' own
/// dependencies.
fn gpu_environment_key(ctx: &Context<'_>, environment: &KeyHasher, memo: &mut Memo) -> KeyHasher {
    let (root, config) = (ctx.root, ctx.config);
    let mut h = environment.clone();
    h.part(
        "gpu-dependencies",
        toml::to_string(&config.gpu_dependencies)
            .unwrap_or_default()
            .as_bytes(),
    );
    for dir in config.gpu_path_dependencies(root) {
        h.tree_digest(root, &dir, memo);
    }
    h
}

/// The compiler the cells are built with. A toolchain file that pins an exact version names it
/// (no process to spawn: that is a third of a fully cached rebuild); otherwise `rustc -vV`.
fn toolchain(root: &Path) -> String {
    let pinned = root.ancestors().find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("rust-toolchain.toml"))
            .or_else(|_| std::fs::read_to_string(dir.join("rust-toolchain")))
            .ok()?;
        let table: toml::Table = toml::from_str(&text).ok()?;
        let channel = table
            .get("toolchain")?
            .get("channel")?
            .as_str()?
            .to_string();
        channel
            .starts_with(|c: char| c.is_ascii_digit())
            .then(|| format!("pinned {channel}"))
    });
    // rustup sets RUSTUP_TOOLCHAIN for processes it starts; another toolchain there wins.
    let overridden = std::env::var("RUSTUP_TOOLCHAIN").is_ok_and(|t| {
        pinned
            .as_ref()
            .is_none_or(|p| !t.starts_with(&p["pinned ".len()..]))
    });
    if let (Some(pinned), false) = (pinned, overridden) {
        return pinned;
    }
    std::process::Command::new("rustc")
        .arg("-vV")
        .current_dir(root)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_pinned_toolchain_needs_no_rustc_call() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("book")).unwrap();
        std::fs::write(
            dir.join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"1.95.0\"\n",
        )
        .unwrap();
        if std::env::var("RUSTUP_TOOLCHAIN").map_or(true, |t| t.starts_with("1.95.0")) {
            assert_eq!(toolchain(&dir.join("book")), "pinned 1.95.0");
        }
        std::fs::write(
            dir.join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"stable\"\n",
        )
        .unwrap();
        assert!(
            toolchain(&dir.join("book")).contains("rustc"),
            "falls back to rustc -vV"
        );
    }

    #[test]
    fn label_names_follow_chapter_numbers() {
        assert_eq!(label_name("fig-a", Some("2.1."), 3), "Figure 2.1.3");
        assert_eq!(label_name("tbl-a", None, 1), "Table 1");
    }

    #[test]
    fn module_names_are_identifiers_unique_per_chapter() {
        let name = module_name("src/part-1/the verdict.md", 3);
        assert!(name.starts_with("c_part_1_the_verdict_"), "{name}");
        assert!(name.ends_with("_3"));
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        let names: HashSet<String> = ["a-b.md", "a_b.md", "A_b.md", "sub/more.md", "sub_more.md"]
            .iter()
            .map(|c| module_name(&format!("src/{c}"), 1))
            .collect();
        assert_eq!(names.len(), 5, "{names:?}");
    }
}
