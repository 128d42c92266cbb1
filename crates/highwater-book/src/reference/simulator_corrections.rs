//! *The simulator's corrections* (`src/reference/simulator-corrections.md`): what its cells compute.
