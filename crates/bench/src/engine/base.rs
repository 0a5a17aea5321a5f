//! What an engine is: the [`Engine`] trait every engine's type
//! implements, and what the engines keep across runs ([`Kept`]). The
//! registry (`engine/mod.rs`) makes each; an engine names this, never the
//! registry.

use anyhow::{bail, Result};

use super::caches::Caches;
use super::mounts::Mounts;
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{OpenFiles, ThreadIo};

/// An engine of the bench, made ready for one run of a job: a type per
/// engine, in its own file. [`Engines::prepare`](super::Engines::prepare) makes a fresh one for
/// each run (`Default`) and calls its `prepare` (or `prepare_memory`);
/// the job's threads then do their IO through what
/// [`threads`](Engine::threads) lends them, and a write job ends with
/// [`sync`](Engine::sync). Dropping it closes the run's files and
/// mappings; what it keeps across runs (a cache, a mount) is in [`Kept`].
pub trait Engine {
    /// What the engine needs of the kernel's page cache under the data
    /// files before a warm run (a cold run drops them for every engine).
    fn page_cache(&self) -> PageCache;

    /// Makes the engine ready for `run` on data files, after the page
    /// cache was brought to what [`page_cache`](Engine::page_cache)
    /// says: opens the files, builds or reuses a cache or a mount (in
    /// `kept`), warms it; puts its notes and its figures before the run
    /// in `setup`.
    ///
    /// # Errors
    /// Opening or reading the files, building a cache, mounting, a job
    /// the engine cannot run, an engine the filesystem or kernel does not
    /// support.
    fn prepare(&mut self, kept: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()>;

    /// Makes the engine ready for `run`, a memory job (the populate
    /// scenario): fresh memory for every run. The time it takes is part
    /// of the run. By default the engine does not populate memory.
    ///
    /// # Errors
    /// Mapping the memory, building a cache, or an engine that does not
    /// populate memory.
    fn prepare_memory(&mut self, kept: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let _ = (kept, setup);
        bail!(
            "{} engine: does not populate memory (the populate scenario's engines: \
             foliocache, kernel, anon)",
            run.spec.kind.name()
        )
    }

    /// The IO of each of a job's `n` threads: thread `j` uses file `j`,
    /// or file 0 for all in a `shared` job. A thread that may write what
    /// it does IO on (a mapping) gets it by `&mut`. Fewer than `n` means
    /// the engine was not prepared for the job (`job::run` fails).
    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>>;

    /// Makes what the run wrote durable and waits for it (`fsync` of each
    /// file, `msync(MS_SYNC)` of each mapping, `File::sync_all` through
    /// foliocache; nothing for anonymous memory, this default without
    /// [`files`](Engine::files)). The write jobs' figures include it.
    ///
    /// # Errors
    /// The sync's IO error.
    fn sync(&self) -> std::io::Result<()> {
        self.files().map_or(Ok(()), OpenFiles::sync)
    }

    /// Turns the kernel's readahead off for the engine's files
    /// (`POSIX_FADV_RANDOM`: a read then reads what it asks for and no
    /// more; `MADV_RANDOM` for a mapping: a fault reads the page it
    /// wants); false for an engine whose reads it does not reach
    /// (foliocache, memory: this default without
    /// [`files`](Engine::files)).
    ///
    /// # Errors
    /// `posix_fadvise` or `madvise` failed.
    fn advise_random(&self) -> std::io::Result<bool> {
        self.files().map_or(Ok(false), OpenFiles::advise_random)
    }

    /// The engine's open data files, if it does its IO on them: the
    /// default [`sync`](Engine::sync) (`fsync` of each) and
    /// [`advise_random`](Engine::advise_random) (`POSIX_FADV_RANDOM`)
    /// are theirs. `None` by default: nothing to sync, no readahead to
    /// turn off.
    fn files(&self) -> Option<&OpenFiles> {
        None
    }
}

/// An engine made ready for one run ([`Engines::prepare`](super::Engines::prepare)).
pub type Prepared = Box<dyn Engine>;

/// What the engines keep across the runs of one bench invocation, each
/// engine its own part.
#[derive(Default)]
pub struct Kept {
    /// foliocache's caches, by engine label: one cache (and its populate
    /// cost) serves every job over the same data.
    pub(super) folio: Caches,
    /// The FUSE engines' mounts.
    pub(super) fuse: Mounts,
}
