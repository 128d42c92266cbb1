//! Part II's chapters (`src/part-2/`), one module per chapter file.

pub mod real_gpu;
pub mod static_check;
