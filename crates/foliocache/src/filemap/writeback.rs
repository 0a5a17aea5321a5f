//! A mapping's writeback IO (the kernel's `filemap_fdatawrite_range`,
//! `writeback_iter`, `folio_start_writeback` and `folio_end_writeback`):
//! the dirty marks and counts, the batches of dirty folios and their
//! writes, `sync`. When writeback runs, and the flusher and the throttle
//! that start it, are `writeback.rs`'s: its module documentation tells
//! the whole story. The file's writeback state is its `FileWb` (`bdi.rs`).

use std::io;

use backing::aio::{EngineKind, WriteReq};
use backing::IoBuf;
use xarray::Cursor;

use super::{FolioRef, LockedFolio, Mapping, MappingEntry};
use crate::arena::PAGE;
use crate::folio::{Folio, FolioFlags};
use crate::sync::Ordering;

/// The most pages one writeback IO carries (16 MiB): runs are cut there so
/// a long dirty file is written in pieces other threads can interleave with.
/// Also the most pages of one batch of runs (`Mapping::dirty_batch`).
pub(crate) const MAX_RUN_PAGES: u64 = 4096;

/// The most runs of dirty folios written back together (their writes go
/// out together, through io_uring or the writeback pool).
const MAX_BATCH_RUNS: usize = 256;

/// Writes in a batch below which, without io_uring, they go one after
/// another on the caller's thread (handing them to the pool costs more
/// than it saves). Through io_uring two writes already go together: the
/// caller submits them on its own ring and waits in the kernel once
/// (`IoEngine::write_all`), cheaper than a second `pwritev`.
const PARALLEL_WRITES_MIN: usize = 4;

/// The index mark of dirty folios (the kernel's `PAGECACHE_TAG_DIRTY`).
pub(crate) const DIRTY_MARK: xarray::Mark = xarray::Mark::MARK_0;

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
    pub(crate) fn writeback_pages(
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
            let _wb = self.wb.lock();
            if self.wb.dirty_pages() == 0 {
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
            let end = (f.index() + a + n) * PAGE;
            past_eof = end > size;
            if past_eof {
                self.wb.wrote_to(end);
            }
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
            self.wb.record(e);
        }
        let run: Vec<FolioRef<'_>> = run.into_iter().map(LockedFolio::unlock).collect();
        self.after_writeback(&run);
        if past_eof {
            // The last block went past the size: cut the backing back
            // (unless another writer grew the file past it meanwhile).
            let size = self.size();
            if let Err(e) = self.cut_back(size) {
                self.wb.record(&e);
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
        let _wb = self.wb.lock();
        self.cut_back(self.size())
    }

    /// Makes the backing's length `size`, the file's, where this cache's
    /// own writes left it otherwise: shorter (writes past its end that
    /// never reached it), or longer by what an `O_DIRECT` write of the last
    /// page added. A backing another writer grew past that keeps its
    /// length: a file never shrinks unless someone truncates it (this
    /// cache's truncations cut the backing at once: `truncate_to`).
    fn cut_back(&self, size: u64) -> io::Result<()> {
        let len = self.backing().len()?;
        let to = if len < size {
            Some(size)
        } else {
            self.wb.cut_to(len, size)
        };
        if let Some(to) = to {
            self.backing().set_len(to)?;
            self.wb.set_to(to);
        }
        Ok(())
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
                self.wb.record(e);
            }
        }
        wb.and(size_fix).and(durable)
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
        let unsaved = self.unsaved_marker();
        for (f, (first, n)) in dirty {
            debug_assert!(first + n <= f.nr_pages());
            let page = f.page().index() as u64 + first;
            // Unsaved for the guardian before dirty (`guard.rs`).
            if let Some((seg, slot)) = unsaved {
                seg.mark_unsaved(page, n, slot, f.index() + first);
            }
            pages += cache.mem.dirty_bits.set(page as usize, n as usize);
            if !f.test_and_set(FolioFlags::DIRTY) {
                newly.push(f);
            }
        }
        self.wb.add_dirty(pages);
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
            self.wb.sub_dirty(pages);
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
        self.wb.sub_dirty(pages);
        cache.stats.dirty_pages.fetch_sub(pages, Ordering::Release);
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
        // Dirty again (above) before no longer under writeback: see
        // `Cache::stats`.
        self.inner()
            .stats
            .writeback_pages
            .fetch_sub(all, Ordering::Release);
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
        let mut failed: Vec<Vec<(u64, u64)>> = vec![Vec::new(); run.len()];
        let segs = segments(run, dirty);
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

/// One write of a writeback batch: the file offset, the buffers
/// (contiguous pages merged) and the (folio, first page, pages) pieces
/// it carries.
type Seg<'b> = (u64, Vec<IoBuf<'b>>, Vec<(usize, u64, u64)>);

/// The writes of a locked run of folios' dirty page runs
/// ([`Mapping::write_dirty`]): pages that follow each other in the file,
/// across folios too, in one write; each gap starts another.
fn segments<'b>(run: &'b mut [LockedFolio<'_>], dirty: &[Vec<(u64, u64)>]) -> Vec<Seg<'b>> {
    let mut segs: Vec<Seg<'_>> = Vec::new();
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
    segs
}
