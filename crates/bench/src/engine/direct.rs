//! `direct`: `pread`/`pwrite` on an `O_DIRECT` descriptor, which the
//! page cache never sees (no warming); `direct[qd=N]` keeps `N` reads in
//! flight per job thread in an io_uring of its own (`sys::ring`; the loop
//! is `job`'s).

use anyhow::{Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend, OpenFiles, ThreadIo};

/// The `direct` engine: its `O_DIRECT` files, and the depth of each
/// thread's ring for `direct[qd=N]`.
#[derive(Default)]
pub(super) struct Direct {
    files: OpenFiles,
    depth: Option<usize>,
}

impl Engine for Direct {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, _: &mut Setup) -> Result<()> {
        self.files = OpenFiles::open(run.files, run.write(), true).with_context(|| {
            "direct engine: opening with O_DIRECT (the filesystem may refuse it)"
        })?;
        self.depth = run.spec.qd;
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        match self.depth {
            Some(depth) => lend(&self.files.0, n, shared, |f| ThreadIo::Ring(f, depth)),
            None => self.files.lend_pread(n, shared),
        }
    }

    fn files(&self) -> Option<&OpenFiles> {
        Some(&self.files)
    }
}
