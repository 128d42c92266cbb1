//! Probe: the CubeCL 0.10 / burn 0.21 names crates/dryrun uses today, at 0.11 / 0.22.
//! Each line is expected to fail; the compiler's errors are the evidence.
#![allow(dead_code, unused_imports)]
use cubecl_runtime::client::ComputeClient;
use cubecl_runtime::server::ComputeServer;
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;
use cubecl_runtime::stream::{EventStreamBackend, MultiStream, ResolvedStreams};
use cubecl_runtime::timestamp_profiler::TimestampProfiler;
use cubecl_runtime::compiler::CubeTask;
use cubecl_runtime::memory_management::MemoryManagement;
use cubecl_runtime::server::{Binding, ExecutionMode, StreamErrorMode};
use cubecl_common::stream_id::StreamId;
use cubecl_common::backtrace::BackTrace;
use cubecl_cpp::cuda::mma::CudaWmmaCompiler;
use cubecl_cpp::DialectWmmaCompiler;
pub fn subslices() -> cubecl_server::memory_management::MemoryConfiguration {
    cubecl_server::memory_management::MemoryConfiguration::SubSlices
}
