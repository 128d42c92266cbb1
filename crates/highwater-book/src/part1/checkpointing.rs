//! *Checkpointing changes the bill* (`src/part-1/checkpointing.md`): what its cells compute.
