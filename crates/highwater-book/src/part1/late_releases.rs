//! *The calibrated hypothesis: late releases* (`src/part-1/late-releases.md`): what its cells compute.
