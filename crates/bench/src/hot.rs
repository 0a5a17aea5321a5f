//! The hot reader: a thread reading a small file at random beside a job,
//! through the same cache as the job's engine, counting which reads were
//! hits: does the job's stream push the hot data out?
//!
//! ```text
//!   warm the hot file into the cache (the engine's: foliocache's, or the
//!   kernel's page cache inside the run's memory cgroup): each block read
//!   once, in a random order
//!   hot thread: loop { sleep until read i is due (start + i / rate);
//!                      off = random block; hit = try NOWAIT;
//!                      if not, read normally; publish reads and misses }
//!   job runs ........................................ job ends; stop
//! ```
//!
//! Paced (`--hot-rate`), the reader follows a deadline schedule: read `i`
//! is due at `start + i / rate`; ahead of it the thread sleeps (it never
//! spins: the job needs the other core), behind it it reads at once, so
//! the rate holds on average whatever a sleep overshoots by. A reader held
//! up longer than [`MAX_LAG`] (a miss waiting for the device behind the
//! stream) drops the reads it owes beyond that instead of bursting them:
//! a burst would read unpaced for a while, touching the hot set faster
//! than the rate says. So beside a stream that makes it miss, it reads
//! less than the rate; the report gives the reads it did. Unpaced (rate
//! 0), it reads back to back. Beside a paced stream it follows the
//! stream's bytes instead of the clock ([`Follow`]): read `i` is due once
//! the stream has moved `i` times its share, so a stream that stalls
//! stalls the reader with it.
//!
//! A read is a miss when it would have waited for IO: tried first with
//! `RWF_NOWAIT` (kernel: `EAGAIN`) or `ReadFlags::NOWAIT` (foliocache:
//! `WouldBlock`), then read normally. Where the library ignores NOWAIT (it
//! reads instead of failing, found by one NOWAIT read of an empty cache),
//! a read is a miss when `File::cachestat` finds its page not cached just
//! before it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use foliocache::ReadFlags;
use rustix::io::Errno;

use crate::job::Offsets;
use crate::spec::HotSpec;
use crate::sys::{self, AlignedBuf, PAGE};

/// How far a paced reader may fall behind its schedule before it drops
/// the reads it owes beyond that.
pub const MAX_LAG: Duration = Duration::from_millis(10);

/// The longest a paced reader sleeps at once, so that it sees `stop` soon
/// at low rates.
const MAX_SLEEP: Duration = Duration::from_millis(10);

/// How often a reader following a stream looks at its bytes when no
/// read is due (the stream publishes them every millisecond when paced).
const FOLLOW_POLL: Duration = Duration::from_micros(500);

/// A deadline schedule of `rate` events per second from `start`: event
/// `i` is due at `start + i / rate`.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    start: Instant,
    /// Nanoseconds between events.
    period_ns: f64,
    /// The next event's number.
    next: u64,
}

impl Schedule {
    fn new(start: Instant, rate: u64) -> Schedule {
        Schedule {
            start,
            period_ns: 1e9 / rate as f64,
            next: 0,
        }
    }

    /// When the next event is due.
    fn due(&self) -> Instant {
        self.start + Duration::from_nanos((self.next as f64 * self.period_ns) as u64)
    }

    /// At `now`: how long to wait before the next event (zero: it is
    /// due), after skipping the events due more than [`MAX_LAG`] ago.
    fn wait(&mut self, now: Instant) -> Duration {
        let due = self.due();
        if let Some(late) = now.checked_duration_since(due) {
            if late > MAX_LAG {
                let behind = (late - MAX_LAG).as_nanos() as f64 / self.period_ns;
                self.next += behind.ceil() as u64;
            }
            return Duration::ZERO;
        }
        due - now
    }

    /// The next event happened.
    fn advance(&mut self) {
        self.next += 1;
    }
}

/// A schedule in a stream's bytes: event `i` is due once the stream has
/// moved `i * every` bytes; an event owed more than `max_owed` events
/// ago is dropped, as [`MAX_LAG`] drops reads on the time schedule.
#[derive(Debug, Clone, Copy)]
struct ByteSchedule {
    every: u64,
    max_owed: u64,
    /// The next event's number.
    next: u64,
}

impl ByteSchedule {
    /// Whether the next event is due once the stream has moved
    /// `streamed`, after dropping the events owed beyond `max_owed`.
    fn due(&mut self, streamed: u64) -> bool {
        let done = streamed / self.every.max(1);
        if done > self.next + self.max_owed {
            self.next = done - self.max_owed;
        }
        done >= self.next
    }
}

/// The reads a reader of `spec` following a stream may owe before it
/// drops the oldest: [`MAX_LAG`]'s worth at its rate.
pub fn max_owed(spec: HotSpec) -> u64 {
    (spec.rate as f64 * MAX_LAG.as_secs_f64()) as u64
}

/// The stream the hot reader follows, where it follows one: its bytes so
/// far (the job adds them as it goes), and the bytes per hot read.
#[derive(Debug, Clone, Copy)]
pub struct Follow<'a> {
    /// The stream's bytes so far.
    pub streamed: &'a AtomicU64,
    /// Stream bytes per hot read.
    pub every: u64,
}

/// How the hot reader tells a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissProbe {
    /// `preadv2(RWF_NOWAIT)` fails with `EAGAIN`.
    RwfNowait,
    /// `read_at_flags(NOWAIT)` fails with `WouldBlock`.
    FolioNowait,
    /// `File::cachestat` of the block finds it not cached (the library
    /// ignores NOWAIT).
    Cachestat,
    /// None works here (the kernel refuses `RWF_NOWAIT`): misses are not
    /// counted.
    Unavailable,
}

impl MissProbe {
    /// How the report names it.
    pub fn describe(self) -> &'static str {
        match self {
            MissProbe::RwfNowait => "RWF_NOWAIT",
            MissProbe::FolioNowait => "ReadFlags::NOWAIT",
            MissProbe::Cachestat => "cachestat before each read (the library ignores NOWAIT)",
            MissProbe::Unavailable => "nothing (the kernel refuses RWF_NOWAIT here)",
        }
    }
}

/// The hot file, opened through the engine's cache.
pub enum HotFile {
    /// Through the kernel's page cache.
    Kernel(File),
    /// Through a foliocache cache (the job engine's).
    Folio(foliocache::File),
}

/// Counters the hot thread publishes after every read, on a line of their
/// own.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counters {
    reads: AtomicU64,
    misses: AtomicU64,
}

impl Counters {
    /// The reads so far, as the reader publishes them (a stream tethered
    /// to the reader waits on it: `crate::job::Tether`).
    pub fn reads(&self) -> &AtomicU64 {
        &self.reads
    }

    /// (reads, misses) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

/// What warming found, and how misses will be told.
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    /// Pages of the hot file cached after warming.
    pub cached_pages: u64,
    /// Pages of the hot file.
    pub pages: u64,
    /// How misses are told.
    pub probe: MissProbe,
}

/// Finds how misses of `file` can be told: one NOWAIT read of block 0,
/// which must not be cached yet (the caller dropped it, or the cache is
/// new).
///
/// # Errors
/// The probe read failed for another reason than a miss.
pub fn probe(file: &HotFile, bs: u64) -> Result<MissProbe> {
    let mut buf = AlignedBuf::new(bs as usize, 0)?;
    let b = buf.as_mut_slice();
    match file {
        HotFile::Kernel(f) => match sys::preadv2(f, b, 0, sys::RWF_NOWAIT) {
            // Already cached (the drop left it): the flag is accepted.
            Ok(_) => Ok(MissProbe::RwfNowait),
            Err(e) if e.raw_os_error() == Some(Errno::AGAIN.raw_os_error()) => {
                Ok(MissProbe::RwfNowait)
            }
            Err(e) if e.raw_os_error() == Some(Errno::OPNOTSUPP.raw_os_error()) => {
                Ok(MissProbe::Unavailable)
            }
            Err(e) => Err(e).context("hot reader: the RWF_NOWAIT probe read"),
        },
        HotFile::Folio(f) => match f.read_at_flags(b, 0, ReadFlags::NOWAIT) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(MissProbe::FolioNowait),
            // It read an uncached block instead of failing.
            Ok(_) => Ok(MissProbe::Cachestat),
            Err(e) => Err(e).context("hot reader: the ReadFlags::NOWAIT probe read"),
        },
    }
}

/// Reads every block of `bs` of the hot file once through its cache, in
/// a random order, and counts the pages cached after it (`mincore` for a
/// kernel file, `cachestat` for a foliocache one).
///
/// The order and the size are the hot reader's own: a working set that
/// random 4 KiB reads brought in sits in small folios (a miss reads little
/// more than its page), each on the LRU by itself. A sequential pass would
/// have readahead build large folios (2 MiB in foliocache, large ones in
/// ext4 too), and the LRU ages folios, not pages: the 64 MiB hot file of
/// `--quick` was 32 folios, each read 512 times a second at 16384 reads/s
/// and activated at once; only rates too low to count hits with (128
/// reads/s: 46 reads during the stream) let a cached stream evict any. Each page is read once: the first access, which leaves it
/// inactive (a second would activate it before the stream starts).
///
/// # Errors
/// A read, or the residency check, failed.
pub fn warm(file: &HotFile, path: &Path, bs: u64) -> Result<(u64, u64)> {
    let mut buf = AlignedBuf::new(bs as usize, 0)?;
    let b = buf.as_mut_slice();
    let len = match file {
        HotFile::Kernel(f) => f.metadata()?.len(),
        HotFile::Folio(f) => f.len(),
    };
    let blocks = len / bs;
    // Fisher-Yates over the blocks, with splitmix64.
    let mut order: Vec<u64> = (0..blocks).collect();
    for i in (1..order.len()).rev() {
        let z = crate::data::mix(0x5eed ^ i as u64);
        let j = ((z as u128 * (i as u128 + 1)) >> 64) as usize;
        order.swap(i, j);
    }
    for blk in order {
        let off = blk * bs;
        match file {
            HotFile::Kernel(f) => f.read_exact_at(b, off),
            HotFile::Folio(f) => f.read_exact_at(b, off),
        }
        .context("hot reader: warming the hot file")?;
    }
    let pages = len.div_ceil(PAGE as u64);
    let cached = match file {
        HotFile::Kernel(f) => {
            sys::resident_pages(f, len)
                .with_context(|| format!("mincore of {}", path.display()))?
                .0 as u64
        }
        HotFile::Folio(f) => f.cachestat(0, len).context("hot reader: cachestat")?.cached,
    };
    Ok((cached, pages))
}

/// The hot thread: random reads of `spec.bs` over `spec.file_size` until
/// `stop`, `spec.rate` a second on a deadline schedule (or back to back
/// for 0), publishing reads and misses to `counters` after each. Given
/// `follow`, read `i` is due instead once the stream has moved `i *
/// follow.every` bytes: the same stream bytes between two hot reads
/// whatever the stream's speed at the moment.
///
/// # Errors
/// A read failed (the thread stops at it).
pub fn run(
    file: &HotFile,
    spec: HotSpec,
    probe: MissProbe,
    stop: &AtomicBool,
    counters: &Counters,
    follow: Option<Follow<'_>>,
) -> io::Result<()> {
    let mut buf = AlignedBuf::new(spec.bs as usize, 0)?;
    let b = buf.as_mut_slice();
    let blocks = (spec.file_size / spec.bs).max(1);
    let mut offs = Offsets::new(true, spec.bs, blocks, 0, 0x9e37_79b9_7f4a_7c15);
    let (mut reads, mut misses) = (0u64, 0u64);
    let mut schedule =
        (spec.rate > 0 && follow.is_none()).then(|| Schedule::new(Instant::now(), spec.rate));
    let mut bytes = follow.map(|f| ByteSchedule {
        every: f.every,
        max_owed: max_owed(spec),
        next: 0,
    });
    while !stop.load(Ordering::Relaxed) {
        if let (Some(f), Some(sch)) = (follow, bytes.as_mut()) {
            if !sch.due(f.streamed.load(Ordering::Relaxed)) {
                std::thread::sleep(FOLLOW_POLL);
                continue;
            }
            sch.next += 1;
        } else if let Some(sch) = schedule.as_mut() {
            let wait = sch.wait(Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait.min(MAX_SLEEP));
                continue;
            }
            sch.advance();
        }
        let off = offs.next();
        let hit = read_one(file, probe, b, off)?;
        std::hint::black_box(&mut *b);
        reads += 1;
        misses += u64::from(!hit);
        counters.reads.store(reads, Ordering::Relaxed);
        counters.misses.store(misses, Ordering::Relaxed);
    }
    Ok(())
}

/// Reads `b` at `off` of the hot file, first without waiting as
/// `probe` allows: whether it was a hit (read without waiting for IO).
///
/// # Errors
/// The read failed.
pub fn read_one(file: &HotFile, probe: MissProbe, b: &mut [u8], off: u64) -> io::Result<bool> {
    let len = b.len();
    match (file, probe) {
        (HotFile::Kernel(f), MissProbe::RwfNowait) => {
            match sys::preadv2(f, b, off, sys::RWF_NOWAIT) {
                Ok(n) if n == len => Ok(true),
                Ok(n) => {
                    f.read_exact_at(&mut b[n..], off + n as u64)?;
                    Ok(false)
                }
                Err(e) if e.raw_os_error() == Some(Errno::AGAIN.raw_os_error()) => {
                    f.read_exact_at(b, off)?;
                    Ok(false)
                }
                Err(e) => Err(e),
            }
        }
        (HotFile::Kernel(f), _) => {
            f.read_exact_at(b, off)?;
            Ok(true)
        }
        (HotFile::Folio(f), MissProbe::FolioNowait) => {
            match f.read_at_flags(b, off, ReadFlags::NOWAIT) {
                Ok(n) if n == len => Ok(true),
                Ok(n) => {
                    f.read_exact_at(&mut b[n..], off + n as u64)?;
                    Ok(false)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    f.read_exact_at(b, off)?;
                    Ok(false)
                }
                Err(e) => Err(e),
            }
        }
        (HotFile::Folio(f), _) => {
            let pages = (len as u64).div_ceil(PAGE as u64);
            let cached = f.cachestat(off, len as u64)?.cached >= pages;
            f.read_exact_at(b, off)?;
            Ok(cached)
        }
    }
}

/// Waits until the hot thread has done its first read (or `finished`
/// says it ended), at most a few seconds.
pub fn wait_started(counters: &Counters, finished: impl Fn() -> bool) {
    let t = Instant::now();
    while counters.get().0 == 0 && !finished() && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_due_one_period_apart() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 1000);
        assert_eq!(s.wait(t0), Duration::ZERO);
        s.advance();
        assert_eq!(s.wait(t0), Duration::from_millis(1));
        assert_eq!(
            s.wait(t0 + Duration::from_micros(400)),
            Duration::from_micros(600)
        );
    }

    #[test]
    fn a_following_reader_reads_once_per_every_bytes_and_drops_what_it_owes_beyond_max() {
        let mut s = ByteSchedule {
            every: 64 << 10,
            max_owed: 10,
            next: 0,
        };
        assert!(s.due(0), "read 0 at once");
        s.next += 1;
        assert!(!s.due((64 << 10) - 1));
        assert!(s.due(64 << 10));
        s.next += 1;
        // 100 reads owed: only the last 10 are read.
        assert!(s.due(102 * (64 << 10)));
        assert_eq!(s.next, 92);
    }

    #[test]
    fn a_late_reader_catches_up_within_max_lag_only() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 1000);
        // 5 ms late: the 5 reads owed are due at once, none dropped.
        let now = t0 + Duration::from_millis(5);
        let mut burst = 0;
        while s.wait(now).is_zero() {
            s.advance();
            burst += 1;
        }
        assert_eq!(burst, 6, "reads 0..=5 are due by 5 ms");
        // 1 s late: only MAX_LAG's worth (10 reads at 1000/s) is read at
        // once; the rest is dropped.
        let now = t0 + Duration::from_secs(1);
        let mut burst = 0;
        while s.wait(now).is_zero() {
            s.advance();
            burst += 1;
        }
        assert!((10..=11).contains(&burst), "{burst}");
    }
}
