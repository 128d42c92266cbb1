//! Running the compiled cells: a child process for each, so that a cell finds the process as
//! every other cell does (no threads, statics or devices left by the cells before it), and one
//! that hangs (killed at its timeout) or takes the process down (abort, stack overflow, signal)
//! takes only itself. CubeCL's device threads poll forever: one process for the whole book ran
//! with 160 of them idling by the end of *Apply it*, which slowed every cell after them.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::outcome::{FailureKind, Outcome, Stored};
use crate::types::MAX_TIMEOUT_S;

mod clock;

use clock::{CellClock, Verdict};

/// One cell to run.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The cell's module in the generated crate.
    pub(crate) module: String,
    /// How long it may take.
    pub(crate) timeout: Duration,
}

/// What happened when a cell ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ran {
    /// What it printed to standard output (clipped at the output limit).
    pub(crate) stdout: String,
    /// What it printed to standard error (clipped at the output limit).
    pub(crate) stderr: String,
    /// How it ended.
    pub(crate) end: End,
    /// From its start to its end, as the harness reported them.
    pub(crate) elapsed: Duration,
}

/// How a cell's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// The harness's kind and body (see `cell_output::Output`).
    Value {
        /// The kind line the harness wrote.
        kind: String,
        /// The body after it.
        body: String,
    },
    /// It panicked with this message.
    Panicked(String),
    /// It was killed at its timeout: it used that much CPU time, or none for that long.
    TimedOut(Duration, Verdict),
    /// The process died while the cell ran.
    Died(String),
    /// The cell's value (markup) is over the output limit.
    TooLarge(String),
}

impl Ran {
    /// As the cache and freezes keep it; `map_panic` rewrites a panic's location.
    pub(crate) fn into_stored(self, map_panic: impl Fn(&str) -> String) -> Stored {
        let outcome = match self.end {
            End::Value { kind, body } => Outcome::from_parts(&kind, body).unwrap_or_else(|| {
                let kind: String = kind.chars().take(40).collect();
                Outcome::failed(
                    FailureKind::Died,
                    format!("the harness wrote a value of unknown kind `{kind}`"),
                )
            }),
            End::Panicked(msg) => Outcome::failed(FailureKind::Panic, map_panic(&msg)),
            End::TimedOut(t, verdict) => Outcome::failed(
                FailureKind::Timeout,
                match verdict {
                    Verdict::Stalled => format!(
                        "killed: it used almost no CPU for {} s (the cell's timeout); is it \
                         waiting on something that never comes?",
                        t.as_secs()
                    ),
                    _ => format!(
                        "killed after {} s of CPU time (the cell's timeout)",
                        t.as_secs()
                    ),
                },
            ),
            End::Died(why) => Outcome::failed(FailureKind::Died, why),
            End::TooLarge(why) => Outcome::failed(FailureKind::TooLarge, why),
        };
        Stored {
            stdout: self.stdout,
            stderr: self.stderr,
            outcome,
        }
    }
}

/// How long the harness may take to start its cell (process start-up, dynamic linking).
const START_GRACE: Duration = Duration::from_secs(30);

/// Runs `jobs` with the binary built from the cell crate, each in a process of its own (see
/// the module doc); `cwd` is the book root.
pub(crate) fn run_all(
    binary: &Path,
    cwd: &Path,
    results: &Path,
    jobs: &[Job],
    output_limit: usize,
) -> std::io::Result<Vec<(String, Ran)>> {
    std::fs::create_dir_all(results)?;
    let image = std::fs::File::open(binary).ok();
    let program = program(image.as_ref(), binary);
    let mut done = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let ran = match run_one(&program, cwd, results, job, output_limit) {
            Ok(ran) => ran,
            // The binary gone after a cell ran (a cell may have deleted it): the cells left
            // are not run, and say why.
            Err(e) if i > 0 => {
                let why = format!(
                    "not run: the cells' process could not be started again ({e}); did an \
                     earlier cell delete {}?",
                    binary.display()
                );
                for job in &jobs[i..] {
                    done.push((
                        job.module.clone(),
                        Ran {
                            stdout: String::new(),
                            stderr: String::new(),
                            end: End::Died(why.clone()),
                            elapsed: Duration::ZERO,
                        },
                    ));
                }
                break;
            }
            Err(e) => return Err(e),
        };
        done.push((job.module.clone(), ran));
    }
    Ok(done)
}

/// Runs one cell in a process of its own, in its own process group: whatever the cell starts
/// dies with it once its files are collected.
fn run_one(
    program: &Path,
    cwd: &Path,
    results: &Path,
    job: &Job,
    output_limit: usize,
) -> std::io::Result<Ran> {
    let harness_stderr = results.join("harness.stderr");
    let mut command = Command::new(program);
    command
        .arg(results)
        .arg(&job.module)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&harness_stderr)?)
        .process_group(0);
    let max_file = file_size_limit(output_limit);
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs between fork and
    // exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: max_file,
                rlim_max: max_file,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A write past the limit fails (EFBIG) instead of killing the process.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    let lines = status_lines(&mut child);
    let started = wait_for(&lines, &format!("start {}", job.module), START_GRACE);
    let clock = Instant::now();
    let end = match started {
        Wait::Seen => {
            let mut cell = CellClock::start(child.id(), job.timeout);
            wait_for_end(&lines, &format!("end {}", job.module), &mut cell)
        }
        other => other,
    };
    let files = Files::new(results, &job.module, output_limit, clock.elapsed());
    // The group goes first, then the child is reaped: reaped first, its pid (the group's id)
    // could be another process's by the time the group is killed.
    let status = end_group(&mut child);
    Ok(match end {
        Wait::Seen => files.finished(),
        Wait::Timeout(verdict) => files.ended(End::TimedOut(job.timeout, verdict)),
        Wait::Closed => {
            let stderr = std::fs::read(&harness_stderr).unwrap_or_default();
            let stderr = clip(stderr, output_limit);
            let why = match status {
                Some(status) => describe_exit(status, &stderr),
                None => format!("the cell process ended\n{stderr}"),
            };
            files.ended(End::Died(why))
        }
    })
}

/// What to start a cell's process from: the binary's open file `image` where `/proc` names it,
/// so that a cell that deletes the binary (or the whole cache) harms only itself; else its path.
fn program(image: Option<&std::fs::File>, binary: &Path) -> PathBuf {
    match image {
        Some(file) if Path::new("/proc/self/fd").is_dir() => {
            use std::os::fd::AsRawFd;
            PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
        }
        _ => binary.to_path_buf(),
    }
}

/// Bytes any file the cells' process writes may reach: the output limit, plus room for a
/// value's kind line and for telling "at the limit" from "past it".
fn file_size_limit(output_limit: usize) -> u64 {
    (output_limit as u64).saturating_add(FILE_SLACK)
}

const FILE_SLACK: u64 = 4096;

/// Kills the cell's process and everything it started (its process group), then reaps it:
/// its exit status, if it had exited on its own before the kill, or the kill's.
fn end_group(child: &mut Child) -> Option<std::process::ExitStatus> {
    // SAFETY: a plain kill(2) of the group this module created with the child's pid as id;
    // the child is not reaped yet, so that id is still its group's.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    child.wait().ok()
}

enum Wait {
    Seen,
    Timeout(Verdict),
    Closed,
}

/// Waits on the wall clock, for what takes no work of the cell's (the harness starting it).
fn wait_for(lines: &Receiver<String>, expected: &str, timeout: Duration) -> Wait {
    let deadline = Instant::now() + timeout.min(Duration::from_secs(MAX_TIMEOUT_S));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line == expected => return Wait::Seen,
            Ok(_) => continue,
            Err(RecvTimeoutError::Timeout) => return Wait::Timeout(Verdict::Overran),
            Err(RecvTimeoutError::Disconnected) => return Wait::Closed,
        }
    }
}

/// How often a running cell's clock is read.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Waits for a cell to end, on its clock (see [`clock`]): a busy machine does not time it out.
fn wait_for_end(lines: &Receiver<String>, expected: &str, cell: &mut CellClock) -> Wait {
    loop {
        match lines.recv_timeout(CHECK_EVERY) {
            Ok(line) if line == expected => return Wait::Seen,
            Ok(_) => continue,
            Err(RecvTimeoutError::Timeout) => match cell.check() {
                Verdict::Running => continue,
                verdict => return Wait::Timeout(verdict),
            },
            Err(RecvTimeoutError::Disconnected) => return Wait::Closed,
        }
    }
}

/// The harness's status channel, line by line, on a thread so that waits can time out.
fn status_lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn describe_exit(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (_, Some(sig)) => format!("the cell process was killed by signal {sig}"),
        (Some(code), _) => format!("the cell process exited with status {code}"),
        _ => "the cell process ended".to_string(),
    };
    let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    if tail.is_empty() {
        how
    } else {
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("{how}\n{}", tail.join("\n"))
    }
}

struct Files {
    base: PathBuf,
    limit: usize,
    elapsed: Duration,
}

impl Files {
    fn new(results: &Path, module: &str, limit: usize, elapsed: Duration) -> Files {
        Files {
            base: results.join(module),
            limit,
            elapsed,
        }
    }

    fn read(&self, ext: &str) -> Option<String> {
        let path = self.base.with_extension(ext);
        let file = std::fs::File::open(&path).ok()?;
        let mut bytes = Vec::new();
        // Read one byte past the limit to know whether there was more.
        file.take(self.limit as u64 + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        let _ = std::fs::remove_file(&path);
        Some(clip(bytes, self.limit))
    }

    fn ended(&self, end: End) -> Ran {
        Ran {
            stdout: self.read("stdout").unwrap_or_default(),
            stderr: self.read("stderr").unwrap_or_default(),
            end,
            elapsed: self.elapsed,
        }
    }

    fn finished(&self) -> Ran {
        let path = self.base.with_extension("value");
        let value = std::fs::File::open(&path).ok().and_then(|file| {
            let mut bytes = Vec::new();
            file.take(file_size_limit(self.limit))
                .read_to_end(&mut bytes)
                .ok()?;
            let _ = std::fs::remove_file(&path);
            Some(bytes)
        });
        let value = value.as_deref().and_then(|v| {
            let at = v.iter().position(|b| *b == b'\n')?;
            Some((String::from_utf8_lossy(&v[..at]).into_owned(), &v[at + 1..]))
        });
        let end = match value {
            Some((kind, msg)) if kind == "panic" => {
                End::Panicked(clip(msg.to_vec(), self.limit) + &past_the_limit(msg, self.limit))
            }
            // Text is shown escaped: cut, it is still text.
            Some((kind, body)) if kind == "text" => End::Value {
                kind,
                body: clip(body.to_vec(), self.limit),
            },
            // Markup cut anywhere could end inside a tag or an attribute: refused whole.
            Some((kind, body)) if body.len() > self.limit => End::TooLarge(format!(
                "the cell's {kind} output is over the book's output-limit of {} bytes; make it \
                 smaller, or raise `output-limit` under [preprocessor.cells]",
                self.limit
            )),
            Some((kind, body)) => End::Value {
                kind,
                body: String::from_utf8_lossy(body).into_owned(),
            },
            None => End::Died("the cell ran but left no result".into()),
        };
        self.ended(end)
    }
}

/// Why a write failed, when a panic says a file grew past the process's size limit.
fn past_the_limit(panic: &[u8], limit: usize) -> String {
    let efbig = String::from_utf8_lossy(panic).contains("(os error 27)");
    if efbig {
        format!(
            "\n(the cell wrote more than the book's output-limit of {limit} bytes to one file; \
             writes past it fail, so a runaway print cannot fill the disk)"
        )
    } else {
        String::new()
    }
}

/// Bytes to text: invalid UTF-8 shown lossily, anything past `limit` cut (on a character
/// boundary) with a note.
pub(crate) fn clip(mut bytes: Vec<u8>, limit: usize) -> String {
    let cut = bytes.len() > limit;
    bytes.truncate(limit);
    if cut && let Err(e) = std::str::from_utf8(&bytes) {
        // A character split by the cut is dropped, not shown as a replacement character.
        if e.error_len().is_none() {
            bytes.truncate(e.valid_up_to());
        }
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if cut {
        text.push_str(&format!(
            "\n… output cut at {limit} bytes (the cell printed more)"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_is_lossy_and_notes_the_cut() {
        assert_eq!(clip(b"ok\xff".to_vec(), 10), "ok\u{fffd}");
        let text = clip(vec![b'a'; 20], 5);
        assert!(text.starts_with("aaaaa\n… output cut at 5 bytes"));
        // "é" is two bytes: cut after its first, it goes whole.
        let text = clip("aé…".as_bytes().to_vec(), 2);
        assert!(text.starts_with("a\n… output cut"), "{text}");
    }
}
