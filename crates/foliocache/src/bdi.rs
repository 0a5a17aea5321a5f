//! A cache's writeback control (the kernel's `backing_dev_info` and its
//! `bdi_writeback`): the flusher's wake-up, the pool of threads a
//! writeback run's writes go through side by side, and the dirty
//! thresholds as the builder set them. `writeback.rs` runs writeback with
//! them; reclaim and allocation only wake the flusher. Each file's own
//! writeback state is a [`FileWb`] here, below the mappings that hold it.

use std::sync::Arc;

use backing::ThreadStart;

use crate::errseq::ErrSeq;
use crate::kick::Kick;
use crate::sync::{AtomicU64, FairMutex, FairMutexGuard, Mutex, Ordering};
use crate::wbpool::WbPool;

/// See the [module documentation](self).
pub(crate) struct Bdi {
    /// The background writeback thread's wake-up.
    flusher: Arc<Kick>,
    /// Reclaim met dirty folios it could not take: the flusher's next
    /// round writes back everything dirty, whatever the thresholds say
    /// (the kernel's `wakeup_flusher_threads(WB_REASON_VMSCAN)`). A std
    /// atomic: the flusher does not run under loom.
    #[allow(clippy::disallowed_types)]
    reclaim_wants: std::sync::atomic::AtomicBool,
    /// The threads that carry a writeback run's writes side by side
    /// (started with the cache, joined when it goes).
    pool: WbPool,
    /// Dirty pages above which writers are throttled, if the builder set
    /// it (else a share of the budget: `writeback::dirty_limit`).
    limit_set: Option<u64>,
    /// Dirty pages above which the flusher writes back, if the builder set
    /// it (else half the limit: `writeback::dirty_background`).
    #[cfg_attr(loom, allow(dead_code))]
    background_set: Option<u64>,
}

impl Bdi {
    /// The control of a new cache: its pool started (run inline under
    /// loom, whose models do not run the pool's threads), the thresholds
    /// in pages; the pool's threads run `on_start` first.
    pub(crate) fn new(
        limit_set: Option<u64>,
        background_set: Option<u64>,
        #[cfg_attr(loom, allow(unused_variables))] on_start: &ThreadStart,
    ) -> Bdi {
        Bdi {
            flusher: Arc::new(Kick::default()),
            reclaim_wants: Default::default(),
            #[cfg(not(loom))]
            pool: WbPool::new(crate::wbpool::WB_WORKERS, on_start),
            #[cfg(loom)]
            pool: WbPool::inline(),
            limit_set,
            background_set,
        }
    }

    /// Wakes the flusher (never blocks for long: see [`Kick::kick`]).
    pub(crate) fn kick(&self) {
        self.flusher.kick();
    }

    /// Wakes the flusher for reclaim, which met dirty folios: its next
    /// round writes back everything dirty, even under the background
    /// threshold (a few dirty pages in large folios can hold all of a
    /// small cache's memory).
    pub(crate) fn kick_for_reclaim(&self) {
        self.reclaim_wants
            .store(true, std::sync::atomic::Ordering::Release);
        self.kick();
    }

    /// Whether reclaim asked for writeback since the last call (which
    /// clears the request).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn take_reclaim_wants(&self) -> bool {
        self.reclaim_wants
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Wakes the flusher so that it cannot miss it (the cache's drop).
    pub(crate) fn kick_surely(&self) {
        self.flusher.kick_surely();
    }

    /// The flusher's wake-up, for the flusher thread to sleep on.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn flusher(&self) -> Arc<Kick> {
        self.flusher.clone()
    }

    /// The writeback pool.
    pub(crate) fn pool(&self) -> &WbPool {
        &self.pool
    }

    /// The dirty limit the builder set, in pages.
    pub(crate) fn limit_set(&self) -> Option<u64> {
        self.limit_set
    }

    /// The background threshold the builder set, in pages.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn background_set(&self) -> Option<u64> {
        self.background_set
    }
}

/// One file's writeback state, which its [`Mapping`](crate::filemap::Mapping)
/// holds (the kernel keeps it in the `address_space`: `writeback_index`,
/// `wb_err`, the dirty tag's count): one batch of the file's writeback at
/// a time, the page where throttled writers go on, the file's dirty pages
/// and its writeback errors. Its fields change only through these
/// methods, which writeback calls (`writeback.rs`, and the writeback IO
/// in `filemap/writeback.rs`).
pub(crate) struct FileWb {
    /// One batch of this file's writeback at a time (a pass takes it
    /// for each batch, so writers throttled on the file and the flusher
    /// take turns, in the order they came: a fair lock); held by
    /// truncation while it changes the backing's size.
    lock: FairMutex<()>,
    /// The page where the last throttled writer's writeback stopped: the
    /// next one goes on from there (the kernel's `writeback_index`), so
    /// throttled writers take turns over the whole file. A hint, plain
    /// even under loom: any value is a correct place to start.
    #[allow(clippy::disallowed_types)]
    next: std::sync::atomic::AtomicU64,
    /// Pages of dirty folios. (A loom atomic under loom: writeback
    /// decides on it whether there is anything to do, and the models of
    /// writeback against truncation and close race on it.)
    dirty_pages: AtomicU64,
    /// Writeback errors, reported once per handle (the kernel's errseq).
    err: ErrSeq,
    /// How far past the file's size this cache's own writes may have made
    /// the backing (an `O_DIRECT` write of the last page rounds it up):
    /// a backing longer than the size by no more than this is cut back to
    /// it; one longer than this was grown by another writer, and keeps its
    /// length (a file never shrinks unless someone truncates it). Set back
    /// to the size by every cut and truncation. Plain even under loom:
    /// read and written under the writeback lock.
    #[allow(clippy::disallowed_types)]
    ours_end: std::sync::atomic::AtomicU64,
    /// Uncached writes whose writeback was kicked (`writeback::kick_uncached`).
    uncached: Mutex<Uncached>,
}

/// The writeback uncached writes kicked (the kernel's
/// `filemap_fdatawrite_range_kick` for `IOCB_DONTCACHE`), which one job
/// on the writeback pool runs: the span of pages kicked and not yet taken,
/// and how many pages the writes dirtied in it and in the span being
/// written back now (the bound a writer waits on).
#[derive(Default)]
struct Uncached {
    /// Pages `first..=last` kicked, not yet taken.
    span: Option<(u64, u64)>,
    /// Pages the writes of `span` dirtied.
    queued: u64,
    /// Pages of the spans taken and being written back.
    in_flight: u64,
    /// A pool job runs the queue.
    running: bool,
}

/// What [`FileWb::kick_uncached`] asks of the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UncachedKick {
    /// Start the job (none runs).
    pub(crate) start: bool,
    /// The pages kicked and in flight are over the bound: write back
    /// what is queued before going on.
    pub(crate) over: bool,
}

impl Default for FileWb {
    // (Builds the plain `next`: see its field.)
    #[allow(clippy::disallowed_types)]
    fn default() -> FileWb {
        FileWb {
            lock: FairMutex::new(()),
            next: std::sync::atomic::AtomicU64::new(0),
            dirty_pages: AtomicU64::new(0),
            err: ErrSeq::default(),
            ours_end: std::sync::atomic::AtomicU64::new(0),
            uncached: Mutex::new(Uncached::default()),
        }
    }
}

impl FileWb {
    /// Takes the file's writeback lock: no batch of its writeback runs
    /// until the guard goes.
    pub(crate) fn lock(&self) -> FairMutexGuard<'_, ()> {
        self.lock.lock()
    }

    /// The page the next throttled writeback starts from.
    pub(crate) fn next(&self) -> u64 {
        self.next.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where a throttled writeback stopped: the next one goes on there.
    pub(crate) fn set_next(&self, page: u64) {
        self.next.store(page, std::sync::atomic::Ordering::Relaxed);
    }

    /// Pages of the file's dirty folios.
    #[inline]
    pub(crate) fn dirty_pages(&self) -> u64 {
        self.dirty_pages.load(Ordering::Relaxed)
    }

    /// `pages` more are dirty.
    pub(crate) fn add_dirty(&self, pages: u64) {
        self.dirty_pages.fetch_add(pages, Ordering::Relaxed);
    }

    /// `pages` are clean again (written, or gone with their folio).
    pub(crate) fn sub_dirty(&self, pages: u64) {
        self.dirty_pages.fetch_sub(pages, Ordering::Relaxed);
    }

    /// Records a writeback error, for every handle's next sync.
    pub(crate) fn record(&self, e: &std::io::Error) {
        self.err.record(e);
    }

    /// The file's error sequence, for a handle to sample and check.
    pub(crate) fn err(&self) -> &ErrSeq {
        &self.err
    }

    /// This cache's writes reached byte `end` of the backing.
    pub(crate) fn wrote_to(&self, end: u64) {
        self.ours_end
            .fetch_max(end, std::sync::atomic::Ordering::Relaxed);
    }

    /// The backing's length is `len`, set by this cache (a cut, a
    /// truncation): what its own writes may have added is gone.
    pub(crate) fn set_to(&self, len: u64) {
        self.ours_end
            .store(len, std::sync::atomic::Ordering::Relaxed);
    }

    /// The length the backing of a file of `size` bytes is cut back to, if
    /// its length `len` is one this cache's writes made (longer than the
    /// size by at most what they wrote past it); `None` to leave it: as
    /// long as the size, or grown past it by another writer.
    pub(crate) fn cut_to(&self, len: u64, size: u64) -> Option<u64> {
        let ours = self.ours_end.load(std::sync::atomic::Ordering::Relaxed);
        (len > size && len <= ours.max(size)).then_some(size)
    }

    /// An uncached write dirtied `pages` pages in `first..=last`: its
    /// writeback is queued (the span merged with what is queued); says
    /// whether to start the job, and whether queued and in flight are
    /// now over `bound` pages.
    pub(crate) fn kick_uncached(
        &self,
        first: u64,
        last: u64,
        pages: u64,
        bound: u64,
    ) -> UncachedKick {
        let mut u = self.uncached.lock();
        u.span = Some(match u.span {
            Some((a, b)) => (a.min(first), b.max(last)),
            None => (first, last),
        });
        u.queued += pages;
        let start = !std::mem::replace(&mut u.running, true);
        UncachedKick {
            start,
            over: u.queued + u.in_flight > bound,
        }
    }

    /// Takes the queued span to write back, its pages counted in flight
    /// until [`uncached_done`](Self::uncached_done). With `job` (the
    /// job's call), an empty queue ends the job (under the same lock, so
    /// the next kick starts another).
    pub(crate) fn take_uncached(&self, job: bool) -> Option<((u64, u64), u64)> {
        let mut u = self.uncached.lock();
        let Some(span) = u.span.take() else {
            if job {
                u.running = false;
            }
            return None;
        };
        let pages = std::mem::take(&mut u.queued);
        u.in_flight += pages;
        Some((span, pages))
    }

    /// Pages of uncached writes kicked and not yet written back.
    pub(crate) fn uncached_pages(&self) -> u64 {
        let u = self.uncached.lock();
        u.queued + u.in_flight
    }

    /// The writeback of a span taken with `pages` pages ended.
    pub(crate) fn uncached_done(&self, pages: u64) {
        self.uncached.lock().in_flight -= pages;
    }
}
