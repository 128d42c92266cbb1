//! Cache keys: a hash of labelled parts and of files, so that a cell's key changes exactly when
//! something its output depends on does.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A running hash of a cell's inputs.
#[derive(Clone, Default)]
pub(crate) struct KeyHasher(Sha256);

impl KeyHasher {
    /// Adds a labelled part; lengths are hashed too so parts cannot run into each other.
    pub(crate) fn part(&mut self, label: &str, bytes: &[u8]) -> &mut Self {
        self.0.update((label.len() as u64).to_le_bytes());
        self.0.update(label.as_bytes());
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Adds the file `root/path`, or every file under that folder (skipping `target/` and
    /// hidden entries), each by name relative to `root` and the digest of its content (taken from `memo` while the file's size and time are unchanged).
    pub(crate) fn tree_digest(&mut self, root: &Path, path: &Path, memo: &mut Memo) -> &mut Self {
        let files = tree_files(root, path);
        self.part("tree", files.name.as_bytes());
        if files.entries.is_empty() {
            self.part("missing", &[]);
        }
        for (name, file, stamp) in &files.entries {
            let digest = memo.file_digest(file, *stamp);
            self.part(name, digest.as_bytes());
        }
        self
    }

    /// The key: 128 bits of the hash, in hex.
    pub(crate) fn finish(&self) -> String {
        let digest = self.0.clone().finalize();
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}

/// A tree's files in a stable order, each with its name relative to the root.
struct TreeFiles {
    /// The tree's own name, relative to the root.
    name: String,
    /// Each file: name, path, size and time (`None` when it cannot be read).
    entries: Vec<(String, PathBuf, Option<Stamp>)>,
}

fn tree_files(root: &Path, path: &Path) -> TreeFiles {
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
    TreeFiles {
        name: name(&full),
        entries: (files.into_iter())
            .map(|f| (name(&f), Stamp::of(&f), f))
            .map(|(n, s, f)| (n, f, s))
            .collect(),
    }
}

/// A file's size and modification time: what cargo and make trust to say it did not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    len: u64,
    /// Nanoseconds since the Unix epoch.
    modified_ns: u128,
}

impl Stamp {
    fn of(file: &Path) -> Option<Stamp> {
        let meta = std::fs::metadata(file).ok()?;
        let modified = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
        Some(Stamp {
            len: meta.len(),
            modified_ns: modified.as_nanos(),
        })
    }

    /// Changed so recently that another write in the same tick could leave the stamp as it is
    /// (git's "racily clean" files): not worth remembering.
    fn is_recent(self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        now.as_nanos().saturating_sub(self.modified_ns) < RACY_NS
    }
}

const RACY_NS: u128 = 2_000_000_000;

/// What earlier builds already hashed, kept in the cache folder so that a rebuild reads only
/// the files that changed: each file's digest by its stamp. Only what this build used is kept.
/// Losing it costs time, never a wrong key.
#[derive(Default)]
pub(crate) struct Memo {
    path: Option<PathBuf>,
    before: Remembered,
    now: Remembered,
}

#[derive(Default, PartialEq, Serialize, Deserialize)]
struct Remembered {
    /// Digest of each file by path, with the stamp it had.
    files: HashMap<PathBuf, (Stamp, String)>,
}

impl Memo {
    /// The memo kept in `file` (empty if it is missing or unreadable).
    pub(crate) fn open(file: PathBuf) -> Memo {
        let before = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Memo {
            path: Some(file),
            before,
            now: Remembered::default(),
        }
    }

    /// The digest of `file`'s content, read only if its stamp changed.
    fn file_digest(&mut self, file: &Path, stamp: Option<Stamp>) -> String {
        if let Some(stamp) = stamp
            && let Some((seen, digest)) = self.before.files.get(file)
            && *seen == stamp
        {
            let digest = digest.clone();
            self.now
                .files
                .insert(file.to_path_buf(), (stamp, digest.clone()));
            return digest;
        }
        let content = std::fs::read(file).unwrap_or_default();
        let digest = KeyHasher::default().part("content", &content).finish();
        if let Some(stamp) = stamp.filter(|s| !s.is_recent()) {
            self.now
                .files
                .insert(file.to_path_buf(), (stamp, digest.clone()));
        }
        digest
    }

    /// Keeps what this build used, for the next one (atomically: a build running beside this
    /// one sees either memo whole). A rebuild with nothing changed writes nothing.
    pub(crate) fn save(&self) {
        let Some(path) = &self.path else { return };
        if self.now == self.before {
            return;
        }
        let Ok(bytes) = serde_json::to_vec(&self.now) else {
            return;
        };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Best effort: a cache that cannot be written is computed again next time.
        let _ = write_atomically(path, &bytes);
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, renamed over it: a reader (or
/// a build killed mid-write) sees the old file or the new one, never half of one.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The files under `path`. Symbolic links are followed (a `reads:` entry may be one), but each
/// real folder is walked once: a link back up the tree is a loop, not an endless walk.
fn collect_files(path: &Path, out: &mut Vec<PathBuf>) {
    collect_files_once(path, out, &mut HashSet::new());
}

fn collect_files_once(path: &Path, out: &mut Vec<PathBuf>, walked: &mut HashSet<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    // Follows a link; a folder is known by its device and inode (no path resolution per file).
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    if !meta.is_dir() || !walked.insert((meta.dev(), meta.ino())) {
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
        // The folder listing already says what a plain file is: no call per file.
        match entry.file_type() {
            Ok(kind) if kind.is_file() => out.push(entry.path()),
            _ => collect_files_once(&entry.path(), out, walked),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_loop_is_walked_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
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
    }

    /// Sets `file`'s content and its modification time, `secs_ago` whole seconds before the
    /// test's start (0: now).
    fn write_at(file: &Path, content: &str, secs_ago: u64) {
        std::fs::write(file, content).unwrap();
        if secs_ago == 0 {
            return;
        }
        static START: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();
        let start = *START.get_or_init(SystemTime::now);
        let when = start - std::time::Duration::from_secs(secs_ago);
        let f = std::fs::File::options().write(true).open(file).unwrap();
        f.set_modified(when).unwrap();
    }

    #[test]
    fn the_memo_rereads_a_file_only_when_its_stamp_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let (data, memo_file) = (Path::new("data"), dir.join("memo.json"));
        write_at(&dir.join("data/a.txt"), "one", 60);
        let digest = |memo: &mut Memo| KeyHasher::default().tree_digest(dir, data, memo).finish();

        let mut memo = Memo::open(memo_file.clone());
        let first = digest(&mut memo);
        assert_eq!(
            first,
            digest(&mut Memo::default()),
            "the memo changes no digest"
        );
        memo.save();
        // Nothing changed: the memo is not written again (a save renames a new file into
        // place, so a rewrite would show as another inode).
        let written = || {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&memo_file).unwrap().ino()
        };
        let before = written();
        let mut again = Memo::open(memo_file.clone());
        assert_eq!(digest(&mut again), first);
        again.save();
        assert_eq!(written(), before, "an unchanged memo is left as it is");

        // Same size, same time: the memo's digest stands (the content is not read again).
        write_at(&dir.join("data/a.txt"), "two", 60);
        assert_eq!(digest(&mut Memo::open(memo_file.clone())), first);
        // Another time: read again.
        write_at(&dir.join("data/a.txt"), "two", 30);
        let mut memo = Memo::open(memo_file.clone());
        let second = digest(&mut memo);
        assert_ne!(second, first);
        memo.save();
        assert_eq!(digest(&mut Memo::open(memo_file.clone())), second);

        // Written just now: never trusted to the memo.
        write_at(&dir.join("data/a.txt"), "one", 0);
        let mut memo = Memo::open(memo_file.clone());
        assert_eq!(digest(&mut memo), first);
        memo.save();
        write_at(&dir.join("data/a.txt"), "two", 0);
        assert_eq!(digest(&mut Memo::open(memo_file.clone())), second);
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
