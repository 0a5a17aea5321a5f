//! `foliocache`, this library, and its variants:
//!
//! - `foliocache`: `File::read_at_flags` and `File::write_at_flags`
//!   through a cache of the run's capacity, kept across the runs of one
//!   bench invocation (by engine label: one cache, and its populate cost,
//!   serves every job over the same data) and warmed by one read pass
//!   right before a warm run's measurement (its arena is populated when
//!   it is built, outside any measurement). A cold run gets a fresh
//!   cache. For a write job the files are opened anew for every run (for
//!   writing, through `Cache::open_options`), so that what the cache
//!   holds is what the other engines wrote since; its warm pass then
//!   reads them back in.
//! - `foliocache[dontcache]`: every read with `ReadFlags::DONTCACHE` and
//!   every write with `WriteFlags::DONTCACHE`, from a fresh, empty cache,
//!   so that its reads are uncached reads.
//! - `foliocache[pin]`: reads borrow the cache's bytes (`File::pin`),
//!   copied to the buffer or, with `--consume`, summed in place.
//! - `foliocache[qd=N]`: `N` reads queued on a `foliocache::ReadQueue`
//!   per job thread (the loop is `job`'s).
//! - `foliocache[async]`, `foliocache[async,tasks=N]`: `N` tasks (1 by
//!   default) per job thread on one current-thread tokio runtime, each
//!   reading with `File::read_at_flags_async` (the loop is `job`'s).
//! - In a memory job (populate), writes into a memfile per job thread
//!   (`Cache::memfile`; with `grab=single` its writes create their folios
//!   one at a time, `File::set_write_insert(Insert::Single)`) of a new
//!   cache, whose building (its arena's populate with `populate=eager`)
//!   is part of the run.
//!
//! The other options (`populate=`, `folio=`, `ra=`, `insert=`, `io=`,
//! `huge=`) build the cache ([`build_cache`]).

use std::io;

use anyhow::Result;

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend, FolioIo, FolioMode, FolioTaskIo, ThreadIo};
use crate::spec::engine::FolioOptions;

impl FolioOptions {
    /// How a run with these options does its IO.
    pub fn mode(&self) -> FolioMode {
        FolioMode {
            read: self.read_flags(),
            dontcache_writes: self.dontcache,
            pin: self.pin,
        }
    }
}

/// The `foliocache` engine: its files opened through its cache, how it
/// reads and writes them, and, for `foliocache[qd=N]`, the depth of each
/// thread's queue, or for `foliocache[async]` its tasks.
pub(super) struct Foliocache {
    files: Vec<foliocache::File>,
    mode: FolioMode,
    depth: Option<usize>,
    tasks: Option<usize>,
}

impl Default for Foliocache {
    fn default() -> Self {
        Foliocache {
            files: Vec::new(),
            mode: FolioOptions::default().mode(),
            depth: None,
            tasks: None,
        }
    }
}

impl Engine for Foliocache {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    fn prepare(&mut self, kept: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let spec = run.spec;
        let (handles, before) = kept.folio.prepare(spec, run.files, run.mode, run.write())?;
        setup.folio_before = Some(before);
        if spec.folio.dontcache && !run.mode.cold {
            setup.notes.push(
                "foliocache[dontcache] starts with an empty cache (not warmed): its reads \
                 are uncached reads"
                    .into(),
            );
        }
        self.files = handles;
        self.mode = spec.folio.mode();
        self.depth = spec.qd;
        self.tasks = spec.tasks;
        Ok(())
    }

    fn prepare_memory(&mut self, kept: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let (handles, before) =
            kept.folio
                .prepare_memory(run.spec, run.mode.capacity, run.job.nfiles())?;
        setup.folio_before = Some(before);
        self.files = handles;
        self.mode = run.spec.folio.mode();
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        let flags = self.mode.read;
        match (self.depth, self.tasks) {
            (Some(depth), _) => lend(&self.files, n, shared, |f| ThreadIo::Queued(f, depth)),
            (None, Some(tasks)) => lend(&self.files, n, shared, |f| {
                ThreadIo::FolioTasks(FolioTaskIo(f, flags), tasks)
            }),
            (None, None) => {
                let mode = self.mode;
                lend(&self.files, n, shared, |f| {
                    ThreadIo::Folio(FolioIo(f, mode))
                })
            }
        }
    }

    /// `File::sync_all` of each file (a read-only handle has nothing to
    /// write back).
    fn sync(&self) -> io::Result<()> {
        self.files.iter().try_for_each(|f| {
            if f.is_writable() {
                f.sync_all()
            } else {
                Ok(())
            }
        })
    }
}
