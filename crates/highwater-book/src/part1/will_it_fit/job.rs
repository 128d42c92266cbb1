//! *Apply it to your job*: a model file of `repro/models` trained dry as `highwater fit`
//! trains it, where it dies, what it holds by phase, the largest batch that fits.

use std::sync::Arc;

use cell_output::{Markdown, Table};
use dryrun::{Atlas, CardProfile, OnRefusal, TieBreak};
use highwater::network::{Arch, Network};
use highwater::recipe::{Checkpointing, written_name};
use situ::band::dry_band;
use situ::dry::{BatchSearch, DryOutcome, DryPlan, dry_network, largest_batch};

use crate::BookError;
use crate::bytes;
use crate::load::{Book, H200_ATLAS};

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
    pub fn job(&self, model: &str, card_bytes: u64) -> Result<Job, BookError> {
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
    pub fn at(&self, batch: u64, checkpointing: Checkpointing) -> Result<Network, BookError> {
        let mut network = self.network.with_batch(batch)?;
        network.checkpointing = checkpointing;
        Ok(network)
    }

    /// `network` trained dry: `fit`'s prediction. With [`OnRefusal::Grant`] a page the card
    /// would refuse is granted, so that the run says what it needs; its `died` still says
    /// where the card would have stopped it.
    pub fn run(&self, network: &Network, on_refusal: OnRefusal) -> Result<DryOutcome, BookError> {
        let plan = DryPlan {
            steps: Self::STEPS,
            seed: 1,
            capacity: self.capacity(),
            on_refusal,
            log_every: Self::STEPS,
            tie_break: TieBreak::First,
            schedule: dryrun::Schedule::default(),
        };
        // The prediction alone: its schedule is the first.
        let prediction = &situ::band::schedules(network.backend)[..1];
        let band = dry_band(&plan, &self.atlas, prediction, |p, dir| {
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
    ) -> Result<BatchSearch, BookError> {
        largest_batch(limit, |batch| {
            self.run(&self.at(batch, checkpointing)?, OnRefusal::Refuse)
        })
    }
}

/// Where a run of `network` died, as the question a reader asks of a log and the dry run's
/// answer: the step and phase, the reservation the card refused a page for (as a shape, where
/// it divides into the step's positions of 4-byte elements), what the pools held, burn's error.
pub fn death(network: &Network, outcome: &DryOutcome) -> Result<Table, BookError> {
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

/// How *Apply it to your job* reads [`death`] with the method's first two steps, from the same
/// run: *when* (the step, which says the job never fitted) and *which tensor* (the refused
/// reservation, a row as wide as the vocabulary per position). It checks each claim: the run
/// died in its first step; the reservation, not the page, is the tensor; it divides into the
/// step's positions of 4-byte elements as the vocabulary padded by under 1 %; the death came out
/// of the matmul autotuner.
pub fn death_reading(network: &Network, outcome: &DryOutcome) -> Result<Markdown, BookError> {
    let d = outcome.died.as_ref().ok_or("the run did not die")?;
    if d.step != 1 {
        return Err(format!("the run died in step {}: it fitted once", d.step).into());
    }
    let first = outcome.refused.iter().find(|r| r.step == d.step);
    let oom = &first.ok_or("the death refused no page")?.out_of_memory;
    let (Arch::Decoder(s) | Arch::Encoder(s)) = &network.arch else {
        return Err(format!("{} has no vocabulary", network.arch.family()).into());
    };
    let element = network.precision.bytes();
    let positions = network.tokens() * element;
    let width = oom.requested / positions;
    let logits = oom.requested % positions == 0 && width >= s.vocab && width * 100 < s.vocab * 101;
    if oom.page == oom.requested || !logits {
        return Err(format!("the refused {} B are not the padded logits", oom.requested).into());
    }
    if !d.message.contains("MatmulAutotuneKey") {
        return Err("the death did not come out of the matmul autotuner".into());
    }
    Ok(Markdown(format!(
        "Read it with the method's first two steps. *When*: step {}, so this job never fitted: \
         no leak to chase (a death after hundreds of steps is [another story](part-1/wall.md)). \
         *Which tensor*: an out-of-memory error often names the pool's page; the reservation is \
         the tensor, a row as wide as the vocabulary per position of {element}-byte floats: the \
         logits, padded by the matmul kernel being tuned when the page was refused.",
        d.step
    )))
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
pub fn transformer_tensors(network: &Network) -> Result<Table, BookError> {
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
