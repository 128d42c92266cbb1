//! The `main` of a generated cell crate: runs the one cell named on the command line, in a
//! process of its own (the preprocessor starts one per cell).
//!
//! Protocol with the preprocessor (the parent):
//! - argv: `RESULTS_DIR ID`;
//! - on the process's original stdout, one line `start ID` before the cell and `end ID` after
//!   it, so the parent can time the cell and tell a finished cell from a process that died;
//! - the cell reads /dev/null;
//! - `RESULTS_DIR/ID.stdout` and `ID.stderr` (the cell's file descriptors 1 and 2 are
//!   redirected there, so output of libraries and child processes is captured too) and
//!   `ID.value`: the output kind on the first line, its body after (`panic` for a panic);
//! - the parent bounds the size of every file this process writes (`RLIMIT_FSIZE`, with
//!   `SIGXFSZ` ignored): a write past it fails, and `print!` panics with "File too large".

use crate::Output;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Mutex;

/// A cell as the generated crate lists it.
pub type Cell = (&'static str, fn() -> Output);

static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Runs the cell named in `std::env::args()` and exits.
pub fn main(cells: &[Cell]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, id] = &args[..] else {
        eprintln!("usage: cells RESULTS_DIR ID");
        std::process::exit(2);
    };
    let dir = Path::new(dir);
    // Close-on-exec copies (std duplicates with F_DUPFD_CLOEXEC): a process the cell leaves
    // running must not hold the status channel open, or the parent could not see this process
    // die.
    let (Ok(status), Ok(err)) = (
        std::io::stdout().as_fd().try_clone_to_owned(),
        std::io::stderr().as_fd().try_clone_to_owned(),
    ) else {
        eprintln!("cells: cannot duplicate stdout/stderr");
        std::process::exit(2);
    };
    let mut status = File::from(status);

    panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "Box<dyn Any>".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{msg}{at}"));
    }));

    let _ = writeln!(status, "start {id}");
    let _ = status.flush();
    let (kind, body) = match cells.iter().find(|(name, _)| name == id) {
        Some((_, run)) => run_one(dir, id, *run, err.as_raw_fd()),
        None => ("error".into(), format!("no cell named {id} in this crate")),
    };
    let value = format!("{kind}\n{body}");
    if let Err(e) = std::fs::write(dir.join(format!("{id}.value")), value) {
        let _ = writeln!(status, "fail {id} {e}");
    }
    let _ = writeln!(status, "end {id}");
    let _ = status.flush();
}

fn run_one(dir: &Path, id: &str, run: fn() -> Output, err_fd: i32) -> (String, String) {
    // An earlier cell may have deleted the folder (it is blamed for that, not this cell).
    let _ = std::fs::create_dir_all(dir);
    let redirect = |name: &str, fd: i32| -> std::io::Result<File> {
        let file = File::create(dir.join(format!("{id}.{name}")))?;
        // SAFETY: points fd 1 or 2 at a file we own; restored below.
        if unsafe { libc::dup2(file.as_raw_fd(), fd) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(file)
    };
    let files = (redirect("stdout", 1), redirect("stderr", 2));
    let result = panic::catch_unwind(AssertUnwindSafe(run));
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: restores fd 2 from our saved copy; fd 1 goes back to /dev/null-like silence by
    // pointing it at stderr's copy, since the parent reads only the status channel.
    unsafe {
        libc::dup2(err_fd, 1);
        libc::dup2(err_fd, 2);
    }
    if let (Err(e), _) | (_, Err(e)) = &files {
        return ("error".into(), format!("cannot capture output: {e}"));
    }
    if !dir.is_dir() {
        let _ = std::fs::create_dir_all(dir);
        return (
            "error".into(),
            format!(
                "the cell deleted {} (or a folder above it), where the engine keeps the cells' \
                 outputs; its own output is lost",
                dir.display()
            ),
        );
    }
    match result {
        Ok(output) => (output.kind().into(), output.body().into()),
        Err(_) => {
            let msg = PANIC.lock().unwrap_or_else(|e| e.into_inner()).take();
            ("panic".into(), msg.unwrap_or_else(|| "panicked".into()))
        }
    }
}
