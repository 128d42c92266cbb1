//! The reference pages (`src/reference/`), one module per page file.

pub mod simulator_corrections;
