//! Part I's chapters (`src/part-1/`), one module per chapter file.

pub mod allocation_profile;
pub mod card;
pub mod checkpointing;
pub mod dry_run;
pub mod fix_and_gate;
pub mod forensics;
pub mod late_releases;
pub mod not_a_leak;
pub mod numbers;
pub mod rerun;
pub mod verdict;
pub mod wall;
pub mod will_it_fit;
