//! Writeback: dirty folios to the backing, the background flusher, writer
//! throttling, and writeback errors (the kernel's `writeback_iter`,
//! `balance_dirty_pages`, `errseq_t`).
//!
//! - A write marks its folios dirty: the folio flag and the index's
//!   dirty mark (`MARK_0`), so writeback finds them by
//!   a marked search that skips clean subtrees.
//! - [`Mapping::writeback`] walks the dirty folios of a range in index
//!   order, one batch of a file's writeback at a time (its `wb_lock`, a
//!   fair lock taken per batch: the flusher, a sync and throttled writers
//!   take turns in the order they came), and writes
//!   each contiguous run (up to [`MAX_RUN_PAGES`]) as one vectored write;
//!   up to [`MAX_BATCH_RUNS`] runs are locked and written together, their
//!   writes in flight at once: through the cache's io_uring
//!   (`IoEngine::write_all`) for a backing with a descriptor, else side
//!   by side on the cache's writeback pool (`wbpool.rs`).
//!   A folio is locked, marked clean and under writeback before its IO and
//!   stays locked until it completes: a writer of that folio waits for the
//!   IO (the kernel's stable pages), a reader of it does not (it copies an
//!   uptodate folio without its lock), and reclaim and truncation skip or
//!   wait for it. Only the blocks up to end of file are written; when the
//!   last block goes past the size, the backing is cut back to it.
//! - A failed run's folios are dirty again and retried by the next
//!   writeback; the error is recorded in the file's error sequence and reported
//!   once to every handle by its next `sync_data` / `sync_all` (the
//!   kernel's errseq), whether the flusher, a throttled writer or the sync
//!   itself hit it. So no data a write acknowledged is dropped by a failed
//!   writeback; a sync that succeeds after one has written it.
//! - The flusher, one thread per cache, wakes when dirty data
//!   passes the background threshold, and when reclaim met a dirty folio
//!   (then it writes back everything dirty, under the threshold too), and
//!   every [`FLUSH_INTERVAL`] writes back everything dirty (the kernel's
//!   periodic writeback of expired data, without per-folio ages).
//! - The dirty limit and background threshold default to shares of what
//!   the cache may hold now ([`dirty_limit`]).
//! - A writer that finds the cache over its dirty limit writes back about
//!   as many of its own file's dirty pages as it is about to dirty, from
//!   where the file's last throttled writeback stopped, and goes on; if
//!   its file has nothing dirty it waits for the flusher. Its wait is
//!   bounded by its own pages and the batches queued ahead of it, however
//!   fast others dirty the file. Dirty data never fills the cache, so
//!   reclaim always has clean folios to take.
//!
//! # Locking
//! As the crate's lock order says: writeback takes `wb_lock`, then the
//! folio locks of one run at a time; no folio lock is held while waiting
//! for `wb_lock`, and the throttle runs before a writer locks any folio.

use std::io;
use std::time::{Duration, Instant};

use crate::filemap::{FolioRef, LockedFolio, Mapping, MappingEntry};
use crate::folio::Folio;
use crate::folio::FolioFlags;
use crate::mm::CacheInner;
use crate::sync::Ordering;
use backing::aio::{EngineKind, WriteReq};
use backing::IoBuf;
use xarray::Cursor;

use crate::arena::PAGE;

/// The most pages one writeback IO carries (16 MiB): runs are cut there so
/// a long dirty file is written in pieces other threads can interleave with.
/// Also the most pages of one batch of runs (`Mapping::dirty_batch`).
pub(crate) const MAX_RUN_PAGES: u64 = 4096;

/// The most runs of dirty folios written back together (their writes go
/// out together, through io_uring or the writeback pool).
const MAX_BATCH_RUNS: usize = 256;

/// How often the flusher writes back whatever is dirty, even below the
/// background threshold.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_secs(5);

/// How long a throttled writer whose file has nothing dirty waits for the
/// flusher to bring the cache under its dirty limit before it fails.
const THROTTLE_WAIT: Duration = Duration::from_secs(30);

/// The fewest pages a throttled writer writes back (256 KiB), so that
/// small writes over the limit clean the file in batches worth an IO.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub const THROTTLE_MIN_PAGES: u64 = 64;

/// How long a closed file whose writeback keeps failing stays cached
/// (see `CacheInner::keep_closed_dirty`) before its dirty data is given up.
pub(crate) const CLOSED_DIRTY_KEEP: Duration = Duration::from_secs(60);

/// Starts the flusher thread of a cache. It holds the cache only while it
/// works, and exits once the cache is gone.
#[cfg(not(loom))]
pub(crate) fn spawn_flusher(
    inner: &std::sync::Arc<CacheInner>,
    on_start: &backing::ThreadStart,
) -> io::Result<()> {
    let weak = std::sync::Arc::downgrade(inner);
    let f = inner.bdi.flusher();
    on_start.spawn("foliocache-flush".into(), move || {
        let mut last_full = Instant::now();
        loop {
            // No strong reference to the cache while asleep: it
            // goes when its last user drops it, and this thread
            // notices within the wait.
            f.wait(Duration::from_millis(500));
            let Some(inner) = weak.upgrade() else { return };
            let full = last_full.elapsed() >= FLUSH_INTERVAL;
            if full {
                last_full = Instant::now();
            }
            flush(&inner, full);
        }
    })?;
    Ok(())
}

/// The default dirty limit's share of what the cache may hold, as
/// (numerator, denominator): the kernel's `dirty_ratio` is a share of the
/// memory it could dirty (`global_dirtyable_memory`: free and file pages),
/// and all of a cache's memory is file pages. A quarter stays clean for
/// readers and new folios.
const DIRTY_SHARE: (u64, u64) = (3, 4);

fn dirty(cache: &CacheInner) -> u64 {
    cache.stats.dirty_pages.load(Ordering::Relaxed)
}

/// Dirty pages above which writers are throttled (the limit of
/// `balance_dirty_pages`, from `domain_dirty_limits`): the builder's,
/// else [`DIRTY_SHARE`] of what the cache may hold now (its capacity,
/// less what memory pressure took back: the arena's limit), so a cache
/// that shrinks holds less dirty data, as the kernel's limit follows
/// the memory available.
pub(crate) fn dirty_limit(cache: &CacheInner) -> u64 {
    cache
        .bdi
        .limit_set()
        .unwrap_or_else(|| cache.mem.arena.limit_pages() as u64 * DIRTY_SHARE.0 / DIRTY_SHARE.1)
        .max(1)
}

/// Dirty pages above which the flusher writes back: the builder's, else
/// half the dirty limit (the kernel's default `dirty_background_ratio`
/// against its `dirty_ratio`); never above the limit.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn dirty_background(cache: &CacheInner) -> u64 {
    let limit = dirty_limit(cache);
    cache.bdi.background_set().unwrap_or(limit / 2).min(limit)
}

/// One round of the flusher: over the background threshold, write
/// back files (the dirtiest first) until under half of it; with `all`,
/// or when reclaim asked (it met dirty folios: `Bdi::kick_for_reclaim`),
/// write back everything dirty. Errors are recorded in each file's
/// error sequence for its next sync.
// (No flusher thread under loom.)
#[cfg_attr(loom, allow(dead_code))]
fn flush(cache: &CacheInner, all: bool) {
    let all = cache.bdi.take_reclaim_wants() || all;
    retry_closed(cache, all);
    if !all && dirty(cache) <= dirty_background(cache) {
        return;
    }
    let mut live = cache.live_mappings();
    live.retain(|m| m.dirty_pages.load(Ordering::Relaxed) > 0);
    live.sort_by_key(|m| std::cmp::Reverse(m.dirty_pages.load(Ordering::Relaxed)));
    for m in &live {
        if !all && dirty(cache) <= dirty_background(cache) / 2 {
            break;
        }
        let _ = m.writeback(0, u64::MAX);
    }
    // The mappings go with no lock held (the last one may be a closed
    // file's, whose drop writes back and takes locks).
    drop(live);
}

/// The closed files kept because their writeback failed
/// (`closed_dirty`): those now clean (written by a reopen's sync, say)
/// go; with `retry`, the others are written back again and go if that
/// works; those kept for [`CLOSED_DIRTY_KEEP`] go anyway, their dirty
/// data with them (logged). The mappings are dropped with no lock held.
#[cfg_attr(loom, allow(dead_code))]
fn retry_closed(cache: &CacheInner, retry: bool) {
    let kept = cache.take_closed_dirty();
    if kept.is_empty() {
        return;
    }
    let mut keep = Vec::new();
    let mut gone = Vec::new();
    for (m, since) in kept {
        let clean = m.dirty_pages.load(Ordering::Relaxed) == 0
            || (retry && m.writeback(0, u64::MAX).is_ok());
        if clean {
            gone.push(m);
        } else if since.elapsed() >= CLOSED_DIRTY_KEEP {
            log::error!(
                "foliocache: giving up the dirty data of closed file {:?}: its writeback \
                 has failed for {CLOSED_DIRTY_KEEP:?}",
                m.path
            );
            gone.push(m);
        } else {
            keep.push((m, since));
        }
    }
    cache.put_back_closed_dirty(keep);
    drop(gone);
}

impl Mapping {
    /// Writes back the dirty folios of pages `first..=last` (see the
    /// module documentation of `writeback.rs`). Returns the first error; the runs
    /// after a failed one are still tried.
    ///
    /// # Errors
    /// The backing's write error (also recorded for the file's handles).
    pub fn writeback(&self, first: u64, last: u64) -> io::Result<()> {
        self.writeback_pages(first, last, u64::MAX).2
    }

    /// Writes back the dirty folios of pages `first..=last`, in index
    /// order, until about `budget` pages are written (a folio larger than
    /// what is left of it goes whole). `wb_lock` is taken for each batch
    /// and let go between them, so every other writeback of the file (a
    /// throttled writer, the flusher, a sync) waits for one batch, not
    /// for a whole pass, and the fair lock serves them in the order they
    /// came. Returns the pages written, the page to go on from (`None`:
    /// the range is done) and the first error; the runs after a failed
    /// one are still tried.
    fn writeback_pages(
        &self,
        first: u64,
        last: u64,
        budget: u64,
    ) -> (u64, Option<u64>, io::Result<()>) {
        if self.memfile {
            return (0, None, Ok(()));
        }
        let mut result = Ok(());
        let mut written = 0;
        let mut index = first;
        while written < budget {
            // Taken even when nothing is dirty: a batch in flight (its
            // folios already clean) finishes first, so a sync or a close
            // that returns has seen its IO complete.
            let _wb = self.wb_lock.lock();
            if self.dirty_pages.load(Ordering::Relaxed) == 0 {
                return (written, None, result);
            }
            let (pages, next, r) = self.writeback_batch(index, last, budget - written);
            written += pages;
            if let Err(e) = r {
                if result.is_ok() {
                    result = Err(e);
                }
            }
            match next {
                Some(n) if n > index && n <= last => index = n,
                _ => return (written, None, result),
            }
        }
        (written, Some(index), result)
    }

    /// One batch of a writeback (`dirty_batch` from page `index`, up to
    /// `last` and about `max_pages`), under `wb_lock`: started, written,
    /// ended and unlocked; when its last block went past the size, the
    /// backing is cut back to it. Returns the pages of the batch's folios,
    /// the page to look at next and the error.
    fn writeback_batch(
        &self,
        index: u64,
        last: u64,
        max_pages: u64,
    ) -> (u64, Option<u64>, io::Result<()>) {
        let (mut run, next) = self.dirty_batch(index, last, max_pages);
        if run.is_empty() {
            return (0, None, Ok(()));
        }
        let pages = run.iter().map(|f| f.nr_pages()).sum();
        // The size now: extending writes set it before they unlock
        // their folios, so it covers every byte of these. Pages past
        // it (a shrink raced ahead of their removal) are not written.
        let size = self.size();
        let limit: Vec<u64> = run
            .iter()
            .map(|f| {
                let pos = f.index() * PAGE;
                size.saturating_sub(pos).div_ceil(PAGE).min(f.nr_pages())
            })
            .collect();
        let dirty = self.start_writeback(&run, &limit);
        let mut past_eof = false;
        if let Some((f, runs)) = run.iter().zip(&dirty).rev().find(|(_, r)| !r.is_empty()) {
            let (a, n) = runs[runs.len() - 1];
            past_eof = (f.index() + a + n) * PAGE > size;
        }
        // Every write is tried; only the pages of those that failed are
        // dirty again.
        let (r, failed) = self.write_dirty(&mut run, &dirty);
        self.end_writeback(&run, &failed);
        let mut result = r.map(|_| ());
        if let Err(e) = &result {
            self.inner()
                .stats
                .writeback_errors
                .fetch_add(1, Ordering::Relaxed);
            self.wb_err.record(e);
        }
        let run: Vec<FolioRef<'_>> = run.into_iter().map(LockedFolio::unlock).collect();
        self.after_writeback(&run);
        if past_eof {
            // The last block went past the size: cut the backing back.
            let size = self.size();
            if let Err(e) = self.backing().set_len(size) {
                self.wb_err.record(&e);
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        (pages, next, result)
    }

    /// The dirty folios written back together from page `index`: runs of
    /// contiguous dirty folios in index order, up to `last`,
    /// [`MAX_RUN_PAGES`] pages (or about `max_pages`, when fewer: a first
    /// folio larger than that is taken whole) and [`MAX_BATCH_RUNS`] runs,
    /// all locked.
    /// Their writes go out together (io_uring or the pool), so scattered
    /// small dirty folios do not wait for the device one by one, as the kernel's block
    /// plug (`blk_start_plug` around `writeback_iter`'s loop) sends a batch
    /// of a file's writes together. Folio locks are taken in index order
    /// only, as the lock order asks. Returns the folios (none: nothing dirty
    /// left in the range) and the page to look at next (`None`: none).
    fn dirty_batch(
        &self,
        mut index: u64,
        last: u64,
        max_pages: u64,
    ) -> (Vec<LockedFolio<'_>>, Option<u64>) {
        let mut batch: Vec<LockedFolio<'_>> = Vec::new();
        let (mut pages, mut runs) = (0u64, 0usize);
        let max_pages = max_pages.min(MAX_RUN_PAGES);
        while index <= last && pages < max_pages && runs < MAX_BATCH_RUNS {
            let (run, next) = self.dirty_run(index, last, max_pages - pages);
            if !run.is_empty() {
                runs += 1;
                pages += run.iter().map(|f| f.nr_pages()).sum::<u64>();
                batch.extend(run);
            }
            match next {
                Some(n) if n > index => index = n,
                _ => return (batch, None),
            }
        }
        (batch, Some(index))
    }

    /// The next run of contiguous dirty folios from page `index` (locked,
    /// still dirty, in this mapping), up to `last` and about `max_pages`
    /// (a first folio larger than that is taken whole); or none, with the
    /// page to look at next.
    fn dirty_run(
        &self,
        index: u64,
        last: u64,
        max_pages: u64,
    ) -> (Vec<LockedFolio<'_>>, Option<u64>) {
        let mut run: Vec<LockedFolio<'_>> = Vec::new();
        let mut next = index;
        let mut pages = 0;
        while next <= last && pages < max_pages {
            let Some(i) = self.find_marked(next, last, DIRTY_MARK) else {
                break;
            };
            if !run.is_empty() && i != next {
                break;
            }
            let Some(MappingEntry::Folio(f)) = self.get_entry(i) else {
                if run.is_empty() {
                    return (run, Some(i + 1));
                }
                break;
            };
            let f = f.lock();
            let ok = f.mapping() == self.id() && f.contains(i) && f.test(FolioFlags::DIRTY);
            let fend = f.index() + f.nr_pages();
            if !ok || (!run.is_empty() && f.index() != next) {
                drop(f);
                if run.is_empty() {
                    return (run, Some(if ok { fend } else { i + 1 }));
                }
                break;
            }
            pages += f.nr_pages();
            next = fend;
            run.push(f);
            if next == 0 {
                break;
            }
        }
        let after = (!run.is_empty()).then_some(next);
        (run, after)
    }

    /// Dropbehind folios whose writeback just ended leave the cache, if
    /// clean and unlocked (`folio_end_dropbehind`: an uncached write's
    /// folios go when their writeback completes).
    fn after_writeback(&self, run: &[FolioRef<'_>]) {
        for f in run {
            if f.test(FolioFlags::DROPBEHIND) {
                self.drop_behind(f);
            }
        }
    }

    /// Makes the backing's length the file's size, if it is not (a
    /// writeback past the end that could not cut the backing back, or a
    /// size cut that failed). Used by `sync` and by the last handle's close.
    pub(crate) fn fix_backing_size(&self) -> io::Result<()> {
        let _wb = self.wb_lock.lock();
        let size = self.size();
        match self.backing().len() {
            Ok(len) if len != size => self.backing().set_len(size),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `sync_data` (`all == false`) or `sync_all` of the file: write back
    /// everything dirty, make the backing's size the file's, and make it
    /// durable. The errors of this writeback are returned; errors met by
    /// others are reported through each handle's errseq by the caller.
    pub(crate) fn sync(&self, all: bool) -> io::Result<()> {
        if self.memfile {
            return Ok(());
        }
        let wb = self.writeback(0, u64::MAX);
        let size_fix = self.fix_backing_size();
        let durable = if all {
            self.backing().sync_all()
        } else {
            self.backing().sync_data()
        };
        for r in [&size_fix, &durable] {
            if let Err(e) = r {
                self.wb_err.record(e);
            }
        }
        wb.and(size_fix).and(durable)
    }

    /// Called by a writer before it dirties up to `pages` pages: over the
    /// cache's dirty limit, write back about as many of this file's dirty
    /// pages (at least [`THROTTLE_MIN_PAGES`]), then go on, even if other
    /// writers filled the room again meanwhile: each throttled writer
    /// cleans what it dirties, so dirty data stays near the limit, and its
    /// wait is bounded by its own pages and the batches queued ahead of it
    /// on the file's fair `wb_lock` (the kernel's `balance_dirty_pages`
    /// pauses a writer in proportion to what it dirtied, and lets it go).
    /// A writer that wrote back the whole file, with others dirtying it as
    /// fast as it cleaned, waited for their work without bound. The
    /// writeback goes on from where the file's last throttled writeback
    /// stopped (`wb_next`), so throttled writers take turns over the file.
    /// If the file has nothing dirty, the writer waits for the flusher to
    /// bring the cache under the limit. A writer whose writeback fails
    /// while the cache stays over the limit gets the error rather than
    /// filling the cache with dirty data.
    ///
    /// # Errors
    /// The writeback error, or `StorageFull` when the cache stayed over its
    /// dirty limit for [`THROTTLE_WAIT`].
    pub(crate) fn throttle(&self, pages: u64) -> io::Result<()> {
        let cache = self.inner();
        if !self.over_dirty_limit() {
            return Ok(());
        }
        cache.stats.throttled.fetch_add(1, Ordering::Relaxed);
        let _wait = cache.stats.throttle_latency.timer();
        cache.bdi.kick();
        let start = Instant::now();
        let errors = cache.stats.writeback_errors.load(Ordering::Relaxed);
        let debt = pages.max(THROTTLE_MIN_PAGES);
        let mut cleaned = 0;
        while dirty(cache) > dirty_limit(cache) && cleaned < debt {
            if self.dirty_pages.load(Ordering::Relaxed) > 0 {
                let (n, r) = self.writeback_cyclic(debt - cleaned);
                cleaned += n;
                if let Err(e) = r {
                    if dirty(cache) > dirty_limit(cache) {
                        // The backing's error as it gave it (its errno is
                        // what a caller, or a FUSE reply, needs).
                        log::warn!(
                            "foliocache: over the dirty limit ({} bytes) and writing back {:?} \
                             failed: {e}",
                            dirty_limit(cache) * PAGE,
                            self.path
                        );
                        return Err(e);
                    }
                }
                if n > 0 {
                    continue;
                }
                // Nothing found dirty (others' batches took it): wait as
                // below.
            }
            if cache.stats.writeback_errors.load(Ordering::Relaxed) != errors
                && start.elapsed() > Duration::from_millis(100)
            {
                return Err(io::Error::other(
                    "foliocache: the cache is over its dirty limit and writing back other \
                     files fails",
                ));
            }
            if start.elapsed() > THROTTLE_WAIT {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "foliocache: the cache stayed over its dirty limit ({} bytes) for {:?}",
                        dirty_limit(cache) * PAGE,
                        THROTTLE_WAIT
                    ),
                ));
            }
            cache.bdi.kick();
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Whether a writer of this file is throttled now: the cache is over
    /// its dirty limit (a memory file never is).
    pub(crate) fn over_dirty_limit(&self) -> bool {
        let cache = self.inner();
        !self.memfile && dirty(cache) > dirty_limit(cache)
    }

    /// Writes back about `budget` dirty pages of the file from `wb_next`
    /// on, wrapping around to the start once, and leaves `wb_next` where
    /// it stopped. Returns the pages written and the first error.
    fn writeback_cyclic(&self, budget: u64) -> (u64, io::Result<()>) {
        let from = self.wb_next.load(std::sync::atomic::Ordering::Relaxed);
        let (mut n, mut next, mut r) = self.writeback_pages(from, u64::MAX, budget);
        if next.is_none() && from > 0 && n < budget {
            let (m, wrapped, r2) = self.writeback_pages(0, from - 1, budget - n);
            n += m;
            next = wrapped;
            r = r.and(r2);
        }
        self.wb_next
            .store(next.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
        (n, r)
    }
}

/// Dirty state and writeback IO.
impl Mapping {
    /// The last handle on the file closed (or the mapping goes): what is
    /// dirty goes to the backing now (the kernel writes a closed file's
    /// dirty pages back later; a mapping cannot stay without a handle
    /// unless the cache keeps it, which it does when this fails: see
    /// `CacheInner::keep_closed_dirty`).
    ///
    /// # Errors
    /// The writeback's (also in the file's error sequence).
    pub(crate) fn close_handle(&self) -> io::Result<()> {
        // (Waits for a writeback in flight even when nothing is dirty.)
        self.writeback(0, u64::MAX)?;
        // The data is on the backing: so is the size, even if an earlier
        // cut after a writeback past the end failed (else the file would
        // open again longer, with zeros past its end).
        if !self.memfile && self.backing_writable() {
            self.fix_backing_size()?;
            // The space reserved past the size for writes to come goes
            // back (a failure leaves it reserved, the data unharmed).
            let _i = self.inode_lock.write();
            if let Err(e) = self.backing().release_reserved(self.size()) {
                log::warn!(
                    "{:?}: giving back space reserved past the end: {e}",
                    self.path
                );
            }
        }
        Ok(())
    }

    /// The first entry carrying `mark` in pages `from..=last` (at `from` if
    /// it contains `from`).
    pub(crate) fn find_marked(&self, from: u64, last: u64, mark: xarray::Mark) -> Option<u64> {
        self.xa.find_marked(from, last, mark).map(|(i, _)| i)
    }

    /// Marks pages of locked, uptodate folios dirty: for each folio, the
    /// pages `ranges[i]` (first page in the folio, count) in the cache's
    /// page bitmap, and the folio's flag and index mark if it was clean
    /// (all the marks in one hold of the index lock). The dirty counts are
    /// of pages written (a large folio written in one page counts one: it
    /// writes back one), so the dirty limit bounds the writeback debt.
    pub(crate) fn mark_dirty<'a, 'm: 'a>(
        &self,
        dirty: impl IntoIterator<Item = (&'a LockedFolio<'m>, (u64, u64))>,
    ) {
        if self.memfile {
            return;
        }
        let cache = self.inner();
        let mut newly: Vec<&LockedFolio<'_>> = Vec::new();
        let mut pages = 0;
        for (f, (first, n)) in dirty {
            debug_assert!(first + n <= f.nr_pages());
            // Unsaved for the guardian before dirty (`guard.rs`).
            self.guard_mark(f, first, n);
            pages += cache
                .mem
                .dirty_bits
                .set(f.page().index() as usize + first as usize, n as usize);
            if !f.test_and_set(FolioFlags::DIRTY) {
                newly.push(f);
            }
        }
        self.dirty_pages.fetch_add(pages, Ordering::Relaxed);
        cache.stats.dirty_pages.fetch_add(pages, Ordering::Relaxed);
        let Some(first) = newly.first() else { return };
        let mut cur = Cursor::new(&self.xa, first.index());
        let mut g = self.xa.lock();
        for f in &newly {
            cur.set_index(f.index());
            let _ = cur.set_mark(&mut g, DIRTY_MARK);
        }
    }

    /// A folio leaving the mapping (its entry, and so its mark, gone) is
    /// no longer dirty.
    pub(crate) fn forget_dirty(&self, f: &Folio) {
        self.guard_clear(f);
        if f.test_and_clear(FolioFlags::DIRTY) {
            let cache = self.inner();
            let Some(page) = cache.mem.table.page_of(f) else {
                return;
            };
            let pages = cache.mem.dirty_bits.clear(page, f.nr_pages() as usize);
            self.dirty_pages.fetch_sub(pages, Ordering::Relaxed);
            cache.stats.dirty_pages.fetch_sub(pages, Ordering::Relaxed);
        }
    }

    /// Starts writeback of a run of locked dirty folios: each clean (flag
    /// and mark, in one index lock hold) and under writeback. Returns, per
    /// folio, the runs of dirty pages to write (first page in the folio,
    /// count), taken from the page bitmap and cut at `limit[i]` pages (end
    /// of file).
    pub(crate) fn start_writeback(
        &self,
        run: &[LockedFolio<'_>],
        limit: &[u64],
    ) -> Vec<Vec<(u64, u64)>> {
        let Some(first) = run.first() else {
            return Vec::new();
        };
        let cache = self.inner();
        let mut out = Vec::with_capacity(run.len());
        {
            let mut cur = Cursor::new(&self.xa, first.index());
            let mut g = self.xa.lock();
            for f in run {
                cur.set_index(f.index());
                let _ = cur.clear_mark(&mut g, DIRTY_MARK);
                f.test_and_clear(FolioFlags::DIRTY);
                f.test_and_set(FolioFlags::WRITEBACK);
            }
        }
        let mut pages = 0;
        for (f, &lim) in run.iter().zip(limit) {
            let n = f.nr_pages() as usize;
            let runs = cache.mem.dirty_bits.take_runs(f.page().index() as usize, n);
            pages += runs.iter().map(|&(_, c)| c as u64).sum::<u64>();
            let cut: Vec<(u64, u64)> = runs
                .into_iter()
                .filter(|&(a, _)| (a as u64) < lim)
                .map(|(a, c)| (a as u64, (c as u64).min(lim - a as u64)))
                .collect();
            out.push(cut);
        }
        // Under writeback before no longer dirty: a reader of the two
        // counts (a caller waiting for everything written, reclaim asking
        // whether waiting helps) never sees both at zero mid-way.
        let all: u64 = run.iter().map(|f| f.nr_pages()).sum();
        cache
            .stats
            .writeback_pages
            .fetch_add(all, Ordering::Relaxed);
        self.dirty_pages.fetch_sub(pages, Ordering::Relaxed);
        cache.stats.dirty_pages.fetch_sub(pages, Ordering::Relaxed);
        out
    }

    /// Ends writeback of a run started by
    /// [`start_writeback`](Self::start_writeback): the page runs in
    /// `failed` (per folio, as `start_writeback` gave them) are dirty again,
    /// to be retried.
    pub(crate) fn end_writeback(&self, run: &[LockedFolio<'_>], failed: &[Vec<(u64, u64)>]) {
        let all: u64 = run.iter().map(|f| f.nr_pages()).sum();
        // Saved, but what failed, which is unsaved again with its dirty bits.
        for f in run {
            self.guard_clear(f);
        }
        self.mark_dirty(
            run.iter()
                .zip(failed)
                .flat_map(|(f, runs)| runs.iter().map(move |&r| (f, r))),
        );
        for f in run {
            f.test_and_clear(FolioFlags::WRITEBACK);
        }
        self.inner()
            .stats
            .writeback_pages
            .fetch_sub(all, Ordering::Relaxed);
    }

    /// Writes the dirty page runs of a locked run of folios covering
    /// contiguous pages: pages that follow each other in the file, across
    /// folios too, go as one vectored write; each gap starts another. Many
    /// writes (scattered dirty pages) go out together, through the cache's
    /// io_uring or its writeback pool (`wbpool.rs`). Every write is tried.
    /// Returns the bytes written or the first error, and the page runs (per
    /// folio) whose write failed, to be marked dirty again.
    pub(crate) fn write_dirty(
        &self,
        run: &mut [LockedFolio<'_>],
        dirty: &[Vec<(u64, u64)>],
    ) -> (io::Result<u64>, Vec<Vec<(u64, u64)>>) {
        let cache = self.inner();
        // The writes: file offset, buffers (contiguous pages merged), and
        // the (folio, first page, pages) pieces they carry.
        type Seg<'b> = (u64, Vec<IoBuf<'b>>, Vec<(usize, u64, u64)>);
        let mut segs: Vec<Seg<'_>> = Vec::new();
        let mut failed: Vec<Vec<(u64, u64)>> = vec![Vec::new(); run.len()];
        let mut seg_end = 0u64;
        for (i, (f, runs)) in run.iter_mut().zip(dirty).enumerate() {
            let (index, pages) = (f.index(), f.nr_pages());
            // The folio is locked: no writer changes its bytes while the IO
            // reads them.
            let bytes = f.bytes_buf();
            for &(a, n) in runs {
                assert!(a + n <= pages, "dirty pages past the folio");
                let at = (index + a) * PAGE;
                let buf = bytes
                    .split_at((a * PAGE) as usize)
                    .and_then(|(_, rest)| rest.split_at((n * PAGE) as usize))
                    .map(|(b, _)| b)
                    .expect("whole pages of a folio are block aligned");
                match segs.last_mut() {
                    Some((_, bufs, pieces)) if at == seg_end => {
                        bufs.push(buf);
                        pieces.push((i, a, n));
                    }
                    _ => segs.push((at, vec![buf], vec![(i, a, n)])),
                }
                seg_end = at + n * PAGE;
            }
        }
        let backing = self.backing();
        let count = |r: io::Result<usize>| -> io::Result<u64> {
            cache.stats.io_writes.fetch_add(1, Ordering::Relaxed);
            let n = r? as u64;
            cache.stats.io_write_bytes.fetch_add(n, Ordering::Relaxed);
            Ok(n)
        };
        let write = |(at, bufs, _): &Seg<'_>| count(backing.write_blocks(bufs, *at));
        // Every write is tried, whatever the others did. Scattered dirty
        // pages make many small writes that each wait for the device: they
        // go out together, through io_uring where the backing has a file
        // for it (the whole batch in the device's queue at once, from this
        // thread's own ring, in whose `io_uring_enter` it then sleeps until
        // the last completes, as the kernel's plugged writeback sends and
        // waits for it), else side by side on the writeback pool.
        let uring = cache
            .io
            .engine
            .as_ref()
            .filter(|e| e.kind() == EngineKind::Uring && backing.raw_file().is_some());
        let together = segs.len() >= PARALLEL_WRITES_MIN || (uring.is_some() && segs.len() > 1);
        let results: Vec<io::Result<u64>> = if !together {
            segs.iter().map(write).collect()
        } else if let Some(engine) = uring {
            let reqs: Vec<WriteReq<'_>> = segs
                .iter()
                .map(|(at, bufs, _)| WriteReq {
                    backing: &backing,
                    offset: *at,
                    bufs,
                })
                .collect();
            engine.write_all(&reqs).into_iter().map(count).collect()
        } else {
            let slots: Vec<std::sync::OnceLock<io::Result<u64>>> =
                segs.iter().map(|_| std::sync::OnceLock::new()).collect();
            cache.bdi.pool().run(segs.len(), &|j| {
                let _ = slots[j].set(write(&segs[j]));
            });
            // (A job that panicked leaves its write failed.)
            slots
                .into_iter()
                .map(|s| {
                    s.into_inner()
                        .unwrap_or_else(|| Err(io::Error::other("writeback job panicked")))
                })
                .collect()
        };
        let mut total = Ok(0u64);
        for (seg, r) in segs.iter().zip(results) {
            match r {
                Ok(n) => {
                    if let Ok(t) = &mut total {
                        *t += n;
                    }
                }
                Err(e) => {
                    for &(i, a, n) in &seg.2 {
                        failed[i].push((a, n));
                    }
                    if total.is_ok() {
                        total = Err(e);
                    }
                }
            }
        }
        (total, failed)
    }
}

/// Writes in a batch below which, without io_uring, they go one after
/// another on the caller's thread (handing them to the pool costs more
/// than it saves). Through io_uring two writes already go together: the
/// caller submits them on its own ring and waits in the kernel once
/// (`IoEngine::write_all`), cheaper than a second `pwritev`.
const PARALLEL_WRITES_MIN: usize = 4;

/// The index mark of dirty folios (the kernel's `PAGECACHE_TAG_DIRTY`).
pub(crate) const DIRTY_MARK: xarray::Mark = xarray::Mark::MARK_0;
