//! What a cell's timeout counts: the lesser of the CPU time the cells' process group used and
//! the wall time, so that neither a busy machine nor a cell's own threads use it up early.
//!
//! A busy machine stretches a cell's wall time far more than its work. The book's dry runs hand
//! every launch to CubeCL's device thread and back: on two cores, with three other busy
//! processes, the chapter *Apply it* took 144 s instead of 38 s, while its CPU time went from
//! 59 s to 118 s (`/usr/bin/time` on the exported chapter). A wall-clock timeout killed such a
//! cell in CI. CPU time alone would, the other way round, charge a cell that works on sixteen
//! cores sixteen seconds a second: the lesser of the two is charged.
//!
//! A cell that hangs without working (a deadlock, a read that never returns) uses no CPU, so it
//! is judged by a second rule: stalled, once a whole timeout of wall time passes in which the
//! group used under [`STALLED_SHARE`] of one core. A starved process still gets its fair share
//! (two cores among fifty busy processes: 4 %), so load alone does not look like a stall.
//!
//! Where `/proc` cannot be read (not Linux), the timeout is the wall clock, as before.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Under this share of one core over a whole timeout of wall time, a cell is stalled.
pub(crate) const STALLED_SHARE: f64 = 0.01;

/// How a cell stands against its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within its timeout.
    Running,
    /// It used its timeout's worth of CPU time and of wall time (without `/proc`: of wall time).
    Overran,
    /// A whole timeout of wall time passed with almost no CPU used.
    Stalled,
}

/// One cell's clock, started as the cell starts.
pub(crate) struct CellClock {
    group: u32,
    timeout: Duration,
    started: Instant,
    /// The group's CPU time when the cell started; `None` without `/proc`.
    cpu_at_start: Option<Duration>,
    /// Recent readings (when, CPU time), the oldest at most a timeout back, for the stall rule.
    readings: VecDeque<(Instant, Duration)>,
}

impl CellClock {
    /// The clock of a cell that starts now in process group `group`.
    pub(crate) fn start(group: u32, timeout: Duration) -> CellClock {
        let started = Instant::now();
        let cpu_at_start = group_cpu(group);
        CellClock {
            group,
            timeout,
            started,
            cpu_at_start,
            readings: cpu_at_start.map(|c| (started, c)).into_iter().collect(),
        }
    }

    /// Where the cell stands now.
    pub(crate) fn check(&mut self) -> Verdict {
        let now = Instant::now();
        let (Some(start), Some(cpu)) = (self.cpu_at_start, group_cpu(self.group)) else {
            return verdict_on_wall(now - self.started, self.timeout);
        };
        self.readings.push_back((now, cpu));
        // Keep the newest reading at least a timeout old, so the window spans a whole timeout.
        while self.readings.len() > 1 && now - self.readings[1].0 >= self.timeout {
            self.readings.pop_front();
        }
        let (oldest_at, oldest_cpu) = self.readings[0];
        judge(
            cpu.saturating_sub(start).min(now - self.started),
            now - oldest_at,
            cpu.saturating_sub(oldest_cpu),
            self.timeout,
        )
    }
}

fn verdict_on_wall(wall: Duration, timeout: Duration) -> Verdict {
    if wall >= timeout {
        Verdict::Overran
    } else {
        Verdict::Running
    }
}

/// The verdict from the time charged to the cell, and the CPU time used over the last `window`
/// of wall time (the whole timeout once the cell has run that long).
fn judge(used: Duration, window: Duration, used_in_window: Duration, timeout: Duration) -> Verdict {
    if used >= timeout {
        Verdict::Overran
    } else if window >= timeout
        && used_in_window.as_secs_f64() < STALLED_SHARE * window.as_secs_f64()
    {
        Verdict::Stalled
    } else {
        Verdict::Running
    }
}

/// The CPU time (user and system, its threads and reaped children included) of every process in
/// group `group`; `None` where `/proc` cannot be read.
fn group_cpu(group: u32) -> Option<Duration> {
    let ticks = clock_ticks()?;
    let mut total = 0u64;
    let mut leader_seen = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // A process may end between the listing and the read: it is skipped.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((pgrp, cpu)) = parse_stat(&stat)
            && pgrp == group
        {
            total += cpu;
            leader_seen |= pid == group;
        }
    }
    // Without the leader the reading means nothing (it ended, or /proc hides it).
    leader_seen.then(|| Duration::from_secs_f64(total as f64 / ticks as f64))
}

/// Clock ticks per second, the unit of `/proc/PID/stat`'s times.
fn clock_ticks() -> Option<u64> {
    // SAFETY: sysconf reads a constant of the running system; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0)
}

/// From one `/proc/PID/stat` line: the process group, and utime + stime + cutime + cstime in
/// clock ticks. The command name (field 2) may hold spaces and parentheses: fields are counted
/// from the last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 3.. of proc(5): state is [0], pgrp (5) is [2], utime (14) to cstime (17) are [11..15].
    let pgrp = fields.get(2)?.parse().ok()?;
    let mut cpu = 0u64;
    for field in fields.get(11..15)? {
        // cutime and cstime are signed in proc(5); never negative in practice.
        cpu += u64::try_from(field.parse::<i64>().ok()?).unwrap_or(0);
    }
    Some((pgrp, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 500 0 0 0 \
                    150 30 7 3 20 0 9 0 12345 1000000 200 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((4240, 150 + 30 + 7 + 3)));
        assert_eq!(parse_stat("4242 (cut) S 1 4240"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn a_cell_overruns_on_cpu_time_and_stalls_on_a_quiet_window() {
        let timeout = S(60);
        // Slow on a busy machine: ten minutes of wall time, 30 s of work. Still running.
        assert_eq!(judge(S(30), S(60), S(3), timeout), Verdict::Running);
        // It worked its whole timeout.
        assert_eq!(judge(S(60), S(60), S(6), timeout), Verdict::Overran);
        // A whole timeout with a quarter of a second of CPU: hung.
        let quarter = Duration::from_millis(250);
        assert_eq!(judge(S(5), S(60), quarter, timeout), Verdict::Stalled);
        // The same quiet spell, before a whole timeout has passed: not judged yet.
        assert_eq!(judge(S(5), S(59), quarter, timeout), Verdict::Running);
        assert_eq!(verdict_on_wall(S(59), timeout), Verdict::Running);
        assert_eq!(verdict_on_wall(S(60), timeout), Verdict::Overran);
    }

    #[test]
    fn a_process_group_is_read_where_proc_is() {
        use std::os::unix::process::CommandExt;
        if std::fs::metadata("/proc/self/stat").is_err() {
            return;
        }
        // A group of its own whose leader is alive while it is read: the test's own group
        // may have outlived its leader (a test run started in the background of a shell).
        let mut spinner = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .process_group(0)
            .spawn()
            .expect("sh starts");
        let group = spinner.id();
        let before = group_cpu(group).expect("the spinner leads its own group");
        std::thread::sleep(Duration::from_millis(300));
        let after = group_cpu(group).expect("still there");
        spinner.kill().expect("the spinner stops");
        spinner.wait().expect("the spinner is reaped");
        assert!(after > before, "{before:?} then {after:?} after spinning");
        assert_eq!(group_cpu(u32::MAX), None, "no such group");
    }
}
