//! *What it is not* (`src/part-1/not-a-leak.md`): what its cells compute.
