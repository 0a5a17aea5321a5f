//! The foliocache engines' caches, by engine label, kept across the runs
//! of one bench invocation ([`Caches`]): one cache (and its populate
//! cost) serves every job over the same data; a cold run and an uncached
//! engine get a fresh one.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use backing::aio::IoEngineConfig;
use foliocache::{Cache, CacheStats};

use super::setup::{FolioBefore, RunMode};
use crate::spec::engine::{EngineSpec, FolioOptions};
use crate::units::fmt_size;

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
    pub(super) fn prepare(
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
    pub(super) fn prepare_memory(
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
