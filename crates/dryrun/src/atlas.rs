//! The autotune atlas: CubeCL's autotune cache lines as data — each problem a tuner settled, with
//! every candidate's result — and the miss policy, which predicts the GPU's pick for a problem
//! the atlas lacks from the problems it holds.
//!
//! A line is `{"key":{"key":PROBLEM,"checksum":MD5},"value":{"fastest_index":I,"results":[…]}}`:
//! CubeCL loads the problem and the winner's index, and checks the checksum (an md5 of the
//! candidates' names) before it trusts a line. A line written here keeps everything but the
//! winner's index, so the dry device takes it as the GPU's answer.
//!
//! **The miss policy** is the nearest neighbour: among the atlas's problems of the same tuner
//! (and the same candidates), the one whose key is closest — every number compared on a log
//! scale, a differing word (a float type, a layout) counting as far as a 256× size ratio —
//! lends its winner, if that kernel is a candidate of the missed problem; else the next
//! closest does. [`Atlas::leave_one_out`] measures how often that is the GPU's own pick.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// How far apart two keys are when a word differs, or a field is missing from one: as far as
/// two sizes 256× apart.
const WORD_DISTANCE: f64 = 8.0;

/// Why an autotune cache folder could not be read, written or installed.
#[derive(Debug, thiserror::Error)]
pub enum AutotuneError {
    /// Reading the recorded cache or writing the installed copy failed.
    #[error("autotune cache {path}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AutotuneError + '_ {
    move |source| AutotuneError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The folder's cache files, by name, with their text.
pub(crate) fn cache_files(dir: &Path) -> Result<Vec<(String, String)>, AutotuneError> {
    let mut files = Vec::new();
    for file in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = file.map_err(io(dir))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(name) = name.filter(|n| n.ends_with(".json.log")) {
            files.push((name, std::fs::read_to_string(&path).map_err(io(&path))?));
        }
    }
    files.sort();
    Ok(files)
}

/// One candidate of a tuned problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Its name (`matmul_specialized_tma_mma`, …).
    pub name: String,
    /// Its index in the tuner's list: what the cache line's `fastest_index` names.
    pub index: usize,
    /// Its median time in nanoseconds, when it ran (`None`: skipped or failed). On a dry device
    /// that settles by memory ([`crate::TieBreak`]), the time encodes the bytes it reserved.
    pub nanos: Option<u64>,
}

/// One problem a tuner settled: a cache line.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The tuner's cache file stem (`burn_cubecl-kernel-matmul-tune-base`, …).
    pub tuner: String,
    /// The problem, as CubeCL wrote it.
    pub key: Value,
    /// The md5 of the candidates' names.
    pub checksum: String,
    /// The winner's index.
    pub fastest_index: usize,
    /// Every candidate, in the order the line lists them (fastest first).
    pub candidates: Vec<Candidate>,
    /// The line as read, rewritten only in its winner's index.
    line: Value,
}

impl Entry {
    /// Reads one cache line of `tuner`'s file; `None` when it is not one.
    pub fn parse(tuner: &str, line: &str) -> Option<Entry> {
        let line: Value = serde_json::from_str(line).ok()?;
        let key = line.pointer("/key/key")?.clone();
        let checksum = line.pointer("/key/checksum")?.as_str()?.to_string();
        let fastest_index =
            usize::try_from(line.pointer("/value/fastest_index")?.as_u64()?).ok()?;
        let candidates = line
            .pointer("/value/results")?
            .as_array()?
            .iter()
            .filter_map(candidate)
            .collect();
        Some(Entry {
            tuner: tuner.to_string(),
            key,
            checksum,
            fastest_index,
            candidates,
            line,
        })
    }

    /// The candidate that won.
    pub fn winner(&self) -> Option<&Candidate> {
        self.candidates
            .iter()
            .find(|c| c.index == self.fastest_index && c.nanos.is_some())
    }

    /// The winning kernel's name (`?` when the line does not say).
    pub fn kernel(&self) -> &str {
        self.winner().map_or("?", |c| c.name.as_str())
    }

    /// The candidates that ran, by name.
    pub fn ran(&self) -> impl Iterator<Item = &Candidate> {
        self.candidates.iter().filter(|c| c.nanos.is_some())
    }

    /// The same problem, settled on `index` instead.
    pub fn with_pick(&self, index: usize) -> Entry {
        let mut entry = self.clone();
        entry.fastest_index = index;
        if let Some(v) = entry.line.pointer_mut("/value/fastest_index") {
            *v = Value::from(index);
        }
        entry
    }

    /// The cache line.
    pub fn line(&self) -> String {
        self.line.to_string()
    }

    /// The problem's identity in a cache: its tuner and key (a key twice in one tuner's file,
    /// under two checksums, would be loaded in no set order, so an atlas keeps one).
    pub fn id(&self) -> (String, String) {
        (self.tuner.clone(), self.key.to_string())
    }
}

/// A result: `{"outcome":{"Ok":{"name","index","computation":{"median":{secs,nanos}…}}}}` or an
/// error naming its candidate.
fn candidate(result: &Value) -> Option<Candidate> {
    let outcome = result.get("outcome")?;
    if let Some(ok) = outcome.get("Ok") {
        let median = ok.pointer("/computation/median")?;
        let nanos =
            median.get("secs")?.as_u64()? * 1_000_000_000 + median.get("nanos")?.as_u64()?;
        return Some(Candidate {
            name: ok.get("name")?.as_str()?.to_string(),
            index: usize::try_from(ok.get("index")?.as_u64()?).ok()?,
            nanos: Some(nanos),
        });
    }
    // An error (`{"Err":{"Skip":{"name":…}}}`) names its candidate but not its index.
    let name = outcome
        .get("Err")?
        .as_object()?
        .values()
        .find_map(|v| v.get("name")?.as_str())?;
    Some(Candidate {
        name: name.to_string(),
        index: usize::MAX,
        nanos: None,
    })
}

/// What the miss policy predicted for one problem, and on what basis.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The candidate predicted to win.
    pub pick: Candidate,
    /// The atlas problem that lent its winner, and how far its key is; `None` when the atlas
    /// holds no problem of this tuner with a winner among these candidates (the pick is then
    /// the first candidate that ran, as the dry device would keep).
    pub neighbour: Option<(Value, f64)>,
}

/// Problems tuned on one card: an autotune cache, as data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Atlas {
    /// Every problem, in file then line order.
    pub entries: Vec<Entry>,
}

impl Atlas {
    /// Reads every `*.json.log` cache file in `dir` (a GPU's cache folder, a dry device's, or
    /// an atlas written by [`Atlas::write`]).
    pub fn read(dir: &Path) -> Result<Atlas, AutotuneError> {
        let mut entries = Vec::new();
        for (name, text) in cache_files(dir)? {
            let tuner = name.trim_end_matches(".json.log");
            entries.extend(text.lines().filter_map(|l| Entry::parse(tuner, l)));
        }
        Ok(Atlas { entries })
    }

    /// Writes the atlas as cache files into `dir` (created), one per tuner.
    pub fn write(&self, dir: &Path) -> Result<(), AutotuneError> {
        let io = |source| AutotuneError::Io {
            path: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut files: BTreeMap<&str, String> = BTreeMap::new();
        for e in &self.entries {
            let text = files.entry(&e.tuner).or_default();
            text.push_str(&e.line());
            text.push('\n');
        }
        for (tuner, text) in files {
            std::fs::write(dir.join(format!("{tuner}.json.log")), text).map_err(io)?;
        }
        Ok(())
    }

    /// The atlas less every problem `other` holds (by tuner and key): the atlas as it would be
    /// had `other`'s model never run.
    pub fn without(&self, other: &Atlas) -> Atlas {
        let held: std::collections::HashSet<_> = other.entries.iter().map(Entry::id).collect();
        Atlas {
            entries: self
                .entries
                .iter()
                .filter(|e| !held.contains(&e.id()))
                .cloned()
                .collect(),
        }
    }

    /// The atlas with `more` added, each replacing a problem of the same tuner and key.
    pub fn with(&self, more: impl IntoIterator<Item = Entry>) -> Atlas {
        let more: Vec<Entry> = more.into_iter().collect();
        let mut atlas = self.without(&Atlas {
            entries: more.clone(),
        });
        atlas.entries.extend(more);
        atlas
    }

    /// Several caches as one: every problem once (the first source's line where two hold it).
    pub fn merge(atlases: impl IntoIterator<Item = Atlas>) -> Atlas {
        let mut seen = std::collections::HashSet::new();
        let mut entries = Vec::new();
        for atlas in atlases {
            for e in atlas.entries {
                if seen.insert(e.id()) {
                    entries.push(e);
                }
            }
        }
        Atlas { entries }
    }

    /// Whether the atlas holds the problem (tuner, key and checksum).
    pub fn holds(&self, e: &Entry) -> bool {
        self.entries
            .iter()
            .any(|a| a.tuner == e.tuner && a.checksum == e.checksum && a.key == e.key)
    }

    /// The miss policy: the GPU's pick for `miss` (a problem tuned on a dry device, whose
    /// candidates it lists), predicted from the nearest problem of the same tuner whose winner
    /// is among `miss`'s candidates.
    pub fn predict(&self, miss: &Entry) -> Prediction {
        let at = flat(&miss.key);
        self.predict_by(miss, None, |_, a| distance_flat(&flat(&a.key), &at))
    }

    /// [`Atlas::predict`] with entry `skip` left out and `distance` (of an entry, by index) given.
    fn predict_by(
        &self,
        miss: &Entry,
        skip: Option<usize>,
        distance: impl Fn(usize, &Entry) -> f64,
    ) -> Prediction {
        let mut near: Vec<(f64, &Entry)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|&(j, a)| {
                Some(j) != skip
                    && a.tuner == miss.tuner
                    && a.checksum == miss.checksum
                    && a.key != miss.key
            })
            .map(|(j, a)| (distance(j, a), a))
            .collect();
        near.sort_by(|x, y| x.0.total_cmp(&y.0));
        for (d, a) in near {
            let Some(won) = a.winner() else { continue };
            if let Some(pick) = miss.ran().find(|c| c.name == won.name) {
                return Prediction {
                    pick: pick.clone(),
                    neighbour: Some((a.key.clone(), d)),
                };
            }
        }
        let first = miss
            .ran()
            .min_by_key(|c| c.index)
            .or(miss.candidates.first())
            .cloned()
            .unwrap_or(Candidate {
                name: "?".into(),
                index: miss.fastest_index,
                nanos: None,
            });
        Prediction {
            pick: first,
            neighbour: None,
        }
    }

    /// Each problem predicted from all the others: how often the policy names the GPU's
    /// winner, per tuner, and which it missed.
    pub fn leave_one_out(&self) -> LeaveOneOut {
        let mut per_tuner: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut missed = Vec::new();
        // Every key flattened once: the distances are all pairs of them.
        let flats: Vec<Flat<'_>> = self.entries.iter().map(|e| flat(&e.key)).collect();
        for (i, e) in self.entries.iter().enumerate() {
            let Some(won) = e.winner() else { continue };
            let predicted = self.predict_by(e, Some(i), |j, _| distance_flat(&flats[j], &flats[i]));
            let tally = per_tuner.entry(e.tuner.clone()).or_default();
            tally.1 += 1;
            if predicted.pick.name == won.name {
                tally.0 += 1;
            } else {
                missed.push((i, predicted.pick.name.clone()));
            }
        }
        LeaveOneOut { per_tuner, missed }
    }
}

/// How far the card agrees with itself: of the problems (tuner and key) that more than one of
/// `sources` tuned, how many were won by different kernels. Autotune keeps the fastest
/// candidate by a timing, and candidates within noise of each other trade places from one
/// tuning to the next, so a pick the card does not repeat cannot be predicted either: this is
/// the ceiling of any miss policy's accuracy.
pub fn retuned<'a>(sources: impl IntoIterator<Item = &'a Atlas>) -> Retuned {
    let mut winners: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for source in sources {
        for e in &source.entries {
            if let Some(w) = e.winner() {
                winners
                    .entry((e.tuner.clone(), e.key.to_string()))
                    .or_default()
                    .push(w.name.clone());
            }
        }
    }
    let again: Vec<&Vec<String>> = winners.values().filter(|w| w.len() > 1).collect();
    Retuned {
        tuned_again: again.len(),
        won_differently: again
            .iter()
            .filter(|w| w.iter().any(|n| *n != w[0]))
            .count(),
    }
}

/// [`retuned`]'s result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retuned {
    /// Problems tuned by more than one source.
    pub tuned_again: usize,
    /// Of those, the problems whose winners differ.
    pub won_differently: usize,
}

/// [`Atlas::leave_one_out`]'s result.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaveOneOut {
    /// Per tuner: problems whose winner was predicted, of those with a winner.
    pub per_tuner: BTreeMap<String, (usize, usize)>,
    /// The problems mispredicted (their index in the atlas) and what was predicted instead.
    pub missed: Vec<(usize, String)>,
}

impl LeaveOneOut {
    /// Problems predicted right, of all.
    pub fn total(&self) -> (usize, usize) {
        self.per_tuner
            .values()
            .fold((0, 0), |(r, n), (a, b)| (r + a, n + b))
    }
}

/// How far apart two keys are: every number on a log₂ scale, every differing word or missing
/// field `WORD_DISTANCE`.
pub fn distance(a: &Value, b: &Value) -> f64 {
    distance_flat(&flat(a), &flat(b))
}

/// A key's leaves by their path.
type Flat<'a> = BTreeMap<String, &'a Value>;

fn flat(v: &Value) -> Flat<'_> {
    let mut out = BTreeMap::new();
    flatten("", v, &mut out);
    out
}

fn distance_flat(fa: &Flat<'_>, fb: &Flat<'_>) -> f64 {
    let mut d = 0.0;
    for (path, va) in fa {
        d += match (va, fb.get(path)) {
            (Value::Number(x), Some(Value::Number(y))) => {
                let log = |n: &serde_json::Number| (n.as_f64().unwrap_or(0.0).abs() + 1.0).log2();
                (log(x) - log(y)).abs()
            }
            (x, Some(y)) if *x == *y => 0.0,
            _ => WORD_DISTANCE,
        };
    }
    d + fb.keys().filter(|p| !fa.contains_key(*p)).count() as f64 * WORD_DISTANCE
}

fn flatten<'a>(prefix: &str, v: &'a Value, out: &mut BTreeMap<String, &'a Value>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                flatten(&format!("{prefix}/{k}"), v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}/{i}"), v, out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(m: u64, k: u64, dtype: &str, winner: (&str, usize), loser: (&str, usize)) -> String {
        format!(
            r#"{{"key":{{"key":{{"m":{m},"k":{k},"elem":"{dtype}"}},"checksum":"c"}},"value":{{"fastest_index":{},"results":[{{"outcome":{{"Ok":{{"name":"{}","index":{},"computation":{{"median":{{"secs":0,"nanos":100}}}}}}}}}},{{"outcome":{{"Ok":{{"name":"{}","index":{},"computation":{{"median":{{"secs":0,"nanos":200}}}}}}}}}},{{"outcome":{{"Err":{{"Skip":{{"name":"never"}}}}}}}}]}}}}"#,
            winner.1, winner.0, winner.1, loser.0, loser.1
        )
    }

    #[test]
    fn a_line_reads_back_with_every_candidate_and_rewrites_only_its_winner() {
        let e = Entry::parse("mm", &line(64, 64, "F32", ("tma", 3), ("simple", 1))).unwrap();
        assert_eq!(e.winner().unwrap().name, "tma");
        assert_eq!(e.candidates.len(), 3);
        assert_eq!(e.ran().count(), 2);
        let other = e.with_pick(1);
        assert_eq!(other.winner().unwrap().name, "simple");
        let back = Entry::parse("mm", &other.line()).unwrap();
        assert_eq!(back, other);
        assert_eq!(back.key, e.key);
        assert!(Entry::parse("mm", "{not json").is_none());
    }

    #[test]
    fn the_nearest_problem_of_the_same_tuner_lends_its_winner() {
        let atlas = Atlas {
            entries: vec![
                Entry::parse("mm", &line(64, 64, "F32", ("small", 1), ("big", 2))).unwrap(),
                Entry::parse("mm", &line(4096, 4096, "F32", ("big", 2), ("small", 1))).unwrap(),
                Entry::parse("mm", &line(4096, 4096, "BF16", ("tensor", 5), ("big", 2))).unwrap(),
                Entry::parse("mm", &line(8192, 4096, "F32", ("big", 2), ("small", 1))).unwrap(),
            ],
        };
        let miss = Entry::parse("mm", &line(2048, 4096, "F32", ("small", 1), ("big", 2))).unwrap();
        let p = atlas.predict(&miss);
        assert_eq!(p.pick.name, "big", "{p:?}");
        assert_eq!(p.neighbour.unwrap().0["m"], 4096);
        // The bf16 problem is nearer in size but its word differs; its winner is no candidate.
        let miss = Entry::parse("mm", &line(100, 64, "F32", ("small", 1), ("big", 2))).unwrap();
        assert_eq!(atlas.predict(&miss).pick.name, "small");
        // Another tuner's problems lend nothing: the first candidate that ran.
        let lone = Entry::parse("conv", &line(64, 64, "F32", ("big", 2), ("small", 1))).unwrap();
        let p = atlas.predict(&lone);
        assert_eq!((p.pick.name.as_str(), p.neighbour), ("small", None));
        // Left out in turn: the two large f32 problems lend each other their winner; the small
        // one and the bf16 one have no neighbour that shares theirs.
        let loo = atlas.leave_one_out();
        assert_eq!(loo.total(), (2, 4), "{loo:?}");
    }

    #[test]
    fn an_atlas_without_a_models_problems_and_with_new_ones_keeps_one_line_per_key() {
        let a = Entry::parse("mm", &line(64, 64, "F32", ("small", 1), ("big", 2))).unwrap();
        let b = Entry::parse("mm", &line(128, 64, "F32", ("small", 1), ("big", 2))).unwrap();
        let atlas = Atlas {
            entries: vec![a.clone(), b.clone()],
        };
        let model = Atlas {
            entries: vec![b.clone()],
        };
        assert_eq!(atlas.without(&model).entries, vec![a.clone()]);
        let repicked = atlas.with([b.with_pick(2)]);
        assert_eq!(repicked.entries.len(), 2);
        assert_eq!(repicked.entries[1].winner().unwrap().name, "big");
        let tmp = tempfile::tempdir().unwrap();
        // A folder not there yet: `write` makes it.
        let dir = tmp.path().join("atlas");
        repicked.write(&dir).unwrap();
        assert_eq!(Atlas::read(&dir).unwrap(), repicked);
    }

    #[test]
    fn a_problem_tuned_twice_counts_when_its_winners_differ() {
        let a = |lines: &[String]| Atlas {
            entries: lines
                .iter()
                .map(|l| Entry::parse("mm", l).unwrap())
                .collect(),
        };
        let first = a(&[
            line(64, 64, "F32", ("tma", 3), ("simple", 1)),
            line(128, 64, "F32", ("tma", 3), ("simple", 1)),
        ]);
        let second = a(&[
            line(64, 64, "F32", ("simple", 1), ("tma", 3)),
            line(128, 64, "F32", ("tma", 3), ("simple", 1)),
            line(256, 64, "F32", ("tma", 3), ("simple", 1)),
        ]);
        let r = retuned(&[first, second]);
        assert_eq!((r.tuned_again, r.won_differently), (2, 1));
    }

    #[test]
    fn distance_counts_sizes_on_a_log_scale_and_words_as_far() {
        let k = |m: u64, e: &str| serde_json::json!({"m": m, "elem": e});
        assert_eq!(distance(&k(63, "F32"), &k(63, "F32")), 0.0);
        assert!((distance(&k(63, "F32"), &k(127, "F32")) - 1.0).abs() < 1e-9);
        assert_eq!(distance(&k(63, "F32"), &k(63, "BF16")), WORD_DISTANCE);
        let missing = serde_json::json!({"m": 63});
        assert_eq!(distance(&k(63, "F32"), &missing), WORD_DISTANCE);
        assert_eq!(distance(&missing, &k(63, "F32")), WORD_DISTANCE);
    }
}
