//! Records the card profile the dry run starts from (`dryrun::CardProfile`): what cubecl-cuda
//! 0.10 reads from the driver, what is free once its client exists, what a device allocation
//! really costs, and the checksum and text of the properties cubecl-cuda derived.
//!
//!     card-profile --out repro/cards/h200.json        (on the GPU machine)

use std::mem::MaybeUninit;

use cubecl::Runtime;
use cubecl::cuda::{CudaDevice, CudaRuntime};
use cudarc::driver::result as cu;
use cudarc::driver::sys::CUdevice_attribute as attr;

fn main() {
    if let Err(e) = run() {
        eprintln!("card-profile: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let out = situ::gpu::out_arg("repro/cards/h200.json");
    let provenance = situ::provenance::collect("release");
    let device = CudaDevice::default();
    let client = CudaRuntime::client(&device);
    let properties = client.properties().clone();
    // The primary context, which cubecl-cuda retained: its memory is already gone below.
    let driver = |e: cudarc::driver::DriverError| e.to_string();
    let ctx = cudarc::driver::CudaContext::new(0).map_err(driver)?;
    ctx.bind_to_thread().map_err(driver)?;
    let dev = cu::device::get(0).map_err(driver)?;
    // SAFETY: read-only queries of a valid device.
    let get = |a: attr| unsafe { cu::device::get_attribute(dev, a) }.map(|v| v as u32);
    let total_bytes = {
        let mut bytes = MaybeUninit::uninit();
        // SAFETY: `dev` is valid; the call writes the total into `bytes` on success.
        unsafe {
            cudarc::driver::sys::cuDeviceTotalMem_v2(bytes.as_mut_ptr(), dev)
                .result()
                .map_err(driver)?;
            bytes.assume_init() as u64
        }
    };
    let (free_at_start, _) = cu::mem_get_info().map_err(driver)?;
    let allocation_cost = allocation_costs(total_bytes)?;
    let major = get(attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(driver)?;
    let minor = get(attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(driver)?;
    let dims = |a: [attr; 3]| -> Result<[u32; 3], String> {
        Ok([
            get(a[0]).map_err(driver)?,
            get(a[1]).map_err(driver)?,
            get(a[2]).map_err(driver)?,
        ])
    };
    let card = dryrun::CardProfile {
        command: provenance.command,
        gpu: provenance.gpu,
        driver: provenance.driver,
        date: provenance.date,
        git_revision: provenance.git_revision,
        cuda_version: cudarc::driver::sys::CUDA_VERSION,
        compute_capability: major * 10 + minor,
        total_bytes,
        free_at_start: free_at_start as u64,
        allocation_cost,
        warp_size: get(attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE).map_err(driver)?,
        max_shared_memory_per_block_optin: get(
            attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )
        .map_err(driver)?,
        max_threads_per_block: get(attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            .map_err(driver)?,
        max_block_dim: dims([
            attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
            attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        ])?,
        max_grid_dim: dims([
            attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
            attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
            attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
        ])?,
        multiprocessor_count: get(attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver)?,
        properties_checksum: properties.checksum(),
        properties_debug: format!("{properties:?}"),
    };
    let json = serde_json::to_string_pretty(&card).map_err(|e| e.to_string())?;
    std::fs::write(&out, json + "\n").map_err(|e| format!("{out}: {e}"))?;
    println!(
        "{out}: {} sm_{}, {} bytes, {} free, checksum {:#x}",
        card.gpu,
        card.compute_capability,
        card.total_bytes,
        card.free_at_start,
        card.properties_checksum
    );
    Ok(())
}

/// Free memory taken by one `cuMemAllocAsync` on a stream (as cubecl-cuda's storage allocates)
/// of a few sizes: small ones and the pool's page sizes on this card.
fn allocation_costs(total: u64) -> Result<Vec<[u64; 2]>, String> {
    let driver = |e: cudarc::driver::DriverError| e.to_string();
    let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(driver)?;
    let pages = (1..=5).map(|k| (total / 4) >> (2 * k));
    let mut costs = Vec::new();
    for size in [512, (2 << 20) + 1, 3 << 20].into_iter().chain(pages) {
        // SAFETY: the stream is valid; the allocation is freed and synchronized before the next.
        unsafe {
            cu::stream::synchronize(stream).map_err(driver)?;
            let (before, _) = cu::mem_get_info().map_err(driver)?;
            let ptr = cu::malloc_async(stream, size as usize).map_err(driver)?;
            cu::stream::synchronize(stream).map_err(driver)?;
            let (after, _) = cu::mem_get_info().map_err(driver)?;
            cu::free_async(ptr, stream).map_err(driver)?;
            cu::stream::synchronize(stream).map_err(driver)?;
            costs.push([size, (before - after) as u64]);
        }
    }
    Ok(costs)
}
