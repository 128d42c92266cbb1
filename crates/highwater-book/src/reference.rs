//! The reference pages (`src/reference/`), one module per page file.

pub mod model_files;
pub mod simulator_corrections;
