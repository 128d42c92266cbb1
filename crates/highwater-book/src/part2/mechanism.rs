//! *The mechanism* (`src/part-2/mechanism.md`): what its cells compute.
