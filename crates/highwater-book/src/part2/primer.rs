//! *A primer: caching allocators, graph pools and streams* (`src/part-2/primer.md`): what its cells compute.
