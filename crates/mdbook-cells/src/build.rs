//! Stage 2, build: each cell's outcome from the cache, or compiled (the book's cells as one
//! crate) and run now, each in a process of its own — a GPU cell bundled instead, when
//! bundling — and the outcomes worth keeping cached; then the committed store settled against
//! them ([`settle`]).

use crate::bundle::BundledCell;
use crate::cache::{Cache, Entry};
use crate::compile::{self, CellCrate};
use crate::config::Config;
use crate::context::Context;
use crate::error::{BundleError, Error};
use crate::execute::{self, Job};
use crate::lines::LineMap;
use crate::outcome::{FailureKind, Outcome, Stored};
use crate::plan::{Plan, PlannedCell};
use crate::quick::{self, RustcCall};
use crate::store::{self, Store, StoreAccess, StoreMode, StoreOutcome};
use crate::types::{Compilation, Document, Source};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod settle;

/// Each run cell's outcome and how long it ran, by module.
pub(crate) type Ran = HashMap<String, (Stored, Duration)>;

/// The cell crate, compiled.
pub(crate) struct Build {
    krate: CellCrate,
    /// The cells' binary, unless the crate as a whole failed.
    binary: Option<PathBuf>,
    /// Each cell that did not compile, by module, with why.
    failures: HashMap<String, Stored>,
    /// The compile errors found in what a chapter's cells share (parameters, prelude), by
    /// chapter: each one's chapter line and text.
    pub(crate) prelude_errors: HashMap<usize, Vec<(usize, String)>>,
    /// What was compiled.
    pub(crate) compiled: Compilation,
    /// How long compiling took.
    pub(crate) compile_time: Duration,
}

/// A cell's outcome before it is shown: what it came to and from where.
pub(crate) struct Got {
    pub(crate) stored: Stored,
    pub(crate) source: Source,
}

/// What the build got: each cell's outcome by module (none for a cell it did not compile or
/// run: a prelude, a GPU cell shown frozen, a bundled one), and the errors in shared code.
pub(crate) struct Built {
    pub(crate) got: HashMap<String, Got>,
    /// What the build found or did in the output store.
    pub(crate) store: StoreOutcome,
    /// The compile errors found in each chapter's shared code: chapter line and text.
    pub(crate) prelude_errors: HashMap<usize, Vec<(usize, String)>>,
    pub(crate) stats: BuildStats,
}

/// What the build did, for the report.
#[derive(Default)]
pub(crate) struct BuildStats {
    /// Cells taken from this machine's cache.
    pub(crate) cached: usize,
    /// Cells served from the committed store.
    pub(crate) stored: usize,
    /// Cells run.
    pub(crate) ran: usize,
    /// Cells this build ran or took from the cache or the store.
    pub(crate) cells_run_or_cached: usize,
    /// What was compiled.
    pub(crate) compiled: Compilation,
    /// Compiling it.
    pub(crate) compile_time: Duration,
    /// Running the cells.
    pub(crate) run_time: Duration,
    /// The modules of the cells that do not compile (now or in the build that cached it).
    pub(crate) compile_failed: HashSet<String>,
}

/// Stage 2: outputs are taken from this machine's cache, else from the committed store; the
/// rest compiled and run (GPU cells bundled instead, when bundling), outcomes worth keeping
/// cached; cache entries no planned cell has are dropped. Verifying, nothing is taken: every
/// cell runs and the store is held to it. Refreshing, the store is rewritten last.
pub(crate) fn build(ctx: &Context<'_>, docs: &[Document], plan: &Plan) -> Result<Built, Error> {
    let (root, config, gpu) = (ctx.root, ctx.config, &ctx.gpu);
    let cache_dir = ctx.cache_dir();
    let cache_error = |source| Error::Cache {
        path: cache_dir.clone(),
        source,
    };
    let cache = Cache::open(&cache_dir).map_err(cache_error)?;
    let mode = config.store_mode.unwrap_or_default();
    // The store holds CPU builds' outputs: a build that compiles GPU cells keys every cell
    // with their dependencies too, so it can find nothing there, and may not write it.
    if mode != StoreMode::Serve && config.store_dir.is_some() && gpu.compiled() {
        return Err(Error::Config(format!(
            "the output store is verified or refreshed by CPU builds: this build compiles GPU \
             cells ({gpu:?}); run it without MDBOOK_CELLS_STORE, then the store's build alone"
        )));
    }
    let store_dir = config.store_dir.as_ref().filter(|_| !gpu.compiled());
    let mut store = StoreAccess::new(root, store_dir, mode);
    let mut got: HashMap<String, Got> = HashMap::new();
    let (mut misses, mut bundled) = (Vec::new(), Vec::new());
    let mut stats = BuildStats::default();
    for f in &plan.cells {
        let Some(key) = &f.key else { continue };
        if gpu.bundles(f.freeze.as_ref()) {
            bundled.push(f);
            continue;
        }
        if mode == StoreMode::Verify && store_dir.is_some() {
            misses.push(f);
            continue;
        }
        let varies = plan.block(f).options.varies.is_some();
        match ready(key, varies, &cache, &mut store).map_err(cache_error)? {
            Some(ready) => {
                match ready.source {
                    Source::Stored { .. } => stats.stored += 1,
                    _ => stats.cached += 1,
                }
                got.insert(f.module.clone(), ready);
            }
            None => misses.push(f),
        }
    }
    stats.cells_run_or_cached = got.len() + misses.len();
    let mut prelude_errors = HashMap::new();
    if !misses.is_empty() || !bundled.is_empty() {
        let cached_compile_failure = |f: &PlannedCell| {
            got.get(&f.module)
                .is_some_and(|g| g.stored.outcome.failure() == Some(FailureKind::Compile))
        };
        let wanted: Vec<&PlannedCell> = misses.iter().chain(&bundled).copied().collect();
        let build = compile(ctx, docs, plan, cached_compile_failure, &wanted)?;
        let runs = Runs {
            config,
            docs,
            plan,
            store: store.get(),
        };
        let (jobs, to_bundle) = jobs(ctx, &runs, &build, &wanted, &mut got)?;
        gpu.write_bundle(
            root,
            config.output_limit,
            build.binary(),
            &build.line_maps_of(&to_bundle),
            to_bundle,
        )?;
        let (outcomes, took) = build.run(ctx, &jobs)?;
        stats.ran = outcomes.len();
        for (module, (stored, elapsed)) in outcomes {
            let source = Source::Ran(elapsed);
            got.insert(module, Got { stored, source });
        }
        keep_in_cache(&cache, plan, &misses, &got).map_err(cache_error)?;
        prelude_errors = build.prelude_errors;
        (stats.compiled, stats.compile_time, stats.run_time) =
            (build.compiled, build.compile_time, took);
    }
    let live: HashSet<String> = plan.cells.iter().filter_map(|f| f.key.clone()).collect();
    cache.retain(&live).map_err(cache_error)?;
    stats.compile_failed = (got.iter())
        .filter(|(_, g)| g.stored.outcome.failure() == Some(FailureKind::Compile))
        .map(|(module, _)| module.clone())
        .collect();
    let store = settle::settle_store(root, docs, plan, &got, store)?;
    show_panic_locations(docs, plan, &mut got);
    Ok(Built {
        got,
        prelude_errors,
        stats,
        store,
    })
}

/// A kept panic names its place relative to its cell (so that prose moving the cell leaves the
/// output current); the reader sees it on the chapter's line where the cell is now.
fn show_panic_locations(docs: &[Document], plan: &Plan, got: &mut HashMap<String, Got>) {
    let panicked = |f: &PlannedCell| {
        got.get(&f.module)
            .is_some_and(|g| g.stored.outcome.failure() == Some(FailureKind::Panic))
    };
    for cell in plan.cell_sources(docs, panicked) {
        let (_, map) = compile::module_text(&cell);
        if let Some(Got {
            stored:
                Stored {
                    outcome: Outcome::Failed { message, .. },
                    ..
                },
            ..
        }) = got.get_mut(&cell.module)
        {
            *message = map.resolve_panic_location(message);
        }
    }
}

/// An output computed earlier under `key`: from this machine's cache, else from the store
/// (then copied to the cache, so that the next build need not read the store). Refreshing, a
/// `varies` cell asks the store first: its entry stays as it is while it is current, however
/// its last run here came out (any other cell's cached output is this machine's latest run,
/// which a refresh is for).
fn ready(
    key: &str,
    varies: bool,
    cache: &Cache,
    store: &mut StoreAccess<'_>,
) -> std::io::Result<Option<Got>> {
    let store_first = varies && store.mode == StoreMode::Refresh;
    if let (false, Some(entry)) = (store_first, cache.get(key)) {
        return Ok(Some(cached(entry)));
    }
    if let Some(got) = stored(key, cache, store)? {
        return Ok(Some(got));
    }
    Ok(cache.get(key).map(cached))
}

fn cached(entry: Entry) -> Got {
    let source = Source::Cached {
        ran: entry.ran_ms.map(Duration::from_millis),
        computed: entry.computed,
    };
    Got {
        stored: entry.stored,
        source,
    }
}

/// The store's output under `key`, copied to this machine's cache.
fn stored(key: &str, cache: &Cache, store: &mut StoreAccess<'_>) -> std::io::Result<Option<Got>> {
    let Some(entry) = store.get().and_then(|s| s.get(key)) else {
        return Ok(None);
    };
    let cached = Entry {
        stored: entry.stored.clone(),
        ran_ms: Some(entry.ran_ms),
        computed: Some(entry.computed.clone()),
    };
    cache.put(key, &cached)?;
    let source = Source::Stored {
        ran: entry.ran(),
        computed: entry.computed.clone(),
    };
    Ok(Some(Got {
        stored: cached.stored,
        source,
    }))
}

/// What the cells to run are, and what their timeouts rest on.
struct Runs<'a> {
    config: &'a Config,
    docs: &'a [Document],
    plan: &'a Plan,
    store: Option<&'a Store>,
}

impl Runs<'_> {
    /// The seconds a cell is given: its own (`//| timeout`) or the book's.
    fn given(&self, f: &PlannedCell) -> u64 {
        self.plan
            .block(f)
            .options
            .timeout
            .unwrap_or(self.config.timeout)
    }

    /// The cell's timeout: the seconds it is given, or [`store::TIMEOUT_MARGIN`] times the run
    /// that computed its stored output, whichever is longer.
    fn timeout(&self, f: &PlannedCell) -> Duration {
        let ran = (self.store.zip(f.key.as_ref()))
            .and_then(|(s, key)| s.ran(key, &self.docs[f.doc].source, &f.store_name));
        store::timeout(Duration::from_secs(self.given(f)), ran)
    }
}

/// The compiled cells of `wanted` to run, and the GPU cells to bundle; a cell that did not
/// compile gets its failure in `got` instead.
fn jobs(
    ctx: &Context<'_>,
    runs: &Runs<'_>,
    build: &Build,
    wanted: &[&PlannedCell],
    got: &mut HashMap<String, Got>,
) -> Result<(Vec<Job>, Vec<BundledCell>), Error> {
    let (mut jobs, mut to_bundle) = (Vec::new(), Vec::new());
    for f in wanted {
        if let Some(failure) = build.failure(f) {
            let (stored, source) = (failure.clone(), Source::Compiled);
            got.insert(f.module.clone(), Got { stored, source });
            continue;
        }
        match &f.freeze {
            Some(at) if ctx.gpu.bundles(Some(at)) => {
                let Ok(freeze) = at.path.strip_prefix(ctx.root) else {
                    return Err(BundleError::FreezeOutside(at.path.clone()).into());
                };
                to_bundle.push(BundledCell {
                    module: f.module.clone(),
                    chapter: runs.docs[f.doc].source.clone(),
                    line: runs.plan.block(f).fence_line,
                    // A GPU run has no stored time to rest on: the cell's own timeout.
                    timeout_s: runs.given(f),
                    freeze: freeze.to_path_buf(),
                    source: at.source.clone(),
                });
            }
            _ => jobs.push(Job {
                module: f.module.clone(),
                timeout: runs.timeout(f),
            }),
        }
    }
    Ok((jobs, to_bundle))
}

/// Keeps what is worth keeping: outputs, and the failures that are a cell's content (an
/// expected failure that would happen again).
fn keep_in_cache(
    cache: &Cache,
    plan: &Plan,
    misses: &[&PlannedCell],
    got: &HashMap<String, Got>,
) -> std::io::Result<()> {
    for f in misses {
        let (Some(key), Some(got)) = (&f.key, got.get(&f.module)) else {
            continue;
        };
        if settle::worth_keeping(plan, f, &got.stored) {
            let ran = match got.source {
                Source::Ran(t) => t,
                _ => Duration::ZERO,
            };
            cache.put(key, &Entry::new(got.stored.clone(), ran))?;
        }
    }
    Ok(())
}

/// Compiles every runnable cell of the book as one crate (so its module set is stable between
/// builds), except those whose cached outcome is a compile failure (they would fail again).
/// `wanted` are the cells this build needs an outcome for: their compile errors are read.
/// When the build compiles GPU cells, their dependencies are in the crate.
pub(crate) fn compile(
    ctx: &Context<'_>,
    docs: &[Document],
    plan: &Plan,
    cached_compile_failure: impl Fn(&PlannedCell) -> bool,
    wanted: &[&PlannedCell],
) -> Result<Build, Error> {
    let started = Instant::now();
    let cache_dir = ctx.cache_dir();
    let recording = cache_dir.join("quick.json");
    // A few cells of a build that neither lints the crate nor bundles GPU cells: compiled
    // alone, if the last full build left its rustc call for these dependencies.
    let quick = (ctx.config.lint != Some(true)
        && !ctx.gpu.compiled()
        && wanted.len() <= quick::MOST_CELLS)
        .then(|| RustcCall::load(&recording, &plan.environment))
        .flatten()
        .and_then(|call| {
            let sources = plan.cell_sources(docs, |f| wanted.iter().any(|w| w.module == f.module));
            let dir = cache_dir.join("quick");
            let krate = CellCrate::write_sources(&dir, &cache_dir.join("target"), &sources).ok()?;
            let compiled = krate.compile(Some(&call));
            // Anything the cells are not to blame for (a dependency cleaned away): the full
            // build decides.
            compiled.global.is_none().then_some((krate, compiled))
        });
    let (krate, compiled, what) = match quick {
        Some((krate, compiled)) => {
            let alone = krate.line_maps().len();
            (krate, compiled, Compilation::Alone(alone))
        }
        None => {
            let sources = plan.cell_sources(docs, |f| !cached_compile_failure(f));
            let krate = CellCrate::write(ctx, &sources)?;
            let compiled = krate.compile(None);
            if compiled.binary.is_some()
                && let Some(call) = RustcCall::recorded(&cache_dir.join("crate"), &plan.environment)
            {
                // Only a speed-up: a build that cannot keep it compiles in full next time.
                let _ = call.save(&recording);
            }
            (krate, compiled, Compilation::Crate)
        }
    };
    let compile_time = started.elapsed();

    let mut failures = HashMap::new();
    let mut prelude_errors = HashMap::new();
    for f in wanted {
        let failure = if let Some(global) = &compiled.global {
            Outcome::failed(FailureKind::Build, global.clone())
        } else if let Some(diags) = compiled.errors.get(&f.module) {
            let (in_prelude, in_cell): (Vec<_>, Vec<_>) = diags.iter().partition(|d| d.in_prelude);
            if !in_prelude.is_empty() {
                let errors = in_prelude.iter().map(|d| (d.line, d.rendered.clone()));
                prelude_errors.insert(f.doc, errors.collect());
            }
            let text: Vec<&str> = if in_cell.is_empty() {
                vec![
                    "this chapter's shared code did not compile (its error is shown on its prelude or parameters cell)",
                ]
            } else {
                in_cell.iter().map(|d| d.rendered.as_str()).collect()
            };
            Outcome::failed(FailureKind::Compile, text.join("\n\n"))
        } else {
            continue;
        };
        failures.insert(f.module.clone(), Stored::of(failure));
    }
    Ok(Build {
        krate,
        binary: compiled.binary,
        failures,
        prelude_errors,
        compiled: what,
        compile_time,
    })
}

impl Build {
    /// Why `cell` did not compile, if it did not.
    pub(crate) fn failure(&self, cell: &PlannedCell) -> Option<&Stored> {
        self.failures.get(&cell.module)
    }

    /// The compiled cells' binary.
    pub(crate) fn binary(&self) -> Option<&Path> {
        self.binary.as_deref()
    }

    /// Where the lines of `modules` came from, to place a panic in its chapter.
    fn line_maps<'a>(&self, modules: impl Iterator<Item = &'a str>) -> BTreeMap<String, LineMap> {
        modules
            .filter_map(|m| Some((m.to_string(), self.krate.line_maps().get(m)?.clone())))
            .collect()
    }

    /// Where the lines of the cells to bundle came from.
    fn line_maps_of(&self, cells: &[BundledCell]) -> BTreeMap<String, LineMap> {
        self.line_maps(cells.iter().map(|c| c.module.as_str()))
    }

    /// Runs `jobs` (cells that compiled) from the book's root: each one's outcome and how long
    /// it ran, by module, and how long they all took.
    pub(crate) fn run(
        &self,
        ctx: &Context<'_>,
        jobs: &[execute::Job],
    ) -> Result<(Ran, Duration), Error> {
        let (Some(binary), false) = (&self.binary, jobs.is_empty()) else {
            return Ok((HashMap::new(), Duration::ZERO));
        };
        let started = Instant::now();
        let results = ctx.cache_dir().join("results");
        let ran = execute::run_all(binary, ctx.root, &results, jobs, ctx.config.output_limit)
            .map_err(Error::Run)?;
        let outcomes = ran
            .into_iter()
            .map(|(module, ran)| {
                let elapsed = ran.elapsed;
                let stored = ran.into_stored(|m| self.krate.keep_panic_location(m));
                (module, (stored, elapsed))
            })
            .collect();
        Ok((outcomes, started.elapsed()))
    }
}
