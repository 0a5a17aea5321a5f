//! [`CachedFile`]: a regular file's data as the mount serves it, through
//! the mount's own [`foliocache::Cache`] ([`foliocache::File`]) or through
//! a named shared cache that other programs attach to
//! ([`foliocache::SharedFile`], docs/design.md section 13, "Named caches").
//!
//! The two kinds answer exactly the operations the file system uses; an
//! enum match is all the private cache's path pays. A shared file's
//! handles share one [`SharedFile`] (one descriptor of the backing file)
//! and carry their own access rights: the descriptor is opened for
//! reading and writing where the server may, so that any handle can write
//! back what others of the group wrote.

use std::io;
use std::sync::Arc;

use foliocache::{File, SharedFile, WriteFlags};
use nix::fcntl::FallocateFlags;

/// A node's or a handle's file: in the mount's own cache, or in a named
/// shared cache.
pub enum CachedFile {
    /// A file of the mount's own cache.
    Private(File),
    /// A file of a named shared cache, with the rights of the handle.
    Shared(SharedHandle),
}

/// A handle on a file of a named shared cache.
pub struct SharedHandle {
    file: Arc<SharedFile>,
    /// Writes are allowed through this handle (the node's kept one:
    /// its descriptor was opened for writing).
    writable: bool,
    /// Writes go to the end of the file (`O_APPEND`).
    append: bool,
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

    /// The file in the shared cache.
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

/// `fallocate(2)` with `mode` on the shared file's own descriptor.
fn fallocate(file: &std::fs::File, mode: FallocateFlags, offset: u64, len: u64) -> io::Result<()> {
    let big = |_| io::Error::from(nix::errno::Errno::EFBIG);
    let (off, len) = (
        i64::try_from(offset).map_err(big)?,
        i64::try_from(len).map_err(big)?,
    );
    nix::fcntl::fallocate(file, mode, off, len).map_err(io::Error::from)
}

impl CachedFile {
    /// Calls `f` with the bytes `offset..offset + len` (fewer at the end
    /// of the file): [`File::read_with`] or [`SharedFile::read_with`].
    ///
    /// # Errors
    /// The read's.
    #[inline]
    pub fn read_with<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        match self {
            CachedFile::Private(file) => file.read_with(offset, len, f),
            CachedFile::Shared(s) => s.file.read_with(offset, len, f),
        }
    }

    /// Writes `buf` at `offset` (at the end of the file for an append
    /// handle): [`File::write_at_flags`], or [`SharedFile::write_at`] /
    /// [`SharedFile::append`] (`flags` are the private cache's).
    ///
    /// # Errors
    /// The write's.
    #[inline]
    pub fn write_at_flags(&self, buf: &[u8], offset: u64, flags: WriteFlags) -> io::Result<usize> {
        match self {
            CachedFile::Private(file) => file.write_at_flags(buf, offset, flags),
            CachedFile::Shared(s) if s.append => s.for_writing()?.append(buf).map(|_| buf.len()),
            CachedFile::Shared(s) => s.for_writing()?.write_at(buf, offset),
        }
    }

    /// Whether writes are allowed through this handle.
    #[inline]
    pub fn is_writable(&self) -> bool {
        match self {
            CachedFile::Private(file) => file.is_writable(),
            CachedFile::Shared(s) => s.writable,
        }
    }

    /// The file's size as the cache has it (for a shared file, the
    /// group's; `None` if it cannot be had).
    pub fn len(&self) -> Option<u64> {
        match self {
            CachedFile::Private(file) => Some(file.len()),
            CachedFile::Shared(s) => s.file.len().ok(),
        }
    }

    /// Whether the file is empty (or its size cannot be had).
    pub fn is_empty(&self) -> bool {
        self.len().is_none_or(|n| n == 0)
    }

    /// Another handle on the same file, with the same rights.
    pub fn reopen(&self) -> CachedFile {
        match self {
            CachedFile::Private(file) => CachedFile::Private(file.reopen()),
            CachedFile::Shared(s) => CachedFile::Shared(SharedHandle {
                file: s.file.clone(),
                ..*s
            }),
        }
    }

    /// Sets the file's size.
    ///
    /// # Errors
    /// The truncation's.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        match self {
            CachedFile::Private(file) => file.set_len(len),
            CachedFile::Shared(s) => s.for_writing()?.set_len(len),
        }
    }

    /// Writes the file's dirty data back and waits for it (`fdatasync`).
    ///
    /// # Errors
    /// The writeback's or the sync's.
    pub fn sync_data(&self) -> io::Result<()> {
        match self {
            CachedFile::Private(file) => file.sync_data(),
            CachedFile::Shared(s) => s.file.sync_data(),
        }
    }

    /// As [`sync_data`](Self::sync_data), with the metadata (`fsync`).
    ///
    /// # Errors
    /// The writeback's or the sync's.
    pub fn sync_all(&self) -> io::Result<()> {
        match self {
            CachedFile::Private(file) => file.sync_all(),
            CachedFile::Shared(s) => s.file.sync_all(),
        }
    }

    /// Drops the data of a file no name reaches any more: the private
    /// cache's dirty data unwritten ([`File::discard`]). A shared file's
    /// data is written back instead, through this descriptor: another
    /// process of the group may still have the file open, and once
    /// every descriptor is gone, no one could write it back by path.
    ///
    /// # Errors
    /// The discard's or the writeback's.
    pub fn discard_unlinked(&self) -> io::Result<()> {
        match self {
            CachedFile::Private(file) => file.discard(),
            CachedFile::Shared(s) => s.file.write_back().map(drop),
        }
    }

    /// A hole punched (`PUNCH_HOLE | KEEP_SIZE`) in the file and the
    /// cache: [`File::punch_hole`], or [`SharedFile::change_file`].
    ///
    /// # Errors
    /// The backing's.
    pub fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let mode = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        match self {
            CachedFile::Private(file) => file.punch_hole(offset, len),
            CachedFile::Shared(s) => s
                .for_writing()?
                .change_file(|f| fallocate(f, mode, offset, len)),
        }
    }

    /// The range preallocated (growing the file to its end unless
    /// `keep_size`): [`File::allocate`], or [`SharedFile::change_file`].
    ///
    /// # Errors
    /// The backing's.
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        let mode = if keep_size {
            FallocateFlags::FALLOC_FL_KEEP_SIZE
        } else {
            FallocateFlags::empty()
        };
        match self {
            CachedFile::Private(file) => file.allocate(offset, len, keep_size),
            CachedFile::Shared(s) => s
                .for_writing()?
                .change_file(|f| fallocate(f, mode, offset, len)),
        }
    }

    /// `COLLAPSE_RANGE`: [`File::collapse_range`], or
    /// [`SharedFile::change_file`].
    ///
    /// # Errors
    /// The backing's.
    pub fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let mode = FallocateFlags::FALLOC_FL_COLLAPSE_RANGE;
        match self {
            CachedFile::Private(file) => file.collapse_range(offset, len),
            CachedFile::Shared(s) => s
                .for_writing()?
                .change_file(|f| fallocate(f, mode, offset, len)),
        }
    }

    /// `INSERT_RANGE`: [`File::insert_range`], or
    /// [`SharedFile::change_file`].
    ///
    /// # Errors
    /// The backing's.
    pub fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let mode = FallocateFlags::FALLOC_FL_INSERT_RANGE;
        match self {
            CachedFile::Private(file) => file.insert_range(offset, len),
            CachedFile::Shared(s) => s
                .for_writing()?
                .change_file(|f| fallocate(f, mode, offset, len)),
        }
    }
}
