//! *The method: from a dead run to a proven fix* (`src/method.md`): what its cells compute.
