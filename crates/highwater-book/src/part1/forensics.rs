//! *Forensics* (`src/part-1/forensics.md`): what its cells compute.
