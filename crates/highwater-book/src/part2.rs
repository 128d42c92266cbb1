//! Part II's chapters (`src/part-2/`), one module per chapter file.

pub mod heisenbug;
pub mod mechanism;
pub mod primer;
pub mod real_gpu;
pub mod smallest_fix;
pub mod static_check;
