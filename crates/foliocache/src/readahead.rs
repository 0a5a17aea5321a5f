//! On-demand readahead (`mm/readahead.c`): per-file state, the window
//! arithmetic of the kernel's `page_cache_ra_order`/`ondemand_readahead`,
//! the plan of a window's folios, and its IO: building a window, inserting
//! it, reading it (one IO per run of contiguous folios, `read_pages`).
//!
//! # The algorithm, in short
//! A read that misses starts a *synchronous* window at the missing page: its
//! size comes from the request (`get_init_ra_size`), unless the access looks
//! random (the checks of `page_cache_sync_ra`).
//! The window's last `async_size` pages begin at a *marker* folio
//! (`READAHEAD` flag). A read that reaches the marker clears it and starts
//! the next, larger window *asynchronously* (`page_cache_async_ra`), so a sequential reader
//! finds its data already read. Windows ramp up to `max_pages`. Folio orders
//! grow by two each async window, up to the mapping's maximum; a
//! synchronous window starts at the order of the request (the kernel starts
//! at 0; see `RaState::sync`).
//!
//! # Defaults
//! [`ReadaheadConfig::kernel`] is the kernel's compiled-in default (128 KiB
//! windows) and reproduces its window sequence exactly. Our default
//! ([`ReadaheadConfig::default`]) allows 8 MiB windows. Under `O_DIRECT`
//! nothing below us reads ahead (the kernel's readahead works on its page
//! cache, which we bypass), so our windows are all the device sees. A
//! virtio disk delivers in proportion to the reads in flight, and one with
//! `read_ahead_kb` = 8192 gives the kernel's buffered reads 8 MiB windows:
//! with 2 MiB windows, cold sequential reads fell behind the kernel's and
//! had a much longer tail latency (the `readahead` scenario in
//! `docs/bench.md`: `foliocache bench --scenario readahead --quick --engine
//! foliocache --engine 'foliocache[ra=8m]' --engine kernel`). A window
//! still starts at 4 pages for a 4 KiB read and only grows for a sequential
//! stream, so random readers do not pay for it; and a file's windows are
//! capped at an eighth of the cache (but not below 128 KiB), so a stream
//! cannot flush a small cache.

use std::io;
use std::sync::Arc;

use backing::IoBufMut;

use crate::arena::PAGE;
use crate::filemap::{AddError, FolioRef, LockedFolio, Mapping};
use crate::folio::{EngineReads, FolioFlags};
use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering};

/// How a window's folios enter the index (an A/B switch: see `internals`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub enum Insert {
    /// All folios allocated first, then inserted with
    /// [`Mapping::add_folio_range`](crate::filemap::Mapping::add_folio_range) in one
    /// lock hold; one folio at a time if memory is short.
    #[default]
    Batched,
    /// One allocation and one [`add_folio`](crate::filemap::Mapping::add_folio) per
    /// folio, as the kernel's `page_cache_ra_unbounded` does. For comparison.
    Single,
}

/// Readahead settings of a cache (per-file state starts from these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadaheadConfig {
    /// The largest window, in pages (the kernel's `ra_pages`); 0 turns
    /// readahead off (a miss reads only what the request needs).
    pub max_pages: u64,
    /// The device's optimal request, in pages (`io_pages`): a request larger
    /// than `max_pages` may be read ahead up to this much.
    pub io_pages: u64,
    /// How windows are inserted (an A/B switch of the benchmarks: see
    /// `internals`).
    pub(crate) insert: Insert,
}

impl ReadaheadConfig {
    /// Windows of up to `max_pages` (0: no readahead), and requests larger
    /// than that read ahead up to `io_pages`.
    pub const fn new(max_pages: u64, io_pages: u64) -> Self {
        ReadaheadConfig {
            max_pages,
            io_pages,
            insert: Insert::Batched,
        }
    }

    /// The kernel's defaults: 128 KiB windows (`VM_READAHEAD_PAGES`), and
    /// `io_pages` equal to it.
    pub const fn kernel() -> Self {
        ReadaheadConfig {
            max_pages: 32,
            io_pages: 32,
            insert: Insert::Batched,
        }
    }

    /// No readahead.
    pub const fn disabled() -> Self {
        ReadaheadConfig {
            max_pages: 0,
            io_pages: 0,
            insert: Insert::Batched,
        }
    }

    /// The same with `insert`.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub const fn with_insert(mut self, insert: Insert) -> Self {
        self.insert = insert;
        self
    }

    /// How windows are inserted.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub const fn insert(&self) -> Insert {
        self.insert
    }
}

impl Default for ReadaheadConfig {
    /// 8 MiB windows (see the module docs for why), batched insertion.
    fn default() -> Self {
        ReadaheadConfig {
            max_pages: 2048,
            io_pages: 2048,
            insert: Insert::Batched,
        }
    }
}

impl ReadaheadConfig {
    /// This configuration for a cache of `capacity_pages`: windows capped at
    /// an eighth of it, but not below the kernel's 128 KiB (32 pages).
    pub(crate) fn for_capacity(mut self, capacity_pages: u64) -> Self {
        let cap = (capacity_pages / 8).max(32);
        self.max_pages = self.max_pages.min(cap);
        self.io_pages = self.io_pages.min(cap);
        self
    }
}

/// Access advice for a range of a file (`posix_fadvise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Back to the defaults (readahead as configured; cancels `Random`
    /// and `NoReuse`).
    Normal,
    /// Sequential access expected: windows up to twice the maximum.
    Sequential,
    /// Random access expected: no readahead; a miss reads the request only.
    Random,
    /// Read the range now, in the background (like `readahead(2)`).
    WillNeed,
    /// Drop the range's clean, unused folios now, leaving no shadows.
    DontNeed,
    /// The data will be read once: later reads through this handle (and
    /// its clones) are uncached, as with
    /// [`ReadFlags::DONTCACHE`](crate::ReadFlags::DONTCACHE), until
    /// `Normal` (the kernel's `POSIX_FADV_NOREUSE`, whose effect there is
    /// weaker: it only skips the folios' activation).
    NoReuse,
}

/// A window: `size` pages from `start`; its last `async_size` pages start
/// at the marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Window {
    /// First page.
    pub start: u64,
    /// Pages.
    pub size: u64,
    /// Pages from the marker to the end.
    pub async_size: u64,
}

impl Window {
    /// The page that carries the marker (`start + size - async_size`).
    pub fn marker(&self) -> u64 {
        self.start + self.size - self.async_size
    }
}

/// Per-file readahead state (the kernel's `file_ra_state` less
/// `prev_pos`), behind a mutex taken only on a miss or a marker.
#[derive(Clone, Debug)]
pub(crate) struct RaState {
    pub(crate) cfg: ReadaheadConfig,
    pub(crate) win: Window,
    /// The current maximum window (advice and IO errors change it).
    pub(crate) ra_pages: u64,
    /// Preferred folio order of the next window.
    pub(crate) order: u32,
    /// `Advice::Random`: no readahead.
    pub(crate) random: bool,
}

/// What a miss should read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncPlan {
    /// Exactly these pages, no marker, state untouched.
    Plain { start: u64, pages: u64 },
    /// A new window (state updated), folio orders from `order`.
    Window(Window, u32),
}

/// The initial window for a request of `req` pages (the kernel's
/// `get_init_ra_size`).
pub(crate) fn init_size(req: u64, max: u64) -> u64 {
    let r = req.max(1).next_power_of_two();
    if r <= max / 32 {
        r * 4
    } else if r <= max / 4 {
        r * 2
    } else {
        max
    }
}

/// The window after one of `cur` pages (the kernel's `get_next_ra_size`).
pub(crate) fn next_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

impl RaState {
    pub(crate) fn new(cfg: ReadaheadConfig) -> Self {
        RaState {
            cfg,
            win: Window::default(),
            ra_pages: cfg.max_pages,
            order: 0,
            random: false,
        }
    }

    /// `max_pages` for a request of `req` pages (as `page_cache_sync_ra`
    /// sets it): a request larger than the window may use the device's
    /// optimal size (`io_pages`).
    fn max_pages(&self, req: u64) -> u64 {
        if req > self.ra_pages && self.cfg.io_pages > self.ra_pages {
            req.min(self.cfg.io_pages)
        } else {
            self.ra_pages
        }
    }

    /// The synchronous readahead of a miss at page `index` for a request of
    /// `req` pages (`page_cache_sync_ra`), the previous read having ended at byte `prev_pos`
    /// (`u64::MAX`: none yet). `prev_miss(from, max)` returns the first page
    /// at or before `from` (looking at most `max` back) that holds no folio
    /// (a page outside that range if there is none within it), or `None`
    /// when every page down to 0 holds one. `None`: readahead is off (the
    /// caller reads what the request needs).
    pub(crate) fn sync(
        &mut self,
        index: u64,
        req: u64,
        prev_pos: u64,
        prev_miss: impl FnOnce(u64, u64) -> Option<u64>,
    ) -> Option<SyncPlan> {
        let req = req.max(1);
        if self.ra_pages == 0 {
            return None;
        }
        if self.random {
            // Forced readahead of the request, capped (4.3.2).
            let cap = self.cfg.io_pages.max(self.ra_pages);
            return Some(SyncPlan::Plain {
                start: index,
                pages: req.min(cap),
            });
        }
        let max = self.max_pages(req);
        let prev_index = prev_pos >> 12;
        if index == 0 || req > max || index.wrapping_sub(prev_index) <= 1 {
            let size = init_size(req, max);
            let async_size = if size > req { size - req } else { size / 2 };
            return Some(self.start_window(index, size, async_size, req));
        }
        let (contig, whole) = match prev_miss(index - 1, max) {
            Some(miss) => (index - miss - 1, false),
            None => (index, true),
        };
        if contig <= req {
            return Some(SyncPlan::Plain {
                start: index,
                pages: req,
            });
        }
        let contig = if whole { contig * 2 } else { contig };
        Some(self.start_window(index, (contig + req).min(max), 1, req))
    }

    /// A new window. Its folio order starts at the request's (log2 of
    /// `req`, so a 2 MiB read gets one 2 MiB folio: one IO, one index
    /// entry); the kernel starts at order 0 here and lets async windows
    /// grow it. For 4 KiB reads the two agree.
    fn start_window(&mut self, start: u64, size: u64, async_size: u64, req: u64) -> SyncPlan {
        self.win = Window {
            start,
            size,
            async_size,
        };
        self.order = 63 - req.max(1).leading_zeros();
        SyncPlan::Window(self.win, self.order)
    }

    /// The asynchronous readahead of a read that reached the marker folio
    /// at `index` (of `folio_pages` pages) wanting `req` pages from there
    /// (`page_cache_async_ra`). `next_miss(from, max)` returns the first page at or after
    /// `from` (within `max`) that holds no folio. `None`: no window.
    pub(crate) fn on_marker(
        &mut self,
        index: u64,
        folio_pages: u64,
        req: u64,
        next_miss: impl FnOnce(u64, u64) -> Option<u64>,
    ) -> Option<(Window, u32)> {
        if self.ra_pages == 0 || self.random {
            return None;
        }
        let max = self.max_pages(req.max(1));
        let w = self.win;
        let expected = (w.start + w.size).saturating_sub(w.async_size) / folio_pages * folio_pages;
        if w.size > 0 && index == expected {
            let start = w.start + w.size;
            let size = w.size.max(next_size(w.size, max));
            self.win = Window {
                start,
                size,
                async_size: 0,
            };
        } else {
            let start = next_miss(index + 1, max)?;
            if start == 0 || start - index > max {
                return None;
            }
            let size = next_size(start - index + req, max);
            self.win = Window {
                start,
                size,
                async_size: 0,
            };
        }
        self.order += 2;
        let align = 1u64 << self.order.min(max.trailing_zeros());
        let end = self.win.start + self.win.size;
        let aligned_end = end / align * align;
        if aligned_end > self.win.start {
            self.win.size -= end - aligned_end;
        }
        self.win.async_size = self.win.size;
        Some((self.win, self.order))
    }
}

/// One planned folio of a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) index: u64,
    pub(crate) order: u32,
    pub(crate) marker: bool,
}

/// The folios of `win` (as `page_cache_ra_order` builds them): orders from `order` clamped to the mapping's
/// `max_order` and to log2 of the window, reduced at each position to the
/// index's alignment and so as not to pass the window's end or `last` (the
/// last page with file data). The marker goes on the folio at the marker
/// page rounded down to that folio's size; a window cut by end of file has
/// none. Updates `order` to the order used.
pub(crate) fn plan(win: &Window, order: &mut u32, max_order: u32, last: u64) -> Vec<Slot> {
    let mut out = Vec::new();
    if win.size == 0 || win.start > last {
        return out;
    }
    let limit = last.min(win.start + win.size - 1);
    // A window that reaches end of file gets no marker: there is
    // nothing after it to read ahead.
    let clipped = last < win.start + win.size - 1;
    let new_order = (*order).min(max_order).min(63 - win.size.leading_zeros());
    *order = new_order;
    let mark = win.marker();
    let mut index = win.start;
    while index <= limit {
        let mut o = new_order;
        if index & ((1u64 << o) - 1) != 0 {
            o = index.trailing_zeros();
        }
        while o > 0 && index + (1u64 << o) - 1 > limit {
            o -= 1;
        }
        let marker = !clipped && win.async_size > 0 && index == mark & !((1u64 << o) - 1);
        out.push(Slot {
            index,
            order: o,
            marker,
        });
        index += 1u64 << o;
    }
    out
}

/// The per-file readahead control.
pub(crate) struct Readahead {
    pub(crate) state: Mutex<RaState>,
    /// Byte after the last byte of the previous read that took the batch
    /// path (`u64::MAX` at first). Hits inside one folio leave it alone: a
    /// hit writes nothing other threads read; a miss after them finds the
    /// stream by looking back at what is cached (4.3 step 4).
    pub(crate) prev_pos: AtomicU64,
    /// The open file's default [`ReadFlags`](crate::ReadFlags) bits, and
    /// [`NOREUSE`](Self::NOREUSE) after `Advice::NoReuse`.
    pub(crate) flags: AtomicU32,
}

impl Readahead {
    /// Set in `flags` by `Advice::NoReuse`: reads are uncached.
    pub(crate) const NOREUSE: u32 = 1 << 31;
    /// Set in `flags` by `File::set_write_insert(Insert::Single)`: writes
    /// create their folios one at a time.
    pub(crate) const WRITE_SINGLE: u32 = 1 << 30;
    /// The bits of `flags` that are not [`ReadFlags`](crate::ReadFlags).
    pub(crate) const PRIVATE: u32 = Self::NOREUSE | Self::WRITE_SINGLE;
}

impl std::fmt::Debug for Readahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readahead")
            .field("prev_pos", &self.prev_pos.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Readahead {
    /// After an IO error: a quarter of the window (the kernel's
    /// `shrink_readahead_size_eio`).
    fn shrink_window(&self) {
        let mut st = self.state.lock();
        st.ra_pages /= 4;
    }

    pub(crate) fn new(cfg: ReadaheadConfig) -> Self {
        Readahead {
            state: Mutex::new(RaState::new(cfg)),
            prev_pos: AtomicU64::new(u64::MAX),
            flags: AtomicU32::new(0),
        }
    }
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
        let Some(engine) = &cache.io else {
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
                &self.cache.inner,
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
                    cache.io_in_flight.fetch_sub(1, Ordering::Release);
                },
            );
        }
        cache
            .io_in_flight
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
        let size = self.size();
        if offset >= size || len == 0 || self.memfile {
            return Ok(());
        }
        let end = offset.saturating_add(len).min(size);
        let last_page = (size - 1) / PAGE;
        let cap_pages = (self.inner().mem.arena.capacity_pages() as u64 / 2).max(1);
        let first = offset / PAGE;
        let last = ((end - 1) / PAGE).min(first + cap_pages - 1);
        let insert = ra.state.lock().cfg.insert;
        let max_order = self.inner().max_order;
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
    /// lookup.
    pub(crate) fn sync_readahead<'m>(
        self: &'m Arc<Self>,
        ra: &Arc<Readahead>,
        index: u64,
        req: u64,
        dropbehind: bool,
        batch: &mut Vec<FolioRef<'m>>,
    ) -> bool {
        let size = self.size();
        if size == 0 {
            return false;
        }
        let last_page = (size - 1) / PAGE;
        let max_order = self.inner().max_order;
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
                };
                return self.read_one(ra, slot, dropbehind, batch);
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
                let slots = plan(&win, &mut order, max_order, last_page);
                let mut cur = ra.state.lock();
                cur.win = win;
                cur.order = order;
                slots
            }
        };
        if let [slot] = slots[..] {
            if !slot.marker {
                return self.read_one(ra, slot, dropbehind, batch);
            }
        }
        let insert = st.cfg.insert;
        self.run_window(ra, &slots, insert, true, dropbehind)
    }

    /// A miss whose plan is one folio and no marker (a random read, or
    /// readahead off: `page_cache_sync_ra`'s `force_page_cache_ra` of the
    /// request alone): allocated, inserted and read on this thread, with
    /// none of a window's batches. Returns whether it inserted the folio.
    fn read_one<'m>(
        &'m self,
        ra: &Readahead,
        slot: Slot,
        dropbehind: bool,
        batch: &mut Vec<FolioRef<'m>>,
    ) -> bool {
        // As in `run_window`: inserted locked before the lock is let go.
        let _inv = self.invalidate_lock.read();
        let Some(f) = self.insert_one(slot, dropbehind) else {
            return false;
        };
        self.inner().stats.readahead_windows.add(1);
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
    /// readahead flag) wanting pages up to `last` (`page_cache_async_ra`).
    pub(crate) fn async_readahead(
        self: &Arc<Self>,
        ra: &Arc<Readahead>,
        marker: &FolioRef<'_>,
        last: u64,
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
        let max_order = self.inner().max_order;
        let (index, pages) = (marker.index(), marker.nr_pages());
        let req = last.saturating_sub(index) + 1;
        let (slots, insert) = {
            let mut st = ra.state.lock();
            let Some((win, mut order)) =
                st.on_marker(index, pages, req, |from, max| self.next_miss(from, max))
            else {
                return;
            };
            let slots = plan(&win, &mut order, max_order, last_page);
            st.order = order;
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
        // The whole window's memory first: one bulk allocation per order
        // (a window has one or two), handed out in plan order.
        let orders: Vec<u32> = slots.iter().map(|s| s.order).collect();
        let Some(folios) = self.new_folios_planned(&orders, true) else {
            return self.insert_single(slots, dropbehind);
        };
        for (f, s) in folios.iter().zip(slots) {
            if s.marker {
                f.test_and_set(FolioFlags::READAHEAD);
            }
            if dropbehind {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
        }
        let mut inserted = vec![false; folios.len()];
        let mut holes = Vec::new();
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
                if !self.fill_holes(s.index, 1 << s.order, dropbehind, &mut holes) {
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
                if dropbehind {
                    f.test_and_set(FolioFlags::DROPBEHIND);
                }
                if self.add_folio(&f, s.index).is_ok() {
                    out.push(f);
                    continue;
                }
                Self::give_back([f]);
            }
            if !self.fill_holes(s.index, 1 << s.order, dropbehind, &mut out) {
                break;
            }
        }
        out
    }

    /// Inserts one-page folios into the pages of `start..start + n` that
    /// hold none. False when memory ran out.
    fn fill_holes<'m>(
        &'m self,
        start: u64,
        n: u64,
        dropbehind: bool,
        out: &mut Vec<LockedFolio<'m>>,
    ) -> bool {
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
            f.test_and_clear(FolioFlags::READAHEAD);
            f.test_and_clear(FolioFlags::DROPBEHIND);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_windows_match_the_reference_table() {
        // 4.2 with m = 32: r = 1, 2, 3-4, 5-8, 9+ -> 4, 4, 8, 16, 32.
        let got: Vec<u64> = [1, 2, 3, 4, 5, 8, 9, 32, 100]
            .iter()
            .map(|&r| init_size(r, 32))
            .collect();
        assert_eq!(got, [4, 4, 8, 8, 16, 16, 32, 32, 32]);
    }

    #[test]
    fn ramp_up_matches_the_reference() {
        let ramp = |max: u64| {
            let mut s = 4;
            let mut v = vec![s];
            for _ in 0..5 {
                s = next_size(s, max);
                v.push(s);
            }
            v
        };
        assert_eq!(ramp(32), [4, 8, 16, 32, 32, 32]);
        assert_eq!(ramp(128), [4, 16, 32, 64, 128, 128]);
    }

    /// The worked example of 4.5: m = 32, order-0 folios, 4 KiB sequential
    /// reads from 0: (0,4,1), (4,8,4), (12,16,12), (28,32,28), (60,32,60),
    /// (92,32,92), each launched at the previous window's marker.
    #[test]
    fn sequential_windows_match_the_worked_example() {
        let mut st = RaState::new(ReadaheadConfig::kernel());
        let mut windows = Vec::new();
        let Some(SyncPlan::Window(w, _)) = st.sync(0, 1, u64::MAX, |_, _| unreachable!()) else {
            panic!("a window at 0")
        };
        windows.push((w.start, w.size, w.marker()));
        let mut marker = w.marker();
        for _ in 0..5 {
            let (w, mut order) = st
                .on_marker(marker, 1, 1, |_, _| unreachable!())
                .expect("on track");
            // Building it on a mapping without large folios resets the
            // order (the kernel's page_cache_ra_order does the same).
            plan(&w, &mut order, 0, u64::MAX);
            st.order = order;
            windows.push((w.start, w.size, w.marker()));
            marker = w.marker();
        }
        assert_eq!(
            windows,
            [
                (0, 4, 1),
                (4, 8, 4),
                (12, 16, 12),
                (28, 32, 28),
                (60, 32, 60),
                (92, 32, 92)
            ]
        );
    }

    #[test]
    fn a_lone_random_read_reads_the_request_only() {
        let mut st = RaState::new(ReadaheadConfig::kernel());
        let prev = 4096 * 1000;
        // Nothing cached before 5000: the first miss looking back is 4999.
        let p = st.sync(5000, 2, prev, |i, _| Some(i));
        assert_eq!(
            p,
            Some(SyncPlan::Plain {
                start: 5000,
                pages: 2
            })
        );
        assert_eq!(st.win, Window::default(), "state untouched");
        // A stream's traces (10 cached pages before) make a window.
        let p = st.sync(5000, 2, prev, |i, _| Some(i - 10));
        assert_eq!(
            p,
            Some(SyncPlan::Window(
                Window {
                    start: 5000,
                    size: 12,
                    async_size: 1
                },
                1
            ))
        );
        // Everything before cached: the count doubles.
        let p = st.sync(10, 2, prev, |_, _| None);
        assert!(matches!(
            p,
            Some(SyncPlan::Window(
                Window {
                    start: 10,
                    size: 22,
                    async_size: 1
                },
                1
            ))
        ));
    }

    #[test]
    fn random_advice_and_disabled_readahead() {
        let mut st = RaState::new(ReadaheadConfig::kernel());
        st.random = true;
        assert_eq!(
            st.sync(0, 100, u64::MAX, |_, _| None),
            Some(SyncPlan::Plain {
                start: 0,
                pages: 32
            })
        );
        assert_eq!(st.on_marker(3, 1, 1, |_, _| Some(4)), None);
        let mut st = RaState::new(ReadaheadConfig::disabled());
        assert_eq!(st.sync(7, 16, u64::MAX, |_, _| None), None);
    }

    #[test]
    fn a_marker_off_track_restarts_at_the_next_hole() {
        let mut st = RaState::new(ReadaheadConfig::kernel());
        // State lost (another stream moved it): marker at 100, cached up to
        // 107, so the window starts at the hole, 108.
        st.win = Window {
            start: 0,
            size: 4,
            async_size: 3,
        };
        let (w, order) = st.on_marker(100, 1, 1, |_, _| Some(108)).unwrap();
        assert_eq!(w.start, 108);
        assert_eq!(w.size, next_size(8 + 1, 32) / 4 * 4);
        assert_eq!(w.async_size, w.size);
        assert_eq!(order, 2);
        // No hole within reach: no window.
        assert_eq!(st.on_marker(500, 1, 1, |_, _| Some(600)), None);
        assert_eq!(st.on_marker(500, 1, 1, |_, _| None), None);
    }

    #[test]
    fn plans_use_aligned_large_folios_and_mark_one() {
        let w = Window {
            start: 16,
            size: 64,
            async_size: 64,
        };
        let mut order = 4;
        let p = plan(&w, &mut order, 9, u64::MAX);
        assert_eq!(order, 4);
        assert!(p.iter().all(|s| s.order == 4 && s.index % 16 == 0));
        assert_eq!(p.len(), 4);
        assert_eq!(p.iter().filter(|s| s.marker).count(), 1);
        assert!(p[0].marker, "async window: the marker is its first folio");
        // Misaligned start: smaller folios until aligned.
        let w = Window {
            start: 4,
            size: 28,
            async_size: 28,
        };
        let mut order = 4;
        let p = plan(&w, &mut order, 9, u64::MAX);
        let shape: Vec<(u64, u32)> = p.iter().map(|s| (s.index, s.order)).collect();
        assert_eq!(shape, [(4, 2), (8, 3), (16, 4)]);
        // Clipped at end of file (last page 20): no marker past it.
        let w = Window {
            start: 0,
            size: 32,
            async_size: 4,
        };
        let mut order = 0;
        let p = plan(&w, &mut order, 0, 20);
        assert_eq!(p.len(), 21);
        assert!(
            p.iter().all(|s| !s.marker),
            "the marker page 28 is past EOF"
        );
        // The mapping's maximum caps the order.
        let mut order = 9;
        let p = plan(
            &Window {
                start: 0,
                size: 512,
                async_size: 512,
            },
            &mut order,
            2,
            u64::MAX,
        );
        assert_eq!(order, 2);
        assert_eq!(p.len(), 128);
    }
}
