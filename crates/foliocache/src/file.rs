//! `File`: a handle on a file read and written through the cache.
//!
//! A handle is thin: its mapping (shared by every handle of the file), its
//! readahead state (shared by clones, as by duplicated descriptors), its
//! access mode and its writeback-error cursor. Its methods call down into
//! the mapping and are never called back: a read is [`Mapping::read`]
//! (`filemap.rs`: the hit, the batch lookup, readahead, the miss), a write
//! is `write.rs`'s.

use std::io;
use std::path::Path;
use std::sync::{Arc, Weak};

use backing::{Backing, BackingInfo, FileBacking, FileOptions};

use crate::cache::Cache;
use crate::filemap::pin::{OwnedPin, Pinned};
use crate::filemap::Mapping;
use crate::flags::ReadFlags;
use crate::readahead::{self, Advice, Insert, Readahead, ReadaheadConfig, Window};
use crate::sync::{AtomicU64, Ordering};
use crate::workingset::CacheStat;

use crate::arena::PAGE;

/// A file opened through a [`Cache`]. Cheap to share between threads
/// (`&File` reads concurrently; clone it for ownership).
///
/// Clones share the readahead state, as duplicated file descriptors share
/// an open file description; [`File::reopen`] gives a handle with its own.
pub struct File {
    pub(crate) mapping: Arc<Mapping>,
    pub(crate) ra: Arc<Readahead>,
    /// Opened for writing.
    writable: bool,
    /// Writes go to the end of the file.
    append: bool,
    /// The file's writeback error sequence as this handle last reported it
    /// (shared by clones, as `f_wb_err` by duplicated descriptors).
    wb_since: Arc<AtomicU64>,
}

impl Cache {
    /// Opens `path` for reading through the cache (read-only: see
    /// [`open_options`](Self::open_options) to write). The file is opened with
    /// `O_DIRECT`; where the filesystem refuses it, the backing falls back
    /// to buffered IO with `POSIX_FADV_DONTNEED`, logs a warning, and
    /// [`File::info`] says so.
    ///
    /// # Errors
    /// The OS error of `open(2)` or `fstat(2)`.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        self.open_path(path.as_ref(), &FileOptions::new().read(true), false, false)
    }

    /// Opens a file by path: one mapping per file (device and inode) in
    /// the cache, shared by every handle, as the kernel has one page cache
    /// per inode; so a write through one handle is seen by reads through
    /// any other. A file first opened read-only and now for writing gets
    /// the new, writable descriptor as its backing. An open that truncated
    /// the file (`O_TRUNC`) empties its cached data too.
    pub(crate) fn open_path(
        &self,
        path: &Path,
        opts: &FileOptions,
        writable: bool,
        truncated: bool,
    ) -> io::Result<File> {
        Ok(self.open_path_new(path, opts, writable, truncated)?.0)
    }

    /// Opens `path` read-only as [`open`](Self::open) does, and says
    /// whether the file's mapping is new (no handle of this cache had the
    /// file open): the warm loader's open.
    pub(crate) fn open_new(&self, path: &Path) -> io::Result<(File, bool)> {
        self.open_path_new(path, &FileOptions::new().read(true), false, false)
    }

    /// [`open_path`](Self::open_path), and whether the mapping is new. An
    /// open that finds the file held by the warm loader takes it over
    /// (`loaded::Loaded::adopt`: its folios go if the file changed since).
    fn open_path_new(
        &self,
        path: &Path,
        opts: &FileOptions,
        writable: bool,
        truncated: bool,
    ) -> io::Result<(File, bool)> {
        use std::os::unix::fs::MetadataExt;
        let backing = FileBacking::open(path, opts)?;
        let md = backing.file().metadata()?;
        let size = backing.len()?;
        let backing: Arc<dyn Backing> = Arc::new(backing);
        let (mapping, new) = self.inner.find_or_register((md.dev(), md.ino()), |this| {
            let mut m = Mapping::new(this, self.inner.clone(), backing.clone(), size);
            m.inode.path = Some(path.to_path_buf());
            m
        });
        if new {
            mapping.set_backing(backing, writable);
            mapping.set_opened_as(md.clone());
        } else {
            if writable && !mapping.backing_writable() {
                mapping.set_backing(backing, true);
            }
            if truncated {
                // The open cut the file on the backing: the cache follows.
                crate::truncate::truncate_to(&mapping, 0)?;
            }
        }
        let file = self.file_on(mapping).with_access(writable, false);
        if !new {
            self.warm.adopt((md.dev(), md.ino()), &md, &file.mapping);
        }
        Ok((file, new))
    }

    /// Reads and writes any [`Backing`] through the cache (a memory
    /// backing, a fault-injecting one in tests). Its length is read now;
    /// from then on the cache keeps the size.
    ///
    /// # Errors
    /// The backing's error from `len`.
    pub fn open_backing(&self, backing: impl Backing) -> io::Result<File> {
        let size = backing.len()?;
        Ok(self
            .file(|this| Mapping::new(this, self.inner.clone(), Arc::new(backing), size))
            .with_access(true, false))
    }

    /// A read-only handle on a new mapping, which `make` builds (given its
    /// `Arc`'s `Weak`).
    pub(crate) fn file(&self, make: impl FnOnce(Weak<Mapping>) -> Mapping) -> File {
        let mapping = Arc::new_cyclic(|this| make(this.clone()));
        self.inner.register(&mapping);
        self.file_on(mapping)
    }

    /// A read-only handle on a registered mapping.
    fn file_on(&self, mapping: Arc<Mapping>) -> File {
        mapping.handle_opened();
        let since = mapping.wb.err().sample();
        File {
            mapping,
            ra: Arc::new(Readahead::new(
                self.inner
                    .io
                    .readahead
                    .for_capacity(self.inner.mem.arena.capacity_pages() as u64),
                self.inner.io.unread.clone(),
            )),
            writable: false,
            append: false,
            wb_since: Arc::new(AtomicU64::new(since)),
        }
    }
}

impl File {
    /// The handle with these access rights.
    pub(crate) fn with_access(mut self, writable: bool, append: bool) -> File {
        self.writable = writable;
        self.append = append;
        self
    }

    /// Whether writes are allowed through this handle.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Whether this handle writes at end of file (append mode).
    pub(crate) fn is_append(&self) -> bool {
        self.append
    }

    /// This handle's writeback error sample.
    pub(crate) fn wb_since(&self) -> &AtomicU64 {
        &self.wb_since
    }

    /// Whether this is a memory file ([`Cache::memfile`]).
    pub fn is_memfile(&self) -> bool {
        self.mapping.memfile
    }

    /// The file's length in bytes now (writes past the end and
    /// [`set_len`](Self::set_len) change it).
    pub fn len(&self) -> u64 {
        self.mapping.size()
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How the file's data travels: `O_DIRECT`, or the buffered fallback.
    pub fn info(&self) -> &BackingInfo {
        self.mapping.info()
    }

    /// The path it was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.mapping.inode.path.as_deref()
    }

    /// The file's [`Mapping`], for the kernel-style filemap API.
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// Reads up to `buf.len()` bytes at `offset`, like
    /// [`std::os::unix::fs::FileExt::read_at`]: short only at end of file,
    /// 0 at or past it. Any buffer alignment, any offset.
    ///
    /// # Errors
    /// A backing error for a folio the read needed, if no byte was copied
    /// before it (otherwise the bytes copied so far are returned, and the
    /// next call reports the error). `OutOfMemory` if every folio in the
    /// cache is in use.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at_flags(buf, offset, ReadFlags::NONE)
    }

    /// [`read_at`](Self::read_at) with per-read [`ReadFlags`] (added to the
    /// file's defaults, [`set_default_flags`](Self::set_default_flags)):
    /// `DONTCACHE` for an uncached read, `NOWAIT` for one that never waits
    /// for IO.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at); with `NOWAIT`, `WouldBlock` when the
    /// first byte is not cached.
    pub fn read_at_flags(
        &self,
        buf: &mut [u8],
        offset: u64,
        flags: ReadFlags,
    ) -> io::Result<usize> {
        self.read_counted(buf, offset, flags, false)
    }

    /// [`read_at_flags`](Self::read_at_flags), for a read whose miss was
    /// counted and whose IO was started already when `started` (by
    /// [`read_many`](Self::read_many)): its folios are then not counted as
    /// hits. The read itself is the mapping's ([`Mapping::read`]), with
    /// this handle's readahead state and flags.
    pub(crate) fn read_counted(
        &self,
        buf: &mut [u8],
        offset: u64,
        flags: ReadFlags,
        started: bool,
    ) -> io::Result<usize> {
        self.mapping
            .read(&self.ra, buf, offset, self.effective_flags(flags), started)
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    ///
    /// # Errors
    /// `UnexpectedEof` if the file ends first; else as [`read_at`](Self::read_at).
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer: end of file",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// Flags and figures.
impl File {
    /// Flags every read through this handle (and its clones) gets, on top
    /// of its own: [`ReadFlags::DONTCACHE`] makes the whole file uncached
    /// (what a FUSE mount mounted uncached does). Replaces the previous
    /// defaults.
    pub fn set_default_flags(&self, flags: ReadFlags) {
        let private = self.ra.flags.load(Ordering::Relaxed) & Readahead::PRIVATE;
        // Only the named flags: bits a caller kept with `from_bits_retain`
        // must not land on the handle's private ones.
        let named = (flags & ReadFlags::all()).bits();
        self.ra.flags.store(named | private, Ordering::Relaxed);
    }

    /// The flags set by [`set_default_flags`](Self::set_default_flags).
    pub fn default_flags(&self) -> ReadFlags {
        let bits = self.ra.flags.load(Ordering::Relaxed) & !Readahead::PRIVATE;
        ReadFlags::from_bits(bits).unwrap_or_default()
    }

    /// How writes through this handle (and its clones) create the folios
    /// they need: `Insert::Batched` (the default:
    /// [`Mapping::grab_folios`](crate::filemap::Mapping::grab_folios)) or
    /// `Insert::Single` (`Mapping::grab_folios_single`, one folio at a
    /// time, for comparison).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn set_write_insert(&self, insert: Insert) {
        match insert {
            Insert::Batched => self
                .ra
                .flags
                .fetch_and(!Readahead::WRITE_SINGLE, Ordering::Relaxed),
            Insert::Single => self
                .ra
                .flags
                .fetch_or(Readahead::WRITE_SINGLE, Ordering::Relaxed),
        };
    }

    /// The setting of [`set_write_insert`](Self::set_write_insert).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn write_insert(&self) -> Insert {
        self.insert_mode()
    }

    /// How this handle's writes create folios (see `set_write_insert`).
    pub(crate) fn insert_mode(&self) -> Insert {
        if self.ra.flags.load(Ordering::Relaxed) & Readahead::WRITE_SINGLE != 0 {
            Insert::Single
        } else {
            Insert::Batched
        }
    }

    /// The flags a read with `flags` runs with: the call's, the defaults,
    /// and `DONTCACHE` after [`Advice::NoReuse`].
    pub(crate) fn effective_flags(&self, flags: ReadFlags) -> ReadFlags {
        let bits = self.ra.flags.load(Ordering::Relaxed);
        let mut f = flags | ReadFlags::from_bits(bits & !Readahead::PRIVATE).unwrap_or_default();
        if bits & Readahead::NOREUSE != 0 {
            f |= ReadFlags::DONTCACHE;
        }
        f
    }

    /// The file's own miss-ratio curve: the hit ratios its reads would have
    /// had if the whole cache were 0.25x, 0.5x, 1x, 2x and 4x its capacity,
    /// beside the other files' reads as they were (the file shares the
    /// cache), over a recent window: the cache's curve
    /// ([`Cache::hit_ratio_curve`](crate::Cache::hit_ratio_curve))
    /// restricted to this file's reads, from the same sample.
    ///
    /// Kept on request: the first call starts it (and returns a curve of
    /// no access); from then on the file's reads are counted, its sampled
    /// reads and its refaults attributed to it, for as long as the cache
    /// keeps the file (every handle of it shares one curve). The window
    /// is the cache's (two epochs of 16 capacities of the cache's reads),
    /// from the first call at the earliest. Cost: a sharded count a read
    /// of the file and its age's on a hit; about 27 KiB a file (its four
    /// sharded counters and its hits' ages). A point is not known
    /// ([`CurvePoint::known`](crate::CurvePoint::known)) while the file's
    /// first reads in the window may have been hits at that size in a
    /// warm cache; a file's first reads stay in its points' bounds until
    /// they leave the window (the cache's own curve drops those found to
    /// miss sooner).
    ///
    /// # Example
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("f"), vec![7u8; 1 << 20])?;
    /// let cache = foliocache::Cache::builder().capacity(4 << 20).build()?;
    /// let f = cache.open(dir.path().join("f"))?;
    /// assert_eq!(f.hit_ratio_curve().accesses, 0); // starts it
    /// let mut buf = [0u8; 4096];
    /// f.read_at(&mut buf, 0)?;
    /// f.read_at(&mut buf, 0)?;
    /// let curve = f.hit_ratio_curve();
    /// assert_eq!(curve.accesses, 2);
    /// assert_eq!(curve.at(1.0), Some(0.5));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hit_ratio_curve(&self) -> crate::HitRatioCurve {
        let stats = &self.mapping.inner().stats;
        let counts = self
            .mapping
            .curve
            .get_or_init(|| crate::stats::FileCounts::tracked(stats));
        stats.file_hit_ratio_curve(counts)
    }

    /// The page cache state of `len` bytes at `offset` (`len == 0`: to the
    /// end of the file's index), in pages, as `cachestat(2)`: see
    /// [`CacheStat`].
    ///
    /// # Errors
    /// `InvalidInput` when `offset + len` overflows.
    pub fn cachestat(&self, offset: u64, len: u64) -> io::Result<CacheStat> {
        let (first, last) = crate::cached::page_range(offset, len)?;
        Ok(self.mapping.cachestat(first, last))
    }
}

/// Readahead: windows, advice.
impl File {
    /// A new handle on the same cached file with its own readahead state
    /// and its own writeback error report (as opening the file again would
    /// give); the same access rights.
    pub fn reopen(&self) -> File {
        let cfg = self.ra.state.lock().cfg;
        self.mapping.handle_opened();
        File {
            mapping: self.mapping.clone(),
            ra: Arc::new(Readahead::new(cfg, self.ra.unread_cap().clone())),
            writable: self.writable,
            append: self.append,
            wb_since: Arc::new(AtomicU64::new(self.mapping.wb.err().sample())),
        }
    }

    /// Changes this file's readahead settings (shared with its clones);
    /// the window state starts over. Windows are capped at an eighth of
    /// the cache (not below 128 KiB).
    pub fn set_readahead(&self, cfg: ReadaheadConfig) {
        let cap = self.mapping.inner().mem.arena.capacity_pages() as u64;
        let mut st = self.ra.state.lock();
        *st = readahead::RaState::new(cfg.for_capacity(cap));
    }

    /// This file's readahead settings (after the cap).
    pub fn readahead_config(&self) -> ReadaheadConfig {
        self.ra.state.lock().cfg
    }

    /// The current readahead window (start and size in pages, and the
    /// async tail from the marker): for tests and tools.
    pub fn readahead_window(&self) -> Window {
        self.ra.state.lock().win
    }

    /// Starts reading `len` bytes at `offset` into the cache (like
    /// `readahead(2)` or `POSIX_FADV_WILLNEED`), in windows of up to 2 MiB,
    /// skipping what is cached. At most half the cache's capacity is read;
    /// the rest of a larger range is left for later reads. IO errors are
    /// not reported here (a later read of those bytes reports them).
    ///
    /// # Errors
    /// None today; the `Result` leaves room for asynchronous submission
    /// errors.
    pub fn readahead(&self, offset: u64, len: u64) -> io::Result<()> {
        self.mapping.readahead_range(&self.ra, offset, len)
    }

    /// Drops every cached folio of the file, dirty ones included, without
    /// writing them back, and every eviction shadow; then takes the file's
    /// size from the backing. Afterwards the file reads as its backing
    /// holds it, and the writes that were not yet written back are lost,
    /// for every handle of the file.
    ///
    /// For data no one can read again: the kernel drops an unlinked
    /// inode's dirty pages at its last close (`truncate_inode_pages_final`
    /// from `evict`), and the mount does the same (docs/design.md, the
    /// mount). Also to give up writes that a failing backing cannot take,
    /// or to reread a file that another program changed. Waits for folios
    /// under IO. A folio that a [`Pinned`](crate::Pinned) borrows leaves
    /// the file too; the pin keeps its bytes until it goes.
    ///
    /// # Errors
    /// `InvalidInput` for a memory file (its folios are its only copy);
    /// the backing's error if it cannot report its size (then nothing
    /// changed).
    pub fn discard(&self) -> io::Result<()> {
        crate::truncate::discard(&self.mapping)
    }

    /// Access advice for `len` bytes at `offset` (`len == 0`: to end of
    /// file), as `posix_fadvise`: [`Advice::Normal`], `Sequential` and
    /// `Random` set this file's readahead behaviour; `WillNeed` reads the
    /// range ([`readahead`](Self::readahead)); `DontNeed` drops the clean,
    /// unused folios lying wholly in the range, leaving no shadows.
    ///
    /// # Errors
    /// As [`readahead`](Self::readahead).
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        let end = if len == 0 {
            u64::MAX
        } else {
            offset.saturating_add(len)
        };
        match advice {
            Advice::NoReuse => {
                self.ra
                    .flags
                    .fetch_or(Readahead::NOREUSE, Ordering::Relaxed);
                Ok(())
            }
            Advice::Normal | Advice::Sequential | Advice::Random => {
                if advice == Advice::Normal {
                    self.ra
                        .flags
                        .fetch_and(!Readahead::NOREUSE, Ordering::Relaxed);
                }
                let mut st = self.ra.state.lock();
                st.random = advice == Advice::Random;
                st.ra_pages = match advice {
                    Advice::Sequential => st.cfg.max_pages * 2,
                    _ => st.cfg.max_pages,
                };
                Ok(())
            }
            Advice::WillNeed => self.readahead(offset, end - offset),
            Advice::DontNeed => {
                // Whole pages only, as the kernel does, but a partial last
                // page goes when the range reaches end of file (mm/fadvise.c:
                // "discarding the last page is safe enough").
                let first = offset.div_ceil(PAGE);
                let last = if end >= self.len() {
                    u64::MAX
                } else {
                    end / PAGE
                };
                if first < last {
                    self.mapping.invalidate(first, last);
                }
                Ok(())
            }
        }
    }
}

/// Borrowed reads: the cached bytes in place (`filemap/pin.rs`).
impl File {
    /// The file's bytes `offset..offset + len`, borrowed from the cache
    /// where they lie in one cached folio (no copy), else read into a
    /// buffer of the pin's own; fewer at end of file, none at or past it
    /// (an empty pin, as [`read_at`](Self::read_at) returns 0). A range
    /// not cached is read in first, as `read_at` would, and then pinned in
    /// place if it now can be.
    ///
    /// A pin in place holds the bytes as they were between writes: a write
    /// racing the pin shows whole or not at all. A copy (the range spans
    /// folios, or its folio stayed busy) is what a read returns: a racing
    /// write may show in part. [`Pinned::is_borrowed`] says which.
    ///
    /// The bytes never change while the pin lives: a write of the range
    /// meanwhile goes to a copy of the folio that replaces it in the file
    /// (the pin keeps the old bytes, reads see the new), and truncation
    /// leaves them too. With no free folio for that copy, the write waits
    /// (bounded, as an allocation) for memory or for the pin to go, then
    /// fails with `OutOfMemory`. A pin keeps its folio in memory (reclaim skips it):
    /// hold pins for the time a parse takes, not as a cache of their own,
    /// or the cache fills with them. The module documentation of `filemap/pin.rs`
    /// has the protocol.
    ///
    /// ```
    /// let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// let file = cache.memfile("pages", 8192)?;
    /// file.write_at(b"header", 0)?;
    /// let page = file.pin(0, 4096)?;
    /// assert_eq!(&page[..6], b"header");
    /// file.write_at(b"HEADER", 0)?; // to a copy of the folio: no wait
    /// assert_eq!(&page[..6], b"header"); // the pin's bytes stay
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// A pin borrows its file, so the file (and the cache behind it)
    /// outlives it:
    /// ```compile_fail
    /// let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// let file = cache.memfile("pages", 8192)?;
    /// let page = file.pin(0, 4096)?;
    /// drop(file); // error: `file` is borrowed by `page`
    /// let _ = page.len();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at), when no byte could be read.
    pub fn pin(&self, offset: u64, len: usize) -> io::Result<Pinned<'_>> {
        let size = self.len();
        if offset >= size || len == 0 {
            return Ok(Pinned::owned(Vec::new()));
        }
        let n = (offset.saturating_add(len as u64).min(size) - offset) as usize;
        let cached = !self
            .effective_flags(ReadFlags::NONE)
            .contains(ReadFlags::DONTCACHE);
        if cached {
            if let Ok(p) = self.mapping.pin_cached(offset, n, true, true) {
                return Ok(p);
            }
        }
        let mut v = vec![0u8; n];
        let done = crate::cached::read_up_to(self, &mut v, offset)?;
        if cached && done == n {
            if let Some(p) = self.mapping.pin_busy(offset, n) {
                return Ok(p);
            }
        }
        v.truncate(done);
        Ok(Pinned::owned(v))
    }

    /// Pins `offset..offset + len` in place, as [`pin`](Self::pin) does
    /// when it can, and never reads: `None` unless the whole range lies in
    /// one cached, uptodate folio whose lock is free (and the file's reads
    /// are not uncached). A pin counts as a read's hit. For a caller that
    /// must not block (an async executor's thread): it copies out of the
    /// pin, and reads (where it may block) only when it gets `None`.
    ///
    /// ```
    /// let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// let file = cache.memfile("pages", 8192)?;
    /// file.write_at(b"header", 0)?;
    /// assert_eq!(&file.pin_cached(0, 6).expect("cached")[..], b"header");
    /// assert!(file.pin_cached(8190, 4).is_none()); // past the end
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pin_cached(&self, offset: u64, len: usize) -> Option<Pinned<'_>> {
        if !self.may_pin(offset, len) {
            return None;
        }
        self.mapping.pin_cached(offset, len, true, true).ok()
    }

    /// [`pin_cached`](Self::pin_cached) as an [`OwnedPin`]: the same
    /// bytes in place, owning the cache rather than borrowing this file, so
    /// that they can outlive it (`bytes::Bytes::from_owner(pin)` makes a
    /// hit a lookup and a reference count, no copy). `None` as
    /// `pin_cached`'s, and also while owned pins hold a quarter of the
    /// cache's memory (each folio counted whole): then nothing is pinned
    /// or counted, and the caller copies from [`pin_cached`](Self::pin_cached).
    /// Unlike a read's hit and `pin_cached`, the lookup prefetches none of
    /// the bytes: the caller reads them when it likes, if at all.
    ///
    /// The bytes are a snapshot, as a [`Pinned`]'s: a write of the range
    /// goes to a copy of the folio (the pin keeps the old bytes, reads see
    /// the new), reclaim skips the folio, and closing the file or dropping
    /// the [`Cache`] handle leave them; the cache's memory is freed when
    /// its last owned pin goes.
    ///
    /// ```
    /// let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
    /// let file = cache.memfile("pages", 8192)?;
    /// file.write_at(b"header", 0)?;
    /// let page = file.pin_cached_owned(0, 6).expect("cached");
    /// file.write_at(b"HEADER", 0)?; // to a copy of the folio
    /// drop((file, cache));
    /// assert_eq!(&page[..], b"header"); // the pin's bytes stay
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pin_cached_owned(&self, offset: u64, len: usize) -> Option<OwnedPin> {
        if !self.may_pin(offset, len) {
            return None;
        }
        self.mapping.pin_owned(offset, len)
    }

    /// Whether `offset..offset + len` may be pinned in place: not empty,
    /// inside the file, and the file's reads are cached.
    fn may_pin(&self, offset: u64, len: usize) -> bool {
        len != 0
            && offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len())
            && !self
                .effective_flags(ReadFlags::NONE)
                .contains(ReadFlags::DONTCACHE)
    }
}

/// The positioned reads and writes of [`std::fs::File`], so code written
/// against `FileExt` runs on the cache.
impl std::os::unix::fs::FileExt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        File::read_at(self, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        File::write_at(self, buf, offset)
    }
}

impl Clone for File {
    /// Another handle sharing this one's readahead state and error report
    /// (as a duplicated file descriptor).
    fn clone(&self) -> File {
        self.mapping.handle_opened();
        File {
            mapping: self.mapping.clone(),
            ra: self.ra.clone(),
            writable: self.writable,
            append: self.append,
            wb_since: self.wb_since.clone(),
        }
    }
}

impl Drop for File {
    /// The last handle on a file writes its dirty data back before it goes.
    /// If that fails, the cache keeps the file (its dirty data and its
    /// error) and the flusher retries it, for up to 60 s; a reopen
    /// meanwhile shares it, and its next sync reports the error.
    /// (`sync_data` before the close sees the error directly.)
    fn drop(&mut self) {
        if self.mapping.handle_closed() {
            let closed = crate::writeback::close(&self.mapping);
            // (A later open of the path that shares the mapping closes it
            // again, and sets this anew.)
            self.mapping.set_closed_clean(closed.is_ok());
            if let Err(e) = closed {
                log::warn!(
                    "foliocache: writing back {:?} as it closed: {e}; kept cached and retried",
                    self.mapping.inode.path
                );
                self.mapping.inner().keep_closed_dirty(self.mapping.clone());
            }
        }
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.mapping.fmt(f)
    }
}
