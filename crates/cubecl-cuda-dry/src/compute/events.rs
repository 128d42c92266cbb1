//! cubecl-cuda 0.11.3's fence, where nothing is in flight: every fence has already passed.

use cubecl_server::memory_management::drop_queue;
use cubecl_server::server::ServerError;

/// A point on a dry stream. Nothing was enqueued, so waiting on it returns at once; the drop
/// queue still rotates on it as it rotates on CUDA's, so the frees it defers are freed when they
/// would be on the GPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fence;

impl drop_queue::Fence for Fence {
    fn wait(self) -> Result<(), ServerError> {
        Ok(())
    }
}
