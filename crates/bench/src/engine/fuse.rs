//! The FUSE engines, plain `pread`/`pwrite` on the data files under a
//! FUSE mount served in this process ([`FuseMount`]):
//!
//! - `fuse` mounts the data files' directory through `foliocache-fuse`
//!   (its serving threads are this process's, so their CPU time is in the
//!   run's CPU figures) with a cache of the foliocache engine's capacity.
//!   The mount opens the files direct IO toward the kernel, so every read
//!   crosses into the server and is served from its foliocache. A warm
//!   run warms it by one read pass through the mount; a cold run, a write
//!   job, and a run after another engine wrote the files get a fresh
//!   mount (a fresh cache). It is unmounted (dirty data written back)
//!   when the bench ends, also on an error; where FUSE is unavailable
//!   (`foliocache_fuse::unavailable`) the bench leaves the engine out
//!   with a note.
//! - `fuse-null` mounts the same directory the same way but through
//!   `foliocache_fuse::NullFs`, which answers every read with zeros from
//!   one buffer and caches nothing: the FUSE crossing alone, the ceiling
//!   of any FUSE server on this kernel, measured in the same run as
//!   `fuse` (read jobs only; `--verify` does not check its zeros).

use anyhow::{bail, Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{OpenFiles, ThreadIo};

/// The `fuse` engine: the data files opened under its mount.
#[derive(Default)]
pub(super) struct Fuse {
    files: OpenFiles,
}

impl Engine for Fuse {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    fn prepare(&mut self, kept: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let write = run.write();
        let paths = kept.fuse.fuse(run.files, run.mode, write, setup)?;
        self.files = OpenFiles::open(&paths, write, false).context("fuse engine")?;
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        self.files.lend_pread(n, shared)
    }

    fn files(&self) -> Option<&OpenFiles> {
        Some(&self.files)
    }
}

/// The `fuse-null` engine: the data files opened under its mount, read
/// only.
#[derive(Default)]
pub(super) struct FuseNull {
    files: OpenFiles,
}

impl Engine for FuseNull {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    fn prepare(&mut self, kept: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        if run.write() {
            bail!("fuse-null engine: its files are read-only zeros: read jobs only");
        }
        let paths = kept.fuse.null(run.files, setup)?;
        self.files = OpenFiles::open(&paths, false, false).context("fuse-null engine")?;
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        self.files.lend_pread(n, shared)
    }

    fn files(&self) -> Option<&OpenFiles> {
        Some(&self.files)
    }
}
