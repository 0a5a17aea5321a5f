//! What serves an intercepted description's file: the process's own
//! cache ([`fc::File`]), or the cache its process group shares
//! ([`fc::SharedFile`], `foliocache run --shared`: docs/preload.md,
//! "Processes"). The calls of modules `io`, `copy` and `stat` go through
//! [`Served`] and work alike on both.

use std::io;
use std::os::fd::AsFd;

use fc::{Advice, File, ReadFlags, SharedFile, WriteFlags};

/// A served file.
pub(crate) enum Served {
    /// In this process's cache.
    Local(File),
    /// In the group's shared cache; `append` for an `O_APPEND`
    /// description (every write at the end, atomically for the group).
    Shared { file: SharedFile, append: bool },
}

/// `fallocate(2)` on the file itself, under the shared cache's inode lock
/// ([`SharedFile::change_file`]: written back and dropped from the cache
/// first, sized from the file after).
fn fallocate(
    f: &SharedFile,
    mode: rustix::fs::FallocateFlags,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    f.change_file(|file| Ok(rustix::fs::fallocate(file.as_fd(), mode, offset, len)?))
}

impl Served {
    /// The process's own cache's file, if that serves it.
    pub(crate) fn local(&self) -> Option<&File> {
        match self {
            Served::Local(f) => Some(f),
            Served::Shared { .. } => None,
        }
    }

    /// Whether a process of the group holds the file in the kernel
    /// (`SharedFile::handed_elsewhere`): this process is then to hand it
    /// over too.
    #[inline]
    pub(crate) fn handed_elsewhere(&self) -> bool {
        match self {
            Served::Local(_) => false,
            Served::Shared { file, .. } => file.handed_elsewhere(),
        }
    }

    /// At its open: whether this description may serve a file
    /// [`handed_elsewhere`](Self::handed_elsewhere), taken back from the
    /// kernel if no live process of the group holds it there
    /// (`SharedFile::take_back_from_kernel`).
    pub(crate) fn take_back_from_kernel(&self) -> bool {
        match self {
            Served::Local(_) => true,
            Served::Shared { file, .. } => file.take_back_from_kernel().unwrap_or(false),
        }
    }

    /// Reads at `offset` (`File::read_at_flags`; the shared cache takes
    /// no flags: a read is a hit or one load).
    pub(crate) fn read_at_flags(
        &self,
        buf: &mut [u8],
        offset: u64,
        flags: ReadFlags,
    ) -> io::Result<usize> {
        match self {
            Served::Local(f) => f.read_at_flags(buf, offset, flags),
            Served::Shared { file, .. } => file.read_at(buf, offset),
        }
    }

    /// Writes at `offset`, or at the end for an `O_APPEND` description
    /// (`File::write_at_flags`; `DONTCACHE` data stays in the shared
    /// cache, as others of the group may read it next).
    pub(crate) fn write_at_flags(
        &self,
        buf: &[u8],
        offset: u64,
        flags: WriteFlags,
    ) -> io::Result<usize> {
        match self {
            Served::Local(f) => f.write_at_flags(buf, offset, flags),
            Served::Shared { file, append: true } => file.append(buf).map(|_| buf.len()),
            Served::Shared { file, .. } => file.write_at(buf, offset),
        }
    }

    /// The file's size, as the cache holds it.
    pub(crate) fn len(&self) -> io::Result<u64> {
        match self {
            Served::Local(f) => Ok(f.len()),
            Served::Shared { file, .. } => file.len(),
        }
    }

    /// Sets the size (`ftruncate`).
    pub(crate) fn set_len(&self, len: u64) -> io::Result<()> {
        match self {
            Served::Local(f) => f.set_len(len),
            Served::Shared { file, .. } => file.set_len(len),
        }
    }

    /// `fdatasync`.
    pub(crate) fn sync_data(&self) -> io::Result<()> {
        match self {
            Served::Local(f) => f.sync_data(),
            Served::Shared { file, .. } => file.sync_data(),
        }
    }

    /// `fsync`.
    pub(crate) fn sync_all(&self) -> io::Result<()> {
        match self {
            Served::Local(f) => f.sync_all(),
            Served::Shared { file, .. } => file.sync_all(),
        }
    }

    /// Writes back the file's dirty data, without waiting for the device
    /// (what a close does).
    pub(crate) fn write_back(&self) -> io::Result<()> {
        match self {
            Served::Local(f) => f.mapping().writeback(0, u64::MAX),
            Served::Shared { file, .. } => file.write_back().map(drop),
        }
    }

    /// Reserves `len` bytes at `offset` (`fallocate` mode 0, or
    /// `KEEP_SIZE`).
    pub(crate) fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        match self {
            Served::Local(f) => f.allocate(offset, len, keep_size),
            Served::Shared { file, .. } => {
                let mode = if keep_size {
                    rustix::fs::FallocateFlags::KEEP_SIZE
                } else {
                    rustix::fs::FallocateFlags::empty()
                };
                fallocate(file, mode, offset, len)
            }
        }
    }

    /// Deallocates `len` bytes at `offset`, which read zeros after.
    pub(crate) fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            Served::Local(f) => f.punch_hole(offset, len),
            Served::Shared { file, .. } => fallocate(
                file,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                offset,
                len,
            ),
        }
    }

    /// `FALLOC_FL_COLLAPSE_RANGE`.
    pub(crate) fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            Served::Local(f) => f.collapse_range(offset, len),
            Served::Shared { file, .. } => fallocate(
                file,
                rustix::fs::FallocateFlags::COLLAPSE_RANGE,
                offset,
                len,
            ),
        }
    }

    /// `FALLOC_FL_INSERT_RANGE`.
    pub(crate) fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            Served::Local(f) => f.insert_range(offset, len),
            Served::Shared { file, .. } => {
                fallocate(file, rustix::fs::FallocateFlags::INSERT_RANGE, offset, len)
            }
        }
    }

    /// Advice on a range (`posix_fadvise`, `readahead`): the shared cache
    /// takes none (its readahead follows sequential misses on its own).
    pub(crate) fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        match self {
            Served::Local(f) => f.advise(offset, len, advice),
            Served::Shared { .. } => Ok(()),
        }
    }

    /// Hands the file to the kernel (a mapping, a stdio stream): its dirty
    /// data written back. The shared cache also drops the file's pages,
    /// so that what the kernel's side changes next is read from the file
    /// by the group, not from stale pages.
    pub(crate) fn hand_over(&self) -> io::Result<()> {
        match self {
            Served::Local(f) => f.sync_data(),
            Served::Shared { file, .. } => file.change_file(|_| Ok(())),
        }
    }
}
