//! Asynchronous, batched block reads: an [`IoEngine`] takes a batch of
//! [`ReadOp`]s, issues them together, and completes each one by calling its
//! callback from the engine's own thread. It also writes batches
//! ([`IoEngine::write_all`]: writeback's scattered pages), issued together
//! the same way, with the caller waiting for the last.
//!
//! # Why
//! Readahead reads a whole window of folios at once. Issued one `preadv` at
//! a time, the window costs one system call and one device round trip per
//! run of folios, and the reader waits for all of them. Issued as one
//! io_uring submission, the whole window is in the device queue after one
//! `io_uring_enter`, the reader goes on, and each folio becomes uptodate as
//! its read completes.
//!
//! # Two engines behind one type
//! ```text
//!  submit(batch) ──┬─ has raw_file ───> io_uring: every SQE of the batch pushed,
//!                  │                    ONE io_uring_enter ──kernel──> CQEs
//!                  │                    completion thread: reap, resubmit short
//!                  │                    reads, zero past EOF, run callbacks
//!                  │
//!                  └─ no fd (memory,  ──> thread pool: read_blocks() on a pool
//!                     fault injection)    thread, then the callback
//! ```
//! - [`EngineKind::Uring`]: one ring per engine, `queue_depth` ops in flight
//!   at most, submissions under a mutex, a completion thread blocked in
//!   `io_uring_enter(GETEVENTS)`. The writes of [`IoEngine::write_all`],
//!   whose caller waits for them anyway, go through a small ring of the
//!   calling thread's own instead (`aio/caller.rs`): it submits them and
//!   waits in one `io_uring_enter`, woken once when the last completes.
//!   Ops whose backing has no
//!   [`raw_file`](crate::Backing::raw_file) ([`MemBacking`](crate::MemBacking),
//!   [`FaultyBacking`](crate::FaultyBacking), so fault injection applies to
//!   asynchronous reads too) go to a thread pool created on first use.
//! - [`EngineKind::Threads`]: a pool of `threads` threads calling
//!   [`Backing::read_blocks`] for every op; the engine where io_uring is
//!   missing.
//! - [`EngineKind::Auto`] probes io_uring once, at [`IoEngine::new`], and
//!   falls back to the threads with a `log::warn!` saying why.
//!
//! Either way an op completes with exactly what
//! [`Backing::read_blocks`] would have returned: the byte count, short only
//! at end of file, with every byte of the buffers past the count zeroed; or
//! the error, delivered to that op only.
//!
//! # Callbacks
//! Every op's callback is called exactly once, from an engine thread: the
//! completion thread or a pool thread (only if the OS refuses to start any
//! pool thread do ops that need the pool run on the submitting thread,
//! callback included). Callbacks run one at a time per thread, so a slow
//! callback delays the completions behind it: mark folios uptodate, wake
//! waiters, and return. A callback may submit more ops; on the completion
//! thread, ops that find the ring full then wait in a backlog instead of
//! blocking the thread that would make room. A callback that panics does
//! not kill the engine: the panic is caught, logged with `log::error!` and
//! counted ([`EngineStats::callback_panics`]).
//!
//! # Shutdown
//! Dropping the last clone of an [`IoEngine`] completes every op in flight
//! (their callbacks run) and then joins the engine's threads. Dropped from
//! inside a callback, it cannot join the thread it runs on: that thread
//! finishes the remaining ops and exits on its own.
//!
//! # Locking
//! | what | takes | may sleep | allocates |
//! |---|---|---|---|
//! | [`IoEngine::submit`], io_uring | the ring's submission mutex, for the whole batch | waiting for room when `queue_depth` ops are in flight; in `io_uring_enter` | one box per op (and its iovec array for several buffers) |
//! | [`IoEngine::submit`], pool | the pool's queue mutex, briefly | no | the queue grows |
//! | completion thread | the submission mutex once per batch of completions, never across a callback | in `io_uring_enter(GETEVENTS)` | no |
//! | callbacks | nothing of the engine's | as they like, delaying later completions | |
//!
//! Lock order: the submission mutex, then the pool's queue mutex (ops that
//! a broken ring hands back go to the pool); both are leaves otherwise, and
//! neither is held while a callback or a backing method runs, so callbacks
//! may submit.
//!
//! # Example
//! ```
//! use std::sync::{mpsc, Arc};
//! use foliocache_backing::aio::{IoEngine, IoEngineConfig, ReadOp};
//! use foliocache_backing::{AlignedBuf, Backing, MemBacking, RawBuf, BLOCK};
//!
//! let engine = IoEngine::new(IoEngineConfig::default())?;
//! println!("{}", engine.name()); // "io_uring (depth 256)" or "threads (2)"
//!
//! let file: Arc<dyn Backing> = Arc::new(MemBacking::with_data(vec![7; 3 * BLOCK]));
//! let mut mem = AlignedBuf::zeroed(4 * BLOCK)?;
//! let (tx, rx) = mpsc::channel();
//! let mut batch = Vec::new();
//! for (i, chunk) in mem.chunks_mut(2 * BLOCK).enumerate() {
//!     // SAFETY: `mem` is neither used nor freed until both callbacks ran
//!     // (the `rx.recv()`s below).
//!     let buf = unsafe { RawBuf::new(chunk.as_mut_ptr(), chunk.len()) }?;
//!     let tx = tx.clone();
//!     let offset = (i * 2 * BLOCK) as u64;
//!     batch.push(ReadOp::new(file.clone(), offset, vec![buf], move |res| {
//!         let _ = tx.send((offset, res.map_err(|e| e.kind())));
//!     }));
//! }
//! engine.submit(batch); // both reads leave together
//! let mut got = vec![rx.recv()?, rx.recv()?];
//! got.sort();
//! assert_eq!(got, vec![(0, Ok(2 * BLOCK)), (2 * BLOCK as u64, Ok(BLOCK))]); // EOF
//! assert!(mem[..3 * BLOCK].iter().all(|&b| b == 7));
//! assert!(mem[3 * BLOCK..].iter().all(|&b| b == 0)); // zeroed past EOF
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::any::Any;
use std::fmt;
use std::fs::File;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::sync::{bump, lock, wait, Condvar, Mutex};
use crate::{check_io_range, Backing, IoBuf, IoBufMut, ThreadStart};

#[allow(unsafe_code)]
mod caller;
mod pool;
#[allow(unsafe_code)]
mod uring;

pub use crate::buf::RawBuf;
use crate::buf::RawSrc;

use pool::Pool;
use uring::Uring;

/// The largest queue depth an io_uring engine accepts (the kernel's limit
/// on submission queue entries).
pub const MAX_QUEUE_DEPTH: u32 = 32768;

/// Which engine runs the reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EngineKind {
    /// io_uring if this kernel and process may use it (ring creation works
    /// and the kernel supports `IORING_OP_READV`), else the thread pool.
    #[default]
    Auto,
    /// io_uring, or an error from [`IoEngine::new`] where it is missing.
    Uring,
    /// A pool of threads calling [`Backing::read_blocks`].
    Threads,
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineKind::Auto => "auto",
            EngineKind::Uring => "io_uring",
            EngineKind::Threads => "threads",
        })
    }
}

/// How to build an [`IoEngine`]. The fields are public; the builder
/// methods set them one at a time. The default is [`EngineKind::Auto`],
/// queue depth 256, 2 threads.
///
/// ```
/// use foliocache_backing::aio::{EngineKind, IoEngineConfig};
///
/// let cfg = IoEngineConfig::new().kind(EngineKind::Threads).threads(4);
/// assert_eq!((cfg.kind, cfg.queue_depth, cfg.threads), (EngineKind::Threads, 256, 4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoEngineConfig {
    /// Which engine to run. Default: [`EngineKind::Auto`].
    pub kind: EngineKind,
    /// io_uring: the most ops in flight at once, and the ring's size
    /// (rounded up to a power of two by the kernel), 1 to
    /// [`MAX_QUEUE_DEPTH`]. Default 256. A batch larger than the free room
    /// is submitted in parts, waiting for room in between.
    pub queue_depth: u32,
    /// Threads of the pool: the whole engine for [`EngineKind::Threads`],
    /// and the pool for ops without a file descriptor under io_uring
    /// (started on first use). At least 1. Default 2.
    pub threads: usize,
    /// Run first on each of the engine's threads (the completion thread,
    /// the pool's). Default: nothing.
    pub on_thread_start: ThreadStart,
}

impl Default for IoEngineConfig {
    fn default() -> Self {
        IoEngineConfig {
            kind: EngineKind::Auto,
            queue_depth: 256,
            threads: 2,
            on_thread_start: ThreadStart::default(),
        }
    }
}

impl IoEngineConfig {
    /// The default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`kind`](Self::kind).
    pub fn kind(mut self, kind: EngineKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets [`queue_depth`](Self::queue_depth).
    pub fn queue_depth(mut self, depth: u32) -> Self {
        self.queue_depth = depth;
        self
    }

    /// Sets [`threads`](Self::threads).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Sets [`on_thread_start`](Self::on_thread_start) to run `f`.
    pub fn on_thread_start(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_thread_start = ThreadStart::new(f);
        self
    }
}

/// The callback of a [`ReadOp`] (and of the engine's own write ops).
pub type ReadCallback = Box<dyn FnOnce(io::Result<usize>) + Send>;

/// One asynchronous read: the bytes of `backing` starting at `offset`, into
/// `bufs` in order, then `done` with the result that
/// [`Backing::read_blocks`] would give: the byte count (short only at end
/// of file, every byte past it zeroed) or the error.
///
/// The op owns its buffers until it completes: the engine drops them just
/// before it calls `done`, and the memory behind them must stay valid and
/// untouched until then (the contract of [`RawBuf::new`]). The op also
/// keeps its backing alive until then (and, read through io_uring, the
/// [`raw_file`](Backing::raw_file) it reads).
pub struct ReadOp {
    /// Where to read from.
    pub backing: Arc<dyn Backing>,
    /// The file offset, a multiple of [`BLOCK`](crate::BLOCK); otherwise
    /// the op fails with [`io::ErrorKind::InvalidInput`].
    pub offset: u64,
    /// Where the bytes go, in order.
    pub bufs: Vec<RawBuf>,
    /// Called exactly once, from an engine thread, with the result.
    pub done: ReadCallback,
}

impl ReadOp {
    /// An op reading `bufs` from `backing` at `offset`, calling `done`.
    pub fn new(
        backing: Arc<dyn Backing>,
        offset: u64,
        bufs: Vec<RawBuf>,
        done: impl FnOnce(io::Result<usize>) + Send + 'static,
    ) -> ReadOp {
        ReadOp {
            backing,
            offset,
            bufs,
            done: Box::new(done),
        }
    }

    /// The total length of the buffers in bytes, or `None` if it overflows
    /// `usize`.
    pub fn len(&self) -> Option<usize> {
        self.bufs
            .iter()
            .try_fold(0usize, |acc, b| acc.checked_add(b.len()))
    }

    /// Whether the op reads nothing (no buffers, or only empty ones).
    pub fn is_empty(&self) -> bool {
        self.bufs.iter().all(RawBuf::is_empty)
    }
}

impl fmt::Debug for ReadOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOp")
            .field("backing", &self.backing.info().kind)
            .field("offset", &self.offset)
            .field("bufs", &self.bufs)
            .finish_non_exhaustive()
    }
}

/// One write of [`IoEngine::write_all`]: the bytes of `bufs`, in order,
/// to `backing` at `offset` (a multiple of [`BLOCK`](crate::BLOCK)), as
/// [`Backing::write_blocks`] writes them.
#[derive(Clone, Copy)]
pub struct WriteReq<'a> {
    /// Where to write.
    pub backing: &'a Arc<dyn Backing>,
    /// The file offset.
    pub offset: u64,
    /// What to write, in order.
    pub bufs: &'a [IoBuf<'a>],
}

impl fmt::Debug for WriteReq<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteReq")
            .field("backing", &self.backing.info().kind)
            .field("offset", &self.offset)
            .field("bufs", &self.bufs)
            .finish()
    }
}

/// A write op: what [`IoEngine::write_all`] submits for one [`WriteReq`].
pub(crate) struct WriteOp {
    backing: Arc<dyn Backing>,
    offset: u64,
    segs: Vec<RawSrc>,
    done: ReadCallback,
}

/// What the engine carries: a caller's read, or one write of `write_all`.
pub(crate) enum Op {
    Read(ReadOp),
    Write(WriteOp),
}

impl Op {
    fn is_write(&self) -> bool {
        matches!(self, Op::Write(_))
    }

    fn offset(&self) -> u64 {
        match self {
            Op::Read(op) => op.offset,
            Op::Write(op) => op.offset,
        }
    }

    /// How many buffers the op has.
    fn nsegs(&self) -> usize {
        match self {
            Op::Read(op) => op.bufs.len(),
            Op::Write(op) => op.segs.len(),
        }
    }

    /// Buffer `i` (`i < nsegs()`) as (address, length): the kernel writes
    /// into a read's and reads from a write's.
    fn seg(&self, i: usize) -> (*mut u8, usize) {
        match self {
            Op::Read(op) => (op.bufs[i].as_ptr(), op.bufs[i].len()),
            Op::Write(op) => (op.segs[i].as_ptr().cast_mut(), op.segs[i].len()),
        }
    }

    /// The total length in bytes, `None` if it overflows.
    fn len(&self) -> Option<usize> {
        match self {
            Op::Read(op) => op.len(),
            Op::Write(op) => op
                .segs
                .iter()
                .try_fold(0usize, |acc, s| acc.checked_add(s.len())),
        }
    }

    /// The file to use through io_uring: the backing has one, and the op
    /// is valid and not empty (other ops go to the pool, where
    /// `read_blocks` or `write_blocks` reports what is wrong with them).
    fn uring_file(&self) -> Option<Arc<File>> {
        let len = self.len()?;
        if len == 0 || check_io_range(self.offset(), len as u64).is_err() {
            return None;
        }
        match self {
            Op::Read(op) => op.backing.raw_file(),
            Op::Write(op) => op.backing.raw_file(),
        }
    }

    /// Zeroes a read's buffers from byte `from` on (a read that stopped at
    /// end of file); nothing for a write.
    fn zero_from(&mut self, from: usize) {
        if let Op::Read(op) = self {
            let mut bufs: Vec<IoBufMut<'_>> = op.bufs.iter_mut().map(RawBuf::io_buf_mut).collect();
            crate::zero_from(&mut bufs, from);
        }
    }

    /// Runs the op with `read_blocks` or `write_blocks` on this thread and
    /// completes it.
    fn run(mut self, stats: &Stats) {
        let res = match &mut self {
            Op::Read(op) => {
                let mut io: Vec<IoBufMut<'_>> =
                    op.bufs.iter_mut().map(RawBuf::io_buf_mut).collect();
                op.backing.read_blocks(&mut io, op.offset)
            }
            Op::Write(op) => {
                let bufs: Vec<IoBuf<'_>> = op.segs.iter().map(RawSrc::io_buf).collect();
                op.backing.write_blocks(&bufs, op.offset)
            }
        };
        self.finish(res, stats, false);
    }

    /// Completes the op with `res`: drops its buffers, tells the backing
    /// what was done through its [`raw_file`](Backing::raw_file) when
    /// `raw`, and calls the callback.
    fn finish(self, res: io::Result<usize>, stats: &Stats, raw: bool) {
        let (backing, offset, done) = match self {
            Op::Read(ReadOp {
                backing,
                offset,
                bufs,
                done,
            }) => {
                drop(bufs);
                (backing, offset, done)
            }
            Op::Write(WriteOp {
                backing,
                offset,
                segs,
                done,
            }) => {
                drop(segs);
                (backing, offset, done)
            }
        };
        if let (true, Ok(n)) = (raw, &res) {
            if *n > 0 {
                backing.after_raw_io(offset, *n as u64);
            }
        }
        drop(backing);
        stats.complete(done, res);
    }
}

/// Counters of an [`IoEngine`] since it was built, from
/// [`IoEngine::stats`]. Each is read on its own (relaxed), so a snapshot
/// taken while ops run may be slightly inconsistent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Calls of [`IoEngine::submit`] (batches).
    pub batches: u64,
    /// `io_uring_enter` calls that submitted entries: one per batch that
    /// fits the free room, more for larger batches, resubmissions and
    /// retries.
    pub enters: u64,
    /// Ops submitted: reads, and the writes of [`IoEngine::write_all`].
    pub ops: u64,
    /// Of those, writes.
    pub writes: u64,
    /// Ops run through io_uring.
    pub uring_ops: u64,
    /// Of those, writes of [`IoEngine::write_all`] that went through the
    /// calling thread's own ring (a thread beyond the process's limit of
    /// such rings, or one whose ring could not be set up, uses the
    /// engine's ring).
    pub caller_ring_ops: u64,
    /// Ops run with `read_blocks` or `write_blocks` on the pool (all of
    /// them for [`EngineKind::Threads`]).
    pub pool_ops: u64,
    /// Ops completed: counted just before the callback is called, so a
    /// callback sees itself counted.
    pub completed: u64,
    /// Bytes reported by ops that succeeded.
    pub bytes: u64,
    /// Resubmissions through io_uring: the rest of a short read or write,
    /// an op over more than `IOV_MAX` buffers, or a retry after `EAGAIN`,
    /// `EINTR` or `ECANCELED`.
    pub resubmits: u64,
    /// Ops completed with an error.
    pub errors: u64,
    /// Callbacks that panicked (caught and logged).
    pub callback_panics: u64,
}

counters! {
    /// The shared counters behind [`EngineStats`].
    pub(crate) struct Stats => EngineStats {
        batches, enters, ops, writes, uring_ops, caller_ring_ops, pool_ops, completed, bytes,
        resubmits, errors, callback_panics,
    }
}

impl Stats {
    /// Calls an op's callback with its result and counts it. A panic in
    /// the callback is caught, logged and counted, so the engine thread
    /// lives on.
    pub(crate) fn complete(&self, done: ReadCallback, res: io::Result<usize>) {
        match &res {
            Ok(n) => bump(&self.bytes, *n as u64),
            Err(_) => bump(&self.errors, 1),
        }
        bump(&self.completed, 1);
        let outcome = catch_unwind(AssertUnwindSafe(move || done(res)));
        if let Err(payload) = outcome {
            bump(&self.callback_panics, 1);
            log::error!(
                "aio: an IO callback panicked ({}); the engine goes on, but whatever \
                 the callback should have done after the panic did not happen",
                panic_message(payload.as_ref())
            );
        }
    }
}

/// The message of a panic payload, if it is a string.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

/// An asynchronous, batched block reader: io_uring, or a thread pool where
/// io_uring is missing (see the [module docs](self)).
///
/// Cheap to clone (an `Arc` inside); `Send + Sync`. Dropping the last clone
/// completes the ops in flight and stops the engine's threads.
#[derive(Clone)]
pub struct IoEngine {
    inner: Arc<Engine>,
}

struct Engine {
    kind: EngineKind,
    depth: u32,
    threads: usize,
    stats: Arc<Stats>,
    /// `Some` for [`EngineKind::Uring`]; taken first on drop, so the ring
    /// drains (possibly handing ops to the pool) before the pool stops.
    uring: Option<Uring>,
    /// Every op without a file descriptor, and everything under
    /// [`EngineKind::Threads`].
    pool: Arc<Pool>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        drop(self.uring.take());
    }
}

impl IoEngine {
    /// Starts an engine: for [`EngineKind::Auto`] and
    /// [`EngineKind::Uring`], sets up a ring of `cfg.queue_depth` entries,
    /// checks that the kernel supports `IORING_OP_READV` and starts the
    /// completion thread; for [`EngineKind::Threads`], starts
    /// `cfg.threads` threads.
    ///
    /// `Auto` falls back to the threads, with a `log::warn!` that says why,
    /// when io_uring cannot be set up (a kernel without it, `ENOSYS`; a
    /// sysctl or seccomp policy that forbids it, `EPERM`; no READV; a
    /// memory-lock limit, ...). [`kind`](Self::kind) tells which runs.
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] for `queue_depth` 0 or over
    ///   [`MAX_QUEUE_DEPTH`], or `threads` 0.
    /// - For [`EngineKind::Uring`], why io_uring cannot be used
    ///   ([`io::ErrorKind::Unsupported`] without READV, else the
    ///   `io_uring_setup` error).
    /// - The OS's error if a thread cannot be started (the pool's threads
    ///   under `Threads`; the completion thread under io_uring).
    pub fn new(cfg: IoEngineConfig) -> io::Result<IoEngine> {
        if cfg.queue_depth == 0 || cfg.queue_depth > MAX_QUEUE_DEPTH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "queue depth {} is out of range: give 1 to {MAX_QUEUE_DEPTH} \
                     (256 is the default)",
                    cfg.queue_depth
                ),
            ));
        }
        if cfg.threads == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an IO engine needs at least 1 pool thread (2 is the default)",
            ));
        }
        let stats = Arc::new(Stats::default());
        let pool = Arc::new(Pool::new(
            cfg.threads,
            stats.clone(),
            cfg.on_thread_start.clone(),
        ));
        let uring = match cfg.kind {
            EngineKind::Threads => None,
            EngineKind::Uring => Some(Uring::new(
                cfg.queue_depth,
                stats.clone(),
                pool.clone(),
                &cfg.on_thread_start,
            )?),
            EngineKind::Auto => match Uring::new(
                cfg.queue_depth,
                stats.clone(),
                pool.clone(),
                &cfg.on_thread_start,
            ) {
                Ok(u) => Some(u),
                Err(e) => {
                    log::warn!(
                        "aio: io_uring is not available ({e}); reads run on a pool of {} \
                         threads calling preadv instead",
                        cfg.threads
                    );
                    None
                }
            },
        };
        let kind = if uring.is_some() {
            EngineKind::Uring
        } else {
            pool.start()?;
            EngineKind::Threads
        };
        Ok(IoEngine {
            inner: Arc::new(Engine {
                kind,
                depth: cfg.queue_depth,
                threads: cfg.threads,
                stats,
                uring,
                pool,
            }),
        })
    }

    /// The engine that runs: [`EngineKind::Uring`] or
    /// [`EngineKind::Threads`] (never `Auto`).
    pub fn kind(&self) -> EngineKind {
        self.inner.kind
    }

    /// The engine that runs, for logs and reports: `"io_uring (depth 256)"`
    /// or `"threads (2)"`.
    pub fn name(&self) -> String {
        match self.inner.kind {
            EngineKind::Uring => format!("io_uring (depth {})", self.inner.depth),
            _ => format!("threads ({})", self.inner.threads),
        }
    }

    /// Submits every op of `batch` together and returns; each op's callback
    /// runs later, on an engine thread, exactly once.
    ///
    /// Under io_uring, the ops whose backing has a
    /// [`raw_file`](Backing::raw_file) are pushed to the ring and submitted
    /// with ONE `io_uring_enter` when they fit the free room (at most
    /// `queue_depth` ops are in flight); a larger batch is submitted in
    /// parts, waiting for room in between (on the completion thread itself,
    /// the rest waits in a backlog instead). The other ops, and ops that
    /// are invalid (misaligned offset, range past
    /// [`MAX_FILE_SIZE`](crate::MAX_FILE_SIZE)) or empty, go to the pool,
    /// where `read_blocks` runs (and reports what is wrong).
    ///
    /// Nothing is dropped or failed for lack of room. Errors reach the
    /// callbacks of the ops they concern: an IO error as
    /// [`Backing::read_blocks`] gives it (e.g. `EIO`), invalid input as
    /// [`io::ErrorKind::InvalidInput`]. If the ring itself fails (an
    /// `io_uring_enter` error other than `EINTR`/`EAGAIN`/`EBUSY`), the ops
    /// it did not take, and every op after them, run on the pool instead.
    ///
    /// # Locking
    /// Under io_uring, takes the submission mutex for the batch and may
    /// sleep waiting for room; allocates a box per op. Under threads, takes
    /// the pool's mutex briefly. Never calls a callback itself, except if
    /// no pool thread can be started (see the [module docs](self)).
    pub fn submit(&self, batch: Vec<ReadOp>) {
        self.submit_ops(batch.into_iter().map(Op::Read).collect());
    }

    /// Submits reads and writes: to the ring those it can take, the rest to
    /// the pool.
    fn submit_ops(&self, batch: Vec<Op>) {
        self.route(batch, false);
    }

    /// [`submit_ops`](Self::submit_ops); with `own`, the ring's ops go
    /// through the calling thread's ring where it has one (`caller.rs`),
    /// and are complete when this returns.
    fn route(&self, batch: Vec<Op>, own: bool) {
        let e = &*self.inner;
        bump(&e.stats.batches, 1);
        bump(&e.stats.ops, batch.len() as u64);
        let Some(uring) = &e.uring else {
            e.pool.submit(batch);
            return;
        };
        let mut direct = Vec::with_capacity(batch.len());
        let mut pooled = Vec::new();
        for op in batch {
            match op.uring_file() {
                Some(file) if !op.is_write() || uring.writes() => direct.push((op, file)),
                _ => pooled.push(op),
            }
        }
        if !pooled.is_empty() {
            e.pool.submit(pooled);
        }
        if direct.is_empty() {
            return;
        }
        if own {
            match caller::write_all(direct, uring.has_write(), &e.stats) {
                Ok(()) => {}
                Err(direct) => uring.submit(direct),
            }
        } else {
            uring.submit(direct);
        }
    }

    /// Writes every request (each as [`Backing::write_blocks`] would) side
    /// by side, and returns once all of them completed: their results, in
    /// the order of `reqs`. Under io_uring, the writes to backings with a
    /// [`raw_file`](Backing::raw_file) go out together, so scattered
    /// blocks keep the device's queue full from one thread: through a
    /// small ring of the calling thread's own (made at its first call),
    /// one `io_uring_enter` that submits them and sleeps until the last
    /// completes, so the caller is woken once rather than through the
    /// engine's completion thread (see [`EngineStats::caller_ring_ops`]
    /// for when the engine's ring takes them instead). The others, and
    /// every write under [`EngineKind::Threads`], run with `write_blocks`
    /// on the pool. Called from an engine thread (a callback), it writes
    /// on that thread, one request after another, rather than wait for the
    /// engine it would hold up.
    ///
    /// A short write is resubmitted for the rest; a write that makes no
    /// progress fails with [`io::ErrorKind::WriteZero`]. Every request is
    /// tried whatever the others give.
    ///
    /// # Locking
    /// Through the caller's ring, nothing but the ring (a thread-local),
    /// sleeping in `io_uring_enter` until the last write completes;
    /// otherwise as [`submit`](Self::submit), then sleeps until the last
    /// write completes.
    #[allow(unsafe_code)]
    pub fn write_all(&self, reqs: &[WriteReq<'_>]) -> Vec<io::Result<usize>> {
        if reqs.is_empty() {
            return Vec::new();
        }
        bump(&self.inner.stats.writes, reqs.len() as u64);
        if on_engine_thread() {
            return reqs
                .iter()
                .map(|r| r.backing.write_blocks(r.bufs, r.offset))
                .collect();
        }
        let latch = Arc::new(Latch::new(reqs.len()));
        // Declared before the ops: however this call ends, it waits until
        // every op completed or was dropped, so no op outlives the buffers
        // it borrows from `reqs`.
        let all = WaitAll(&latch);
        let ops = reqs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let ticket = Ticket {
                    latch: latch.clone(),
                    index: i,
                    res: None,
                };
                Op::Write(WriteOp {
                    backing: r.backing.clone(),
                    offset: r.offset,
                    // SAFETY: the bytes are `reqs`' borrows, valid and
                    // unwritten (`IoBuf`) until this call returns, which
                    // is after every op completed or was dropped, and so
                    // after every `RawSrc` is gone (`all`, below).
                    segs: r.bufs.iter().map(|&b| unsafe { RawSrc::new(b) }).collect(),
                    done: Box::new(move |res| ticket.complete(res)),
                })
            })
            .collect();
        self.route(ops, true);
        drop(all);
        let results = std::mem::take(&mut lock(&latch.state).results);
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(io::Error::other("a write op was lost"))))
            .collect()
    }

    /// The counters so far.
    pub fn stats(&self) -> EngineStats {
        self.inner.stats.snapshot()
    }
}

/// What [`IoEngine::write_all`] waits on: the results, and how many ops
/// have not completed.
struct Latch {
    state: Mutex<LatchState>,
    all_done: Condvar,
}

struct LatchState {
    left: usize,
    results: Vec<Option<io::Result<usize>>>,
}

impl Latch {
    fn new(n: usize) -> Latch {
        Latch {
            state: Mutex::new(LatchState {
                left: n,
                results: (0..n).map(|_| None).collect(),
            }),
            all_done: Condvar::new(),
        }
    }
}

/// Waits, when dropped, until every op of its latch completed or was
/// dropped.
struct WaitAll<'l>(&'l Latch);

impl Drop for WaitAll<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        while st.left > 0 {
            st = wait(&self.0.all_done, st);
        }
    }
}

/// A write op's share of its latch, held by its callback: counted off when
/// the callback runs, or when the op is dropped without running (then with
/// an error), so the waiter never waits for an op that is gone.
struct Ticket {
    latch: Arc<Latch>,
    index: usize,
    res: Option<io::Result<usize>>,
}

impl Ticket {
    fn complete(mut self, res: io::Result<usize>) {
        self.res = Some(res);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let res = self
            .res
            .take()
            .unwrap_or_else(|| Err(io::Error::other("the write was dropped before it ran")));
        let mut st = lock(&self.latch.state);
        st.results[self.index] = Some(res);
        st.left -= 1;
        if st.left == 0 {
            self.latch.all_done.notify_all();
        }
    }
}

thread_local! {
    /// Whether this thread is one of an engine's (completion or pool).
    static ENGINE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as an engine's own, for [`on_engine_thread`].
pub(crate) fn mark_engine_thread() {
    ENGINE_THREAD.with(|t| t.set(true));
}

/// Whether this thread is an engine's (where waiting for ops could wait
/// for this thread itself).
fn on_engine_thread() -> bool {
    ENGINE_THREAD.with(std::cell::Cell::get)
}

impl fmt::Debug for IoEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoEngine")
            .field("name", &self.name())
            .field("stats", &self.stats())
            .finish()
    }
}
