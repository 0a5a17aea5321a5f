//! The hot reader: a thread reading a small file at random beside a job,
//! through the same cache as the job's engine, counting which reads were
//! hits: does the job's stream push the hot data out?
//!
//! ```text
//!   warm the hot file into the cache (the engine's: foliocache's, or the
//!   kernel's page cache inside the run's memory cgroup)
//!   hot thread: loop { off = random block; hit = try NOWAIT;
//!                      if not, read normally; publish reads and misses }
//!   job runs ........................................ job ends; stop
//! ```
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
use std::time::Instant;

use anyhow::{Context, Result};
use foliocache::ReadFlags;

use crate::job::Offsets;
use crate::scenario::HotSpec;
use crate::sys::{self, AlignedBuf, PAGE};

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
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(MissProbe::RwfNowait),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(MissProbe::Unavailable),
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

/// Reads the whole hot file through its cache with normal reads (1 MiB at
/// a time) and counts the pages cached after it. A kernel file is warmed
/// by up to three buffered passes until `mincore` finds it all resident.
///
/// # Errors
/// A read, or the residency check, failed.
pub fn warm(file: &HotFile, path: &Path) -> Result<(u64, u64)> {
    match file {
        HotFile::Kernel(_) => {
            let ((resident, pages, _), _) = crate::engine::warm_kernel(&[path.to_path_buf()])?;
            Ok((resident as u64, pages as u64))
        }
        HotFile::Folio(f) => {
            let mut buf = vec![0u8; 1 << 20];
            let len = f.len();
            let mut off = 0;
            while off < len {
                let n = f
                    .read_at(&mut buf, off)
                    .context("hot reader: warming the hot file")?;
                if n == 0 {
                    break;
                }
                off += n as u64;
            }
            let cs = f.cachestat(0, len).context("hot reader: cachestat")?;
            Ok((cs.cached, len.div_ceil(PAGE as u64)))
        }
    }
}

/// The hot thread: random reads of `spec.bs` over `spec.file_size` until
/// `stop`, publishing reads and misses to `counters` after each.
///
/// # Errors
/// A read failed (the thread stops at it).
pub fn run(
    file: &HotFile,
    spec: HotSpec,
    probe: MissProbe,
    stop: &AtomicBool,
    counters: &Counters,
) -> io::Result<()> {
    let mut buf = AlignedBuf::new(spec.bs as usize, 0)?;
    let b = buf.as_mut_slice();
    let len = b.len();
    let blocks = (spec.file_size / spec.bs).max(1);
    let mut offs = Offsets::new(true, spec.bs, blocks, 0, 0x9e37_79b9_7f4a_7c15);
    let (mut reads, mut misses) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let off = offs.next();
        let hit = match (file, probe) {
            (HotFile::Kernel(f), MissProbe::RwfNowait) => {
                match sys::preadv2(f, b, off, sys::RWF_NOWAIT) {
                    Ok(n) if n == len => true,
                    Ok(n) => {
                        f.read_exact_at(&mut b[n..], off + n as u64)?;
                        false
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        f.read_exact_at(b, off)?;
                        false
                    }
                    Err(e) => return Err(e),
                }
            }
            (HotFile::Kernel(f), _) => {
                f.read_exact_at(b, off)?;
                true
            }
            (HotFile::Folio(f), MissProbe::FolioNowait) => {
                match f.read_at_flags(b, off, ReadFlags::NOWAIT) {
                    Ok(n) if n == len => true,
                    Ok(n) => {
                        f.read_exact_at(&mut b[n..], off + n as u64)?;
                        false
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        f.read_exact_at(b, off)?;
                        false
                    }
                    Err(e) => return Err(e),
                }
            }
            (HotFile::Folio(f), _) => {
                let pages = (len as u64).div_ceil(PAGE as u64);
                let cached = f.cachestat(off, len as u64)?.cached >= pages;
                f.read_exact_at(b, off)?;
                cached
            }
        };
        std::hint::black_box(&mut *b);
        reads += 1;
        misses += u64::from(!hit);
        counters.reads.store(reads, Ordering::Relaxed);
        counters.misses.store(misses, Ordering::Relaxed);
    }
    Ok(())
}

/// Waits until the hot thread has done its first read (or `finished`
/// says it ended), at most a few seconds.
pub fn wait_started(counters: &Counters, finished: impl Fn() -> bool) {
    let t = Instant::now();
    while counters.get().0 == 0 && !finished() && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
