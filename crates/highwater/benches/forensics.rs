//! Figures: `forensics` over synthetic trainer logs — seconds and MB/s for logs with 10 k,
//! 40 k and 200 k distinct failure sizes (in memory: `parse_log` and the incident table), and
//! for a ~200 MB log streamed from a temporary file, with the process's peak memory
//! (`VmHWM`, reset through `/proc/self/clear_refs` where Linux allows it).
//! `cargo bench -p highwater --bench forensics` (harness-free; prints, asserts only that the
//! logs read back as written).
//!
//! `cargo bench -p highwater --bench forensics -- write PATH DISTINCT` writes one log (for
//! timing the CLI).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::time::Instant;

use highwater::forensics::{IncidentTable, LogForensics, MAX_RECORDS, parse_log, parse_reader};

/// What to write: `distinct` failure sizes in the run phase, `per_block` failures after each
/// step line, at least `min_bytes` of log.
struct Spec {
    distinct: usize,
    per_block: usize,
    min_bytes: usize,
}

/// Writes a log in the fixtures' style (crates/highwater/tests/fixtures/logs): appended
/// attempts of 2000 steps, each with its 1 GiB start-up failures, step lines every 100 steps,
/// eval lines, and run-phase failures in both the patched and the upstream shape. Returns the
/// failure lines written.
fn write_log(w: &mut impl Write, spec: &Spec) -> std::io::Result<u64> {
    const PATCHED: &str =
        "thread 'DSD-0-0' panicked at vendor/cubecl-fix/cubecl-cuda/src/compute/server.rs:144:35:";
    const UPSTREAM: &str = "thread 'DSD-0-0' panicked at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cubecl-cuda-0.10.0/src/compute/server.rs:124:46:";
    const NOTE: &str =
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
    let mut w = CountingWriter { inner: w, bytes: 0 };
    let (mut seed, mut step, mut failure, mut lines) = (0u64, 0u64, 0usize, 0u64);
    loop {
        if step == 0 {
            seed += 1;
            writeln!(
                w,
                "train start: preset=repro/recipes/situ.toml seed={seed} params=9590670 batch=8 seq_len=512 checkpointing: Disabled backend=Device<Cuda(0)>"
            )?;
            writeln!(
                w,
                "building model: 3 experts x 4 iterations, d_model 768, d_ffn 2048"
            )?;
            for _ in 0..10 {
                writeln!(w, "{PATCHED}")?;
                writeln!(
                    w,
                    "failed to reserve 1073741824 bytes of device memory: out of device memory allocating 1073741824 bytes"
                )?;
                writeln!(w, "{NOTE}")?;
                lines += 1;
            }
        }
        let secs = seed * 100_000 + step;
        writeln!(
            w,
            "[2026-10-02T{:02}:{:02}:{:02}Z INFO  train] step {step} | loss {:.4} | lr 3.0e-4 | {} ms/step",
            secs / 3600 % 24,
            secs / 60 % 60,
            secs % 60,
            9.8 - step as f64 * 1e-3,
            400 + step % 37
        )?;
        if step % 500 == 0 {
            writeln!(w, "eval step {step} | window 81920 B | loss 3.05")?;
        }
        for _ in 0..spec.per_block {
            let i = failure % spec.distinct;
            let bytes = (32 << 20) + 4096 * i as u64;
            // Each size keeps one shape, so groups = distinct sizes (+ the 1 GiB init group).
            if i.is_multiple_of(2) {
                writeln!(w, "{PATCHED}")?;
                writeln!(
                    w,
                    "failed to reserve {bytes} bytes of device memory: out of device memory allocating {bytes} bytes"
                )?;
                writeln!(w, "{NOTE}")?;
            } else {
                writeln!(w, "{UPSTREAM}")?;
                writeln!(
                    w,
                    "called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: {bytes}"
                )?;
                writeln!(w, "No backtrace available")?;
                writeln!(
                    w,
                    "[2026-10-02T09:00:01Z WARN  cubecl_common::device::handle::channel] Task failed: Any {{ .. }}"
                )?;
            }
            failure += 1;
            lines += 1;
        }
        step += 100;
        let done = failure >= spec.distinct && w.bytes >= spec.min_bytes;
        if step == 2000 || done {
            writeln!(
                w,
                "[2026-10-02T09:04:00Z ERROR train] train failed: step {step}: device error (loss is not a scalar)"
            )?;
            step = 0;
        }
        if done {
            return Ok(lines);
        }
    }
}

struct CountingWriter<'a, W> {
    inner: &'a mut W,
    bytes: usize,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Checks the log reads back as written.
fn check(f: &LogForensics, spec: &Spec, failures: u64) {
    assert_eq!(f.failures.len(), spec.distinct + 1, "groups");
    let counted: u64 = f.failures.iter().map(|g| u64::from(g.count)).sum();
    assert_eq!(counted, failures, "failure lines");
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

/// Parses and tabulates an in-memory log, printing seconds and MB/s.
fn in_memory(label: &str, spec: &Spec) {
    let mut text = Vec::new();
    let failures = write_log(&mut text, spec).expect("writing to memory");
    let text = String::from_utf8(text).expect("ASCII");
    let t = Instant::now();
    let f = parse_log("bench.log", &text);
    let parse = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let table = IncidentTable::new(std::slice::from_ref(&f)).to_string();
    let tabulate = t.elapsed().as_secs_f64();
    check(&f, spec, failures);
    println!(
        "{label:<28} {:>7.1} MB {:>7} groups: parse_log    {parse:>6.3} s ({:>4.0} MB/s), table {tabulate:.3} s ({} chars)",
        mb(text.len()),
        f.failures.len(),
        mb(text.len()) / parse,
        table.len()
    );
}

/// Peak resident memory since the last reset, in MB (Linux; `None` elsewhere).
fn peak_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024.0 / 1e6)
}

/// Writes a log to a temporary file, then streams it: seconds, MB/s and the process's peak
/// memory while reading (the peak is reset once the file is written).
fn streamed(label: &str, spec: &Spec) {
    let tmp = tempfile::NamedTempFile::new().expect("a temporary file");
    let path = tmp.path();
    let mut file = BufWriter::new(File::create(path).expect("the temporary file"));
    let failures = write_log(&mut file, spec).expect("writing the log");
    file.flush().expect("writing the log");
    drop(file);
    let len = std::fs::metadata(path).expect("the log").len() as usize;
    // Linux ≥ 4.0: "5" resets VmHWM to the current resident size.
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let t = Instant::now();
    let file = File::open(path).expect("the log");
    let f = parse_reader("bench.log", BufReader::with_capacity(1 << 16, file)).expect("a log");
    let secs = t.elapsed().as_secs_f64();
    let peak = match (reset, peak_mb()) {
        (true, Some(p)) => format!("peak RSS {p:.1} MB"),
        (false, Some(p)) => format!("peak RSS {p:.1} MB (writing the log included)"),
        (_, None) => "peak RSS not measured".to_string(),
    };
    check(&f, spec, failures);
    println!(
        "{label:<28} {:>7.1} MB {:>7} groups: parse_reader {secs:>6.3} s ({:>4.0} MB/s), {peak}",
        mb(len),
        f.failures.len(),
        mb(len) / secs,
    );
}

fn spec(distinct: &str, per_block: &str, min_bytes: &str) -> Spec {
    Spec {
        distinct: distinct.parse().expect("DISTINCT: a count"),
        per_block: per_block.parse().expect("PER_BLOCK: a count"),
        min_bytes: min_bytes.parse().expect("MIN_BYTES: a count"),
    }
}

/// Runs `streamed` in a child process, so that its peak memory is its own.
fn streamed_apart(label: &str, s: &Spec) {
    let exe = std::env::current_exe().expect("the bench binary");
    let status = std::process::Command::new(exe)
        .args(["stream", label])
        .args([s.distinct, s.per_block, s.min_bytes].map(|n| n.to_string()))
        .status()
        .expect("the bench binary runs");
    assert!(status.success(), "{label}: {status}");
}

fn main() {
    // `cargo bench` passes `--bench`; `write PATH DISTINCT PER_BLOCK MIN_BYTES` writes one log
    // (for timing the CLI); `stream LABEL DISTINCT PER_BLOCK MIN_BYTES` is one streamed case.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match &args[..] {
        [cmd, path, d, b, m] if cmd == "write" => {
            let mut file = BufWriter::new(File::create(path).expect("PATH"));
            write_log(&mut file, &spec(d, b, m)).expect("writing the log");
            file.flush().expect("writing the log");
            return;
        }
        [cmd, label, d, b, m] if cmd == "stream" => return streamed(label, &spec(d, b, m)),
        _ => {}
    }
    let big = Spec {
        distinct: 64,
        per_block: 4,
        min_bytes: 200_000_000,
    };
    let sizes = |distinct| Spec {
        distinct,
        per_block: 20,
        min_bytes: 0,
    };
    streamed_apart("~200 MB, 64 sizes", &big);
    for distinct in [10_000, 40_000, 200_000] {
        streamed_apart(&format!("{} k sizes", distinct / 1000), &sizes(distinct));
    }
    // The worst a streamed log may hold: MAX_RECORDS groups (the 1 GiB init group is one).
    streamed_apart(
        &format!("{MAX_RECORDS} groups (MAX_RECORDS)"),
        &sizes(MAX_RECORDS - 1),
    );
    in_memory("~200 MB, 64 sizes", &big);
    for distinct in [10_000, 40_000, 200_000] {
        in_memory(&format!("{} k sizes", distinct / 1000), &sizes(distinct));
    }
}
