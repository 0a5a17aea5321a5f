//! One way for tests to build a cache ([`TestCache`]) and open files in it
//! over the backing a test needs: memory ([`mem_file`]), memory behind
//! fault injection ([`faulty_file`]), or a real file on the target's
//! filesystem, where `O_DIRECT` works ([`TempPath`](crate::TempPath),
//! [`open_rw`]).
//!
//! ```text
//! use test_support::cache::{faulty_file, TestCache};
//!
//! // 64 pages, folios of at most 16 KiB, no readahead, no writeback
//! // until a sync or the capacity.
//! let c = TestCache::pages(64).max_folio(16 << 10).no_readahead().quiet().build();
//! let (f, backing) = faulty_file(&c, b"initial bytes");
//! backing.fail_nth(backing::Op::Write, 1, libc::EIO);
//! ```
//!
//! Behind the `cache` feature, so that the crates under the cache (the
//! xarray, the backings) test without building it.

use std::io;
use std::path::Path;
use std::sync::Arc;

use backing::aio::IoEngineConfig;
use backing::{FaultyBacking, MemBacking};
use foliocache::{Cache, CacheBuilder, File, Populate, PressureConfig, ReadaheadConfig};

/// The cache's page.
const PAGE: usize = 4096;

/// A cache for a test: a capacity ([`bytes`](Self::bytes) or
/// [`pages`](Self::pages)), then [`Cache::builder`]'s defaults (folios up to
/// 2 MiB, the default readahead, the arena populated lazily, the pressure
/// watcher on) unless a method says otherwise; [`build`](Self::build) makes
/// it.
///
/// Each method sets one thing and says which [`CacheBuilder`] setting it
/// is.
#[derive(Debug)]
#[must_use = "a TestCache does nothing until `build`"]
pub struct TestCache {
    builder: CacheBuilder,
    /// The capacity, for [`quiet`](Self::quiet).
    capacity: usize,
    quiet: bool,
}

impl TestCache {
    /// A cache of `capacity` bytes ([`CacheBuilder::capacity`]).
    pub fn bytes(capacity: usize) -> Self {
        TestCache {
            builder: Cache::builder().capacity(capacity),
            capacity,
            quiet: false,
        }
    }

    /// A cache of `n` pages of 4 KiB.
    pub fn pages(n: usize) -> Self {
        TestCache::bytes(n * PAGE)
    }

    /// Folios of at most `bytes` ([`CacheBuilder::max_folio_size`]).
    pub fn max_folio(mut self, bytes: usize) -> Self {
        self.builder = self.builder.max_folio_size(bytes);
        self
    }

    /// No readahead: a miss reads what the request needs (the largest
    /// aligned folios inside it), so a test knows which folios exist, can
    /// count IOs and place faults exactly.
    pub fn no_readahead(self) -> Self {
        self.readahead(ReadaheadConfig::disabled())
    }

    /// Readahead `cfg` ([`CacheBuilder::readahead`]).
    pub fn readahead(mut self, cfg: ReadaheadConfig) -> Self {
        self.builder = self.builder.readahead(cfg);
        self
    }

    /// Dirty bytes above which a writer is throttled
    /// ([`CacheBuilder::dirty_limit`]).
    pub fn dirty_limit(mut self, bytes: usize) -> Self {
        self.builder = self.builder.dirty_limit(bytes);
        self
    }

    /// Dirty bytes above which the flusher writes back
    /// ([`CacheBuilder::dirty_background`]).
    pub fn dirty_background(mut self, bytes: usize) -> Self {
        self.builder = self.builder.dirty_background(bytes);
        self
    }

    /// Both dirty thresholds at the capacity: nothing is written back in
    /// the background, and no writer throttled, below it, so only syncs,
    /// closes and the test write back.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Refault detection on or off ([`CacheBuilder::refault_detection`]).
    pub fn refault_detection(mut self, on: bool) -> Self {
        self.builder = self.builder.refault_detection(on);
        self
    }

    /// Bytes of index nodes eviction shadows may hold
    /// ([`CacheBuilder::shadow_budget`]).
    pub fn shadow_budget(mut self, bytes: usize) -> Self {
        self.builder = self.builder.shadow_budget(bytes);
        self
    }

    /// When the arena is faulted in ([`CacheBuilder::populate`]).
    pub fn populate(mut self, populate: Populate) -> Self {
        self.builder = self.builder.populate(populate);
        self
    }

    /// The readahead IO engine ([`CacheBuilder::io_engine`]).
    pub fn io_engine(mut self, cfg: IoEngineConfig) -> Self {
        self.builder = self.builder.io_engine(cfg);
        self
    }

    /// The memory-pressure watcher ([`CacheBuilder::pressure`]).
    pub fn pressure(mut self, cfg: PressureConfig) -> Self {
        self.builder = self.builder.pressure(cfg);
        self
    }

    /// Who writes back what the process leaves unsaved if it dies
    /// ([`CacheBuilder::guardian`](foliocache::CacheBuilder::guardian)).
    pub fn guardian(mut self, guardian: foliocache::Guardian) -> Self {
        self.builder = self.builder.guardian(guardian);
        self
    }

    /// The cache, or the builder's error (for a test of that error).
    pub fn try_build(self) -> io::Result<Cache> {
        let mut b = self.builder;
        if self.quiet {
            b = b.dirty_limit(self.capacity).dirty_background(self.capacity);
        }
        b.build()
    }

    /// The cache; panics with the builder's error.
    #[track_caller]
    pub fn build(self) -> Cache {
        self.try_build()
            .unwrap_or_else(|e| panic!("building the test cache: {e}"))
    }
}

/// A file of `data` over a [`MemBacking`], opened through `cache`.
#[track_caller]
pub fn mem_file(cache: &Cache, data: &[u8]) -> File {
    cache
        .open_backing(MemBacking::with_data(data.to_vec()))
        .unwrap_or_else(|e| panic!("opening a memory backing: {e}"))
}

/// A file of `data` over a [`FaultyBacking`] of a [`MemBacking`], opened
/// through `cache`, and the backing, to arm faults on and to read
/// (`backing.inner().contents()`).
#[track_caller]
pub fn faulty_file(cache: &Cache, data: &[u8]) -> (File, Arc<FaultyBacking<MemBacking>>) {
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.to_vec())));
    let f = cache
        .open_backing(b.clone())
        .unwrap_or_else(|e| panic!("opening a faulty memory backing: {e}"));
    (f, b)
}

/// Opens `path` read-write, creating it, through `cache`.
#[track_caller]
pub fn open_rw(cache: &Cache, path: &Path) -> File {
    cache
        .open_options()
        .read(true)
        .write(true)
        .create(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {} read-write: {e}", path.display()))
}
