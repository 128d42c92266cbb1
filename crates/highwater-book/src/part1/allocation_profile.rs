//! *The allocation profile* (`src/part-1/allocation-profile.md`): what its cells compute.
