//! What every stage of a build reads and none changes: the book's root, its configuration, and
//! what the build does with GPU cells. [`crate::process`] makes it once and lends it to each
//! stage, and to the parts that need the book's folders.

use crate::config::Config;
use crate::gpu::GpuMode;
use std::path::{Path, PathBuf};

/// The book a build works on, and how.
pub(crate) struct Context<'a> {
    /// The book's root: `book.toml`'s folder, which relative paths start from.
    pub(crate) root: &'a Path,
    /// `[preprocessor.cells]`.
    pub(crate) config: &'a Config,
    /// What the build does with GPU cells, made from the config and the environment once.
    pub(crate) gpu: GpuMode,
}

impl<'a> Context<'a> {
    pub(crate) fn new(root: &'a Path, config: &'a Config) -> Context<'a> {
        let gpu = GpuMode::of(config);
        Context { root, config, gpu }
    }

    /// Where the cell crate, its build and the output cache live.
    pub(crate) fn cache_dir(&self) -> PathBuf {
        self.root.join(&self.config.cache_dir)
    }
}
