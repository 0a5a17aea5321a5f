//! The engines a job runs on, and how each is made ready for a measured
//! run.
//!
//! | engine       | a read is                                   | a write is         |
//! |--------------|---------------------------------------------|--------------------|
//! | `foliocache` | `foliocache::File::read_at_flags` (this library; `foliocache[dontcache]`: with `ReadFlags::DONTCACHE`) | `File::write_at_flags` (`WriteFlags::DONTCACHE` for `[dontcache]`) |
//! | `kernel`     | buffered `pread` (kernel page cache)        | buffered `pwrite`  |
//! | `direct`     | `pread` on an `O_DIRECT` fd                 | `pwrite`, O_DIRECT |
//! | `dontcache`  | `preadv2(RWF_DONTCACHE)`                    | `pwritev2(..)`     |
//! | `mmap`       | a copy out of a `MAP_SHARED` mapping        | a copy into it     |
//! | `foliocache[qd=N]` | `N` reads queued on a `foliocache::ReadQueue`, one taken and one queued at a time | - (read jobs only) |
//! | `direct[qd=N]` | an io_uring of depth `N` on an `O_DIRECT` fd, kept full (`sys::ring`) | - (read jobs only) |
//! | `anon`       | -                                           | a `memset` of fresh anonymous memory (populate only) |
//! | `fuse`       | buffered `pread` of the file under a foliocache FUSE mount | `pwrite` there |
//! | `fuse-null`  | buffered `pread` under a mount of `foliocache_fuse::NullFs` (zeros, no cache: the crossing alone) | - |
//!
//! `qd=N` (1 to 1024, `foliocache` and `direct` only) keeps `N` reads in
//! flight from each job thread ([`Prepared::Queued`],
//! [`Prepared::Ring`]; the loops are `job`'s): `foliocache[qd=N]` queues
//! `N` reads on a `ReadQueue` (each read's misses go to the cache's IO
//! engine when it is queued), then takes the oldest, counts it with the
//! time from its push as its latency, and queues the next offset;
//! `direct[qd=N]` fills a
//! ring of `N` reads of its own and queues the next offset in each slot as
//! its read completes, a read's latency running from its submission to
//! its completion. Each engine is prepared (warmed, dropped, held to a
//! budget) as without `qd=`.
//!
//! The `fuse` engine mounts the data files' directory through
//! `foliocache-fuse` in this process (its serving threads are this
//! process's, so their CPU time is in the run's CPU figures) at a
//! temporary mount point, with a cache of the foliocache engine's
//! capacity, and does plain `pread`/`pwrite` on the files there: the
//! mount opens them direct IO toward the kernel, so every read crosses
//! into the server and is served from its foliocache. A warm run warms it
//! by one read pass through the mount; a cold run, a write job, and a run
//! after another engine wrote the files get a fresh mount (a fresh
//! cache). It is unmounted (dirty data written back) when the bench ends,
//! also on an error; where FUSE is unavailable (`foliocache_fuse::unavailable`) the
//! bench leaves the engine out with a note.
//!
//! The `fuse-null` engine mounts the same directory the same way but
//! through `foliocache_fuse::NullFs`, which answers every read with zeros
//! from one buffer and caches nothing: the FUSE crossing alone, the
//! ceiling of any FUSE server on this kernel, measured in the same run as
//! `fuse` (read jobs only; `--verify` does not check its zeros).
//!
//! The populate scenario's jobs write into memory, not files
//! ([`JobSpec::memory`]): `foliocache` into a memfile (`Cache::memfile`,
//! `File::write_at`; with `grab=single` its writes create their folios one
//! at a time, `File::set_write_insert(Insert::Single)`), `kernel` into a
//! `memfd` with `pwrite`, `anon` into a fresh anonymous mapping with
//! `memset`. Every run gets fresh memory (a new cache, mapping or memfd),
//! and the time to build foliocache's cache (its arena's populate with
//! `populate=eager`) is part of the run.
//!
//! Before a warm run (the default), the caching engines are warmed right
//! before their measurement: foliocache by one read pass through its cache
//! (whose arena is populated when it is built, outside any measurement),
//! the kernel and mmap by a buffered pass over the file (an idle-memory
//! reclaimer here evicts page cache untouched for 60 s, so it is done again
//! before every run) with `mincore` checking residency; mmap's pages are
//! also pre-faulted. `direct` needs no warming, and `dontcache` starts with
//! the file dropped from the page cache, so its reads are the uncached
//! reads it exists for; likewise `foliocache[dontcache]` starts with a
//! fresh, empty cache. A `--cold` run drops every file from the page cache
//! before every engine and gives foliocache a fresh cache. For a write job
//! foliocache opens the files anew for every run (for writing, through
//! `Cache::open_options`), so that what it caches is what the other
//! engines wrote since; its warm pass then reads them back in.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use backing::aio::IoEngineConfig;
use foliocache::{Cache, CacheStats, Populate, ReadFlags, ReadaheadConfig, WriteFlags};
use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::spec::engine::{EngineKind, EngineSpec, FolioOptions};
use crate::spec::JobSpec;
use crate::sys::{self, huge_mapped_all, AlignedBuf, AnonMap, Mapping, Mmap};
use crate::units::fmt_size;

/// Buffered passes at most, to get a file fully into the page cache.
const WARM_PASSES: u32 = 3;

/// One thread's way of doing IO on its file. The job loop is generic over
/// it, so each engine's loop is compiled separately with no dynamic
/// dispatch: the same loop, the same timing, only the IO call differs.
pub trait BlockIo: Send {
    /// Reads `buf.len()` bytes at `off`; the bytes read.
    ///
    /// # Errors
    /// The engine's IO error.
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes `buf` at `off`; the bytes written.
    ///
    /// # Errors
    /// The engine's IO error.
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize>;

    /// A read for `--consume`: the bytes read, and their
    /// [`sum_words`](crate::consume::sum_words). A copy engine (this
    /// default) reads into `buf` and sums it; an engine that can reach
    /// the bytes where they lie sums them there and leaves `buf` alone.
    ///
    /// # Errors
    /// The engine's IO error.
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        copy_and_sum(self, buf, off)
    }
}

/// `--consume` for a copy: reads into `buf` and sums what was read.
#[inline]
fn copy_and_sum<B: BlockIo + ?Sized>(
    io: &mut B,
    buf: &mut [u8],
    off: u64,
) -> io::Result<(usize, u64)> {
    let n = io.read(buf, off)?;
    Ok(summed(&buf[..n]))
}

/// `--consume`'s result for `bytes`: their count and their sum.
#[inline]
fn summed(bytes: &[u8]) -> (usize, u64) {
    (bytes.len(), crate::consume::sum_words(bytes))
}

/// `pread`/`pwrite` on a file descriptor: `kernel` (buffered) or `direct`
/// (an `O_DIRECT` descriptor).
pub struct PreadIo<'a>(pub &'a File);

impl BlockIo for PreadIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.read_at(buf, off)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0.write_at(buf, off)
    }
}

/// `preadv2`/`pwritev2` with `RWF_DONTCACHE`.
pub struct DontcacheIo<'a>(pub &'a File);

impl BlockIo for DontcacheIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        sys::preadv2(self.0, buf, off, sys::RWF_DONTCACHE)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        sys::pwritev2(self.0, buf, off, sys::RWF_DONTCACHE)
    }
}

/// Copies out of and into a mapping this job thread owns: `&mut`, so no
/// other thread reads or writes it meanwhile.
pub struct MmapIo<'a>(pub &'a mut Mmap);

impl BlockIo for MmapIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.copy_out(off as usize, buf)?;
        Ok(buf.len())
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        Ok(summed(self.0.slice(off as usize, buf.len())?))
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0.copy_in(off as usize, buf)?;
        Ok(buf.len())
    }
}

/// Copies out of a mapping that all the job's threads read (`--shared`
/// with several threads, `mmap` or `anon`; `memcpy`'s anonymous copy of
/// the file): read-only, since a write would race the other threads'
/// copies (`validate` refuses such write jobs before they get here).
/// `--consume` sums the bytes in place if the second field says so
/// (`mmap`), else in the buffer copied to (`memcpy`, a copy engine).
pub struct SharedMapIo<'a>(pub &'a Mapping, pub bool);

impl BlockIo for SharedMapIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.copy_out(off as usize, buf)?;
        Ok(buf.len())
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        if !self.1 {
            return copy_and_sum(self, buf, off);
        }
        Ok(summed(self.0.slice(off as usize, buf.len())?))
    }
    fn write(&mut self, _: &[u8], _: u64) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "threads writing one shared mapping would race: drop --shared for mmap writes",
        ))
    }
}

/// One write through foliocache: `File::write_at_flags`, uncached if
/// `dontcache`.
#[inline]
fn folio_write(f: &foliocache::File, buf: &[u8], off: u64, dontcache: bool) -> io::Result<usize> {
    let flags = if dontcache {
        WriteFlags::DONTCACHE
    } else {
        WriteFlags::NONE
    };
    f.write_at_flags(buf, off, flags)
}

/// `File::sync_all` through foliocache (a read-only handle has nothing
/// to write back).
fn folio_sync(f: &foliocache::File) -> io::Result<()> {
    if f.is_writable() {
        f.sync_all()
    } else {
        Ok(())
    }
}

/// Opens `path` through `cache`, for reading and, if `write`, writing.
fn folio_open(cache: &Cache, path: &std::path::Path, write: bool) -> io::Result<foliocache::File> {
    if write {
        cache.open_options().read(true).write(true).open(path)
    } else {
        cache.open(path)
    }
}

/// A memory file of foliocache (`Cache::memfile`), empty.
fn folio_memfile(cache: &Cache, name: &str) -> io::Result<foliocache::File> {
    cache.memfile(name, 0)
}

/// A `memset` of fresh anonymous memory for every write (`anon`), into a
/// mapping this job thread owns (`&mut`).
pub struct AnonIo<'a>(pub &'a mut AnonMap);

impl BlockIo for AnonIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.copy_out(off as usize, buf)?;
        Ok(buf.len())
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0
            .fill(off as usize, buf.len(), buf.first().copied().unwrap_or(0))?;
        Ok(buf.len())
    }
}

/// How the foliocache engine does its IO in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FolioMode {
    /// The flags of every read.
    pub read: ReadFlags,
    /// Every write is uncached (`WriteFlags::DONTCACHE`).
    pub dontcache_writes: bool,
    /// Reads pin (`foliocache[pin]`: `File::pin`): the pinned bytes are
    /// copied to the buffer, or with `--consume` summed in place.
    pub pin: bool,
}

/// Reads and writes through foliocache's `File`.
pub struct FolioIo<'a>(pub &'a foliocache::File, pub FolioMode);

impl BlockIo for FolioIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if self.1.pin {
            let p = self.0.pin(off, buf.len())?;
            buf[..p.len()].copy_from_slice(&p);
            return Ok(p.len());
        }
        self.0.read_at_flags(buf, off, self.1.read)
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        if self.1.pin {
            return Ok(summed(&self.0.pin(off, buf.len())?));
        }
        copy_and_sum(self, buf, off)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        folio_write(self.0, buf, off, self.1.dontcache_writes)
    }
}

/// An engine ready to run a job: its open files (one per data file), or
/// its memory (a memory job).
pub enum Prepared {
    /// `kernel` or `direct` (or, for a memory job, `kernel`'s memfds).
    Pread(Vec<File>),
    /// `dontcache`.
    Dontcache(Vec<File>),
    /// `mmap`.
    Mmap(Vec<Mmap>),
    /// `foliocache`, and how it does its IO.
    Folio(Vec<foliocache::File>, FolioMode),
    /// `anon`: fresh anonymous mappings.
    Anon(Vec<AnonMap>),
    /// `memcpy`: anonymous mappings holding the data files' bytes, and
    /// whether `--consume` sums them in place (`memcpy[inplace]`).
    Memcpy(Vec<AnonMap>, bool),
    /// `foliocache[qd=N]`: its files, read `N` at a time through a
    /// `ReadQueue`.
    Queued(Vec<foliocache::File>, usize),
    /// `direct[qd=N]`: its `O_DIRECT` files, read through an io_uring of
    /// depth `N` per job thread.
    Ring(Vec<File>, usize),
}

impl Prepared {
    /// Makes what the run wrote durable and waits for it: `fsync` of each
    /// file, `msync(MS_SYNC)` of each mapping, `File::sync_all` through
    /// foliocache; nothing for anonymous memory. The write jobs' figures
    /// include it.
    ///
    /// # Errors
    /// The sync's IO error.
    pub fn sync(&self) -> io::Result<()> {
        match self {
            Prepared::Pread(fs) | Prepared::Dontcache(fs) | Prepared::Ring(fs, _) => {
                fs.iter().try_for_each(File::sync_all)
            }
            Prepared::Mmap(ms) => ms.iter().try_for_each(Mmap::sync),
            Prepared::Folio(fs, _) | Prepared::Queued(fs, _) => fs.iter().try_for_each(folio_sync),
            Prepared::Anon(_) | Prepared::Memcpy(..) => Ok(()),
        }
    }

    /// Turns the kernel's readahead off for the engine's files
    /// (`POSIX_FADV_RANDOM`: a read then reads what it asks for and no
    /// more; `MADV_RANDOM` for a mapping: a fault reads the page it
    /// wants); false for an engine whose reads it does not reach
    /// (foliocache, memory).
    ///
    /// # Errors
    /// `posix_fadvise` or `madvise` failed.
    pub fn advise_random(&self) -> io::Result<bool> {
        use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
        match self {
            Prepared::Pread(fs) | Prepared::Dontcache(fs) | Prepared::Ring(fs, _) => {
                for f in fs {
                    posix_fadvise(f, 0, 0, PosixFadviseAdvice::POSIX_FADV_RANDOM)?;
                }
                Ok(true)
            }
            Prepared::Mmap(ms) => {
                ms.iter().try_for_each(Mmap::advise_random)?;
                Ok(true)
            }
            Prepared::Folio(..)
            | Prepared::Queued(..)
            | Prepared::Anon(_)
            | Prepared::Memcpy(..) => Ok(false),
        }
    }
}

/// Facts about an engine's run besides its figures.
#[derive(Debug, Default)]
pub struct Setup {
    /// Lines for the report (warnings start with "warning:").
    pub notes: Vec<String>,
    /// Page-cache residency of the data after warming or dropping:
    /// (resident pages, pages, "after warming" / "after drop").
    pub residency: Option<(usize, usize, &'static str)>,
    /// `mmap` and `memcpy`: bytes of the mappings the kernel maps with
    /// 2 MiB entries before the run (the page cache's 2 MiB folios; the
    /// anonymous copy's transparent huge pages), and bytes mapped.
    pub huge_mapped: Option<(u64, u64)>,
    /// foliocache's figures before the measurement.
    pub folio_before: Option<FolioBefore>,
    /// A memory job's setup, part of its run: the time to map the memory,
    /// make the memfd, or build foliocache's cache (its arena's populate
    /// with `populate=eager`) and open the file.
    pub setup_time: Option<Duration>,
    /// The `fuse` engine's cache figures before the measurement.
    pub fuse_before: Option<FuseFigures>,
}

/// foliocache's state before a measured run.
#[derive(Debug, Clone)]
pub struct FolioBefore {
    /// The cache's statistics right before the run.
    pub stats: CacheStats,
    /// The warm pass's duration (None for a cold run).
    pub warm: Option<Duration>,
    /// How the arena was populated.
    pub populate: Populate,
    /// The cache's largest folio, if set by an option.
    pub max_folio: Option<u64>,
    /// The backing's note (O_DIRECT or the buffered fallback).
    pub backing_note: String,
    /// Whether the backing reads with O_DIRECT.
    pub backing_direct: bool,
    /// The engine that runs the cache's readahead IO
    /// ([`Cache::io_engine_name`]).
    pub io_engine: String,
    /// The cache's readahead settings.
    pub readahead: ReadaheadConfig,
}

/// A foliocache cache kept across the runs of one bench invocation, with
/// the files opened through it.
struct FolioState {
    cache: Cache,
    capacity: u64,
    opts: FolioOptions,
    files: HashMap<PathBuf, foliocache::File>,
}

/// State kept across runs: foliocache caches, by engine label, so one
/// cache (and its populate cost) serves every job over the same data.
#[derive(Default)]
pub struct Engines {
    folio: HashMap<String, FolioState>,
    /// The `fuse` engine's mount, kept across its runs.
    fuse: Option<FuseMount>,
    /// The `fuse-null` engine's mount, kept across its runs.
    fuse_null: Option<FuseMount>,
    /// Another engine wrote the data files since the mount was made (its
    /// cache may hold what they were before).
    fuse_stale: bool,
}

/// How a run treats caches.
#[derive(Debug, Clone, Copy)]
pub struct RunMode {
    /// `--cold`.
    pub cold: bool,
    /// foliocache's capacity (`--capacity`, or 1.25x the data).
    pub capacity: u64,
    /// `--consume`: every read's bytes are summed.
    pub consume: bool,
}

impl Engines {
    /// Opens and warms (or drops) `spec`'s engine over `files` for `job`.
    ///
    /// # Errors
    /// Opening or reading the files, building a cache, an engine the
    /// filesystem or kernel does not support.
    pub fn prepare(
        &mut self,
        spec: &EngineSpec,
        job: &JobSpec,
        files: &[PathBuf],
        mode: RunMode,
    ) -> Result<(Prepared, Setup)> {
        if job.memory {
            return self.prepare_memory(spec, job, mode);
        }
        let write = job.rw.is_write();
        if write && spec.qd.is_some() {
            bail!(
                "{}: qd=N engines only read: use them in read jobs",
                spec.label
            );
        }
        if write && spec.kind != EngineKind::Fuse {
            self.fuse_stale = true;
        }
        let mut setup = Setup::default();
        if mode.cold || !spec.cached() {
            if mode.cold || spec.kind == EngineKind::Dontcache {
                setup.residency = Some(drop_files(files)?);
            }
        } else if !matches!(spec.kind, EngineKind::Foliocache | EngineKind::Fuse) {
            let (residency, passes) = warm_kernel(files)?;
            if passes > 1 {
                setup.notes.push(format!(
                    "the kernel page cache took {passes} buffered passes to warm"
                ));
            }
            setup.residency = Some(residency);
        }
        let prepared = match spec.kind {
            EngineKind::Kernel => Prepared::Pread(open_all(files, write, false)?),
            EngineKind::Direct => {
                let fds = open_all(files, write, true).with_context(|| {
                    "direct engine: opening with O_DIRECT (the filesystem may refuse it)"
                })?;
                match spec.qd {
                    Some(depth) => Prepared::Ring(fds, depth),
                    None => Prepared::Pread(fds),
                }
            }
            EngineKind::Dontcache => {
                let fds = open_all(files, write, false)?;
                probe_dontcache(&fds[0])?;
                Prepared::Dontcache(fds)
            }
            EngineKind::Mmap => {
                let fds = open_all(files, write, false)?;
                let maps = map_data_files(&fds, job.file_size as usize, write)
                    .context("mmap engine: mapping the data file")?;
                if !mode.cold {
                    // Residency is what the mapping sees once faulted in.
                    let (mut resident, mut pages) = (0, 0);
                    for m in &maps {
                        m.prefault(write);
                        let (r, n) = m.resident_pages().context("mincore")?;
                        resident += r;
                        pages += n;
                    }
                    setup.residency = Some((resident, pages, "after warming"));
                    setup.huge_mapped = Some(
                        huge_mapped_all(maps.iter().map(|m| &**m))
                            .context("reading /proc/self/smaps")?,
                    );
                }
                Prepared::Mmap(maps)
            }
            EngineKind::Anon => {
                bail!("anon engine: it only populates memory (--scenario populate)")
            }
            EngineKind::Memcpy => {
                if write {
                    bail!(
                        "memcpy engine: it copies out of memory holding the file: read jobs only"
                    );
                }
                let len =
                    usize::try_from(job.file_size).context("--size too large for this machine")?;
                let maps = open_all(files, false, false)?
                    .iter()
                    .map(|f| {
                        let mut m = AnonMap::new(len)?;
                        m.advise_huge_pages()?;
                        m.load(f)?;
                        Ok(m)
                    })
                    .collect::<io::Result<Vec<AnonMap>>>()
                    .context("memcpy engine: reading the data file into memory")?;
                setup.huge_mapped = Some(
                    huge_mapped_all(maps.iter().map(|m| &**m))
                        .context("reading /proc/self/smaps")?,
                );
                let read = if spec.inplace && mode.consume {
                    "each read's bytes are summed where they lie (zero copy's limit)"
                } else {
                    "each read is a copy_from_slice out of it"
                };
                setup.notes.push(format!(
                    "{}: the data file's {} in anonymous memory (transparent huge pages asked \
                     for), read in before the run; {read}",
                    spec.label,
                    fmt_size(job.file_size)
                ));
                Prepared::Memcpy(maps, spec.inplace)
            }
            EngineKind::Fuse => {
                let paths = self.fuse(files, mode, write, &mut setup)?;
                Prepared::Pread(open_all(&paths, write, false).context("fuse engine")?)
            }
            EngineKind::FuseNull => {
                if write {
                    bail!("fuse-null engine: its files are read-only zeros: read jobs only");
                }
                let paths = self.fuse_null(files, &mut setup)?;
                Prepared::Pread(open_all(&paths, false, false).context("fuse-null engine")?)
            }
            EngineKind::Foliocache => {
                let (handles, before) = self.folio(spec, files, mode, write)?;
                setup.folio_before = Some(before);
                if spec.folio.dontcache && !mode.cold {
                    setup.notes.push(
                        "foliocache[dontcache] starts with an empty cache (not warmed): its reads \
                         are uncached reads"
                            .into(),
                    );
                }
                match spec.qd {
                    Some(depth) => Prepared::Queued(handles, depth),
                    None => Prepared::Folio(handles, spec.folio.mode()),
                }
            }
        };
        if let Some((resident, pages, when)) = setup.residency {
            let want_all = when == "after warming";
            if want_all && resident < pages {
                setup.notes.push(format!(
                    "warning: kernel page cache holds {resident} of {pages} pages after warming: \
                     the run is not fully cached"
                ));
            } else if !want_all && resident > 0 {
                setup.notes.push(format!(
                    "warning: {resident} of {pages} pages still in the kernel page cache after the drop"
                ));
            }
        }
        Ok((prepared, setup))
    }

    /// A memory job's engine (the populate scenario): fresh memory for
    /// every run: anonymous mappings (`anon`), memfds (`kernel`), or a new
    /// cache with a memfile per job thread (`foliocache`). The setup's
    /// time is part of the run.
    fn prepare_memory(
        &mut self,
        spec: &EngineSpec,
        job: &JobSpec,
        mode: RunMode,
    ) -> Result<(Prepared, Setup)> {
        let size = usize::try_from(job.file_size).context("--size too large for this machine")?;
        let n = job.nfiles();
        let mut setup = Setup::default();
        // Free the last run's cache before timing the new one.
        self.folio.remove(&spec.label);
        let t = Instant::now();
        let prepared = match spec.kind {
            EngineKind::Anon => Prepared::Anon(
                (0..n)
                    .map(|_| {
                        let m = AnonMap::new(size)?;
                        if spec.anon.thp {
                            m.advise_huge_pages()?;
                        }
                        if spec.anon.populate {
                            m.populate_write()?;
                        }
                        Ok(m)
                    })
                    .collect::<io::Result<_>>()
                    .with_context(|| format!("anon engine: mapping {}", fmt_size(job.file_size)))?,
            ),
            EngineKind::Kernel => Prepared::Pread(
                (0..n)
                    .map(|i| sys::memfd(&format!("foliocache-bench-{i}")))
                    .collect::<io::Result<_>>()
                    .context("kernel engine: memfd_create")?,
            ),
            EngineKind::Foliocache => {
                let cache = build_cache(spec, mode.capacity)?;
                let handles = (0..n)
                    .map(|i| folio_memfile(&cache, &format!("populate-{i}")))
                    .collect::<io::Result<Vec<_>>>()
                    .context("foliocache engine: opening the memory file")?;
                for f in &handles {
                    f.set_write_insert(spec.folio.grab);
                }
                setup.folio_before = Some(FolioBefore {
                    stats: cache.stats(),
                    warm: None,
                    populate: spec.folio.populate,
                    max_folio: spec.folio.max_folio,
                    backing_note: handles[0].info().note.clone(),
                    backing_direct: handles[0].info().is_direct(),
                    io_engine: cache.io_engine_name(),
                    readahead: spec.folio.readahead(),
                });
                // Kept with the cache until it is released, so that the
                // figures after the run still see the data.
                let files = handles
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (PathBuf::from(format!("memory:{i}")), f.clone()))
                    .collect();
                self.folio.insert(
                    spec.label.clone(),
                    FolioState {
                        cache,
                        capacity: mode.capacity,
                        opts: spec.folio.clone(),
                        files,
                    },
                );
                Prepared::Folio(handles, spec.folio.mode())
            }
            other => bail!(
                "{} engine: does not populate memory (the populate scenario's engines: \
                 foliocache, kernel, anon)",
                other.name()
            ),
        };
        setup.setup_time = Some(t.elapsed());
        Ok((prepared, setup))
    }

    /// The foliocache engine: a cache of the right capacity (kept from an
    /// earlier run, or built now; always new for a cold run and for an
    /// uncached engine), the files opened through it (for a write job,
    /// opened anew for each run, for writing, so that the cache holds
    /// what the other engines wrote since), and, for a warm run of a
    /// cached engine, one read pass.
    fn folio(
        &mut self,
        spec: &EngineSpec,
        files: &[PathBuf],
        mode: RunMode,
        write: bool,
    ) -> Result<(Vec<foliocache::File>, FolioBefore)> {
        let fresh = mode.cold || spec.folio.dontcache;
        let reuse = self
            .folio
            .get(&spec.label)
            .is_some_and(|s| !fresh && s.capacity == mode.capacity && s.opts == spec.folio);
        if !reuse {
            // Free the old arena before mapping a new one.
            self.folio.remove(&spec.label);
            let cache = build_cache(spec, mode.capacity)?;
            self.folio.insert(
                spec.label.clone(),
                FolioState {
                    cache,
                    capacity: mode.capacity,
                    opts: spec.folio.clone(),
                    files: HashMap::new(),
                },
            );
        }
        let state = self
            .folio
            .get_mut(&spec.label)
            .context("foliocache engine: no cache")?;
        if write {
            // Dropping the handles drops their mappings and cached folios.
            state.files.clear();
        }
        let mut handles = Vec::with_capacity(files.len());
        for p in files {
            if !state.files.contains_key(p) {
                let f = folio_open(&state.cache, p, write)
                    .with_context(|| format!("foliocache engine: opening {}", p.display()))?;
                state.files.insert(p.clone(), f);
            }
            let f = state.files[p].clone();
            f.set_write_insert(spec.folio.grab);
            handles.push(f);
        }
        let warm = if fresh {
            None
        } else {
            let t = Instant::now();
            let mut buf = vec![0u8; 2 << 20];
            for f in &handles {
                let mut off = 0;
                while off < f.len() {
                    let n = f.read_at(&mut buf, off).context("foliocache warm pass")?;
                    if n == 0 {
                        break;
                    }
                    off += n as u64;
                }
            }
            Some(t.elapsed())
        };
        let before = FolioBefore {
            stats: state.cache.stats(),
            warm,
            populate: spec.folio.populate,
            max_folio: spec.folio.max_folio,
            backing_note: handles[0].info().note.clone(),
            backing_direct: handles[0].info().is_direct(),
            io_engine: state.cache.io_engine_name(),
            readahead: spec.folio.readahead(),
        };
        Ok((handles, before))
    }

    /// Opens `path` through the cache of the foliocache engine `label`
    /// (prepared before), for a reader beside the job.
    ///
    /// # Errors
    /// No cache for `label`, or opening the file.
    pub fn open_folio(&mut self, label: &str, path: &std::path::Path) -> Result<foliocache::File> {
        let state = self
            .folio
            .get_mut(label)
            .with_context(|| format!("foliocache engine {label}: no cache"))?;
        if let Some(f) = state.files.get(path) {
            return Ok(f.clone());
        }
        let f = state
            .cache
            .open(path)
            .with_context(|| format!("foliocache engine: opening {}", path.display()))?;
        state.files.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }

    /// foliocache's statistics for the engine `label` once its readahead
    /// IO in flight (windows a time-based run left behind) has completed.
    pub fn folio_stats(&self, label: &str) -> Option<CacheStats> {
        self.folio.get(label).map(|s| {
            s.cache.wait_io_idle();
            s.cache.stats()
        })
    }

    /// Where the memory of engine `label`'s cache goes now
    /// (`Cache::memory`).
    pub fn folio_memory(&self, label: &str) -> Option<foliocache::MemoryUsage> {
        self.folio.get(label).map(|s| s.cache.memory())
    }

    /// Frees the cache of engine `label` (after a cold run, whose cache
    /// the next run would not reuse: so two foliocache engines' caches of
    /// a cold scenario are never mapped at once).
    pub fn release(&mut self, label: &str) {
        if let Some(s) = self.folio.remove(label) {
            s.cache.wait_io_idle();
        }
        let mount = if label == EngineKind::Fuse.name() {
            self.fuse.take()
        } else if label == EngineKind::FuseNull.name() {
            self.fuse_null.take()
        } else {
            None
        };
        if let Some(m) = mount {
            // An unmount's failure is reported by the next mount's.
            let _ = m.unmount();
        }
    }

    /// Frees every cache (their arenas) and unmounts the `fuse` engine's
    /// mount before the data files go.
    ///
    /// # Errors
    /// The unmount's (or the writeback of the mount's dirty data).
    pub fn clear(&mut self) -> Result<()> {
        self.folio.clear();
        let null = self.fuse_null.take().map_or(Ok(()), FuseMount::unmount);
        self.fuse.take().map_or(Ok(()), FuseMount::unmount)?;
        null
    }

    /// The `fuse` engine: its mount (kept from an earlier run, or made
    /// now: always new for a cold run, a write job, or after another
    /// engine wrote the files), warmed by one read pass through the mount
    /// for a warm run; the data files' paths under the mount.
    fn fuse(
        &mut self,
        files: &[PathBuf],
        mode: RunMode,
        write: bool,
        setup: &mut Setup,
    ) -> Result<Vec<PathBuf>> {
        let backing = common_dir(files)?;
        let reuse = self.fuse.as_ref().is_some_and(|m| {
            !mode.cold
                && !write
                && !self.fuse_stale
                && m.capacity == Some(mode.capacity)
                && m.backing == backing
        });
        if !reuse {
            if let Some(m) = self.fuse.take() {
                m.unmount()?;
            }
            self.fuse = Some(FuseMount::new(&backing, Some(mode.capacity))?);
            self.fuse_stale = false;
        }
        let m = self.fuse.as_ref().context("fuse engine: no mount")?;
        let paths = files
            .iter()
            .map(|p| m.path_of(p))
            .collect::<Result<Vec<_>>>()?;
        setup.notes.push(format!(
            "fuse: {} served at {} by foliocache-fuse in this process ({} threads, a cache of {}; \
             the server's CPU time is in the run's figures)",
            backing.display(),
            m.mountpoint().display(),
            m.threads,
            fmt_size(mode.capacity)
        ));
        if !mode.cold {
            let t = Instant::now();
            let mut buf = vec![0u8; 1 << 20];
            for p in &paths {
                let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
                let len = f.metadata()?.len();
                let mut off = 0;
                while off < len {
                    let n = f.read_at(&mut buf, off).context("fuse engine: warm pass")?;
                    if n == 0 {
                        break;
                    }
                    off += n as u64;
                }
            }
            setup.notes.push(format!(
                "fuse: warmed by one read pass through the mount in {:.2} s",
                t.elapsed().as_secs_f64()
            ));
        }
        if let Some(s) = m.cache_figures() {
            setup.fuse_before = Some(s);
        }
        Ok(paths)
    }

    /// The `fuse-null` engine: its mount of `files`' directory (kept from
    /// an earlier run; the files' sizes are read at the mount); the data
    /// files' paths under it.
    fn fuse_null(&mut self, files: &[PathBuf], setup: &mut Setup) -> Result<Vec<PathBuf>> {
        let backing = common_dir(files)?;
        if self
            .fuse_null
            .as_ref()
            .is_some_and(|m| m.backing != backing)
        {
            if let Some(m) = self.fuse_null.take() {
                m.unmount()?;
            }
        }
        if self.fuse_null.is_none() {
            self.fuse_null = Some(FuseMount::new(&backing, None)?);
        }
        let m = self
            .fuse_null
            .as_ref()
            .context("fuse-null engine: no mount")?;
        setup.notes.push(format!(
            "fuse-null: {}'s files as zeros served at {} by foliocache_fuse::NullFs in this \
             process ({} threads, no cache: the FUSE crossing alone)",
            backing.display(),
            m.mountpoint().display(),
            m.threads,
        ));
        files.iter().map(|p| m.path_of(p)).collect()
    }

    /// The `fuse` engine's cache figures now (the mount's control file),
    /// if it is mounted.
    pub fn fuse_figures(&self) -> Option<FuseFigures> {
        self.fuse.as_ref().and_then(FuseMount::cache_figures)
    }
}

/// The one directory all of `files` are in, canonical.
fn common_dir(files: &[PathBuf]) -> Result<PathBuf> {
    let mut dir: Option<PathBuf> = None;
    for p in files {
        let d = p
            .parent()
            .with_context(|| format!("fuse engine: {} has no directory", p.display()))?
            .canonicalize()
            .with_context(|| format!("fuse engine: {}", p.display()))?;
        match &dir {
            Some(x) if *x != d => bail!(
                "fuse engine: the data files are in two directories ({} and {})",
                x.display(),
                d.display()
            ),
            _ => dir = Some(d),
        }
    }
    dir.context("fuse engine: no data files")
}

/// A cache's figures as the mount's control file gives them.
#[derive(Debug, Clone, Copy, Default)]
pub struct FuseFigures {
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads that missed.
    pub misses: u64,
    /// Reads from the backing.
    pub io_reads: u64,
}

/// The `fuse` engine's mount: the data directory served by
/// `foliocache-fuse` in this process at a temporary mount point (or the
/// `fuse-null` engine's, by its `NullFs`); also the `programs` scenario's
/// mount, which `db_bench` runs through.
/// Dropping it unmounts (errors ignored); [`FuseMount::unmount`] reports
/// them.
pub(crate) struct FuseMount {
    session: Option<fuser::BackgroundSession>,
    /// The mount point (removed after the unmount: fields drop after
    /// [`Drop::drop`]).
    dir: tempfile::TempDir,
    backing: PathBuf,
    /// The cache's capacity (`None`: a `NullFs` mount).
    capacity: Option<u64>,
    threads: usize,
}

impl FuseMount {
    /// Mounts `backing` with a cache of `capacity` bytes (`None`: its
    /// files as zeros, by `NullFs`) at a new temporary directory (outside
    /// `backing`).
    pub(crate) fn new(backing: &std::path::Path, capacity: Option<u64>) -> Result<FuseMount> {
        let mk = |at: &std::path::Path| {
            tempfile::Builder::new()
                .prefix("foliocache-bench-mnt-")
                .tempdir_in(at)
        };
        let tmp = std::env::temp_dir();
        let tmp = tmp.canonicalize().unwrap_or(tmp);
        let dir = if tmp.starts_with(backing) {
            // The mount point must not be inside the backing directory.
            let parent = backing
                .parent()
                .context("fuse engine: the data directory is `/`: no place for a mount point")?;
            mk(parent)
        } else {
            mk(&tmp)
        }
        .context("fuse engine: making a temporary mount point")?;
        let opts = foliocache_fuse::MountOptions::new(
            usize::try_from(capacity.unwrap_or(0)).context("fuse engine: capacity too large")?,
        );
        let session = match capacity {
            Some(_) => foliocache_fuse::spawn(backing, dir.path(), &opts),
            None => foliocache_fuse::spawn_null(backing, dir.path(), &opts),
        }
        .with_context(|| {
            format!(
                "fuse engine: mounting {} at {}",
                backing.display(),
                dir.path().display()
            )
        })?;
        Ok(FuseMount {
            session: Some(session),
            dir,
            backing: backing.to_path_buf(),
            capacity,
            threads: opts.threads,
        })
    }

    pub(crate) fn mountpoint(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `p` (a file of the backing directory) under the mount.
    fn path_of(&self, p: &std::path::Path) -> Result<PathBuf> {
        let name = p
            .file_name()
            .with_context(|| format!("fuse engine: {} is not a file", p.display()))?;
        Ok(self.mountpoint().join(name))
    }

    /// The cache's figures from the control file (`None` if it cannot be
    /// read).
    pub(crate) fn cache_figures(&self) -> Option<FuseFigures> {
        let text =
            std::fs::read_to_string(self.mountpoint().join(foliocache_fuse::CONTROL_NAME)).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let n = |k: &str| v["cache"][k].as_u64();
        Some(FuseFigures {
            hits: n("hits")?,
            misses: n("misses")?,
            io_reads: n("io_reads")?,
        })
    }

    /// Unmounts, waits for the server (which writes every dirty folio
    /// back), and removes the mount point.
    pub(crate) fn unmount(mut self) -> Result<()> {
        if let Some(s) = self.session.take() {
            s.umount_and_join().with_context(|| {
                format!("fuse engine: unmounting {}", self.mountpoint().display())
            })?;
        }
        Ok(())
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// Maps each of the bench's data files (the `mmap` engine), `len` bytes,
/// writable if `write`. The crate's one use of an unsafe function outside
/// `sys`: whether a file may be mapped depends on what the bench does with
/// it, which only this module knows.
#[allow(unsafe_code)]
fn map_data_files(fds: &[File], len: usize, write: bool) -> io::Result<Vec<Mmap>> {
    fds.iter()
        // SAFETY: `Mmap::new`'s contract holds: these are the bench's own
        // data files (`DataSet`), which nothing outside it writes, mapped for
        // one job (the mappings drop with its `Prepared` before the next
        // engine is prepared). Within the job only a mapping's own thread
        // writes it (`job::run` hands each writing thread its mapping by
        // `&mut`). No other engine writes the files meanwhile: engines run
        // one at a time, and every write job ends with its sync
        // (`job::run`; a failed one stops the bench), so no engine's cache
        // (foliocache's, the FUSE server's) holds dirty data to write back
        // into them later; the hot reader only reads, another file. The
        // files are `file_size` long (`DataSet::files`) and nothing
        // truncates them.
        .map(|f| unsafe { Mmap::new(f, len, write) })
        .collect()
}

/// A new cache for `spec` of `capacity` bytes (its arena populated now
/// with `populate=eager`).
fn build_cache(spec: &EngineSpec, capacity: u64) -> Result<Cache> {
    let mut b = Cache::builder()
        .capacity(usize::try_from(capacity).context("capacity too large")?)
        .populate(spec.folio.populate)
        .huge_pages(spec.folio.huge)
        .readahead(spec.folio.readahead())
        .io_engine(IoEngineConfig::new().kind(spec.folio.io));
    if let Some(f) = spec.folio.max_folio {
        b = b.max_folio_size(f as usize);
    }
    b.build().with_context(|| {
        format!(
            "foliocache engine: building a cache of {}",
            fmt_size(capacity)
        )
    })
}

fn open_all(files: &[PathBuf], write: bool, direct: bool) -> Result<Vec<File>> {
    files
        .iter()
        .map(|p| {
            let mut o = OpenOptions::new();
            o.read(true).write(write);
            if direct {
                o.custom_flags(OFlags::DIRECT.bits() as i32);
            }
            o.open(p)
                .with_context(|| format!("opening {}", p.display()))
        })
        .collect()
}

/// One `RWF_DONTCACHE` read, to fail early and clearly where the kernel or
/// the filesystem lacks it.
///
/// # Errors
/// The kernel or the filesystem does not support `RWF_DONTCACHE`, or the
/// read failed.
pub fn probe_dontcache(f: &File) -> Result<()> {
    let mut buf = AlignedBuf::new(sys::PAGE, 0)?;
    match sys::preadv2(f, buf.as_mut_slice(), 0, sys::RWF_DONTCACHE) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(Errno::OPNOTSUPP.raw_os_error()) => bail!(
            "dontcache engine: this kernel or filesystem does not support RWF_DONTCACHE \
             (Linux 6.14 or later, on a filesystem that supports it): {e}"
        ),
        Err(e) => Err(e).context("dontcache engine: probe read"),
    }
}

/// Reads every file through the kernel page cache (1 MiB buffered reads)
/// until `mincore` finds it all resident, at most [`WARM_PASSES`] times
/// (a folio left over from an `RWF_DONTCACHE` read is dropped again by
/// the first buffered read that touches it); the resident pages after the
/// last pass, and the number of passes.
///
/// # Errors
/// Opening or reading a file, or `mincore`.
pub fn warm_kernel(files: &[PathBuf]) -> Result<((usize, usize, &'static str), u32)> {
    let mut buf = vec![0u8; 1 << 20];
    let mut pass = 0;
    loop {
        pass += 1;
        let (mut resident, mut pages) = (0, 0);
        for p in files {
            let f = File::open(p)?;
            let len = f.metadata()?.len();
            let mut off = 0;
            while off < len {
                let n = f.read_at(&mut buf, off)?;
                if n == 0 {
                    break;
                }
                off += n as u64;
            }
            let (r, n) = sys::resident_pages(&f, len).context("mincore")?;
            resident += r;
            pages += n;
        }
        if resident == pages || pass == WARM_PASSES {
            return Ok(((resident, pages, "after warming"), pass));
        }
    }
}

/// Syncs every file and drops it from the kernel page cache, then counts
/// the resident pages left: (resident pages, pages, "after drop").
///
/// # Errors
/// Opening, syncing or advising a file, or `mincore`.
pub fn drop_files(files: &[PathBuf]) -> Result<(usize, usize, &'static str)> {
    let (mut resident, mut pages) = (0, 0);
    for p in files {
        let f = File::open(p)?;
        f.sync_data()?;
        sys::drop_cache(&f).context("posix_fadvise(DONTNEED)")?;
        let (r, n) = sys::resident_pages(&f, f.metadata()?.len()).context("mincore")?;
        resident += r;
        pages += n;
    }
    Ok((resident, pages, "after drop"))
}

impl FolioOptions {
    /// How a run with these options does its IO.
    pub fn mode(&self) -> FolioMode {
        FolioMode {
            read: self.read_flags(),
            dontcache_writes: self.dontcache,
            pin: self.pin,
        }
    }
}
