//! What the book's cells share, as rust-lang/book's `trpl` is for its listings: the loaders
//! that read the repository's inputs as every cell did (paths from the book's root, the
//! directory mdbook-cells runs the cells in), one way to write a byte count, the adapters from
//! the simulator's and the GPU's reports to the figures' series, and the few helpers the
//! chapters had each written for themselves. A chapter's cell calls these and keeps on the page
//! what it computes; what it would only repeat lives here, tested.
//!
//! - [`Book`]: the one way a cell reaches the repository's inputs, `Book::here()` (the cells'
//!   directory) and its methods: [`Book::recipe`], [`Book::incidents`] (Part I's logs as
//!   [`highwater::Incident`]s), [`Book::experiments`] (Part II's), [`Book::graphrace_config`],
//!   the GPU records ([`Book::rerun_records`], [`Book::rerun_with_repeats`]), the H200's profile
//!   ([`Book::h200`]). A chapter's helper that reads an input takes the `&Book` it reads from, so
//!   a test runs it on the repository or on a fixture ([`Book::at`]); [`load`] names the paths.
//! - [`bytes`]: the precision policy below.
//! - [`series`]: [`highwater::RunReport`]s and GPU records as
//!   [`highwater_plot::Series`], and the high-water figure.
//! - [`tables`], [`text`], [`reports`]: a ledger as a table, lists and ranges as prose writes
//!   them, refusals counted by size and page.
//! - Result and freeze files are read with the types their writers wrote them with
//!   ([`situ::results`], [`graphrace::arms`], [`highwater::conform`], [`cell_output::freeze`])
//!   through [`Book::json`] and [`Book::frozen`]: a field missing fails the read, naming the
//!   file and the field, so a renamed field fails the build rather than showing a dash.
//! - Each chapter's own helpers, in a module named as its file under `src/` is:
//!   `src/primer.md` → [`primer`], `src/part-1/dry-run.md` → [`part1::dry_run`],
//!   `src/part-2/static-check.md` → [`part2::static_check`], `src/reference/…` →
//!   [`reference`](mod@reference). A cell that would be longer than a reader should scroll
//!   past (hidden or folded code over 25 lines, any over 60) calls one of these, tested here,
//!   and keeps on the page what the chapter teaches.
//! - Everything here fails with one error type, [`BookError`]: an input unreadable, refused or
//!   malformed (named), a computation another crate refused, or a claim of the chapter's that
//!   its inputs no longer bear out. A cell returns it as any error, and the build shows it at
//!   the cell that called.
//!
//! # Bytes: one precision policy
//!
//! Before this crate the chapters wrote sizes six ways: whole MiB (`{:.0}`), tenths and
//! hundredths of a MiB, hundredths of a GiB, the largest unit that divides a size exactly, and
//! `highwater_plot`'s three significant digits. The book now writes every size in text and
//! tables one way, [`bytes::show`]:
//!
//! **binary units (KiB = 2¹⁰ bytes, MiB = 2²⁰, GiB = 2³⁰); the largest unit in which the count
//! is at least 1; to the hundredth of that unit (ties to even), trailing zeros dropped; under
//! 1 KiB, whole bytes** — `512 B`, `32 MiB`, `34.95 MiB`, `1.19 GiB`, `14.75 GiB`.
//!
//! Hundredths of the unit, not a fixed count of significant digits, because the book's sizes
//! sit within a few hundred MiB of a card's edge and its prose adds them up: a 16 GiB card less
//! a desktop's 1.25 GiB is a cap of 14.75 GiB, which three digits would show as 14.8. The same
//! rule gives whole sizes back whole (a 32 MiB tensor, a 1 GiB probe, a 16 GiB card), so the
//! sizes logs print match to the character. Three variants keep the policy where a place needs
//! more: [`bytes::exact`] adds the exact count (`32 MiB (33 554 432 B)`) where bytes must match
//! to the byte; [`bytes::in_unit`] fixes the unit for the terms of one sum or one column
//! (`3378 MiB − 2994 MiB = 384 MiB`); [`bytes::signed`] writes a difference (`+1.88 GiB`,
//! `-384 MiB`). Figures keep `highwater_plot`'s labels ([`bytes::axis`]: three significant
//! digits, room being short on an axis). The implementation and its tests are in
//! [`basics::bytes`], which the `highwater` CLI and the figures use too; [`bytes`] re-exports it.

pub mod bytes;
pub mod error;
pub mod experiments;
pub mod load;
pub mod memview;
pub mod reports;
pub mod series;
pub mod tables;
pub mod text;

pub mod apply;
pub mod method;
pub mod primer;
pub mod pytorch;

pub mod part1;
pub mod part2;
pub mod reference;

pub use error::BookError;
pub use experiments::Experiment;
pub use load::Book;
pub use tables::{activation_rows, ledger_table};
