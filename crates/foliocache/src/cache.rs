//! The public cache: [`Cache`], built by [`CacheBuilder`], and its
//! figures ([`CacheStats`], [`MemoryUsage`]). Building one makes its parts,
//! ties them together in a `CacheInner` (`mm.rs`) and starts its background
//! threads: the flusher (`writeback.rs`), the populater of a lazily
//! populated arena, and the pressure watcher (`pressure.rs`).
//!
//! ```text
//!   Cache ──Arc──> CacheInner (mm.rs)
//!     │              mem: Memory (folio.rs)        arena, descriptors, dirty bits
//!     │              stats: Stats (stats.rs)       the counters
//!     │              io: Io (mm.rs)                IO engine, read settings
//!     │              reclaim: Reclaim (vmscan.rs)  shadow budget
//!     │              bdi: Bdi (bdi.rs)             flusher, writeback pool, dirty limits
//!     │              LRU lists (lru.rs), files open (mm.rs)
//!   open(path)         ^
//!     v                │ (each mapping keeps the cache alive)
//!   File ──> Mapping (filemap): index -> folio, backing: an O_DIRECT file
//! ```
//!
//! # Lock order
//! See the crate documentation: one order for every lock.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::arena::{Arena, Populate, MAX_ORDER, PAGE_SIZE};
use crate::bdi::Bdi;
use crate::folio::{FolioTable, Memory};
use crate::mm::{CacheInner, Io};
use crate::pressure::PressureConfig;
use crate::readahead::ReadaheadConfig;
use crate::stats::Latencies;
use crate::sync::Ordering;
use crate::vmscan::Reclaim;
use backing::aio::{EngineStats, IoEngine, IoEngineConfig};
use backing::ThreadStart;

/// Chunks of 2 MiB the populater keeps faulted in ahead of allocation
/// (with [`Populate::Lazy`]): 8 MiB, a few readahead windows, so a
/// stream of misses finds its memory ready while resident memory stays
/// within a few MiB of what is cached.
#[cfg(not(loom))]
const AHEAD_CHUNKS: usize = 4;

/// Starts the populater of a lazily populated cache: a thread that faults
/// in the chunks allocation takes next ([`Arena::populate_ahead`]) each
/// time allocation starts one, so that a miss does not pay the first
/// touch of fresh memory (a zeroed page per 4 KiB: as much as the read
/// itself, `docs/design.md`, "Memory: population and pressure") where a
/// CPU is idle to pay it instead. The kernel's page cache has no such
/// cost (it allocates pages it never zeroes); anonymous memory has. Like
/// the flusher, it holds the cache only while it works and exits once the
/// cache is gone.
#[cfg(not(loom))]
fn spawn_populater(inner: &Arc<CacheInner>, on_start: &ThreadStart) -> io::Result<()> {
    let kick = Arc::new(crate::kick::Kick::default());
    inner.mem.arena.set_ahead(kick.clone());
    let weak = Arc::downgrade(inner);
    on_start.spawn("foliocache-populate".into(), move || loop {
        let kicked = kick.wait(Duration::from_millis(500));
        let Some(inner) = weak.upgrade() else { return };
        if kicked {
            inner.mem.arena.populate_ahead(AHEAD_CHUNKS);
        }
    })?;
    Ok(())
}

/// Starts the thread that runs the miss-ratio curve's queued samples
/// through its simulations (`mrc.rs`, "Cost"): every 20 ms, every 1 ms
/// while an eighth of the queue fills between two looks, once a second
/// while nothing is sampled ([`curve_pause`]), so that a hit only queues
/// its sample. Like the flusher, it holds the cache only
/// while it works and exits once the cache is gone (the drop wakes it). (Under Miri, none:
/// a read drains the queue when it is half full, a curve asked for when
/// asked.)
#[cfg(not(loom))]
fn spawn_curve(inner: &Arc<CacheInner>, on_start: &ThreadStart) -> io::Result<()> {
    if cfg!(miri) {
        return Ok(());
    }
    let weak = Arc::downgrade(inner);
    let kick = Arc::clone(&inner.curve_kick);
    on_start.spawn("foliocache-curve".into(), move || {
        let mut pause = 1;
        loop {
            // Woken early only by the cache's drop.
            kick.wait(Duration::from_millis(pause));
            let Some(inner) = weak.upgrade() else { return };
            pause = curve_pause(pause, inner.stats.drain_curve());
        }
    })?;
    Ok(())
}

/// The curve thread's longest pause while reads are sampled, and while
/// none are (ms).
#[cfg(any(test, not(loom)))]
const CURVE_PAUSE_MS: u64 = 20;
#[cfg(any(test, not(loom)))]
const CURVE_IDLE_MS: u64 = 1000;

/// The curve thread's next pause after one of `pause` ms in which
/// `drained` sampled reads were queued: 1 ms while an eighth of the queue
/// fills between two looks; doubling up to [`CURVE_PAUSE_MS`] while
/// fewer come, and on to [`CURVE_IDLE_MS`] while none come, so that an
/// idle cache wakes its thread once a second, not fifty times. The reads
/// after an idle spell wait at most that second to be simulated, and a
/// read that finds the queue half full drains it itself (`Mrc::push`): a
/// curve asked for drains it first.
#[cfg(any(test, not(loom)))]
fn curve_pause(pause: u64, drained: u64) -> u64 {
    if drained > crate::mrc::QUEUE_ENTRIES / 8 {
        1
    } else if drained > 0 {
        (pause * 2).min(CURVE_PAUSE_MS)
    } else {
        (pause * 2).min(CURVE_IDLE_MS)
    }
}

/// Parses a size as every front end of the cache takes one (the CLI's
/// `--capacity`, the interposer's and the SQLite extension's
/// `*_CAPACITY` variables): bytes, or a number with a binary suffix (`k`,
/// `K`, `KB`, `KiB`, and the same for M, G and T: powers of 1024), or `B`.
/// The number may have a fraction (`1.5G`), rounded down to a byte.
///
/// ```
/// use foliocache::parse_size;
/// assert_eq!(parse_size("4096"), Ok(4096));
/// assert_eq!(parse_size("64KiB"), Ok(64 << 10));
/// assert_eq!(parse_size("1.5G"), Ok(3 << 29));
/// assert_eq!(parse_size("0.5k"), Ok(512));
/// assert_eq!(parse_size(" 2 m "), Ok(2 << 20));
/// assert!(parse_size("1.5.1G").is_err());
/// assert!(parse_size("G").is_err());
/// assert!(parse_size("12 parsecs").unwrap_err().contains("unknown size suffix"));
/// assert!(parse_size("99999999999T").unwrap_err().contains("too large"));
/// ```
///
/// # Errors
/// A message that says what is wrong and what is wanted.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let num_len = t
        .bytes()
        .take_while(|c| c.is_ascii_digit() || *c == b'.')
        .count();
    let (num, suffix) = t.split_at(num_len);
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() || frac.contains('.') || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "`{s}` is not a size (want bytes or a number with k, M, G, T, e.g. 4k, 64KiB, 1.5G)"
        ));
    }
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "`{s}`: unknown size suffix `{other}` (want k, M, G or T, optionally with B or iB)"
            ))
        }
    };
    let too_large = || format!("`{s}`: size too large");
    let unit = 1u128 << shift;
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    // The fraction's digits past what a byte can tell are dropped.
    let frac = &frac[..frac.len().min(15)];
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| too_large())?
    };
    let bytes = whole
        .checked_mul(unit)
        .and_then(|w| w.checked_add(frac_value * unit / 10u128.pow(frac.len() as u32)))
        .ok_or_else(too_large)?;
    u64::try_from(bytes).map_err(|_| too_large())
}

/// Configures and builds a [`Cache`].
#[derive(Debug, Clone)]
pub struct CacheBuilder {
    capacity: usize,
    max_folio_order: u32,
    populate: Populate,
    readahead: ReadaheadConfig,
    io: IoEngineConfig,
    pub(crate) refault_detection: bool,
    hit_ratio_curve: bool,
    shadow_budget: Option<usize>,
    dirty_limit: Option<usize>,
    dirty_background: Option<usize>,
    huge_pages: bool,
    pressure: PressureConfig,
    on_thread_start: ThreadStart,
    guardian: crate::guardian::Guardian,
}

impl Default for CacheBuilder {
    fn default() -> Self {
        CacheBuilder {
            capacity: 256 << 20,
            max_folio_order: MAX_ORDER,
            populate: Populate::Lazy,
            readahead: ReadaheadConfig::default(),
            io: IoEngineConfig::default(),
            refault_detection: true,
            hit_ratio_curve: true,
            shadow_budget: None,
            dirty_limit: None,
            dirty_background: None,
            huge_pages: true,
            pressure: PressureConfig::default(),
            on_thread_start: ThreadStart::default(),
            guardian: crate::guardian::Guardian::Off,
        }
    }
}

impl CacheBuilder {
    /// Bytes of folio memory: a hard limit (rounded down to whole pages).
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity = bytes;
        self
    }

    /// The largest folio a read or a write may create, in bytes (rounded
    /// down to a power of two pages, at most 2 MiB, at least one page).
    pub fn max_folio_size(mut self, bytes: usize) -> Self {
        let pages = (bytes / PAGE_SIZE).max(1);
        self.max_folio_order = (usize::BITS - 1 - pages.leading_zeros()).min(MAX_ORDER);
        self
    }

    /// When the arena's memory is faulted in: as the cache fills, 2 MiB
    /// at a time in one system call (the default, [`Populate::Lazy`]: the
    /// cache builds at once whatever its capacity, and holds only what it
    /// caches), or all at build ([`Populate::Eager`]; its cost is in
    /// [`CacheStats::populate_time`]).
    pub fn populate(mut self, populate: Populate) -> Self {
        self.populate = populate;
        self
    }

    /// Readahead settings for files opened through the cache (default:
    /// [`ReadaheadConfig::default`], 8 MiB windows; the kernel's are
    /// [`ReadaheadConfig::kernel`]). [`File::set_readahead`](crate::File::set_readahead)
    /// changes one file's.
    pub fn readahead(mut self, cfg: ReadaheadConfig) -> Self {
        self.readahead = cfg;
        self
    }

    /// The engine for readahead IO (default: io_uring where the kernel
    /// allows it, else a pool of 2 threads; queue depth 256): asynchronous
    /// windows leave as one submission of a read per run of contiguous
    /// folios and complete on the engine's thread.
    pub fn io_engine(mut self, cfg: IoEngineConfig) -> Self {
        self.io = cfg;
        self
    }

    /// Refault detection (default on): a folio read back soon after reclaim
    /// evicted it (its shadow's refault distance within the active list's
    /// size) starts on the active list. Off, refaults start inactive like
    /// any new folio (pure two-list LRU; shadows are still left, for
    /// [`File::cachestat`](crate::File::cachestat)). For comparisons.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn refault_detection(mut self, on: bool) -> Self {
        self.refault_detection = on;
        self
    }

    /// The miss-ratio curve's estimator (default on,
    /// [`Cache::hit_ratio_curve`]). Off, a hit does none of its work (no
    /// age counted, no page hashed) and the curve has no access. For
    /// comparisons: what the estimator costs a hit (`cargo bench -p
    /// foliocache --bench mrc`).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn hit_ratio_curve(mut self, on: bool) -> Self {
        self.hit_ratio_curve = on;
        self
    }

    /// Bytes of index nodes that eviction shadows may hold (nodes holding
    /// only shadows; see [`CacheStats::shadow_bytes`]). Default: one node
    /// per 24 pages of capacity, about 0.6 % of it, room for the shadows
    /// of up to 2.7 times the capacity in evicted pages (the kernel allows
    /// one node per 8 pages of memory; the default keeps all of the
    /// cache's bookkeeping under 2 % of its capacity, see
    /// [`Cache::memory`]). Past it, the oldest shadows go, whole nodes
    /// at a time, as the kernel's shadow-node shrinker frees them.
    pub fn shadow_budget(mut self, bytes: usize) -> Self {
        self.shadow_budget = Some(bytes);
        self
    }

    /// Whether the arena asks for transparent huge pages (default yes):
    /// fewer TLB misses on hits; but their first touch (zeroing, and
    /// compacting with `defrag=madvise`, 2 MiB at a time) can be several
    /// times slower than of 4 KiB pages
    /// (the note "First touch of memory" in `docs/measurements/`).
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// Who writes back what this process leaves unsaved if it dies
    /// (default [`Guardian::Off`](crate::Guardian::Off)): with
    /// [`Guardian::Child`](crate::Guardian::Child), data a write accepted
    /// outlives a `SIGKILL`, `abort`, a fatal signal, `_exit` or the OOM
    /// killer, as it does in the kernel's page cache: a child process
    /// writes it back once this one is gone. The cache's memory is then a
    /// shared memory file holding each dirty page's file and offset; a
    /// write marks its pages there as it marks them dirty. docs/design.md
    /// (section 12) has the design and what a kill at each step leaves.
    pub fn guardian(mut self, guardian: crate::guardian::Guardian) -> Self {
        self.guardian = guardian;
        self
    }

    /// The memory-pressure watcher (default: on, see [`PressureConfig`]):
    /// while the process's memory cgroup or the machine runs short, the
    /// cache shrinks toward a floor and gives the memory back to the OS;
    /// it grows again once memory is plentiful. [`PressureConfig::off`]
    /// keeps the capacity whatever happens.
    pub fn pressure(mut self, cfg: PressureConfig) -> Self {
        self.pressure = cfg;
        self
    }

    /// Dirty bytes above which a writer is throttled: it writes back its
    /// own file's dirty data before it writes more (the kernel's
    /// `dirty_bytes`). Default: three quarters of what the cache may hold
    /// at the time (its capacity, less what memory pressure took back), as
    /// the kernel's `dirty_ratio` is a share of the memory it could dirty.
    /// At least one page.
    pub fn dirty_limit(mut self, bytes: usize) -> Self {
        self.dirty_limit = Some(bytes);
        self
    }

    /// Dirty bytes above which the background flusher starts writing back
    /// (the kernel's `dirty_background_bytes`). Default: half the dirty
    /// limit (the kernel's ratios), and never above it.
    pub fn dirty_background(mut self, bytes: usize) -> Self {
        self.dirty_background = Some(bytes);
        self
    }

    /// Runs `f` first on every thread the cache starts, before the thread
    /// does any of its work (as tokio's `Builder::on_thread_start`): the
    /// flusher, the writeback pool's threads, the populater, the pressure
    /// watcher, and the IO engine's threads (its completion thread, its
    /// pool's, started on first use). It replaces a hook set in
    /// [`io_engine`](Self::io_engine)'s configuration. The short-lived
    /// threads that fault in a [`Populate::Eager`] arena during
    /// [`build`](Self::build) (which make no system call but `madvise`)
    /// do not run it.
    ///
    /// For a program that must tell the cache's threads from its own: an
    /// `LD_PRELOAD` interposer that lets the cache's own calls pass
    /// through, or one that blocks signals on threads it did not start.
    /// `f` should neither block for long nor panic (a thread whose hook
    /// panics ends there, see [`ThreadStart::new`]).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let started = Arc::new(AtomicUsize::new(0));
    /// let seen = started.clone();
    /// let cache = foliocache::Cache::builder()
    ///     .capacity(4 << 20)
    ///     .on_thread_start(move || {
    ///         seen.fetch_add(1, Ordering::Relaxed);
    ///     })
    ///     .build()?;
    /// # drop(cache);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn on_thread_start(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_thread_start = ThreadStart::new(f);
        self
    }

    /// Maps the arena and builds the cache.
    ///
    /// With the default [`Populate::Lazy`] it takes the same time whatever
    /// the capacity: the arena and the folio descriptors are mapped, not
    /// faulted in.
    ///
    /// # Errors
    /// A capacity under one page (`InvalidInput`); a capacity above what
    /// the process may use, its memory cgroup's limit or the machine's
    /// `MemAvailable` (`OutOfMemory`, naming both figures: refused even
    /// with [`Populate::Lazy`], where it is reserved rather than used,
    /// because the cache would fill it); the OS refusing the mapping
    /// (`ENOMEM`); or the IO engine's error (a bad configuration;
    /// `EngineKind::Uring` where io_uring is missing).
    /// Also starts the background flusher thread and, unless
    /// [`PressureConfig::off`], the pressure watcher; both exit when the
    /// cache is dropped.
    pub fn build(mut self) -> io::Result<Cache> {
        if self.on_thread_start.is_set() {
            self.io.on_thread_start = self.on_thread_start.clone();
        }
        // Under loom, readahead IO runs on the reader's thread (loom cannot
        // model the engine's threads).
        // (Not under loom: the models build caches by the thousand, and
        // the check reads /proc, which they do not model.)
        #[cfg(not(loom))]
        let limits = crate::pressure::MemoryLimits::read();
        #[cfg(not(loom))]
        crate::pressure::check_capacity(self.capacity / PAGE_SIZE * PAGE_SIZE, &limits)?;
        #[cfg(not(loom))]
        let io = Some(IoEngine::new(self.io)?);
        #[cfg(loom)]
        let io = None;
        let guard =
            crate::guardian::Guard::new(self.guardian.clone(), (self.capacity / PAGE_SIZE) as u64)?;
        let arena = Arena::with_memory(
            self.capacity,
            self.populate,
            self.huge_pages,
            guard
                .as_ref()
                .map(|g| (g.segment().fd(), g.segment().arena_offset())),
        )?;
        let table =
            FolioTable::with_huge_pages(arena.capacity_pages(), self.huge_pages, self.populate)?;
        let shadow_nodes = match self.shadow_budget {
            Some(bytes) => bytes / xarray::NODE_SIZE,
            None => arena.capacity_pages() / SHADOW_PAGES_PER_NODE,
        };
        let capacity_pages = arena.capacity_pages() as u64;
        let page = PAGE_SIZE as u64;
        let dirty_limit = self.dirty_limit.map(|b| (b as u64).div_ceil(page).max(1));
        let dirty_background = self.dirty_background.map(|b| (b as u64).div_ceil(page));
        let cache = Cache {
            warm: Arc::new(crate::loaded::Loaded::new()),
            inner: Arc::new(CacheInner::new(
                Memory::new(arena, table, guard),
                Io::new(io, self.max_folio_order, self.readahead, capacity_pages),
                Reclaim::new(shadow_nodes),
                Bdi::new(dirty_limit, dirty_background, &self.on_thread_start),
                self.refault_detection,
            )),
        };
        if !self.hit_ratio_curve {
            // A capacity of 0: the gate closed, nothing sampled, no curve.
            cache.inner.stats.mrc.set_capacity(0);
        } else {
            #[cfg(not(loom))]
            spawn_curve(&cache.inner, &self.on_thread_start)?;
        }
        #[cfg(not(loom))]
        crate::writeback::spawn_flusher(&cache.inner, &self.on_thread_start)?;
        #[cfg(not(loom))]
        if self.populate == Populate::Lazy {
            spawn_populater(&cache.inner, &self.on_thread_start)?;
        }
        #[cfg(not(loom))]
        crate::pressure::spawn(&cache.inner, &self.pressure, &limits, &self.on_thread_start)?;
        Ok(cache)
    }
}

/// A page cache shared by threads: clone it freely (it is an `Arc`).
///
/// ```no_run
/// let cache = foliocache::Cache::builder().capacity(64 << 20).build()?;
/// let file = cache.open("/var/lib/data/table.sst")?;
/// let mut buf = vec![0u8; 4096];
/// let n = file.read_at(&mut buf, 0)?; // first read: O_DIRECT IO
/// let n2 = file.read_at(&mut buf, 0)?; // then: a memory copy, no system call
/// # assert_eq!(n, n2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Cache {
    pub(crate) inner: Arc<CacheInner>,
    /// Warm restarts: the background load's progress and the files it
    /// loaded that no one opened yet (`loaded.rs`).
    pub(crate) warm: Arc<crate::loaded::Loaded>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Cache {
    /// A builder with the defaults (256 MiB, folios up to 2 MiB, populated
    /// as it fills, the pressure watcher on).
    pub fn builder() -> CacheBuilder {
        CacheBuilder::default()
    }

    /// Evicts folios as reclaim does (clean, unlocked, unused ones, inactive
    /// list first; each leaves a shadow) until at least `bytes` went back
    /// to the arena or nothing more can go. For a program that wants memory
    /// back under its own pressure signal. Returns the bytes freed (whole
    /// folios, so possibly more than asked).
    pub fn shrink(&self, bytes: u64) -> u64 {
        let pages = bytes.div_ceil(PAGE_SIZE as u64);
        let mut freed = 0;
        while freed < pages {
            match crate::vmscan::reclaim(&self.inner, pages - freed) {
                0 => break,
                n => freed += n,
            }
        }
        freed * PAGE_SIZE as u64
    }

    /// Writes back every file's dirty data (no sync: the files get the
    /// bytes, not the durability), evicts every folio that can go (as
    /// [`shrink`](Self::shrink) does) and gives the memory freed back to
    /// the OS (`MADV_DONTNEED`, or `MADV_REMOVE` for a memory file's
    /// arena), as the pressure watcher does under pressure: for a program
    /// done with most of what it cached (the interposer, once a process's
    /// files moved to its group's cache). Returns the bytes given back.
    /// The cache stays usable: it fills again as it is read.
    ///
    /// # Errors
    /// The first writeback error (the memory of what could go is given
    /// back all the same; what failed stays cached and dirty).
    pub fn release(&self) -> io::Result<u64> {
        let mut first = Ok(());
        for m in self.inner.live_mappings() {
            if let Err(e) = m.writeback(0, u64::MAX) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        self.shrink(u64::MAX);
        let released = self.inner.mem.arena.release_free() as u64;
        first.map(|()| released)
    }

    /// Checks the LRU lists' consistency (see `Lruv::check` in `lru.rs`).
    /// For tests.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn check_lru(&self) -> Result<(), String> {
        self.inner.lru().check()
    }

    /// The engine that runs readahead IO: `"io_uring (depth 256)"`,
    /// `"threads (2)"`, or `"synchronous"` (under loom).
    pub fn io_engine_name(&self) -> String {
        match &self.inner.io.engine {
            Some(e) => e.name(),
            None => "synchronous".to_string(),
        }
    }

    /// The IO engine's counters: readahead's reads, and the writeback
    /// writes that went out together through it (`IoEngine::write_all`,
    /// for files with a descriptor under io_uring); `None` without an
    /// engine (under loom).
    pub fn io_engine_stats(&self) -> Option<EngineStats> {
        self.inner.io.engine.as_ref().map(IoEngine::stats)
    }

    /// Waits until no readahead IO is in flight: every asynchronous window
    /// submitted so far has completed, and a file closed meanwhile has
    /// given its folios back. (Closing a file does not wait for its
    /// readahead; this does.)
    pub fn wait_io_idle(&self) {
        let mut spins = 0u32;
        while self.inner.io.in_flight.load(Ordering::Acquire) != 0 {
            if spins < 64 {
                spins += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// The bytes of memory free in the cache now ([`CacheStats::free_bytes`]
    /// alone: one load, where [`stats`](Self::stats) sums every counter and
    /// walks the open files; for a caller on a read path).
    pub fn free_bytes(&self) -> u64 {
        self.inner.mem.arena.free_pages() as u64 * PAGE_SIZE as u64
    }

    /// The cache's figures now.
    pub fn stats(&self) -> CacheStats {
        let i = &self.inner;
        let s = &i.stats;
        let total = i.mem.arena.capacity_pages() as u64;
        let live = i.live_mappings();
        // Dirty, under writeback, dirty again: a folio's writeback starts
        // (writeback counted, then dirty not) and a failed one ends
        // (dirty again, then writeback not) in orders that make a reader
        // of dirty then writeback see both at zero only across a failed
        // end, which the second read of dirty sees.
        let dirty = s.dirty_pages.load(Ordering::Acquire);
        let writeback = s.writeback_pages.load(Ordering::Acquire);
        let dirty = match dirty {
            0 => s.dirty_pages.load(Ordering::Acquire),
            d => d,
        };
        CacheStats {
            hits: s.hits.sum(),
            misses: s.misses.sum(),
            read_bytes: s.read_bytes.sum(),
            first_read_bytes: s.first_read_bytes.sum(),
            folios: s.folios.sum(),
            bytes_cached: s.pages.sum() * PAGE_SIZE as u64,
            evictions: s.evictions.sum(),
            io_reads: s.io_reads.sum(),
            io_bytes: s.io_bytes.sum(),
            capacity_bytes: total * PAGE_SIZE as u64,
            free_bytes: self.free_bytes(),
            populate_time: i.mem.arena.populate_time(),
            allowed_bytes: (i.mem.arena.limit_pages() * PAGE_SIZE) as u64,
            populated_bytes: i.mem.arena.populated_bytes() as u64,
            shared_huge_bytes: i.mem.arena.shared_huge_bytes() as u64,
            released_bytes: i.mem.arena.released_bytes() as u64,
            pressure_shrinks: s.pressure_shrinks.load(Ordering::Relaxed),
            refaults: s.refaults.sum(),
            activations: s.activations.sum(),
            shadows: live.iter().map(|m| m.nr_shadows()).sum(),
            shadow_bytes: live.iter().map(|m| m.shadow_bytes() as u64).sum(),
            dropbehind_drops: s.dropbehind_drops.load(Ordering::Relaxed),
            dirty_bytes: dirty * PAGE_SIZE as u64,
            writeback_bytes: writeback * PAGE_SIZE as u64,
            io_writes: s.io_writes.load(Ordering::Relaxed),
            io_write_bytes: s.io_write_bytes.load(Ordering::Relaxed),
            writeback_errors: s.writeback_errors.load(Ordering::Relaxed),
            throttled: s.throttled.load(Ordering::Relaxed),
            readahead_windows: s.readahead_windows.sum(),
            pin_copies: s.pin_copies.load(Ordering::Relaxed),
            miss_latency: s.miss_latency.snapshot(),
            sync_latency: s.sync_latency.snapshot(),
            throttle_latency: s.throttle_latency.snapshot(),
            read_errors: s.read_errors.load(Ordering::Relaxed),
            curve_samples_dropped: s.mrc.dropped(),
        }
    }

    /// The hit ratio this cache would have had at 0.25x, 0.5x, 1x, 2x and
    /// 4x its capacity over a recent window of reads (the epoch in
    /// progress and the one before, each about 16 capacities of reads),
    /// with the reads the window holds: a miss-ratio curve, for sizing the
    /// cache. The 1x point is the hit ratio the cache had, in what reads
    /// returned (the share from memory, as
    /// [`CacheStats::memory_bytes`] counts it, in pages); the larger
    /// sizes come from the eviction shadows' refault distances (and a
    /// sample of keys where shadows ran out), the smaller from the
    /// sample's miniature simulations. A point the window cannot tell yet
    /// (its reads' first reads, while the cache warms up, may have been
    /// hits at that size in a warm cache) is not known:
    /// [`HitRatioCurve::at`](crate::HitRatioCurve::at) and [`CurvePoint::known`](crate::CurvePoint::known)
    /// say `None`. See docs/design.md, "How big should the cache be", and
    /// docs/metrics.md.
    ///
    /// # Locking
    /// Takes the estimator's lock for a moment and sums the hit and miss
    /// counters; reads never wait on it. No allocation.
    ///
    /// # Example
    /// ```
    /// let cache = foliocache::Cache::builder().capacity(4 << 20).build()?;
    /// let curve = cache.hit_ratio_curve();
    /// assert_eq!(curve.accesses, 0);
    /// assert_eq!(curve.points[4].capacity_ratio, 4.0);
    /// assert_eq!(curve.at(2.0), None); // no read yet: not known
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hit_ratio_curve(&self) -> crate::HitRatioCurve {
        self.inner.stats.hit_ratio_curve()
    }

    /// Where the cache's memory goes now: the arena, and the bookkeeping
    /// beside it (folio descriptors, the arena's allocator, the dirty
    /// bitmap, every open file's index nodes with their shadows, the
    /// files' own state). See [`MemoryUsage`].
    ///
    /// The arena is the capacity; everything else is the overhead: about
    /// 1.0 % of the capacity for the descriptors, allocator and dirty
    /// bitmap; the index nodes of the cached folios (0.2 % for a cache
    /// full of densely cached 4 KiB folios, less with larger ones, more
    /// for sparse ones); the shadow budget (0.6 % by default,
    /// [`CacheBuilder::shadow_budget`]); a few hundred bytes per open
    /// file. 1.8 % in all for a densely filled cache. The figures are computed from the structures (no system call);
    /// memory the process's allocator keeps from freed nodes is not in
    /// them.
    pub fn memory(&self) -> MemoryUsage {
        let i = &self.inner;
        let pages = i.mem.arena.capacity_pages() as u64;
        let live = i.live_mappings();
        MemoryUsage {
            arena_bytes: pages * PAGE_SIZE as u64,
            descriptor_bytes: pages * FolioTable::bytes_per_page() as u64,
            allocator_bytes: i.mem.arena.metadata_bytes() as u64,
            dirty_bitmap_bytes: i.mem.dirty_bits.bytes() as u64,
            index_bytes: live.iter().map(|m| m.index_bytes() as u64).sum(),
            shadow_bytes: live.iter().map(|m| m.shadow_bytes() as u64).sum(),
            files: live.len() as u64,
            file_bytes: live.len() as u64 * std::mem::size_of::<crate::filemap::Mapping>() as u64,
            cached_pages: i.stats.pages.sum(),
        }
    }

    /// Writes back every dirty folio of every open file, then makes each
    /// file's backing durable (`fsync`). Returns the first error, after
    /// trying every file.
    ///
    /// # Errors
    /// A writeback or sync error of any file.
    pub fn sync_all(&self) -> io::Result<()> {
        let mut first = Ok(());
        for m in self.inner.live_mappings() {
            if let Err(e) = m.sync(true) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

impl CacheStats {
    /// Bytes reads got from memory: [`read_bytes`](Self::read_bytes)
    /// less [`first_read_bytes`](Self::first_read_bytes): the data reads
    /// found cached, readahead's pages excluded (readahead counts where it
    /// was read, with the backing's bytes). A folio
    /// read from the backing counts whole at its first read, so a read
    /// that takes part of a large folio and never comes back for the rest
    /// makes this a little low, never high.
    pub fn memory_bytes(&self) -> u64 {
        self.read_bytes.saturating_sub(self.first_read_bytes)
    }
}

/// Figures of a [`Cache`], from [`Cache::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheStats {
    /// Folio lookups by reads that found the data cached: page lookups,
    /// not bytes (a read of 4 KiB and one of a 2 MiB folio count one
    /// each), and a folio readahead brought in counts as a hit when a
    /// read finds it. For what reads got from memory, in bytes, see
    /// [`memory_bytes`](Self::memory_bytes).
    pub hits: u64,
    /// Folios a read had to create and fill from the backing.
    pub misses: u64,
    /// Bytes reads returned (all reads: hits, misses and the parts of
    /// each).
    pub read_bytes: u64,
    /// Of [`read_bytes`](Self::read_bytes), what the backing gave rather
    /// than memory: the bytes of each folio read from the backing (by a
    /// miss or by readahead), counted whole at the first read that copies
    /// from it. Readahead that no read reached is in
    /// [`io_bytes`](Self::io_bytes) only.
    pub first_read_bytes: u64,
    /// Folios in the cache now.
    pub folios: u64,
    /// Bytes of folios in the cache now.
    pub bytes_cached: u64,
    /// Folios evicted by reclaim.
    pub evictions: u64,
    /// Reads issued to backings (failed ones included).
    pub io_reads: u64,
    /// Bytes those reads returned: all the cache read from backings,
    /// readahead's included.
    pub io_bytes: u64,
    /// The arena's size (the capacity, in whole pages).
    pub capacity_bytes: u64,
    /// Arena bytes not holding a folio.
    pub free_bytes: u64,
    /// Time spent faulting the arena in at build (zero with
    /// [`Populate::Lazy`]).
    pub populate_time: Duration,
    /// What the cache may hold now: the capacity, or less while the
    /// pressure watcher has it shrunk ([`PressureConfig`]).
    pub allowed_bytes: u64,
    /// Arena memory faulted in, in 2 MiB chunks (all of it with
    /// [`Populate::Eager`]): about the arena's resident memory.
    pub populated_bytes: u64,
    /// Of that, bytes of a guardian's shared memory ([`Guardian`](crate::Guardian)) faulted
    /// in as 2 MiB pages, where the host gives shared memory no huge pages
    /// by itself (`MADV_COLLAPSE`; docs/design.md, "Huge pages of shared
    /// memory"); 0 in a private arena, whose huge pages are the kernel's
    /// transparent ones.
    pub shared_huge_bytes: u64,
    /// Bytes of free arena memory given back to the OS under pressure, in
    /// all.
    pub released_bytes: u64,
    /// Times the pressure watcher found memory short and shrank the cache.
    pub pressure_shrinks: u64,
    /// Folios added over an eviction shadow (data read again after reclaim
    /// evicted it), whether or not the refault test activated them.
    pub refaults: u64,
    /// Folios moved to the active list: by a second access while inactive,
    /// or by a refault within the workingset distance (`workingset_refault`).
    pub activations: u64,
    /// Eviction shadows in the index of every open file (a large one
    /// counts once).
    pub shadows: u64,
    /// Bytes of index nodes holding only shadows: the memory the shadows
    /// cost, bounded by the cache's shadow budget.
    pub shadow_bytes: u64,
    /// Dropbehind folios removed after an uncached read copied them out,
    /// or after an uncached write's writeback.
    pub dropbehind_drops: u64,
    /// Bytes of dirty folios (written, not yet written back).
    pub dirty_bytes: u64,
    /// Bytes of folios being written back now.
    pub writeback_bytes: u64,
    /// Writes issued to backings (one per contiguous dirty run; failed
    /// ones included).
    pub io_writes: u64,
    /// Bytes those writes wrote.
    pub io_write_bytes: u64,
    /// Writeback runs that failed (their folios stayed dirty).
    pub writeback_errors: u64,
    /// Writes that found the cache over its dirty limit and wrote back
    /// before going on.
    pub throttled: u64,
    /// Readahead windows built (synchronous and asynchronous, and those of
    /// `File::readahead`), counting those that inserted a folio.
    pub readahead_windows: u64,
    /// Folios a writer (a write, or truncation zeroing part of one) found
    /// pinned ([`File::pin`](crate::File::pin)) and copied, to write the
    /// copy and leave the pinned bytes as they were.
    pub pin_copies: u64,
    /// How long reads that missed waited for their data (from finding the
    /// folio absent to holding it filled).
    pub miss_latency: Latencies,
    /// How long `File::sync_data` and `File::sync_all` took (writeback and
    /// the backing's flush).
    pub sync_latency: Latencies,
    /// How long writers over the dirty limit were held (writing back, or
    /// waiting for the flusher), one count per throttled write.
    pub throttle_latency: Latencies,
    /// Reads from backings that failed (the backing's error, or a read
    /// short of the file's size); each failed a read or a readahead.
    pub read_errors: u64,
    /// Reads the miss-ratio curve's sample drew but could not queue (its
    /// queue full and its drain busy: the curve thread behind a loaded
    /// host's readers), left out of [`Cache::hit_ratio_curve`]: a gap in
    /// the sample's stream, which shifts the curve toward the reads that
    /// were queued. 0 with the curve off.
    pub curve_samples_dropped: u64,
}

/// Where a [`Cache`]'s memory goes, from [`Cache::memory`].
///
/// The arena (`arena_bytes`) is the capacity, mapped whole; the rest is
/// bookkeeping ([`overhead_bytes`](Self::overhead_bytes)). Per arena page
/// the cache keeps a 40-byte folio descriptor, about half a byte of
/// allocator bitmaps and one dirty bit; per cached folio an index slot
/// (one 552-byte node per 64 slots, a large folio taking one slot per
/// 64 pages of its size at most); per evicted page at most a share of
/// the shadow budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MemoryUsage {
    /// Folio memory: the capacity in whole pages.
    pub arena_bytes: u64,
    /// Folio descriptors, one per arena page.
    pub descriptor_bytes: u64,
    /// The arena allocator's bitmaps.
    pub allocator_bytes: u64,
    /// One dirty bit per arena page.
    pub dirty_bitmap_bytes: u64,
    /// Index nodes of every open file (those holding only shadows
    /// included).
    pub index_bytes: u64,
    /// Of `index_bytes`, the nodes holding only shadows.
    pub shadow_bytes: u64,
    /// Files open now (one mapping per file, shared by its handles).
    pub files: u64,
    /// Their mappings' own state (locks, sizes, readahead and error
    /// state; not their index nodes).
    pub file_bytes: u64,
    /// Pages of folios cached now.
    pub cached_pages: u64,
}

impl MemoryUsage {
    /// Everything but the arena.
    pub fn overhead_bytes(&self) -> u64 {
        self.descriptor_bytes
            + self.allocator_bytes
            + self.dirty_bitmap_bytes
            + self.index_bytes
            + self.file_bytes
    }

    /// The arena and the overhead.
    pub fn total_bytes(&self) -> u64 {
        self.arena_bytes + self.overhead_bytes()
    }

    /// Bookkeeping bytes per cached 4 KiB page: the per-arena-page
    /// structures (descriptor, allocator bitmaps, dirty bit) per page, and
    /// the index nodes not holding only shadows per cached page (`None`
    /// with nothing cached). The kernel's `struct page` alone is 64.
    pub fn metadata_bytes_per_page(&self) -> Option<f64> {
        let pages = self.arena_bytes / PAGE_SIZE as u64;
        if self.cached_pages == 0 || pages == 0 {
            return None;
        }
        let fixed = (self.descriptor_bytes + self.allocator_bytes + self.dirty_bitmap_bytes) as f64
            / pages as f64;
        let index =
            self.index_bytes.saturating_sub(self.shadow_bytes) as f64 / self.cached_pages as f64;
        Some(fixed + index)
    }
}

/// The default shadow budget: one index node per this many pages of
/// capacity.
const SHADOW_PAGES_PER_NODE: usize = 24;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mrc::QUEUE_ENTRIES;

    /// The curve thread looks every millisecond while the queue fills
    /// fast, backs off to 20 ms while reads are sampled slowly, and to a
    /// second while none are; the first sampled reads after an idle spell
    /// bring it back to 20 ms at once.
    #[test]
    fn the_curve_thread_backs_off_to_a_second_while_nothing_is_sampled() {
        let busy = crate::mrc::QUEUE_ENTRIES / 8 + 1;
        let mut pause = 1;
        let mut looks = 0;
        while pause < CURVE_IDLE_MS {
            pause = curve_pause(pause, 0);
            looks += 1;
        }
        assert_eq!(pause, CURVE_IDLE_MS);
        // From 1 ms to a second in ten looks (about 2 s of idling).
        assert_eq!(looks, 10);
        assert_eq!(curve_pause(CURVE_IDLE_MS, 0), CURVE_IDLE_MS);
        assert_eq!(curve_pause(CURVE_IDLE_MS, 1), CURVE_PAUSE_MS);
        assert_eq!(curve_pause(CURVE_IDLE_MS, busy), 1);
        assert_eq!(curve_pause(1, 1), 2);
        assert_eq!(curve_pause(16, 1), CURVE_PAUSE_MS);
    }

    /// A sampled read that finds the queue full and its drain busy is left
    /// out and counted where a user sees it (`CacheStats`, and the metrics'
    /// `foliocache_curve_samples_dropped`): the estimator's lock held (a
    /// drain in progress), the queue takes `QUEUE_ENTRIES` reads and drops
    /// the rest; once drained, it takes reads again.
    #[test]
    fn reads_the_queue_cannot_take_are_counted_as_dropped() {
        let cache = Cache::builder().capacity(16 << 20).build().unwrap();
        let mrc = &cache.inner.stats.mrc;
        let exact = crate::mrc::Exact::default();
        {
            let _draining = mrc.hold_drain();
            for h in 0..QUEUE_ENTRIES + 10 {
                mrc.push(h, true, None, || exact);
            }
            assert_eq!(cache.stats().curve_samples_dropped, 10);
        }
        // Drained (the curve thread may be at it too: then this waits),
        // the queue takes reads again.
        mrc.drain(|| exact);
        for h in 0..QUEUE_ENTRIES / 4 {
            mrc.push(h, true, None, || exact);
        }
        assert_eq!(cache.stats().curve_samples_dropped, 10);
    }
}
