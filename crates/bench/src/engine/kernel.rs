//! `kernel`: buffered `pread`/`pwrite` through the kernel's page cache,
//! warmed by a buffered pass before a warm run; in a memory job
//! (populate), `pwrite` into a fresh `memfd` per job thread. Its IO,
//! `thread_io::PreadIo`, is the plain `pread`/`pwrite` that `direct` and the FUSE
//! engines do too.

use std::io;

use anyhow::{Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{OpenFiles, ThreadIo};
use crate::sys;

/// The `kernel` engine: its files (or, for a memory job, its memfds).
#[derive(Default)]
pub(super) struct Kernel {
    files: OpenFiles,
}

impl Engine for Kernel {
    fn page_cache(&self) -> PageCache {
        PageCache::Warm
    }

    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, _: &mut Setup) -> Result<()> {
        self.files = OpenFiles::open(run.files, run.write(), false)?;
        Ok(())
    }

    /// A `memfd` per job thread, empty.
    fn prepare_memory(&mut self, _: &mut Kept, run: &Run<'_>, _: &mut Setup) -> Result<()> {
        self.files = OpenFiles(
            (0..run.job.nfiles())
                .map(|i| sys::memfd(&format!("foliocache-bench-{i}")))
                .collect::<io::Result<_>>()
                .context("kernel engine: memfd_create")?,
        );
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        self.files.lend_pread(n, shared)
    }

    fn files(&self) -> Option<&OpenFiles> {
        Some(&self.files)
    }
}
