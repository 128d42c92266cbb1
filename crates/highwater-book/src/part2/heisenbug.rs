//! *A Heisenbug in the graph pool* (`src/part-2/heisenbug.md`): what its cells compute.
