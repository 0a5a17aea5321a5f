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
//! with 2 MiB windows, cold sequential reads fall behind the kernel's and
//! have a much longer tail latency
//! (the note "Readahead's default window" in `docs/measurements/`: `foliocache bench
//! --scenario readahead --quick --engine foliocache --engine
//! 'foliocache[ra=8m]' --engine kernel`). A window
//! still starts at 4 pages for a 4 KiB read and only grows for a sequential
//! stream; a read that is not a stream's (a random miss beside cached
//! pages, a marker met by a random read) reads the kernel's default window
//! at most ([`RANDOM_WINDOW`]), so random readers do not pay for the
//! streams' windows; a window takes memory only for the pages it reads
//! (none for a cached one, as `page_cache_ra_unbounded`); and a file's windows are
//! capped at an eighth of the cache (but not below 128 KiB), so a stream
//! cannot flush a small cache. The streams' windows not yet read are
//! capped over the whole cache too ([`UnreadCap`]): several streams at
//! once share a quarter of it.

use std::sync::Arc;

use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering, StatU64};

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
    /// The current window is a sequential stream's: started at the
    /// file's start, by a read that goes on where the last one ended, or
    /// by a miss within a window's length of the last window; not by the
    /// look-back of a random miss (whose cached neighbours make a window
    /// too). Its asynchronous windows follow it. Its folios go on the
    /// streamed list (`lru.rs`).
    pub(crate) stream: bool,
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
            stream: false,
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
            self.stream = true;
            return Some(self.start_window(index, size, async_size, req));
        }
        // A stream that missed near its last window (its folio evicted
        // before it was through, or reads inside its large folios that
        // left `prev_pos` behind) goes on as one.
        let w = self.win;
        let near = w.size > 0 && index + w.size >= w.start && index <= w.start + w.size;
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
        self.stream = near;
        // A random reader's cached neighbours look like a stream's traces:
        // its window is the kernel's at most (`RANDOM_WINDOW`).
        let max = if near {
            max
        } else {
            max.min(RANDOM_WINDOW.max(req))
        };
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
    /// (`page_cache_async_ra`); `sequential`: that read goes on from its
    /// thread's last one. `next_miss(from, max)` returns the first page at or after
    /// `from` (within `max`) that holds no folio. `None`: no window.
    pub(crate) fn on_marker(
        &mut self,
        index: u64,
        folio_pages: u64,
        req: u64,
        sequential: bool,
        next_miss: impl FnOnce(u64, u64) -> Option<u64>,
    ) -> Option<(Window, u32)> {
        if self.ra_pages == 0 || self.random {
            return None;
        }
        let max = self.max_pages(req.max(1));
        // Reached by a read that is not a stream's, of a window that is
        // not one: the kernel's window at most (`RANDOM_WINDOW`).
        let max = if sequential || self.stream {
            max
        } else {
            max.min(RANDOM_WINDOW)
        };
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

/// The largest window of a read that is not a stream's: a random miss
/// whose neighbours are cached (`page_cache_sync_ra`'s look-back), and a
/// marker met by a read that does not go on from its thread's last one,
/// of a window that is not a stream's (`page_cache_async_ra`). The
/// kernel's default `ra_pages` (`VM_READAHEAD_PAGES`, 128 KiB): the
/// kernel sizes these windows as a stream's, from `ra_pages`; ours allow a
/// stream far more (see the module docs), which would have a random
/// reader read, and reclaim for, hundreds of pages no read reaches
/// (docs/design.md, readahead).
pub(crate) const RANDOM_WINDOW: u64 = ReadaheadConfig::kernel().max_pages;

/// One planned folio of a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) index: u64,
    pub(crate) order: u32,
    pub(crate) marker: bool,
    /// Of a sequential stream's window: the folio goes on the streamed
    /// list (`FolioFlags::STREAMED`, `lru.rs`).
    pub(crate) stream: bool,
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
            stream: false,
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
    /// The cache's unread readahead, and this handle's part of it.
    unread: Arc<UnreadCap>,
    mine: StatU64,
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
    pub(crate) fn shrink_window(&self) {
        let mut st = self.state.lock();
        st.ra_pages /= 4;
    }

    /// A handle's state, its unread readahead counted in `unread`, the
    /// cache's.
    pub(crate) fn new(cfg: ReadaheadConfig, unread: Arc<UnreadCap>) -> Self {
        Readahead {
            state: Mutex::new(RaState::new(cfg)),
            prev_pos: AtomicU64::new(u64::MAX),
            flags: AtomicU32::new(0),
            unread,
            mine: StatU64::new(0),
        }
    }

    /// The cache's unread readahead this handle's counted in.
    pub(crate) fn unread_cap(&self) -> &Arc<UnreadCap> {
        &self.unread
    }

    /// The asynchronous window `st.win` that a stream at page `index` is
    /// about to read, shrunk so that the cache's unread readahead stays
    /// within its cap (never below [`UNREAD_FLOOR`] pages, nor grown), and
    /// counted as this handle's (replacing what it had counted: its last
    /// window is reached). Called with `st`, the handle's state, locked.
    pub(crate) fn cap_unread(&self, st: &mut RaState, index: u64) -> Window {
        let mine = self.mine.load(Ordering::Relaxed);
        let others = self
            .unread
            .pages
            .load(Ordering::Relaxed)
            .saturating_sub(mine);
        let w = &mut st.win;
        let gap = w.start.saturating_sub(index);
        let room = self.unread.cap.saturating_sub(others).saturating_sub(gap);
        let size = w.size.min(room.max(UNREAD_FLOOR));
        if size < w.size {
            w.size = size;
            w.async_size = size;
        }
        self.count_unread(gap + w.size);
        *w
    }

    /// A read of this handle reached the file's end: what it had read
    /// ahead is reached, and its part of the cap goes. (A stream read to
    /// its end by a handle kept open would otherwise hold it until the
    /// handle's next window or its close, shrinking every other stream's
    /// windows meanwhile.) A load of the handle's own counter when it has
    /// none.
    #[inline]
    pub(crate) fn reached_end(&self) {
        if self.mine.load(Ordering::Relaxed) != 0 {
            self.count_unread(0);
        }
    }

    /// This handle's unread readahead is now `pages` (0: none, its stream
    /// started over, reached the file's end, or it closes). A swap and the
    /// difference added to the cache's: exact whichever thread of the
    /// handle calls it, locked or not.
    pub(crate) fn count_unread(&self, pages: u64) {
        let mine = self.mine.swap(pages, Ordering::Relaxed);
        if pages >= mine {
            self.unread.pages.fetch_add(pages - mine, Ordering::Relaxed);
        } else {
            self.unread.pages.fetch_sub(mine - pages, Ordering::Relaxed);
        }
    }
}

impl Drop for Readahead {
    /// The handle's unread readahead is no longer counted.
    fn drop(&mut self) {
        self.count_unread(0);
    }
}

/// The share of the capacity the cache's streams may hold read ahead and
/// not yet read, all together: a quarter.
const UNREAD_SHARE: u64 = 4;

/// The smallest window the cap leaves a stream (128 KiB, the kernel's
/// default `ra_pages`): a stream over the cap still reads in windows.
pub(crate) const UNREAD_FLOOR: u64 = 32;

/// A cache's unread readahead: the pages of asynchronous windows issued
/// and not yet reached by their streams, summed over the cache's handles
/// (each handle's share counted when it issues a window, as the window's
/// end less where its stream is; dropped when its stream starts over,
/// reaches the file's end, or it closes), and the most it may be: [`UNREAD_SHARE`] of the capacity.
/// Streamed folios not yet read are the ones reclaim will not take first
/// (`vmscan.rs`, `next_folio`): with several streams each holding its
/// windows, they could fill the cache, and reclaim would then take the
/// hot set. The kernel bounds readahead per file only (`ra_pages`).
#[derive(Debug)]
pub(crate) struct UnreadCap {
    /// (A statistic's atomic, even under loom: it sizes windows and orders
    /// nothing.)
    pages: StatU64,
    cap: u64,
}

impl UnreadCap {
    /// The cap of a cache of `capacity_pages`.
    pub(crate) fn new(capacity_pages: u64) -> UnreadCap {
        UnreadCap {
            pages: StatU64::new(0),
            cap: capacity_pages / UNREAD_SHARE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams share the cache's cap on unread readahead: a window that
    /// would take the total past it shrinks (never below the floor), a
    /// handle's share is replaced by its next window's, and goes when its
    /// stream starts over or the handle closes.
    #[test]
    fn unread_readahead_is_capped_over_the_cache() {
        // A cache of 4,096 pages: 1,024 unread at most.
        let cap = Arc::new(UnreadCap::new(4096));
        let cfg = ReadaheadConfig::new(512, 512);
        let window = |ra: &Readahead, index: u64, start: u64, size: u64| {
            let mut st = ra.state.lock();
            st.win = Window {
                start,
                size,
                async_size: size,
            };
            ra.cap_unread(&mut st, index)
        };
        let unread = || cap.pages.load(Ordering::Relaxed);
        let a = Readahead::new(cfg, cap.clone());
        let b = Readahead::new(cfg, cap.clone());
        // A stream at 0 issuing [256, 768): 768 unread, within the cap.
        assert_eq!(window(&a, 0, 256, 512).size, 512);
        assert_eq!(unread(), 768);
        // Another stream's window of 512 gets what is left: 256.
        let w = window(&b, 1000, 1000, 512);
        assert_eq!((w.size, w.async_size), (256, 256));
        assert_eq!(unread(), 1024);
        // Over the cap, a third stream's window keeps the floor.
        let c = Readahead::new(cfg, cap.clone());
        assert_eq!(window(&c, 5000, 5000, 512).size, UNREAD_FLOOR);
        assert_eq!(unread(), 1024 + UNREAD_FLOOR);
        // The first stream reached its marker: its share is its new
        // window's, and the cap counts the others'.
        assert_eq!(window(&a, 768, 768, 512).size, 512);
        assert_eq!(unread(), 512 + 256 + UNREAD_FLOOR);
        // Starting over, and closing, give the shares back.
        a.count_unread(0);
        assert_eq!(unread(), 256 + UNREAD_FLOOR);
        drop(b);
        drop(c);
        assert_eq!(unread(), 0);
    }

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
                .on_marker(marker, 1, 1, true, |_, _| unreachable!())
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
        assert_eq!(st.on_marker(3, 1, 1, false, |_, _| Some(4)), None);
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
        let (w, order) = st.on_marker(100, 1, 1, false, |_, _| Some(108)).unwrap();
        assert_eq!(w.start, 108);
        assert_eq!(w.size, next_size(8 + 1, 32) / 4 * 4);
        assert_eq!(w.async_size, w.size);
        assert_eq!(order, 2);
        // No hole within reach: no window.
        assert_eq!(st.on_marker(500, 1, 1, false, |_, _| Some(600)), None);
        assert_eq!(st.on_marker(500, 1, 1, false, |_, _| None), None);
    }

    /// A read that is not a stream's reads the kernel's window at most,
    /// whatever the maximum: a random miss's look-back window, and the
    /// window of a marker it meets, on track or off; a stream's (near its
    /// last window, or a read going on from its last one) the maximum.
    #[test]
    fn windows_of_random_reads_stay_within_the_kernels() {
        let mut st = RaState::new(ReadaheadConfig::new(2048, 2048));
        let prev = 4096 * 100;
        // 900 pages cached before a miss of 16 far from any window.
        let p = st.sync(5000, 16, prev, |i, _| Some(i - 900));
        let want = Window {
            start: 5000,
            size: RANDOM_WINDOW,
            async_size: 1,
        };
        assert_eq!(p, Some(SyncPlan::Window(want, 4)));
        assert!(!st.stream);
        // Its marker met by a random read: on track, no ramp past it.
        let (w, _) = st
            .on_marker(want.marker(), 1, 1, false, |_, _| unreachable!())
            .unwrap();
        assert!(w.size <= RANDOM_WINDOW, "{w:?}");
        // Off track (another window's marker), random: the same.
        let (w, _) = st
            .on_marker(7000, 1, 16, false, |f, _| Some(f + 10))
            .unwrap();
        assert!(w.size <= RANDOM_WINDOW, "{w:?}");
        // The same marker met by a read going on from its last one ramps.
        let (w, _) = st
            .on_marker(7000, 1, 16, true, |f, _| Some(f + 10))
            .unwrap();
        assert!(w.size > RANDOM_WINDOW, "{w:?}");
        // A miss near the last window: a stream's, the whole look-back.
        let at = w.start + w.size;
        let p = st.sync(at, 16, prev, |i, _| Some(i - 900));
        assert!(
            matches!(p, Some(SyncPlan::Window(w, _)) if w.size == 916),
            "{p:?}"
        );
        assert!(st.stream);
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
