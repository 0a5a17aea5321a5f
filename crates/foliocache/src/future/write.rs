//! The write, sync and size futures: [`File::write_at_async`],
//! [`File::write_all_at_async`], [`File::sync_data_async`],
//! [`File::sync_all_async`], [`File::set_len_async`] (module
//! documentation: `future/mod.rs`; design: `docs/async.md`).

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::job::{self, Jobs, Wait};
#[cfg(feature = "tokio")]
use super::read::ReadProgress;
use super::read::{ReadState, MAX_MEMORY_WAITS};
use crate::arena::PAGE;
use crate::file::File;
use crate::filemap::{FgpFlags, FolioFlags};
use crate::flags::ReadFlags;
use crate::write::WriteFlags;

/// The async forms of the writes, syncs and `set_len`.
impl File {
    /// Writes all of `buf` at `offset`, as [`write_at`](Self::write_at)
    /// does (never short: the output is `buf.len()`), without blocking the
    /// thread for the waits a write may meet: see
    /// [`future`](crate::future). A write into cached folios with the
    /// cache under its dirty limit completes on the first poll, with no
    /// waker and no system call.
    ///
    /// The write goes in pieces (those of `write_at`: up to an eighth of
    /// the cache, 4 MiB at most), each copied in one poll. Before a
    /// piece, a writer over the cache's dirty limit awaits the writeback
    /// `write_at` would do itself, run on the cache's writeback pool
    /// (shared with the other throttled writers of the file), and a page
    /// the piece covers only in part, not cached, is read first through
    /// the async read path.
    ///
    /// Dropped before it completes, the future has written a prefix of
    /// `buf` made of whole pieces (none if it never completed a poll that
    /// copied one); nothing reads `buf` after the drop. In append mode the
    /// write goes whole in one poll (after the throttle of its first
    /// piece), under one hold of the file's lock as `write_at`'s, so no
    /// other write lands inside it.
    ///
    /// ```
    /// # let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// # let file = cache.memfile("f", 0)?;
    /// let n = pollster::block_on(file.write_at_async(b"hello", 0))?;
    /// assert_eq!(n, 5);
    /// pollster::block_on(file.sync_data_async())?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`write_at`](Self::write_at). Unlike it, a write of several
    /// pieces (not in append mode) does not hold the file's lock between
    /// them: a `set_len` may come between two pieces, as between two
    /// writes.
    pub fn write_at_async<'a>(&'a self, buf: &'a [u8], offset: u64) -> WriteAt<'a> {
        WriteAt(WriteState::new(self, buf, offset))
    }

    /// Writes all of `buf` at `offset`
    /// ([`write_at_async`](Self::write_at_async) never writes less), as
    /// [`write_all_at`](Self::write_all_at).
    ///
    /// # Errors
    /// As [`write_at_async`](Self::write_at_async).
    pub fn write_all_at_async<'a>(&'a self, buf: &'a [u8], offset: u64) -> WriteAllAt<'a> {
        WriteAllAt(WriteState::new(self, buf, offset))
    }

    /// [`write_at_async`](Self::write_at_async) with per-write
    /// [`WriteFlags`], as [`write_at_flags`](Self::write_at_flags): with
    /// [`WriteFlags::DONTCACHE`] each piece's writeback is started and not
    /// waited for; a stream of them past its bound of kicked writeback
    /// awaits that writeback on the writeback pool before its next piece
    /// (where `write_at_flags` waits on its thread).
    ///
    /// ```
    /// # use foliocache::WriteFlags;
    /// # let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// # let file = cache.memfile("f", 0)?;
    /// let n = pollster::block_on(file.write_at_flags_async(b"log", 0, WriteFlags::DONTCACHE))?;
    /// assert_eq!(n, 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`write_at_async`](Self::write_at_async).
    pub fn write_at_flags_async<'a>(
        &'a self,
        buf: &'a [u8],
        offset: u64,
        flags: WriteFlags,
    ) -> WriteAt<'a> {
        let mut st = WriteState::new(self, buf, offset);
        st.uncached = flags.contains(WriteFlags::DONTCACHE);
        WriteAt(st)
    }

    /// [`sync_data`](Self::sync_data) without blocking the thread: the
    /// writeback and the backing's sync run on the cache's writeback pool,
    /// and the task waits for their end (a sync of this file queued and
    /// not yet started is joined, and every task waiting on it wakes at
    /// its end). The error report is `sync_data`'s: this handle's error
    /// sequence is advanced when the future completes, not before.
    ///
    /// Dropped before it completes, the sync it started still runs to its
    /// end (its writeback completes and ends the folios' writeback state),
    /// but nothing is promised durable, and an error it meets is left for
    /// the handle's next sync to report.
    ///
    /// # Errors
    /// As [`sync_data`](Self::sync_data).
    pub fn sync_data_async(&self) -> SyncAt<'_> {
        SyncAt::new(self, false)
    }

    /// [`sync_all`](Self::sync_all) without blocking the thread, as
    /// [`sync_data_async`](Self::sync_data_async).
    ///
    /// # Errors
    /// As [`sync_all`](Self::sync_all).
    pub fn sync_all_async(&self) -> SyncAt<'_> {
        SyncAt::new(self, true)
    }

    /// [`set_len`](Self::set_len) without blocking the thread: the bad
    /// input `set_len` refuses is refused on the first poll; the change
    /// itself (which waits for the file's writeback in flight and the
    /// backing's `ftruncate`) runs on the cache's writeback pool.
    ///
    /// Dropped before its first poll, nothing changed; dropped later, the
    /// change runs to its end: the size is the new one or the old one,
    /// never anything between.
    ///
    /// # Errors
    /// As [`set_len`](Self::set_len).
    pub fn set_len_async(&self, size: u64) -> SetLen<'_> {
        SetLen {
            file: self,
            size,
            wait: None,
        }
    }
}

/// The future of [`File::write_at_async`]: the bytes written.
#[must_use = "futures do nothing unless polled"]
pub struct WriteAt<'a>(WriteState<'a>);

/// The future of [`File::write_all_at_async`].
#[must_use = "futures do nothing unless polled"]
pub struct WriteAllAt<'a>(WriteState<'a>);

/// The future of [`File::sync_data_async`] and [`File::sync_all_async`].
#[must_use = "futures do nothing unless polled"]
pub struct SyncAt<'a> {
    file: &'a File,
    all: bool,
    wait: Option<Wait>,
}

/// The future of [`File::set_len_async`].
#[must_use = "futures do nothing unless polled"]
pub struct SetLen<'a> {
    file: &'a File,
    size: u64,
    wait: Option<Wait>,
}

/// What a write waits for before its next piece.
enum Waiting<'a> {
    Nothing,
    /// The throttle's writeback (`Jobs::throttle`).
    Throttle(Wait),
    /// The read of a page the piece covers in part.
    Fill(Box<ReadState<'a, Vec<u8>>>),
    /// Room for the piece's new folios (`Jobs::memory`).
    Memory(Wait),
    /// The uncached writes' writeback, over its bound
    /// (`writeback::wait_uncached`).
    Uncached(Wait),
    /// A tokio handle's `Fill` between two polls, without a borrow.
    #[cfg(feature = "tokio")]
    FillParked(ReadProgress),
}

/// What a tokio handle's write that returned `Pending` (or a short count)
/// keeps for its next `poll_write`, which brings its buffer again: the
/// waits of the piece at `pos`, without a borrow (see
/// [`ReadProgress`]).
#[cfg(feature = "tokio")]
pub(super) struct WriteProgress {
    /// Where that piece goes: the next write resumes only there.
    pos: u64,
    throttled: bool,
    fills: u8,
    memory_waits: u32,
    waiting: Waiting<'static>,
}

/// A write in progress: `buf[..done]` is written at `offset`.
pub(super) struct WriteState<'a> {
    file: &'a File,
    buf: &'a [u8],
    offset: u64,
    /// In append mode, until the first piece found the end of the file.
    append: bool,
    done: usize,
    /// The first poll's checks are done.
    checked: bool,
    /// The piece at `done` had its throttle.
    throttled: bool,
    /// Reads of partial pages the piece at `done` made (at most one per
    /// edge: a page evicted again is read by the piece itself).
    fills: u8,
    /// Memory jobs the piece at `done` waited for (see
    /// [`MAX_MEMORY_WAITS`]).
    memory_waits: u32,
    waiting: Waiting<'a>,
    /// Return what was written rather than wait before the next piece (an
    /// `AsyncWrite`'s write), and read partial pages as a tokio handle's
    /// read (`ReadState::resume`).
    short: bool,
    /// `WriteFlags::DONTCACHE`.
    uncached: bool,
    /// The piece at `done` waited for the uncached writeback's bound.
    uncached_waited: bool,
}

impl<'a> WriteState<'a> {
    fn new(file: &'a File, buf: &'a [u8], offset: u64) -> WriteState<'a> {
        WriteState {
            file,
            buf,
            offset,
            append: file.is_append(),
            done: 0,
            checked: false,
            throttled: false,
            fills: 0,
            memory_waits: 0,
            waiting: Waiting::Nothing,
            short: false,
            uncached: false,
            uncached_waited: false,
        }
    }

    /// A tokio handle's write of `buf` at `offset` (ignored in append
    /// mode), resuming `from`'s waits if they were for a piece there.
    #[cfg(feature = "tokio")]
    pub(super) fn resume(
        from: Option<WriteProgress>,
        file: &'a File,
        buf: &'a [u8],
        offset: u64,
    ) -> WriteState<'a> {
        let mut st = WriteState::new(file, buf, offset);
        st.short = true;
        if let Some(p) = from.filter(|p| st.append || p.pos == offset) {
            st.throttled = p.throttled;
            st.fills = p.fills;
            st.memory_waits = p.memory_waits;
            st.waiting = p.waiting;
        }
        st
    }

    /// Where the bytes written end (in append mode, once a piece found
    /// the end of the file).
    #[cfg(feature = "tokio")]
    pub(super) fn end(&self) -> u64 {
        self.offset.saturating_add(self.done as u64)
    }

    /// The bytes written.
    #[cfg(feature = "tokio")]
    pub(super) fn written(&self) -> usize {
        self.done
    }

    /// Gives up the file and the buffer, keeping the waits of the next
    /// piece for [`resume`](Self::resume).
    #[cfg(feature = "tokio")]
    pub(super) fn park(self) -> WriteProgress {
        WriteProgress {
            pos: self.end(),
            throttled: self.throttled,
            fills: self.fills,
            memory_waits: self.memory_waits,
            waiting: match self.waiting {
                Waiting::Nothing => Waiting::Nothing,
                Waiting::Throttle(w) => Waiting::Throttle(w),
                Waiting::Memory(w) => Waiting::Memory(w),
                Waiting::Uncached(w) => Waiting::Uncached(w),
                Waiting::Fill(r) => Waiting::FillParked(r.park()),
                Waiting::FillParked(p) => Waiting::FillParked(p),
            },
        }
    }

    /// Polls what the piece at `done` waits for.
    fn poll_waiting(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        #[cfg(feature = "tokio")]
        if matches!(self.waiting, Waiting::FillParked(_)) {
            // A tokio handle's fill read, rebuilt around the file.
            if let Waiting::FillParked(p) = std::mem::replace(&mut self.waiting, Waiting::Nothing) {
                let at = p.offset();
                let r = ReadState::resume(Some(p), self.file, vec![0u8; 1], at, false);
                self.waiting = Waiting::Fill(Box::new(r));
            }
        }
        match &mut self.waiting {
            Waiting::Nothing => {}
            Waiting::Throttle(w) => {
                let r = ready!(w.poll(cx));
                self.waiting = Waiting::Nothing;
                r?;
                self.throttled = true;
            }
            Waiting::Fill(r) => {
                // A failed read is the piece's own to meet and report
                // (it reads the page again on this thread).
                let _ = ready!(r.poll_read(cx));
                self.waiting = Waiting::Nothing;
            }
            Waiting::Uncached(w) => {
                // (Its writeback's error is the next sync's.)
                let _ = ready!(w.poll(cx));
                self.waiting = Waiting::Nothing;
                self.uncached_waited = true;
            }
            Waiting::Memory(w) => {
                if ready!(w.poll(cx)).is_err() {
                    // The wait ran out (`OutOfMemory`): the piece
                    // allocates as the blocking write's does, which
                    // reports the error if memory is still short.
                    self.memory_waits = MAX_MEMORY_WAITS;
                }
                self.waiting = Waiting::Nothing;
            }
            #[cfg(feature = "tokio")]
            Waiting::FillParked(_) => unreachable!("rebuilt above"),
        }
        Poll::Ready(Ok(()))
    }

    /// Writes until all of `buf` is written: its length, or the error.
    /// With `short`, what was written once more would wait.
    pub(super) fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let file = self.file;
        let m = file.mapping();
        if !self.checked {
            file.check_writable()?;
            self.checked = true;
        }
        loop {
            if self.poll_waiting(cx)?.is_pending() {
                if self.short && self.done > 0 {
                    return Poll::Ready(Ok(self.done));
                }
                return Poll::Pending;
            }
            let len = self.buf.len();
            if self.done == len {
                return Poll::Ready(Ok(len));
            }
            // Where the piece goes (in append mode, a guess until the
            // write's lock finds the end of the file).
            let pos = if self.append {
                m.size()
            } else {
                self.offset.saturating_add(self.done as u64)
            };
            let end = pos.saturating_add((len - self.done) as u64);
            let index = pos / PAGE;
            let last = end.saturating_sub(1) / PAGE;
            let count = (last - index + 1).min(file.write_piece_pages());
            let piece_end = end.min((index + count).saturating_mul(PAGE));
            // An append goes whole, under one hold of the inode lock, as
            // `write_at`'s: no other append may land between its pieces.
            let n = if self.append {
                len - self.done
            } else {
                (piece_end.saturating_sub(pos) as usize).clamp(1, len - self.done)
            };
            if !self.throttled && crate::writeback::over_dirty_limit(m) {
                self.waiting = Waiting::Throttle(Jobs::throttle(file, count));
                continue;
            }
            if self.fills < 2 && !self.append {
                if let Some(at) = self.partial_miss(pos, pos.saturating_add(n as u64)) {
                    self.fills += 1;
                    self.waiting = Waiting::Fill(Box::new(self.fill(at)));
                    continue;
                }
            }
            if self.memory_waits < MAX_MEMORY_WAITS {
                if let Some(pages) = self.short_of_room(pos, pos.saturating_add(n as u64), count) {
                    self.memory_waits += 1;
                    self.waiting = Waiting::Memory(Jobs::memory(file, pages));
                    continue;
                }
            }
            if self.uncached && !self.uncached_waited && crate::writeback::uncached_over(m) {
                self.waiting = Waiting::Uncached(job::run(file, |f| {
                    crate::writeback::wait_uncached(f.mapping());
                    Ok(())
                }));
                continue;
            }
            let piece = &self.buf[self.done..self.done + n];
            let at = file.write_piece(piece, pos, self.append, self.uncached)?;
            if self.append {
                self.append = false;
                self.offset = at;
            }
            self.done += n;
            self.throttled = false;
            self.uncached_waited = false;
            self.fills = 0;
            self.memory_waits = 0;
        }
    }

    /// The read of the page at `at` that a piece covers in part.
    fn fill(&self, at: u64) -> ReadState<'a, Vec<u8>> {
        #[cfg(feature = "tokio")]
        if self.short {
            return ReadState::resume(None, self.file, vec![0u8; 1], at, false);
        }
        ReadState::new(self.file, vec![0u8; 1], at, ReadFlags::NONE)
    }

    /// The pages a piece over `from..to` (at most `most` pages) needs new
    /// folios for, if the cache cannot give that many without waiting
    /// (free, or freed by one reclaim pass: `CacheInner::has_room`); `None`
    /// when it can, or for a memory file (whose write allocates as the
    /// blocking write does). Where the piece would wait in its allocation
    /// (`CacheInner::alloc_folio`), the task awaits the cache's memory job.
    fn short_of_room(&self, from: u64, to: u64, most: u64) -> Option<u64> {
        let m = self.file.mapping();
        let cache = m.inner();
        if m.memfile || cache.mem.arena.free_pages() as u64 >= most {
            return None;
        }
        let (first, last) = (from / PAGE, to.saturating_sub(1) / PAGE);
        let mut missing = 0;
        let mut p = first;
        while p <= last && missing < most {
            match m.span_at(p) {
                Some((start, n)) => p = start + n,
                None => {
                    missing += 1;
                    p += 1;
                }
            }
        }
        (missing > 0 && !cache.has_room(missing)).then_some(missing)
    }

    /// The first page that a write of `from..to` covers only in part and
    /// that would be read from the backing (inside the file, not cached
    /// uptodate), if any.
    fn partial_miss(&self, from: u64, to: u64) -> Option<u64> {
        let m = self.file.mapping();
        if m.memfile {
            return None;
        }
        let size = m.size();
        let mut edges = [None, None];
        if !from.is_multiple_of(PAGE) {
            edges[0] = Some(from / PAGE * PAGE);
        }
        if !to.is_multiple_of(PAGE) {
            edges[1] = Some(to / PAGE * PAGE);
        }
        edges.into_iter().flatten().find(|&at| {
            at < size
                && !m
                    .get_folio(at / PAGE, FgpFlags::empty())
                    .is_ok_and(|f| f.test(FolioFlags::UPTODATE))
        })
    }

    fn fmt(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("offset", &self.offset)
            .field("len", &self.buf.len())
            .field("done", &self.done)
            .field("waiting", &!matches!(self.waiting, Waiting::Nothing))
            .finish()
    }
}

impl Future for WriteAt<'_> {
    type Output = io::Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_write(cx)
    }
}

impl Future for WriteAllAt<'_> {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_write(cx).map_ok(|_| ())
    }
}

impl<'a> SyncAt<'a> {
    fn new(file: &'a File, all: bool) -> SyncAt<'a> {
        SyncAt {
            file,
            all,
            wait: None,
        }
    }
}

impl Future for SyncAt<'_> {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let file = this.file;
        if file.mapping().memfile {
            // Nothing to write back nor make durable.
            return Poll::Ready(file.report_sync(Ok(())));
        }
        let all = this.all;
        let w = this.wait.get_or_insert_with(|| Jobs::sync(file, all));
        let r = ready!(w.poll(cx));
        this.wait = None;
        Poll::Ready(file.report_sync(r))
    }
}

impl Future for SetLen<'_> {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.wait.is_none() {
            this.file.check_set_len(this.size)?;
            let size = this.size;
            this.wait = Some(job::run(this.file, move |f| {
                crate::truncate::truncate_to(f.mapping(), size)
            }));
        }
        let w = this.wait.as_mut().expect("set above");
        let r = ready!(w.poll(cx));
        this.wait = None;
        Poll::Ready(r)
    }
}

impl fmt::Debug for WriteAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt("WriteAt", f)
    }
}

impl fmt::Debug for WriteAllAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt("WriteAllAt", f)
    }
}

impl fmt::Debug for SyncAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncAt")
            .field("all", &self.all)
            .field("waiting", &self.wait.is_some())
            .finish()
    }
}

impl fmt::Debug for SetLen<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetLen")
            .field("size", &self.size)
            .field("waiting", &self.wait.is_some())
            .finish()
    }
}
