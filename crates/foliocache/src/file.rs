//! `File`: a file read through the cache.
//!
//! The read loop (`filemap_read`, `filemap_get_pages`): fetch a batch of referenced,
//! contiguous folios for the request in one lockless walk
//! ([`Mapping::get_read_batch`]) and copy out of them. On a miss, start
//! synchronous readahead (`page_cache_sync_ra`, [`crate::readahead`]): a window of
//! folios allocated, inserted locked, and read in runs, one IO per run of
//! contiguous folios; then look again. A folio carrying the readahead marker
//! starts the next window (`page_cache_async_ra`). If readahead made nothing (memory short, or
//! off), create the largest folio that fits the request at an aligned index
//! and read it. A second reader that misses on the same index finds the
//! locked folio and sleeps on its lock instead of issuing a second IO.

use std::io;
use std::path::Path;
use std::sync::{Arc, Weak};

use backing::{Backing, BackingInfo, FileBacking, FileOptions};

use crate::cache::Cache;
use crate::filemap::{fit_order, serves_hit, AddError, FolioRef, Mapping, BATCH};
use crate::flags::ReadFlags;
use crate::folio::FolioFlags;
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
        use std::os::unix::fs::MetadataExt;
        let backing = FileBacking::open(path, opts)?;
        let md = backing.file().metadata()?;
        let size = backing.len()?;
        let backing: Arc<dyn Backing> = Arc::new(backing);
        let (mapping, new) = self.inner.find_or_register((md.dev(), md.ino()), |this| {
            let mut m = Mapping::new(this, self.clone(), backing.clone(), size);
            m.path = Some(path.to_path_buf());
            m
        });
        if new {
            mapping.set_backing(backing, writable);
        } else {
            if writable && !mapping.backing_writable() {
                mapping.set_backing(backing, true);
            }
            if truncated {
                // The open cut the file on the backing: the cache follows.
                mapping.truncate_to(0)?;
            }
        }
        Ok(self.file_on(mapping).with_access(writable, false))
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
            .file(|this| Mapping::new(this, self.clone(), Arc::new(backing), size))
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
        mapping.handles.fetch_add(1, Ordering::Relaxed);
        let since = mapping.wb_err.sample();
        File {
            mapping,
            ra: Arc::new(Readahead::new(
                self.inner
                    .readahead
                    .for_capacity(self.inner.arena.capacity_pages() as u64),
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
        self.mapping.path.as_deref()
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
    /// hits.
    pub(crate) fn read_counted(
        &self,
        buf: &mut [u8],
        offset: u64,
        flags: ReadFlags,
        started: bool,
    ) -> io::Result<usize> {
        let size = self.len();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let flags = self.effective_flags(flags);
        let uncached = flags.contains(ReadFlags::DONTCACHE);
        let m = &*self.mapping;
        let cache = m.inner();
        let end = offset.saturating_add(buf.len() as u64).min(size);
        // The common hit: the whole request inside one cached folio. One
        // lockless lookup, no batch, no range walk.
        // (It leaves the readahead state alone, `prev_pos` included: a hit
        // writes nothing other threads read. A marker or a dropbehind
        // folio takes the batch path, which starts the next window or
        // deals with the flag.)
        let (hit, sequential) = m.get_for_read(offset, (end - offset) as usize);
        // No folio at `offset` a moment ago: the miss path need not look
        // again before it reads.
        let mut absent = hit.is_none();
        if let Some(f) = hit {
            let start = f.index() * PAGE;
            let ff = f.flags();
            if serves_hit(&f, ff, end) {
                // A read that goes on in the folio where this thread's
                // previous read ended is not a new access.
                if !(sequential && offset > start) {
                    cache.mark_accessed(&f, ff);
                }
                let n = (end - offset) as usize;
                m.copy_out(&f, (offset - start) as usize, &mut buf[..n], !sequential);
                if !started {
                    cache.stats.hits.add(1);
                }
                return Ok(n);
            }
        }
        if m.memfile {
            return Ok(self.read_mem(buf, offset, end));
        }
        let mut pos = offset;
        let mut copied = 0usize;
        let mut batch: Vec<FolioRef<'_>> = Vec::with_capacity(BATCH);
        let (mut size, mut end) = (size, end);
        while pos < end {
            let got = self.get_pages(pos / PAGE, end, flags, absent, &mut batch);
            absent = false;
            let missed = match got {
                Ok(missed) => missed,
                Err(e) => {
                    if copied == 0 {
                        return Err(e);
                    }
                    break;
                }
            };
            // The size again, now that the folios are uptodate (the
            // kernel's filemap_read): a truncate cuts the backing and sets
            // the size before it drops the folios past it, holding
            // `invalidate_lock`, which a miss's folio creation takes
            // shared. So a folio filled from a backing already cut (zeros
            // past the new end) was filled after the new size was set, and
            // this sees it: those bytes are past the end, not data.
            let now = self.len();
            if now < size {
                size = now;
                end = end.min(size);
                if pos >= end {
                    batch.clear();
                    break;
                }
            }
            for f in batch.drain(..) {
                if pos >= end {
                    break;
                }
                let start = f.index() * PAGE;
                let from = (pos - start) as usize;
                let n = (f.nr_pages() * PAGE - from as u64).min(end - pos) as usize;
                let mut ff = f.flags();
                if ff.contains(FolioFlags::DROPBEHIND) && !uncached {
                    // A cached read claims a folio an uncached one brought
                    // in: it stays (the kernel's own `filemap_read` would
                    // keep the flag; here a cached reader's use wins).
                    f.test_and_clear(FolioFlags::DROPBEHIND);
                    ff = f.flags();
                }
                if !(copied == 0 && sequential && offset > start) {
                    cache.mark_accessed(&f, ff);
                }
                m.copy_out(&f, from, &mut buf[copied..copied + n], false);
                if !missed && !started {
                    cache.stats.hits.add(1);
                }
                // Dropped once read through to its end (or to end of file):
                // a stream reading a large folio in pieces keeps it until
                // its last piece.
                let folio_end = (start + f.nr_pages() * PAGE).min(size);
                if uncached && ff.contains(FolioFlags::DROPBEHIND) && pos + n as u64 >= folio_end {
                    m.drop_behind(&f);
                }
                pos += n as u64;
                copied += n;
            }
        }
        self.ra
            .prev_pos
            .store(offset + copied as u64, Ordering::Relaxed);
        Ok(copied)
    }

    /// A memory file's read of bytes `offset..end` (the batched lookup of
    /// `filemap_get_folios_contig`):
    /// the folios present come in batches from one lockless walk each
    /// ([`Mapping::get_folios_contig`]); a hole, of any length (a missing
    /// large folio included), is copied out as zeros up to the next folio,
    /// with no allocation and no per-page lookup. Returns the bytes copied.
    fn read_mem(&self, buf: &mut [u8], offset: u64, end: u64) -> usize {
        let m = &*self.mapping;
        let cache = m.inner();
        let last = (end - 1) / PAGE;
        let mut pos = offset;
        let mut batch: Vec<FolioRef<'_>> = Vec::with_capacity(BATCH);
        'outer: while pos < end {
            let mut from = pos / PAGE;
            m.get_folios_contig(&mut from, last, &mut batch);
            if batch.is_empty() {
                let next = m.next_present(pos / PAGE, last + 1);
                let stop = next.saturating_mul(PAGE).min(end);
                if stop > pos {
                    let at = (pos - offset) as usize;
                    buf[at..at + (stop - pos) as usize].fill(0);
                    pos = stop;
                }
                continue;
            }
            for f in batch.drain(..) {
                if !f.test(FolioFlags::UPTODATE) {
                    // Being written for the first time: wait for the writer.
                    f.wait_unlocked();
                    if f.mapping() != m.id() || !f.test(FolioFlags::UPTODATE) {
                        continue 'outer;
                    }
                }
                let start = f.index() * PAGE;
                if start + f.nr_pages() * PAGE <= pos {
                    continue;
                }
                let n = ((start + f.nr_pages() * PAGE).min(end) - pos) as usize;
                let at = (pos - offset) as usize;
                m.copy_out(&f, (pos - start) as usize, &mut buf[at..at + n], false);
                cache.stats.hits.add(1);
                pos += n as u64;
            }
        }
        (end - offset) as usize
    }

    /// Calls `f` with the file's bytes `offset..offset + len` (fewer at end
    /// of file, none at or past it), without copying them when it can: if
    /// the range lies in one cached, uptodate folio whose lock is free, `f`
    /// reads them in place, pinned while it runs (as [`pin`](Self::pin): a
    /// writer of that folio meanwhile writes a copy of it, without
    /// waiting, and `f`'s bytes do not change). Otherwise the bytes are
    /// read as [`read_at`](Self::read_at) reads them into a buffer of this
    /// thread's, and `f` gets that. For a server that sends cached data on
    /// (a FUSE reply) with one copy instead of two, and no allocation when
    /// the range spans folios.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at), when no byte could be read.
    pub fn read_with<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let size = self.len();
        if offset >= size || len == 0 {
            return Ok(f(&[]));
        }
        let n = (offset.saturating_add(len as u64).min(size) - offset) as usize;
        if !self
            .effective_flags(ReadFlags::NONE)
            .contains(ReadFlags::DONTCACHE)
        {
            if let Ok(p) = self.pin_cached(offset, n, true) {
                return Ok(f(&p));
            }
        }
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|cell| {
            // (A fresh buffer if `f` of an outer call reads again.)
            let mut own = Vec::new();
            let mut borrowed = cell.try_borrow_mut();
            let buf = match borrowed.as_deref_mut() {
                Ok(b) => b,
                Err(_) => &mut own,
            };
            if buf.len() < n {
                buf.resize(n, 0);
            }
            let done = self.read_up_to(&mut buf[..n], offset)?;
            Ok(f(&buf[..done]))
        })
    }

    /// Reads until `buf` is full or the file ends; returns the bytes read.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at), when no byte could be read (an error
    /// after some stops the read short).
    pub(crate) fn read_up_to(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
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

    /// Fills `batch` with uptodate, referenced folios covering a contiguous
    /// run from page `index` (`filemap_get_pages`): a batch lookup; on a miss,
    /// synchronous readahead and a second lookup, and if that found nothing
    /// the folio is created and read; a marker folio starts the next window;
    /// a last folio still being read is waited for only when it is the
    /// first (partial progress first). `absent`: the caller just found no
    /// folio at `index` (the first lookup is skipped). Returns whether this
    /// read started the IO for its first folio: a miss (counted once in the cache's
    /// misses; its folios are then not counted as hits). A read that finds
    /// another's IO in flight and waits for it is a hit.
    fn get_pages<'m>(
        &'m self,
        index: u64,
        end: u64,
        flags: ReadFlags,
        absent: bool,
        batch: &mut Vec<FolioRef<'m>>,
    ) -> io::Result<bool> {
        let m = &*self.mapping;
        let last = (end - 1) / PAGE;
        let nowait = flags.contains(ReadFlags::NOWAIT);
        let dropbehind = flags.contains(ReadFlags::DONTCACHE);
        let mut missed = false;
        let mut absent = absent;
        loop {
            if !std::mem::take(&mut absent) {
                m.get_read_batch(index, last, batch);
            }
            if batch.is_empty() {
                if nowait {
                    return Err(would_block());
                }
                missed |= self.sync_readahead(index, last - index + 1, dropbehind, batch);
                if batch.is_empty() {
                    m.get_read_batch(index, last, batch);
                }
            }
            let Some(tail) = batch.last() else {
                match self.create(index, last, dropbehind)? {
                    Some(f) => {
                        batch.push(f);
                        missed = true;
                        break;
                    }
                    None => continue,
                }
            };
            if tail.test(FolioFlags::READAHEAD) {
                self.async_readahead(tail, last, dropbehind);
            }
            if tail.test(FolioFlags::UPTODATE) {
                break;
            }
            if batch.len() > 1 {
                batch.pop();
                break;
            }
            if nowait {
                batch.clear();
                return Err(would_block());
            }
            // Being read (by readahead or another reader), or its read
            // failed: wait for the lock, then look again.
            let f = batch.pop().expect("one folio").lock();
            if f.mapping() != m.id() {
                // Removed while we slept (its read failed): start over.
                continue;
            }
            batch.push(m.read_folio(f)?);
            break;
        }
        if missed {
            m.inner().stats.misses.add(1);
        }
        Ok(missed)
    }

    /// Creates, inserts and reads the folio for a miss at `index`. `None`
    /// when another reader inserted one first (look it up again).
    fn create(&self, index: u64, last: u64, dropbehind: bool) -> io::Result<Option<FolioRef<'_>>> {
        let m = &*self.mapping;
        // No folio is read from blocks being punched or truncated.
        let _inv = m.invalidate_lock.read();
        let mut order = fit_order(index, last.saturating_add(1), m.inner().max_order);
        loop {
            let f = m.new_folio(order)?;
            if dropbehind {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            let got = f.order();
            match m.add_folio(&f, index) {
                Ok(_) => return m.read_folio(f).map(Some),
                Err(AddError::Exists) if got > 0 => order = got - 1,
                Err(AddError::Exists) => return Ok(None),
                Err(other) => return Err(other.into()),
            }
        }
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

    /// The page cache state of `len` bytes at `offset` (`len == 0`: to the
    /// end of the file's index), in pages, as `cachestat(2)`: see
    /// [`CacheStat`].
    ///
    /// # Errors
    /// `InvalidInput` when `offset + len` overflows.
    pub fn cachestat(&self, offset: u64, len: u64) -> io::Result<CacheStat> {
        let first = offset / PAGE;
        let last = if len == 0 {
            u64::MAX
        } else {
            let end = offset.checked_add(len).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cachestat: offset {offset} + len {len} overflows"),
                )
            })?;
            (end - 1) / PAGE
        };
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
        self.mapping.handles.fetch_add(1, Ordering::Relaxed);
        File {
            mapping: self.mapping.clone(),
            ra: Arc::new(Readahead::new(cfg)),
            writable: self.writable,
            append: self.append,
            wb_since: Arc::new(AtomicU64::new(self.mapping.wb_err.sample())),
        }
    }

    /// Changes this file's readahead settings (shared with its clones);
    /// the window state starts over. Windows are capped at an eighth of
    /// the cache (not below 128 KiB).
    pub fn set_readahead(&self, cfg: ReadaheadConfig) {
        let cap = self.mapping.inner().arena.capacity_pages() as u64;
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
        self.mapping.discard()
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

fn would_block() -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        "foliocache: the data is not cached and the read asked not to wait (NOWAIT)",
    )
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
        self.mapping.handles.fetch_add(1, Ordering::Relaxed);
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
    /// error) and the flusher retries it, for up to
    /// [`CLOSED_DIRTY_KEEP`](crate::CLOSED_DIRTY_KEEP); a reopen
    /// meanwhile shares it, and its next sync reports the error.
    /// (`sync_data` before the close sees the error directly.)
    fn drop(&mut self) {
        if self.mapping.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Err(e) = self.mapping.close_handle() {
                log::warn!(
                    "foliocache: writing back {:?} as it closed: {e}; kept cached and retried",
                    self.mapping.path
                );
                self.mapping
                    .inner()
                    .closed_dirty
                    .lock()
                    .push((self.mapping.clone(), std::time::Instant::now()));
            }
        }
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.mapping.fmt(f)
    }
}
