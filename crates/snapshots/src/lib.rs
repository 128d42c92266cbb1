//! Snapshot checks shared by the crates' integration tests: the expected text lives in a file
//! beside the tests; `UPDATE_SNAPSHOTS=1 cargo test -p CRATE` rewrites the files instead of
//! comparing, and a missing file says how to make it.

pub mod browser;
pub mod fuzz;

use std::path::Path;
use std::process::Output;

/// Compares `actual` with the snapshot at `path` (or writes it, with `UPDATE_SNAPSHOTS`).
pub fn check(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("a writable snapshot folder");
        }
        std::fs::write(path, actual).expect("a writable snapshot");
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|_| {
        panic!(
            "no snapshot at {}; run with UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    similar_asserts::assert_eq!(expected, actual, "snapshot {}", path.display());
}

/// What a command-line run printed, as its snapshot shows it: `$ PROGRAM ARGS`, then stdout;
/// with the exit status and stderr when it failed.
pub fn transcript(program: &str, args: &[&str], out: &Output) -> String {
    let mut s = format!("$ {program} {}\n", args.join(" "));
    s.push_str(&text(&out.stdout));
    if !out.status.success() {
        s.push_str(&format!("[exit {}]\n", out.status.code().unwrap_or(-1)));
        s.push_str(&text(&out.stderr));
    }
    s
}

/// Output bytes as text (the binaries print UTF-8).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// Runs `command` and closes its stdout after the first byte, as `… | head -c 1` would; returns
/// how it ended. A command-line tool should end quietly, with success, when its reader leaves.
pub fn read_one_byte_then_close(command: &mut std::process::Command) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut first = [0u8; 1];
    let mut stdout = child.stdout.take().expect("stdout is piped");
    stdout.read_exact(&mut first).expect("a first byte");
    drop(stdout);
    child.wait_with_output().expect("the binary ends")
}
