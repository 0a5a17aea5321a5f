//! The read futures: [`File::read_at_async`] and
//! [`File::read_exact_at_async`] (module documentation: `future/mod.rs`).

use std::fmt;
use std::future::Future;
use std::io;
use std::ops::DerefMut;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use super::job::{Jobs, Wait};
use crate::arena::PAGE;
use crate::file::File;
use crate::filemap::pin::Pinned;
use crate::filemap::{FgpFlags, FolioFlags};
use crate::flags::ReadFlags;
use crate::folio::{Folio, WaitUnlocked};
use crate::sync::Ordering;

/// Lookups after a miss that found the folio neither in flight nor
/// readable (freed, or unlocked but not uptodate, between two looks)
/// before the read is finished as the blocking read finishes it.
const MAX_RETRIES: u32 = 4;

/// Waits for the cache's memory job (`Jobs::memory`) one read may make
/// before it reads the rest as the blocking read does: each ends with
/// room made, which other tasks may take first; a read that keeps losing
/// it waits in the blocking allocation instead, bounded as that one is.
pub(super) const MAX_MEMORY_WAITS: u32 = 64;

/// The async forms of the reads.
impl File {
    /// Reads up to `buf.len()` bytes at `offset`, as
    /// [`read_at`](Self::read_at) does (short only at end of file, 0 at or
    /// past it), without blocking the thread for a miss: see
    /// [`future`](crate::future). A hit inside one folio completes on the
    /// first poll with no allocation, system call or waker.
    ///
    /// Dropped before it completes, the future leaves nothing of the read
    /// in the caller's buffer afterwards: the IO it started completes into
    /// the cache. Bytes it copied before the drop stay in the buffer.
    ///
    /// ```
    /// # let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// # let file = cache.memfile("f", 4096)?;
    /// file.write_at(b"hello", 0)?;
    /// let mut buf = [0u8; 5];
    /// let n = pollster::block_on(file.read_at_async(&mut buf, 0))?;
    /// assert_eq!(&buf[..n], b"hello");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at). With [`ReadFlags::NOWAIT`] among the
    /// file's defaults, `WouldBlock` for a miss (no IO is started).
    pub fn read_at_async<'a>(&'a self, buf: &'a mut [u8], offset: u64) -> ReadAt<'a> {
        self.read_at_flags_async(buf, offset, ReadFlags::NONE)
    }

    /// [`read_at_async`](Self::read_at_async) with per-read [`ReadFlags`]
    /// (added to the file's defaults), as
    /// [`read_at_flags`](Self::read_at_flags).
    ///
    /// # Errors
    /// As [`read_at_async`](Self::read_at_async); with `NOWAIT`,
    /// `WouldBlock` when the first byte is not cached.
    pub fn read_at_flags_async<'a>(
        &'a self,
        buf: &'a mut [u8],
        offset: u64,
        flags: ReadFlags,
    ) -> ReadAt<'a> {
        ReadAt(ReadState::new(self, buf, offset, flags))
    }

    /// Reads exactly `buf.len()` bytes at `offset`, as
    /// [`read_exact_at`](Self::read_exact_at) does, without blocking the
    /// thread for a miss. Dropped before it completes, some prefix of the
    /// buffer may hold the file's bytes; nothing is written after the drop.
    ///
    /// # Errors
    /// `UnexpectedEof` if the file ends first; else as
    /// [`read_at_async`](Self::read_at_async).
    pub fn read_exact_at_async<'a>(&'a self, buf: &'a mut [u8], offset: u64) -> ReadExactAt<'a> {
        ReadExactAt(ReadState::new(self, buf, offset, ReadFlags::NONE))
    }
}

/// The future of [`File::read_at_async`]: the bytes read.
#[must_use = "futures do nothing unless polled"]
pub struct ReadAt<'a>(ReadState<'a, &'a mut [u8]>);

/// The future of [`File::read_exact_at_async`].
#[must_use = "futures do nothing unless polled"]
pub struct ReadExactAt<'a>(ReadState<'a, &'a mut [u8]>);

/// The async form of [`File::pin`].
impl File {
    /// Borrows the file's bytes `offset..offset + len` (fewer at end of
    /// file, none at or past it) as [`pin`](File::pin) does, without
    /// blocking the thread for a miss: a range cached in one folio is
    /// pinned on the first poll (no allocation, no waker); otherwise the
    /// bytes are read as [`read_at_async`](File::read_at_async) reads them
    /// into a buffer of the future's, then pinned in place if they lie in
    /// one folio by then, else handed over in that buffer.
    ///
    /// Dropped before it completes, the future frees its buffer; the IO it
    /// started completes into the cache. No pin outlives the future
    /// unless it completed and handed the pin over.
    ///
    /// # Errors
    /// As [`pin`](File::pin), when no byte could be read.
    pub fn pin_async(&self, offset: u64, len: usize) -> PinAt<'_> {
        PinAt {
            file: self,
            offset,
            len,
            read: None,
        }
    }
}

/// The future of [`File::pin_async`].
#[must_use = "futures do nothing unless polled"]
pub struct PinAt<'a> {
    file: &'a File,
    offset: u64,
    len: usize,
    /// The read into the future's buffer, once the first poll missed.
    read: Option<ReadState<'a, Vec<u8>>>,
}

impl<'a> Future for PinAt<'a> {
    type Output = io::Result<Pinned<'a>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let file = this.file;
        let cached = !file
            .effective_flags(ReadFlags::NONE)
            .contains(ReadFlags::DONTCACHE);
        let read = match &mut this.read {
            Some(r) => r,
            None => {
                let size = file.len();
                if this.offset >= size || this.len == 0 {
                    return Poll::Ready(Ok(Pinned::owned(Vec::new())));
                }
                let n =
                    (this.offset.saturating_add(this.len as u64).min(size) - this.offset) as usize;
                if cached {
                    if let Ok(p) = file.mapping.pin_cached(this.offset, n, true, true) {
                        return Poll::Ready(Ok(p));
                    }
                }
                this.read.insert(ReadState::new(
                    file,
                    vec![0u8; n],
                    this.offset,
                    ReadFlags::NONE,
                ))
            }
        };
        let done = ready!(read.poll_read(cx))?;
        let n = read.buf.len();
        if cached && done == n {
            if let Some(p) = file.mapping.pin_busy(this.offset, n) {
                return Poll::Ready(Ok(p));
            }
        }
        let mut v = std::mem::take(&mut read.buf);
        v.truncate(done);
        Poll::Ready(Ok(Pinned::owned(v)))
    }
}

impl fmt::Debug for PinAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.read {
            Some(r) => r.fmt("PinAt", f),
            None => f
                .debug_struct("PinAt")
                .field("offset", &self.offset)
                .field("len", &self.len)
                .finish(),
        }
    }
}

impl Future for ReadAt<'_> {
    type Output = io::Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_read(cx)
    }
}

impl Future for ReadExactAt<'_> {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let st = &mut self.get_mut().0;
        let n = ready!(st.poll_read(cx))?;
        Poll::Ready(if n < st.buf.len() {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "failed to fill whole buffer: end of file",
            ))
        } else {
            Ok(())
        })
    }
}

impl fmt::Debug for ReadAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt("ReadAt", f)
    }
}

impl fmt::Debug for ReadExactAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt("ReadExactAt", f)
    }
}

/// A read in progress: `buf[..done]` holds the file's bytes from `offset`.
/// The buffer is the caller's (`&mut [u8]`) or the future's own (a pin's
/// `Vec`).
pub(super) struct ReadState<'a, B> {
    file: &'a File,
    buf: B,
    offset: u64,
    /// The read's flags, the file's defaults added.
    flags: ReadFlags,
    done: usize,
    /// This read started IO for a miss (counted once, as a miss; its
    /// folios are not counted as hits).
    started: bool,
    /// Looks that found nothing to wait for (see [`MAX_RETRIES`]).
    retries: u32,
    /// The folio lock this read waits for.
    wait: Option<WaitUnlocked<'a>>,
    /// The cache's memory job this read waits for: no folio could be
    /// inserted without waiting for reclaim.
    memory: Option<Wait>,
    /// Memory jobs this read waited for (see [`MAX_MEMORY_WAITS`]); after
    /// one, a miss inserts only the page it needs.
    memory_waits: u32,
    /// Return what was copied rather than wait for more (an `AsyncRead`'s
    /// read: any bytes will do).
    short: bool,
    /// When this read first found a byte it needs not cached (a miss's
    /// latency starts there, as the blocking read's in
    /// `Mapping::get_pages`; a hit never reads the clock). Recorded in the
    /// cache's `miss_latency` when a read that started IO completes.
    since: Option<Instant>,
    /// Kept between polls without a borrow of the file (a tokio handle's
    /// read, `ReadProgress`): a wait for a folio's lock leaves the task's
    /// waker queued on it instead of holding a [`WaitUnlocked`].
    detached: bool,
}

/// What a read that returned `Pending` keeps for the next poll of a tokio
/// handle ([`Cursor`](super::Cursor), [`AsyncFile`](super::AsyncFile)),
/// which rebuilds the read around the buffer that poll brings: whether it
/// started IO (so the IO is not started again, its folios are not counted
/// as hits, and its latency is recorded at its end) and the cache's memory
/// job it waits for. No borrow: the handle may own its `File`. The folio
/// lock it waited on holds the task's waker until the unlock wakes it; the
/// next poll finds the folio's read still in flight (locked) and waits
/// again, or finds it done.
#[cfg(feature = "tokio")]
pub(super) struct ReadProgress {
    /// Where the read starts: the next poll resumes it only there.
    offset: u64,
    started: bool,
    retries: u32,
    memory: Option<Wait>,
    memory_waits: u32,
    since: Option<Instant>,
}

#[cfg(feature = "tokio")]
impl ReadProgress {
    /// Where the read starts.
    pub(super) fn offset(&self) -> u64 {
        self.offset
    }
}

/// What a miss leads to.
enum Miss<'a> {
    /// The folio is being read: wait for its lock.
    Wait(&'a Folio),
    /// Look again (the folio came in, or its IO was started).
    Again,
    /// Read the rest as the blocking read does.
    Block,
    /// No folio could be had without waiting for reclaim: await the
    /// cache's memory job.
    Memory,
}

impl<'a, B: DerefMut<Target = [u8]>> ReadState<'a, B> {
    /// A read of `buf` at `offset` kept between polls without a borrow
    /// (see [`ReadProgress`]), resuming `from` if it was a read at
    /// `offset`. `short`: complete with what was copied rather than wait
    /// for more.
    #[cfg(feature = "tokio")]
    pub(super) fn resume(
        from: Option<ReadProgress>,
        file: &'a File,
        buf: B,
        offset: u64,
        short: bool,
    ) -> Self {
        let mut st = ReadState::new(file, buf, offset, ReadFlags::NONE);
        if let Some(old) = from.filter(|p| p.offset == offset) {
            st.memory = old.memory;
            st.memory_waits = old.memory_waits;
            st.started = old.started;
            st.retries = old.retries;
            st.since = old.since;
        }
        st.short = short;
        st.detached = true;
        st
    }

    /// Gives up the file and the buffer, keeping the rest for
    /// [`resume`](Self::resume).
    #[cfg(feature = "tokio")]
    pub(super) fn park(self) -> ReadProgress {
        debug_assert!(self.wait.is_none(), "a detached read holds no folio wait");
        ReadProgress {
            offset: self.offset,
            started: self.started,
            retries: self.retries,
            memory: self.memory,
            memory_waits: self.memory_waits,
            since: self.since,
        }
    }

    pub(super) fn new(file: &'a File, buf: B, offset: u64, flags: ReadFlags) -> Self {
        ReadState {
            file,
            buf,
            offset,
            flags: file.effective_flags(flags),
            done: 0,
            started: false,
            retries: 0,
            wait: None,
            memory: None,
            memory_waits: 0,
            short: false,
            since: None,
            detached: false,
        }
    }

    /// Reads until the buffer is full or the file ends: the bytes read, or
    /// the error if none was. A read that started IO records its latency
    /// (from its first miss to now) as the blocking read does.
    pub(super) fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let r = ready!(self.poll_copy(cx));
        if self.started {
            if let Some(since) = self.since.take() {
                let stats = &self.file.mapping.inner().stats;
                stats.miss_latency.record(since.elapsed());
            }
        }
        Poll::Ready(r)
    }

    /// [`poll_read`](Self::poll_read) but for the latency.
    fn poll_copy(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            if let Some(w) = self.wait.as_mut() {
                ready!(Pin::new(w).poll(cx));
                self.wait = None;
            }
            if let Some(w) = self.memory.as_mut() {
                if ready!(w.poll(cx)).is_err() {
                    // The wait ran out (`OutOfMemory`): no more memory
                    // jobs; the read goes on as the blocking read would,
                    // which allocates (and fails) itself.
                    self.memory_waits = MAX_MEMORY_WAITS;
                }
                self.memory = None;
            }
            let pos = self.offset.saturating_add(self.done as u64);
            let rest = &mut self.buf[self.done..];
            if rest.is_empty() {
                return Poll::Ready(Ok(self.done));
            }
            let len = rest.len();
            let flags = self.flags | ReadFlags::NOWAIT;
            let r = match self.file.read_counted(rest, pos, flags, self.started) {
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        && !self.flags.contains(ReadFlags::NOWAIT) =>
                {
                    self.since.get_or_insert_with(Instant::now);
                    match self.miss(pos, len) {
                        Miss::Wait(_) if self.short && self.done > 0 => {
                            return Poll::Ready(Ok(self.done))
                        }
                        Miss::Wait(folio) if self.detached => {
                            // The waker stays queued until the unlock
                            // wakes it (nothing holds the folio for the
                            // next poll, which finds it again).
                            if folio.register_waker(cx.waker()) {
                                return Poll::Pending;
                            }
                            continue;
                        }
                        Miss::Wait(folio) => {
                            self.wait = Some(folio.wait_unlocked_async());
                            continue;
                        }
                        Miss::Again => continue,
                        Miss::Memory if self.short && self.done > 0 => {
                            return Poll::Ready(Ok(self.done))
                        }
                        Miss::Memory => {
                            self.memory_waits += 1;
                            self.memory = Some(Jobs::memory(self.file, 1));
                            continue;
                        }
                        Miss::Block => {
                            let rest = &mut self.buf[self.done..];
                            self.file.read_counted(rest, pos, self.flags, self.started)
                        }
                    }
                }
                r => r,
            };
            match r {
                Ok(0) => return Poll::Ready(Ok(self.done)),
                Ok(n) => self.done += n,
                Err(_) if self.done > 0 => return Poll::Ready(Ok(self.done)),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// The byte at `pos` is not readable without waiting: find its folio's
    /// read in flight, or start it (`len` bytes wanted from `pos`).
    fn miss(&mut self, pos: u64, len: usize) -> Miss<'a> {
        let file: &'a File = self.file;
        let m = &file.mapping;
        if let Ok(f) = m.get_folio(pos / PAGE, FgpFlags::empty()) {
            // (The reference goes here: the descriptor outlives the wait,
            // and an unlock wakes the waiter, a removal's included.)
            if f.is_locked() {
                return Miss::Wait(f.folio());
            }
            if f.test(FolioFlags::UPTODATE) && self.retry() {
                return Miss::Again;
            }
            return Miss::Block;
        }
        if self.started || !self.retry() {
            // Its read failed (a failed read removes its folios) or memory
            // is short: the blocking read reads it on this thread and
            // reports its error.
            return Miss::Block;
        }
        // A read that goes on where this handle's last read ended starts
        // the blocking read's synchronous readahead (a stream's window);
        // any other reads just its pages, as a queued read does. Many tasks
        // reading at random through one handle would otherwise look like
        // streams to readahead's look-back at what is cached, and read
        // windows nobody asked for.
        // After a wait for memory, only the page needed, in a folio of
        // one page: the room the memory job made is at least that.
        let short = self.memory_waits > 0;
        let sequential = !short && pos == file.ra.prev_pos.load(Ordering::Relaxed);
        let mut started = sequential && file.mapping.start_read(&file.ra, pos, len, self.flags);
        if !started {
            // Readahead made no folio for it, or the read is not a
            // stream's: one folio per page missing, as a queued read's.
            let mut s = [false];
            let len = if short { 1 } else { len };
            file.start_misses(std::iter::once((pos, len)), self.flags, &mut s);
            started = s[0];
        }
        self.started = started;
        if !started
            && m.span_at(pos / PAGE).is_none()
            && self.memory_waits < MAX_MEMORY_WAITS
            && !m.memfile
        {
            // Nothing inserted at `pos`, by this read or another: memory
            // so short that no folio could be had without waiting for
            // reclaim (`new_folio_nowait`). Where the blocking read would
            // wait in its allocation, the task awaits the cache's memory
            // job, then looks again.
            self.retries -= 1;
            return Miss::Memory;
        }
        Miss::Again
    }

    /// Counts a retry; false when they are spent.
    fn retry(&mut self) -> bool {
        self.retries += 1;
        self.retries <= MAX_RETRIES
    }

    fn fmt(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("offset", &self.offset)
            .field("len", &self.buf.len())
            .field("done", &self.done)
            .field("waiting", &(self.wait.is_some() || self.memory.is_some()))
            .finish()
    }
}
