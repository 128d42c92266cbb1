//! `highwater conform DIR`: every recorded rerun in DIR against the simulator.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use highwater::conform::{
    Compared, Conformance, Exactness, KnownDryDifference, KnownMiss, NetworkRecord, RerunRecord,
    conform as check, parse_known_dry, parse_known_misses,
};

use crate::args::ConformArgs;
use crate::quiet::{quiet_device_threads, quietly};
use basics::bytes::show;
use basics::text_table::{Align, Rule, render};

/// Runs the simulator is known to miss, with the reason; kept beside the records.
const KNOWN_MISSES: &str = "conform-known-misses.toml";

pub(crate) fn conform(a: ConformArgs) -> Result<()> {
    let mut files = records_in(&a.dir, "rerun-")?;
    if a.dry {
        // Networks have no simulator to be held to: only the dry run replays them.
        for family in highwater::network::FAMILIES {
            files.extend(records_in(&a.dir, &format!("{family}-"))?);
        }
    }
    if files.is_empty() {
        bail!("{} holds no rerun-*.json", a.dir.display());
    }
    if a.dry && crate::conform022::all_burn_022(&files)? {
        return crate::conform022::conform(&a, &files);
    }
    if a.band {
        return conform_band(&a, &files);
    }
    if a.dry {
        return conform_dry(&a, &files);
    }
    let known_path = a.dir.join(KNOWN_MISSES);
    let known: Vec<KnownMiss> = match std::fs::read_to_string(&known_path) {
        Ok(text) => parse_known_misses(&known_path.display().to_string(), &text)
            .map_err(anyhow::Error::msg)?,
        Err(_) => vec![],
    };
    let is_known = |name: &str| known.iter().any(|k| k.run == name);
    let mut results = vec![];
    let mut notes = vec![];
    for path in &files {
        let record: RerunRecord = read_record(path)?;
        if let Ok(now) = std::fs::read_to_string(&record.recipe_path)
            && now != record.recipe_toml
        {
            notes.push(format!(
                "note: {} changed since {} was recorded (the run is checked against the recipe \
                 it recorded)",
                record.recipe_path,
                path.display()
            ));
        }
        let c = check(&record).with_context(|| format!("cannot check {}", path.display()))?;
        results.push(c);
    }
    if a.json {
        for c in &results {
            println!("{}", serde_json::to_string(&Row::from(c))?);
        }
    } else {
        println!("{}", table(&results, &is_known));
        for k in &known {
            println!("known miss {}: {}", k.run, k.reason);
        }
        for n in &notes {
            println!("{n}");
        }
    }
    let missed = results
        .iter()
        .filter(|c| !c.passes() && !is_known(&c.name))
        .count();
    if missed > 0 {
        bail!(
            "{missed} of {} recorded runs miss the simulator's tolerances",
            results.len()
        );
    }
    let mended: Vec<&str> = known
        .iter()
        .filter(|k| results.iter().any(|c| c.name == k.run && c.passes()))
        .map(|k| k.run.as_str())
        .collect();
    if !mended.is_empty() {
        bail!(
            "{} lists runs that now conform: {} (remove them)",
            known_path.display(),
            mended.join(", ")
        );
    }
    Ok(())
}

/// Repeats of the recorded runs (the same command run again on the same GPU), one folder each.
const REPEATS: &str = "repeats";

/// Where a network's first run on the GPU (from an empty autotune cache) is kept, under its
/// record's folder.
const COLD: &str = "cold";

/// Runs whose dry replay is known to differ, in which figures and why; kept beside the records.
const KNOWN_DRY: &str = "conform-dry-known.toml";

/// The known differences kept beside the records in `dir` (none when there is no file) that
/// hold on this host: those known only below a core count are set aside on a host with as
/// many cores (the cores this process may run on).
fn known_dry(dir: &Path) -> Result<Vec<KnownDryDifference>> {
    let path = dir.join(KNOWN_DRY);
    let known = match std::fs::read_to_string(&path) {
        Ok(text) => {
            parse_known_dry(&path.display().to_string(), &text).map_err(anyhow::Error::msg)?
        }
        Err(_) => vec![],
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(known.into_iter().filter(|k| k.applies_on(cores)).collect())
}

/// A record replayed dry: the (predicted) run, held to the record, and on burn-fusion its
/// schedules' band held to the GPU's runs.
type Replayed = (
    situ::dry::DryOutcome,
    Exactness,
    Option<situ::band::BandCheck>,
);

/// A burn-fusion replay passes: the GPU's bytes reserved inside its schedules' band, every
/// other figure, the steps and the fate the record's.
fn in_band(e: &Exactness, check: &situ::band::BandCheck) -> bool {
    check.holds() && e.passes_except(&["reserved".into()])
}

/// Every record replayed dry, held to the byte or to the GPU's own spread across repeats; a
/// burn-fusion network's bytes reserved to the band of its schedules instead
/// (`situ::band::schedules`). Replays run in parallel, one dry device each.
fn conform_dry(a: &ConformArgs, files: &[PathBuf]) -> Result<()> {
    let card = std::sync::Arc::new(dryrun::CardProfile::read(&a.card)?);
    let known = known_dry(&a.dir)?;
    let atlas = dryrun::Atlas::read(&a.autotune)
        .with_context(|| format!("cannot read the autotune cache {}", a.autotune.display()))?;
    // A run passes outright, inside its schedules' band, or with the figures its known
    // difference names set aside.
    let passes = |(_, e, band): &Replayed| {
        let known = known.iter().find(|k| k.run == e.name);
        match band {
            Some(check) => in_band(e, check),
            None => e.passes() || known.is_some_and(|k| e.passes_except(&k.figures)),
        }
    };
    quiet_device_threads();
    let repeat_dirs = repeat_dirs(&a.dir.join(REPEATS))?;
    let replay = |path: &PathBuf| -> Result<Replayed> {
        let repeats = repeat_dirs
            .iter()
            .map(|dir| dir.join(path.file_name().unwrap_or_default()))
            .filter(|repeat| repeat.exists());
        let is_network = path
            .file_name()
            .is_some_and(|n| !n.to_string_lossy().starts_with("rerun-"));
        let replayed = if is_network {
            let record: NetworkRecord = read_record(path)?;
            let repeats: Vec<NetworkRecord> =
                repeats.map(|r| read_record(&r)).collect::<Result<_>>()?;
            if record.backend == highwater::recipe::Backend::Fusion {
                quietly(|| situ::band::replay_band(&record, &repeats, card.clone(), &atlas))
                    .map(|(band, check)| (band.predicted, check.in_use.clone(), Some(check)))
            } else {
                quietly(|| {
                    situ::dry::replay_network(&record, &repeats, card.clone(), Some(&a.autotune))
                })
                .map(|(outcome, e)| (outcome, e, None))
            }
        } else {
            let record: RerunRecord = read_record(path)?;
            let repeats: Vec<RerunRecord> =
                repeats.map(|r| read_record(&r)).collect::<Result<_>>()?;
            quietly(|| situ::dry::replay(&record, &repeats, card.clone(), Some(&a.autotune)))
                .map(|(outcome, e)| (outcome, e, None))
        };
        replayed.with_context(|| format!("cannot replay {}", path.display()))
    };
    // One dry device per replay, one chunk of the records per core, results in file order.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = files.len().div_ceil(workers).max(1);
    let results = std::thread::scope(|scope| {
        let chunks: Vec<_> = files
            .chunks(chunk)
            .map(|part| scope.spawn(|| part.iter().map(replay).collect::<Vec<_>>()))
            .collect();
        chunks
            .into_iter()
            .flat_map(|c| c.join().expect("a replay thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    if a.json {
        for replayed in &results {
            let (_, exactness, band) = replayed;
            let mut row = serde_json::to_value(exactness)?;
            row["passes"] = passes(replayed).into();
            row["exact"] = exactness.passes().into();
            if let Some(check) = band {
                let edges: Vec<[Option<u64>; 2]> =
                    check.reserved.iter().map(|&(l, _, h)| [l, h]).collect();
                row["reserved_band"] = serde_json::to_value(edges)?;
                row["reserved_outside"] = serde_json::to_value(&check.reserved_outside)?;
            }
            println!("{row}");
        }
    } else {
        println!("{}", dry_table(&results, &known));
        for (outcome, e, _) in &results {
            for m in &outcome.autotune_misses {
                println!(
                    "{}: tuned dry (not in the GPU's cache): {} {} -> {}",
                    e.name,
                    m.tuner,
                    m.key,
                    m.kernel()
                );
            }
        }
    }
    let missed = results.iter().filter(|r| !passes(r)).count();
    if missed > 0 {
        bail!(
            "{missed} of {} recorded runs differ from their dry replay",
            results.len()
        );
    }
    Ok(())
}

/// A band's `least … most` (`–` for an edge whose run died before).
fn span(least: Option<u64>, most: Option<u64>) -> String {
    let edge = |b: Option<u64>| b.map_or("–".into(), show);
    format!("{} … {}", edge(least), edge(most))
}

/// Every network record predicted from the atlas less its own problems, and held to its band.
#[expect(
    clippy::too_many_lines,
    reason = "one loop over the network records, each replayed warm and cold into its outside \
              lines and its table row of ten columns, then the table printed with its headers"
)]
fn conform_band(a: &ConformArgs, files: &[PathBuf]) -> Result<()> {
    let card = std::sync::Arc::new(dryrun::CardProfile::read(&a.card)?);
    let atlas = dryrun::Atlas::read(&a.autotune)
        .with_context(|| format!("cannot read the atlas {}", a.autotune.display()))?;
    quiet_device_threads();
    let repeat_dirs = repeat_dirs(&a.dir.join(REPEATS))?;
    let networks: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| !n.to_string_lossy().starts_with("rerun-"))
        })
        .collect();
    let mut rows = Vec::new();
    let mut outside = Vec::new();
    let mut missed = 0;
    for path in &networks {
        let record: NetworkRecord = read_record(path)?;
        let repeats: Vec<NetworkRecord> = repeat_dirs
            .iter()
            .map(|dir| dir.join(path.file_name().unwrap_or_default()))
            .filter(|repeat| repeat.exists())
            .map(|r| read_record(&r))
            .collect::<Result<_>>()?;
        let network = record.network()?;
        let own_dir = a.dir.join("autotune").join(network.cache_name());
        let own = dryrun::Atlas::read(&own_dir).with_context(|| {
            format!("cannot read {}, the run's own problems", own_dir.display())
        })?;
        let without = atlas.without(&own);
        let (band, check) =
            quietly(|| situ::band::replay_band(&record, &repeats, card.clone(), &without))
                .with_context(|| format!("cannot replay {}", path.display()))?;
        let agree = band.agreement(&own);
        for (step, figure, gpu, least, most) in &check.in_use_outside {
            outside.push(format!(
                "{}: step {step}: a GPU run's {figure} is {gpu} B, outside {least} … {most} B \
                 (the GPU's runs differ by up to {} B)",
                record.name(),
                check.in_use.gpu_spread
            ));
        }
        let tolerance = check.reserved_tolerance;
        for (step, gpu, least, most) in &check.reserved_outside {
            outside.push(format!(
                "{}: step {step}: a GPU run reserved {gpu} B, more than {tolerance} B outside \
                 {least} … {most} B (less is CubeCL's count of padding, not a page)",
                record.name(),
            ));
        }
        // Its first run, from an empty cache, against the dry run's cold band.
        let cold_path = a.dir.join(COLD).join(path.file_name().unwrap_or_default());
        let cold = if cold_path.exists() {
            let cold: NetworkRecord = read_record(&cold_path)?;
            let (band, cold_outside) =
                quietly(|| situ::band::replay_cold(&cold, tolerance, card.clone()))
                    .with_context(|| format!("cannot replay {} cold", cold_path.display()))?;
            for (step, gpu, least, most) in &cold_outside {
                outside.push(format!(
                    "{} cold: step {step}: the GPU reserved {gpu} B, more than {tolerance} B \
                     outside {least} … {most} B (less is CubeCL's count of padding, not a page)",
                    record.name(),
                ));
            }
            let gpu = cold.steps.last().map(|s| s.reserved);
            Some((
                gpu,
                band.reserved().last().copied(),
                cold_outside.is_empty(),
            ))
        } else {
            None
        };
        let holds = check.holds() && cold.is_none_or(|(_, _, inside)| inside);
        if !holds {
            missed += 1;
        }
        let last = band.reserved().last().copied();
        let gpu_last = record.steps.last().map(|s| s.reserved);
        let in_use_off = check
            .in_use
            .differences
            .iter()
            .filter(|d| d.figure != "reserved")
            .map(|d| d.bytes().unsigned_abs())
            .max()
            .unwrap_or(0);
        rows.push(vec![
            record.name(),
            format!("{} of {}", check.decided, own.entries.len()),
            format!(
                "{} / {} of {}",
                agree.same_kernel, agree.same_bytes, agree.known
            ),
            format!(
                "{} B (spread {} B){}",
                in_use_off,
                check.in_use.gpu_spread,
                if check.in_use_exact() {
                    ""
                } else {
                    ", in band"
                }
            ),
            gpu_last.map_or("–".into(), show),
            last.map_or("–".into(), |(_, x, _)| show(x)),
            last.map_or("–".into(), |(l, _, h)| span(l, h)),
            cold.map_or("–".into(), |(gpu, _, _)| gpu.map_or("–".into(), show)),
            cold.map_or("–".into(), |(_, band, _)| {
                band.map_or("–".into(), |(l, h)| span(l, h))
            }),
            if holds { "holds" } else { "MISSES" }.into(),
        ]);
    }
    println!(
        "{}",
        render(
            &[
                ("run", Align::Left),
                ("problems not in the atlas", Align::Right),
                ("GPU's kernel / its bytes predicted", Align::Right),
                ("in use, largest difference", Align::Right),
                ("reserved, last step: GPU", Align::Right),
                ("predicted", Align::Right),
                ("band", Align::Right),
                ("cold: GPU", Align::Right),
                ("cold band", Align::Right),
                ("", Align::Left),
            ],
            &rows,
            Rule::Dashed,
        )
    );
    for line in &outside {
        println!("{line}");
    }
    if missed > 0 {
        bail!(
            "{missed} of {} runs fall outside their band",
            networks.len()
        );
    }
    Ok(())
}

/// The folders under `dir`, sorted; none when it does not exist.
fn repeat_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(vec![]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// A JSON file written on a GPU: a record, or its server's trace.
pub(crate) fn read_record<R: serde::de::DeserializeOwned>(path: &Path) -> Result<R> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a GPU record", path.display()))
}

fn dry_table(results: &[Replayed], known: &[KnownDryDifference]) -> String {
    let fate = |d: Option<(u64, highwater::trace::Phase)>| {
        d.map_or("–".to_string(), |(step, phase)| {
            format!("{step} {}", highwater::recipe::written_name(&phase))
        })
    };
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(outcome, e, band)| {
            let worst = e
                .differences
                .iter()
                .max_by_key(|d| d.bytes().unsigned_abs());
            vec![
                e.name.trim_start_matches("rerun-").to_string(),
                format!("{} / {}", e.completed.0, e.completed.1),
                format!("{} / {} B", e.gpu_runs, e.gpu_spread),
                e.differences.len().to_string(),
                worst.map_or("0 B".into(), |d| {
                    format!("{:+} B ({} step {})", d.bytes(), d.figure, d.step)
                }),
                format!("{} / {}", fate(e.measured_death), fate(e.predicted_death)),
                show(outcome.peak_bytes),
                match (band, e.passes(), e.differences.is_empty()) {
                    (Some(check), ..) => format!(
                        "{} its schedules' band ({} wide)",
                        if in_band(e, check) { "in" } else { "OUTSIDE" },
                        show(check.width())
                    ),
                    (None, passes, exact) => match (passes, exact) {
                        (true, true) => "exact".to_string(),
                        (true, false) => "within the GPU's spread".to_string(),
                        (false, _) => match known.iter().find(|k| k.run == e.name) {
                            Some(k) if e.passes_except(&k.figures) => {
                                format!("known: {} (see {KNOWN_DRY})", k.figures.join(", "))
                            }
                            _ => "DIFFERS".to_string(),
                        },
                    },
                },
            ]
        })
        .collect();
    render(
        &[
            ("run", Align::Left),
            ("steps (GPU / dry)", Align::Right),
            ("GPU runs / spread", Align::Right),
            ("figures differing", Align::Right),
            ("largest difference", Align::Right),
            ("died (GPU / dry)", Align::Right),
            ("pages at most", Align::Right),
            ("", Align::Left),
        ],
        &rows,
        Rule::Dashed,
    )
}

/// The records in `dir` whose names start with `prefix` (`rerun-`, `decoder-`, …), sorted.
fn records_in(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// What `--json` prints per run (the simulated run itself is left out).
#[derive(serde::Serialize)]
struct Row<'a> {
    name: &'a str,
    steps: u64,
    in_use_after_forward: Option<highwater::conform::Compared>,
    reserved: Option<highwater::conform::Compared>,
    measured_died_at: Option<u64>,
    predicted_died_at: Option<u64>,
    passes: bool,
}

impl<'a> From<&'a Conformance> for Row<'a> {
    fn from(c: &'a Conformance) -> Self {
        Row {
            name: &c.name,
            steps: c.steps,
            in_use_after_forward: c.in_use_after_forward,
            reserved: c.reserved,
            measured_died_at: c.measured_died_at,
            predicted_died_at: c.predicted_died_at,
            passes: c.passes(),
        }
    }
}

fn table(results: &[Conformance], is_known: &dyn Fn(&str) -> bool) -> String {
    let pct = |e: f64| format!("{:+.2} %", e * 100.0);
    let died = |d: Option<u64>| d.map_or("–".to_string(), |s| s.to_string());
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|c| {
            let figures = |x: Option<Compared>| match x {
                Some(x) => [show(x.measured), show(x.predicted), pct(x.error)],
                None => ["–".into(), "–".into(), "–".into()],
            };
            let mut row = vec![
                c.name.trim_start_matches("rerun-").to_string(),
                c.steps.to_string(),
            ];
            row.extend(figures(c.in_use_after_forward));
            row.extend(figures(c.reserved));
            row.push(format!(
                "{} / {}",
                died(c.measured_died_at),
                died(c.predicted_died_at)
            ));
            row.push(
                match (c.passes(), is_known(&c.name)) {
                    (true, _) => "ok",
                    (false, true) => "known miss",
                    (false, false) => "MISS",
                }
                .to_string(),
            );
            row
        })
        .collect();
    render(
        &[
            ("run", Align::Left),
            ("steps", Align::Right),
            ("in use after fwd", Align::Right),
            ("simulated", Align::Right),
            ("error", Align::Right),
            ("reserved", Align::Right),
            ("simulated", Align::Right),
            ("error", Align::Right),
            ("died (GPU / sim)", Align::Right),
            ("", Align::Left),
        ],
        &rows,
        Rule::Dashed,
    )
}
