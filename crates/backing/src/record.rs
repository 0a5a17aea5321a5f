//! [`RecordingBacking`]: a log of every change that reaches a backing, in
//! order, for crash tests (after CrashMonkey and ALICE: from the log, a
//! test builds the states a power cut could leave, and checks them).
//!
//! Each call that changes the file (a write, a size change, a hole, a
//! shift) or makes it durable (a sync) is appended to the log when the
//! inner backing has done it, under one lock held across the inner call:
//! the log's order is the order in which the inner backing saw them, and
//! a write logged before a sync completed before that sync began. Reads
//! are logged too, when they return (not under the lock: they run side
//! by side). Calls
//! the inner backing fails are logged as [`Recorded::Failed`] (a failed
//! write may have written any prefix, so a crash test treats the file as
//! unknown from there). The caller may put its own notes in the same log
//! ([`RecordingBacking::note`]), to place what the program above did
//! (an operation begun, a sync acknowledged) among the IO.

use std::fmt;
use std::io;

use crate::buf::{IoBuf, IoBufMut};
use crate::sync::{lock, Mutex};
use crate::{Backing, BackingInfo};

/// One entry of a [`RecordingBacking`]'s log.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recorded {
    /// [`Backing::write_blocks`]: `data` (whole blocks) at `offset`.
    Write {
        /// The file offset (a multiple of [`BLOCK`](crate::BLOCK)).
        offset: u64,
        /// The bytes written, the buffers one after another.
        data: Vec<u8>,
    },
    /// [`Backing::set_len`].
    SetLen(u64),
    /// [`Backing::punch_hole`] of `len` bytes at `offset`.
    PunchHole {
        /// Where the hole starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// [`Backing::collapse_range`] of `len` bytes at `offset`.
    Collapse {
        /// Where the removed range starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// [`Backing::insert_range`] of `len` bytes at `offset`.
    Insert {
        /// Where the inserted hole starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// [`Backing::sync_data`] (`all == false`) or [`Backing::sync_all`]
    /// that returned `Ok`.
    Sync {
        /// Whether it was `sync_all`.
        all: bool,
    },
    /// A call that changes the file, or a sync, that the inner backing
    /// failed: what it left is unknown.
    Failed,
    /// The caller's note ([`RecordingBacking::note`]).
    Note(u64),
    /// [`Backing::read_blocks`] of `len` bytes at `offset`, logged when it
    /// returned (reads run side by side: the log is not held across them,
    /// so a read is logged after every change that completed before it
    /// began, and before any caller sees its data).
    Read {
        /// The file offset asked for.
        offset: u64,
        /// The bytes asked for (the buffers' total length).
        len: u64,
        /// What the inner backing returned: bytes read, or the OS error
        /// (`-1` for an error without one).
        result: Result<u64, i32>,
    },
}

impl fmt::Debug for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Recorded::Write { offset, data } => {
                write!(f, "Write {{ offset: {offset}, len: {} }}", data.len())
            }
            Recorded::SetLen(len) => write!(f, "SetLen({len})"),
            Recorded::PunchHole { offset, len } => write!(f, "PunchHole({offset}, {len})"),
            Recorded::Collapse { offset, len } => write!(f, "Collapse({offset}, {len})"),
            Recorded::Insert { offset, len } => write!(f, "Insert({offset}, {len})"),
            Recorded::Sync { all } => write!(f, "Sync {{ all: {all} }}"),
            Recorded::Failed => f.write_str("Failed"),
            Recorded::Note(n) => write!(f, "Note({n})"),
            Recorded::Read {
                offset,
                len,
                result,
            } => write!(f, "Read({offset}, {len}) -> {result:?}"),
        }
    }
}

/// Wraps a [`Backing`] and logs, in order, every change, sync and read
/// that reaches it ([`Recorded`]), for crash tests and tests that count
/// IO. `len` and the other calls that change nothing pass through
/// unlogged.
///
/// ```
/// use foliocache_backing::{AlignedBuf, Backing, MemBacking, Recorded, RecordingBacking, BLOCK};
///
/// let b = RecordingBacking::new(MemBacking::new());
/// let mut data = AlignedBuf::zeroed(BLOCK)?;
/// data.fill(7);
/// b.write_blocks(&[data.io_buf()], 0)?;
/// b.note(1);
/// b.set_len(10)?;
/// b.sync_data()?;
/// let log = b.log();
/// assert_eq!(log[0], Recorded::Write { offset: 0, data: vec![7; BLOCK] });
/// assert_eq!(log[1..], [Recorded::Note(1), Recorded::SetLen(10), Recorded::Sync { all: false }]);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct RecordingBacking<B: Backing> {
    inner: B,
    log: Mutex<Vec<Recorded>>,
}

impl<B: Backing> RecordingBacking<B> {
    /// Wraps `inner`, whose contents now are taken as durable, with an
    /// empty log.
    pub fn new(inner: B) -> Self {
        RecordingBacking {
            inner,
            log: Mutex::new(Vec::new()),
        }
    }

    /// The wrapped backing.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Appends the caller's `note` to the log, ordered with the IO.
    pub fn note(&self, note: u64) {
        lock(&self.log).push(Recorded::Note(note));
    }

    /// A copy of the log so far.
    pub fn log(&self) -> Vec<Recorded> {
        lock(&self.log).clone()
    }

    /// Forgets the log so far.
    pub fn clear(&self) {
        lock(&self.log).clear();
    }

    /// Runs `call` on the inner backing with the log locked, and logs
    /// `entry` (made from the result) after it.
    fn logged<T>(
        &self,
        call: impl FnOnce(&B) -> io::Result<T>,
        entry: impl FnOnce() -> Recorded,
    ) -> io::Result<T> {
        let mut log = lock(&self.log);
        let r = call(&self.inner);
        log.push(if r.is_ok() { entry() } else { Recorded::Failed });
        r
    }
}

impl<B: Backing> Backing for RecordingBacking<B> {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        let r = self.inner.read_blocks(bufs, offset);
        let result = match &r {
            Ok(n) => Ok(*n as u64),
            Err(e) => Err(e.raw_os_error().unwrap_or(-1)),
        };
        lock(&self.log).push(Recorded::Read {
            offset,
            len,
            result,
        });
        r
    }

    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        self.logged(
            |b| b.write_blocks(bufs, offset),
            || Recorded::Write {
                offset,
                data: bufs.iter().flat_map(|b| b.iter().copied()).collect(),
            },
        )
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.logged(|b| b.set_len(len), || Recorded::SetLen(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.logged(|b| b.sync_data(), || Recorded::Sync { all: false })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.logged(|b| b.sync_all(), || Recorded::Sync { all: true })
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.logged(
            |b| b.punch_hole(offset, len),
            || Recorded::PunchHole { offset, len },
        )
    }

    /// Passes through unlogged: a reservation changes neither the data
    /// nor the size.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.allocate(offset, len)
    }

    fn reserve(&self, offset: u64, end: u64) -> io::Result<()> {
        self.inner.reserve(offset, end)
    }

    fn release_reserved(&self, size: u64) -> io::Result<()> {
        self.inner.release_reserved(size)
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.logged(
            |b| b.collapse_range(offset, len),
            || Recorded::Collapse { offset, len },
        )
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.logged(
            |b| b.insert_range(offset, len),
            || Recorded::Insert { offset, len },
        )
    }

    fn check_size(&self, size: u64) -> io::Result<()> {
        self.inner.check_size(size)
    }

    fn info(&self) -> BackingInfo {
        let inner = self.inner.info();
        BackingInfo::new(
            "recording",
            inner.data_path,
            inner.engine,
            format!("every change, sync and read logged, over {inner}"),
        )
    }
}

impl<B: Backing> fmt::Debug for RecordingBacking<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingBacking")
            .field("logged", &lock(&self.log).len())
            .finish_non_exhaustive()
    }
}
