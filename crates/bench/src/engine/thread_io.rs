//! Each engine's IO type and [`ThreadIo`], the closed set of them that
//! an engine lends its threads and `job` compiles a loop for each of;
//! how an engine lends them ([`lend`], [`lend_mut`]); the open files most
//! engines do their IO on ([`OpenFiles`]). Below the engines: an engine
//! names its IO type here, never the reverse.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use foliocache::{ReadFlags, WriteFlags};
use rustix::fs::OFlags;

use super::io::{copy_and_sum, summed, At, BlockIo, TaskRead};
use crate::sys::{self, AnonMap, Mapping, Mmap};

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
        let flags = if self.1.dontcache_writes {
            WriteFlags::DONTCACHE
        } else {
            WriteFlags::NONE
        };
        self.0.write_at_flags(buf, off, flags)
    }
}

/// `pread`/`pwrite` on a file descriptor: `kernel` (buffered) or `direct`
/// (an `O_DIRECT` descriptor), or a file under a FUSE mount; or reads and
/// writes at offsets of another kind of file ([`At`]: `shared`'s).
pub struct PreadIo<'a, F: At + ?Sized = File>(pub &'a F);

impl<F: At + ?Sized> BlockIo for PreadIo<'_, F> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.read_at(buf, off)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0.write_at(buf, off)
    }
}

/// Copies out of and into a mapping this job thread owns: `&mut`, so no
/// other thread reads or writes it meanwhile.
pub struct MmapIo<'a>(pub &'a mut Mmap);

/// Reads as [`SharedMapIo`] does, summing in place; writes too, since the
/// mapping is this thread's alone.
impl BlockIo for MmapIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        SharedMapIo(self.0, true).read(buf, off)
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        SharedMapIo(self.0, true).read_consume(buf, off)
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

/// One job thread's file, shared with the blocking pool's threads.
pub struct TokioFsIo(pub Arc<File>);

impl TaskRead for TokioFsIo {
    async fn read(&self, buf: &mut [u8], scratch: &mut Vec<u8>, off: u64) -> io::Result<usize> {
        let file = self.0.clone();
        let mut owned = std::mem::take(scratch);
        owned.resize(buf.len(), 0);
        let (r, owned) = tokio::task::spawn_blocking(move || {
            let r = FileExt::read_at(&*file, &mut owned, off);
            (r, owned)
        })
        .await
        .map_err(io::Error::other)?;
        let n = r?;
        buf[..n].copy_from_slice(&owned[..n]);
        *scratch = owned;
        Ok(n)
    }
}
