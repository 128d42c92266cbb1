//! *The numbers close* (`src/part-1/numbers.md`): what its cells compute.
