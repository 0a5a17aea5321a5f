//! The io_uring engine: one ring, submissions under a mutex, one completion
//! thread. All of the crate's io_uring code, and its `unsafe`, is here and
//! in `caller.rs` (the callers' own rings of `write_all`).
//!
//! ```text
//!  submitters ──lock sq──> push one SQE per op, a read or a write
//!                          (user_data = Box<InFlight> pointer)
//!                          └─> ONE io_uring_enter(to_submit = n) ──> kernel
//!                                                                      │ CQEs
//!  completion thread <── io_uring_enter(GETEVENTS, min 1) <────────────┘
//!    reap every CQE: Box::from_raw(user_data)
//!      res < 0  ──> EAGAIN/EINTR/ECANCELED: resubmit (bounded); else Err(errno)
//!      read: res == 0 or ends inside a block ──> EOF: zero the rest, Ok(count)
//!      write: res == 0 ──> Err(WriteZero)
//!      short (a read: whole blocks) ──> resubmit the rest (same slot)
//!    lock sq: free the slots, push resubmits and backlog, one enter, wake waiters
//!    then, unlocked: after_raw_io, callback (caught if it panics)
//! ```
//!
//! # Invariants
//! - The submission queue is touched only with the `sq` mutex held, and
//!   whoever holds it leaves every entry it pushed consumed by the kernel
//!   (or the ring broken): outside the mutex the SQ is empty.
//! - `in_flight` counts the ops whose entry is in the SQ or in the kernel;
//!   it never exceeds `depth` <= SQ entries, and the CQ has twice as many
//!   entries, so neither queue can overflow (the shutdown NOP fits too).
//! - Each pushed entry's `user_data` is a `Box<InFlight>` turned into a raw
//!   pointer, owned by the kernel until its one CQE is reaped (no multishot
//!   ops), which turns it back into a box. The box owns the op, so the op's
//!   buffers and the iovec array the entry points at stay valid until then,
//!   and its `Arc<File>` (the backing's [`raw_file`](crate::Backing::raw_file))
//!   keeps the descriptor the entry names open.
//! - If `io_uring_enter` fails for good, the entries it did not take are
//!   reclaimed (the kernel never saw them) and the ring is marked broken:
//!   nothing is submitted through it again (those stale entries are still
//!   past the SQ head), and every op that would have been goes to the pool.
//!   The completion thread still reaps what is in flight.
//! - The completion thread exits only when the engine is closing and no op
//!   is in flight or waiting, so the ring (and the memory the kernel
//!   writes) is never torn down under an IO.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::mem;
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::Duration;

use io_uring::{opcode, squeue, types, EnterFlags, IoUring, Probe};

use super::pool::Pool;
use super::{mark_engine_thread, Op, Stats};
use crate::sync::{bump, lock, wait, Condvar, Mutex};
use crate::sys::{locate, IOV_MAX};
use crate::{ThreadStart, BLOCK};

/// `user_data` of the NOP that wakes the completion thread at shutdown
/// (never a box pointer, which is non-null).
const WAKE: u64 = 0;

/// The most bytes one `IORING_OP_READ` or `IORING_OP_WRITE` asks for (its
/// length is a `u32`); the rest of a longer buffer goes in a resubmission.
const MAX_READ: usize = 1 << 30;

/// How often one op is retried after `EAGAIN`, `EINTR` or `ECANCELED`
/// before the error is reported.
const MAX_RETRIES: u32 = 16;

/// How often `io_uring_enter` is tried on a transient error (`EINTR`,
/// `EAGAIN`, `EBUSY`), 100 us apart, before the ring is given up.
pub(super) const SUBMIT_TRIES: u32 = 10_000;

/// The longest the completion thread sleeps in one wait, so that it looks
/// at the engine's state now and then even if no completion comes.
const WAIT_TIMEOUT: Duration = Duration::from_secs(1);

/// The io_uring engine: the ring and its completion thread. Dropping it
/// completes every op in flight and joins the thread.
pub(super) struct Uring {
    ring: Arc<Ring>,
    thread: Option<JoinHandle<()>>,
}

struct Ring {
    ring: IoUring,
    /// The most ops in flight.
    depth: u32,
    /// Whether `IORING_OP_READ` is there (for one-buffer reads).
    has_read: bool,
    /// Whether `IORING_OP_WRITEV` is there (else writes go to the pool).
    has_writev: bool,
    /// Whether `IORING_OP_WRITE` is there (for one-buffer writes).
    has_write: bool,
    /// Whether `io_uring_enter` takes a timeout (`IORING_FEAT_EXT_ARG`).
    ext_arg: bool,
    sq: Mutex<SqState>,
    /// Signalled when slots free up or the ring breaks, for submitters
    /// waiting for room.
    room: Condvar,
    stats: Arc<Stats>,
    /// Where ops go when the ring breaks.
    pool: Arc<Pool>,
    /// The completion thread, to recognise submissions from callbacks.
    thread: OnceLock<ThreadId>,
    /// Test hook: `io_uring_enter` for submission fails with this errno.
    #[cfg(test)]
    fail_submit: std::sync::atomic::AtomicI32,
}

/// What the `sq` mutex protects, besides the submission queue itself.
#[derive(Default)]
struct SqState {
    /// Ops whose entry is in the SQ or in the kernel.
    in_flight: u32,
    /// `user_data` of the entries pushed but not yet taken by the kernel,
    /// oldest first (the kernel takes them in order).
    unconsumed: VecDeque<u64>,
    /// Ops submitted from the completion thread (by callbacks) that found
    /// no room: pushed as slots free up.
    backlog: VecDeque<(Op, Arc<File>)>,
    /// Ops for the pool, handed over once the mutex is released.
    reroute: Vec<Op>,
    /// Submitters waiting on `room`.
    waiting: u32,
    /// The engine is being dropped.
    closing: bool,
    /// `io_uring_enter` failed for good: submit nothing more.
    broken: bool,
}

/// An op in the kernel's hands: the box behind an entry's `user_data`.
pub(super) struct InFlight {
    pub(super) op: Op,
    /// The file the entry reads or writes: its descriptor stays open while the box
    /// lives, which is until the entry's CQE is reaped.
    file: Arc<File>,
    /// The op's total length.
    total: usize,
    /// Bytes read or written so far (by earlier, short completions).
    done: usize,
    /// Retries after EAGAIN, EINTR or ECANCELED.
    retries: u32,
    /// The iovec array of a `READV` or `WRITEV` entry; the kernel reads it.
    /// `libc`'s type, because `io_uring`'s `Readv` takes a
    /// `*const libc::iovec` (the buffers are raw pointers of a submitted
    /// op, not `IoSliceMut` borrows).
    iov: Vec<libc::iovec>,
}

impl InFlight {
    pub(super) fn new(op: Op, file: Arc<File>) -> Box<InFlight> {
        // `uring_file` let only ops with a valid length through.
        let total = op.len().unwrap_or(0);
        Box::new(InFlight {
            op,
            file,
            total,
            done: 0,
            retries: 0,
            iov: Vec::new(),
        })
    }

    /// The entry that reads or writes the op's remaining bytes
    /// (`done < total`): `READ` / `WRITE` when they are in one buffer (and
    /// `one`, the ring has that opcode), else `READV` / `WRITEV` over at
    /// most [`IOV_MAX`] buffers (a resubmission does the rest).
    /// `user_data` is left for the caller.
    pub(super) fn entry(&mut self, one: bool) -> squeue::Entry {
        let offset = self.op.offset() + self.done as u64;
        let remaining = self.total - self.done;
        let op = &self.op;
        let n = op.nsegs();
        let (first, skip) = locate((0..n).map(|i| op.seg(i).1), self.done);
        let mut segs = (first..n)
            .map(|i| op.seg(i))
            .enumerate()
            .filter_map(|(i, (p, len))| {
                let s = if i == 0 { skip } else { 0 };
                (len > s).then(|| (p.wrapping_add(s), len - s))
            });
        let fd = types::Fd(self.file.as_raw_fd());
        let head = segs.next().unwrap_or((std::ptr::null_mut(), 0));
        let write = self.op.is_write();
        if one && head.1 == remaining {
            let len = remaining.min(MAX_READ) as u32;
            return if write {
                opcode::Write::new(fd, head.0.cast_const(), len)
                    .offset(offset)
                    .build()
            } else {
                opcode::Read::new(fd, head.0, len).offset(offset).build()
            };
        }
        self.iov.clear();
        self.iov.extend(
            std::iter::once(head)
                .chain(segs)
                .take(IOV_MAX)
                .map(|(p, l)| libc::iovec {
                    iov_base: p.cast(),
                    iov_len: l,
                }),
        );
        let n = self.iov.len() as u32;
        if write {
            opcode::Writev::new(fd, self.iov.as_ptr(), n)
                .offset(offset)
                .build()
        } else {
            opcode::Readv::new(fd, self.iov.as_ptr(), n)
                .offset(offset)
                .build()
        }
    }
}

/// What one CQE left of an op: finished with its result, or to be
/// submitted again for the rest.
pub(super) enum Settled {
    /// The op is done: every byte, a read's end of file, or an error.
    Done(Box<InFlight>, io::Result<usize>),
    /// The rest of a short read or write, or a retry after `EAGAIN`,
    /// `EINTR` or `ECANCELED` (at most [`MAX_RETRIES`]).
    Again(Box<InFlight>),
}

impl InFlight {
    /// Takes the result `res` of the op's entry (bytes, or `-errno`).
    pub(super) fn settle(mut self: Box<Self>, res: i32) -> Settled {
        if res < 0 {
            let errno = -res;
            let transient = matches!(errno, libc::EAGAIN | libc::EINTR | libc::ECANCELED);
            if transient && self.retries < MAX_RETRIES {
                self.retries += 1;
                return Settled::Again(self);
            }
            return Settled::Done(self, Err(io::Error::from_raw_os_error(errno)));
        }
        let n = res as usize;
        self.done += n;
        if self.done >= self.total {
            let total = self.total;
            Settled::Done(self, Ok(total))
        } else if self.op.is_write() {
            if n == 0 {
                let e = io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!(
                        "the kernel wrote 0 bytes at offset {}",
                        self.op.offset() + self.done as u64
                    ),
                );
                Settled::Done(self, Err(e))
            } else {
                // A direct write that stopped inside a block cannot go
                // on from there: the rest fails with EINVAL.
                Settled::Again(self)
            }
        } else if n == 0 || !self.done.is_multiple_of(BLOCK) {
            // End of file (a read ends inside a block only there, and a
            // direct read cannot go on from an unaligned offset).
            let done = self.done;
            self.op.zero_from(done);
            Settled::Done(self, Ok(done))
        } else {
            Settled::Again(self)
        }
    }
}

/// Sets up a ring of `depth` entries, with `IORING_SETUP_SUBMIT_ALL`
/// (5.18+: an entry that fails at submission does not stop the ones after
/// it) where the kernel has it.
pub(super) fn setup(depth: u32) -> io::Result<IoUring> {
    placed(match IoUring::builder().setup_submit_all().build(depth) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder().build(depth),
        r => r,
    }?)
}

/// `ring` with its descriptor above the process's floor
/// ([`crate::place_descriptor`]): mapped again through a duplicate made
/// there, the first descriptor closed. As it is where there is no floor,
/// or no free number above it.
pub(super) fn placed(ring: IoUring) -> io::Result<IoUring> {
    let floor = crate::descriptor_floor();
    if floor == 0 || ring.as_raw_fd() >= floor {
        return Ok(ring);
    }
    let params = ring.params().clone();
    // SAFETY: the ring's own descriptor, open while `ring` lives, borrowed
    // for the duplication only.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(ring.as_raw_fd()) };
    let Ok(fd) = rustix::io::fcntl_dupfd_cloexec(borrowed, floor) else {
        return Ok(ring);
    };
    drop(ring);
    // SAFETY: `fd` is a descriptor of the ring (the duplicate keeps it
    // alive), owned here and given to the new `IoUring`; `params` are
    // those the kernel filled in when the ring was set up.
    unsafe { IoUring::from_fd(std::os::fd::IntoRawFd::into_raw_fd(fd), params) }
}

impl Uring {
    /// Sets up the ring, checks for `IORING_OP_READV` and starts the
    /// completion thread, which runs `on_start` first.
    ///
    /// # Errors
    /// `io_uring_setup`'s error (`ENOSYS`, `EPERM`, `ENOMEM`, ...),
    /// `Unsupported` without READV, or the thread spawn's error.
    pub(super) fn new(
        depth: u32,
        stats: Arc<Stats>,
        pool: Arc<Pool>,
        on_start: &ThreadStart,
    ) -> io::Result<Uring> {
        let ring = setup(depth)?;
        let mut probe = Probe::new();
        let (has_read, has_writev, has_write) = match ring.submitter().register_probe(&mut probe) {
            Ok(()) if !probe.is_supported(opcode::Readv::CODE) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "this kernel's io_uring does not support IORING_OP_READV",
                ))
            }
            Ok(()) => (
                probe.is_supported(opcode::Read::CODE),
                probe.is_supported(opcode::Writev::CODE),
                probe.is_supported(opcode::Write::CODE),
            ),
            // Kernels before 5.6 cannot be probed; they have READV and
            // WRITEV (5.1).
            Err(_) => (false, true, false),
        };
        let ext_arg = ring.params().is_feature_ext_arg();
        let ring = Arc::new(Ring {
            ring,
            depth,
            has_read,
            has_writev,
            has_write,
            ext_arg,
            sq: Mutex::new(SqState::default()),
            room: Condvar::new(),
            stats,
            pool,
            thread: OnceLock::new(),
            #[cfg(test)]
            fail_submit: std::sync::atomic::AtomicI32::new(0),
        });
        let r = ring.clone();
        let thread = on_start.spawn("aio-uring".to_string(), move || r.completion_loop())?;
        let _ = ring.thread.set(thread.thread().id());
        Ok(Uring {
            ring,
            thread: Some(thread),
        })
    }

    /// Submits `ops` (each with its backing's file); see [`Ring::submit`].
    pub(super) fn submit(&self, ops: Vec<(Op, Arc<File>)>) {
        self.ring.submit(ops);
    }

    /// Whether the ring takes writes (`IORING_OP_WRITEV`).
    pub(super) fn writes(&self) -> bool {
        self.ring.has_writev
    }

    /// Whether the kernel has `IORING_OP_WRITE` (for one-buffer writes).
    pub(super) fn has_write(&self) -> bool {
        self.ring.has_write
    }

    /// Test hook: makes every later `io_uring_enter` for submission fail
    /// with `errno` (0: stop).
    #[cfg(test)]
    fn fail_submits(&self, errno: i32) {
        use std::sync::atomic::Ordering;
        self.ring.fail_submit.store(errno, Ordering::Relaxed);
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        let r = &*self.ring;
        let reroute = {
            let mut st = lock(&r.sq);
            st.closing = true;
            if !st.broken {
                let nop = opcode::Nop::new().build().user_data(WAKE);
                // SAFETY: the `sq` mutex is held, so no other
                // SubmissionQueue of this ring exists; a NOP points at no
                // memory.
                if unsafe { r.ring.submission_shared().push(&nop) }.is_ok() {
                    st.unconsumed.push_back(WAKE);
                    r.flush(&mut st);
                }
            }
            mem::take(&mut st.reroute)
        };
        r.pool.submit(reroute);
        if let Some(t) = self.thread.take() {
            // Dropped from a callback on the completion thread: it drains
            // the ring and exits by itself.
            if t.thread().id() != thread::current().id() && t.join().is_err() {
                log::error!("aio: the io_uring completion thread panicked outside a callback");
            }
        }
    }
}

impl Ring {
    fn on_completion_thread(&self) -> bool {
        self.thread.get() == Some(&thread::current().id())
    }

    /// Pushes every op, then submits them with one `io_uring_enter`; when
    /// the ring is full, submits what is pushed and waits for room (or, on
    /// the completion thread, leaves the rest in the backlog).
    fn submit(&self, ops: Vec<(Op, Arc<File>)>) {
        let own = self.on_completion_thread();
        let mut pending = ops.into_iter().peekable();
        let mut st = lock(&self.sq);
        loop {
            if st.broken {
                st.reroute.extend(pending.map(|(op, _)| op));
                break;
            }
            while st.in_flight < self.depth {
                let Some((op, file)) = pending.next() else {
                    break;
                };
                st.in_flight += 1;
                self.push(&mut st, InFlight::new(op, file));
            }
            self.flush(&mut st);
            if st.broken {
                continue;
            }
            if pending.peek().is_none() {
                break;
            }
            if own {
                st.backlog.extend(pending);
                break;
            }
            st.waiting += 1;
            st = wait(&self.room, st);
            st.waiting -= 1;
        }
        let reroute = mem::take(&mut st.reroute);
        drop(st);
        self.pool.submit(reroute);
    }

    /// Pushes the entry for `f`'s remaining bytes (its slot already
    /// counted in `in_flight`), or hands the op to the pool if the ring is
    /// broken.
    fn push(&self, st: &mut SqState, f: Box<InFlight>) {
        if st.broken {
            st.in_flight -= 1;
            st.reroute.push(f.op);
            return;
        }
        let mut f = f;
        let one = if f.op.is_write() {
            self.has_write
        } else {
            self.has_read
        };
        let entry = f.entry(one);
        let ud = Box::into_raw(f) as u64;
        let entry = entry.user_data(ud);
        // SAFETY: the `sq` mutex is held (`st` is borrowed from its guard),
        // so no other SubmissionQueue of this ring exists. The entry points
        // at the op's buffers (a read's: valid and ours until the callback,
        // by `RawBuf::new`'s contract; a write's: borrowed, unwritten, by
        // the `write_all` call that waits for the op's callback or drop)
        // and at the iovec array in the box
        // behind `ud`, and names the descriptor of the box's `Arc<File>`;
        // the box is reclaimed only when the entry's CQE is reaped, or by
        // `fail_ring` if the kernel never took the entry, so all of it
        // (the descriptor open) outlives the operation.
        let mut pushed = unsafe { self.ring.submission_shared().push(&entry) }.is_ok();
        if !pushed {
            // Not expected (`in_flight <= depth` keeps room); make room.
            self.flush(st);
            if !st.broken {
                // SAFETY: as above.
                pushed = unsafe { self.ring.submission_shared().push(&entry) }.is_ok();
            }
        }
        if pushed {
            st.unconsumed.push_back(ud);
        } else {
            // SAFETY: `ud` came from `Box::into_raw` above and the entry
            // carrying it was never pushed, so this is its only owner.
            let f = unsafe { Box::from_raw(ud as *mut InFlight) };
            st.in_flight -= 1;
            st.reroute.push(f.op);
        }
    }

    /// `io_uring_enter` until the kernel took every pushed entry; retries
    /// transient errors, and on any other error gives up the ring
    /// ([`fail_ring`](Self::fail_ring)).
    fn flush(&self, st: &mut SqState) {
        let mut tries = 0;
        while !st.unconsumed.is_empty() && !st.broken {
            match self.enter_submit() {
                Ok(n) if n > 0 => {
                    bump(&self.stats.enters, 1);
                    let n = n.min(st.unconsumed.len());
                    st.unconsumed.drain(..n);
                    tries = 0;
                }
                Ok(_) => {
                    tries += 1;
                    if tries >= SUBMIT_TRIES {
                        self.fail_ring(st, &io::Error::other("the kernel takes no entries"));
                    }
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) && tries < SUBMIT_TRIES =>
                {
                    tries += 1;
                    thread::sleep(Duration::from_micros(100));
                }
                Err(e) => self.fail_ring(st, &e),
            }
        }
    }

    /// One `io_uring_enter` submitting what the SQ holds.
    fn enter_submit(&self) -> io::Result<usize> {
        #[cfg(test)]
        {
            let errno = self.fail_submit.load(std::sync::atomic::Ordering::Relaxed);
            if errno != 0 {
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
        self.ring.submitter().submit()
    }

    /// Gives up the ring after `io_uring_enter` failed with `e`: reclaims
    /// the entries the kernel did not take and hands their ops to the pool;
    /// nothing is submitted through the ring again.
    fn fail_ring(&self, st: &mut SqState, e: &io::Error) {
        log::error!(
            "aio: io_uring_enter failed ({e}); the ring is given up: the {} ops it did \
             not take, and every later one, run on the thread pool",
            st.unconsumed.iter().filter(|&&ud| ud != WAKE).count()
        );
        st.broken = true;
        for ud in mem::take(&mut st.unconsumed) {
            if ud == WAKE {
                continue;
            }
            // SAFETY: `ud` came from `Box::into_raw` in `push`, and the
            // kernel never took its entry (it takes entries in order, and
            // `unconsumed` holds exactly those past the ones it took), so
            // no CQE will carry it: this is its only reclaim. The ring is
            // marked broken, so the entry is never submitted later either.
            let f = unsafe { Box::from_raw(ud as *mut InFlight) };
            st.in_flight -= 1;
            st.reroute.push(f.op);
        }
        let backlog: Vec<Op> = st.backlog.drain(..).map(|(op, _)| op).collect();
        st.reroute.extend(backlog);
        self.room.notify_all();
    }

    /// The completion thread: reaps CQEs and completes ops until the engine
    /// closes with nothing in flight.
    fn completion_loop(&self) {
        mark_engine_thread();
        let mut cqes: Vec<(u64, i32)> = Vec::new();
        let mut wait_failed = false;
        loop {
            cqes.clear();
            {
                // SAFETY: only this thread ever takes the completion queue.
                let cq = unsafe { self.ring.completion_shared() };
                cqes.extend(cq.map(|e| (e.user_data(), e.result())));
            }
            if !cqes.is_empty() {
                self.reap(&cqes);
                continue;
            }
            let broken = {
                let st = lock(&self.sq);
                if st.closing && st.in_flight == 0 && st.backlog.is_empty() {
                    return;
                }
                st.broken
            };
            self.wait_cqe(broken, &mut wait_failed);
        }
    }

    /// Sleeps until a CQE comes (at most [`WAIT_TIMEOUT`]); polls when the
    /// ring is broken, where no shutdown NOP can wake it.
    fn wait_cqe(&self, broken: bool, failed: &mut bool) {
        if broken {
            thread::sleep(Duration::from_millis(1));
            return;
        }
        let getevents = EnterFlags::GETEVENTS.bits();
        let res = if self.ext_arg {
            let ts = types::Timespec::from(WAIT_TIMEOUT);
            let args = types::SubmitArgs::new().timespec(&ts);
            // SAFETY: `to_submit` is 0, so this submits nothing (the SQ
            // belongs to whoever holds the `sq` mutex). With EXT_ARG the
            // argument must be an `io_uring_getevents_arg`, which
            // `SubmitArgs` is (`repr(transparent)`), pointing at `ts`; both
            // live across the call.
            unsafe {
                self.ring.submitter().enter(
                    0,
                    1,
                    getevents | EnterFlags::EXT_ARG.bits(),
                    Some(&args),
                )
            }
        } else {
            // SAFETY: nothing submitted (as above), no argument.
            unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 1, getevents, None)
            }
        };
        match res {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                if !*failed {
                    log::error!(
                        "aio: waiting for io_uring completions failed ({e}); polling instead"
                    );
                    *failed = true;
                }
                thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Handles a batch of CQEs: finishes, resubmits or retries each op,
    /// frees the slots of the finished ones, pushes the resubmissions and
    /// the backlog with one `io_uring_enter`, and then, with no lock held,
    /// runs the callbacks.
    fn reap(&self, cqes: &[(u64, i32)]) {
        let mut finished: Vec<(Box<InFlight>, io::Result<usize>)> = Vec::new();
        let mut again: Vec<Box<InFlight>> = Vec::new();
        for &(ud, res) in cqes {
            if ud == WAKE {
                continue;
            }
            // SAFETY: every CQE but the WAKE NOP's carries the `user_data`
            // of one entry pushed by `push`, a pointer from `Box::into_raw`;
            // a read or write entry completes exactly once, and `fail_ring` only
            // reclaims entries the kernel never took, so this is the only
            // reclaim of this box.
            let f = unsafe { Box::from_raw(ud as *mut InFlight) };
            match f.settle(res) {
                Settled::Done(f, r) => finished.push((f, r)),
                Settled::Again(f) => again.push(f),
            }
        }
        bump(&self.stats.resubmits, again.len() as u64);
        let reroute = {
            let mut st = lock(&self.sq);
            st.in_flight -= finished.len() as u32;
            for f in again {
                self.push(&mut st, f);
            }
            while st.in_flight < self.depth && !st.broken {
                let Some((op, file)) = st.backlog.pop_front() else {
                    break;
                };
                st.in_flight += 1;
                self.push(&mut st, InFlight::new(op, file));
            }
            self.flush(&mut st);
            if st.waiting > 0 && !finished.is_empty() {
                self.room.notify_all();
            }
            mem::take(&mut st.reroute)
        };
        self.pool.submit(reroute);
        bump(&self.stats.uring_ops, finished.len() as u64);
        for (f, res) in finished {
            f.op.finish(res, &self.stats, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aio::{IoEngine, IoEngineConfig, ReadOp, WriteOp};
    use crate::buf::RawSrc;
    use crate::RawBuf;
    use crate::{AlignedBuf, Backing, FileBacking, FileOptions};
    use std::sync::mpsc;

    #[test]
    fn a_resubmission_reads_exactly_the_remaining_bytes() {
        let mut mem = AlignedBuf::zeroed(6 * BLOCK).unwrap();
        let base = mem.as_mut_ptr();
        let raw = |at: usize, len: usize| {
            // SAFETY: inside `mem`, which outlives the op; nothing is read
            // or written through these buffers (no entry is submitted).
            unsafe { RawBuf::new(base.wrapping_add(at), len) }.unwrap()
        };
        let bufs = vec![
            raw(0, 2 * BLOCK),
            raw(0, 0),
            raw(2 * BLOCK, BLOCK),
            raw(3 * BLOCK, 3 * BLOCK),
        ];
        let mem_backing: Arc<dyn Backing> = Arc::new(crate::MemBacking::new());
        let op = ReadOp::new(mem_backing, 8 * BLOCK as u64, bufs, |_| {});
        let null = Arc::new(std::fs::File::open("/dev/null").unwrap());
        let mut f = InFlight::new(Op::Read(op), null);
        assert_eq!(f.total, 6 * BLOCK);
        let iov = |f: &InFlight| {
            f.iov
                .iter()
                .map(|v| (v.iov_base as usize - base as usize, v.iov_len))
                .collect::<Vec<_>>()
        };
        let e = f.entry(true);
        assert_eq!(e.get_opcode(), u32::from(opcode::Readv::CODE));
        assert_eq!(
            iov(&f),
            vec![(0, 2 * BLOCK), (2 * BLOCK, BLOCK), (3 * BLOCK, 3 * BLOCK)]
        );
        // A short read of 1 block: the rest starts inside the first buffer.
        f.done = BLOCK;
        f.entry(true);
        assert_eq!(
            iov(&f),
            vec![(BLOCK, BLOCK), (2 * BLOCK, BLOCK), (3 * BLOCK, 3 * BLOCK)]
        );
        // Only the last buffer left: one READ, or READV without READ.
        f.done = 4 * BLOCK;
        let e = f.entry(true);
        assert_eq!(e.get_opcode(), u32::from(opcode::Read::CODE));
        let e = f.entry(false);
        assert_eq!(e.get_opcode(), u32::from(opcode::Readv::CODE));
        assert_eq!(iov(&f), vec![(4 * BLOCK, 2 * BLOCK)]);
    }

    #[test]
    fn a_write_entry_writes_the_remaining_bytes() {
        let mem = crate::AlignedBuf::zeroed(4 * BLOCK).unwrap();
        let segs: Vec<RawSrc> = [(0, 3 * BLOCK), (3 * BLOCK, BLOCK)]
            .iter()
            // SAFETY: `mem` outlives the op and is not written meanwhile.
            .map(|&(at, len)| unsafe {
                RawSrc::new(crate::IoBuf::new(&mem[at..at + len]).unwrap())
            })
            .collect();
        let op = Op::Write(WriteOp {
            backing: Arc::new(crate::MemBacking::new()),
            offset: 2 * BLOCK as u64,
            segs,
            done: Box::new(|_| {}),
        });
        let null = Arc::new(std::fs::File::open("/dev/null").unwrap());
        let mut f = InFlight::new(op, null);
        assert_eq!(f.total, 4 * BLOCK);
        let e = f.entry(true);
        assert_eq!(e.get_opcode(), u32::from(opcode::Writev::CODE));
        assert_eq!(f.iov.len(), 2);
        // After a short write of 3 blocks: the last buffer alone, as WRITE
        // where the ring has it.
        f.done = 3 * BLOCK;
        let e = f.entry(true);
        assert_eq!(e.get_opcode(), u32::from(opcode::Write::CODE));
        let e = f.entry(false);
        assert_eq!(e.get_opcode(), u32::from(opcode::Writev::CODE));
        assert_eq!(
            f.iov
                .iter()
                .map(|v| (v.iov_base as usize - mem.as_ptr() as usize, v.iov_len))
                .collect::<Vec<_>>(),
            vec![(3 * BLOCK, BLOCK)]
        );
    }

    #[test]
    fn a_broken_ring_hands_its_reads_to_the_pool() {
        let path =
            std::env::temp_dir().join(format!("backing-uring-broken-{}", std::process::id()));
        let file = FileBacking::open(
            &path,
            &FileOptions::new().write(true).create(true).truncate(true),
        )
        .unwrap();
        let mut data = AlignedBuf::zeroed(8 * BLOCK).unwrap();
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i / BLOCK) as u8 + 1;
        }
        file.write_blocks(&[data.io_buf()], 0).unwrap();
        let file: Arc<dyn Backing> = Arc::new(file);
        let engine = match IoEngine::new(IoEngineConfig::new().kind(crate::aio::EngineKind::Uring))
        {
            Ok(e) => e,
            Err(e) => {
                std::fs::remove_file(&path).unwrap();
                test_support::skip_or_fail(
                    "a_broken_ring_hands_its_reads_to_the_pool",
                    format_args!("io_uring missing: {e}"),
                );
                return;
            }
        };
        engine
            .inner
            .uring
            .as_ref()
            .unwrap()
            .fail_submits(libc::EFAULT);
        let mut mem = AlignedBuf::zeroed(8 * BLOCK).unwrap();
        let (tx, rx) = mpsc::channel();
        let ops = mem
            .chunks_mut(BLOCK)
            .enumerate()
            .map(|(i, c)| {
                // SAFETY: `mem` lives and is untouched until every callback
                // ran (the receives below).
                let buf = unsafe { RawBuf::new(c.as_mut_ptr(), c.len()) }.unwrap();
                let tx = tx.clone();
                ReadOp::new(file.clone(), (i * BLOCK) as u64, vec![buf], move |r| {
                    tx.send(r.map_err(|e| e.to_string())).unwrap()
                })
            })
            .collect();
        engine.submit(ops);
        for _ in 0..8 {
            assert_eq!(rx.recv().unwrap(), Ok(BLOCK));
        }
        assert_eq!(&mem[..], &data[..]);
        let s = engine.stats();
        assert_eq!((s.pool_ops, s.uring_ops, s.enters), (8, 0, 0));
        // Later batches go to the pool directly.
        let c = &mut mem[..BLOCK];
        // SAFETY: as above.
        let buf = unsafe { RawBuf::new(c.as_mut_ptr(), c.len()) }.unwrap();
        engine.submit(vec![ReadOp::new(file.clone(), 0, vec![buf], move |r| {
            tx.send(r.map_err(|e| e.to_string())).unwrap()
        })]);
        assert_eq!(rx.recv().unwrap(), Ok(BLOCK));
        drop(engine);
        std::fs::remove_file(&path).unwrap();
    }
}
