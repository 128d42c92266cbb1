//! The stand-in held to what cubecl-cuda 0.11.3 does with the same requests: CubeCL 0.11's
//! adaptive pools size the pages, a full card is refused, reclaimed and retried by the shared
//! command, and the device advertises what cubecl-cuda with its default LLVM backend advertises.

extern crate cubecl_environment_011 as cubecl_environment;
extern crate cubecl_server_011 as cubecl_server;

use cubecl_cuda::dry::{self, CardProfile, DeviceOptions};
use cubecl_cuda::{CudaDevice, CudaRuntime};
use cubecl_server::memory_management::MemoryScope;
use cubecl_server::runtime::Runtime;

const MIB: u64 = 1 << 20;

fn device(card: CardProfile) -> CudaDevice {
    dry::register(DeviceOptions::card(card))
}

#[test]
fn a_tensor_takes_the_page_cubecl_0_11s_arena_sizes_for_it() {
    let device = device(CardProfile::h200());
    let client = CudaRuntime::client(&device);
    let tensor = client.empty(32 * MIB as usize);
    sync(&client);
    let usage = client.memory_report(MemoryScope::Device).usage();
    assert_eq!(usage.bytes_in_use, 32 * MIB);
    // The arena's growth rule (cubecl-server 0.11.3 `dynamic/arena.rs` `fit`): the allocation
    // plus a megabyte of slack, rounded to the megabyte. CubeCL 0.10 took a 64 MiB page here.
    assert_eq!(usage.bytes_reserved, 33 * MIB);
    assert_eq!(dry::memory(&device).allocated(), 33 * MIB);
    drop(tensor);
}

#[test]
fn a_page_past_the_card_is_refused_retried_once_and_the_tensor_carries_the_error() {
    let card = CardProfile::h200().with_memory(1 << 30);
    let device = dry::register(DeviceOptions {
        capacity: 100 * MIB,
        ..DeviceOptions::card(card)
    });
    let client = CudaRuntime::client(&device);
    let first = client.empty(60 * MIB as usize);
    let second = client.empty(60 * MIB as usize);
    let read = client.read_one(second.clone());
    let refused = dry::memory(&device).take_refused();
    // The command reclaims (nothing to give back: the first tensor is alive) and asks again.
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|r| r.page == 61 * MIB && r.allocated == 61 * MIB)
    );
    let err = read.expect_err("a tensor whose page was refused cannot be read");
    assert!(err.to_string().to_lowercase().contains("memory"), "{err}");
    drop(first);
}

#[test]
fn reads_are_zeros_since_nothing_ever_wrote_the_device() {
    let device = device(CardProfile::h200());
    let client = CudaRuntime::client(&device);
    let handle = client.create_from_slice(&[1u8, 2, 3, 4, 5, 6, 7, 8]);
    let bytes = client.read_one(handle).unwrap();
    assert_eq!(&bytes[..], &[0u8; 8]);
}

#[test]
fn the_h200_advertises_what_cubecl_cuda_0_11_with_llvm_advertises() {
    let card = CardProfile::h200();
    let properties = card.device_properties();
    assert_eq!(properties.hardware.num_tensor_cores, Some(4));
    assert_eq!(properties.hardware.num_streaming_multiprocessors, Some(132));
    assert_eq!(properties.memory.max_page_size, card.total_bytes / 4);
    assert_eq!(properties.identity.fingerprint, "ptx_sm90");
    // The LLVM backend lowers no TMA, clusters or async copies, and keeps the half, bf16 and
    // tf32 matrix forms only.
    assert!(properties.features.tma.is_empty());
    assert!(!properties.features.cube_cluster && !properties.features.copy_async);
    assert!(!properties.features.matmul.cmma.is_empty());
    assert!(properties.features.matmul.cmma.iter().all(
        |c| format!("{:?}", c.a_type).contains("F16")
            || format!("{:?}", c.a_type).contains("BF16")
            || format!("{:?}", c.a_type).contains("TF32")
    ));
}

/// The H100's properties as the real cubecl-cuda 0.11.3 built them on the GPU
/// (`repro/cards/h100-cubecl-0.11.json`, `burn022-rerun --card`): the dry derivation from the
/// card profile gives the same checksum, which CubeCL's kernel and autotune caches key on, and
/// the same properties but the PCI address, which a profile does not record.
#[test]
fn the_h100_properties_are_the_ones_cubecl_cuda_0_11_built_on_the_gpu() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../repro/cards/");
    let recorded: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}h100-cubecl-0.11.json")).expect("recorded"),
    )
    .expect("JSON");
    let card = CardProfile::read(std::path::Path::new(&format!("{root}h100.json"))).expect("card");
    let properties = card.device_properties();
    assert_eq!(
        properties.checksum(),
        recorded["properties_checksum"]
            .as_u64()
            .expect("a checksum")
    );
    let without_pci = |debug: &str| {
        let start = debug.find("pci_address: ").expect("an identity");
        let end = start + debug[start..].find(", luid").expect("after the address");
        format!("{}{}", &debug[..start], &debug[end..])
    };
    assert_eq!(
        without_pci(&format!("{properties:?}")),
        without_pci(
            recorded["properties_debug"]
                .as_str()
                .expect("the properties")
        )
    );
    // The GPU run's environment store is found beside the profile: the dry device starts from it.
    assert!(
        card.atlas
            .is_some_and(|a| a.ends_with("h100-cubecl-0.11.db"))
    );
}

/// A dry device never probes the card's throughput (a probe times its kernel by the wall clock,
/// and on a dry device grows until it panics with its buffers held): once it has started, every
/// key CubeCL 0.11 can ask is answered, among them each of the 20 the H100 measured in its
/// store (the launch, f32 arithmetic, copies from 8 KiB to 1 GiB), and on a card without a store
/// each answer is "no peak", which tunes without a roofline bound.
#[test]
fn a_started_device_answers_every_throughput_key_the_gpu_measured_without_probing() {
    use cubecl_server::throughput::{
        MemoryAccess, MemorySpec, ThroughputCache, ThroughputKey, ThroughputMode, ThroughputValue,
    };
    let card = CardProfile::read(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../repro/cards/h100.json"
    )))
    .expect("card");
    let bare = CardProfile {
        atlas: None,
        ..card
    };
    let properties = bare.device_properties();
    let keys = dry::throughput::keys(&properties);
    let f32 = cubecl_core_011::ir::ElemType::Float(cubecl_core_011::ir::FloatKind::F32);
    let mut measured = vec![
        ThroughputMode::Launch,
        ThroughputMode::ComputeDirect { dtype: f32 },
    ];
    measured.extend(
        (13..=30).map(|log| ThroughputMode::Memory(MemorySpec::new(MemoryAccess::Copy, 1 << log))),
    );
    for mode in measured {
        assert!(keys.contains(&ThroughputKey { mode }), "{mode:?}");
    }
    let device = device(bare);
    sync(&CudaRuntime::client(&device));
    let cache = ThroughputCache::get_for_device("cuda", &properties);
    let cache = cache.lock();
    for key in &keys {
        assert_eq!(cache.get(key), Some(&ThroughputValue::ZERO), "{key:?}");
    }
}

/// Waits for what the client queued (the dry server runs on its own thread, as cubecl-cuda's).
fn sync(client: &cubecl_server::client::Client) {
    cubecl_environment::future::block_on(client.sync()).unwrap();
}
