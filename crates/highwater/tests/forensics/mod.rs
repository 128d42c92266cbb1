//! Forensics over the fixture logs: each synthetic log reads back as the incident data
//! (`repro/incident/*.toml`) says its real counterpart did.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use highwater::forensics::{
    self, AttemptPhase, FailureGroup, IncidentTable, Reported, parse_reader,
};
use highwater::{Incident, LogForensics, parse_log};

fn logs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs")
}

fn log(name: &str) -> LogForensics {
    let text = std::fs::read_to_string(logs_dir().join(name)).expect("fixture log");
    parse_log(name, &text)
}

fn incident(name: &str) -> Incident {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../repro/incident")
        .join(name.replace(".log", ".toml"));
    let text = std::fs::read_to_string(&path).expect("incident file");
    Incident::parse(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"))
}

/// The log reads back as the incident file records it (sizes the file leaves out are not
/// compared; counts per phase always are), and prints each death as the file words it.
fn agrees_with_incident(name: &str) {
    let f = log(name);
    let want = incident(name);
    assert_eq!(f.attempts, want.attempts, "{name}: attempts");
    assert_eq!(f.died_at, want.died_at, "{name}: died_at");
    assert_eq!(f.truncated, want.truncated, "{name}");
    assert_eq!(f.completed, want.completed, "{name}");
    for g in &want.failures {
        match g.bytes {
            Some(bytes) => {
                let got: &FailureGroup = f
                    .failures
                    .iter()
                    .find(|h| h.bytes == bytes && h.phase == g.phase)
                    .unwrap_or_else(|| panic!("{name}: no group of {bytes} B in {:?}", g.phase));
                assert_eq!(got.count, g.count, "{name}: {bytes} B");
                assert_eq!(got.after_step, g.after_step, "{name}: {bytes} B");
            }
            None => assert_eq!(
                u64::from(f.failure_count(g.phase)),
                want.failure_count(g.phase),
                "{name}"
            ),
        }
    }
    let text = std::fs::read_to_string(logs_dir().join(name)).expect("fixture log");
    for &step in &want.died_at {
        let line = want.death_line(step).expect("a death line");
        assert!(text.lines().any(|l| l == line), "{name}: no line {line:?}");
    }
}

#[test]
fn appended_log_has_two_attempts_and_two_deaths() {
    agrees_with_incident("ab2000_situ_s1.log");
    let f = log("ab2000_situ_s1.log");
    assert_eq!(f.died_at, vec![400, 300]);
    assert_eq!(f.last_step, Some(200));
}

#[test]
fn truncated_log_is_marked_and_keeps_its_init_failures() {
    agrees_with_incident("ab2000_situ_s2.log");
    let f = log("ab2000_situ_s2.log");
    assert!(f.missing_header && f.truncated);
    assert_eq!(f.last_step, None);
    assert_eq!(f.failure_count(AttemptPhase::Run), 0);
}

#[test]
fn single_attempt_death() {
    agrees_with_incident("ab2000_situ_s3.log");
}

#[test]
fn control_arm_fails_only_at_init_and_completes() {
    agrees_with_incident("ab2000_moe_s1.log");
    let f = log("ab2000_moe_s1.log");
    assert_eq!(f.last_step, Some(2000));
    assert!(f.failures.iter().all(|g| g.phase == AttemptPhase::Init));
}

#[test]
fn upstream_cubecl_message_reports_pages() {
    let f = log("upstream_cubecl_0_10.log");
    assert_eq!((f.attempts, f.died_at.as_slice()), (1, &[300][..]));
    assert_eq!(
        f.failures,
        vec![
            FailureGroup {
                bytes: 1 << 30,
                count: 1,
                phase: AttemptPhase::Init,
                after_step: None,
                reported: Reported::Page,
            },
            FailureGroup {
                bytes: 268_435_456,
                count: 3,
                phase: AttemptPhase::Run,
                after_step: Some(200),
                reported: Reported::Page,
            },
        ]
    );
}

#[test]
fn incident_table_of_the_wave() {
    let names = [
        "ab2000_situ_s1.log",
        "ab2000_situ_s2.log",
        "ab2000_situ_s3.log",
        "ab2000_moe_s1.log",
    ];
    let logs: Vec<LogForensics> = names.iter().map(|n| log(n)).collect();
    let rows = forensics::incident_table(&logs);
    assert_eq!(rows[0].attempts, "2 (appended)");
    assert_eq!(rows[0].died_at, "step 400, then step 300");
    assert_eq!(rows[0].failures, "1 GiB ×7, 32 MiB ×104, 64 MiB ×49");
    assert_eq!(
        rows[0].placement,
        "1 GiB before step 0; 32 MiB, 64 MiB after step 200"
    );
    assert_eq!(rows[1].attempts, "≥1 (truncated)");
    assert_eq!(rows[1].died_at, "unknown (before step 0)");
    assert_eq!(
        rows[2].placement,
        "1 GiB before step 0; 32 MiB after step 100"
    );
    assert_eq!(rows[3].died_at, "survived");
    let md = IncidentTable::new(&logs).to_string();
    assert_eq!(md.lines().count(), 2 + names.len());
}

#[test]
fn forensics_is_serializable() {
    let json = serde_json::to_value(log("ab2000_situ_s3.log")).unwrap();
    assert_eq!(json["died_at"][0], 200);
    assert_eq!(json["failures"][1]["phase"], "run");
    assert_eq!(json["failures"][1]["after_step"], 100);
}

#[test]
fn streaming_agrees_with_parse_log_on_every_fixture() {
    for entry in std::fs::read_dir(logs_dir()).expect("the fixture logs") {
        let path = entry.expect("a fixture").path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let file = File::open(&path).expect("fixture log");
        let streamed = parse_reader(&name, BufReader::new(file)).expect("a readable log");
        let whole = log(&name);
        assert_eq!(streamed, whole, "{name}");
        assert_eq!(
            IncidentTable::new(&[streamed]).to_string(),
            IncidentTable::new(&[whole]).to_string()
        );
    }
}

#[test]
fn a_line_that_is_not_utf8_spoils_only_itself() {
    let mut text = std::fs::read(logs_dir().join("ab2000_situ_s3.log")).expect("fixture log");
    // A cut multi-byte character and a stray byte, on a line of their own and inside a
    // failure line, which still counts (its number is ASCII).
    let at = text
        .windows(6)
        .position(|w| w == b"step 0")
        .expect("a step line");
    text.splice(at..at, b"\xe2\x82\n\xff\xfeoops\n".iter().copied());
    text.extend(b"\xc3 failed to reserve 33554432 bytes of device memory\xff\n");
    let tmp = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(tmp.path(), &text).expect("the temporary file written");
    let file = tmp.reopen().expect("the temporary file");
    let f = parse_reader("bad.log", BufReader::new(file)).expect("read lossily");
    let mut want = log("ab2000_situ_s3.log");
    want.name = "bad.log".into();
    want.failures[1].count += 1;
    assert_eq!(f, want);
}
