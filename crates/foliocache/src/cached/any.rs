//! [`AnyFile`]: a file served by either cache, for a program that learns
//! only at run time which serves it (the interposer: the group's cache
//! once the process joins a group; the mount: a named shared cache or its
//! own), and [`SharedHandle`], a handle's rights on a group's file that
//! several handles share.

use std::io;
use std::sync::Arc;

use super::{CacheFigures, CachedFile};
use crate::file::File;
use crate::flags::ReadFlags;
use crate::mrc::HitRatioCurve;
use crate::readahead::Advice;
use crate::shared::SharedFile;
use crate::workingset::CacheStat;
use crate::write::WriteFlags;

/// A file in this process's cache or in its group's: the one
/// [`CachedFile`] a consumer holds when either may serve it. A call is
/// one `match` and the cache's own method.
///
/// # Example
/// ```
/// use foliocache::{AnyFile, CachedFile, SharedHandle};
/// use std::sync::Arc;
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("f"), b"hello")?;
/// let group = foliocache::SharedCache::new(1 << 20)?;
/// let shared = group.open(std::fs::File::open(dir.path().join("f"))?)?;
/// let f = AnyFile::Shared(SharedHandle::new(Arc::new(shared), false, false));
/// assert_eq!(f.len()?, 5);
/// assert!(f.write_at(b"x", 0).is_err()); // not opened for writing
/// assert_eq!(f.hit_ratio_curve(), None); // no file's own: the group's is the cache's
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub enum AnyFile {
    /// A file of this process's [`Cache`](crate::Cache).
    Private(File),
    /// A file of the group's [`SharedCache`](crate::SharedCache), with
    /// the rights of this handle.
    Shared(SharedHandle),
}

/// A handle on a file of the group's cache: the file (one descriptor,
/// shared by the handles of a file) and this handle's rights. The file's
/// descriptor may allow more than a handle does (a server opens it for
/// writing where it may, so that any of its handles can write back what
/// others of the group wrote); a change goes through only if both allow
/// it.
#[derive(Clone)]
pub struct SharedHandle {
    file: Arc<SharedFile>,
    /// Writes are allowed through this handle.
    writable: bool,
    /// Writes go to the end of the file (`O_APPEND`).
    append: bool,
}

impl std::fmt::Debug for SharedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHandle")
            .field("writable", &self.writable)
            .field("append", &self.append)
            .finish_non_exhaustive()
    }
}

impl SharedHandle {
    /// A handle on `file` with these rights.
    pub fn new(file: Arc<SharedFile>, writable: bool, append: bool) -> SharedHandle {
        SharedHandle {
            file,
            writable,
            append,
        }
    }

    /// The file in the group's cache.
    pub fn file(&self) -> &Arc<SharedFile> {
        &self.file
    }

    /// The file, for a change through this handle: refused
    /// (`PermissionDenied`, as a private [`File`] not opened for writing
    /// refuses it) unless the handle may write. (The file itself refuses
    /// changes through a descriptor not opened for writing.)
    fn for_writing(&self) -> io::Result<&SharedFile> {
        if self.writable {
            Ok(&self.file)
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the handle was not opened for writing",
            ))
        }
    }
}

impl AnyFile {
    /// The file of this process's cache, if that serves it.
    #[inline]
    pub fn private(&self) -> Option<&File> {
        match self {
            AnyFile::Private(f) => Some(f),
            AnyFile::Shared(_) => None,
        }
    }

    /// The handle on the group's file, if the group's cache serves it.
    #[inline]
    pub fn shared(&self) -> Option<&SharedHandle> {
        match self {
            AnyFile::Private(_) => None,
            AnyFile::Shared(h) => Some(h),
        }
    }

    /// Another handle on the same file with the same rights: for the
    /// private cache, [`File::reopen`] (its own readahead state and
    /// writeback error report); for the group's, the same file.
    pub fn reopen(&self) -> AnyFile {
        match self {
            AnyFile::Private(f) => AnyFile::Private(f.reopen()),
            AnyFile::Shared(h) => AnyFile::Shared(h.clone()),
        }
    }

    /// Whether a process of the group holds the file in the kernel
    /// ([`SharedFile::handed_elsewhere`]); never for the private cache.
    #[inline]
    pub fn handed_elsewhere(&self) -> bool {
        self.shared().is_some_and(|h| h.file.handed_elsewhere())
    }

    /// At its open: whether this handle may serve a file
    /// [`handed_elsewhere`](Self::handed_elsewhere), taken back from the
    /// kernel if no live process of the group holds it there
    /// ([`SharedFile::take_back_from_kernel`]); always for the private
    /// cache.
    ///
    /// # Errors
    /// The group's cache's, when the file's slot cannot be read.
    pub fn take_back_from_kernel(&self) -> io::Result<bool> {
        match self {
            AnyFile::Private(_) => Ok(true),
            AnyFile::Shared(h) => h.file.take_back_from_kernel(),
        }
    }

    /// Readies the file to be changed behind the cache (a mapping, a
    /// stdio stream): its dirty data written back and synced. The group's
    /// cache also drops the file's pages ([`SharedFile::change_file`]),
    /// so that what the kernel's side changes next is read from the file
    /// by the group, not from stale pages.
    ///
    /// # Errors
    /// The writeback's or the sync's; for the group's cache,
    /// `PermissionDenied` if its descriptor was not opened for writing.
    pub fn hand_over(&self) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.sync_data(),
            AnyFile::Shared(h) => h.file.change_file(|_| Ok(())),
        }
    }

    /// Drops the data of a file no name reaches any more: the private
    /// cache's dirty data unwritten ([`File::discard`]). The group's is
    /// written back instead, through this descriptor: another process of
    /// the group may still have the file open, and once every descriptor
    /// is gone no one could write it back by path.
    ///
    /// # Errors
    /// The discard's or the writeback's.
    pub fn discard_unlinked(&self) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.discard(),
            AnyFile::Shared(h) => CachedFile::write_back(&*h.file),
        }
    }
}

/// Each method is the serving cache's, through one `match`; a group's
/// handle adds its rights (a change refused unless it may write) and its
/// append mode (every write at the end).
impl CachedFile for AnyFile {
    #[inline]
    fn len(&self) -> io::Result<u64> {
        match self {
            AnyFile::Private(f) => Ok(f.len()),
            AnyFile::Shared(h) => h.file.len(),
        }
    }

    #[inline]
    fn is_writable(&self) -> bool {
        match self {
            AnyFile::Private(f) => f.is_writable(),
            AnyFile::Shared(h) => h.writable,
        }
    }

    #[inline]
    fn read_at_flags(&self, buf: &mut [u8], offset: u64, flags: ReadFlags) -> io::Result<usize> {
        match self {
            AnyFile::Private(f) => f.read_at_flags(buf, offset, flags),
            AnyFile::Shared(h) => h.file.read_at(buf, offset),
        }
    }

    #[inline]
    fn read_in_place<R, F: FnOnce(&[u8]) -> R>(&self, at: u64, n: usize, f: F) -> Result<R, F> {
        match self {
            AnyFile::Private(file) => file.read_in_place(at, n, f),
            AnyFile::Shared(h) => h.file.read_in_place(at, n, f),
        }
    }

    #[inline]
    fn write_at_flags(&self, buf: &[u8], offset: u64, flags: WriteFlags) -> io::Result<usize> {
        match self {
            AnyFile::Private(f) => f.write_at_flags(buf, offset, flags),
            AnyFile::Shared(h) if h.append => h.for_writing()?.append(buf).map(|_| buf.len()),
            AnyFile::Shared(h) => h.for_writing()?.write_at(buf, offset),
        }
    }

    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        match self {
            AnyFile::Private(f) => f.append(buf),
            AnyFile::Shared(h) => h.for_writing()?.append(buf),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.set_len(len),
            AnyFile::Shared(h) => h.for_writing()?.set_len(len),
        }
    }

    fn write_back(&self) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => CachedFile::write_back(f),
            AnyFile::Shared(h) => CachedFile::write_back(&*h.file),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.sync_data(),
            AnyFile::Shared(h) => h.file.sync_data(),
        }
    }

    fn sync_all(&self) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.sync_all(),
            AnyFile::Shared(h) => h.file.sync_all(),
        }
    }

    fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.allocate(offset, len, keep_size),
            AnyFile::Shared(h) => CachedFile::allocate(h.for_writing()?, offset, len, keep_size),
        }
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.punch_hole(offset, len),
            AnyFile::Shared(h) => CachedFile::punch_hole(h.for_writing()?, offset, len),
        }
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.collapse_range(offset, len),
            AnyFile::Shared(h) => CachedFile::collapse_range(h.for_writing()?, offset, len),
        }
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.insert_range(offset, len),
            AnyFile::Shared(h) => CachedFile::insert_range(h.for_writing()?, offset, len),
        }
    }

    fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        match self {
            AnyFile::Private(f) => f.advise(offset, len, advice),
            AnyFile::Shared(h) => CachedFile::advise(&*h.file, offset, len, advice),
        }
    }

    fn cachestat(&self, offset: u64, len: u64) -> io::Result<CacheStat> {
        match self {
            AnyFile::Private(f) => f.cachestat(offset, len),
            AnyFile::Shared(h) => CachedFile::cachestat(&*h.file, offset, len),
        }
    }

    fn hit_ratio_curve(&self) -> Option<HitRatioCurve> {
        match self {
            AnyFile::Private(f) => CachedFile::hit_ratio_curve(f),
            AnyFile::Shared(h) => CachedFile::hit_ratio_curve(&*h.file),
        }
    }

    fn figures(&self) -> CacheFigures {
        match self {
            AnyFile::Private(f) => CachedFile::figures(f),
            AnyFile::Shared(h) => CachedFile::figures(&*h.file),
        }
    }
}
