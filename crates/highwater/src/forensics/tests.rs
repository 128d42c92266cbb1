//! Unit tests of the line grammar, the reader and the incident rows.

use super::line::{Line, classify};
use super::table::exact_bytes;
use super::*;

const MIB32: u64 = 33_554_432;

#[test]
fn classifies_the_seed_lines() {
    assert_eq!(
        classify(
            "failed to reserve 33554432 bytes of device memory: out of device memory \
             allocating 33554432 bytes"
        ),
        Line::Failure {
            bytes: MIB32,
            reported: Reported::Requested
        }
    );
    assert_eq!(
        classify("train failed: step 300: device error (loss is not a scalar)"),
        Line::Death(Some(300))
    );
    assert_eq!(
        classify(
            "thread 'DSD-0-0' panicked at vendor/cubecl-fix/cubecl-cuda/src/compute/server.rs:144:35:"
        ),
        Line::Other
    );
}

#[test]
fn classifies_upstream_cubecl() {
    assert_eq!(
        classify(
            "called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: \
             268435456"
        ),
        Line::Failure {
            bytes: 268_435_456,
            reported: Reported::Page
        }
    );
    // The caught panic's log line carries no size and is not a second failure.
    assert_eq!(
        classify(
            "[2026-09-30T10:00:00Z WARN  cubecl_common::device::handle::channel] Task failed: Any { .. }"
        ),
        Line::Other
    );
}

#[test]
fn step_lines_and_their_lookalikes() {
    assert_eq!(
        classify("step 100 | loss 3.21 | lr 3.0e-4"),
        Line::Step(100)
    );
    assert_eq!(
        classify("[12:00:01 INFO train] step 0 | loss 9.8"),
        Line::Step(0)
    );
    assert_eq!(classify("step 7"), Line::Step(7));
    assert_eq!(classify("eval step 500 | window 81920 B"), Line::Other);
    assert_eq!(classify("steps 100"), Line::Other);
    assert_eq!(classify("step 12abc"), Line::Other);
    assert_eq!(classify("train start: preset=x.toml"), Line::Header);
    assert_eq!(classify("train done: 2000 steps"), Line::Done);
    // `highwater rerun` right-aligns the step; its death line repeats the first refusal's
    // message, which is not one more refusal (Table 10.3 once counted 25 of the log's 24).
    assert_eq!(classify("step    10/100 | loss 3.2"), Line::Step(10));
    assert_eq!(
        classify(
            "step     1/100 | died in forward: called `Result::unwrap()` on an `Err` value: \
             can't allocate buffer of size: 36647936 | 24 failed reserves, pages 35 MiB"
        ),
        Line::Step(1)
    );
}

#[test]
fn phases_reset_with_each_attempt() {
    let log = "train start: a\n\
               failed to reserve 1073741824 bytes of device memory\n\
               step 0 | loss 9\n\
               step 100 | loss 8\n\
               failed to reserve 33554432 bytes of device memory\n\
               train failed: step 200: device error (loss is not a scalar)\n\
               train start: b\n\
               failed to reserve 1073741824 bytes of device memory\n\
               step 0 | loss 9\n\
               failed to reserve 33554432 bytes of device memory\n\
               train failed: step 100: device error (loss is not a scalar)\n";
    let f = parse_log("x.log", log);
    assert_eq!(f.attempts, 2);
    assert_eq!(f.died_at, vec![200, 100]);
    assert!(!f.truncated);
    assert_eq!(f.failure_count(AttemptPhase::Init), 2);
    assert_eq!(f.failure_count(AttemptPhase::Run), 2);
    // The group keeps the step line before its first failure.
    let run = f
        .failures
        .iter()
        .find(|g| g.phase == AttemptPhase::Run)
        .unwrap();
    assert_eq!(run.after_step, Some(100));
}

#[test]
fn headless_and_unfinished_logs_are_truncated() {
    let f = parse_log("cut.log", "failed to reserve 1073741824 bytes\n");
    assert!(f.truncated && f.missing_header);
    assert_eq!(f.attempts, 1);
    let f = parse_log("cut.log", "train start: x\nstep 0 | loss 1\n");
    assert!(f.truncated && !f.missing_header);
    let f = parse_log(
        "ok.log",
        "train start: x\nstep 0 | loss 1\ntrain done: 1 steps\n",
    );
    assert!(!f.truncated && f.completed);
    let f = parse_log("empty.log", "");
    assert_eq!((f.attempts, f.truncated), (0, false));
}

#[test]
fn many_distinct_sizes_count_and_keep_their_order() {
    // 20 000 sizes, each failing twice after step 0 and once before it: linear, so cheap.
    const N: u64 = 20_000;
    let mut log = String::from("train start: x\n");
    for i in 0..N {
        log.push_str(&format!("failed to reserve {} bytes\n", 4096 * (i + 1)));
    }
    log.push_str("step 0 | loss 1\n");
    for round in 0..2 {
        for i in 0..N {
            let bytes = 4096 * (i + 1);
            match round {
                0 => log.push_str(&format!("failed to reserve {bytes} bytes\n")),
                _ => log.push_str(&format!("can't allocate buffer of size: {bytes}\n")),
            }
        }
    }
    log.push_str("train failed: step 0: device error\n");
    let f = parse_log("many.log", &log);
    assert_eq!(f.failures.len(), 3 * N as usize);
    assert!(f.failures.iter().all(|g| g.count == 1));
    let (init, run) = f.failures.split_at(N as usize);
    assert!(init.iter().all(|g| g.phase == AttemptPhase::Init));
    assert!(run.iter().all(|g| g.after_step == Some(0)));
    assert!(
        init.iter()
            .enumerate()
            .all(|(i, g)| g.bytes == 4096 * (i as u64 + 1))
    );
    assert_eq!(run[N as usize].reported, Reported::Page);
    let row = IncidentRow::of(&f);
    // Each size once per place, though it failed in two shapes there.
    let place = |p: &str| row.placement.split("; ").find(|s| s.ends_with(p)).unwrap();
    assert_eq!(place("after step 0").matches(", ").count(), N as usize - 1);
    assert!(row.placement.starts_with("4 KiB, 8 KiB, 12 KiB, "));
    assert_eq!(row.failures.matches(" ×1").count(), 3 * N as usize);
}

#[test]
fn limits_name_themselves() {
    let log = "failed to reserve 1 bytes\nfailed to reserve 2 bytes\n\
               failed to reserve 1 bytes\nfailed to reserve 3 bytes\n";
    let mut r = LogReader::new("cap.log").with_limit(2);
    let err = r.read(log.as_bytes()).unwrap_err().to_string();
    assert_eq!(
        err,
        "cap.log:4: more than 2 distinct failed reserves (size, phase, message shape); \
         forensics keeps at most MAX_RECORDS (2) per log"
    );
    let deaths = "train failed: step 1: x\n".repeat(3);
    let err = parse_reader_limited(&deaths, 2).unwrap_err().to_string();
    assert!(err.starts_with("d.log:3: more than 2 deaths;"), "{err}");
    // At the limit is fine.
    assert_eq!(parse_reader_limited(&deaths, 3).unwrap().died_at, [1, 1, 1]);
}

fn parse_reader_limited(text: &str, limit: usize) -> Result<LogForensics, ForensicsError> {
    let mut r = LogReader::new("d.log").with_limit(limit);
    r.read(text.as_bytes())?;
    Ok(r.finish())
}

#[test]
fn overlong_lines_are_cut_and_counted() {
    let mut log = b"train start: x\n".to_vec();
    // A line of exactly the limit is whole; one past it loses its tail (and the failure
    // in it); the lines after both read as usual.
    log.extend(vec![b'x'; MAX_LINE_BYTES]);
    log.push(b'\n');
    log.extend(vec![b'x'; MAX_LINE_BYTES]);
    log.extend(b" failed to reserve 7 bytes\n");
    log.extend(b"failed to reserve 1024 bytes\ntrain done: 1 steps");
    let mut r = LogReader::new("long.log");
    r.read(log.as_slice()).unwrap();
    assert_eq!((r.lines(), r.clipped_lines()), (5, 1));
    let f = r.finish();
    assert_eq!(f.failures.len(), 1);
    assert_eq!(f.failures[0].bytes, 1024);
    assert!(f.completed && !f.truncated);
}

#[test]
fn exact_sizes() {
    assert_eq!(exact_bytes(1 << 30), "1 GiB");
    assert_eq!(exact_bytes(MIB32), "32 MiB");
    assert_eq!(exact_bytes(81_920), "80 KiB");
    assert_eq!(exact_bytes(1000), "1000 B");
    assert_eq!(exact_bytes(0), "0 B");
}

#[test]
fn rows_say_it_in_words() {
    let log = "train start: a\n\
               failed to reserve 1073741824 bytes\n\
               step 0 | loss 9\n\
               step 100 | loss 8\n\
               can't allocate buffer of size: 268435456\n\
               train failed: step 200: device error (loss is not a scalar)\n";
    let row = IncidentRow::of(&parse_log("a.log", log));
    assert_eq!(row.attempts, "1");
    assert_eq!(row.died_at, "step 200");
    assert_eq!(row.failures, "1 GiB ×1, 256 MiB (page) ×1");
    assert_eq!(row.placement, "1 GiB before step 0; 256 MiB after step 100");
}
