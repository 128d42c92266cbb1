//! Figures: `highwater replay`'s work on a real snapshot (the GPT program's, 12 466 events,
//! 2 MB of pickle): reading it, turning it into requests, one replay, and the answer for every
//! setting worth trying with the least each needs (bisection); then the same trace sixteen
//! times over, as a long history would be (200 000 events). `cargo bench -p graphrace --bench
//! snapshot` (harness-free; prints, asserts nothing).

use std::path::Path;
use std::time::Instant;

use graphrace::caching::Event;
use graphrace::snapshot::{self, Requests, settings_worth_trying, smallest_fit, verdict};

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64() * 1e3)
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../repro/results/pytorch/programs/gpt--default--uncapped.pickle.xz");
    let raw = std::fs::read(&path).expect("the recorded snapshot");
    let mut bytes = Vec::new();
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut bytes).expect("xz");
    let (snap, read_ms) = timed(|| snapshot::read(&bytes, None).expect("a snapshot"));
    let (requests, requests_ms) = timed(|| snap.requests().expect("requests"));
    let setting = snap.setting.expect("its setting");
    let one = |r: &Requests| timed(|| verdict(&snap, r, setting, 1 << 40)).1;
    let all = |r: &Requests| {
        timed(|| {
            for s in settings_worth_trying(setting) {
                verdict(&snap, r, s, 1 << 40);
                smallest_fit(&snap, r, s);
            }
        })
        .1
    };
    println!(
        "{} events, {} KiB of pickle: read {read_ms:.1} ms, requests {requests_ms:.1} ms, one \
         replay {:.1} ms, every setting worth trying with its least {:.0} ms",
        snap.events.len(),
        bytes.len() / 1024,
        one(&requests),
        all(&requests)
    );
    // The trace sixteen times over: each copy's tensors renamed, steps renumbered.
    let mut long = requests.clone();
    let last = requests.steps;
    long.events.clear();
    for copy in 0..16u64 {
        long.events.extend(requests.events.iter().map(|e| match *e {
            Event::Step(n) => Event::Step(n + copy * last),
            Event::Alloc { id, bytes, stream } => Event::Alloc {
                id: id + copy * (1 << 32),
                bytes,
                stream,
            },
            Event::Free { id } => Event::Free {
                id: id + copy * (1 << 32),
            },
        }));
    }
    long.origin = vec![None; long.events.len()];
    println!(
        "{} events (sixteen copies): one replay {:.0} ms, every setting worth trying with its \
         least {:.0} ms",
        long.events.len(),
        one(&long),
        all(&long)
    );
}
