//! `mdbook-cells`: an mdbook preprocessor whose ```` ```cell ```` blocks are Rust that runs.
//!
//! The walk, once per build: **parse** every chapter into prose and cells → **plan**: hash each
//! cell's inputs and look it up in the output cache → **compile** the cells that missed, all of
//! the book's cells being one generated crate → **execute** them in one child process →
//! **render** code and output back into the chapters. [`process`] is that walk over plain
//! strings; [`Cells`] adapts it to mdbook's preprocessor protocol.

pub mod bundle;
pub mod cache;
pub mod compile;
pub mod config;
pub mod execute;
pub mod freeze;
pub mod parse;
pub mod render;

use cache::{Cache, KeyHasher, Stored};
use compile::{CellCrate, CellSource};
use config::Config;
use parse::{CellBlock, Segment};
use render::{Label, Labels, Shown};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid [preprocessor.cells] configuration: {0}")]
    Config(String),
    #[error("cell cache at {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the cell crate at {path}: {source}")]
    Crate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run the cells: {0}")]
    Run(std::io::Error),
    #[error("cannot write the GPU-cell bundle: {0}")]
    Bundle(#[from] bundle::BundleError),
}

/// A chapter as [`process`] sees it.
#[derive(Debug, Clone)]
pub struct Document {
    /// The chapter's file as messages name it (`src/intro.md`).
    pub source: String,
    /// The page it becomes (`part-1/intro.html`), for links between chapters.
    pub html_path: String,
    /// Its section number (`"2.1."`), used in figure and table labels.
    pub number: Option<String>,
    pub content: String,
}

/// A failure strict mode refuses: `chapter.md:LINE: cell failed: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: cell failed: {}",
            self.file, self.line, self.reason
        )
    }
}

/// What a build did.
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<Problem>,
    pub cells: usize,
    pub cached: usize,
    pub ran: usize,
    pub compile_time: Duration,
    pub run_time: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cells: {} cached, {} ran (compile {:.1} s, run {:.1} s), {} problem(s)",
            self.cells,
            self.cached,
            self.ran,
            self.compile_time.as_secs_f64(),
            self.run_time.as_secs_f64(),
            self.problems.len()
        )
    }
}

/// Bumped whenever the generated code or the stored format changes meaning.
const ENGINE: &str = concat!("mdbook-cells ", env!("CARGO_PKG_VERSION"), " wire 3");

/// A cell found in the book, with what it needs to be run and shown.
struct Found {
    doc: usize,
    segment: usize,
    module: String,
    /// The cache key; `None` for cells that are not compiled (preludes, bad options, GPU cells
    /// in a build that neither runs nor bundles them).
    key: Option<String>,
    /// A GPU cell's freeze file and the hash its freeze must carry to be current.
    freeze: Option<(PathBuf, String)>,
}

/// Every chapter parsed, with its prelude and its cells' keys.
struct Plan {
    /// GPU cells are being bundled: their freezes are about to be remade, so a missing or stale
    /// one is no problem in this build.
    bundling: bool,
    parsed: Vec<Vec<Segment>>,
    /// Cells where they cannot run (in a list, a blockquote), by chapter.
    misplaced: Vec<Vec<parse::OptionError>>,
    /// Each chapter's prelude code and its first line.
    preludes: Vec<Option<(String, usize)>>,
    /// Problems with a cell found across cells (a second prelude, a duplicate id).
    cell_errors: HashMap<(usize, usize), Vec<String>>,
    cells: Vec<Found>,
}

impl Plan {
    fn cell(&self, f: &Found) -> &CellBlock {
        match &self.parsed[f.doc][f.segment] {
            Segment::Cell(c) => c,
            Segment::Prose(_) => unreachable!("found cells point at cells"),
        }
    }
}

/// Runs every cell of `docs` (cached where possible) and rewrites their content with the
/// outputs. Failures are rendered in place and listed in the report; the caller decides
/// whether they fail the build.
pub fn process(root: &Path, config: &Config, docs: &mut [Document]) -> Result<Report, Error> {
    let mut report = Report::default();
    let gpu = GpuCells::of(config);
    if let GpuCells::Bundle(dir) = &gpu {
        bundle::clear(&root.join(dir))?;
    }
    let mut plan = plan(root, config, docs, !matches!(gpu, GpuCells::Frozen));
    plan.bundling = matches!(gpu, GpuCells::Bundle(_));

    let cache_dir = root.join(&config.cache_dir);
    let cache_error = |source| Error::Cache {
        path: cache_dir.clone(),
        source,
    };
    let cache = Cache::open(&cache_dir).map_err(cache_error)?;
    let mut outcomes: HashMap<String, Stored> = HashMap::new();
    let mut misses = Vec::new();
    let mut bundled = Vec::new();
    for f in &plan.cells {
        let Some(key) = &f.key else { continue };
        if f.freeze.is_some() && plan.bundling {
            bundled.push(f);
            continue;
        }
        match cache.get(key) {
            Some(stored) => {
                outcomes.insert(f.module.clone(), stored);
                report.cached += 1;
            }
            None => misses.push(f),
        }
    }
    // Cells this build runs or takes from the cache (bundled GPU cells run elsewhere).
    report.cells = report.cached + misses.len();
    let prelude_errors = if misses.is_empty() && bundled.is_empty() {
        HashMap::new()
    } else {
        let prelude_errors = compile_and_run(
            root,
            config,
            docs,
            &plan,
            ToCompile {
                misses: &misses,
                bundled: &bundled,
                gpu: &gpu,
            },
            &mut outcomes,
            &mut report,
        )?;
        // Keep what is worth keeping: outputs, and the failures that are a cell's content.
        for f in &misses {
            let (Some(key), Some(stored)) = (&f.key, outcomes.get(&f.module)) else {
                continue;
            };
            let deterministic_failure = matches!(
                stored.kind.as_str(),
                "compile" | "panic" | "error" | "too-large"
            );
            if !is_failure(&stored.kind)
                || (plan.cell(f).options.expect_fail && deterministic_failure)
            {
                cache.put(key, stored).map_err(cache_error)?;
            }
        }
        prelude_errors
    };
    let live: HashSet<String> = plan.cells.iter().filter_map(|f| f.key.clone()).collect();
    cache.retain(&live).map_err(cache_error)?;
    drop(cache);
    if let GpuCells::Run(gpu) = &gpu {
        freeze_gpu_outputs(&plan, &outcomes, gpu, &mut report);
    }

    render_pages(
        docs,
        &mut plan,
        &outcomes,
        &prelude_errors,
        config.fold_code_over,
        &mut report,
    );
    Ok(report)
}

/// What a build does with the cells marked `gpu`.
enum GpuCells {
    /// Shows their freezes (no GPU runs asked for, or no GPU here).
    Frozen,
    /// Runs them on this machine's GPU, named so, and freezes their outputs.
    Run(String),
    /// Compiles them into a bundle for a GPU box, in this folder (see [`bundle`]).
    Bundle(PathBuf),
}

impl GpuCells {
    /// The environment wins over `book.toml`; a bundle over GPU runs.
    fn of(config: &Config) -> GpuCells {
        let bundle = std::env::var_os("MDBOOK_CELLS_GPU_BUNDLE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| config.gpu_bundle.clone());
        if let Some(dir) = bundle {
            return GpuCells::Bundle(dir);
        }
        freeze::requested(config.gpu)
            .then(|| config.gpu_name.clone().or_else(freeze::gpu_name))
            .flatten()
            .map_or(GpuCells::Frozen, GpuCells::Run)
    }
}

/// Writes the freeze of every GPU cell that ran and succeeded, unless an identical one exists.
fn freeze_gpu_outputs(
    plan: &Plan,
    outcomes: &HashMap<String, Stored>,
    gpu: &str,
    report: &mut Report,
) {
    for f in &plan.cells {
        let (Some((path, source)), Some(stored)) = (&f.freeze, outcomes.get(&f.module)) else {
            continue;
        };
        if is_failure(&stored.kind) {
            continue;
        }
        if let Err(e) = freeze::record(path, source, gpu, freeze::COMMAND, stored) {
            report.problems.push(Problem {
                file: path.display().to_string(),
                line: 0,
                reason: format!("cannot write the GPU cell's freeze: {e}"),
            });
        }
    }
}

/// Parses every chapter, finds each one's prelude, and keys every runnable cell; `gpu_compiled`:
/// GPU cells are compiled too (to run here or to be bundled).
fn plan(root: &Path, config: &Config, docs: &[Document], gpu_compiled: bool) -> Plan {
    let (parsed, misplaced): (Vec<Vec<Segment>>, Vec<Vec<parse::OptionError>>) = docs
        .iter()
        .map(|d| {
            let chapter = parse::split(&d.content);
            (chapter.segments, chapter.misplaced)
        })
        .unzip();
    let mut preludes: Vec<Option<(String, usize)>> = vec![None; docs.len()];
    let mut cell_errors: HashMap<(usize, usize), Vec<String>> = HashMap::new();
    for (d, segments) in parsed.iter().enumerate() {
        for (s, seg) in segments.iter().enumerate() {
            if let Segment::Cell(c) = seg
                && c.options.prelude
            {
                if preludes[d].is_some() {
                    cell_errors
                        .entry((d, s))
                        .or_default()
                        .push("a chapter has one prelude cell; merge them".into());
                } else {
                    preludes[d] = Some((c.code.clone(), c.code_line));
                }
            }
        }
    }

    // When GPU cells are compiled, every cell is compiled with their dependencies too: a CPU
    // cell that only compiles with them must not leave a cached success for CPU builds.
    let environment = environment_key(root, config);
    let environment = if gpu_compiled {
        gpu_environment_key(root, config, &environment)
    } else {
        environment
    };
    let mut cells = Vec::new();
    for (d, segments) in parsed.iter().enumerate() {
        let mut gpu_cells = 0;
        for (s, seg) in segments.iter().enumerate() {
            let Segment::Cell(c) = seg else { continue };
            let valid = !c.options.prelude
                && c.option_errors.is_empty()
                && !cell_errors.contains_key(&(d, s));
            // Only what changes the run is hashed: captions, ids and hide-… are free. This part
            // is also what a GPU cell's freeze records (no toolchain, no dependencies).
            let inputs = valid.then(|| {
                let mut h = KeyHasher::default();
                if let Some((p, _)) = &preludes[d] {
                    h.part("prelude", p.as_bytes());
                }
                h.part("code", c.code.as_bytes())
                    .part("timeout", &c.options.timeout.unwrap_or(0).to_le_bytes())
                    .part("expect-fail", &[u8::from(c.options.expect_fail)]);
                for read in &c.options.reads {
                    h.tree(root, Path::new(read));
                }
                h.finish()
            });
            let freeze = inputs.as_ref().filter(|_| c.options.gpu).map(|inputs| {
                gpu_cells += 1;
                let path = freeze::path(root, &config.freeze_dir, &docs[d].source, gpu_cells);
                (path, inputs.clone())
            });
            let runnable = !c.options.gpu || gpu_compiled;
            let key = inputs.filter(|_| runnable).map(|inputs| {
                let mut h = environment.clone();
                h.part("cell", inputs.as_bytes());
                h.finish()
            });
            cells.push(Found {
                doc: d,
                segment: s,
                module: module_name(&docs[d].source, s),
                key,
                freeze,
            });
        }
    }
    Plan {
        bundling: false,
        parsed,
        misplaced,
        preludes,
        cell_errors,
        cells,
    }
}

/// What a build compiles: the cells to run (cache misses), the GPU cells to bundle, and what
/// happens to GPU cells.
struct ToCompile<'a> {
    misses: &'a [&'a Found],
    bundled: &'a [&'a Found],
    gpu: &'a GpuCells,
}

/// Compiles the book's cells as one crate, runs those without an outcome and, when bundling,
/// writes the GPU cells that compiled into the bundle. Returns the compile errors found in
/// chapters' preludes, by chapter.
fn compile_and_run(
    root: &Path,
    config: &Config,
    docs: &[Document],
    plan: &Plan,
    todo: ToCompile,
    outcomes: &mut HashMap<String, Stored>,
    report: &mut Report,
) -> Result<HashMap<usize, String>, Error> {
    let ToCompile {
        misses,
        bundled,
        gpu,
    } = todo;
    let cache_dir = root.join(&config.cache_dir);
    // Every runnable cell goes into the crate so its module set is stable between builds;
    // cached compile failures stay out (they would fail again).
    let sources: Vec<CellSource> = plan
        .cells
        .iter()
        .filter(|f| f.key.is_some())
        .filter(|f| outcomes.get(&f.module).is_none_or(|o| o.kind != "compile"))
        .map(|f| {
            let c = plan.cell(f);
            CellSource {
                module: f.module.clone(),
                chapter: docs[f.doc].source.clone(),
                prelude: plan.preludes[f.doc].clone(),
                code: c.code.clone(),
                code_line: c.code_line,
                last_line: c.last_code_line(),
            }
        })
        .collect();
    let crate_dir = cache_dir.join("crate");
    let krate = CellCrate::write(
        &crate_dir,
        &cache_dir.join("target"),
        &cell_crate_dependencies(root, config, !matches!(gpu, GpuCells::Frozen)),
        &config.profile,
        &sources,
        Some(&root.join("Cargo.lock")),
    )
    .map_err(|source| Error::Crate {
        path: crate_dir.clone(),
        source,
    })?;
    let started = Instant::now();
    let compiled = krate.compile();
    report.compile_time = started.elapsed();

    let mut prelude_errors = HashMap::new();
    let mut jobs = Vec::new();
    let mut to_bundle = Vec::new();
    for f in misses.iter().chain(bundled) {
        if let Some(global) = &compiled.global {
            outcomes.insert(f.module.clone(), failure("build", global));
        } else if let Some(diags) = compiled.errors.get(&f.module) {
            let (in_prelude, in_cell): (Vec<_>, Vec<_>) = diags.iter().partition(|d| d.in_prelude);
            if !in_prelude.is_empty() {
                let text: Vec<&str> = in_prelude.iter().map(|d| d.rendered.as_str()).collect();
                prelude_errors.insert(f.doc, text.join("\n\n"));
            }
            let text: Vec<&str> = if in_cell.is_empty() {
                vec!["this chapter's prelude did not compile (its error is shown there)"]
            } else {
                in_cell.iter().map(|d| d.rendered.as_str()).collect()
            };
            outcomes.insert(f.module.clone(), failure("compile", &text.join("\n\n")));
        } else {
            let secs = plan.cell(f).options.timeout.unwrap_or(config.timeout);
            let job = execute::Job {
                module: f.module.clone(),
                timeout: Duration::from_secs(secs),
            };
            match (&f.freeze, gpu) {
                (Some((freeze, source)), GpuCells::Bundle(_)) => {
                    let Ok(freeze) = freeze.strip_prefix(root) else {
                        return Err(bundle::BundleError::FreezeOutside(freeze.clone()).into());
                    };
                    to_bundle.push(bundle::BundledCell {
                        module: job.module,
                        chapter: docs[f.doc].source.clone(),
                        line: plan.cell(f).fence_line,
                        timeout_s: secs,
                        freeze: freeze.to_path_buf(),
                        source: source.clone(),
                    })
                }
                _ => jobs.push(job),
            }
        }
    }
    if let (GpuCells::Bundle(dir), Some(binary)) = (gpu, &compiled.binary)
        && !to_bundle.is_empty()
    {
        let lines = to_bundle
            .iter()
            .filter_map(|c| Some((c.module.clone(), krate.line_maps().get(&c.module)?.clone())))
            .collect();
        let manifest = bundle::Bundle {
            command: bundle::command(dir),
            output_limit: config.output_limit,
            cells: to_bundle,
            lines,
        };
        bundle::write(&root.join(dir), binary, &manifest)?;
    }
    let Some(binary) = compiled.binary.filter(|_| !jobs.is_empty()) else {
        return Ok(prelude_errors);
    };
    let started = Instant::now();
    let results = cache_dir.join("results");
    let ran = execute::run_all(&binary, root, &results, &jobs, config.output_limit)
        .map_err(Error::Run)?;
    report.run_time = started.elapsed();
    report.ran = ran.len();
    for (module, ran) in ran {
        let stored = ran.into_stored(|m| krate.map_panic_location(m));
        outcomes.insert(module, stored);
    }
    Ok(prelude_errors)
}

/// Numbers every figure and table, then rewrites each chapter: prose with its references
/// resolved, cells with their code and outcome. Every unexpected failure goes in the report.
fn render_pages(
    docs: &mut [Document],
    plan: &mut Plan,
    outcomes: &HashMap<String, Stored>,
    prelude_errors: &HashMap<usize, String>,
    fold_code_over: usize,
    report: &mut Report,
) {
    // Labels first: a reference may point forward or into another chapter.
    let mut labels = Labels::new();
    let mut label_of: HashMap<(usize, usize), Label> = HashMap::new();
    for (d, segments) in plan.parsed.iter().enumerate() {
        let mut counts = HashMap::new();
        for (s, seg) in segments.iter().enumerate() {
            let Segment::Cell(c) = seg else { continue };
            let Some(id) = &c.options.id else { continue };
            // The first cell to take an id keeps it: references lead there, and a duplicate
            // gets no anchor and no number.
            if let Some(first) = labels.get(id) {
                plan.cell_errors.entry((d, s)).or_default().push(format!(
                    "id `{id}` is already used by {} ({})",
                    first.name, first.html_path
                ));
                continue;
            }
            let n = counts.entry(&id[..4]).or_insert(0);
            *n += 1;
            let label = Label {
                id: id.clone(),
                name: render::label_name(id, docs[d].number.as_deref(), *n),
                html_path: docs[d].html_path.clone(),
            };
            labels.insert(id.clone(), label.clone());
            label_of.insert((d, s), label);
        }
    }
    let module_at: HashMap<(usize, usize), &str> = plan
        .cells
        .iter()
        .map(|f| ((f.doc, f.segment), f.module.as_str()))
        .collect();
    // GPU cells: where their freeze is, unless they ran in this build (then shown as run).
    let freeze_at: HashMap<(usize, usize), Option<&(PathBuf, String)>> = plan
        .cells
        .iter()
        .map(|f| {
            let ran = outcomes.contains_key(&f.module);
            ((f.doc, f.segment), f.freeze.as_ref().filter(|_| !ran))
        })
        .collect();
    for (d, segments) in plan.parsed.iter().enumerate() {
        let doc = &docs[d];
        for m in &plan.misplaced[d] {
            report.problems.push(Problem {
                file: doc.source.clone(),
                line: m.line,
                reason: m.message.clone(),
            });
        }
        let mut page = String::with_capacity(doc.content.len());
        for (s, seg) in segments.iter().enumerate() {
            match seg {
                Segment::Prose(text) => {
                    let (text, unknown) = render::references(text, &labels, &doc.html_path);
                    for (id, line) in unknown {
                        report.problems.push(Problem {
                            file: doc.source.clone(),
                            line: lines_before(segments, s) + line + 1,
                            reason: format!("reference to unknown id `@{id}`"),
                        });
                    }
                    page.push_str(&text);
                }
                Segment::Cell(c) => {
                    let mut option_errors: Vec<String> =
                        c.option_errors.iter().map(|e| e.to_string()).collect();
                    option_errors.extend(plan.cell_errors.remove(&(d, s)).unwrap_or_default());
                    let module = module_at[&(d, s)];
                    let shown = if !option_errors.is_empty() {
                        failed("bad cell options", option_errors.join("\n"))
                    } else if c.options.prelude {
                        match prelude_errors.get(&d) {
                            Some(e) => failed("the prelude did not compile", e.clone()),
                            None => Shown::Nothing,
                        }
                    } else if let Some((path, source)) = &freeze_at[&(d, s)] {
                        match freeze::read(path) {
                            Ok(f) => {
                                let stale = &f.source != source;
                                if stale && !plan.bundling {
                                    report.problems.push(Problem {
                                        file: doc.source.clone(),
                                        line: c.fence_line,
                                        reason: format!(
                                            "the GPU cell's frozen output ({}) is stale: its \
                                             code or inputs changed since it ran on {} at {}; {}",
                                            path.display(),
                                            f.gpu,
                                            f.date,
                                            freeze::how_to_freeze()
                                        ),
                                    });
                                }
                                Shown::Frozen {
                                    badge: f.badge(),
                                    stored: f.output,
                                    stale,
                                }
                            }
                            Err(why) => {
                                if !plan.bundling {
                                    report.problems.push(Problem {
                                        file: doc.source.clone(),
                                        line: c.fence_line,
                                        reason: format!(
                                            "the GPU cell {why} at {}; {}",
                                            path.display(),
                                            freeze::how_to_freeze()
                                        ),
                                    });
                                }
                                Shown::Note(format!(
                                    "This cell needs a GPU run; no recorded output exists for it \
                                     yet ({}).",
                                    path.display()
                                ))
                            }
                        }
                    } else {
                        match outcomes.get(module) {
                            Some(stored) => shown_for(c, stored),
                            None => failed("not run", "the cell was not run".into()),
                        }
                    };
                    if let Shown::Failure {
                        label,
                        message,
                        expected: false,
                        ..
                    } = &shown
                    {
                        let first = message.lines().next().unwrap_or_default();
                        let line = first_line_number(message, &doc.source).unwrap_or(c.fence_line);
                        report.problems.push(Problem {
                            file: doc.source.clone(),
                            line,
                            reason: format!("{label}: {first}"),
                        });
                    }
                    let fold = c
                        .options
                        .fold_code
                        .unwrap_or(c.code.lines().count() > fold_code_over);
                    page.push_str(&render::cell(c, &shown, label_of.get(&(d, s)), fold));
                }
            }
        }
        docs[d].content = page;
    }
}

fn failed(label: &str, message: String) -> Shown<'static> {
    Shown::Failure {
        label: label.into(),
        message,
        stdout: String::new(),
        expected: false,
    }
}

fn failure(kind: &str, message: &str) -> Stored {
    Stored {
        stdout: String::new(),
        stderr: String::new(),
        kind: kind.into(),
        body: message.into(),
    }
}

fn is_failure(kind: &str) -> bool {
    cache::FAILURE_KINDS.contains(&kind)
}

/// What the page shows for a cell that was compiled and run (now or in an earlier build).
fn shown_for<'a>(cell: &CellBlock, stored: &'a Stored) -> Shown<'a> {
    let expected = cell.options.expect_fail;
    if !is_failure(&stored.kind) {
        if expected {
            return failed(
                "expected a failure",
                "this cell is marked `expect-fail` but it succeeded".into(),
            );
        }
        return Shown::Output(stored);
    }
    let label = match stored.kind.as_str() {
        "compile" => "compile error",
        "build" => "the cell crate did not build",
        "panic" => "panicked",
        "error" => "returned an error",
        "timeout" => "timed out",
        "too-large" => "output over the limit",
        _ => "the cell process died",
    };
    let mut message = stored.body.clone();
    if !stored.stderr.is_empty() && stored.kind != "compile" {
        message = format!("{message}\n\nstderr:\n{}", stored.stderr.trim_end());
    }
    Shown::Failure {
        label: if expected {
            format!("expected failure ({label})")
        } else {
            label.into()
        },
        message,
        stdout: stored.stdout.clone(),
        expected,
    }
}

/// The line a compile error points at (`--> src/x.md:LINE:COL`), if the message has one.
fn first_line_number(message: &str, source: &str) -> Option<usize> {
    let at = message.find(&format!("{source}:"))? + source.len() + 1;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Chapter lines taken by the segments before `upto`.
fn lines_before(segments: &[Segment], upto: usize) -> usize {
    segments[..upto]
        .iter()
        .map(|s| match s {
            Segment::Prose(p) => p.lines().count(),
            // A cell's lines: fence, body, closing fence.
            Segment::Cell(c) => c.code.lines().count() + (c.code_line - c.fence_line) + 1,
        })
        .sum()
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
fn environment_key(root: &Path, config: &Config) -> KeyHasher {
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
        h.tree(root, &dir);
    }
    for input in &config.inputs {
        h.tree(root, input);
    }
    h
}

/// The environment of a build that compiles GPU cells: the CPU cells' and the GPU cells' own
/// dependencies.
fn gpu_environment_key(root: &Path, config: &Config, environment: &KeyHasher) -> KeyHasher {
    let mut h = environment.clone();
    h.part(
        "gpu-dependencies",
        toml::to_string(&config.gpu_dependencies)
            .unwrap_or_default()
            .as_bytes(),
    );
    for dir in config.gpu_path_dependencies(root) {
        h.tree(root, &dir);
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

/// The book's dependencies plus `cell-output`, which every cell crate needs.
fn cell_crate_dependencies(root: &Path, config: &Config, gpu: bool) -> toml::Table {
    let mut deps = config.absolute_dependencies(root, gpu);
    deps.entry("cell-output")
        .or_insert_with(|| env!("CARGO_PKG_VERSION").into());
    deps
}

/// The mdbook side: reads `[preprocessor.cells]`, runs [`process`] over the book's chapters.
pub struct Cells;

impl mdbook_preprocessor::Preprocessor for Cells {
    fn name(&self) -> &str {
        "cells"
    }

    fn run(
        &self,
        ctx: &mdbook_preprocessor::PreprocessorContext,
        mut book: mdbook_preprocessor::book::Book,
    ) -> mdbook_preprocessor::errors::Result<mdbook_preprocessor::book::Book> {
        let config: Config = ctx.config.get("preprocessor.cells")?.unwrap_or_default();
        let src = &ctx.config.book.src;
        config.validate(&ctx.root, src)?;
        let strict = config.strict
            || std::env::var("MDBOOK_CELLS_STRICT").is_ok_and(|v| v == "1" || v == "true");

        let mut docs = Vec::new();
        book.for_each_chapter_mut(|ch| {
            if let Some(path) = &ch.path {
                docs.push(Document {
                    source: src.join(path).display().to_string(),
                    html_path: path.with_extension("html").display().to_string(),
                    number: ch.number.as_ref().map(|n| n.to_string()),
                    content: std::mem::take(&mut ch.content),
                });
            }
        });
        let report = process(&ctx.root, &config, &mut docs)?;
        let mut pages = docs.into_iter();
        book.for_each_chapter_mut(|ch| {
            if ch.path.is_some()
                && let Some(doc) = pages.next()
            {
                ch.content = doc.content;
            }
        });

        eprintln!("mdbook-cells: {report}");
        for p in &report.problems {
            eprintln!("mdbook-cells: {p}");
        }
        if strict && !report.problems.is_empty() {
            let list: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
            anyhow::bail!(
                "{} cell(s) failed in strict mode:\n{}",
                list.len(),
                list.join("\n")
            );
        }
        Ok(book)
    }

    fn supports_renderer(&self, renderer: &str) -> mdbook_preprocessor::errors::Result<bool> {
        // `mdbook test` would compile the rendered code blocks as doctests; cells are checked
        // by running them instead.
        Ok(renderer != "test")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_toolchain_needs_no_rustc_call() {
        let dir = std::env::temp_dir().join(format!("cells-toolchain-{}", std::process::id()));
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
        std::fs::remove_dir_all(&dir).unwrap();
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

    #[test]
    fn error_lines_come_from_the_rendered_location() {
        let msg = "error[E0425]: x\n  --> src/a.md:42:5\n";
        assert_eq!(first_line_number(msg, "src/a.md"), Some(42));
        assert_eq!(first_line_number("boom", "src/a.md"), None);
    }
}
