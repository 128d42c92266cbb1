//! *Will my model fit?*: the plumbing around the classifier the page defines (the card, the
//! plan, a dry run's figure and tables, a batch search's answer), the decoder held out against
//! its H200 runs, and a model the GPU never ran, predicted from the card's autotune atlas alone
//! (its own problems taken out), held to what the H200 measured when it did run it.
//! *Apply it to your job*: a model file of `repro/models` trained dry as `highwater fit` trains
//! it ([`Job`]), where it dies, what it holds by phase, the largest batch that fits.

use std::path::Path;
use std::sync::Arc;

use burn::backend::Autodiff;
use cell_output::{Figure, Table};
use dryrun::{CardProfile, OnRefusal, TieBreak};
use highwater::RunReport;
use highwater::conform::{MeasuredStep, NetworkRecord};
use highwater::pool::CardPool;
use highwater::recipe::written_name;
use situ::band::{Band, BandCheck};
use situ::dry::{BatchSearch, DryCube, DryPlan};

use crate::load::{Book, H200_AUTOTUNE};
use crate::{bytes, series};

mod atlas;
mod job;

use crate::BookError;
#[cfg(test)]
use atlas::miss_policy_text;
pub use atlas::{FromAtlas, RecordedModel};
pub use job::{Job, by_phase, death, death_reading, search_row, transformer_tensors};

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
pub fn card_16gib(book: &Book) -> Result<Arc<CardProfile>, BookError> {
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
        schedule: dryrun::Schedule::default(),
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

/// The row that explains a batch cliff on a card of `total_bytes`: the page one activation row
/// of `row_bytes` per sample takes at the `largest` batch, and at the next.
pub fn cliff_row(total_bytes: u64, row_bytes: u64, largest: u64) -> Option<[String; 3]> {
    let at = |batch: u64| CardPool::page_for(total_bytes, batch * row_bytes);
    let (here, next) = (at(largest)?, at(largest + 1)?);
    let fills = if here == largest * row_bytes {
        "fills"
    } else {
        "takes"
    };
    Some([
        "why the next one dies".to_string(),
        (largest + 1).to_string(),
        format!(
            "an activation of {} per sample {fills} a page of {} at batch {largest}; one sample \
             more and each takes a page of {}, and those pages leave too little of the card for \
             the pages asked for after them",
            bytes::show(row_bytes),
            bytes::show(here),
            bytes::show(next)
        ),
    ])
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
                "dies in step {}, {}: the card is too full for the next page asked for ({page})",
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
pub fn decoder_held_out(book: &Book) -> Result<Table, BookError> {
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

/// The band's width where it is widest, and at which step: the last column gives the last
/// step's edges, which may be narrower.
fn widest_step(reserved: &[(Option<u64>, u64, Option<u64>)], width: u64) -> String {
    let step = reserved
        .iter()
        .position(|&(l, _, h)| l.zip(h).is_some_and(|(l, h)| h - l == width))
        .map_or(String::new(), |i| format!(" (step {})", i + 1));
    format!("band at most {} wide{step}", bytes::show(width))
}

/// One backend's row of [`decoder_held_out`], and how many of its figures of bytes in use
/// differ from the GPU's. On burn-fusion bytes reserved are held to the band of its schedules.
fn decoder_replayed(
    book: &Book,
    h200: &Arc<CardProfile>,
    backend: &str,
) -> Result<([String; 6], usize), BookError> {
    let last = |steps: &[MeasuredStep]| {
        Ok::<_, &str>(bytes::show(steps.last().ok_or("no step")?.reserved))
    };
    if backend == "fusion" {
        let (record, _, band, check) = decoder_fusion_band(book, h200)?;
        let e = &check.in_use;
        let live = e
            .differences
            .iter()
            .filter(|d| d.figure != "reserved")
            .count();
        assert!(check.holds(), "the text: the GPU's runs inside the band");
        let (least, _, most) = *check.reserved.last().ok_or("no step")?;
        let edge = |b: Option<u64>| b.map_or("–".into(), bytes::show);
        let row = [
            backend.to_string(),
            format!("{} ({} B)", e.gpu_runs, e.gpu_spread),
            format!("{live} of {}", 2 * e.steps_compared()),
            format!(
                "{} of {} outside its band",
                check.steps_outside(),
                e.steps_compared()
            ),
            widest_step(&check.reserved, band.width()),
            format!(
                "{} / {} … {}",
                last(&record.steps)?,
                edge(least),
                edge(most)
            ),
        ];
        return Ok((row, live));
    }
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
    assert!(e.passes(), "the text: CubeBackend to the byte");
    let worst = e
        .differences
        .iter()
        .map(|d| d.bytes())
        .max_by_key(|b| b.unsigned_abs())
        .unwrap_or(0);
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

/// The decoder's burn-fusion record replayed at every schedule its band explores, held to the
/// GPU's three runs.
fn decoder_fusion_band(
    book: &Book,
    h200: &Arc<CardProfile>,
) -> Result<(NetworkRecord, Vec<NetworkRecord>, Band, BandCheck), BookError> {
    let (record, repeats) = book.network_with_repeats("decoder-decoder-fusion-none-b16")?;
    let atlas = dryrun::Atlas::read(&book.h200_autotune())?;
    let (band, check) = situ::band::replay_band(&record, &repeats, h200.clone(), &atlas)?;
    Ok((record, repeats, band, check))
}

/// The decoder on burn-fusion at each schedule its band explores (`dryrun::schedule`): bytes
/// reserved after step 1 and the last step against the GPU's runs. Asserts what the text says:
/// no schedule is the GPU's at both, and the band holds them.
pub fn decoder_schedules(book: &Book) -> Result<Table, BookError> {
    let h200 = Arc::new(book.h200()?);
    let (record, repeats, band, check) = decoder_fusion_band(book, &h200)?;
    let gpu_at = |i: usize| {
        let runs = std::iter::once(&record).chain(&repeats);
        let at = runs.filter_map(|r| r.steps.get(i).map(|s| s.reserved));
        (at.clone().min().unwrap_or(0), at.max().unwrap_or(0))
    };
    let last = record.steps.len() - 1;
    let page = situ::band::reserved_tolerance(&h200, 0);
    let mut t = Table::new([
        "burn-fusion behind the training thread",
        "reserved after step 1",
        "after the last step",
        "the GPU's pages at both",
    ]);
    let mut hits = 0;
    let predicted = situ::band::schedules(record.backend)[0];
    let mut runs: Vec<_> = std::iter::once((predicted, &band.predicted))
        .chain(band.explored.iter().map(|(s, o)| (*s, o)))
        .collect();
    // By how far burn-fusion is behind, the prediction's among them.
    runs.sort_by_key(|(s, _)| (s.lag, !s.modes_overtake));
    for (schedule, outcome) in runs {
        let at = |i: usize| outcome.steps.get(i).map_or(0, |s| s.reserved);
        let on = |i: usize| {
            let (l, h) = gpu_at(i);
            at(i) + page >= l && at(i) <= h + page
        };
        hits += usize::from(on(0) && on(last));
        let mut label = schedule_label(schedule);
        if schedule == predicted {
            label += " (the prediction)";
        }
        t.push([
            label,
            bytes::signed(at(0) as i64 - gpu_at(0).0 as i64),
            bytes::signed(at(last) as i64 - gpu_at(last).0 as i64),
            if on(0) && on(last) { "yes" } else { "no" }.to_string(),
        ]);
    }
    assert_eq!(hits, 0, "the text: no schedule lands on the GPU's pages");
    assert!(check.holds(), "the text: the band holds every GPU run");
    let (l0, h0) = gpu_at(0);
    let (ll, hl) = gpu_at(last);
    t.push([
        "the H200's three runs".to_string(),
        format!("{} … {}", bytes::show(l0), bytes::show(h0)),
        format!("{} … {}", bytes::show(ll), bytes::show(hl)),
        "–".into(),
    ]);
    Ok(t)
}

/// How far a schedule has burn-fusion behind: `8 commands` (mode switches overtaking), `none: …`.
fn schedule_label(s: dryrun::Schedule) -> String {
    match (s.lag, s.modes_overtake) {
        (0, _) => "none: the training thread's order".into(),
        (lag, true) => format!("{lag} commands"),
        (lag, false) => format!("{lag} commands, mode switches in turn"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{H200_ATLAS, MODELS};
    use cell_output::Markdown;
    use dryrun::Atlas;
    use highwater::recipe::Checkpointing;
    use situ::band::Agreement;
    use situ::dry::largest_batch;

    #[test]
    fn a_gib_activation_fills_a_gib_page_and_one_row_more_takes_four() {
        let row = 8192 * 4;
        assert_eq!(CardPool::page_for(16 << 30, 32768 * row), Some(1 << 30));
        assert_eq!(CardPool::page_for(16 << 30, 32769 * row), Some(4 << 30));
        let r = cliff_row(16 << 30, row, 32768).unwrap();
        assert!(r[2].contains("fills a page of 1 GiB"), "{r:?}");
    }

    /// *Apply it to your job*'s helpers on the encoder, small: a batch that fits a 16 GiB card
    /// and one that does not, the death's table, the phases, the transformer's tensors.
    #[test]
    fn a_job_dies_where_fit_says_and_its_tables_say_so() {
        let job = Book::repository().job("encoder", 16 << 30).unwrap();
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
        let reading = death_reading(&network, &dies).unwrap().0;
        assert!(reading.contains("*When*: step 1, so"), "{reading}");
        assert!(death_reading(&network, &fits).is_err());
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
        let mlp = Book::repository().job("mlp", 16 << 30).unwrap();
        assert!(transformer_tensors(&mlp.network).is_err());
    }

    #[test]
    fn every_recorded_model_has_its_cold_run_its_cache_and_a_place_in_the_atlas() {
        let book = Book::repository();
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
        let book = Book::repository();
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
        // The runs above are the job's, of its own length.
        let ran = DryPlan {
            steps: Job::STEPS,
            ..plan
        };
        let report = fits.report("encoder, batch 2", &ran);
        let steps = steps_table(&report);
        assert_eq!(steps.rows().len() as u64, Job::STEPS);
        assert_eq!(steps.rows()[1][5], report.pages[1].to_string());
        let svg = steps_chart("encoder", report.capacity, &[("batch 2", &report)]).into_output();
        assert!(svg.body().contains("<svg"), "{}", svg.body());
        // A search whose batches up to 4 fit and whose larger ones die as batch 16 does.
        let search = largest_batch(8, |b| {
            Ok::<_, BookError>(if b <= 4 { fits.clone() } else { dies.clone() })
        })
        .unwrap();
        let t = search_table(&search);
        let rows = t.rows();
        assert_eq!(rows[0][..2], ["largest that fits", "4"]);
        assert_eq!(rows[1][..2], ["the next one", "5"]);
        assert!(
            rows[1][2].starts_with("dies in step 1, forward: the card is too full for the next"),
            "{rows:?}"
        );
        assert_eq!(rows[2][1..], ["6", "1 2 4 8✗ 6✗ 5✗"]);
    }

    /// The decoder held out, on CubeBackend (burn-fusion's replay is the slower one, and its
    /// bytes reserved vary on a small host): every figure the GPU's, as the page says.
    #[test]
    fn the_decoder_replays_to_the_byte_on_cubebackend() {
        let book = Book::repository();
        let h200 = Arc::new(book.h200().unwrap());
        let (row, live) = decoder_replayed(&book, &h200, "cube").unwrap();
        assert_eq!(live, 0);
        assert_eq!(row[..5], ["cube", "3 (0 B)", "0 of 40", "0 of 20", "+0 B"]);
        // Bytes reserved at the last step, on the H200 / dry: the same.
        let (gpu, dry) = row[5].split_once(" / ").unwrap();
        assert_eq!(gpu, dry, "{row:?}");
    }

    #[test]
    fn the_decoder_on_fusion_is_banded_by_its_schedules_on_any_host() {
        let t = decoder_schedules(&Book::repository()).unwrap();
        assert_eq!(t.rows().len(), dryrun::Schedule::EXPLORED.len() + 1);
        // By how far burn-fusion is behind: none first, the prediction's among the rest.
        assert_eq!(t.rows()[0][0], "none: the training thread's order");
        assert!(t.rows().iter().any(|r| r[0].ends_with("(the prediction)")));
        // Deterministic: the same table again, to the byte.
        assert_eq!(
            decoder_schedules(&Book::repository()).unwrap().rows(),
            t.rows()
        );
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
