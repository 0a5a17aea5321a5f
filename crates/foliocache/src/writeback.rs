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
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::filemap::Mapping;
use crate::mm::CacheInner;
use crate::sync::Ordering;

use crate::arena::PAGE;

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

/// The most pages an uncached writer of a file keeps kicked and under
/// writeback (8 MiB, and never more than a quarter of the cache) before it
/// waits for that writeback (`kick_uncached`): the cache's footprint of
/// an uncached stream is the writeback in flight, as the kernel's is the
/// block layer's queue of an `RWF_DONTCACHE` writer's IO.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub const UNCACHED_AHEAD_PAGES: u64 = 2048;

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
    // The dirty files, dirtiest first, held weakly: a pass over thousands
    // of files takes seconds, and a file closed meanwhile goes at its
    // close (its descriptor with it), not at the pass's end.
    let mut live: Vec<(u64, Weak<Mapping>)> = cache
        .live_mappings()
        .iter()
        .map(|m| (m.wb.dirty_pages(), Arc::downgrade(m)))
        .filter(|(d, _)| *d > 0)
        .collect();
    live.sort_by_key(|(d, _)| std::cmp::Reverse(*d));
    for (_, w) in live {
        if !all && dirty(cache) <= dirty_background(cache) / 2 {
            break;
        }
        let Some(m) = w.upgrade() else { continue };
        let _ = m.writeback(0, u64::MAX);
        // Dropped with no lock held (the last one may be a closed file's,
        // whose drop writes back and takes locks).
        drop(m);
    }
}

/// The closed files kept because their writeback failed
/// (`closed_dirty`): those opened again go (their handles' close does
/// the work); those now clean (written by a reopen's sync, say) are
/// closed ([`close`]) and go; with `retry`, the others are closed again
/// and go if that works; those kept for [`CLOSED_DIRTY_KEEP`] go anyway,
/// their dirty data with them (logged). The mappings are dropped with no
/// lock held.
#[cfg_attr(loom, allow(dead_code))]
fn retry_closed(cache: &CacheInner, retry: bool) {
    let kept = cache.take_closed_dirty();
    if kept.is_empty() {
        return;
    }
    let mut keep = Vec::new();
    let mut gone = Vec::new();
    for (m, since) in kept {
        if m.has_handles() {
            gone.push(m);
            continue;
        }
        let clean = if m.wb.dirty_pages() == 0 {
            if let Err(e) = close(&m) {
                log::error!("foliocache: closing {:?}: {e}", m.inode.path);
            }
            true
        } else {
            retry && close(&m).is_ok()
        };
        if clean {
            m.set_closed_clean(true);
            gone.push(m);
        } else if since.elapsed() >= CLOSED_DIRTY_KEEP {
            log::error!(
                "foliocache: giving up the dirty data of closed file {:?}: its writeback \
                 has failed for {CLOSED_DIRTY_KEEP:?}",
                m.inode.path
            );
            gone.push(m);
        } else {
            keep.push((m, since));
        }
    }
    cache.put_back_closed_dirty(keep);
    drop(gone);
}

/// Called by a writer of `m` before it dirties up to `pages` pages: over
/// the cache's dirty limit, write back about as many of the file's dirty
/// pages (at least [`THROTTLE_MIN_PAGES`]), then go on, even if other
/// writers filled the room again meanwhile: each throttled writer
/// cleans what it dirties, so dirty data stays near the limit, and its
/// wait is bounded by its own pages and the batches queued ahead of it
/// on the file's fair `wb_lock` (the kernel's `balance_dirty_pages`
/// pauses a writer in proportion to what it dirtied, and lets it go).
/// A writer that wrote back the whole file, with others dirtying it as
/// fast as it cleaned, waited for their work without bound. The
/// writeback goes on from where the file's last throttled writeback
/// stopped (`FileWb::next`), so throttled writers take turns over the file.
/// If the file has nothing dirty, the writer waits for the flusher to
/// bring the cache under the limit. A writer whose writeback fails
/// while the cache stays over the limit gets the error rather than
/// filling the cache with dirty data.
///
/// # Errors
/// The writeback error, or `StorageFull` when the cache stayed over its
/// dirty limit for [`THROTTLE_WAIT`].
pub(crate) fn throttle(m: &Mapping, pages: u64) -> io::Result<()> {
    let cache = m.inner();
    if !over_dirty_limit(m) {
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
        if m.wb.dirty_pages() > 0 {
            let (n, r) = writeback_cyclic(m, debt - cleaned);
            cleaned += n;
            if let Err(e) = r {
                if dirty(cache) > dirty_limit(cache) {
                    // The backing's error as it gave it (its errno is
                    // what a caller, or a FUSE reply, needs).
                    log::warn!(
                        "foliocache: over the dirty limit ({} bytes) and writing back {:?} \
                         failed: {e}",
                        dirty_limit(cache) * PAGE,
                        m.inode.path
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

/// An uncached write (`WriteFlags::DONTCACHE`) dirtied `pages` pages in
/// `first..=last`: their writeback starts now, without the writer
/// waiting for it (the kernel's `generic_write_sync` of an
/// `IOCB_DONTCACHE` write, `filemap_fdatawrite_range_kick`). The range
/// joins the file's queue, which one job on the writeback pool writes
/// back, span after span, each merged from the writes kicked meanwhile
/// (so neighbours go out in the same batch, contiguous pages in one
/// write); the dropbehind folios leave the cache as their writeback ends
/// (`Mapping::after_writeback`, the kernel's `folio_end_dropbehind`).
/// Once the pages kicked and in flight pass [`UNCACHED_AHEAD_PAGES`], the
/// writer writes back what is queued itself (or waits for a batch of the
/// job's), as the kernel's writer waits for room in the device's queue.
/// A writeback error goes to the file's error sequence, for the next sync,
/// as any writeback's; the pages stay dirty and are retried.
/// `wait: false` (an async write, which awaits [`wait_uncached`] on the
/// pool before its next piece instead: [`uncached_over`]) never waits.
pub(crate) fn kick_uncached(
    m: &std::sync::Arc<Mapping>,
    first: u64,
    last: u64,
    pages: u64,
    wait: bool,
) {
    let cache = m.inner();
    let kick =
        m.wb.kick_uncached(first, last, pages, uncached_bound(cache));
    if kick.start {
        let job = m.clone();
        cache
            .bdi
            .pool()
            .spawn(Box::new(move || while write_uncached(&job, true) {}));
    }
    if kick.over && wait {
        wait_uncached(m);
    }
}

/// The pages of a file's uncached writes kicked and under writeback past
/// which its writer waits: [`UNCACHED_AHEAD_PAGES`], at most a quarter of
/// what the cache may hold now.
fn uncached_bound(cache: &CacheInner) -> u64 {
    (cache.mem.arena.limit_pages() as u64 / 4).clamp(1, UNCACHED_AHEAD_PAGES)
}

/// Whether the uncached writes of `m` kicked and under writeback are over
/// the bound: the next uncached write waits first ([`wait_uncached`]).
pub(crate) fn uncached_over(m: &Mapping) -> bool {
    m.wb.uncached_pages() > uncached_bound(m.inner())
}

/// An uncached writer over the bound: writes back what is queued itself,
/// or, if the job took all of it, waits for the job's batch in flight.
pub(crate) fn wait_uncached(m: &Mapping) {
    if !write_uncached(m, false) {
        drop(m.wb.lock());
    }
}

/// Writes back the span of uncached writes queued on `m`; returns whether
/// there was one. `job`: the pool's job, which ends when none is left.
fn write_uncached(m: &Mapping, job: bool) -> bool {
    let Some(((first, last), pages)) = m.wb.take_uncached(job) else {
        return false;
    };
    // (The error is in the file's error sequence: `writeback_batch`.)
    let _ = m.writeback(first, last);
    m.wb.uncached_done(pages);
    true
}

/// Whether a writer of `m` is throttled now: the cache is over
/// its dirty limit (a memory file never is).
pub(crate) fn over_dirty_limit(m: &Mapping) -> bool {
    let cache = m.inner();
    !m.memfile && dirty(cache) > dirty_limit(cache)
}

/// Writes back about `budget` dirty pages of `m` from `FileWb::next`
/// on, wrapping around to the start once, and leaves the next page where
/// it stopped. Returns the pages written and the first error.
fn writeback_cyclic(m: &Mapping, budget: u64) -> (u64, io::Result<()>) {
    let from = m.wb.next();
    let (mut n, mut next, mut r) = m.writeback_pages(from, u64::MAX, budget);
    if next.is_none() && from > 0 && n < budget {
        let (m, wrapped, r2) = m.writeback_pages(0, from - 1, budget - n);
        n += m;
        next = wrapped;
        r = r.and(r2);
    }
    m.wb.set_next(next.unwrap_or(0));
    (n, r)
}

/// The last handle on the file closed (`File`'s drop), or the flusher
/// retries a closed file the cache kept: what is dirty goes to the
/// backing now, the backing's size becomes the file's and the space
/// reserved past it goes back (the kernel writes a closed file's dirty
/// pages back later; a mapping cannot stay without a handle unless the
/// cache keeps it, which it does when this fails: see
/// `CacheInner::keep_closed_dirty`).
///
/// # Errors
/// The writeback's (also in the file's error sequence).
pub(crate) fn close(m: &Mapping) -> io::Result<()> {
    // (Waits for a writeback in flight even when nothing is dirty.)
    m.writeback(0, u64::MAX)?;
    // The data is on the backing: so is the size, even if an earlier
    // cut after a writeback past the end failed (else the file would
    // open again longer, with zeros past its end).
    if !m.memfile && m.backing_writable() {
        m.fix_backing_size()?;
        // The space reserved past the size for writes to come goes
        // back (a failure leaves it reserved, the data unharmed).
        let _i = m.inode.lock.write();
        if let Err(e) = m.backing().release_reserved(m.size()) {
            log::warn!(
                "{:?}: giving back space reserved past the end: {e}",
                m.inode.path
            );
        }
    }
    Ok(())
}
