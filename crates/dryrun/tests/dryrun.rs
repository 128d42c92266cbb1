//! The dry runtime held to the GPU it stands for: the card profile recorded on the H200, and a
//! program whose every byte is known.

use std::path::Path;
use std::sync::Arc;

use cubecl_runtime::runtime::Runtime;
use dryrun::{CardProfile, DryDevice, DryRuntime, OnRefusal, TieBreak};

fn h200() -> Arc<CardProfile> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../repro/cards/h200.json");
    Arc::new(CardProfile::read(&path).expect("the committed H200 profile reads"))
}

/// A dry device on all of `card`'s free memory, from an empty autotune cache.
fn whole_card(card: &Arc<CardProfile>) -> DryDevice {
    DryDevice::new(
        card.clone(),
        card.free_at_start,
        OnRefusal::Refuse,
        None,
        TieBreak::First,
    )
    .unwrap()
}

#[test]
fn the_properties_derived_from_the_profile_are_the_gpus() {
    let card = h200();
    let derived = card.device_properties();
    assert_eq!(
        derived.checksum(),
        card.properties_checksum,
        "the checksum autotune keys on"
    );
    assert_eq!(
        format!("{derived:?}"),
        card.properties_debug,
        "every property, hashed or not"
    );
}

#[test]
fn a_card_with_other_memory_sizes_its_pools_from_its_own_total() {
    let h200 = h200();
    let sixteen = h200.with_memory(16 << 30);
    let context = h200.total_bytes - h200.free_at_start;
    assert_eq!(sixteen.free_at_start, (16 << 30) - context);
    let device = DryDevice::new(
        Arc::new(sixteen.clone()),
        sixteen.free_at_start,
        OnRefusal::Refuse,
        None,
        TieBreak::First,
    )
    .unwrap();
    let client = DryRuntime::client(&device);
    assert_eq!(client.properties().memory.max_page_size, 4 << 30);
    assert_eq!(client.properties().checksum(), sixteen.properties_checksum);
    assert_eq!(
        sixteen.properties_checksum, h200.properties_checksum,
        "the checksum hashes the chip, not its memory: the GPU's autotune cache still applies"
    );
}

#[test]
fn the_dry_client_reports_the_gpus_properties_and_pool_limits() {
    let card = h200();
    let device = whole_card(&card);
    let client = DryRuntime::client(&device);
    assert_eq!(client.properties().checksum(), card.properties_checksum);
    assert_eq!(
        client.properties().memory.max_page_size,
        card.total_bytes / 4
    );
    assert_eq!(DryRuntime::name(&client), "cuda");
}

/// The smallest page the card's pool adds is the one a small tensor gets: the tolerance that
/// tells a page from CubeCL's padding accounting (`situ::band`) rests on it.
#[test]
fn a_small_tensor_takes_the_smallest_page() {
    let card = h200();
    let device = whole_card(&card);
    let client = DryRuntime::client(&device);
    let small = client.empty(1000);
    client.flush().unwrap();
    assert_eq!(device.memory().pages(), 1);
    assert_eq!(device.memory().allocated(), card.smallest_page());
    assert_eq!(card.smallest_page(), 9_162_240, "8.7 MiB on the H200");
    drop(small);
}

#[test]
fn a_buffer_takes_its_bytes_in_the_pool_and_a_refused_page_is_an_event() {
    let card = h200();
    // A card that leaves the pools 64 MiB: the smallest pool's pages fit, a large one does not.
    let device = DryDevice::new(card, 64 << 20, OnRefusal::Grant, None, TieBreak::First).unwrap();
    let client = DryRuntime::client(&device);
    let small = client.empty(1000);
    let usage = client.memory_usage().unwrap();
    assert_eq!(
        usage.bytes_in_use, 1024,
        "1000 bytes at the pool's 512-byte alignment"
    );
    assert!(usage.bytes_reserved >= 1024 && device.memory().take_refused().is_empty());
    let large = client.empty(100 << 20);
    client.flush().unwrap();
    let refused = device.memory().take_refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].requested, 100 << 20);
    assert!(refused[0].page >= 100 << 20);
    assert!(
        device.memory().peak() > 64 << 20,
        "granted: the run goes on and says what it needed"
    );
    drop((small, large));
}

#[test]
fn reads_return_zeros_of_the_right_length() {
    let card = h200();
    let device = DryDevice::new(card, 1 << 30, OnRefusal::Refuse, None, TieBreak::First).unwrap();
    let client = DryRuntime::client(&device);
    let handle = client.create_from_slice(&[7u8; 4096]);
    let bytes = client.read_one(handle).unwrap();
    assert_eq!(bytes.len(), 4096);
    assert!(
        bytes.iter().all(|&b| b == 0),
        "nothing was written: nothing runs"
    );
}

/// The traced server records each reservation with the pool as the server saw it just before.
/// The server runs the client's tasks when it gets to them (CubeCL's channel hands them over up
/// to 32 at a time, or when the client blocks), so what it sees depends on how far it lags: a
/// release the client made after asking for a reservation, but before the server got to it, is
/// already seen there. On burn-fusion that lag could part runs; measured, it does not, while
/// which parameters the persistent pool takes does (issue 27, `repro/results/fusion/order/`).
#[test]
fn the_traced_server_sees_the_releases_made_before_it_reached_a_reservation() {
    use dryrun::traced::{Traced, take_trace};
    let card = h200();
    let device = whole_card(&card);
    let client = Traced::<DryRuntime>::client(&device);
    let first = client.empty(4096);
    let second = client.empty(8192);
    client.memory_usage().unwrap();
    drop(first);
    let third = client.empty(1024);
    // Released after the third was asked for, before the server got to it.
    drop(second);
    let fourth = client.empty(2048);
    client.memory_usage().unwrap();
    let trace = take_trace(&device);
    let seen: Vec<(u64, u64)> = trace.iter().map(|r| (r.size, r.in_use)).collect();
    assert_eq!(seen, [(4096, 0), (8192, 4096), (1024, 0), (2048, 1024)]);
    assert!(trace.windows(2).all(|w| w[0].nanos <= w[1].nanos));
    assert!(take_trace(&device).is_empty(), "taken once");
    drop((third, fourth));
}
