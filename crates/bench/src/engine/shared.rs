//! `shared`: `foliocache::SharedCache`, the cache every process of a group
//! shares (docs/design.md, section 13): the run's files opened `O_DIRECT`
//! and served through a shared cache of the run's capacity, new for each
//! run, warmed by one read pass before a warm run. Its threads read and
//! write with `SharedFile::read_at`/`write_at`; the job's process is one
//! process of the group, and a hit is the same code in any process.

use std::io;

use anyhow::{Context, Result};
use foliocache::{SharedCache, SharedFile};

use super::base::{Engine, Kept};
use super::io::At;
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend, OpenFiles, PreadIo, ThreadIo};

impl At for SharedFile {
    #[inline]
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        SharedFile::read_at(self, buf, off)
    }
    #[inline]
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        SharedFile::write_at(self, buf, off)
    }
}

/// The `shared` engine: its cache and files.
#[derive(Default)]
pub(super) struct Shared {
    files: Vec<SharedFile>,
}

impl Engine for Shared {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let cache = SharedCache::new(run.mode.capacity).context("shared engine: the cache")?;
        // Its pages in 2 MiB pages before the run, where the kernel
        // collapses them (`SharedCache::new`), not while it is measured.
        let huge = cache.wait_huge_pages();
        setup.notes.push(format!(
            "shared: {} MiB of its {} MiB of pages in 2 MiB pages",
            huge >> 20,
            (cache.pages() * 4096) >> 20
        ));
        let opened = OpenFiles::open(run.files, run.write(), true)
            .context("shared engine: opening with O_DIRECT (the filesystem may refuse it)")?;
        self.files = opened
            .0
            .into_iter()
            .map(|f| cache.open(f))
            .collect::<io::Result<_>>()
            .context("shared engine: serving the files")?;
        if !run.mode.cold {
            let mut buf = vec![0u8; 1 << 20];
            for f in &self.files {
                let len = f.len()?;
                let mut off = 0;
                while off < len {
                    off += f
                        .read_at(&mut buf, off)
                        .context("shared engine: warm pass")? as u64;
                }
            }
        }
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        lend(&self.files, n, shared, |f| ThreadIo::Shared(PreadIo(f)))
    }

    fn sync(&self) -> io::Result<()> {
        self.files.iter().try_for_each(SharedFile::sync_all)
    }
}
