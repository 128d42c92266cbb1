//! Byte counts as the book writes them: [`basics::bytes`], re-exported so the cells keep
//! calling `highwater_book::bytes::show` (see the crate docs for the policy).

pub use basics::bytes::*;
