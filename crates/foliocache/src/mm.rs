//! The state one cache's parts share (`CacheInner`), and what needs
//! several of them: allocation, which reclaims when the arena is empty and,
//! when nothing can be reclaimed, waits while the cache makes progress (the
//! kernel's `__alloc_pages_slowpath` entering direct reclaim), and the
//! registry of the files open. A mapping reaches the cache through it; the public
//! [`Cache`](crate::Cache) (`cache.rs`) builds it and holds it.
//!
//! Allocation calls reclaim (`vmscan.rs`), reclaim removes folios from
//! mappings (`filemap.rs`), and a mapping allocates here: the one import
//! cycle of the crate, the kernel's own (`page_alloc.c`, `vmscan.c`,
//! `filemap.c`).

use std::io;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use backing::aio::IoEngine;

use crate::bdi::Bdi;
use crate::filemap::Mapping;
use crate::folio::{Folio, Memory, MemoryOwner};
use crate::lru::{LruVec, Lruv};
use crate::readahead::{ReadaheadConfig, UnreadCap};
use crate::stats::Stats;
use crate::sync::{AtomicU64, Ordering};
use crate::vmscan::{self, Reclaim};

/// How long an allocation waits with nothing freed and nothing written
/// back before it fails with `OutOfMemory` (16 yields, then 1 ms sleeps):
/// a cache whose every folio stays pinned or locked.
pub(crate) const ALLOC_WAIT: Duration = Duration::from_millis(200);

#[cfg(not(loom))]
const ALLOC_WAIT_ROUNDS: u32 = 16 + 200;
/// Under loom the wait is left out: it only repeats the allocation and the
/// reclaim the models already explore, and would multiply their states.
#[cfg(loom)]
const ALLOC_WAIT_ROUNDS: u32 = 0;

/// How many times [`ALLOC_WAIT`] an allocation waits without progress
/// when the cache holds dirty folios (the flusher is making clean ones).
const DIRTY_WAIT_FACTOR: u32 = 10;

/// The wait of a caller that needs a free folio and found none to
/// reclaim, as the kernel's `__alloc_pages_slowpath` retries while
/// reclaim makes progress (`should_reclaim_retry` counts only the loops
/// that made none, and `reclaim_throttle` waits for writeback): it goes
/// on as long as the cache makes progress, and fails once a whole
/// [`ALLOC_WAIT`] (or [`DIRTY_WAIT_FACTOR`] times that while the cache
/// holds dirty folios or folios under writeback: the flusher, kicked at
/// each step, is making clean ones) passed with none. Progress is a folio
/// evicted or dropped, or a byte written back (a write that failed is
/// none: a dead backing's folios stay dirty and the wait ends). Taken by
/// [`CacheInner::alloc_folio`] and by a write whose folio is pinned with
/// no free folio to copy it to (which waits with no folio locked, for
/// memory or for the pins to go).
pub(crate) struct AllocWait {
    /// Steps waited since the last progress.
    round: u32,
    /// Windows that ended with progress.
    windows: u32,
    writeback: bool,
    /// The progress count when the window began (`None`: not yet).
    progress: Option<u64>,
}

impl AllocWait {
    pub(crate) fn new() -> Self {
        AllocWait {
            round: 0,
            windows: 0,
            writeback: false,
            progress: None,
        }
    }

    /// Waits one step (16 yields, then 1 ms sleeps), kicking the flusher
    /// when there is dirty data; `false`, without waiting, once a whole
    /// window passed without progress (the caller fails).
    pub(crate) fn wait(&mut self, cache: &CacheInner) -> bool {
        self.writeback = cache.stats.dirty_pages.load(Ordering::Relaxed)
            + cache.stats.writeback_pages.load(Ordering::Relaxed)
            > 0;
        if self.writeback {
            cache.bdi.kick();
        }
        let rounds = if self.writeback {
            ALLOC_WAIT_ROUNDS * DIRTY_WAIT_FACTOR
        } else {
            ALLOC_WAIT_ROUNDS
        };
        let now = progress(cache);
        let since = *self.progress.get_or_insert(now);
        if self.round >= rounds {
            if now == since {
                return false;
            }
            // Something was freed or written back: a new window, of
            // sleeps (the yields were for a reader about to let go).
            self.progress = Some(now);
            self.windows += 1;
            self.round = rounds.min(16);
        }
        if self.round < 16 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.round += 1;
        true
    }

    /// About how long the wait that just ended lasted, for its error
    /// message.
    pub(crate) fn waited(&self) -> Duration {
        let window = if self.writeback {
            ALLOC_WAIT * DIRTY_WAIT_FACTOR
        } else {
            ALLOC_WAIT
        };
        window * (self.windows + 1)
    }
}

/// What an allocation waiting for memory counts as the cache's progress:
/// folios evicted or dropped behind, and bytes written back (each only
/// grows).
fn progress(cache: &CacheInner) -> u64 {
    let s = &cache.stats;
    s.evictions.sum()
        + s.dropbehind_drops.load(Ordering::Relaxed)
        + s.io_write_bytes.load(Ordering::Relaxed)
}

/// What every part of one cache reaches: its memory, its counters, its IO
/// engine and the settings reads follow, reclaim's and writeback's state,
/// the LRU lists and the files open. Each part is owned by its module
/// (`folio.rs`, `stats.rs`, `vmscan.rs`, `bdi.rs`, `lru.rs`) and reached
/// through its methods; this module ties them together for what needs
/// several: allocation that reclaims, and the registry of files.
pub(crate) struct CacheInner {
    /// The arena, its descriptors and its pages' dirty bits.
    pub(crate) mem: Memory,
    /// The counters.
    pub(crate) stats: Stats,
    /// The IO engine and the read settings.
    pub(crate) io: Io,
    /// Reclaim's state: the shadow budget and its trimmer.
    pub(crate) reclaim: Reclaim,
    /// Writeback's control: the flusher, its pool, the dirty thresholds.
    pub(crate) bdi: Bdi,
    /// The LRU lists and the eviction clock ([`CacheInner::lru`]).
    lruvec: LruVec,
    /// The files open, and those closed with dirty data kept.
    files: Files,
    /// Runs at the drop: the pressure watcher's wake-up, if it runs.
    #[allow(clippy::type_complexity)]
    on_drop: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The curve thread's wake-up (`cache.rs`, `spawn_curve`): it sleeps
    /// on it between looks at the sample queue, up to a second while
    /// idle, and the drop wakes it to exit.
    pub(crate) curve_kick: Arc<crate::kick::Kick>,
}

/// The cache's IO engine and the settings its reads follow.
pub(crate) struct Io {
    /// Asynchronous readahead IO (`None` under loom: synchronous).
    pub(crate) engine: Option<IoEngine>,
    /// Runs submitted to `engine` whose completion has not finished yet
    /// (including dropping what it held: a closed file's mapping goes when
    /// its last run completes).
    pub(crate) in_flight: AtomicU64,
    /// The largest folio order the cache makes.
    pub(crate) max_order: u32,
    /// Readahead's settings for files opened from now on.
    pub(crate) readahead: ReadaheadConfig,
    /// The streams' unread readahead over the whole cache, and its cap.
    pub(crate) unread: Arc<UnreadCap>,
}

impl Io {
    /// An engine (none under loom), with no run in flight, for a cache of
    /// `capacity_pages`.
    pub(crate) fn new(
        engine: Option<IoEngine>,
        max_order: u32,
        readahead: ReadaheadConfig,
        capacity_pages: u64,
    ) -> Io {
        Io {
            engine,
            in_flight: AtomicU64::new(0),
            max_order,
            readahead,
            unread: Arc::new(UnreadCap::new(capacity_pages)),
        }
    }
}

/// The registry of a cache's files. (Its locks are plain locks even under
/// loom: nothing inside them is part of a modelled protocol, and no model
/// thread can be switched out while holding them.)
#[derive(Default)]
#[allow(clippy::disallowed_types)]
struct Files {
    /// Every open file's mapping (dead ones pruned as we go): for the
    /// figures summed over files, for trimming shadows, and for writeback.
    open: parking_lot::Mutex<Vec<Weak<Mapping>>>,
    /// Closed files whose writeback failed at their close, with when: kept
    /// (their dirty data cached, their mapping registered, so a reopen
    /// shares it and its next sync reports the error) while the flusher
    /// retries them, for a while (`writeback.rs`). (Each holds the cache
    /// too: the cache goes at the latest that long after its last user,
    /// once the last of them is written or given up.) The flusher, which
    /// retries them, does not run in the models, and nothing is held while
    /// it is.
    closed_dirty: parking_lot::Mutex<Vec<(Arc<Mapping>, Instant)>>,
}

impl Drop for CacheInner {
    /// Wakes the background threads that hold the cache weakly (the
    /// flusher, the populater, the curve's, the pressure watcher): they find it gone
    /// and exit now, so a dropped cache leaves none of its threads behind
    /// for their next timeout. (The writeback pool's workers are joined by
    /// its own drop.) Not joined: the last reference may be the one a
    /// background thread holds while it works, and this drop then runs on
    /// that thread.
    fn drop(&mut self) {
        self.bdi.kick_surely();
        self.mem.arena.release_ahead();
        self.curve_kick.kick_surely();
        if let Some(stop) = self.on_drop.get() {
            stop();
        }
    }
}

impl CacheInner {
    /// Ties the parts together.
    pub(crate) fn new(
        mem: Memory,
        io: Io,
        reclaim: Reclaim,
        bdi: Bdi,
        refault_detection: bool,
    ) -> CacheInner {
        let stats = Stats::default();
        stats.mrc.set_capacity(mem.arena.capacity_pages() as u64);
        CacheInner {
            mem,
            stats,
            io,
            reclaim,
            bdi,
            lruvec: LruVec::new(refault_detection),
            files: Files::default(),
            on_drop: std::sync::OnceLock::new(),
            curve_kick: Arc::default(),
        }
    }

    /// Sets what runs when the cache goes (once; a second call is
    /// ignored): the pressure watcher's wake-up.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn set_on_drop(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_drop.set(f);
    }

    /// Keeps a closed file whose writeback failed (see [`Files`]).
    pub(crate) fn keep_closed_dirty(&self, m: Arc<Mapping>) {
        self.files.closed_dirty.lock().push((m, Instant::now()));
    }

    /// The closed files kept for their dirty data, taken out of the
    /// registry (the flusher puts back those it keeps).
    pub(crate) fn take_closed_dirty(&self) -> Vec<(Arc<Mapping>, Instant)> {
        std::mem::take(&mut *self.files.closed_dirty.lock())
    }

    /// Puts back closed files still kept (see
    /// [`take_closed_dirty`](Self::take_closed_dirty)).
    pub(crate) fn put_back_closed_dirty(
        &self,
        keep: impl IntoIterator<Item = (Arc<Mapping>, Instant)>,
    ) {
        self.files.closed_dirty.lock().extend(keep);
    }

    /// The LRU lists' operations (`lru.rs`).
    #[inline]
    pub(crate) fn lru(&self) -> Lruv<'_> {
        Lruv::new(&self.lruvec, &self.mem.table, &self.stats)
    }

    /// Allocates a folio of `order` or, failing that, of the largest smaller
    /// order the arena can give, reclaiming when it can give none. The folio
    /// comes back with one reference (the caller's), in no mapping.
    ///
    /// When nothing can be reclaimed because every folio is locked, dirty
    /// or held by a reader, it waits ([`AllocWait`]) as long as the cache
    /// makes progress: readers hold folios only while they copy out, no
    /// caller holds a folio reference while it allocates, and the flusher
    /// makes dirty folios clean; a cache where nothing is freed or written
    /// back for a whole window (pinned, or its backing's writes failing)
    /// fails the read or write instead of hanging it.
    ///
    /// # Errors
    /// `OutOfMemory` when nothing could be reclaimed and nothing was freed
    /// or written back for [`ALLOC_WAIT`] (ten times that with dirty data):
    /// every cached folio stayed locked, referenced or dirty.
    pub(crate) fn alloc_folio(&self, order: u32) -> io::Result<&Folio> {
        self.reclaim_until(1 << order, || {
            (0..=order).rev().find_map(|o| self.mem.alloc(o))
        })
    }

    /// Waits, as [`alloc_folio`](Self::alloc_folio) waits (direct reclaim,
    /// then the wait for folios to become clean or unpinned while the
    /// cache makes progress, the flusher kicked), until the arena has `pages` free pages (at least
    /// one, at most the whole arena), allocating none: the job an async
    /// read or write awaits when it found no memory without waiting
    /// (`future/job.rs`, `docs/async.md`), which then allocates itself.
    ///
    /// # Errors
    /// `OutOfMemory`, as `alloc_folio`, when the wait ran out.
    pub(crate) fn wait_for_room(&self, pages: u64) -> io::Result<()> {
        let cap = self.mem.arena.capacity_pages();
        let want = usize::try_from(pages).unwrap_or(cap).clamp(1, cap);
        self.reclaim_until(want as u64, || {
            (self.mem.arena.free_pages() >= want).then_some(())
        })
    }

    /// Whether the arena has `pages` free pages now, or after one reclaim
    /// pass: the non-waiting test of an async write's piece
    /// (`future/write.rs`); never waits.
    pub(crate) fn has_room(&self, pages: u64) -> bool {
        let free = self.mem.arena.free_pages() as u64;
        free >= pages
            || (vmscan::direct_reclaim(self, pages - free) > 0
                && self.mem.arena.free_pages() as u64 >= pages)
    }

    /// The loop of the kernel's `__alloc_pages_slowpath` as this cache runs
    /// it: `take` (an allocation, or a test for free memory) until it
    /// gives something, with direct reclaim of `pages` between tries and,
    /// when reclaim frees nothing, the [`AllocWait`] (bounded by progress).
    fn reclaim_until<T>(&self, pages: u64, mut take: impl FnMut() -> Option<T>) -> io::Result<T> {
        let mut wait = AllocWait::new();
        loop {
            if let Some(t) = take() {
                return Ok(t);
            }
            if vmscan::direct_reclaim(self, pages) > 0 {
                continue;
            }
            // Dirty folios, or folios under writeback, become clean as the
            // flusher writes them: worth waiting longer for (the kernel's
            // reclaim waits for writeback too). Nobody waits here holding a
            // folio lock (a write that holds some takes only what is free),
            // so the flusher can always go on.
            if wait.wait(self) {
                continue;
            }
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "foliocache: the cache ({} bytes) is full and every folio in it stayed in \
                     use (locked, referenced, or dirty, nothing freed or written back) for \
                     {:?}; use a larger capacity, fewer concurrent readers or a lower dirty \
                     limit",
                    self.mem.arena.capacity_bytes(),
                    wait.waited()
                ),
            ));
        }
    }

    /// A folio of exactly `order`, for readahead: from the arena, or after
    /// one reclaim pass; `None` rather than waiting (a window shrinks or
    /// falls back when memory is short; only the folio a reader needs
    /// waits, through [`alloc_folio`](Self::alloc_folio)).
    pub(crate) fn try_alloc_folio(&self, order: u32) -> Option<&Folio> {
        for attempt in 0..2 {
            if let Some(f) = self.mem.alloc(order) {
                return Some(f);
            }
            if attempt == 0 && vmscan::direct_reclaim(self, 1 << order) == 0 {
                break;
            }
        }
        None
    }

    /// Up to `n` folios of exactly `order` for a readahead window, taken
    /// from the arena in one hold of its lock (one more after one reclaim
    /// pass if it was short), each with one reference and in no mapping.
    /// Returns how many were added to `out`; never waits.
    pub(crate) fn try_alloc_folios<'c>(
        &'c self,
        order: u32,
        n: usize,
        out: &mut Vec<&'c Folio>,
    ) -> usize {
        let mut got = self.mem.alloc_bulk(order, n, out);
        if got < n && vmscan::direct_reclaim(self, ((n - got) as u64) << order) > 0 {
            got += self.mem.alloc_bulk(order, n - got, out);
        }
        got
    }

    /// Records a new file's mapping. Dead entries are pruned whenever the
    /// list doubles, so a program that opens and closes many files keeps
    /// it at about twice the files open.
    pub(crate) fn register(&self, m: &Arc<Mapping>) {
        let mut all = self.files.open.lock();
        if all.len() >= 64 && all.len().is_power_of_two() {
            all.retain(|w| w.strong_count() > 0);
        }
        all.push(Arc::downgrade(m));
    }

    /// The mapping of the file `key` (device, inode) if one is open in this
    /// cache, else the one `make` builds, registered; in one hold of the
    /// registry lock, so two threads opening a file get one mapping.
    /// Returns it and whether it is new.
    pub(crate) fn find_or_register(
        &self,
        key: (u64, u64),
        make: impl FnOnce(Weak<Mapping>) -> Mapping,
    ) -> (Arc<Mapping>, bool) {
        let mut all = self.files.open.lock();
        if let Some(m) = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|m| m.inode.key == Some(key))
        {
            return (m, false);
        }
        if all.len() >= 64 && all.len().is_power_of_two() {
            all.retain(|w| w.strong_count() > 0);
        }
        let m = Arc::new_cyclic(|this| {
            let mut mapping = make(this.clone());
            mapping.inode.key = Some(key);
            mapping
        });
        all.push(Arc::downgrade(&m));
        (m, true)
    }

    /// The mappings of the files open now (each kept alive by the returned
    /// `Arc` until it is dropped: drop them with no cache lock held, as the
    /// last one may be the file's and its drop takes the LRU lock).
    pub(crate) fn live_mappings(&self) -> Vec<Arc<Mapping>> {
        let mut all = self.files.open.lock();
        all.retain(|w| w.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    }
}

impl MemoryOwner for CacheInner {
    fn memory(&self) -> &Memory {
        &self.mem
    }
}
