//! The read path (`filemap_read` and what it calls, as `mm/filemap.c` and
//! `mm/readahead.c` keep them): the hit, the batches of folios copied out,
//! the miss that creates and reads a folio, and readahead's IO, which
//! builds a window planned by the handle's readahead state (`readahead.rs`)
//! into folios, inserts them and reads them in runs, one IO per run,
//! waited for or through the IO engine. `File`'s reads enter at
//! [`Mapping::read`]; nothing here calls back into the handle.

use std::io;
use std::sync::Arc;

use backing::IoBufMut;

use super::{fit_order, serves_hit, AddError, FolioRef, LockedFolio, Mapping, BATCH};
use crate::arena::PAGE;
use crate::flags::ReadFlags;
use crate::folio::{EngineReads, FolioFlags};
use crate::readahead::{plan, Insert, Readahead, Slot, SyncPlan, Window};
use crate::sync::Ordering;

/// The read path, as `mm/filemap.c` keeps it: `filemap_read` (the hit,
/// then batches copied out), `filemap_get_pages` (a batch lookup, readahead
/// on a miss, a folio created and read when readahead made none) and
/// `filemap_create_folio`, side by side. `File`'s reads call [`Mapping::read`]
/// and nothing here calls back into the handle: readahead is entered with
/// the handle's [`Readahead`] state as an argument (`readahead.rs`).
impl Mapping {
    /// The read path (`filemap_read`): up to `buf.len()` bytes at
    /// `offset`, short only at end of file, for a handle whose readahead
    /// state is `ra` and whose flags (its defaults and the read's own) are
    /// `flags`. The hit first; then batches of folios
    /// ([`get_pages`](Self::get_pages)) copied out one after another, with
    /// drop-behind for an uncached read and accessed marks. A read whose
    /// miss was counted and whose IO was started already (`started`, by
    /// `File::read_many`) does not count its folios as hits.
    ///
    /// # Errors
    /// As `File::read_at`: a backing error for a folio the read needed if
    /// no byte was copied before it; `WouldBlock` with `NOWAIT`.
    #[inline]
    pub(crate) fn read(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        buf: &mut [u8],
        offset: u64,
        flags: ReadFlags,
        started: bool,
    ) -> io::Result<usize> {
        // (The shift count before the size: see `read_batches`.)
        let shifts = self.shifts();
        let size = self.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let cache = self.inner();
        let end = offset.saturating_add(buf.len() as u64).min(size);
        // The common hit: the whole request inside one cached folio. One
        // lockless lookup, no batch, no range walk.
        // (It leaves the readahead state alone, `prev_pos` included: a hit
        // writes nothing other threads read. A marker or a dropbehind
        // folio takes the batch path, which starts the next window or
        // deals with the flag.)
        let (hit, sequential) = self.get_for_read(offset, (end - offset) as usize, true);
        // No folio at `offset` a moment ago: the miss path need not look
        // again before it reads.
        let absent = hit.is_none();
        if let Some(f) = hit {
            let start = f.index() * PAGE;
            let ff = f.flags();
            // The size again once the folio is seen uptodate, as
            // `filemap_read` reads `i_size` after `filemap_get_pages`: a
            // folio filled after a truncate or collapse set a smaller size
            // (by a reader that looked before it) holds zeros past that
            // size, and a read that loaded the old one before it must not
            // serve them. Shrunk meanwhile: the batch path cuts the read;
            // shifted meanwhile, it looks again.
            if serves_hit(&f, ff, end) && self.size() >= end && self.shifts() == shifts {
                self.first_read(&f, ff, size);
                // A read that goes on in the folio where this thread's
                // previous read ended is not a new access.
                let age = cache
                    .lru()
                    .read_access(&f, ff, sequential && offset > start);
                let n = (end - offset) as usize;
                self.copy_out(&f, (offset - start) as usize, &mut buf[..n]);
                let file = self.curve_counts();
                if !started {
                    // A folio the backing filled, read for the first time
                    // (readahead's), is a lookup that hit, but its bytes
                    // came from below: a miss to the curve.
                    let memory = !ff.contains(FolioFlags::FRESH);
                    let pages = (offset / PAGE, (end - 1) / PAGE);
                    let read = (n as u64, pages.1 - pages.0 + 1);
                    cache.stats.count_hit(memory.then_some(age), read, file);
                    cache
                        .stats
                        .observe_read(self.sample_key, pages, memory, file);
                } else {
                    cache
                        .stats
                        .read_done((n as u64, covered(offset, end)), file);
                }
                if end == size {
                    ra.reached_end();
                }
                return Ok(n);
            }
        }
        let read = self.read_batches(
            ra,
            buf,
            offset,
            flags,
            started,
            (absent, sequential),
            (size, end, shifts),
        );
        if end == size {
            ra.reached_end();
        }
        read
    }

    /// The read path past the hit ([`read`](Self::read)'s): a memory
    /// file's holes and folios, or batches of folios from `get_pages`
    /// (readahead, the miss) copied out one after another. `absent`: the
    /// hit found no folio at `offset`; `sequential`: the read continues
    /// this thread's last one; `size`, `end` and `shifts`: the file's
    /// size, the read's end and the file's shift count as the hit saw them
    /// (the count loaded before the size).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn read_batches(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        buf: &mut [u8],
        offset: u64,
        flags: ReadFlags,
        started: bool,
        (mut absent, sequential): (bool, bool),
        (size, end, shifts): (u64, u64, u64),
    ) -> io::Result<usize> {
        let uncached = flags.contains(ReadFlags::DONTCACHE);
        let cache = self.inner();
        if self.memfile {
            return Ok(self.read_mem(buf, offset, end));
        }
        let mut pos = offset;
        let mut copied = 0usize;
        let mut batch: Vec<FolioRef<'_>> = Vec::with_capacity(BATCH);
        let (mut size, mut end, mut shifts) = (size, end, shifts);
        let want = offset.saturating_add(buf.len() as u64);
        while pos < end {
            let got = self.get_pages(ra, pos / PAGE, end, flags, (absent, sequential), &mut batch);
            absent = false;
            let missed = match got {
                Ok(missed) => missed,
                Err(e) => {
                    if copied == 0 {
                        return Err(e);
                    }
                    break;
                }
            };
            if !started {
                self.observe_batch(&batch, pos, end);
            }
            if !self.size_again(&mut size, &mut end, &mut shifts, want) {
                batch.clear();
                continue;
            }
            if pos >= end {
                batch.clear();
                break;
            }
            for f in batch.drain(..) {
                if pos >= end {
                    break;
                }
                let start = f.index() * PAGE;
                let from = (pos - start) as usize;
                let n = (f.nr_pages() * PAGE - from as u64).min(end - pos) as usize;
                let mut ff = f.flags();
                if ff.contains(FolioFlags::DROPBEHIND) && !uncached {
                    // A cached read claims a folio an uncached one brought
                    // in: it stays (the kernel's own `filemap_read` would
                    // keep the flag; here a cached reader's use wins).
                    f.test_and_clear(FolioFlags::DROPBEHIND);
                    ff = f.flags();
                }
                self.first_read(&f, ff, size);
                let age =
                    cache
                        .lru()
                        .read_access(&f, ff, copied == 0 && sequential && offset > start);
                self.copy_out(&f, from, &mut buf[copied..copied + n]);
                if !missed && !started {
                    // The read's first folio counts with its age, unless
                    // its bytes came from below (`read`'s hit).
                    if copied == 0 {
                        let memory = !ff.contains(FolioFlags::FRESH);
                        cache
                            .stats
                            .count_hit(memory.then_some(age), (0, 0), self.curve_counts());
                    } else {
                        cache.stats.hits.add(1);
                    }
                }
                // Dropped once read through to its end (or to end of file):
                // a stream reading a large folio in pieces keeps it until
                // its last piece.
                let folio_end = (start + f.nr_pages() * PAGE).min(size);
                if uncached && ff.contains(FolioFlags::DROPBEHIND) && pos + n as u64 >= folio_end {
                    self.drop_behind(&f);
                }
                pos += n as u64;
                copied += n;
            }
        }
        ra.prev_pos.store(offset + copied as u64, Ordering::Relaxed);
        let read = (copied as u64, covered(offset, offset + copied as u64));
        cache.stats.read_done(read, self.curve_counts());
        Ok(copied)
    }

    /// The size again, once a batch's folios are uptodate (the kernel's
    /// `filemap_read`), for a read that wants bytes up to `want` and saw
    /// the file's size, its end and its shift count as `size`, `end` and
    /// `shifts`. A truncate cuts the backing and sets the size before it
    /// drops the folios past it, holding `invalidate_lock`, which a miss's
    /// folio creation takes shared: a folio filled from a backing already
    /// cut (zeros past the new end) was filled after the new size was set,
    /// and this sees it, and cuts `end`. A shift begun meanwhile (its count
    /// loaded after the size: a shift's new size comes with its count) may
    /// have taken the size below a folio of the batch and given it back
    /// with other data there (a collapse, then an insert, each dropping the
    /// folios from its offset on): the batch may hold zeros filled past the
    /// smaller size, or data from where it no longer is. Then `false`: the
    /// caller looks its batch up again, with the count, size and end now
    /// (what it copied stays: each page before or after a shift, as
    /// `shift.rs` promises).
    #[inline]
    fn size_again(&self, size: &mut u64, end: &mut u64, shifts: &mut u64, want: u64) -> bool {
        let now = self.size();
        if self.shifts() != *shifts {
            *shifts = self.shifts();
            *size = self.size();
            *end = want.min(*size);
            return false;
        }
        if now < *size {
            *size = now;
            *end = (*end).min(now);
        }
        true
    }

    /// The first read of folio `f`, filled from the backing
    /// (`FolioFlags::FRESH`), in a file of `size` bytes: its bytes, cut at
    /// the size, count as read from below for a read (once, by whichever
    /// read clears the flag), so that the bytes reads got from memory are
    /// `read_bytes - first_read_bytes`: a page readahead brought in is
    /// counted where it was read, not as a hit in bytes. Whole, even when
    /// the read takes part of it: a stream that reads a large folio in
    /// pieces got all of it from the device. Called on every read of a
    /// folio whose flags are `ff`: a bit test where it is not `FRESH`.
    #[inline]
    pub(super) fn first_read(&self, f: &crate::folio::Folio, ff: FolioFlags, size: u64) {
        if ff.contains(FolioFlags::FRESH) {
            self.count_first_read(f, size);
        }
    }

    /// [`first_read`](Self::first_read) of a `FRESH` folio: the flag
    /// cleared and the bytes counted, by one reader only.
    #[cold]
    fn count_first_read(&self, f: &crate::folio::Folio, size: u64) {
        if f.test_and_clear(FolioFlags::FRESH) {
            let start = f.index() * PAGE;
            let bytes = (start + f.nr_pages() * PAGE)
                .min(size)
                .saturating_sub(start);
            let pages = bytes.div_ceil(PAGE);
            self.inner()
                .stats
                .first_read((bytes, pages), self.curve_counts());
        }
    }

    /// Shows the miss-ratio curve the pages of a read that `batch` serves
    /// from `pos` (to `end` at most), a folio at a time: hits unless the
    /// backing filled the folio and no read has copied from it yet
    /// (`FolioFlags::FRESH`: the miss's own folios, readahead's), whose
    /// bytes came from below (a hit's age is counted with its first folio
    /// by the caller).
    fn observe_batch(&self, batch: &[FolioRef<'_>], pos: u64, end: u64) {
        let stats = &self.inner().stats;
        let mut from = pos;
        for f in batch {
            let upto = ((f.index() + f.nr_pages()) * PAGE).min(end);
            if upto <= from {
                continue;
            }
            let memory = !f.test(FolioFlags::FRESH);
            stats.observe_read(
                self.sample_key,
                (from / PAGE, (upto - 1) / PAGE),
                memory,
                self.curve_counts(),
            );
            from = upto;
        }
    }

    /// A memory file's read of bytes `offset..end` (the batched lookup of
    /// `filemap_get_folios_contig`):
    /// the folios present come in batches from one lockless walk each
    /// ([`Mapping::get_folios_contig`]); a hole, of any length (a missing
    /// large folio included), is copied out as zeros up to the next folio,
    /// with no allocation and no per-page lookup. Returns the bytes copied.
    fn read_mem(&self, buf: &mut [u8], offset: u64, end: u64) -> usize {
        let cache = self.inner();
        let last = (end - 1) / PAGE;
        let mut pos = offset;
        let mut batch: Vec<FolioRef<'_>> = Vec::with_capacity(BATCH);
        'outer: while pos < end {
            let mut from = pos / PAGE;
            self.get_folios_contig(&mut from, last, &mut batch);
            if batch.is_empty() {
                let next = self.next_present(pos / PAGE, last + 1);
                let stop = next.saturating_mul(PAGE).min(end);
                if stop > pos {
                    let at = (pos - offset) as usize;
                    buf[at..at + (stop - pos) as usize].fill(0);
                    pos = stop;
                }
                continue;
            }
            for f in batch.drain(..) {
                if !f.test(FolioFlags::UPTODATE) {
                    // Being written for the first time: wait for the writer.
                    f.wait_unlocked();
                    if f.mapping() != self.id() || !f.test(FolioFlags::UPTODATE) {
                        continue 'outer;
                    }
                }
                let start = f.index() * PAGE;
                if start + f.nr_pages() * PAGE <= pos {
                    continue;
                }
                let n = ((start + f.nr_pages() * PAGE).min(end) - pos) as usize;
                let at = (pos - offset) as usize;
                self.copy_out(&f, (pos - start) as usize, &mut buf[at..at + n]);
                cache.stats.hits.add(1);
                pos += n as u64;
            }
        }
        cache
            .stats
            .read_done((end - offset, covered(offset, end)), self.curve_counts());
        (end - offset) as usize
    }

    /// Fills `batch` with uptodate, referenced folios covering a contiguous
    /// run from page `index` (`filemap_get_pages`): a batch lookup; on a miss,
    /// synchronous readahead and a second lookup, and if that found nothing
    /// the folio is created and read; a marker folio starts the next window;
    /// a last folio still being read is waited for only when it is the
    /// first (partial progress first). `absent`: the caller just found no
    /// folio at `index` (the first lookup is skipped). Returns whether this
    /// read started the IO for its first folio: a miss (counted once in the cache's
    /// misses; its folios are then not counted as hits). A read that finds
    /// another's IO in flight and waits for it is a hit.
    fn get_pages<'m>(
        self: &'m Arc<Self>,
        ra: &Arc<Readahead>,
        index: u64,
        end: u64,
        flags: ReadFlags,
        (absent, sequential): (bool, bool),
        batch: &mut Vec<FolioRef<'m>>,
    ) -> io::Result<bool> {
        let last = (end - 1) / PAGE;
        let nowait = flags.contains(ReadFlags::NOWAIT);
        let dropbehind = flags.contains(ReadFlags::DONTCACHE);
        let mut missed = false;
        let mut absent = absent;
        // When this read first found its folio absent (a miss's latency
        // starts there; a hit never reads the clock).
        let mut since = None;
        loop {
            if !std::mem::take(&mut absent) {
                self.get_read_batch(index, last, batch);
            }
            if batch.is_empty() {
                if nowait {
                    return Err(would_block());
                }
                since.get_or_insert_with(std::time::Instant::now);
                missed |= self.sync_readahead(ra, index, last - index + 1, dropbehind, true, batch);
                if batch.is_empty() {
                    self.get_read_batch(index, last, batch);
                }
            }
            let Some(tail) = batch.last() else {
                match self.create_folio(index, last, dropbehind)? {
                    Some(f) => {
                        batch.push(f);
                        missed = true;
                        break;
                    }
                    None => continue,
                }
            };
            if tail.test(FolioFlags::READAHEAD) {
                self.async_readahead(ra, tail, (last, sequential), dropbehind);
            }
            if tail.test(FolioFlags::UPTODATE) {
                break;
            }
            if batch.len() > 1 {
                batch.pop();
                break;
            }
            if nowait {
                batch.clear();
                return Err(would_block());
            }
            // Being read (by readahead or another reader), or its read
            // failed: wait for the lock, then look again.
            let f = batch.pop().expect("one folio").lock();
            if f.mapping() != self.id() {
                // Removed while we slept (its read failed): start over.
                continue;
            }
            batch.push(self.read_folio(f)?);
            break;
        }
        if missed {
            let stats = &self.inner().stats;
            stats.misses.add(1);
            if let Some(since) = since {
                stats.miss_latency.record(since.elapsed());
            }
        }
        Ok(missed)
    }

    /// Creates, inserts and reads the folio for a miss at `index`. `None`
    /// when another reader inserted one first (look it up again).
    fn create_folio(
        &self,
        index: u64,
        last: u64,
        dropbehind: bool,
    ) -> io::Result<Option<FolioRef<'_>>> {
        // No folio is read from blocks being punched or truncated.
        let _inv = self.invalidate_lock.read();
        let mut order = fit_order(index, last.saturating_add(1), self.inner().io.max_order);
        loop {
            let f = self.new_folio(order)?;
            if dropbehind {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            let got = f.order();
            match self.add_folio(&f, index) {
                Ok(_) => return self.read_folio(f).map(Some),
                Err(AddError::Exists) if got > 0 => order = got - 1,
                Err(AddError::Exists) => return Ok(None),
                Err(other) => return Err(other.into()),
            }
        }
    }
}

/// An async read's miss (`crate::future`).
impl Mapping {
    /// Starts the IO of an async read's miss at byte `offset` of a request
    /// of `len` bytes (a stream's: the read continues the handle's last
    /// one), without waiting for it: the synchronous readahead the
    /// blocking read would run, every read submitted to the IO engine. The
    /// caller then waits on the lock of the folio it needs. Returns
    /// whether a folio was inserted (a miss, counted here).
    pub(crate) fn start_read(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        offset: u64,
        len: usize,
        flags: ReadFlags,
    ) -> bool {
        let Some((end, _)) = self.readable_end(offset, len as u64) else {
            return false;
        };
        let (index, last) = (offset / PAGE, (end - 1) / PAGE);
        let dropbehind = flags.contains(ReadFlags::DONTCACHE);
        let mut none = Vec::new();
        let started =
            self.sync_readahead(ra, index, last - index + 1, dropbehind, false, &mut none);
        debug_assert!(none.is_empty(), "a read that does not wait gets no folio");
        if started {
            self.inner().stats.misses.add(1);
        }
        started
    }

    /// Where a request of `len` bytes at `offset` ends, cut at the file's
    /// size, and that size (one load of it); `None` when it reads nothing
    /// (empty, at or past the end) or the file is a memory file (nothing
    /// to read in).
    fn readable_end(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let size = self.size();
        if offset >= size || len == 0 || self.memfile {
            return None;
        }
        Some((offset.saturating_add(len).min(size), size))
    }
}

/// The pages bytes `from..to` of a file cover (none if empty): what the
/// miss-ratio curve counts a read as (`Stats::count_hit`).
pub(super) fn covered(from: u64, to: u64) -> u64 {
    if to > from {
        (to - 1) / PAGE - from / PAGE + 1
    } else {
        0
    }
}

fn would_block() -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        "foliocache: the data is not cached and the read asked not to wait (NOWAIT)",
    )
}

/// Reading runs of folios: one IO per run of contiguous folios, waited for
/// (`read_pages`) or through the IO engine.
impl Mapping {
    /// Reads a run of locked, not uptodate folios of this mapping that
    /// cover contiguous pages (a readahead window's run) with one vectored
    /// read, then completes each as [`read_folio`](Self::read_folio) does:
    /// bytes past end of file zeroed, uptodate, unlocked. A folio the read
    /// stopped short of (mid-file) is read again on its own. On an error
    /// every folio of the run that is not complete leaves the mapping; the
    /// first error is returned.
    ///
    /// # Errors
    /// The backing's error; `InvalidInput` if the folios are not this
    /// mapping's, not contiguous, or one is uptodate already (nothing is
    /// read then, and every folio is unlocked).
    pub fn read_folios(&self, mut run: Vec<LockedFolio<'_>>) -> io::Result<()> {
        let Some(first) = run.first() else {
            return Ok(());
        };
        let mut next = first.index();
        for f in &run {
            if f.mapping() != self.id() || f.index() != next || f.test(FolioFlags::UPTODATE) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "read_folios needs contiguous folios of this mapping, none uptodate",
                ));
            }
            next += f.nr_pages();
        }
        if run.len() == 1 {
            let f = run.pop().expect("one folio");
            return self.read_folio(f).map(drop);
        }
        let first = &run[0];
        let cache = self.inner();
        let pos = first.index() * PAGE;
        // (Each folio is locked and not uptodate, checked above: its
        // memory is the read's. Distinct folios are distinct memory.)
        let mut bufs: Vec<IoBufMut<'_>> = run.iter_mut().map(LockedFolio::fill_buf).collect();
        let r = self.backing().read_blocks(&mut bufs, pos);
        drop(bufs);
        cache.stats.io_reads.add(1);
        self.complete_run(run, r)
    }

    /// Reads runs of locked, not uptodate folios of this mapping, each
    /// covering contiguous pages, through the cache's IO engine as one
    /// submission (one read per run), and returns without waiting. Each run
    /// completes on the engine's thread as [`read_folios`](Self::read_folios)
    /// completes it (uptodate and unlocked, or removed on error), and
    /// `on_error` runs there for a run that failed. Without an engine (under
    /// loom) the runs are read here, one after another.
    pub(crate) fn submit_runs(
        self: &Arc<Self>,
        runs: Vec<Vec<LockedFolio<'_>>>,
        on_error: Arc<dyn Fn() + Send + Sync>,
    ) {
        let cache = self.inner();
        let Some(engine) = &cache.io.engine else {
            for run in runs {
                if self.read_folios(run).is_err() {
                    on_error();
                }
            }
            return;
        };
        let mut reads = EngineReads::with_capacity(runs.len());
        for run in runs {
            let Some(first) = run.first() else { continue };
            let offset = first.index() * PAGE;
            // The mapping goes with the read, kept alive until the
            // completion.
            let mapping = self.clone();
            let on_error = on_error.clone();
            reads.push(
                self.inner_arc(),
                self.backing(),
                offset,
                run,
                move |cache, run, r| {
                    cache.stats.io_reads.add(1);
                    if mapping.complete_run(run, r).is_err() {
                        on_error();
                    }
                    // The mapping may go now (its file closed meanwhile):
                    // only then is this run finished.
                    drop(mapping);
                    cache.io.in_flight.fetch_sub(1, Ordering::Release);
                },
            );
        }
        cache
            .io
            .in_flight
            .fetch_add(reads.len() as u64, Ordering::Relaxed);
        reads.submit(engine);
    }

    /// Completes the folios of a run after its read returned `r` (bytes from
    /// the run's start, or the error): see [`read_folios`](Self::read_folios).
    pub(crate) fn complete_run(
        &self,
        run: Vec<LockedFolio<'_>>,
        r: io::Result<usize>,
    ) -> io::Result<()> {
        let cache = self.inner();
        let Some(first) = run.first() else {
            return Ok(());
        };
        let start = first.index() * PAGE;
        let got = match r {
            Ok(n) => {
                cache.stats.io_bytes.add(n as u64);
                n as u64
            }
            Err(e) => {
                cache.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                for f in run {
                    f.test_and_set(FolioFlags::ERROR);
                    self.remove_locked(&f);
                }
                return Err(e);
            }
        };
        let mut result = Ok(());
        for mut f in run {
            let pos = f.index() * PAGE;
            let len = f.nr_pages() * PAGE;
            // What the file has for this folio, and what the read brought.
            let want = len.min(self.size().saturating_sub(pos));
            let have = (start + got).saturating_sub(pos).min(len);
            if have >= want {
                // Zeroes from `have` to the folio's end: bytes past end of
                // file, which the backing zeroed already up to the block,
                // and any a previous owner left.
                f.fill_buf()[have as usize..].fill(0);
                f.test_and_clear(FolioFlags::ERROR);
                f.test_and_set(FolioFlags::FRESH);
                f.mark_uptodate();
            } else if let Err(e) = self.read_folio(f) {
                // Short mid-file: read it on its own (which retries).
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }
}

/// Readahead IO: windows planned by `RaState`, allocated, inserted and read.
/// The read path (`Mapping::read`) and `File`'s calls enter here with the
/// handle's [`Readahead`] state; nothing here calls back into the handle.
impl Mapping {
    /// `File::readahead`: reads `len` bytes at `offset` into the cache in
    /// windows of up to 2 MiB, skipping what is cached, at most half the
    /// cache's capacity; IO errors are left for the reads of those bytes.
    ///
    /// # Errors
    /// None today.
    pub(crate) fn readahead_range(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let Some((end, size)) = self.readable_end(offset, len) else {
            return Ok(());
        };
        let last_page = (size - 1) / PAGE;
        let cap_pages = (self.inner().mem.arena.capacity_pages() as u64 / 2).max(1);
        let first = offset / PAGE;
        let last = ((end - 1) / PAGE).min(first + cap_pages - 1);
        let insert = ra.state.lock().cfg.insert;
        let max_order = self.inner().io.max_order;
        let mut index = first;
        while index <= last {
            let pages = (last - index + 1).min(512);
            let win = Window {
                start: index,
                size: pages,
                async_size: 0,
            };
            let mut order = max_order;
            let slots = plan(&win, &mut order, max_order, last_page);
            self.run_window(ra, &slots, insert, false, false);
            index += pages;
        }
        Ok(())
    }

    /// Synchronous readahead for a miss at page `index` of a request of
    /// `req` pages (`page_cache_sync_ra`). Returns whether it inserted a
    /// folio. A miss read as one folio on this thread (`read_one`) pushes
    /// it to `batch`, uptodate and referenced, sparing the caller its
    /// lookup. Without `wait` (an async read's miss) the same window is
    /// built and inserted but every read goes to the IO engine, and
    /// nothing is pushed: the caller waits on the folios' locks.
    pub(crate) fn sync_readahead<'m>(
        self: &'m Arc<Self>,
        ra: &Arc<Readahead>,
        index: u64,
        req: u64,
        dropbehind: bool,
        wait: bool,
        batch: &mut Vec<FolioRef<'m>>,
    ) -> bool {
        let size = self.size();
        if size == 0 {
            return false;
        }
        let last_page = (size - 1) / PAGE;
        let max_order = self.inner().io.max_order;
        let prev_pos = ra.prev_pos.load(Ordering::Relaxed);
        // The decision works on a copy of the state, so the lock is held
        // only to copy it and to publish a new window: the look-back's
        // index walks run unlocked, and readers of one handle missing at
        // once do not queue on it. (The kernel's `file_ra_state` has no
        // lock at all; two misses racing here may both start a window, as
        // they may there.)
        let mut st = ra.state.lock().clone();
        let slots = match st.sync(index, req, prev_pos, |from, max| self.prev_miss(from, max)) {
            None => return false,
            Some(SyncPlan::Plain { start, pages: 1 }) if start <= last_page => {
                // One page, one order-0 folio (what `plan` would say), with
                // no plan to build.
                let slot = Slot {
                    index: start,
                    order: 0,
                    marker: false,
                    stream: false,
                };
                return self.read_one(ra, slot, dropbehind, wait, batch);
            }
            Some(SyncPlan::Plain { start, pages }) => {
                let win = Window {
                    start,
                    size: pages,
                    async_size: 0,
                };
                let mut order = max_order;
                plan(&win, &mut order, max_order, last_page)
            }
            Some(SyncPlan::Window(win, mut order)) => {
                let mut slots = plan(&win, &mut order, max_order, last_page);
                // A stream's window (`RaState::stream`): read once, its
                // folios go first (`lru.rs`), unless uncached.
                slots
                    .iter_mut()
                    .for_each(|s| s.stream = st.stream && !dropbehind);
                let mut cur = ra.state.lock();
                cur.win = win;
                cur.order = order;
                cur.stream = st.stream;
                // A stream starting over: what it had read ahead is
                // reached or gone.
                ra.count_unread(0);
                slots
            }
        };
        if let [slot] = slots[..] {
            if !slot.marker {
                return self.read_one(ra, slot, dropbehind, wait, batch);
            }
        }
        let insert = st.cfg.insert;
        self.run_window(ra, &slots, insert, wait, dropbehind)
    }

    /// A miss whose plan is one folio and no marker (a random read, or
    /// readahead off: `page_cache_sync_ra`'s `force_page_cache_ra` of the
    /// request alone): allocated, inserted and read on this thread, with
    /// none of a window's batches. Returns whether it inserted the folio.
    /// Without `wait`, the read goes to the IO engine instead.
    fn read_one<'m>(
        self: &'m Arc<Self>,
        ra: &Arc<Readahead>,
        slot: Slot,
        dropbehind: bool,
        wait: bool,
        batch: &mut Vec<FolioRef<'m>>,
    ) -> bool {
        // As in `run_window`: inserted locked before the lock is let go.
        let _inv = self.invalidate_lock.read();
        let Some(f) = self.insert_one(slot, dropbehind) else {
            return false;
        };
        self.inner().stats.readahead_windows.add(1);
        if !wait {
            self.read_window(ra, vec![f], false);
            return true;
        }
        match self.read_folio(f) {
            Ok(r) => batch.push(r),
            Err(_) => ra.shrink_window(),
        }
        true
    }

    /// One folio of `slot`'s order (no marker) allocated without waiting
    /// and inserted at its index: locked, not uptodate. `None` when memory
    /// is short or the place is taken. The caller holds `invalidate_lock`
    /// shared.
    pub(crate) fn insert_one(&self, slot: Slot, dropbehind: bool) -> Option<LockedFolio<'_>> {
        let f = self.new_folio_nowait(slot.order)?;
        if dropbehind {
            f.test_and_set(FolioFlags::DROPBEHIND);
        }
        if self.add_folio(&f, slot.index).is_err() {
            Self::give_back([f]);
            return None;
        }
        Some(f)
    }

    /// Asynchronous readahead: a read reached `marker` (a folio carrying the
    /// readahead flag) wanting pages up to `last` (`page_cache_async_ra`);
    /// `sequential`: the read goes on where its thread's last one ended.
    pub(crate) fn async_readahead(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        marker: &FolioRef<'_>,
        (last, sequential): (u64, bool),
        dropbehind: bool,
    ) {
        if marker.test(FolioFlags::WRITEBACK) || !marker.test_and_clear(FolioFlags::READAHEAD) {
            return;
        }
        let size = self.size();
        if size == 0 {
            return;
        }
        let last_page = (size - 1) / PAGE;
        let max_order = self.inner().io.max_order;
        let (index, pages) = (marker.index(), marker.nr_pages());
        let req = last.saturating_sub(index) + 1;
        let (slots, insert) = {
            let mut st = ra.state.lock();
            let Some((_, mut order)) = st.on_marker(index, pages, req, sequential, |from, max| {
                self.next_miss(from, max)
            }) else {
                return;
            };
            // Within the cache's cap on unread readahead.
            let win = if dropbehind {
                st.win
            } else {
                ra.cap_unread(&mut st, index)
            };
            let mut slots = plan(&win, &mut order, max_order, last_page);
            st.order = order;
            // A window a marker started goes on as the window that set
            // the marker: a sequential stream's, or the look-back window
            // of a random miss (whose marker a random read may hit too;
            // its folios go on the inactive list, beside the hot set they
            // are part of), unless the read that reached the marker goes
            // on from its thread's last one: a stream whose first read
            // missed beside cached pages (its first window a look-back
            // one) is a stream from its first marker on.
            st.stream |= sequential;
            slots
                .iter_mut()
                .for_each(|s| s.stream = st.stream && !dropbehind);
            (slots, st.cfg.insert)
        };
        self.run_window(ra, &slots, insert, false, dropbehind);
    }

    /// The first page at or before `from`, within `max` pages, holding no
    /// folio; a page below that range if all hold one; `None` if every page
    /// down to 0 holds one.
    fn prev_miss(&self, from: u64, max: u64) -> Option<u64> {
        let mut i = from;
        loop {
            if from - i >= max {
                return Some(i);
            }
            match self.span_at(i) {
                None => return Some(i),
                Some((0, _)) => return None,
                Some((first, _)) => i = first - 1,
            }
        }
    }

    /// The first page at or after `from`, within `max` pages, holding no
    /// folio (or the first page past that range).
    fn next_miss(&self, from: u64, max: u64) -> Option<u64> {
        let mut i = from;
        loop {
            if i - from >= max {
                return Some(i);
            }
            match self.span_at(i) {
                None => return Some(i),
                Some((first, n)) => i = first.checked_add(n)?,
            }
        }
    }

    /// Builds a window from its plan and reads it: on this thread when
    /// `sync` and the window is one run (the reader waits for it anyway; no
    /// hand-off), else through the IO engine as one submission. Returns
    /// whether it inserted any folio. An uncached read's windows are
    /// `dropbehind`.
    fn run_window(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        slots: &[Slot],
        insert: Insert,
        sync: bool,
        dropbehind: bool,
    ) -> bool {
        if slots.is_empty() {
            return false;
        }
        // No folio is read from blocks being punched or truncated: the
        // window's folios are in the index, locked, before this is let go.
        let _inv = self.invalidate_lock.read();
        let folios = match insert {
            Insert::Batched => self.insert_batched(slots, dropbehind),
            Insert::Single => self.insert_single(slots, dropbehind),
        };
        let any = !folios.is_empty();
        if any {
            self.inner().stats.readahead_windows.add(1);
        }
        self.read_window(ra, folios, sync);
        any
    }

    /// Allocates every folio of the window, then inserts them with
    /// [`Mapping::add_folio_range`] (one lock hold). Memory short:
    /// gives them back and goes one at a time. A folio already cached ends
    /// a range; its pages' holes are filled one page at a time, and the
    /// insertion goes on after it. Returns the folios inserted (locked, not
    /// uptodate), in index order.
    pub(crate) fn insert_batched(&self, slots: &[Slot], dropbehind: bool) -> Vec<LockedFolio<'_>> {
        // Memory only for the slots that hold no cached page; the others'
        // holes are filled page by page (the kernel's
        // `page_cache_ra_unbounded` allocates nothing for a page that is
        // there). A window over cached pages would otherwise reclaim as
        // much of the cache as it spans, and give it back unused.
        let (clear, taken) = self.split_cached(slots);
        let mut holes = Vec::new();
        let slots = &clear[..];
        // The whole window's memory first: one bulk allocation per order
        // (a window has one or two), handed out in plan order.
        let orders: Vec<u32> = slots.iter().map(|s| s.order).collect();
        let folios = self.new_folios_planned(&orders, true);
        // The cached slots' holes are filled after that allocation, as
        // `page_cache_ra_unbounded` meets each page only when it gets
        // there: a page the allocation reclaimed from them (the oldest
        // pages are often the window's own, a loop's next read) is read
        // with the window, not left a hole for the next miss, which would
        // reclaim the pages after it in turn.
        for s in taken {
            if !self.fill_holes(s, dropbehind, &mut holes) {
                break;
            }
        }
        let Some(folios) = folios else {
            let mut out = self.insert_single(slots, dropbehind);
            out.extend(holes);
            out.sort_by_key(|f| f.index());
            return out;
        };
        for (f, s) in folios.iter().zip(slots) {
            if s.marker {
                f.test_and_set(FolioFlags::READAHEAD);
            }
            if s.stream {
                f.test_and_set(FolioFlags::STREAMED);
            }
            if dropbehind {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
        }
        let mut inserted = vec![false; folios.len()];
        let mut i = 0;
        while i < folios.len() {
            match self.add_folio_range(&folios[i..], slots[i].index) {
                Ok(n) => {
                    inserted[i..i + n].iter_mut().for_each(|x| *x = true);
                    i += n;
                }
                Err(AddError::Exists) => {}
                Err(_) => break,
            }
            if i < folios.len() {
                // Slot `i` conflicts with a cached folio.
                let s = slots[i];
                if !self.fill_holes(s, dropbehind, &mut holes) {
                    break;
                }
                i += 1;
            }
        }
        let mut out = Vec::with_capacity(folios.len() + holes.len());
        let mut rest = Vec::new();
        for (f, ok) in folios.into_iter().zip(inserted) {
            if ok {
                out.push(f);
            } else {
                rest.push(f);
            }
        }
        Self::give_back(rest);
        if !holes.is_empty() {
            out.extend(holes);
            out.sort_by_key(|f| f.index());
        }
        out
    }

    /// `slots` (in index order) split into those that hold no cached page
    /// and those that hold one.
    fn split_cached(&self, slots: &[Slot]) -> (Vec<Slot>, Vec<Slot>) {
        let (Some(first), Some(last)) = (slots.first(), slots.last()) else {
            return (Vec::new(), Vec::new());
        };
        let spans = self.cached_spans(first.index, last.index + (1u64 << last.order) - 1);
        if spans.is_empty() {
            return (slots.to_vec(), Vec::new());
        }
        let mut spans = spans.into_iter().peekable();
        slots.iter().partition(|s| {
            let end = s.index + (1u64 << s.order);
            while spans.next_if(|&(a, n)| a + n <= s.index).is_some() {}
            spans.peek().is_none_or(|&(a, _)| a >= end)
        })
    }

    /// One allocation and one [`Mapping::add_folio`] per folio (the kernel's
    /// `page_cache_ra_unbounded`, and the fallback when memory is short). A folio of
    /// the planned order that cannot be had, or whose place is taken, is
    /// replaced by one-page folios in its holes; the window ends where
    /// memory runs out.
    fn insert_single(&self, slots: &[Slot], dropbehind: bool) -> Vec<LockedFolio<'_>> {
        let mut out = Vec::with_capacity(slots.len());
        for s in slots {
            if let Some(f) = self.new_folio_nowait(s.order) {
                if s.marker {
                    f.test_and_set(FolioFlags::READAHEAD);
                }
                if s.stream {
                    f.test_and_set(FolioFlags::STREAMED);
                }
                if dropbehind {
                    f.test_and_set(FolioFlags::DROPBEHIND);
                }
                if self.add_folio(&f, s.index).is_ok() {
                    out.push(f);
                    continue;
                }
                Self::give_back([f]);
            }
            if !self.fill_holes(*s, dropbehind, &mut out) {
                break;
            }
        }
        out
    }

    /// Inserts one-page folios into the pages of slot `s` that hold none
    /// (streamed if the slot is). False when memory ran out.
    fn fill_holes<'m>(&'m self, s: Slot, dropbehind: bool, out: &mut Vec<LockedFolio<'m>>) -> bool {
        let (start, n) = (s.index, 1u64 << s.order);
        let mut p = start;
        while p < start + n {
            if let Some((first, count)) = self.span_at(p) {
                p = first + count;
                continue;
            }
            let Some(f) = self.new_folio_nowait(0) else {
                return false;
            };
            if dropbehind {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            if s.stream {
                f.test_and_set(FolioFlags::STREAMED);
            }
            if self.add_folio(&f, p).is_ok() {
                out.push(f);
            } else {
                Self::give_back([f]);
            }
            p += 1;
        }
        true
    }

    /// Gives back folios that were never inserted.
    fn give_back<'m>(folios: impl IntoIterator<Item = LockedFolio<'m>>) {
        for f in folios {
            f.fetch_clear(
                FolioFlags::READAHEAD
                    .union(FolioFlags::DROPBEHIND)
                    .union(FolioFlags::STREAMED),
            );
        }
    }

    /// Reads a built window: one read per run of contiguous folios. An
    /// error quarters this file's readahead (the kernel's
    /// `shrink_readahead_size_eio`) and drops the run's
    /// folios (readers that need them read them again themselves).
    pub(crate) fn read_window(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        folios: Vec<LockedFolio<'_>>,
        sync: bool,
    ) {
        let mut runs: Vec<Vec<LockedFolio<'_>>> = Vec::new();
        for f in folios {
            match runs.last_mut() {
                Some(run)
                    if run
                        .last()
                        .is_some_and(|l| l.index() + l.nr_pages() == f.index()) =>
                {
                    run.push(f)
                }
                _ => runs.push(vec![f]),
            }
        }
        if runs.is_empty() {
            return;
        }
        if sync && runs.len() == 1 {
            let run = runs.pop().expect("one run");
            if self.read_folios(run).is_err() {
                ra.shrink_window();
            }
            return;
        }
        let ra = ra.clone();
        self.submit_runs(runs, Arc::new(move || ra.shrink_window()));
    }
}
