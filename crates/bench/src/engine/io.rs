//! What a job thread does IO with: [`BlockIo`], the synchronous read and
//! write of one block, implemented by each engine's IO type (in the
//! engine's file), and [`ThreadIo`], the closed set of those types that
//! an engine lends its threads and `job` compiles a loop for each of.
//! Also the open files most engines do their IO on ([`OpenFiles`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result};
use foliocache::ReadFlags;
use rustix::fs::OFlags;

use std::future::Future;

use super::anon::AnonIo;
use super::dontcache::DontcacheIo;
use super::folio::FolioIo;
use super::kernel::PreadIo;
use super::mmap::{MmapIo, SharedMapIo};
use super::tokio_fs::TokioFsIo;

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

/// One task's IO of an async engine (`tasks=N`): `job` runs `N` of
/// them on one current-thread runtime per job thread, each reading (or
/// writing) one block at a time from its own buffer.
pub trait TaskRead: Send {
    /// Reads `buf.len()` bytes at `off`; the bytes read. `scratch` is the
    /// task's own, for an engine whose reads need an owned buffer.
    fn read<'a>(
        &'a self,
        buf: &'a mut [u8],
        scratch: &'a mut Vec<u8>,
        off: u64,
    ) -> impl Future<Output = io::Result<usize>> + 'a;

    /// Writes `buf` at `off`; the bytes written. An engine that only reads
    /// (refused before a write job starts: `Engines::prepare`) fails.
    fn write<'a>(
        &'a self,
        buf: &'a [u8],
        off: u64,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        let _ = (buf, off);
        std::future::ready(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this async engine only reads",
        )))
    }
}

/// `foliocache[async]`: `File::read_at_flags_async`, `File::write_at_async`.
pub struct FolioTaskIo<'a>(pub &'a foliocache::File, pub ReadFlags);

impl TaskRead for FolioTaskIo<'_> {
    #[inline]
    fn read<'a>(
        &'a self,
        buf: &'a mut [u8],
        _: &'a mut Vec<u8>,
        off: u64,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        self.0.read_at_flags_async(buf, off, self.1)
    }

    #[inline]
    fn write<'a>(
        &'a self,
        buf: &'a [u8],
        off: u64,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        self.0.write_at_async(buf, off)
    }
}

/// `--consume` for a copy: reads into `buf` and sums what was read.
#[inline]
pub(super) fn copy_and_sum<B: BlockIo + ?Sized>(
    io: &mut B,
    buf: &mut [u8],
    off: u64,
) -> io::Result<(usize, u64)> {
    let n = io.read(buf, off)?;
    Ok(summed(&buf[..n]))
}

/// `--consume`'s result for `bytes`: their count and their sum.
#[inline]
pub(super) fn summed(bytes: &[u8]) -> (usize, u64) {
    (bytes.len(), crate::consume::sum_words(bytes))
}

/// One job thread's IO, lent by its engine ([`Engine::threads`]): a
/// borrow of the prepared engine's file or mapping. `job` matches on it
/// once per thread, before the thread starts, and runs the loop compiled
/// for that variant's type: the measured loop never dispatches.
///
/// [`Engine::threads`]: super::Engine::threads
pub enum ThreadIo<'a> {
    /// `pread`/`pwrite` (`kernel`, `direct`, `fuse`, `fuse-null`; a
    /// memfd for `kernel` in a memory job).
    Pread(PreadIo<'a>),
    /// `RWF_DONTCACHE` (`dontcache`).
    Dontcache(DontcacheIo<'a>),
    /// The thread's own mapping (`&mut`): it may write it.
    Mmap(MmapIo<'a>),
    /// The thread's own anonymous mapping (`&mut`).
    Anon(AnonIo<'a>),
    /// One mapping read by all the threads (a shared job of several), or
    /// `memcpy`'s memory.
    SharedMap(SharedMapIo<'a>),
    /// foliocache's `File`.
    Folio(FolioIo<'a>),
    /// `foliocache[qd=N]`: the file and `N`.
    Queued(&'a foliocache::File, usize),
    /// `direct[qd=N]`: the `O_DIRECT` file and `N`.
    Ring(&'a File, usize),
    /// `foliocache[async,tasks=N]`: the file's async reads and `N`.
    FolioTasks(FolioTaskIo<'a>, usize),
    /// `tokio-fs[tasks=N]`: reads in tokio's blocking pool, and `N`.
    TokioFs(TokioFsIo, usize),
    /// `shared`: a file of the shared cache.
    Shared(PreadIo<'a, foliocache::SharedFile>),
}

/// `io` of `items[j]` for each of `n` threads `j`, or of `items[0]` for
/// all in a `shared` job: what an engine whose threads only read their
/// item, or share it, lends them.
pub(super) fn lend<'a, T>(
    items: &'a [T],
    n: usize,
    shared: bool,
    io: impl Fn(&'a T) -> ThreadIo<'a>,
) -> Vec<ThreadIo<'a>> {
    (0..n)
        .filter_map(|j| items.get(if shared { 0 } else { j }))
        .map(io)
        .collect()
}

/// Each of `n` threads its own item of `items` by `&mut` (`own`), so no
/// other thread can read or write it while that thread writes; only where
/// several threads share one item is it lent to each read-only (`read`).
pub(super) fn lend_mut<'a, T>(
    items: &'a mut [T],
    n: usize,
    shared: bool,
    own: impl Fn(&'a mut T) -> ThreadIo<'a>,
    read: impl Fn(&'a T) -> ThreadIo<'a>,
) -> Vec<ThreadIo<'a>> {
    if !shared || n == 1 {
        items.iter_mut().take(n).map(own).collect()
    } else {
        lend(items, n, true, read)
    }
}

/// An engine's open data files, one per data file: what `kernel`,
/// `direct`, `dontcache` and the FUSE engines do their IO on, synced and
/// advised by [`Engine`](super::Engine)'s default methods.
#[derive(Default)]
pub struct OpenFiles(pub(super) Vec<File>);

impl OpenFiles {
    /// Opens `files` for reading and, if `write`, writing; with `direct`,
    /// `O_DIRECT`.
    pub(super) fn open(files: &[PathBuf], write: bool, direct: bool) -> Result<OpenFiles> {
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
            .collect::<Result<_>>()
            .map(OpenFiles)
    }

    /// `pread`/`pwrite` on each thread's file.
    pub(super) fn lend_pread(&self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        lend(&self.0, n, shared, |f| ThreadIo::Pread(PreadIo(f)))
    }

    /// `fsync` of each file.
    pub(super) fn sync(&self) -> io::Result<()> {
        self.0.iter().try_for_each(File::sync_all)
    }

    /// `POSIX_FADV_RANDOM` on each file: a read then reads what it asks
    /// for and no more.
    pub(super) fn advise_random(&self) -> io::Result<bool> {
        use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
        for f in &self.0 {
            posix_fadvise(f, 0, 0, PosixFadviseAdvice::POSIX_FADV_RANDOM)?;
        }
        Ok(true)
    }
}
