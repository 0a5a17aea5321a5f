//! `File`: a file read through the cache.
//!
//! The read loop (reference 3.8 and 3.9, without readahead yet): fetch a
//! batch of referenced, contiguous folios for the request in one lockless
//! walk ([`Mapping::get_read_batch`]) and copy out of them. On a miss create
//! the largest folio that fits the request at an aligned index, insert it
//! locked, read it with one IO, zero what lies past end of file, mark it
//! uptodate and unlock it. A second reader that misses on the same index
//! finds the locked folio and sleeps on its lock instead of issuing a
//! second IO.

use std::io;
use std::path::Path;
use std::sync::Arc;

use backing::{Backing, BackingInfo, FileBacking, FileOptions};

use crate::arena::PAGE_SIZE;
use crate::cache::Cache;
use crate::folio::FolioFlags;
use crate::mapping::{AddError, FolioRef, Mapping, BATCH};

const PAGE: u64 = PAGE_SIZE as u64;

/// A file opened through a [`Cache`]. Cheap to share between threads
/// (`&File` reads concurrently; clone it for ownership).
#[derive(Clone)]
pub struct File {
    mapping: Arc<Mapping>,
}

impl Cache {
    /// Opens `path` for reading through the cache. The file is opened with
    /// `O_DIRECT`; where the filesystem refuses it, the backing falls back
    /// to buffered IO with `POSIX_FADV_DONTNEED`, logs a warning, and
    /// [`File::info`] says so.
    ///
    /// # Errors
    /// The OS error of `open(2)` or `fstat(2)`.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        let backing = FileBacking::open(path, &FileOptions::new().read(true))?;
        let size = backing.len()?;
        let mut mapping = Mapping::new(self.clone(), Box::new(backing), size);
        mapping.path = Some(path.to_path_buf());
        Ok(File {
            mapping: Arc::new(mapping),
        })
    }

    /// Reads any [`Backing`] through the cache (a memory backing, a
    /// fault-injecting one in tests). Its length is sampled now: files are
    /// read-only until writes land.
    ///
    /// # Errors
    /// The backing's error from `len`.
    pub fn open_backing(&self, backing: impl Backing) -> io::Result<File> {
        let size = backing.len()?;
        Ok(File {
            mapping: Arc::new(Mapping::new(self.clone(), Box::new(backing), size)),
        })
    }
}

impl File {
    /// The file's length in bytes (sampled at open).
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
        let size = self.len();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let m = &*self.mapping;
        let end = offset.saturating_add(buf.len() as u64).min(size);
        // The common hit: the whole request inside one cached folio. One
        // lockless lookup, no batch, no range walk.
        if let Some(f) = m.get_for_read(offset, (end - offset) as usize) {
            let start = f.index() * PAGE;
            if f.test(FolioFlags::UPTODATE) && end <= start + f.nr_pages() * PAGE {
                f.set_if_clear(FolioFlags::REFERENCED);
                let n = (end - offset) as usize;
                m.copy_out(&f, (offset - start) as usize, &mut buf[..n]);
                m.inner().stats.hits.add(1);
                return Ok(n);
            }
        }
        let mut pos = offset;
        let mut copied = 0usize;
        let mut batch: Vec<FolioRef<'_>> = Vec::with_capacity(BATCH);
        while pos < end {
            if let Err(e) = self.get_pages(pos / PAGE, end, &mut batch) {
                if copied == 0 {
                    return Err(e);
                }
                break;
            }
            let stats = &m.inner().stats;
            for f in batch.drain(..) {
                if pos >= end {
                    break;
                }
                let start = f.index() * PAGE;
                let from = (pos - start) as usize;
                let n = (f.nr_pages() * PAGE - from as u64).min(end - pos) as usize;
                m.copy_out(&f, from, &mut buf[copied..copied + n]);
                stats.hits.add(1);
                pos += n as u64;
                copied += n;
            }
        }
        Ok(copied)
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
    /// run from page `index` (reference 3.9): a batch lookup; on a miss the
    /// folio is created and read; a last folio still being read is waited
    /// for only when it is the first (partial progress first).
    fn get_pages<'m>(
        &'m self,
        index: u64,
        end: u64,
        batch: &mut Vec<FolioRef<'m>>,
    ) -> io::Result<()> {
        let m = &*self.mapping;
        let last = (end - 1) / PAGE;
        loop {
            m.get_read_batch(index, last, batch);
            for f in batch.iter() {
                f.set_if_clear(FolioFlags::REFERENCED);
            }
            let Some(tail) = batch.last() else {
                match self.create(index, last)? {
                    Some(f) => {
                        batch.push(f);
                        return Ok(());
                    }
                    None => continue,
                }
            };
            if tail.test(FolioFlags::UPTODATE) {
                return Ok(());
            }
            if batch.len() > 1 {
                batch.pop();
                return Ok(());
            }
            let f = batch.pop().expect("one folio");
            // Being read by another thread (or its read failed): wait for
            // the lock, then look again.
            f.lock();
            if f.mapping() != m.id() {
                // Removed while we slept (its read failed): start over.
                f.unlock();
                continue;
            }
            if f.test(FolioFlags::UPTODATE) {
                f.unlock();
            } else {
                m.read_folio(&f)?;
            }
            batch.push(f);
            return Ok(());
        }
    }

    /// Creates, inserts and reads the folio for a miss at `index`. `None`
    /// when another reader inserted one first (look it up again).
    fn create(&self, index: u64, last: u64) -> io::Result<Option<FolioRef<'_>>> {
        let m = &*self.mapping;
        let mut order = m.inner().max_order;
        while order > 0 && (index % (1 << order) != 0 || index + (1 << order) - 1 > last) {
            order -= 1;
        }
        loop {
            let f = m.new_folio(order)?;
            let got = f.order();
            match m.add_folio(&f, index) {
                Ok(_) => {
                    m.inner().stats.misses.add(1);
                    m.read_folio(&f)?;
                    return Ok(Some(f));
                }
                Err(e) => {
                    f.unlock();
                    match e {
                        AddError::Exists if got > 0 => order = got - 1,
                        AddError::Exists => return Ok(None),
                        other => return Err(other.into()),
                    }
                }
            }
        }
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.mapping.fmt(f)
    }
}
