//! [`FaultyBacking`]: fault injection at the IO seam, after redb's countdown
//! backend.
//!
//! Rules are set and cleared at run time through `&self`, so a test can
//! share the backing with the cache (`Arc<FaultyBacking<_>>`) and arm a
//! fault just before the operation it wants to break. Every rule is
//! deterministic: it fires on a counted call or a byte range, never by
//! chance.
//!
//! On each call, in this order:
//! 1. the call is counted ([`FaultStats`]);
//! 2. reads and writes sleep for the configured latency;
//! 3. invalid input (a misaligned offset, a range past
//!    [`MAX_FILE_SIZE`](crate::MAX_FILE_SIZE)) fails with `InvalidInput`
//!    and ticks no countdown;
//! 4. the countdowns of [`fail_nth`](FaultyBacking::fail_nth) /
//!    [`fail_from_nth`](FaultyBacking::fail_from_nth) for the call's
//!    [`Op`] tick, and one that reaches zero fails the call;
//! 5. reads overlapping a failing read range fail, and so do writes
//!    overlapping a failing write range;
//! 6. a write ending past the space limit writes the blocks below the
//!    limit and fails with `ENOSPC`;
//! 7. the short-read countdown ticks, and when it fires the read returns at
//!    most the configured number of bytes;
//! 8. otherwise the call goes to the inner backing.
//!
//! A failed call (3-6) does not reach the inner backing, except for the
//! part of a write below the space limit.

use std::fmt;
use std::io;
use std::ops::Range;
use std::time::Duration;

use crate::buf::{AlignedBuf, IoBuf, IoBufMut};
use crate::sync::{bump, lock, AtomicU64, Mutex};
use crate::{check_end, check_io, check_io_range, Backing, BackingInfo, BLOCK};

/// A kind of [`Backing`] call, for counting and failing calls by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`Backing::read_blocks`].
    Read,
    /// [`Backing::write_blocks`].
    Write,
    /// [`Backing::sync_data`] and [`Backing::sync_all`].
    Sync,
    /// [`Backing::set_len`].
    SetLen,
    /// [`Backing::punch_hole`].
    PunchHole,
    /// [`Backing::len`] (and so `is_empty`).
    Len,
    /// [`Backing::collapse_range`] and [`Backing::insert_range`].
    ShiftRange,
    /// [`Backing::reserve`] (a failure with `ENOSPC` is a full store).
    Reserve,
}

const NR_OPS: usize = 8;

impl Op {
    fn index(self) -> usize {
        match self {
            Op::Read => 0,
            Op::Write => 1,
            Op::Sync => 2,
            Op::SetLen => 3,
            Op::PunchHole => 4,
            Op::Len => 5,
            Op::ShiftRange => 6,
            Op::Reserve => 7,
        }
    }
}

/// A pending "fail the n-th call" rule.
#[derive(Debug, Clone, Copy)]
struct Countdown {
    /// Calls still to go before the failing one (1: the next call fails).
    remaining: u64,
    errno: i32,
    /// Keep failing every call after the first failure.
    sticky: bool,
}

impl Countdown {
    /// Ticks for one call; returns the errno if this call fails, and
    /// whether the rule is spent.
    fn tick(&mut self) -> (Option<i32>, bool) {
        if self.remaining > 1 {
            self.remaining -= 1;
            return (None, false);
        }
        self.remaining = 1;
        (Some(self.errno), !self.sticky)
    }
}

#[derive(Debug, Default)]
struct Rules {
    nth: [Option<Countdown>; NR_OPS],
    read_ranges: Vec<(Range<u64>, i32)>,
    write_ranges: Vec<(Range<u64>, i32)>,
    /// (calls to go, at most this many bytes)
    short_read: Option<(u64, usize)>,
    read_latency: Duration,
    write_latency: Duration,
    space_limit: Option<u64>,
}

impl Rules {
    fn tick(&mut self, op: Op) -> Option<i32> {
        let slot = &mut self.nth[op.index()];
        let (errno, spent) = slot.as_mut()?.tick();
        if spent {
            *slot = None;
        }
        errno
    }
}

/// Counts of calls and bytes seen by a [`FaultyBacking`], from
/// [`FaultyBacking::stats`]. Calls are counted whether they succeed or fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultStats {
    /// `read_blocks` calls.
    pub reads: u64,
    /// `write_blocks` calls.
    pub writes: u64,
    /// `sync_data` and `sync_all` calls.
    pub syncs: u64,
    /// `set_len` calls.
    pub set_lens: u64,
    /// `punch_hole` calls.
    pub punch_holes: u64,
    /// `collapse_range` and `insert_range` calls.
    pub shifts: u64,
    /// `len` calls.
    pub len_calls: u64,
    /// `reserve` calls.
    pub reserves: u64,
    /// Bytes returned by successful reads.
    pub bytes_read: u64,
    /// Bytes the inner backing wrote (including the part of a write below
    /// the space limit that then failed with `ENOSPC`).
    pub bytes_written: u64,
    /// Calls failed by a rule.
    pub injected_errors: u64,
    /// Reads shortened by [`FaultyBacking::short_read_nth`].
    pub short_reads: u64,
}

counters! {
    /// The shared counters behind [`FaultStats`].
    struct Counters => FaultStats {
        reads, writes, syncs, set_lens, punch_holes, shifts, len_calls, reserves, bytes_read,
        bytes_written, injected_errors, short_reads,
    }
}

/// Wraps a [`Backing`] and injects faults into it on command, for testing
/// how the layers above handle failing, short, slow and full IO.
///
/// All configuration goes through `&self` and takes effect for calls that
/// start afterwards. Countdowns count calls of one [`Op`] from the moment
/// the rule is set: `n = 1` is the next call (`n = 0` is taken as 1). The
/// module docs list the order in which rules apply.
///
/// ```
/// use foliocache_backing::{AlignedBuf, Backing, FaultyBacking, MemBacking, Op, BLOCK};
///
/// let b = FaultyBacking::new(MemBacking::with_data(vec![1; 2 * BLOCK]));
/// let mut buf = AlignedBuf::zeroed(BLOCK)?;
/// b.fail_nth(Op::Read, 2, libc::EIO);
/// assert!(b.read_blocks(&mut [buf.io_buf_mut()], 0).is_ok()); // 1st
/// let err = b.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap_err(); // 2nd
/// assert_eq!(err.raw_os_error(), Some(libc::EIO));
/// assert!(b.read_blocks(&mut [buf.io_buf_mut()], 0).is_ok()); // one-shot
/// assert_eq!(b.stats().reads, 3);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct FaultyBacking<B: Backing> {
    inner: B,
    rules: Mutex<Rules>,
    counters: Counters,
}

impl<B: Backing> FaultyBacking<B> {
    /// Wraps `inner` with no rules armed: every call passes through.
    pub fn new(inner: B) -> Self {
        FaultyBacking {
            inner,
            rules: Mutex::new(Rules::default()),
            counters: Counters::default(),
        }
    }

    /// The wrapped backing, to inspect or change it behind the rules' back.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Unwraps the inner backing.
    pub fn into_inner(self) -> B {
        self.inner
    }

    /// Fails the `n`-th call of `op` from now (1: the next) with `errno`,
    /// once; calls before and after it pass. Replaces any countdown already
    /// set for `op`.
    pub fn fail_nth(&self, op: Op, n: u64, errno: i32) {
        self.set_countdown(op, n, errno, false);
    }

    /// Fails the `n`-th call of `op` from now and every later one with
    /// `errno`, until [`clear_nth`](Self::clear_nth) or
    /// [`clear`](Self::clear): a device that died. Replaces any countdown
    /// already set for `op`.
    pub fn fail_from_nth(&self, op: Op, n: u64, errno: i32) {
        self.set_countdown(op, n, errno, true);
    }

    /// `fail_nth(Op::Read, n, errno)`.
    pub fn fail_nth_read(&self, n: u64, errno: i32) {
        self.fail_nth(Op::Read, n, errno);
    }

    /// `fail_nth(Op::Write, n, errno)`.
    pub fn fail_nth_write(&self, n: u64, errno: i32) {
        self.fail_nth(Op::Write, n, errno);
    }

    /// `fail_nth(Op::Sync, n, errno)`: counts `sync_data` and `sync_all`
    /// together.
    pub fn fail_nth_sync(&self, n: u64, errno: i32) {
        self.fail_nth(Op::Sync, n, errno);
    }

    /// Removes the countdown for `op`, fired or not.
    pub fn clear_nth(&self, op: Op) {
        lock(&self.rules).nth[op.index()] = None;
    }

    fn set_countdown(&self, op: Op, n: u64, errno: i32, sticky: bool) {
        lock(&self.rules).nth[op.index()] = Some(Countdown {
            remaining: n.max(1),
            errno,
            sticky,
        });
    }

    /// Fails with `errno` every read whose requested range overlaps
    /// `[offset, offset + len)`, until
    /// [`clear_read_ranges`](Self::clear_read_ranges): a bad sector. Several
    /// ranges may be armed; the first armed that overlaps gives the errno.
    /// The requested range counts, not the bytes available before EOF.
    pub fn fail_reads_in(&self, offset: u64, len: u64, errno: i32) {
        lock(&self.rules)
            .read_ranges
            .push((offset..offset.saturating_add(len), errno));
    }

    /// Removes every range armed by [`fail_reads_in`](Self::fail_reads_in).
    pub fn clear_read_ranges(&self) {
        lock(&self.rules).read_ranges.clear();
    }

    /// Fails with `errno`, writing nothing, every write whose range overlaps
    /// `[offset, offset + len)`, until
    /// [`clear_write_ranges`](Self::clear_write_ranges).
    pub fn fail_writes_in(&self, offset: u64, len: u64, errno: i32) {
        lock(&self.rules)
            .write_ranges
            .push((offset..offset.saturating_add(len), errno));
    }

    /// Removes every range armed by [`fail_writes_in`](Self::fail_writes_in).
    pub fn clear_write_ranges(&self) {
        lock(&self.rules).write_ranges.clear();
    }

    /// Makes the `n`-th read from now (1: the next) return at most
    /// `max_bytes` bytes, even though more are available and it is not at
    /// end of file, once. Only those bytes are copied into the buffers; the
    /// rest of them is left untouched (where a read that stops at end of
    /// file would zero it), so a caller that uses bytes past the count
    /// sees stale data. If the real read returns `max_bytes` or fewer, it is
    /// returned as it is (and the rule is still spent).
    ///
    /// **This breaks the [`Backing`] contract on purpose** (reads are short
    /// only at EOF), so that callers' handling of a short read, e.g. a
    /// spurious EOF with `max_bytes = 0` or a count inside a block, can be
    /// tested.
    pub fn short_read_nth(&self, n: u64, max_bytes: usize) {
        lock(&self.rules).short_read = Some((n.max(1), max_bytes));
    }

    /// Adds `latency` (sleep) before every read; `Duration::ZERO` turns it
    /// off.
    pub fn set_read_latency(&self, latency: Duration) {
        lock(&self.rules).read_latency = latency;
    }

    /// Adds `latency` (sleep) before every write; `Duration::ZERO` turns it
    /// off.
    pub fn set_write_latency(&self, latency: Duration) {
        lock(&self.rules).write_latency = latency;
    }

    /// Pretends the device is full past `limit` bytes of file offset
    /// (`None` turns it off): a write whose range ends past `limit` writes
    /// the whole blocks below it, as a filesystem writes what fits, and
    /// then fails with `ENOSPC`. `set_len` is not limited (a hole takes no
    /// space).
    pub fn set_space_limit(&self, limit: Option<u64>) {
        lock(&self.rules).space_limit = limit;
    }

    /// Removes every rule (countdowns, ranges, short read, latencies, space
    /// limit). Counters are kept; see [`reset_stats`](Self::reset_stats).
    pub fn clear(&self) {
        *lock(&self.rules) = Rules::default();
    }

    /// The counters so far.
    pub fn stats(&self) -> FaultStats {
        self.counters.snapshot()
    }

    /// Sets every counter to zero.
    pub fn reset_stats(&self) {
        self.counters.reset();
    }

    /// An injected error for `errno`, counted.
    fn injected(&self, errno: i32) -> io::Error {
        bump(&self.counters.injected_errors, 1);
        io::Error::from_raw_os_error(errno)
    }

    /// Counts a call of `op` and ticks its countdown.
    fn simple(&self, op: Op, counter: &AtomicU64) -> io::Result<()> {
        bump(counter, 1);
        match lock(&self.rules).tick(op) {
            Some(errno) => Err(self.injected(errno)),
            None => Ok(()),
        }
    }

    /// The inner read, cut to `max` bytes through a bounce buffer so that
    /// only the reported bytes reach the caller's buffers.
    fn short_read(
        &self,
        bufs: &mut [IoBufMut<'_>],
        offset: u64,
        total: usize,
        max: usize,
    ) -> io::Result<usize> {
        let mut bounce = AlignedBuf::zeroed(total)?;
        let got = self.inner.read_blocks(&mut [bounce.io_buf_mut()], offset)?;
        let n = got.min(max);
        let mut copied = 0;
        for buf in bufs.iter_mut() {
            if copied == n {
                break;
            }
            let k = buf.len().min(n - copied);
            buf[..k].copy_from_slice(&bounce[copied..copied + k]);
            copied += k;
        }
        if n < got {
            bump(&self.counters.short_reads, 1);
        }
        Ok(n)
    }
}

fn overlaps(r: &Range<u64>, offset: u64, len: usize) -> bool {
    let end = offset.saturating_add(len as u64);
    len > 0 && offset < r.end && r.start < end
}

impl<B: Backing> Backing for FaultyBacking<B> {
    fn len(&self) -> io::Result<u64> {
        self.simple(Op::Len, &self.counters.len_calls)?;
        self.inner.len()
    }

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        bump(&self.counters.reads, 1);
        let latency = lock(&self.rules).read_latency;
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let total = check_io(bufs, offset)?;
        let short = {
            let mut rules = lock(&self.rules);
            if let Some(errno) = rules.tick(Op::Read) {
                drop(rules);
                return Err(self.injected(errno));
            }
            let hit = rules
                .read_ranges
                .iter()
                .find(|(r, _)| overlaps(r, offset, total));
            if let Some(&(_, errno)) = hit {
                drop(rules);
                return Err(self.injected(errno));
            }
            match rules.short_read {
                Some((remaining, max)) if remaining <= 1 => {
                    rules.short_read = None;
                    Some(max)
                }
                Some((ref mut remaining, _)) => {
                    *remaining -= 1;
                    None
                }
                None => None,
            }
        };
        let n = match short {
            Some(max) if max < total => self.short_read(bufs, offset, total, max)?,
            _ => self.inner.read_blocks(bufs, offset)?,
        };
        bump(&self.counters.bytes_read, n as u64);
        Ok(n)
    }

    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        bump(&self.counters.writes, 1);
        let latency = lock(&self.rules).write_latency;
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let total = check_io(bufs, offset)?;
        let limit = {
            let mut rules = lock(&self.rules);
            if let Some(errno) = rules.tick(Op::Write) {
                drop(rules);
                return Err(self.injected(errno));
            }
            let hit = rules
                .write_ranges
                .iter()
                .find(|(r, _)| overlaps(r, offset, total));
            if let Some(&(_, errno)) = hit {
                drop(rules);
                return Err(self.injected(errno));
            }
            rules.space_limit
        };
        match limit {
            Some(limit) if offset + total as u64 > limit => {
                let fits = limit.saturating_sub(offset) / BLOCK as u64 * BLOCK as u64;
                let prefix = prefix(bufs, fits as usize);
                if !prefix.is_empty() {
                    let n = self.inner.write_blocks(&prefix, offset)?;
                    bump(&self.counters.bytes_written, n as u64);
                }
                Err(self.injected(rustix::io::Errno::NOSPC.raw_os_error()))
            }
            _ => {
                let n = self.inner.write_blocks(bufs, offset)?;
                bump(&self.counters.bytes_written, n as u64);
                Ok(n)
            }
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        check_end(len, 0)?;
        self.simple(Op::SetLen, &self.counters.set_lens)?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.simple(Op::Sync, &self.counters.syncs)?;
        self.inner.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.simple(Op::Sync, &self.counters.syncs)?;
        self.inner.sync_all()
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        self.simple(Op::PunchHole, &self.counters.punch_holes)?;
        self.inner.punch_hole(offset, len)
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.allocate(offset, len)
    }

    fn reserve(&self, offset: u64, end: u64) -> io::Result<()> {
        self.simple(Op::Reserve, &self.counters.reserves)?;
        self.inner.reserve(offset, end)
    }

    fn release_reserved(&self, size: u64) -> io::Result<()> {
        self.inner.release_reserved(size)
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        self.simple(Op::ShiftRange, &self.counters.shifts)?;
        self.inner.collapse_range(offset, len)
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        self.simple(Op::ShiftRange, &self.counters.shifts)?;
        self.inner.insert_range(offset, len)
    }

    fn info(&self) -> BackingInfo {
        let inner = self.inner.info();
        BackingInfo::new(
            "faulty",
            inner.data_path,
            inner.engine,
            format!("fault injection over {}", inner),
        )
    }
}

/// The first `len` bytes of `bufs` (`len` a multiple of [`BLOCK`]), as
/// buffers.
fn prefix<'a>(bufs: &[IoBuf<'a>], mut len: usize) -> Vec<IoBuf<'a>> {
    let mut out = Vec::new();
    for &b in bufs {
        if len == 0 {
            break;
        }
        if b.len() <= len {
            len -= b.len();
            out.push(b);
        } else if let Some((head, _)) = b.split_at(len) {
            out.push(head);
            len = 0;
        }
    }
    out
}

impl<B: Backing> fmt::Debug for FaultyBacking<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyBacking")
            .field("inner", &self.inner.info())
            .field("rules", &*lock(&self.rules))
            .field("stats", &self.stats())
            .finish()
    }
}
