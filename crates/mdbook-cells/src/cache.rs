//! The output cache: one JSON file per cell, named by the hash of everything its output
//! depends on. The directory is locked for the whole build so that `mdbook serve` and
//! `mdbook build` running at once take turns instead of corrupting each other.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a cell produced, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub stdout: String,
    pub stderr: String,
    /// The output kind (`cell_output::Output::kind`) or a failure kind (`compile`, `panic`…).
    pub kind: String,
    pub body: String,
}

/// What a cell may return (`cell_output::Output::kind`).
pub const OUTPUT_KINDS: &[&str] = &["nothing", "text", "markdown", "html", "figure", "table"];
/// How a cell may fail: returned an error, or the engine saw it fail.
pub const FAILURE_KINDS: &[&str] = &[
    "error",
    "compile",
    "build",
    "panic",
    "timeout",
    "died",
    "too-large",
];

impl Stored {
    pub fn is_failure(&self) -> bool {
        FAILURE_KINDS.contains(&self.kind.as_str())
    }

    /// Whether the kind is one this engine writes; an entry with another was not made here.
    pub fn kind_is_known(&self) -> bool {
        self.is_failure() || OUTPUT_KINDS.contains(&self.kind.as_str())
    }
}

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

    /// The stored output, if present, whole and of a known kind; any other entry is removed
    /// (and its cell run again).
    pub fn get(&self, key: &str) -> Option<Stored> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice::<Stored>(&bytes) {
            Ok(stored) if stored.kind_is_known() => Some(stored),
            _ => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores atomically: a reader sees the old entry, the new one, or none, never half.
    pub fn put(&self, key: &str, stored: &Stored) -> std::io::Result<()> {
        // A cell may have deleted the folder while it ran (it is blamed for that); the
        // outputs of the others are still worth keeping.
        std::fs::create_dir_all(&self.outputs)?;
        let tmp = self.outputs.join(format!("{key}.tmp"));
        let mut file = File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(stored)?)?;
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

/// A running hash of a cell's inputs.
#[derive(Clone, Default)]
pub struct KeyHasher(Sha256);

impl KeyHasher {
    /// Adds a labelled part; lengths are hashed too so parts cannot run into each other.
    pub fn part(&mut self, label: &str, bytes: &[u8]) -> &mut Self {
        self.0.update((label.len() as u64).to_le_bytes());
        self.0.update(label.as_bytes());
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Adds the file `root/path`, or every file under that folder (skipping `target/` and
    /// hidden entries), by name relative to `root` and content; a missing path is hashed as
    /// missing.
    pub fn tree(&mut self, root: &Path, path: &Path) -> &mut Self {
        let full = root.join(path);
        let mut files = Vec::new();
        collect_files(&full, &mut files);
        files.sort();
        // Names relative to the root: a freeze made in one checkout is current in another.
        let name = |p: &Path| {
            p.strip_prefix(root)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        };
        self.part("tree", name(&full).as_bytes());
        if files.is_empty() {
            self.part("missing", &[]);
        }
        for file in files {
            let content = std::fs::read(&file).unwrap_or_default();
            self.part(&name(&file), &content);
        }
        self
    }

    pub fn finish(&self) -> String {
        let digest = self.0.clone().finalize();
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}

/// The files under `path`. Symbolic links are followed (a `reads:` entry may be one), but each
/// real folder is walked once: a link back up the tree is a loop, not an endless walk.
fn collect_files(path: &Path, out: &mut Vec<PathBuf>) {
    collect_files_once(path, out, &mut HashSet::new());
}

fn collect_files_once(path: &Path, out: &mut Vec<PathBuf>, walked: &mut HashSet<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(real) = path.canonicalize() else {
        return;
    };
    if !walked.insert(real) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        collect_files_once(&entry.path(), out, walked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &str) -> Stored {
        Stored {
            stdout: String::new(),
            stderr: String::new(),
            kind: "text".into(),
            body: body.into(),
        }
    }

    #[test]
    fn round_trip_damage_and_collection() {
        let dir = std::env::temp_dir().join(format!("cells-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::open(&dir).unwrap();
        cache.put("aa", &stored("one")).unwrap();
        cache.put("bb", &stored("two")).unwrap();
        assert_eq!(cache.get("aa"), Some(stored("one")));
        // A truncated entry is discarded, not trusted.
        std::fs::write(dir.join("outputs/bb.json"), "{\"stdout\": \"").unwrap();
        assert_eq!(cache.get("bb"), None);
        assert!(!dir.join("outputs/bb.json").exists());
        // So is one whose kind this engine never writes.
        let mut odd = stored("x");
        odd.kind = "script".into();
        cache.put("bb", &odd).unwrap();
        assert_eq!(cache.get("bb"), None);
        cache.put("cc", &stored("three")).unwrap();
        let removed = cache.retain(&HashSet::from(["cc".to_string()])).unwrap();
        assert_eq!(removed, 1);
        assert_eq!(cache.get("aa"), None);
        assert_eq!(cache.get("cc"), Some(stored("three")));
        drop(cache);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_loop_is_walked_once() {
        let dir = std::env::temp_dir().join(format!("cells-loop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data/sub")).unwrap();
        std::fs::write(dir.join("data/sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(dir.join("data"), dir.join("data/sub/up")).unwrap();
        std::os::unix::fs::symlink("a.txt", dir.join("data/sub/alias.txt")).unwrap();
        let mut files = Vec::new();
        collect_files(&dir.join("data"), &mut files);
        files.sort();
        assert_eq!(
            files,
            [dir.join("data/sub/a.txt"), dir.join("data/sub/alias.txt")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_separate_parts() {
        let a = KeyHasher::default()
            .part("x", b"ab")
            .part("y", b"c")
            .finish();
        let b = KeyHasher::default()
            .part("x", b"a")
            .part("y", b"bc")
            .finish();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
    }
}
