//! *A primer: pools, pages and lifetimes* (`src/primer.md`): what its cells compute.
