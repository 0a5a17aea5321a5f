//! What an engine is prepared for and what its preparation notes: one
//! run of a job ([`Run`], [`RunMode`]) and the facts about it besides its
//! figures ([`Setup`], foliocache's state before it: [`FolioBefore`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use foliocache::{Cache, CacheStats, Populate, ReadaheadConfig};

use super::fuse_mount::FuseFigures;
use crate::spec::engine::EngineSpec;
use crate::spec::JobSpec;

/// What an engine is prepared for: one run of a job.
pub struct Run<'a> {
    /// The engine, as given.
    pub spec: &'a EngineSpec,
    /// The job.
    pub job: &'a JobSpec,
    /// The job's data files (none read for a memory job).
    pub files: &'a [PathBuf],
    /// Cold or warm, foliocache's capacity, `--consume`.
    pub mode: RunMode,
}

impl Run<'_> {
    /// Whether the job writes.
    pub fn write(&self) -> bool {
        self.job.rw.is_write()
    }

    /// Each data file's (or memory job thread's) size in bytes.
    ///
    /// # Errors
    /// It does not fit this machine's address space.
    pub fn size(&self) -> Result<usize> {
        usize::try_from(self.job.file_size).context("--size too large for this machine")
    }
}

/// Facts about an engine's run besides its figures.
#[derive(Debug, Default)]
pub struct Setup {
    /// Lines for the report (warnings start with "warning:").
    pub notes: Vec<String>,
    /// Page-cache residency of the data after warming or dropping:
    /// (resident pages, pages, "after warming" / "after drop").
    pub residency: Option<(usize, usize, &'static str)>,
    /// `mmap` and `memcpy`: bytes of the mappings the kernel maps with
    /// 2 MiB entries before the run (the page cache's 2 MiB folios; the
    /// anonymous copy's transparent huge pages), and bytes mapped.
    pub huge_mapped: Option<(u64, u64)>,
    /// foliocache's figures before the measurement.
    pub folio_before: Option<FolioBefore>,
    /// A memory job's setup, part of its run: the time to map the memory,
    /// make the memfd, or build foliocache's cache (its arena's populate
    /// with `populate=eager`) and open the file.
    pub setup_time: Option<Duration>,
    /// The `fuse` engine's cache figures before the measurement.
    pub fuse_before: Option<FuseFigures>,
}

/// How a run treats caches.
#[derive(Debug, Clone, Copy)]
pub struct RunMode {
    /// `--cold`.
    pub cold: bool,
    /// foliocache's capacity (`--capacity`, or 1.25x the data).
    pub capacity: u64,
    /// `--consume`: every read's bytes are summed.
    pub consume: bool,
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
    pub(super) fn of(
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
