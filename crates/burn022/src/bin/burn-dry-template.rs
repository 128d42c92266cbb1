//! `templates/burn-0.22-dry`'s program, unchanged, built in this workspace (where the
//! `[patch.crates-io]` line is the workspace's) so that the tests run it dry as a user would.

extern crate burn_022 as burn;

include!("../../../../templates/burn-0.22-dry/src/main.rs");
