//! *Will my model fit?*: the plumbing around the classifier the page defines (the card, the
//! plan, a dry run's figure and tables, a batch search's answer), the decoder held out against
//! its H200 runs, and a model the GPU never ran, predicted from the card's autotune atlas alone
//! (its own problems taken out), held to what the H200 measured when it did run it.
//! *Apply it to your job*: a model file of `repro/models` trained dry as `highwater fit` trains
//! it ([`Job`]), where it dies, what it holds by phase, the largest batch that fits.

use std::path::Path;
use std::sync::Arc;

use burn::backend::Autodiff;
use cell_output::{CellError, Figure, Html, Markdown, Table};
use dryrun::{Atlas, CardProfile, OnRefusal, TieBreak};
use highwater::RunReport;
use highwater::conform::{MeasuredStep, NetworkRecord};
use highwater::network::{Arch, Network};
use highwater::recipe::{Checkpointing, written_name};
use situ::band::{Agreement, Band, BandCheck, ColdBand, dry_band, replay_band, replay_cold};
use situ::dry::{BatchSearch, DryCube, DryOutcome, DryPlan, dry_network, largest_batch};

use crate::load::{Book, H200_ATLAS, H200_AUTOTUNE, MODELS, SWEEP};
use crate::{bytes, series};

/// burn-cubecl's CubeBackend on the dry runtime: its figures are the same on every run
/// (burn-fusion's bytes reserved are not; see the transformer on the page).
/// `Autodiff<DryFusion>` is burn-cuda's default.
pub type Dry = Autodiff<DryCube>;

/// The GPU's autotune cache, as the cells find it (from the book's root): the kernels the H200
/// picked, so that a dry run's kernels are the GPU's.
pub fn h200_autotune() -> Option<&'static Path> {
    Some(Path::new(H200_AUTOTUNE))
}

/// The H200's chip with 16 GiB of memory: the card every question on the page is asked about.
pub fn card_16gib(book: &Book) -> Result<Arc<CardProfile>, CellError> {
    Ok(Arc::new(book.h200()?.with_memory(16 << 30)))
}

/// Five steps (a pool settles by its third), pages refused where the card would refuse them.
pub fn dry_plan(card: &CardProfile) -> DryPlan {
    DryPlan {
        steps: 5,
        seed: 1,
        capacity: card.free_at_start,
        on_refusal: OnRefusal::Refuse,
        log_every: 5,
        tie_break: TieBreak::First,
    }
}

/// Bytes reserved and peak bytes in use per step, against what the card leaves the pools.
pub fn steps_chart(title: &str, capacity: u64, runs: &[(&str, &RunReport)]) -> Figure {
    let series = runs
        .iter()
        .flat_map(|(label, run)| series::reserved_and_peak(label, run))
        .collect();
    series::chart(title, capacity, series)
}

/// A dry run step by step: bytes in use after forward and after backward, the peak, bytes
/// reserved and the pages held.
pub fn steps_table(r: &RunReport) -> Table {
    let mut t = Table::new([
        "step",
        "in use after forward",
        "after backward",
        "peak in use",
        "reserved",
        "pages",
    ]);
    for i in 0..r.reserved.len() {
        t = t.row([
            (i + 1).to_string(),
            bytes::show(r.in_use_after_forward[i]),
            bytes::show(r.in_use_after_backward[i]),
            bytes::show(r.peak_in_use[i]),
            bytes::show(r.reserved[i]),
            r.pages[i].to_string(),
        ]);
    }
    t
}

/// A batch search's answer, in three lines: the largest batch that fits and what it reserves,
/// where the next one dies, and every batch tried.
pub fn search_table(search: &BatchSearch) -> Table {
    let mut t = Table::new(["", "batch", "what happens"]);
    if let Some((batch, o)) = &search.largest {
        let reserved = o.steps.iter().map(|s| s.reserved).max().unwrap_or(0);
        t = t.row([
            "largest that fits".to_string(),
            batch.to_string(),
            format!("at most {} reserved", bytes::show(reserved)),
        ]);
    }
    if let Some((batch, o)) = &search.smallest_failing {
        let d = o.died.as_ref().expect("a failing batch died");
        let page = d
            .failed_pages
            .first()
            .map_or("–".to_string(), |&p| bytes::show(p));
        t = t.row([
            "the next one".to_string(),
            batch.to_string(),
            format!(
                "dies in step {}, {}: a page of {page} refused",
                d.step,
                written_name(&d.phase)
            ),
        ]);
    }
    let tried: Vec<String> = search
        .tried
        .iter()
        .map(|(b, fits)| format!("{b}{}", if *fits { "" } else { "✗" }))
        .collect();
    t.row([
        "batches tried (✗ died)".to_string(),
        search.tried.len().to_string(),
        tried.join(" "),
    ])
}

/// Held out: the decoder, which nobody fitted, replayed dry against its three H200 runs on each
/// backend: figures differing, the largest difference, bytes reserved at the last step. Asserts
/// what the text says: steps and fate match, CubeBackend to the byte, live bytes to the byte on
/// both backends.
pub fn decoder_held_out(book: &Book) -> Result<Table, CellError> {
    let h200 = Arc::new(book.h200()?);
    let mut t = Table::new([
        "backend",
        "GPU runs (spread)",
        "live bytes differing",
        "bytes reserved differing",
        "largest difference",
        "reserved, last step: GPU / dry",
    ]);
    let mut live_exact = 0;
    for backend in ["cube", "fusion"] {
        let (row, live) = decoder_replayed(book, &h200, backend)?;
        live_exact += usize::from(live == 0);
        t = t.row(row);
    }
    assert_eq!(
        live_exact, 2,
        "the text: live bytes to the byte on both backends"
    );
    Ok(t)
}

/// One backend's row of [`decoder_held_out`], and how many of its figures of bytes in use
/// differ from the GPU's.
fn decoder_replayed(
    book: &Book,
    h200: &Arc<CardProfile>,
    backend: &str,
) -> Result<([String; 6], usize), CellError> {
    let (record, repeats) =
        book.network_with_repeats(&format!("decoder-decoder-{backend}-none-b16"))?;
    let autotune = book.h200_autotune();
    let (outcome, e) = situ::dry::replay_network(&record, &repeats, h200.clone(), Some(&autotune))?;
    let reserved = e
        .differences
        .iter()
        .filter(|d| d.figure == "reserved")
        .count();
    let live = e.differences.len() - reserved;
    assert!(
        e.passes_except(&["reserved".to_string()]),
        "the text: steps and fate match"
    );
    if backend == "cube" {
        assert!(
            e.differences.is_empty(),
            "the text: CubeBackend to the byte"
        );
    }
    let worst = e
        .differences
        .iter()
        .map(|d| d.bytes())
        .max_by_key(|b| b.unsigned_abs())
        .unwrap_or(0);
    let last = |steps: &[MeasuredStep]| {
        Ok::<_, &str>(bytes::show(steps.last().ok_or("no step")?.reserved))
    };
    let row = [
        backend.to_string(),
        format!("{} ({} B)", e.gpu_runs, e.gpu_spread),
        format!("{live} of {}", 2 * e.steps_compared()),
        format!("{reserved} of {}", e.steps_compared()),
        bytes::signed(worst),
        format!("{} / {}", last(&record.steps)?, last(&outcome.steps)?),
    ];
    Ok((row, live))
}

/// The known difference between the decoder's burn-fusion replay and the GPU
/// (`repro/results/conform-dry-known.toml`), folded: the measurements behind the page's
/// sentence, as committed beside the record, its backquotes as code. Asserts what the text
/// says: bytes reserved only, known below four cores.
pub fn decoder_known_dry(book: &Book) -> Result<Html, CellError> {
    let path = "repro/results/conform-dry-known.toml";
    let known = highwater::conform::parse_known_dry(path, &book.read(path)?)?;
    let k = known
        .iter()
        .find(|k| k.run == "decoder-decoder-fusion-none-b16")
        .ok_or("the decoder's entry")?;
    assert_eq!(k.figures, ["reserved"], "the text: bytes reserved only");
    assert_eq!(k.below_cores, Some(4), "the text: known below four cores");
    let escaped = k
        .reason
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let text: String = escaped
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect();
    Ok(Html(format!(
        "<details><summary>What was measured ({path})</summary><p>{text}</p></details>"
    )))
}

/// A model file trained dry on a card as `highwater fit MODEL --card SIZE --steps 2` trains it:
/// the H200's chip with that memory, kernels from the H200's atlas (a problem it lacks given
/// the kernel that won the nearest one: the band's prediction), pages refused where the card
/// would refuse them.
pub struct Job {
    /// The model file as written.
    pub network: Network,
    /// The card.
    pub card: Arc<CardProfile>,
    atlas: Atlas,
}

impl Book {
    /// `repro/models/MODEL.toml` on the H200's chip with `card_bytes` of memory.
    pub fn job(&self, model: &str, card_bytes: u64) -> Result<Job, CellError> {
        let path = format!("repro/models/{model}.toml");
        let network = Network::parse(&path, &self.read(&path)?)?;
        Ok(Job {
            network,
            card: Arc::new(self.h200()?.with_memory(card_bytes)),
            atlas: Atlas::read(&self.path(H200_ATLAS))?,
        })
    }
}

impl Job {
    /// Steps per run: every bundled model's pools hold at their second step what they hold
    /// at their fifth (the CLI's tests and *Will my model fit?* show the steps).
    pub const STEPS: u64 = 2;

    /// What the pools may take: the card's memory less the chip's CUDA context.
    pub fn capacity(&self) -> u64 {
        self.card.free_at_start
    }

    /// The job at another batch and checkpointing.
    pub fn at(&self, batch: u64, checkpointing: Checkpointing) -> Result<Network, CellError> {
        let mut network = self.network.with_batch(batch)?;
        network.checkpointing = checkpointing;
        Ok(network)
    }

    /// `network` trained dry: `fit`'s prediction. With [`OnRefusal::Grant`] a page the card
    /// would refuse is granted, so that the run says what it needs; its `died` still says
    /// where the card would have stopped it.
    pub fn run(&self, network: &Network, on_refusal: OnRefusal) -> Result<DryOutcome, CellError> {
        let plan = DryPlan {
            steps: Self::STEPS,
            seed: 1,
            capacity: self.capacity(),
            on_refusal,
            log_every: Self::STEPS,
            tie_break: TieBreak::First,
        };
        let band = dry_band(&plan, &self.atlas, |p, dir| {
            dry_network(network, p, self.card.clone(), dir)
        })?;
        Ok(band.predicted)
    }

    /// The largest batch that fits under `checkpointing` (`fit --largest-batch`, at the
    /// prediction), searched up to `limit`.
    pub fn largest_batch(
        &self,
        checkpointing: Checkpointing,
        limit: u64,
    ) -> Result<BatchSearch, CellError> {
        largest_batch(limit, |batch| {
            self.run(&self.at(batch, checkpointing)?, OnRefusal::Refuse)
        })
    }
}

/// Where a run of `network` died, as the question a reader asks of a log and the dry run's
/// answer: the step and phase, the reservation the card refused a page for (as a shape, where
/// it divides into the step's positions of 4-byte elements), what the pools held, burn's error.
pub fn death(network: &Network, outcome: &DryOutcome) -> Result<Table, CellError> {
    let d = outcome.died.as_ref().ok_or("the run did not die")?;
    let first = outcome
        .refused
        .iter()
        .find(|r| r.step == d.step)
        .ok_or("the death refused no page")?;
    let oom = &first.out_of_memory;
    let error = d.message.lines().next().unwrap_or_default();
    let error = match error.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &error[..at]),
        None => error.to_string(),
    };
    let positions = network.tokens() * 4;
    let shape = match (oom.requested % positions, &network.arch) {
        (0, Arch::Decoder(s) | Arch::Encoder(s)) => format!(
            "[{}, {}, {}] × 4 bytes",
            network.batch,
            s.seq_len,
            oom.requested / positions
        ),
        _ => "–".into(),
    };
    Ok(Table::new(["", "the dry run"])
        .row(["died in step", &d.step.to_string()])
        .row(["phase", written_name(&d.phase).as_str()])
        .row([
            "the reservation that needed a page",
            &bytes::exact(oom.requested),
        ])
        .row(["… as a shape", &shape])
        .row(["the page the card refused", &bytes::show(oom.page)])
        .row([
            "the pools held",
            &format!(
                "{} of the {} they may take",
                bytes::show(oom.allocated),
                bytes::show(oom.capacity)
            ),
        ])
        .row(["burn's error", &format!("`{error}`")]))
}

/// Per run and step: bytes in use after forward and after backward, the peak, bytes reserved
/// and how far that is over what the pools may take (runs given as label and outcome).
pub fn by_phase(capacity: u64, runs: &[(String, DryOutcome)]) -> Table {
    let mut t = Table::new([
        "run",
        "step",
        "in use after forward",
        "after backward",
        "peak in use",
        "reserved",
        "over the card by",
    ]);
    for (label, o) in runs {
        for (i, s) in o.steps.iter().enumerate() {
            let over = s.reserved.saturating_sub(capacity);
            t.push([
                label.clone(),
                (i + 1).to_string(),
                bytes::show(s.in_use_after_forward),
                bytes::show(s.in_use_after_backward),
                bytes::show(o.peak_in_use[i]),
                bytes::show(s.reserved),
                if over == 0 {
                    "–".into()
                } else {
                    bytes::show(over)
                },
            ]);
        }
    }
    t
}

/// The tensors of a transformer (`[decoder]` or `[encoder]`) whose bytes grow with the batch,
/// per sequence, and those that do not: shapes times four bytes (f32), whatever the framework.
pub fn transformer_tensors(network: &Network) -> Result<Table, CellError> {
    let (Arch::Decoder(s) | Arch::Encoder(s)) = &network.arch else {
        return Err(format!("{} is not a transformer", network.arch.family()).into());
    };
    let f = network.precision.bytes();
    let b = network.batch;
    let mut t = Table::new([
        "tensor",
        "shape",
        "per sequence",
        "at the batch",
        "how many",
    ]);
    let mut row = |name: &str, shape: String, per: u64, how: String| {
        t.push([
            name.to_string(),
            shape,
            bytes::show(per),
            bytes::show(per * b),
            how,
        ]);
    };
    row(
        "logits (and their gradient)",
        format!("[{}, {}]", s.seq_len, s.vocab),
        s.seq_len * s.vocab * f,
        "one per step, a few copies through the loss".into(),
    );
    row(
        "attention scores",
        format!("[{}, {}, {}]", s.n_heads, s.seq_len, s.seq_len),
        s.n_heads * s.seq_len * s.seq_len * f,
        format!("per layer ({}), kept for backward", s.n_layers),
    );
    row(
        "MLP hidden",
        format!("[{}, {}]", s.seq_len, s.d_ff),
        s.seq_len * s.d_ff * f,
        format!("per layer ({}), kept for backward", s.n_layers),
    );
    let params = network.arch.params();
    t.push([
        "weights, gradients, Adam's two moments".to_string(),
        format!("4 × {params} parameters"),
        "–".to_string(),
        bytes::show(4 * params * f),
        "Adam's moments created at the first optimizer step".to_string(),
    ]);
    Ok(t)
}

/// A search's answer in one row: the largest batch that fits, what it reserves, where the next
/// one dies.
pub fn search_row(label: &str, capacity: u64, search: &BatchSearch) -> [String; 4] {
    let (largest, reserved) = match &search.largest {
        Some((batch, o)) => {
            let r = o.steps.iter().map(|s| s.reserved).max().unwrap_or(0);
            (
                batch.to_string(),
                format!("{} ({} spare)", bytes::show(r), bytes::show(capacity - r)),
            )
        }
        None => ("none".into(), "–".into()),
    };
    let next = match &search.smallest_failing {
        Some((batch, o)) => match &o.died {
            Some(d) => format!(
                "{batch} dies in step {} ({})",
                d.step,
                written_name(&d.phase)
            ),
            None => format!("{batch} dies"),
        },
        None => "every batch tried fits".into(),
    };
    [label.to_string(), largest, reserved, next]
}

/// One recorded model predicted from the atlas less its own problems, warm and cold.
pub struct FromAtlas {
    /// The first warm run on the H200 (its cache filled by the cold run).
    pub warm: NetworkRecord,
    /// Its first run on the H200, from an empty autotune cache.
    pub cold: NetworkRecord,
    /// The problems the model's cold run tuned on the GPU: what the atlas was stripped of.
    pub own: Atlas,
    /// The warm prediction with its band.
    pub band: Band,
    /// The prediction against the warm runs.
    pub check: BandCheck,
    /// The miss policy's picks against the GPU's.
    pub agreement: Agreement,
    /// The first run predicted dry (every candidate tuned in the pool).
    pub cold_band: ColdBand,
    /// The steps whose GPU figure for the first run lies outside its band: step, GPU, least,
    /// most.
    pub cold_outside: Vec<situ::band::Outside>,
}

impl Book {
    /// `repro/results/models/NAME.json` (with its repeats and its cold run) predicted dry from
    /// the H200's atlas less the problems its own cold run tuned.
    pub fn from_atlas(&self, name: &str) -> Result<FromAtlas, CellError> {
        let (warm, repeats) = self.with_repeats_in::<NetworkRecord>(MODELS, name)?;
        let cold: NetworkRecord = self.json(format!("{MODELS}/cold/{name}.json"))?;
        let own_dir = format!("{MODELS}/autotune/{}", warm.network()?.cache_name());
        let own = Atlas::read(&self.path(own_dir))?;
        let atlas = Atlas::read(&self.path(H200_ATLAS))?.without(&own);
        let card = self.h200_card()?;
        let (band, check) = replay_band(&warm, &repeats, card.clone(), &atlas)?;
        let (cold_band, cold_outside) = replay_cold(&cold, check.reserved_tolerance, card)?;
        Ok(FromAtlas {
            agreement: band.agreement(&own),
            warm,
            cold,
            own,
            band,
            check,
            cold_band,
            cold_outside,
        })
    }
}

impl FromAtlas {
    /// The miss policy against the GPU, in a sentence: how many of the model's problems it
    /// decided, how often it named the GPU's kernel and how often one reserving the same bytes.
    /// Asserts what the text says: same bytes more often than same kernel.
    pub fn agreement_text(&self) -> Markdown {
        let a = self.agreement;
        assert!(
            a.same_bytes > a.same_kernel,
            "the text: same bytes more often than same kernel"
        );
        miss_policy_text(self.check.decided, self.own.entries.len(), a)
    }

    /// Per step: bytes in use (GPU, predicted), bytes reserved warm (GPU, predicted, band) and
    /// cold (GPU, band).
    pub fn table(&self) -> Table {
        let range = |(l, h): (Option<u64>, Option<u64>)| match (l, h) {
            (Some(l), Some(h)) => format!("{} … {}", bytes::show(l), bytes::show(h)),
            _ => "(died)".into(),
        };
        let warm = self.band.reserved();
        let cold = self.cold_band.reserved();
        let mut t = Table::new([
            "step",
            "in use after fwd: GPU / dry",
            "after bwd: GPU / dry",
            "reserved: GPU",
            "dry",
            "band",
            "first run: GPU",
            "band",
        ]);
        for (i, gpu) in self.warm.steps.iter().enumerate() {
            let Some(dry) = self.band.predicted.steps.get(i) else {
                break;
            };
            let pair = |g: u64, d: u64| {
                if g == d {
                    format!("{} (same)", bytes::show(g))
                } else {
                    format!("{} / {}", bytes::show(g), bytes::show(d))
                }
            };
            t.push([
                (i + 1).to_string(),
                pair(gpu.in_use_after_forward, dry.in_use_after_forward),
                pair(gpu.in_use_after_backward, dry.in_use_after_backward),
                bytes::show(gpu.reserved),
                bytes::show(dry.reserved),
                warm.get(i).map_or("–".into(), |&(l, _, h)| range((l, h))),
                self.cold
                    .steps
                    .get(i)
                    .map_or("–".into(), |s| bytes::show(s.reserved)),
                cold.get(i).map_or("–".into(), |&r| range(r)),
            ]);
        }
        t
    }
}

/// [`FromAtlas::agreement_text`] from its figures: `decided` of the model's `own` problems.
fn miss_policy_text(decided: usize, own: usize, a: Agreement) -> Markdown {
    // The atlas less the model's own problems was stripped of every one of them, so the miss
    // policy decides all (as `highwater conform --dry --band` does), unless the dry device could
    // not record some: the book's cells may not write a file over a mebibyte, and CubeCL drops,
    // with no error, the cache lines past that size in the device's copy of the atlas.
    let unrecorded = if decided < own {
        format!(
            " The command line decides all {own}: the book's cells may not write files over a \
             mebibyte, and CubeCL silently drops the cache lines of {} tuned problems past that \
             size in the dry device's copy of the atlas, so this build settles them by the run's \
             tie-break.",
            own - decided
        )
    } else {
        String::new()
    };
    Markdown(format!(
        "{decided} of its {own} problems were decided by the miss policy; it named the GPU's kernel \
         for {} and a kernel reserving the same bytes as the GPU's for {}.{unrecorded}",
        a.same_kernel, a.same_bytes
    ))
}

/// A model recorded in [`MODELS`]: its record's name and its own cache's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedModel {
    /// The record's file stem (`resnet-resnet-cube-none-b128`).
    pub name: String,
    /// Its cold run's cache, under `autotune/` (`resnet-f32`).
    pub own: String,
}

impl Book {
    /// Every model recorded in [`MODELS`], in name order.
    pub fn recorded_models(&self) -> Result<Vec<RecordedModel>, CellError> {
        let mut models = Vec::new();
        for path in self.files(MODELS, "json")? {
            let record: NetworkRecord = crate::load::json_at(&path)?;
            let network = record.network()?;
            models.push(RecordedModel {
                name: record.name(),
                own: network.cache_name(),
            });
        }
        Ok(models)
    }

    /// Each recorded model trained dry with only the committed cache of the wave and the
    /// decoder (`repro/cards/h200-autotune`), as a new user's model is: its last step's bytes
    /// reserved against the warm and the cold GPU runs, and how many problems were tuned dry.
    pub fn committed_cache_alone(&self) -> Result<Table, CellError> {
        let card = self.h200_card()?;
        let committed = self.h200_autotune();
        let mut t = Table::new([
            "model",
            "problems tuned dry",
            "reserved, last step: dry",
            "warm GPU",
            "dry − warm",
            "cold GPU",
        ]);
        for m in self.recorded_models()? {
            let (warm, repeats) = self.with_repeats_in::<NetworkRecord>(MODELS, &m.name)?;
            let cold: NetworkRecord = self.json(format!("{MODELS}/cold/{}.json", m.name))?;
            let (outcome, _) =
                situ::dry::replay_network(&warm, &repeats, card.clone(), Some(&committed))?;
            let last =
                |steps: &[highwater::conform::MeasuredStep]| steps.last().map_or(0, |s| s.reserved);
            let (dry, gpu) = (last(&outcome.steps), last(&warm.steps));
            t.push([
                m.name,
                outcome.autotune_misses.len().to_string(),
                bytes::show(dry),
                bytes::show(gpu),
                bytes::signed(dry as i64 - gpu as i64),
                bytes::show(last(&cold.steps)),
            ]);
        }
        Ok(t)
    }

    /// Per recorded model: its first run's bytes reserved at the last step over its warm run's.
    pub fn first_run_ratios(&self) -> Result<Vec<(String, f64)>, CellError> {
        let last = |r: &NetworkRecord| r.steps.last().map_or(0, |s| s.reserved) as f64;
        let mut ratios = Vec::new();
        for m in self.recorded_models()? {
            let warm: NetworkRecord = self.json(format!("{MODELS}/{}.json", m.name))?;
            let cold: NetworkRecord = self.json(format!("{MODELS}/cold/{}.json", m.name))?;
            ratios.push((m.name, last(&cold) / last(&warm)));
        }
        Ok(ratios)
    }

    /// The atlas's coverage of each recorded model (how many of the problems its cold run tuned
    /// the atlas's other sources hold) and the miss policy's accuracy, each problem left out.
    pub fn atlas_coverage(&self) -> Result<(Table, (usize, usize)), CellError> {
        let mut t = Table::new([
            "model",
            "problems it tuned",
            "held by the atlas's other sources",
        ]);
        let sources = self
            .atlas_sources()?
            .into_iter()
            .map(|dir| Ok((Atlas::read(&dir)?, dir)))
            .collect::<Result<Vec<_>, CellError>>()?;
        for m in self.recorded_models()? {
            let own_dir = self.path(format!("{MODELS}/autotune/{}", m.own));
            let own = Atlas::read(&own_dir)?;
            let others = Atlas::merge(
                sources
                    .iter()
                    .filter(|(_, dir)| *dir != own_dir)
                    .map(|(a, _)| a.clone()),
            );
            let held = own.entries.iter().filter(|e| others.holds(e)).count();
            t.push([
                m.name,
                own.entries.len().to_string(),
                format!("{held} of {}", own.entries.len()),
            ]);
        }
        let atlas = Atlas::read(&self.path(H200_ATLAS))?;
        Ok((t, atlas.leave_one_out().total()))
    }

    /// The card against itself: problems more than one of the atlas's sources tuned, and how
    /// many of them different kernels won ([`dryrun::atlas::retuned`]).
    pub fn atlas_retuned(&self) -> Result<dryrun::atlas::Retuned, CellError> {
        let sources = self
            .atlas_sources()?
            .iter()
            .map(|dir| Atlas::read(dir))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(dryrun::atlas::retuned(&sources))
    }

    /// The caches the H200's atlas merges (`scripts/regenerate-gpu`): the wave's and the
    /// decoder's, each recorded model's, each line of the sweep's.
    pub fn atlas_sources(&self) -> Result<Vec<std::path::PathBuf>, CellError> {
        let mut dirs = vec![self.h200_autotune()];
        for under in [format!("{MODELS}/autotune"), SWEEP.to_string()] {
            let mut found: Vec<_> = std::fs::read_dir(self.path(&under))
                .map_err(|e| CellError::from(format!("{under}: {e}")))?
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.is_dir())
                .collect();
            found.sort();
            dirs.extend(found);
        }
        Ok(dirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> Book {
        Book::at(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    /// *Apply it to your job*'s helpers on the encoder, small: a batch that fits a 16 GiB card
    /// and one that does not, the death's table, the phases, the transformer's tensors.
    #[test]
    fn a_job_dies_where_fit_says_and_its_tables_say_so() {
        let job = repo().job("encoder", 16 << 30).unwrap();
        let fits = job.run(&job.at(2, Checkpointing::None).unwrap(), OnRefusal::Refuse);
        let fits = fits.unwrap();
        assert!(fits.died.is_none());
        assert_eq!(fits.steps.len() as u64, Job::STEPS);
        let dies = job
            .run(&job.at(16, Checkpointing::None).unwrap(), OnRefusal::Refuse)
            .unwrap();
        let d = dies.died.as_ref().expect("batch 16 does not fit 16 GiB");
        assert_eq!(d.step, 1);
        let network = job.at(16, Checkpointing::None).unwrap();
        let death = death(&network, &dies).unwrap().to_html();
        assert!(death.contains("forward"), "{death}");
        // The logits, the vocabulary padded by the matmul's kernel.
        assert!(death.contains("[16, 512, 30592] × 4 bytes"), "{death}");
        assert!(death.contains("1 GiB"), "{death}");
        assert!(super::death(&network, &fits).is_err());
        let phases = by_phase(job.capacity(), &[("b2".into(), fits.clone())]);
        assert_eq!(phases.rows().len() as u64, Job::STEPS);
        let tensors = transformer_tensors(&job.at(16, Checkpointing::None).unwrap())
            .unwrap()
            .to_html();
        // The logits of 16 sequences of 512 tokens over 30 522 words, in f32.
        assert!(tensors.contains("[512, 30522]"), "{tensors}");
        assert!(
            tensors.contains(&bytes::show(16 * 512 * 30522 * 4)),
            "{tensors}"
        );
        let mlp = repo().job("mlp", 16 << 30).unwrap();
        assert!(transformer_tensors(&mlp.network).is_err());
    }

    #[test]
    fn every_recorded_model_has_its_cold_run_its_cache_and_a_place_in_the_atlas() {
        let book = repo();
        let models = book.recorded_models().unwrap();
        assert_eq!(models.len(), 6, "{models:?}");
        let sources = book.atlas_sources().unwrap();
        let atlas = Atlas::read(&book.path(H200_ATLAS)).unwrap();
        for m in &models {
            let own_dir = book.path(format!("{MODELS}/autotune/{}", m.own));
            assert!(
                sources.contains(&own_dir),
                "{} is not an atlas source",
                m.own
            );
            // The atlas merges its sources: every problem the model tuned is in it.
            let own = Atlas::read(&own_dir).unwrap();
            assert!(!own.entries.is_empty(), "{}", m.own);
            assert!(own.entries.iter().all(|e| atlas.holds(e)), "{}", m.own);
        }
        let ratios = book.first_run_ratios().unwrap();
        assert_eq!(ratios.len(), models.len());
        assert!(
            ratios.iter().all(|(_, r)| *r >= 0.99),
            "a first run reserves no less: {ratios:?}"
        );
    }

    /// The page's plumbing on two cheap dry runs of the encoder (a batch that fits, one that
    /// dies): the step table and the chart of a run, and a search's three-line answer.
    #[test]
    fn a_dry_run_and_a_search_read_as_the_page_shows_them() {
        use cell_output::CellValue;
        let book = repo();
        assert_eq!(card_16gib(&book).unwrap().total_bytes, 16 << 30);
        assert!(book.path(h200_autotune().unwrap()).is_dir());
        let job = book.job("encoder", 16 << 30).unwrap();
        let run = |batch| {
            job.run(
                &job.at(batch, Checkpointing::None).unwrap(),
                OnRefusal::Refuse,
            )
            .unwrap()
        };
        let (fits, dies) = (run(2), run(16));
        let plan = dry_plan(&job.card);
        assert_eq!((plan.steps, plan.capacity), (5, job.capacity()));
        let report = fits.report("encoder, batch 2", &plan);
        let steps = steps_table(&report);
        assert_eq!(steps.rows().len() as u64, Job::STEPS);
        assert_eq!(steps.rows()[1][5], report.pages[1].to_string());
        let svg = steps_chart("encoder", report.capacity, &[("batch 2", &report)]).into_output();
        assert!(svg.body().contains("<svg"), "{}", svg.body());
        // A search whose batches up to 4 fit and whose larger ones die as batch 16 does.
        let search = largest_batch(8, |b| {
            Ok::<_, CellError>(if b <= 4 { fits.clone() } else { dies.clone() })
        })
        .unwrap();
        let t = search_table(&search);
        let rows = t.rows();
        assert_eq!(rows[0][..2], ["largest that fits", "4"]);
        assert_eq!(rows[1][..2], ["the next one", "5"]);
        assert!(
            rows[1][2].starts_with("dies in step 1, forward: a page of "),
            "{rows:?}"
        );
        assert_eq!(rows[2][1..], ["6", "1 2 4 8✗ 6✗ 5✗"]);
    }

    /// The decoder held out, on CubeBackend (burn-fusion's replay is the slower one, and its
    /// bytes reserved vary on a small host): every figure the GPU's, as the page says.
    #[test]
    fn the_decoder_replays_to_the_byte_on_cubebackend() {
        let book = repo();
        let h200 = Arc::new(book.h200().unwrap());
        let (row, live) = decoder_replayed(&book, &h200, "cube").unwrap();
        assert_eq!(live, 0);
        assert_eq!(row[..5], ["cube", "3 (0 B)", "0 of 40", "0 of 20", "+0 B"]);
        assert_eq!(row[5], "16.4 GiB / 16.4 GiB");
    }

    #[test]
    fn the_decoders_known_difference_is_folded_with_its_code_marked() {
        let Html(html) = decoder_known_dry(&repo()).unwrap();
        assert!(html.starts_with(
            "<details><summary>What was measured (repro/results/conform-dry-known.toml)"
        ));
        assert!(
            html.contains("<code>PersistentPool::has_size</code>"),
            "{html}"
        );
        assert!(!html.contains('`'), "{html}");
    }

    #[test]
    fn the_miss_policy_sentence_says_when_the_build_decided_fewer() {
        let a = Agreement {
            known: 63,
            same_kernel: 33,
            same_bytes: 52,
        };
        let Markdown(all) = miss_policy_text(63, 63, a);
        assert_eq!(
            all,
            "63 of its 63 problems were decided by the miss policy; it named the GPU's kernel \
             for 33 and a kernel reserving the same bytes as the GPU's for 52."
        );
        let Markdown(fewer) = miss_policy_text(60, 63, a);
        assert!(fewer.contains("The command line decides all 63"), "{fewer}");
        assert!(fewer.contains("cache lines of 3 tuned problems"), "{fewer}");
    }
}
