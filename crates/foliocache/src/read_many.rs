//! Batched reads from one thread: [`File::read_many`] starts the IO of
//! every miss of a batch of requests at once, through the cache's IO
//! engine, then completes the requests. [`ReadQueue`] does the same for
//! a stream of reads: each starts its IO when it is queued and completes
//! when it is taken, oldest first, so a thread that queues one read per
//! read it takes keeps a constant number in flight instead of letting the
//! device's queue drain at the end of every batch.
//!
//! # How
//! 1. **Start the misses.** With the file's `invalidate_lock` held shared
//!    (no folio is read from blocks being truncated), every page of every
//!    request that holds no folio gets one: allocated without waiting for
//!    memory, inserted locked and not uptodate (`Mapping::add_folio`), as a
//!    readahead window's folios are. The folios of all requests, sorted by
//!    index, go to the IO engine in one submission (one read per run of
//!    contiguous folios: adjacent requests share a read), and this thread
//!    goes on without waiting (`Mapping::submit_runs`).
//! 2. **Complete the requests**, in order, each as `read_at` reads it: a
//!    hit is copied out at once; a folio whose read is in flight is locked
//!    while it is read, so the request waits on its lock, which the
//!    engine's completion lets go once the folio is uptodate. By the time
//!    the first miss is waited for, every miss of the batch is in the
//!    device queue.
//!
//! # Guarantees
//! - No double IO: a folio is read once, by whoever inserted it. Another
//!   thread's reader (a `read_at`, another `read_many`) that wants it finds
//!   it locked in the index and waits for it, as for readahead.
//! - Errors are per request. A failed read removes its folios from the
//!   mapping (as a failed readahead run does); a request that needs one of
//!   them reads it again itself, on its own, and gets the error if that
//!   fails too. Requests that do not need it are not touched.
//! - Each request's result is what `read_at` returns for it: short only at
//!   end of file, `Ok(0)` at or past it, an error only if no byte was read.
//!   Requests may overlap and come in any order.
//! - When memory is short, the folios that cannot be had without waiting
//!   are not created: those requests then read as `read_at` does (waiting
//!   for memory, reading on this thread).
//!
//! A [`ReadQueue`] gives the same guarantees, read by read: it runs step 1
//! for a read when it is queued ([`ReadQueue::push`]) and step 2 when it
//! is taken ([`ReadQueue::pop`]). A read queued and never taken leaves its
//! folios in the cache once their IO completes, as readahead does.
//!
//! The design section "Batched reads" of `docs/design.md` draws this.

use std::collections::VecDeque;
use std::io;

use crate::arena::PAGE;
use crate::file::File;
use crate::flags::ReadFlags;
use crate::readahead::{plan, Slot, Window};

/// One read of a batch given to [`File::read_many`]: `buf.len()` bytes at
/// `offset`, and the result once the batch returns.
#[derive(Debug)]
pub struct ReadReq<'a> {
    /// The file offset to read at.
    pub offset: u64,
    /// Where the bytes go.
    pub buf: &'a mut [u8],
    /// `None` until [`File::read_many`] completes the request: then the
    /// bytes read (as [`File::read_at`] returns them) or the error.
    pub result: Option<io::Result<usize>>,
}

impl<'a> ReadReq<'a> {
    /// A request for `buf.len()` bytes at `offset`, not yet completed.
    pub fn new(offset: u64, buf: &'a mut [u8]) -> Self {
        ReadReq {
            offset,
            buf,
            result: None,
        }
    }
}

impl File {
    /// Reads every request of `reqs`, starting the IO of all their misses
    /// together: one submission to the cache's IO engine (io_uring where it
    /// works), so a thread with many reads to make (the leaves of a range
    /// scan, the blocks of a multi-get) keeps the device busy without a
    /// thread per read. Hits are copied out at once. Each request's
    /// `result` is set to what [`read_at`](Self::read_at) would return for
    /// it; errors are per request (a failed read fails only the requests
    /// that need its bytes). Requests may overlap. The file's default
    /// flags apply ([`set_default_flags`](Self::set_default_flags)); with
    /// `NOWAIT`, no IO is started and a request that misses gets
    /// `WouldBlock`.
    ///
    /// # Errors
    /// None today: every outcome is in the requests' `result`s. The
    /// `Result` leaves room for a submission that fails as a whole.
    pub fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> io::Result<()> {
        let flags = self.effective_flags(ReadFlags::NONE);
        let mut started = vec![false; reqs.len()];
        self.start_misses(
            reqs.iter().map(|r| (r.offset, r.buf.len())),
            flags,
            &mut started,
        );
        for (i, r) in reqs.iter_mut().enumerate() {
            let was_started = started[i];
            r.result = Some(self.read_counted(r.buf, r.offset, flags, was_started));
        }
        Ok(())
    }

    /// A queue of reads of this file, each started when queued and
    /// completed, oldest first, when taken: see [`ReadQueue`].
    pub fn read_queue(&self) -> ReadQueue<'_> {
        ReadQueue {
            file: self,
            flags: self.effective_flags(ReadFlags::NONE),
            queued: VecDeque::new(),
        }
    }

    /// Step 1 of [`read_many`](Self::read_many): inserts a locked folio for
    /// every page of the requests (`(offset, len)`) that holds none and
    /// submits their reads as one batch. Sets, per request, whether it
    /// started IO (a miss, counted here once) in `started` (as long as
    /// `reqs`, all false on entry): the caller's memory, so a queue's
    /// push allocates none for it.
    pub(crate) fn start_misses(
        &self,
        reqs: impl Iterator<Item = (u64, usize)>,
        flags: ReadFlags,
        started: &mut [bool],
    ) {
        let m = &*self.mapping;
        let size = self.len();
        if m.memfile || size == 0 || flags.contains(ReadFlags::NOWAIT) {
            return;
        }
        let dropbehind = flags.contains(ReadFlags::DONTCACHE);
        let last_page = (size - 1) / PAGE;
        let mut folios = Vec::new();
        // Held until the reads are submitted, as `run_window` holds it.
        let _inv = m.invalidate_lock.read();
        for ((offset, len), s) in reqs.zip(started.iter_mut()) {
            if offset >= size || len == 0 {
                continue;
            }
            let end = offset.saturating_add(len as u64).min(size);
            let before = folios.len();
            let mut p = offset / PAGE;
            let last = (end - 1) / PAGE;
            while p <= last {
                if let Some((first, n)) = m.span_at(p) {
                    p = first + n;
                    continue;
                }
                let mut q = p + 1;
                while q <= last && m.span_at(q).is_none() {
                    q += 1;
                }
                if q == p + 1 {
                    let slot = Slot {
                        index: p,
                        order: 0,
                        marker: false,
                        stream: false,
                    };
                    folios.extend(m.insert_one(slot, dropbehind));
                } else {
                    let win = Window {
                        start: p,
                        size: q - p,
                        async_size: 0,
                    };
                    let max_order = m.inner().io.max_order;
                    let mut order = max_order;
                    let slots = plan(&win, &mut order, max_order, last_page);
                    folios.extend(m.insert_batched(&slots, dropbehind));
                }
                p = q;
            }
            if folios.len() > before {
                *s = true;
                m.inner().stats.misses.add(1);
            }
        }
        folios.sort_unstable_by_key(|f| f.index());
        self.mapping.read_window(&self.ra, folios, false);
    }
}

/// Reads of one [`File`] in a pipeline, from one thread: [`push`] starts
/// a read's IO (its misses go to the cache's IO engine at once, as
/// [`File::read_many`]'s do) and returns; [`pop`] completes the oldest
/// queued read into a buffer, waiting for its IO if it is still in
/// flight. A thread that pushes one read for every read it pops keeps as
/// many in flight as it queued at first, the way an application keeps an
/// io_uring's queue full, while every read still goes through the cache
/// (a hit is a copy; a page two reads want is read once).
///
/// The file's default flags when the queue was made apply to every read
/// ([`File::set_default_flags`]); with `NOWAIT` no IO is started and a
/// read that misses completes with `WouldBlock`.
///
/// [`push`]: ReadQueue::push
/// [`pop`]: ReadQueue::pop
pub struct ReadQueue<'f> {
    file: &'f File,
    flags: ReadFlags,
    queued: VecDeque<Queued>,
}

/// A read in a [`ReadQueue`], started but not taken.
struct Queued {
    offset: u64,
    len: usize,
    started: bool,
}

/// A read taken from a [`ReadQueue`].
#[derive(Debug)]
pub struct Completed {
    /// The offset it was queued at.
    pub offset: u64,
    /// The bytes read into the buffer given to [`ReadQueue::pop`] (what
    /// [`File::read_at`] returns: short only at end of file), or the
    /// error.
    pub result: io::Result<usize>,
}

impl ReadQueue<'_> {
    /// Queues a read of `len` bytes at `offset` and starts the IO of its
    /// pages that are not cached, without waiting for it.
    pub fn push(&mut self, offset: u64, len: usize) {
        let mut started = [false];
        self.file
            .start_misses(std::iter::once((offset, len)), self.flags, &mut started);
        let started = started[0];
        self.queued.push_back(Queued {
            offset,
            len,
            started,
        });
    }

    /// Completes the oldest queued read into `buf` (its first `len`
    /// bytes, `len` as queued), waiting for its IO if need be; `None` when
    /// nothing is queued.
    ///
    /// # Errors
    /// In [`Completed::result`]: the read's own error, as
    /// [`File::read_at`] gives it, or `InvalidInput` if `buf` is shorter
    /// than the read (the read then stays queued).
    pub fn pop(&mut self, buf: &mut [u8]) -> Option<Completed> {
        let q = self.queued.front()?;
        let Some(dst) = buf.get_mut(..q.len) else {
            return Some(Completed {
                offset: q.offset,
                result: Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "ReadQueue::pop: a buffer of {} bytes for a read of {} queued at \
                         offset {}",
                        buf.len(),
                        q.len,
                        q.offset
                    ),
                )),
            });
        };
        let q = self.queued.pop_front()?;
        Some(Completed {
            offset: q.offset,
            result: self.file.read_counted(dst, q.offset, self.flags, q.started),
        })
    }

    /// The reads queued and not yet taken.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }
}
