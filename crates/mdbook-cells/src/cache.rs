//! The output cache: one JSON file per cell, named by the hash of everything its output
//! depends on. The directory is locked for the whole build so that `mdbook serve` and
//! `mdbook build` running at once take turns instead of corrupting each other.

use crate::outcome::Stored;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One cached outcome, and how long the run that made it took (for the execution report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What the cell produced.
    #[serde(flatten)]
    pub stored: Stored,
    /// The run's wall time, in milliseconds (absent in entries of older engines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_ms: Option<u64>,
    /// When the run was (UTC; absent in entries of older engines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computed: Option<String>,
}

impl Entry {
    /// An outcome of a run that ended now, and the time it took.
    pub fn new(stored: Stored, ran: Duration) -> Entry {
        Entry {
            stored,
            ran_ms: Some(millis(ran)),
            computed: Some(provenance::utc_now()),
        }
    }
}

/// A duration in whole milliseconds, as entries keep it.
pub fn millis(t: Duration) -> u64 {
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}

/// The output cache: a locked folder of entries.
pub struct Cache {
    outputs: PathBuf,
    _lock: File,
}

impl Cache {
    /// Opens (creating) the cache under `dir`, waiting for any other build holding it.
    pub fn open(dir: &Path) -> std::io::Result<Cache> {
        let outputs = dir.join("outputs");
        std::fs::create_dir_all(&outputs)?;
        let lock = File::create(dir.join("lock"))?;
        lock.lock()?;
        Ok(Cache {
            outputs,
            _lock: lock,
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.outputs.join(format!("{key}.json"))
    }

    /// The stored output, if present, whole and of a known kind (parsing checks it); any other
    /// entry is removed (and its cell run again).
    pub fn get(&self, key: &str) -> Option<Entry> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice::<Entry>(&bytes) {
            Ok(entry) => Some(entry),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores atomically: a reader sees the old entry, the new one, or none, never half.
    pub fn put(&self, key: &str, entry: &Entry) -> std::io::Result<()> {
        // A cell may have deleted the folder while it ran (it is blamed for that); the
        // outputs of the others are still worth keeping.
        std::fs::create_dir_all(&self.outputs)?;
        let tmp = self.outputs.join(format!("{key}.tmp"));
        let mut file = File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(entry)?)?;
        file.sync_data()?;
        std::fs::rename(tmp, self.path(key))
    }

    /// Removes every entry not in `live` (stale outputs of edited or deleted cells).
    pub fn retain(&self, live: &HashSet<String>) -> std::io::Result<usize> {
        let mut removed = 0;
        let entries = match std::fs::read_dir(&self.outputs) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            entries => entries?,
        };
        for entry in entries {
            let path = entry?.path();
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let keep = path.extension().is_some_and(|e| e == "json") && live.contains(stem);
            if !keep {
                std::fs::remove_file(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::outcome::{Outcome, OutputKind};

    fn stored(body: &str) -> Entry {
        let stored = Stored::of(Outcome::Value {
            kind: OutputKind::Text,
            body: body.into(),
        });
        Entry::new(stored, Duration::from_millis(1500))
    }

    #[test]
    fn round_trip_damage_and_collection() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let cache = Cache::open(dir).unwrap();
        // One entry, put then read back: a second `stored("one")` could be dated a second later.
        let one = stored("one");
        cache.put("aa", &one).unwrap();
        cache.put("bb", &stored("two")).unwrap();
        assert_eq!(cache.get("aa"), Some(one));
        assert_eq!(cache.get("aa").unwrap().ran_ms, Some(1500));
        assert!(
            cache
                .get("aa")
                .unwrap()
                .computed
                .is_some_and(|d| d.ends_with('Z'))
        );
        // An entry of an engine that kept no time still reads.
        let old = r#"{"stdout":"","stderr":"","kind":"text","body":"x"}"#;
        std::fs::write(dir.join("outputs/old.json"), old).unwrap();
        assert_eq!(cache.get("old").unwrap().ran_ms, None);
        // A truncated entry is discarded, not trusted.
        std::fs::write(dir.join("outputs/bb.json"), "{\"stdout\": \"").unwrap();
        assert_eq!(cache.get("bb"), None);
        assert!(!dir.join("outputs/bb.json").exists());
        // So is one whose kind this engine never writes.
        let odd = r#"{"stdout":"","stderr":"","kind":"script","body":"x"}"#;
        std::fs::write(dir.join("outputs/bb.json"), odd).unwrap();
        assert_eq!(cache.get("bb"), None);
        cache.put("cc", &stored("three")).unwrap();
        let removed = cache.retain(&HashSet::from(["cc".to_string()])).unwrap();
        assert_eq!(removed, 2, "aa and old");
        assert_eq!(cache.get("aa"), None);
        assert_eq!(cache.get("cc"), Some(stored("three")));
    }
}
