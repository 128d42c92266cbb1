//! *The smallest fix, isolated* (`src/part-2/smallest-fix.md`): what its cells compute.
