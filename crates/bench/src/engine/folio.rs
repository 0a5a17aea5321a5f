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

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use backing::aio::IoEngineConfig;
use foliocache::{Cache, CacheStats, Populate, ReadFlags, ReadaheadConfig, WriteFlags};

use super::io::{copy_and_sum, lend, summed, BlockIo, FolioTaskIo, ThreadIo};
use super::{Engine, Kept, PageCache, Run, RunMode, Setup};
use crate::spec::engine::{EngineSpec, FolioOptions};
use crate::units::fmt_size;

/// How the foliocache engine does its IO in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FolioMode {
    /// The flags of every read.
    pub read: ReadFlags,
    /// Every write is uncached (`WriteFlags::DONTCACHE`).
    pub dontcache_writes: bool,
    /// Reads pin (`foliocache[pin]`: `File::pin`): the pinned bytes are
    /// copied to the buffer, or with `--consume` summed in place.
    pub pin: bool,
}

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

/// Reads and writes through foliocache's `File`.
pub struct FolioIo<'a>(pub &'a foliocache::File, pub FolioMode);

impl BlockIo for FolioIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if self.1.pin {
            let p = self.0.pin(off, buf.len())?;
            buf[..p.len()].copy_from_slice(&p);
            return Ok(p.len());
        }
        self.0.read_at_flags(buf, off, self.1.read)
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        if self.1.pin {
            return Ok(summed(&self.0.pin(off, buf.len())?));
        }
        copy_and_sum(self, buf, off)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        let flags = if self.1.dontcache_writes {
            WriteFlags::DONTCACHE
        } else {
            WriteFlags::NONE
        };
        self.0.write_at_flags(buf, off, flags)
    }
}

/// foliocache's state before a measured run.
#[derive(Debug, Clone)]
pub struct FolioBefore {
    /// The cache's statistics right before the run.
    pub stats: CacheStats,
    /// The warm pass's duration (None for a cold run).
    pub warm: Option<Duration>,
    /// How the arena was populated.
    pub populate: Populate,
    /// The cache's largest folio, if set by an option.
    pub max_folio: Option<u64>,
    /// The backing's note (O_DIRECT or the buffered fallback).
    pub backing_note: String,
    /// Whether the backing reads with O_DIRECT.
    pub backing_direct: bool,
    /// The engine that runs the cache's readahead IO
    /// ([`Cache::io_engine_name`]).
    pub io_engine: String,
    /// The cache's readahead settings.
    pub readahead: ReadaheadConfig,
}

impl FolioBefore {
    /// The figures of `cache`, built by `spec`, now, before a run whose
    /// files include `file` (the warm pass's time, if it had one).
    fn of(
        cache: &Cache,
        spec: &EngineSpec,
        file: &foliocache::File,
        warm: Option<Duration>,
    ) -> Self {
        FolioBefore {
            stats: cache.stats(),
            warm,
            populate: spec.folio.populate,
            max_folio: spec.folio.max_folio,
            backing_note: file.info().note.clone(),
            backing_direct: file.info().is_direct(),
            io_engine: cache.io_engine_name(),
            readahead: spec.folio.readahead(),
        }
    }
}

/// A foliocache cache kept across the runs of one bench invocation, with
/// the files opened through it.
struct FolioState {
    cache: Cache,
    capacity: u64,
    opts: FolioOptions,
    files: HashMap<PathBuf, foliocache::File>,
}

impl FolioState {
    /// A state for `cache`, built by `spec` with `capacity`, with no
    /// file.
    fn new(cache: Cache, spec: &EngineSpec, capacity: u64) -> Self {
        FolioState {
            cache,
            capacity,
            opts: spec.folio.clone(),
            files: HashMap::new(),
        }
    }
}

/// The foliocache engines' caches, by engine label, kept across runs.
#[derive(Default)]
pub(super) struct Caches(HashMap<String, FolioState>);

impl Caches {
    /// A cache of the right capacity for `spec` (kept from an earlier
    /// run, or built now; always new for a cold run and for an uncached
    /// engine), the files opened through it (for a write job, opened anew
    /// for each run, for writing, so that the cache holds what the other
    /// engines wrote since), and, for a warm run of a cached engine, one
    /// read pass.
    fn prepare(
        &mut self,
        spec: &EngineSpec,
        files: &[PathBuf],
        mode: RunMode,
        write: bool,
    ) -> Result<(Vec<foliocache::File>, FolioBefore)> {
        let fresh = mode.cold || spec.folio.dontcache;
        let reuse = self
            .0
            .get(&spec.label)
            .is_some_and(|s| !fresh && s.capacity == mode.capacity && s.opts == spec.folio);
        if !reuse {
            // Free the old arena before mapping a new one.
            self.0.remove(&spec.label);
            let cache = build_cache(spec, mode.capacity)?;
            self.0.insert(
                spec.label.clone(),
                FolioState::new(cache, spec, mode.capacity),
            );
        }
        let state = self
            .0
            .get_mut(&spec.label)
            .context("foliocache engine: no cache")?;
        if write {
            // Dropping the handles drops their mappings and cached folios.
            state.files.clear();
        }
        let mut handles = Vec::with_capacity(files.len());
        for p in files {
            if !state.files.contains_key(p) {
                let f = open(&state.cache, p, write)
                    .with_context(|| format!("foliocache engine: opening {}", p.display()))?;
                state.files.insert(p.clone(), f);
            }
            let f = state.files[p].clone();
            f.set_write_insert(spec.folio.grab);
            handles.push(f);
        }
        let warm = if fresh { None } else { Some(warm(&handles)?) };
        let before = FolioBefore::of(&state.cache, spec, &handles[0], warm);
        Ok((handles, before))
    }

    /// A new cache for the memory job of `spec`, with a memfile per job
    /// thread (`n`), kept with the cache until it is released, so that the
    /// figures after the run still see the data.
    fn prepare_memory(
        &mut self,
        spec: &EngineSpec,
        capacity: u64,
        n: usize,
    ) -> Result<(Vec<foliocache::File>, FolioBefore)> {
        let cache = build_cache(spec, capacity)?;
        let handles = (0..n)
            .map(|i| cache.memfile(&format!("populate-{i}"), 0))
            .collect::<io::Result<Vec<_>>>()
            .context("foliocache engine: opening the memory file")?;
        for f in &handles {
            f.set_write_insert(spec.folio.grab);
        }
        let before = FolioBefore::of(&cache, spec, &handles[0], None);
        let mut state = FolioState::new(cache, spec, capacity);
        state.files = handles
            .iter()
            .enumerate()
            .map(|(i, f)| (PathBuf::from(format!("memory:{i}")), f.clone()))
            .collect();
        self.0.insert(spec.label.clone(), state);
        Ok((handles, before))
    }

    /// Frees the cache of engine `label`, if any, without waiting.
    pub(super) fn remove(&mut self, label: &str) {
        self.0.remove(label);
    }

    /// Opens `path` through the cache of the engine `label`.
    ///
    /// # Errors
    /// No cache for `label`, or opening the file.
    pub(super) fn open(&mut self, label: &str, path: &Path) -> Result<foliocache::File> {
        let state = self
            .0
            .get_mut(label)
            .with_context(|| format!("foliocache engine {label}: no cache"))?;
        if let Some(f) = state.files.get(path) {
            return Ok(f.clone());
        }
        let f = state
            .cache
            .open(path)
            .with_context(|| format!("foliocache engine: opening {}", path.display()))?;
        state.files.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }

    /// The statistics of engine `label`'s cache once its readahead IO in
    /// flight has completed.
    pub(super) fn stats(&self, label: &str) -> Option<CacheStats> {
        self.0.get(label).map(|s| {
            s.cache.wait_io_idle();
            s.cache.stats()
        })
    }

    /// Engine `label`'s cache (for a sampler beside its run).
    pub(super) fn cache(&self, label: &str) -> Option<foliocache::Cache> {
        self.0.get(label).map(|s| s.cache.clone())
    }

    /// Where the memory of engine `label`'s cache goes now.
    pub(super) fn memory(&self, label: &str) -> Option<foliocache::MemoryUsage> {
        self.0.get(label).map(|s| s.cache.memory())
    }

    /// Frees the cache of engine `label` once its IO in flight is done.
    pub(super) fn release(&mut self, label: &str) {
        if let Some(s) = self.0.remove(label) {
            s.cache.wait_io_idle();
        }
    }

    /// Frees every cache.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// Opens `path` through `cache`, for reading and, if `write`, writing.
fn open(cache: &Cache, path: &Path, write: bool) -> io::Result<foliocache::File> {
    if write {
        cache.open_options().read(true).write(true).open(path)
    } else {
        cache.open(path)
    }
}

/// One read pass over `files` through the cache (2 MiB reads); its time.
fn warm(files: &[foliocache::File]) -> Result<Duration> {
    let t = Instant::now();
    let mut buf = vec![0u8; 2 << 20];
    for f in files {
        let mut off = 0;
        while off < f.len() {
            let n = f.read_at(&mut buf, off).context("foliocache warm pass")?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
    }
    Ok(t.elapsed())
}

/// A new cache for `spec` of `capacity` bytes (its arena populated now
/// with `populate=eager`).
fn build_cache(spec: &EngineSpec, capacity: u64) -> Result<Cache> {
    let mut b = Cache::builder()
        .capacity(usize::try_from(capacity).context("capacity too large")?)
        .populate(spec.folio.populate)
        .huge_pages(spec.folio.huge)
        .readahead(spec.folio.readahead())
        .io_engine(IoEngineConfig::new().kind(spec.folio.io));
    if let Some(f) = spec.folio.max_folio {
        b = b.max_folio_size(f as usize);
    }
    if spec.folio.guardian {
        b = b.guardian(foliocache::Guardian::Child);
    }
    b.build().with_context(|| {
        format!(
            "foliocache engine: building a cache of {}",
            fmt_size(capacity)
        )
    })
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
