//! `highwater replay`: a PyTorch memory snapshot replayed through PyTorch's caching allocator
//! (`graphrace::caching`) on the card asked, under its own setting and each worth trying.

use std::io::Read as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use graphrace::caching::{OomFigures, Setting, StepFigures, format_size};
use graphrace::snapshot::{
    self, MAX_PICKLE_BYTES, Requests, Snapshot, Verdict, settings_worth_trying, smallest_fit,
    verdict,
};
use serde::Serialize;

use crate::args::{CardArg, parse_card};
use basics::text_table::{Align, Rule, render};
use clap::Args;
use highwater::limits::quote;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    highwater replay job.pickle --card 24GiB\n  \
    highwater replay job.pickle --card 80GB --others 6GiB --alloc-conf expandable_segments:True\n  \
    highwater replay job.pickle --free 20GiB --json\n\n\
    The snapshot is what torch.cuda.memory._dump_snapshot writes after \
    torch.cuda.memory._record_memory_history(max_entries=...) (PyTorch 2.1 to 2.11), plain or \
    xz-compressed. Record from before the first step and set max_entries above the steps' \
    events, or the trace starts mid-run and what the allocator cached before it is unknown. \
    Steps are read from the optimizer's annotations (Optimizer.step).\n\n\
    Exits 0 whether or not the job fits; 1 on a file that is not a snapshot, naming the field.")]
#[command(group(clap::ArgGroup::new("device_memory").required(true).args(["card", "free"])))]
pub(crate) struct ReplayArgs {
    /// The memory snapshot (`.pickle`, or `.pickle.xz`).
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: PathBuf,
    /// The card: its memory (`24GiB`, `80GB`) or a card profile (JSON, its `total_bytes`). The
    /// allocator may take it less the CUDA context and other processes.
    #[arg(long, value_name = "SIZE|PATH", value_parser = parse_card)]
    pub card: Option<CardArg>,
    /// What the allocator may take, in place of --card: `torch.cuda.mem_get_info()`'s free
    /// once the CUDA context is up, or what `set_per_process_memory_fraction` allows.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub free: Option<u64>,
    /// The job's CUDA context and other memory outside the allocator, on a --card. Measured
    /// with PyTorch 2.11 on an H100: 673 to 760 MiB more than reserved in the process's memory
    /// of each OOM message in repro/results/pytorch/programs; the default is near the top,
    /// the side that promises less.
    #[arg(long, value_name = "SIZE", default_value = "750MiB", value_parser = parse_size)]
    pub context: u64,
    /// Other processes' memory on a --card.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_size)]
    pub others: u64,
    /// The allocator setting to replay under, as PYTORCH_CUDA_ALLOC_CONF [default: the
    /// snapshot's own].
    #[arg(long, value_name = "CONF")]
    pub alloc_conf: Option<String>,
    /// The device whose history to replay, when several have one.
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
    /// One JSON object on stdout instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// A memory size (`750MiB`, `24GiB`, `80GB`, `0`), as --card's sizes are written.
fn parse_size(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    match parse_card(s)? {
        CardArg::Bytes(b) => Ok(b),
        CardArg::Profile(_) => Err(format!(
            "`{}` is not a size (`750MiB`, `24GiB`, `80GB`)",
            quote(s)
        )),
    }
}

/// The device the replay runs on.
struct Device {
    /// What the allocator may take.
    limit: u64,
    /// The card's memory and the job's context, when a card was named.
    card: Option<(u64, u64)>,
    others: u64,
}

pub(crate) fn replay(a: ReplayArgs) -> Result<()> {
    let name = a.snapshot.display().to_string();
    let bytes = read_snapshot(&a.snapshot)?;
    let snap = snapshot::read(&bytes, a.device).with_context(|| format!("cannot replay {name}"))?;
    let requests = snap
        .requests()
        .with_context(|| format!("cannot replay {name}"))?;
    let device = device(&a)?;
    let recorded = snap.setting;
    let chosen = match &a.alloc_conf {
        Some(conf) => Setting::parse(conf)?,
        None => recorded.unwrap_or_else(|| Setting::parse("").expect("the default")),
    };
    let verdicts: Vec<(Setting, Verdict, Option<u64>)> = settings_worth_trying(chosen)
        .into_iter()
        .map(|s| {
            let v = verdict(&snap, &requests, s, device.limit);
            let needs = smallest_fit(&snap, &requests, s);
            (s, v, needs)
        })
        .collect();
    let report = Report::of(&name, &snap, &requests, recorded, &device, &verdicts);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text(&snap, &requests));
    }
    Ok(())
}

/// The file's bytes, xz-decompressed when it ends in `.xz`, refused past the reader's bound.
fn read_snapshot(path: &Path) -> Result<Vec<u8>> {
    let name = path.display().to_string();
    let mut raw = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PICKLE_BYTES as u64 + 1).read_to_end(&mut raw))
        .with_context(|| format!("cannot read {name}"))?;
    if raw.len() > MAX_PICKLE_BYTES {
        bail!("{name} is larger than the {MAX_PICKLE_BYTES} B a snapshot is read up to");
    }
    if !name.ends_with(".xz") {
        return Ok(raw);
    }
    let mut out = Bounded(Vec::new());
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut out)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("{name} is not xz, or holds more than {MAX_PICKLE_BYTES} B"))?;
    Ok(out.0)
}

/// A buffer that refuses to grow past [`MAX_PICKLE_BYTES`]: a small xz file can hold a huge
/// one, and decompressing it whole would be an out-of-memory of our own.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_PICKLE_BYTES {
            return Err(std::io::Error::other("past the bound"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn device(a: &ReplayArgs) -> Result<Device> {
    if let Some(free) = a.free {
        return Ok(Device {
            limit: free,
            card: None,
            others: 0,
        });
    }
    let total = match a.card.as_ref().expect("clap requires --card or --free") {
        CardArg::Bytes(b) => *b,
        CardArg::Profile(path) => dryrun::CardProfile::read(path)?.total_bytes,
    };
    let Some(limit) = total.checked_sub(a.context + a.others) else {
        bail!(
            "the card's {} is less than the CUDA context ({}) and the other processes ({})",
            format_size(total),
            format_size(a.context),
            format_size(a.others)
        );
    };
    Ok(Device {
        limit,
        card: Some((total, a.context)),
        others: a.others,
    })
}

/// `replay --json`: the CLI's contract.
#[derive(Serialize)]
struct Report {
    snapshot: String,
    device: usize,
    requests: usize,
    first_step: u64,
    steps: u64,
    steps_from_annotations: bool,
    streams: usize,
    /// Tensors alive before the trace's first event, and their bytes.
    before_trace: (usize, u64),
    recorded_refusal: bool,
    recorded_setting: Option<String>,
    limit: u64,
    /// The chosen setting first, then the others worth trying.
    settings: Vec<SettingReport>,
}

#[derive(Serialize)]
struct SettingReport {
    setting: String,
    fits: bool,
    peak_reserved: u64,
    peak_allocated: u64,
    /// The smallest limit (to 2 MiB) it fits under, by bisection; null past 1 TiB.
    needs_at_least: Option<u64>,
    refused: Option<RefusedReport>,
    steps: Vec<StepReport>,
}

#[derive(Serialize)]
struct RefusedReport {
    step: u64,
    nth_request_of_step: usize,
    requests_in_step: usize,
    bytes: u64,
    tried: u64,
    allocated: u64,
    reserved: u64,
    released: u64,
    place: String,
    message: String,
}

#[derive(Serialize)]
struct StepReport {
    step: u64,
    max_allocated: u64,
    max_reserved: u64,
    allocated: u64,
    reserved: u64,
}

impl From<&StepFigures> for StepReport {
    fn from(s: &StepFigures) -> StepReport {
        StepReport {
            step: s.step,
            max_allocated: s.max_allocated,
            max_reserved: s.max_reserved,
            allocated: s.allocated,
            reserved: s.reserved,
        }
    }
}

impl Report {
    fn of(
        name: &str,
        snap: &Snapshot,
        requests: &Requests,
        recorded: Option<Setting>,
        device: &Device,
        verdicts: &[(Setting, Verdict, Option<u64>)],
    ) -> Report {
        let settings = verdicts
            .iter()
            .map(|(s, v, needs)| SettingReport {
                setting: s.to_string(),
                fits: v.fits(),
                peak_reserved: v.replay.peak_reserved,
                peak_allocated: v.replay.peak_allocated,
                needs_at_least: *needs,
                refused: v.refused.as_ref().map(|r| RefusedReport {
                    step: r.step,
                    nth_request_of_step: r.nth,
                    requests_in_step: r.of,
                    bytes: r.bytes,
                    tried: r.error.tried,
                    allocated: r.error.allocated,
                    reserved: r.error.reserved,
                    released: r.error.released,
                    place: r.place(),
                    message: message(&r.error, device),
                }),
                steps: v.replay.steps.iter().map(StepReport::from).collect(),
            })
            .collect();
        Report {
            snapshot: name.into(),
            device: snap.device,
            requests: requests
                .events
                .iter()
                .filter(|e| matches!(e, graphrace::caching::Event::Alloc { .. }))
                .count(),
            first_step: requests.first_step,
            steps: requests.steps,
            steps_from_annotations: requests.annotated,
            streams: requests.streams,
            before_trace: requests.before_trace,
            recorded_refusal: requests.recorded_refusal.is_some(),
            recorded_setting: recorded.map(|s| s.to_string()),
            limit: device.limit,
            settings,
        }
    }

    fn text(&self, snap: &Snapshot, requests: &Requests) -> String {
        let mut out = format!(
            "{}: device {}, {} requests in {} step{} ({}), {} stream{}; recorded under {}\n",
            self.snapshot,
            snap.device,
            self.requests,
            self.steps,
            if self.steps == 1 { "" } else { "s" },
            if self.steps_from_annotations {
                "ended by the optimizer's annotations"
            } else {
                "no optimizer annotations: the whole trace is one step"
            },
            self.streams,
            if self.streams == 1 { "" } else { "s" },
            self.recorded_setting
                .as_deref()
                .unwrap_or("a setting the snapshot does not say"),
        );
        let (n, bytes) = self.before_trace;
        if n > 0 {
            out += &format!(
                "The trace starts mid-run, in step {} (the history's ring buffer was full): {n} \
                 tensors ({}) were alive before it and are allocated first; what the allocator \
                 had cached then is not known, so the peaks may part from the job's.\n",
                self.first_step,
                format_size(bytes)
            );
        }
        if requests.recorded_refusal.is_some() {
            out += "The recorded run was refused a request: its trace ends there, so a replay \
                    that serves it says nothing of what would have come after.\n";
        }
        if requests.private_pools > 0 {
            out += &format!(
                "The dump has {} CUDA graph pool(s): a request in one of their segments is \
                 replayed in its pool; a segment a pool gave back before the dump is not known.\n",
                requests.private_pools
            );
        }
        out += &format!("The allocator may take {}.\n\n", format_size(self.limit));
        let first = &self.settings[0];
        match &first.refused {
            None => {
                out += &format!(
                    "Under {}: it fits. Peak reserved {}, allocated at most {}; it needs at \
                     least {}.\n",
                    first.setting,
                    format_size(first.peak_reserved),
                    format_size(first.peak_allocated),
                    needs(first.needs_at_least)
                );
            }
            Some(r) => {
                out += &format!(
                    "Under {}: it does not fit. Step {}, request {} of {}: {} from {}.\n\
                     PyTorch would raise:\n{}\n",
                    first.setting,
                    r.step,
                    r.nth_request_of_step,
                    r.requests_in_step,
                    format_size(r.bytes),
                    r.place,
                    r.message
                );
            }
        }
        let rows: Vec<Vec<String>> = self
            .settings
            .iter()
            .map(|s| {
                vec![
                    s.setting.clone(),
                    match &s.refused {
                        None => "fits".into(),
                        Some(r) => {
                            format!("refused in step {}, tries {}", r.step, format_size(r.tried))
                        }
                    },
                    format_size(s.peak_reserved),
                    needs(s.needs_at_least),
                ]
            })
            .collect();
        out += "\nEach setting worth trying, on the same device:\n";
        out += &render(
            &[
                ("PYTORCH_CUDA_ALLOC_CONF", Align::Left),
                ("outcome", Align::Left),
                ("peak reserved", Align::Right),
                ("needs at least", Align::Right),
            ],
            &rows,
            Rule::Dashed,
        );
        out.push('\n');
        out
    }
}

/// What a job needs at least, for a reader.
fn needs(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "more than 1 TiB".into(), format_size)
}

/// The message PyTorch 2.11 would raise. On a --card it is word for word but for the other
/// process's id; with --free the card is not known, and the figures that depend on it are
/// left out (`…`).
fn message(error: &graphrace::usage::OutOfMemory, device: &Device) -> String {
    match device.card {
        Some((total, context)) => OomFigures::of(error, total, context, device.others).message(),
        None => {
            let f = OomFigures::of(error, 0, 0, 0);
            format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}. … {}",
                format_size(f.tried),
                f.accounting()
            )
        }
    }
}
