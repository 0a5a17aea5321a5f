//! File data: the cached file behind a node (one per node, shared by its
//! handles), and reads, writes and `fallocate` through the cache.

use std::io;
use std::sync::atomic::Ordering;

use foliocache::{File, ReadFlags, WriteFlags};
use fuser::{Errno, FileHandle, ReplyData};
use nix::fcntl::FallocateFlags;

use crate::errno::io_errno;
use crate::inode::{proc_path, Inode};

use super::attr::now_ns;
use super::{FolioFs, Handle, Res};

impl FolioFs {
    /// A cache handle on `inode` (a regular file) with these rights; the
    /// node keeps one too (see [`crate::inode`]).
    pub(super) fn open_cached(&self, inode: &Inode, write: bool, append: bool) -> io::Result<File> {
        let fd = inode
            .fd()
            .map_err(|e| io::Error::from_raw_os_error(i32::from(e)))?;
        let f = self
            .cache
            .open_options()
            .read(true)
            .write(write)
            .append(append)
            .open(proc_path(&fd))?;
        drop(fd);
        if self.dontcache {
            f.set_default_flags(ReadFlags::DONTCACHE);
        }
        inode.keep_cached(&f);
        Ok(f)
    }

    /// A writable cache handle on `inode`: the node's own if writable.
    pub(super) fn writable(&self, inode: &Inode) -> io::Result<File> {
        match inode.cached_file() {
            Some(f) if f.is_writable() => Ok(f),
            _ => self.open_cached(inode, true, false),
        }
    }

    /// Serves a read: the data goes to `reply` from the cache's memory in
    /// place, or from a buffer of the serving thread's, reused from read
    /// to read (no allocation, no zeroing on the hot path).
    pub(super) fn do_read(&self, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let h = match self.file_of(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let file = match &*h {
            Handle::File { file, .. } => file,
            Handle::Control(s) => {
                let data = s.lock().read(offset, size as usize, self);
                return reply.data(&data);
            }
            Handle::Dir { .. } => return reply.error(Errno::EISDIR),
        };
        // Replied from the cache's memory in place where the range lies in
        // one cached folio (pinned while the reply is written: the kernel's
        // copy into the reader's buffer is then the only one, and a writer
        // meanwhile writes a copy of the folio), else from a buffer of this
        // thread's (`File::read_with`).
        let mut reply = Some(reply);
        let r = file.read_with(offset, size as usize, |b| {
            if let Some(r) = reply.take() {
                r.data(b);
            }
        });
        if let (Err(e), Some(r)) = (r, reply) {
            r.error(io_errno(&e));
        }
    }

    pub(super) fn do_write(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Res<u32> {
        let h = self.file_of(fh)?;
        match &*h {
            Handle::File { file, inode } => {
                if !file.is_writable() {
                    return Err(Errno::EBADF);
                }
                let flags = if self.dontcache {
                    WriteFlags::DONTCACHE
                } else {
                    WriteFlags::NONE
                };
                let mut done = 0;
                while done < data.len() {
                    let off = offset.checked_add(done as u64).ok_or(Errno::EFBIG)?;
                    match file.write_at_flags(&data[done..], off, flags) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if done > 0 => {
                            log::debug!("short write: {e}");
                            break;
                        }
                        Err(e) => return Err(io_errno(&e)),
                    }
                }
                if done > 0 {
                    inode.written.fetch_max(now_ns(), Ordering::Relaxed);
                }
                Ok(done as u32)
            }
            Handle::Control(s) => s.lock().write(data).map(|n| n as u32),
            Handle::Dir { .. } => Err(Errno::EISDIR),
        }
    }

    /// Serves `fallocate(2)` on an open file, keeping the cache and the
    /// backing in agreement:
    /// - `PUNCH_HOLE | KEEP_SIZE`: [`File::punch_hole`] (the backing's
    ///   blocks punched, the cached folios dropped or zeroed);
    /// - `0` and `KEEP_SIZE` (preallocation): [`File::allocate`] (the
    ///   backing reserves the range; without `KEEP_SIZE` the file grows to
    ///   the range's end if it was shorter, the backing's size too);
    /// - `ZERO_RANGE` (with or without `KEEP_SIZE`): a hole punched as
    ///   above (so cached pages read as zeros, dirty ones included), then
    ///   the range preallocated as above: a local filesystem's zeroed
    ///   range is allocated;
    /// - `COLLAPSE_RANGE`, `INSERT_RANGE`: [`File::collapse_range`],
    ///   [`File::insert_range`] (dirty data written back, the backing's
    ///   data moved, the cache dropped from the offset on). The kernel's
    ///   FUSE client refuses both itself up to Linux 6.18 at least (it
    ///   passes on `KEEP_SIZE`, `PUNCH_HOLE` and `ZERO_RANGE` only), so
    ///   through such a kernel they answer `EOPNOTSUPP` without coming here;
    /// - anything else `EOPNOTSUPP`.
    pub(super) fn do_fallocate(&self, fh: FileHandle, offset: u64, len: u64, mode: i32) -> Res<()> {
        let h = self.file_of(fh)?;
        let Handle::File { file, .. } = &*h else {
            return Err(Errno::ENODEV);
        };
        let keep = FallocateFlags::FALLOC_FL_KEEP_SIZE;
        let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE;
        let zero = FallocateFlags::FALLOC_FL_ZERO_RANGE;
        let mode = FallocateFlags::from_bits(mode).ok_or(Errno::EOPNOTSUPP)?;
        // (As `vfs_fallocate`: flags it does not know, then the descriptor.)
        if !file.is_writable() {
            return Err(Errno::EBADF);
        }
        if mode == FallocateFlags::FALLOC_FL_COLLAPSE_RANGE
            || mode == FallocateFlags::FALLOC_FL_INSERT_RANGE
        {
            let r = if mode == FallocateFlags::FALLOC_FL_COLLAPSE_RANGE {
                file.collapse_range(offset, len)
            } else {
                file.insert_range(offset, len)
            };
            return r.map_err(|e| io_errno(&e));
        }
        let zeroing = if mode == punch | keep {
            None
        } else if mode == FallocateFlags::empty() || mode == keep {
            Some(false)
        } else if mode == zero || mode == zero | keep {
            Some(true)
        } else {
            return Err(Errno::EOPNOTSUPP);
        };
        if offset.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
            return Err(Errno::EFBIG);
        }
        let Some(zeroing) = zeroing else {
            return file.punch_hole(offset, len).map_err(|e| io_errno(&e));
        };
        if zeroing {
            file.punch_hole(offset, len).map_err(|e| io_errno(&e))?;
        }
        file.allocate(offset, len, mode.contains(keep))
            .map_err(|e| io_errno(&e))
    }
}
