//! `kernel`: buffered `pread`/`pwrite` through the kernel's page cache,
//! warmed by a buffered pass before a warm run; in a memory job
//! (populate), `pwrite` into a fresh `memfd` per job thread. Also
//! [`PreadIo`], the plain `pread`/`pwrite` that `direct` and the FUSE
//! engines do too.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use anyhow::{Context, Result};

use super::io::{BlockIo, OpenFiles, ThreadIo};
use super::{Engine, Kept, PageCache, Run, Setup};
use crate::sys;

/// `pread`/`pwrite` on a file descriptor: `kernel` (buffered) or `direct`
/// (an `O_DIRECT` descriptor), or a file under a FUSE mount; or reads and
/// writes at offsets of another kind of file ([`At`]: `shared`'s).
pub struct PreadIo<'a, F: At + ?Sized = File>(pub &'a F);

/// A file read and written at offsets.
pub trait At: Sync {
    /// Reads into `buf` at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize>;
}

impl At for File {
    #[inline]
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, off)
    }
    #[inline]
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        FileExt::write_at(self, buf, off)
    }
}

impl<F: At + ?Sized> BlockIo for PreadIo<'_, F> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.read_at(buf, off)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0.write_at(buf, off)
    }
}

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
