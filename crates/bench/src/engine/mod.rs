//! The engines a job runs on, and how each is made ready for a measured
//! run.
//!
//! | engine       | a read is                                   | a write is         |
//! |--------------|---------------------------------------------|--------------------|
//! | `foliocache` | `foliocache::File::read_at_flags` (this library; `foliocache[dontcache]`: with `ReadFlags::DONTCACHE`) | `File::write_at_flags` (`WriteFlags::DONTCACHE` for `[dontcache]`) |
//! | `kernel`     | buffered `pread` (kernel page cache)        | buffered `pwrite`  |
//! | `direct`     | `pread` on an `O_DIRECT` fd                 | `pwrite`, O_DIRECT |
//! | `dontcache`  | `preadv2(RWF_DONTCACHE)`                    | `pwritev2(..)`     |
//! | `mmap`       | a copy out of a `MAP_SHARED` mapping        | a copy into it     |
//! | `memcpy`     | a copy out of anonymous memory holding the file | - (read jobs only) |
//! | `foliocache[qd=N]` | `N` reads queued on a `foliocache::ReadQueue`, one taken and one queued at a time | - (read jobs only) |
//! | `direct[qd=N]` | an io_uring of depth `N` on an `O_DIRECT` fd, kept full (`sys::ring`) | - (read jobs only) |
//! | `foliocache[async,tasks=N]` | `File::read_at_async` from `N` tasks on one current-thread tokio runtime per thread | `File::write_at_async` from the `N` tasks |
//! | `tokio-fs[tasks=N]` | `spawn_blocking` of a buffered `pread` from `N` tasks on one current-thread tokio runtime per thread | - (read jobs only) |
//! | `shared`     | `foliocache::SharedFile::read_at` (the cache a group of processes shares, over `O_DIRECT`) | `SharedFile::write_at` |
//! | `anon`       | -                                           | a `memset` of fresh anonymous memory (populate only) |
//! | `fuse`       | buffered `pread` of the file under a foliocache FUSE mount | `pwrite` there |
//! | `fuse-null`  | buffered `pread` under a mount of `foliocache_fuse::NullFs` (zeros, no cache: the crossing alone) | - |
//!
//! Each engine is a type implementing [`Engine`] (`base.rs`), in a file
//! of its own (variants of one engine in its file): [`folio`]
//! (`foliocache` and its options), [`kernel`], [`direct`], [`dontcache`],
//! [`mmap`], [`memcpy`], [`anon`], [`fuse`] (`fuse` and `fuse-null`,
//! whose mounts are [`fuse_mount`]'s, kept in [`mounts`]), [`tokio_fs`]
//! and [`shared`]. This module is the registry: the one place that names
//! every engine's type ([`new_engine`]); the engines name the modules
//! under them (`base`, `setup`, `thread_io`, `io`, `page_cache`,
//! `caches`, `mounts`), never the registry. [`Engines::prepare`] makes a
//! fresh engine for every run and prepares it: the kernel's page cache
//! under the data files brought to what the engine needs
//! ([`page_cache`]), then the engine's own preparation (open its files,
//! build or reuse a cache, mount, warm), which notes what the report
//! should say in a [`Setup`]. The job's threads then do their IO through
//! the [`ThreadIo`] the prepared engine lends each ([`Engine::threads`]),
//! `job` runs the loop compiled for that IO's type (one match per thread,
//! before it starts: no dynamic dispatch per operation), and a write job
//! ends with the engine's [`Engine::sync`]. What an engine keeps across
//! runs (a cache, a mount) is in [`Kept`], each engine its own part
//! ([`caches`], [`mounts`]).
//!
//! `qd=N` (1 to 1024, `foliocache` and `direct` only) keeps `N` reads in
//! flight from each job thread ([`ThreadIo::Queued`], [`ThreadIo::Ring`];
//! the loops are `job`'s): `foliocache[qd=N]` queues `N` reads on a
//! `ReadQueue` (each read's misses go to the cache's IO engine when it is
//! queued), then takes the oldest, counts it with the time from its push
//! as its latency, and queues the next offset; `direct[qd=N]` fills a
//! ring of `N` reads of its own and queues the next offset in each slot as
//! its read completes, a read's latency running from its submission to
//! its completion. Each engine is prepared (warmed, dropped, held to a
//! budget) as without `qd=`.
//!
//! The populate scenario's jobs write into memory, not files
//! ([`JobSpec::memory`], [`Engine::prepare_memory`]): `foliocache` into a
//! memfile, `kernel` into a `memfd` with `pwrite`, `anon` into a fresh
//! anonymous mapping with `memset`. Every run gets fresh memory (a new
//! cache, mapping or memfd), and the time to build foliocache's cache
//! (its arena's populate with `populate=eager`) is part of the run.
//!
//! Before a warm run (the default), the caching engines are warmed right
//! before their measurement: foliocache by one read pass through its cache
//! (whose arena is populated when it is built, outside any measurement),
//! the kernel and mmap by a buffered pass over the file (an idle-memory
//! reclaimer may evict page cache untouched for a while, so it is done
//! again before every run) with `mincore` checking residency; mmap's pages
//! are also pre-faulted. `direct` needs no warming, and `dontcache` starts
//! with the file dropped from the page cache, so its reads are the
//! uncached reads it exists for; likewise `foliocache[dontcache]` starts
//! with a fresh, empty cache. A `--cold` run drops every file from the
//! page cache before every engine and gives foliocache a fresh cache.
//!
//! # Adding an engine
//! 1. A variant of [`EngineKind`] with its name, and its options in
//!    `EngineSpec::parse` (`spec/engine.rs`); `scenario::check_job`
//!    refuses the jobs it cannot run.
//! 2. A file here with a type implementing [`Engine`]:
//!    [`page_cache`](Engine::page_cache), [`prepare`](Engine::prepare)
//!    (and [`prepare_memory`](Engine::prepare_memory) if it populates
//!    memory), [`threads`](Engine::threads) and [`sync`](Engine::sync).
//!    Its threads' IO is one of the [`ThreadIo`] types, or a new
//!    [`BlockIo`] type in `thread_io.rs` with a [`ThreadIo`] variant and
//!    that variant's arm in `job::run`.
//! 3. Its line in [`new_engine`], and its row in the table above and in
//!    `docs/bench.md`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use foliocache::CacheStats;

use crate::spec::engine::{EngineKind, EngineSpec};
use crate::spec::JobSpec;

mod anon;
mod base;
mod caches;
mod direct;
mod dontcache;
mod folio;
mod fuse;
mod fuse_mount;
mod io;
mod kernel;
mod memcpy;
mod mmap;
mod mounts;
mod page_cache;
mod setup;
mod shared;
mod thread_io;
mod tokio_fs;

pub use base::{Engine, Kept, Prepared};
pub use dontcache::probe_dontcache;
pub(crate) use fuse_mount::{FuseFigures, FuseMount};
pub use io::{BlockIo, TaskRead};
pub use page_cache::drop_files;
pub use setup::{FolioBefore, Run, RunMode, Setup};
pub use thread_io::ThreadIo;

/// A fresh engine of `kind`, not yet prepared: the one place that names
/// every engine's type.
fn new_engine(kind: EngineKind) -> Prepared {
    match kind {
        EngineKind::Foliocache => Box::<folio::Foliocache>::default(),
        EngineKind::Kernel => Box::<kernel::Kernel>::default(),
        EngineKind::Direct => Box::<direct::Direct>::default(),
        EngineKind::Dontcache => Box::<dontcache::Dontcache>::default(),
        EngineKind::Mmap => Box::<mmap::MmapEngine>::default(),
        EngineKind::Memcpy => Box::<memcpy::Memcpy>::default(),
        EngineKind::Anon => Box::<anon::Anon>::default(),
        EngineKind::Fuse => Box::<fuse::Fuse>::default(),
        EngineKind::FuseNull => Box::<fuse::FuseNull>::default(),
        EngineKind::TokioFs => Box::<tokio_fs::TokioFs>::default(),
        EngineKind::Shared => Box::<shared::Shared>::default(),
    }
}

/// The engines of one bench invocation: prepares each run's engine, and
/// answers for what they keep across runs ([`Kept`]).
#[derive(Default)]
pub struct Engines {
    kept: Kept,
}

impl Engines {
    /// Opens and warms (or drops) `spec`'s engine over `files` for `job`.
    ///
    /// # Errors
    /// Opening or reading the files, building a cache, an engine the
    /// filesystem or kernel does not support.
    pub fn prepare(
        &mut self,
        spec: &EngineSpec,
        job: &JobSpec,
        files: &[PathBuf],
        mode: RunMode,
    ) -> Result<(Prepared, Setup)> {
        let mut engine = new_engine(spec.kind);
        let mut setup = Setup::default();
        let run = Run {
            spec,
            job,
            files,
            mode,
        };
        if job.memory {
            // Free the last run's cache before timing the new one.
            self.kept.folio.remove(&spec.label);
            let t = Instant::now();
            engine.prepare_memory(&mut self.kept, &run, &mut setup)?;
            setup.setup_time = Some(t.elapsed());
            return Ok((engine, setup));
        }
        let write = job.rw.is_write();
        if write && spec.qd.is_some() {
            bail!(
                "{}: qd=N engines only read: use them in read jobs",
                spec.label
            );
        }
        if write && spec.tasks.is_some() && spec.kind != EngineKind::Foliocache {
            bail!(
                "{}: tokio-fs only reads: use it in read jobs (foliocache[async] writes too)",
                spec.label
            );
        }
        if write {
            self.kept.fuse.writing(spec.kind);
        }
        page_cache::settle(engine.page_cache(), mode.cold, files, &mut setup)?;
        engine.prepare(&mut self.kept, &run, &mut setup)?;
        page_cache::warn_residency(&mut setup);
        Ok((engine, setup))
    }

    /// Opens `path` through the cache of the foliocache engine `label`
    /// (prepared before), for a reader beside the job.
    ///
    /// # Errors
    /// No cache for `label`, or opening the file.
    pub fn open_folio(&mut self, label: &str, path: &Path) -> Result<foliocache::File> {
        self.kept.folio.open(label, path)
    }

    /// foliocache's statistics for the engine `label` once its readahead
    /// IO in flight (windows a time-based run left behind) has completed.
    pub fn folio_stats(&self, label: &str) -> Option<CacheStats> {
        self.kept.folio.stats(label)
    }

    /// Engine `label`'s cache, if it is a foliocache engine (for a sampler
    /// beside its run).
    pub fn folio_cache(&self, label: &str) -> Option<foliocache::Cache> {
        self.kept.folio.cache(label)
    }

    /// Where the memory of engine `label`'s cache goes now
    /// (`Cache::memory`).
    pub fn folio_memory(&self, label: &str) -> Option<foliocache::MemoryUsage> {
        self.kept.folio.memory(label)
    }

    /// Frees the cache of engine `label` (after a cold run, whose cache
    /// the next run would not reuse: so two foliocache engines' caches of
    /// a cold scenario are never mapped at once), or unmounts its mount.
    pub fn release(&mut self, label: &str) {
        self.kept.folio.release(label);
        self.kept.fuse.release(label);
    }

    /// Frees every cache (their arenas) and unmounts the FUSE engines'
    /// mounts before the data files go.
    ///
    /// # Errors
    /// An unmount's (or the writeback of the mount's dirty data).
    pub fn clear(&mut self) -> Result<()> {
        self.kept.folio.clear();
        self.kept.fuse.clear()
    }

    /// The `fuse` engine's cache figures now (the mount's control file),
    /// if it is mounted.
    pub fn fuse_figures(&self) -> Option<FuseFigures> {
        self.kept.fuse.figures()
    }
}
