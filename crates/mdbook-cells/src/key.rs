//! Cache keys: a hash of labelled parts and of files, so that a cell's key changes exactly when
//! something its output depends on does.

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

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
    /// hidden entries), by name relative to `root` and content; a missing path is hashed as
    /// missing.
    pub(crate) fn tree(&mut self, root: &Path, path: &Path) -> &mut Self {
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

    /// The key: 128 bits of the hash, in hex.
    pub(crate) fn finish(&self) -> String {
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
