//! `highwater replay`: real PyTorch snapshots replayed under the caps real PyTorch ran them
//! under, and files that are not snapshots.

use super::*;

const PROGRAMS: &str = "repro/results/pytorch/programs";

/// Will it fit? The GPT program's snapshot on what the 90 % cap allowed: the request and the
/// message real PyTorch raised (`gpt--default--cap90.json`).
#[test]
fn replay_names_the_request_refused_and_the_message() {
    let snapshot = format!("{PROGRAMS}/gpt--default--uncapped.pickle.xz");
    let args = ["replay", &snapshot, "--free", "1596771532"];
    let out = ok_snapshot("replay-gpt-cap90", &args);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Step 2, request 121 of 507: 128.00 MiB from loss_of"));
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(PROGRAMS).join("gpt--default--cap90.json")).unwrap(),
    )
    .unwrap();
    let real = record["oom"]["message"].as_str().unwrap();
    let from = |m: &str| m[m.find("Of the allocated memory").unwrap()..].to_string();
    assert!(
        stdout.contains(&from(real)),
        "the message from 'Of the allocated memory' on"
    );
}

/// Every capped run of the three programs, predicted from the uncapped snapshot of its
/// layout: fits or not, the step refused, what it tried and the message's figures.
#[test]
fn replay_predicts_every_capped_program_run_of_real_pytorch() {
    let mut refused = 0;
    for program in ["gpt", "cnn", "varlen"] {
        for layout in ["default", "expandable"] {
            let snapshot = format!("{PROGRAMS}/{program}--{layout}--uncapped.pickle.xz");
            for cap in ["cap60", "cap80", "cap90", "cap95", "cap100"] {
                let name = format!("{program}--{layout}--{cap}");
                let record: Value = serde_json::from_str(
                    &std::fs::read_to_string(root().join(PROGRAMS).join(format!("{name}.json")))
                        .unwrap(),
                )
                .unwrap();
                let allowed = record["allowed"].as_u64().unwrap().to_string();
                let out = highwater(&["replay", &snapshot, "--free", &allowed, "--json"]);
                assert!(out.status.success(), "{name}: {}", text(&out.stderr));
                let report: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
                let model = &report["settings"][0];
                let torch = &record["oom"];
                assert_eq!(model["fits"].as_bool().unwrap(), torch.is_null(), "{name}");
                if torch.is_null() {
                    continue;
                }
                refused += 1;
                let refusal = &model["refused"];
                assert_eq!(refusal["step"], torch["step"], "{name}");
                let real = torch["message"].as_str().unwrap();
                let ours = refusal["message"].as_str().unwrap();
                let tried = |m: &str| {
                    let t = &m[m.find("Tried").unwrap()..];
                    t[..t.find(". ").unwrap()].to_string()
                };
                let figures = |m: &str| m[m.find("Of the allocated memory").unwrap()..].to_string();
                assert_eq!(tried(ours), tried(real), "{name}");
                assert_eq!(figures(ours), figures(real), "{name}");
            }
        }
    }
    assert_eq!(refused, 11);
}

/// Twenty files that are not a snapshot this reader replays: each exits 1 with one message
/// naming the file and what is wrong, and none panics.
#[test]
fn files_that_are_not_snapshots_get_a_clear_error() {
    let dir = scratch("replay");
    let real = {
        let mut raw = Vec::new();
        let xz =
            std::fs::read(root().join(PROGRAMS).join("cnn--default--cap60.pickle.xz")).unwrap();
        lzma_rs::xz_decompress(&mut xz.as_slice(), &mut raw).unwrap();
        raw
    };
    let py = |s: &str| -> Vec<u8> { s.as_bytes().to_vec() };
    let mut flipped = real.clone();
    // The action `alloc`, stored once and shared by every event: misspelled.
    let at = real.windows(7).position(|w| w == b"\x8c\x05alloc").unwrap();
    flipped[at + 2] = b'X';
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.pickle", vec![], "not a readable pickle"),
        ("text.pickle", py("hello, world\n"), "not a readable pickle"),
        (
            "json.pickle",
            py("{\"segments\": []}"),
            "not a readable pickle",
        ),
        (
            "proto0.pickle",
            py("(dp0\nS'a'\np1\nI1\ns."),
            "not a readable pickle",
        ),
        ("half.pickle", real[..real.len() / 2].to_vec(), "cut short"),
        (
            "tail.pickle",
            real[real.len() / 2..].to_vec(),
            "not a readable pickle",
        ),
        ("one-byte.pickle", real[..1].to_vec(), "cut short"),
        (
            "list.pickle",
            b"\x80\x04]\x94.".to_vec(),
            "holds a list, not a dict",
        ),
        (
            "int.pickle",
            b"\x80\x04K\x05.".to_vec(),
            "holds an integer, not a dict",
        ),
        (
            "dict.pickle",
            b"\x80\x04}\x94.".to_vec(),
            "no `segments` and `device_traces`",
        ),
        (
            "checkpoint.pickle",
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00.".to_vec(),
            "class",
        ),
        (
            "set.pickle",
            b"\x80\x04\x8f\x94.".to_vec(),
            "holds a set, not a dict",
        ),
        ("proto9.pickle", b"\x80\x09}.".to_vec(), "protocol 9"),
        (
            "long-string.pickle",
            b"\x80\x04X\xff\xff\xff\x0fab".to_vec(),
            "passes the end",
        ),
        (
            "bad-memo.pickle",
            b"\x80\x04h\x07.".to_vec(),
            "never stored",
        ),
        ("stack.pickle", b"\x80\x04s.".to_vec(), "an object wanted"),
        ("misspelt.pickle", flipped, "action `Xlloc`"),
        ("not-xz.pickle.xz", real[..4096].to_vec(), "is not xz"),
        (
            "cut.pickle.xz",
            std::fs::read(root().join(PROGRAMS).join("cnn--default--cap60.pickle.xz")).unwrap()
                [..1000]
                .to_vec(),
            "is not xz",
        ),
        (
            "unknown-op.pickle",
            b"\x80\x04\xff.".to_vec(),
            "opcode 0xff",
        ),
    ];
    assert_eq!(cases.len(), 20);
    for (name, bytes, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let path = path.display().to_string();
        let out = highwater(&["replay", &path, "--card", "24GiB"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(&path) && err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}
