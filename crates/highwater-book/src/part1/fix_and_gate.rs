//! *The fix and its gate* (`src/part-1/fix-and-gate.md`): what its cells compute.
