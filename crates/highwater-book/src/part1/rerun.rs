//! *Rerun on a GPU* (`src/part-1/rerun.md`): what its cells compute.
