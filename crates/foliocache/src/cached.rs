//! [`CachedFile`]: one face for a file read and written through either of
//! the crate's two page caches, this process's own ([`File`], over a
//! [`Cache`](crate::Cache)) or the one its group of processes shares
//! ([`SharedFile`], over a [`SharedCache`](crate::SharedCache)); and
//! [`AnyFile`], the one a program holds when it learns only at run time
//! which serves a file (the interposer, the mount, the CLI).
//!
//! The two caches are different machines on purpose (docs/design.md,
//! "One face for the two caches"): the private one has folios of any
//! order, an LRU with shadows, readahead windows per handle, read and
//! write flags and a miss-ratio curve; the group's has pages in a memory
//! file, one clock, a readahead that follows sequential misses on its
//! own, and no shadows. The trait gives them one set of signatures, and
//! says in its types where one cache has nothing to give
//! ([`CachedFile::hit_ratio_curve`] is an `Option`), so that a consumer
//! cannot forget it. [`CachedFile::read_with`] is written once, here.
//!
//! ```text
//!   consumer (interposer, mount, CLI) -- holds --> AnyFile
//!                                                    |  one match a call
//!                           +------------------------+-----------------+
//!                           v                                          v
//!              impl CachedFile for File              impl CachedFile for SharedFile
//!              (file.rs, write.rs, shift.rs)          (shared/: its inherent methods)
//! ```

mod any;
mod shared;

use std::io;

use crate::arena::PAGE;
use crate::file::File;
use crate::flags::ReadFlags;
use crate::mrc::HitRatioCurve;
use crate::readahead::Advice;
use crate::workingset::CacheStat;
use crate::write::WriteFlags;

pub use any::{AnyFile, SharedHandle};

/// What the cache serving a file holds and did: the figures both caches
/// keep, in bytes where the cache counts bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheFigures {
    /// Reads served from the cache, as the cache counts them: the
    /// private cache a folio lookup that found its data (a folio of any
    /// size, so not bytes), the group's a page (this process's reads).
    pub hits: u64,
    /// Reads that had to fill from the file: the private cache's folios
    /// created, the group's pages loaded (this process's).
    pub misses: u64,
    /// Bytes reads returned (the private cache's every reader's, the
    /// group's this process's).
    pub read_bytes: u64,
    /// Of those, bytes reads got from memory: the rest came from the file
    /// for that read, a page readahead brought in counted where it was
    /// read, not as a hit (`CacheStats::memory_bytes`,
    /// `SharedStats::memory_bytes`).
    pub memory_bytes: u64,
    /// Bytes read from the files into the cache, readahead's included.
    pub loaded_bytes: u64,
    /// Bytes of file data the cache holds now.
    pub cached_bytes: u64,
    /// Of those, bytes written and not yet written back.
    pub dirty_bytes: u64,
    /// Bytes the cache holds at most.
    pub capacity_bytes: u64,
}

impl CacheFigures {
    /// A [`Cache`](crate::Cache)'s figures, from its
    /// [`stats`](crate::Cache::stats).
    pub fn of_cache(s: &crate::CacheStats) -> CacheFigures {
        CacheFigures {
            hits: s.hits,
            misses: s.misses,
            read_bytes: s.read_bytes,
            memory_bytes: s.memory_bytes(),
            loaded_bytes: s.io_bytes,
            cached_bytes: s.bytes_cached,
            dirty_bytes: s.dirty_bytes,
            capacity_bytes: s.capacity_bytes,
        }
    }

    /// A [`SharedCache`](crate::SharedCache)'s figures for the whole
    /// group (every process's reads, as they last published them), from
    /// its [`stats`](crate::SharedCache::stats).
    pub fn of_group(s: &crate::SharedStats) -> CacheFigures {
        CacheFigures {
            hits: s.group_hits,
            misses: s.group_misses,
            read_bytes: s.group_read_bytes,
            memory_bytes: s.group_memory_bytes(),
            loaded_bytes: s.group_loaded_bytes,
            cached_bytes: s.cached * PAGE,
            dirty_bytes: s.dirty * PAGE,
            capacity_bytes: s.pages * PAGE,
        }
    }

    /// This process's figures in a [`SharedCache`](crate::SharedCache)
    /// (its own reads; the pages are the group's), from its
    /// [`stats`](crate::SharedCache::stats).
    pub fn of_process(s: &crate::SharedStats) -> CacheFigures {
        CacheFigures {
            hits: s.hits,
            misses: s.misses,
            read_bytes: s.read_bytes,
            memory_bytes: s.memory_bytes(),
            loaded_bytes: s.loaded_bytes,
            ..CacheFigures::of_group(s)
        }
    }

    /// The reads as one line, bytes first: `B bytes read: M from memory
    /// (P %), L read from the files (readahead included); H hits, M
    /// misses (page lookups)`. What `foliocache stat`, `foliocache cache
    /// stat` and the interposer's line at exit print.
    pub fn reads_line(&self) -> String {
        let share = if self.read_bytes == 0 {
            0.0
        } else {
            100.0 * self.memory_bytes as f64 / self.read_bytes as f64
        };
        format!(
            "{} bytes read: {} from memory ({share:.1} %), {} read from the files (readahead \
             included); {} hits, {} misses (page lookups)",
            self.read_bytes, self.memory_bytes, self.loaded_bytes, self.hits, self.misses
        )
    }
}

/// A file read and written through a page cache: [`File`] (this
/// process's [`Cache`](crate::Cache)) or [`SharedFile`](crate::SharedFile) (the group's
/// [`SharedCache`](crate::SharedCache)), and [`AnyFile`], either.
///
/// The methods mean what the system calls they are named after mean, in
/// both caches: reads are short only at the end of the file, a write
/// writes all of its buffer, a size is the file's as the cache's users
/// see it (unsaved writes included). Where the caches differ:
///
/// | method | [`File`] | [`SharedFile`](crate::SharedFile) |
/// |---|---|---|
/// | [`read_at_flags`](Self::read_at_flags) | honours [`ReadFlags`] | takes none: a hit, or one load |
/// | [`read_in_place`](Self::read_in_place) | lends a cached folio, pinned | never (copies) |
/// | [`write_at_flags`](Self::write_at_flags) | honours [`WriteFlags`]; at the end for a handle opened to append | takes none (`DONTCACHE` data stays for the group) |
/// | [`len`](Self::len) | never fails | reads the group's slot (`Err` if the segment is unreadable) |
/// | [`advise`](Self::advise) | readahead, `DontNeed`, `NoReuse` | takes none: `Ok` |
/// | [`cachestat`](Self::cachestat) | from the file's index | the group's pages, no shadows |
/// | [`hit_ratio_curve`](Self::hit_ratio_curve) | `Some` | `None`: no file's own (the group's: `SharedCache::hit_ratio_curve`) |
/// | [`figures`](Self::figures) | the cache's | the group's pages, this process's reads |
///
/// Generic methods make the trait not dyn-compatible: a program that
/// learns at run time which cache serves a file holds an [`AnyFile`],
/// whose one `match` a call is all the private cache's hit pays.
///
/// # Example
/// ```
/// use foliocache::CachedFile;
///
/// fn first_byte(f: &impl CachedFile) -> std::io::Result<Option<u8>> {
///     f.read_with(0, 1, |b| b.first().copied())
/// }
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("f"), b"hello")?;
/// let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
/// assert_eq!(first_byte(&cache.open(dir.path().join("f"))?)?, Some(b'h'));
/// let group = foliocache::SharedCache::new(1 << 20)?;
/// let shared = group.open(std::fs::File::open(dir.path().join("f"))?)?;
/// assert_eq!(first_byte(&shared)?, Some(b'h'));
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait CachedFile {
    /// The file's size as the cache's users see it (for the group's
    /// cache, the group's: writes of every process included).
    ///
    /// # Errors
    /// The group's cache's, when the file's slot cannot be read.
    fn len(&self) -> io::Result<u64>;

    /// Whether the file is empty.
    ///
    /// # Errors
    /// As [`len`](Self::len).
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Whether writes (and size changes) are allowed through this handle.
    fn is_writable(&self) -> bool;

    /// Reads into `buf` from `offset` with `flags` (the private cache's;
    /// the group's takes none): short only at the end of the file, 0 at
    /// or past it.
    ///
    /// # Errors
    /// The backing's, when no byte could be read; with
    /// [`ReadFlags::NOWAIT`] (private cache), `WouldBlock`.
    fn read_at_flags(&self, buf: &mut [u8], offset: u64, flags: ReadFlags) -> io::Result<usize>;

    /// [`read_at_flags`](Self::read_at_flags) with no flags.
    ///
    /// # Errors
    /// As [`read_at_flags`](Self::read_at_flags).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at_flags(buf, offset, ReadFlags::NONE)
    }

    /// Calls `f` with the `n` bytes at `at` where they lie in the
    /// cache, without copying them, if the cache can lend them now (the
    /// private cache: one cached, uptodate folio whose lock is free,
    /// pinned while `f` runs); else gives `f` back. `at + n` is
    /// inside the file. The hook of [`read_with`](Self::read_with), which
    /// is what to call.
    fn read_in_place<R, F: FnOnce(&[u8]) -> R>(&self, at: u64, n: usize, f: F) -> Result<R, F> {
        let _ = (at, n);
        Err(f)
    }

    /// Calls `f` with the file's bytes `offset..offset + len` (fewer at
    /// the end of the file, none at or past it): in place where the cache
    /// lends them ([`read_in_place`](Self::read_in_place)), else read
    /// into a buffer of this thread's that the next call reuses. For a
    /// server that sends cached data on (a FUSE reply) with one copy and
    /// no buffer of its own.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at), when no byte could be read.
    fn read_with<R>(&self, offset: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> io::Result<R>
    where
        Self: Sized,
    {
        let size = self.len()?;
        if offset >= size || len == 0 {
            return Ok(f(&[]));
        }
        let n = (offset.saturating_add(len as u64).min(size) - offset) as usize;
        let f = match self.read_in_place(offset, n, f) {
            Ok(r) => return Ok(r),
            Err(f) => f,
        };
        crate::copy::with_thread_buffer(n, |buf| {
            read_up_to(self, buf, offset).map(|done| f(&buf[..done]))
        })
    }

    /// Writes all of `buf` at `offset` with `flags` (the private
    /// cache's; the group's takes none); at the end of the file for a
    /// handle opened to append. Returns `buf.len()`.
    ///
    /// # Errors
    /// `PermissionDenied` unless [`is_writable`](Self::is_writable); the
    /// backing's (space, size limits); `InvalidInput` past the largest
    /// offset.
    fn write_at_flags(&self, buf: &[u8], offset: u64, flags: WriteFlags) -> io::Result<usize>;

    /// [`write_at_flags`](Self::write_at_flags) with no flags.
    ///
    /// # Errors
    /// As [`write_at_flags`](Self::write_at_flags).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.write_at_flags(buf, offset, WriteFlags::NONE)
    }

    /// Writes `buf` at the end of the file, the size read and moved in one
    /// hold of the file's lock (`O_APPEND`: for the group's cache, atomic
    /// for every process). Returns the offset written at.
    ///
    /// # Errors
    /// As [`write_at_flags`](Self::write_at_flags).
    fn append(&self, buf: &[u8]) -> io::Result<u64>;

    /// Sets the file's size (`ftruncate`): data past it leaves the cache,
    /// and reads zeros if the file grows again.
    ///
    /// # Errors
    /// `PermissionDenied` unless writable; the backing's.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Writes the file's dirty data back without waiting for the device
    /// (what a close does).
    ///
    /// # Errors
    /// The writeback's.
    fn write_back(&self) -> io::Result<()>;

    /// Writes the file's dirty data back and waits for the device
    /// (`fdatasync`).
    ///
    /// # Errors
    /// The writeback's (the private cache: also one an earlier writeback
    /// of the file met, once per handle), or the sync's.
    fn sync_data(&self) -> io::Result<()>;

    /// As [`sync_data`](Self::sync_data), with the metadata (`fsync`).
    ///
    /// # Errors
    /// As [`sync_data`](Self::sync_data).
    fn sync_all(&self) -> io::Result<()>;

    /// Reserves `len` bytes at `offset` (`fallocate` mode 0, growing the
    /// file to their end unless `keep_size`).
    ///
    /// # Errors
    /// `PermissionDenied` unless writable; the file system's.
    fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()>;

    /// Deallocates `len` bytes at `offset`, which read zeros after
    /// (`PUNCH_HOLE | KEEP_SIZE`).
    ///
    /// # Errors
    /// As [`allocate`](Self::allocate).
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Removes `len` bytes at `offset`, the rest of the file moving down
    /// (`COLLAPSE_RANGE`).
    ///
    /// # Errors
    /// As [`allocate`](Self::allocate); `InvalidInput` for a range the
    /// file system refuses (not block-aligned, reaching the end).
    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Inserts `len` bytes of hole at `offset`, the rest of the file
    /// moving up (`INSERT_RANGE`).
    ///
    /// # Errors
    /// As [`collapse_range`](Self::collapse_range).
    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Advice on a range (`posix_fadvise`, `readahead`); the group's
    /// cache takes none (its readahead follows sequential misses on its
    /// own) and returns `Ok`.
    ///
    /// # Errors
    /// The private cache's readahead's.
    fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()>;

    /// The cache's state of `len` bytes at `offset` (`len == 0`: to the
    /// end of the file), in pages, as `cachestat(2)`. The group's cache
    /// keeps no shadows and marks no page under writeback (a page being
    /// written back is held): its `evicted`, `recently_evicted` and
    /// `writeback` are 0.
    ///
    /// # Errors
    /// `InvalidInput` when `offset + len` overflows; the group's cache's
    /// when the file's slot cannot be read.
    fn cachestat(&self, offset: u64, len: u64) -> io::Result<CacheStat>;

    /// The file's own miss-ratio curve ([`File::hit_ratio_curve`]: the
    /// first call starts it). `None` for the group's cache, which keeps
    /// no curve.
    fn hit_ratio_curve(&self) -> Option<HitRatioCurve>;

    /// The figures of the cache serving the file.
    fn figures(&self) -> CacheFigures;
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
///
/// # Errors
/// As [`CachedFile::read_at`], when no byte could be read (an error after
/// some stops the read short).
pub(crate) fn read_up_to(f: &impl CachedFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

/// The file pages `first..=last` of `len` bytes at `offset` (`len == 0`:
/// to the end of the index), as [`CachedFile::cachestat`] takes them.
///
/// # Errors
/// `InvalidInput` when `offset + len` overflows.
pub(crate) fn page_range(offset: u64, len: u64) -> io::Result<(u64, u64)> {
    let first = offset / PAGE;
    if len == 0 {
        return Ok((first, u64::MAX));
    }
    let end = offset.checked_add(len).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cachestat: offset {offset} + len {len} overflows"),
        )
    })?;
    Ok((first, (end - 1) / PAGE))
}

impl CachedFile for File {
    #[inline]
    fn len(&self) -> io::Result<u64> {
        Ok(File::len(self))
    }

    fn is_writable(&self) -> bool {
        File::is_writable(self)
    }

    #[inline]
    fn read_at_flags(&self, buf: &mut [u8], offset: u64, flags: ReadFlags) -> io::Result<usize> {
        File::read_at_flags(self, buf, offset, flags)
    }

    #[inline]
    fn read_in_place<R, F: FnOnce(&[u8]) -> R>(&self, at: u64, n: usize, f: F) -> Result<R, F> {
        if self
            .effective_flags(ReadFlags::NONE)
            .contains(ReadFlags::DONTCACHE)
        {
            return Err(f);
        }
        match self.mapping.pin_cached(at, n, true, true) {
            Ok(p) => Ok(f(&p)),
            Err(_) => Err(f),
        }
    }

    #[inline]
    fn write_at_flags(&self, buf: &[u8], offset: u64, flags: WriteFlags) -> io::Result<usize> {
        File::write_at_flags(self, buf, offset, flags)
    }

    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        File::append(self, buf)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn write_back(&self) -> io::Result<()> {
        self.mapping.writeback(0, u64::MAX)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }

    fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        File::allocate(self, offset, len, keep_size)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        File::punch_hole(self, offset, len)
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        File::collapse_range(self, offset, len)
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        File::insert_range(self, offset, len)
    }

    fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        File::advise(self, offset, len, advice)
    }

    fn cachestat(&self, offset: u64, len: u64) -> io::Result<CacheStat> {
        File::cachestat(self, offset, len)
    }

    fn hit_ratio_curve(&self) -> Option<HitRatioCurve> {
        Some(File::hit_ratio_curve(self))
    }

    fn figures(&self) -> CacheFigures {
        let inner = self.mapping.inner();
        let s = &inner.stats;
        let read_bytes = s.read_bytes.sum();
        CacheFigures {
            hits: s.hits.sum(),
            misses: s.misses.sum(),
            read_bytes,
            memory_bytes: read_bytes.saturating_sub(s.first_read_bytes.sum()),
            loaded_bytes: s.io_bytes.sum(),
            cached_bytes: s.pages.sum() * PAGE,
            dirty_bytes: s.dirty_pages.load(crate::sync::Ordering::Acquire) * PAGE,
            capacity_bytes: inner.mem.arena.capacity_pages() as u64 * PAGE,
        }
    }
}
