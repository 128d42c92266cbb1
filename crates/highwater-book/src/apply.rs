//! *Apply it to your job* (`src/apply.md`): what its cells compute.
