//! `dontcache`: `preadv2`/`pwritev2` with `RWF_DONTCACHE`, uncached
//! buffered IO (Linux 6.14 or later, on a filesystem that supports it).
//! Its runs start with the files dropped from the page cache, so its
//! reads are the uncached reads it exists for.

use std::fs::File;

use anyhow::{bail, Context, Result};
use rustix::io::Errno;

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend, DontcacheIo, OpenFiles, ThreadIo};
use crate::sys::{self, AlignedBuf};

/// The `dontcache` engine: its files.
#[derive(Default)]
pub(super) struct Dontcache {
    files: OpenFiles,
}

impl Engine for Dontcache {
    fn page_cache(&self) -> PageCache {
        PageCache::Drop
    }

    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, _: &mut Setup) -> Result<()> {
        let files = OpenFiles::open(run.files, run.write(), false)?;
        probe_dontcache(&files.0[0])?;
        self.files = files;
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        lend(&self.files.0, n, shared, |f| {
            ThreadIo::Dontcache(DontcacheIo(f))
        })
    }

    fn files(&self) -> Option<&OpenFiles> {
        Some(&self.files)
    }
}

/// One `RWF_DONTCACHE` read, to fail early and clearly where the kernel or
/// the filesystem lacks it.
///
/// # Errors
/// The kernel or the filesystem does not support `RWF_DONTCACHE`, or the
/// read failed.
pub fn probe_dontcache(f: &File) -> Result<()> {
    let mut buf = AlignedBuf::new(sys::PAGE, 0)?;
    match sys::preadv2(f, buf.as_mut_slice(), 0, sys::RWF_DONTCACHE) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(Errno::OPNOTSUPP.raw_os_error()) => bail!(
            "dontcache engine: this kernel or filesystem does not support RWF_DONTCACHE \
             (Linux 6.14 or later, on a filesystem that supports it): {e}"
        ),
        Err(e) => Err(e).context("dontcache engine: probe read"),
    }
}
