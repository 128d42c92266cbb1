//! Part I's chapters (`src/part-1/`), one module per chapter file.

pub mod dry_run;
pub mod verdict;
pub mod wall;
pub mod will_it_fit;
