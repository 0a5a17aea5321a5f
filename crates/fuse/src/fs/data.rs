//! File data: the cached file behind a node (one per node, shared by its
//! handles), and reads, writes and `fallocate` through the cache.

use std::io;
use std::sync::atomic::Ordering;

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

use foliocache::{AnyFile, CachedFile, ReadFlags, SharedCache, SharedHandle, WriteFlags};
use fuser::{Errno, FileHandle, ReplyData};
use nix::fcntl::FallocateFlags;

use crate::errno::io_errno;
use crate::inode::{proc_path, Inode};

use super::attr::now_ns;
use super::{FolioFs, Handle, Res, Store};

impl FolioFs {
    /// A cache handle on `inode` (a regular file) with these rights; the
    /// node keeps one too (see [`crate::inode`]).
    pub(super) fn open_cached(
        &self,
        inode: &Inode,
        write: bool,
        append: bool,
    ) -> io::Result<AnyFile> {
        let cache = match &self.store {
            Store::Private(cache) => cache,
            Store::Shared { cache, .. } => return open_shared(cache, inode, write, append),
        };
        let fd = inode
            .fd()
            .map_err(|e| io::Error::from_raw_os_error(i32::from(e)))?;
        let f = cache
            .open_options()
            .read(true)
            .write(write)
            .append(append)
            .open(proc_path(&fd))?;
        drop(fd);
        if self.dontcache {
            f.set_default_flags(ReadFlags::DONTCACHE);
        }
        let f = AnyFile::Private(f);
        inode.keep_cached(&f);
        Ok(f)
    }

    /// A writable cache handle on `inode`: the node's own if writable.
    pub(super) fn writable(&self, inode: &Inode) -> io::Result<AnyFile> {
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
                let data = s
                    .lock()
                    .read(offset, size as usize, |paths| self.stats_json(paths));
                return reply.data(&data);
            }
            Handle::Dir { .. } => return reply.error(Errno::EISDIR),
        };
        // Replied from the cache's memory in place where the range lies in
        // one cached folio (pinned while the reply is written: the kernel's
        // copy into the reader's buffer is then the only one, and a writer
        // meanwhile writes a copy of the folio), else from a buffer of this
        // thread's (`CachedFile::read_with`; a shared file's bytes always from
        // that buffer).
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
    /// - `PUNCH_HOLE | KEEP_SIZE`: [`CachedFile::punch_hole`] (the backing's
    ///   blocks punched, the cached folios dropped or zeroed);
    /// - `0` and `KEEP_SIZE` (preallocation): [`CachedFile::allocate`] (the
    ///   backing reserves the range; without `KEEP_SIZE` the file grows to
    ///   the range's end if it was shorter, the backing's size too);
    /// - `ZERO_RANGE` (with or without `KEEP_SIZE`): a hole punched as
    ///   above (so cached pages read as zeros, dirty ones included), then
    ///   the range preallocated as above: a local filesystem's zeroed
    ///   range is allocated;
    /// - `COLLAPSE_RANGE`, `INSERT_RANGE`: [`CachedFile::collapse_range`],
    ///   [`CachedFile::insert_range`] (dirty data written back, the backing's
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

/// A handle on `inode` (a regular file) in the named shared cache
/// `cache`: the node's file if it has one whose descriptor allows the
/// access, followed as a fresh open would be (`SharedFile::follow`: a
/// change behind the group since is read from the file), else a new one,
/// which the node keeps.
fn open_shared(
    cache: &SharedCache,
    inode: &Inode,
    write: bool,
    append: bool,
) -> io::Result<AnyFile> {
    if let Some(kept) = inode.cached_file() {
        if let Some(s) = kept.shared() {
            if kept.is_writable() || !write {
                s.file().follow()?;
                return Ok(AnyFile::Shared(SharedHandle::new(
                    s.file().clone(),
                    write,
                    append,
                )));
            }
        }
    }
    let fd = inode
        .fd()
        .map_err(|e| io::Error::from_raw_os_error(i32::from(e)))?;
    let (file, writable) = open_backing(&proc_path(&fd), write)?;
    drop(fd);
    let file = Arc::new(cache.open(file)?);
    inode.keep_cached(&AnyFile::Shared(SharedHandle::new(
        file.clone(),
        writable,
        false,
    )));
    Ok(AnyFile::Shared(SharedHandle::new(file, write, append)))
}

/// The server's own descriptor of a backing file for a shared cache, and
/// whether it writes: `O_DIRECT` where the filesystem takes it; for
/// reading and writing where the server may (so that it can write back
/// what others of the group wrote), else, when `write` is not asked,
/// for reading.
fn open_backing(path: &str, write: bool) -> io::Result<(std::fs::File, bool)> {
    let direct = nix::fcntl::OFlag::O_DIRECT.bits();
    let tries: &[(bool, i32)] = if write {
        &[(true, direct), (true, 0)]
    } else {
        &[(true, direct), (true, 0), (false, direct), (false, 0)]
    };
    let mut last = io::Error::from(nix::errno::Errno::EACCES);
    for &(w, flags) in tries {
        match OpenOptions::new()
            .read(true)
            .write(w)
            .custom_flags(flags)
            .open(path)
        {
            Ok(f) => return Ok((f, w)),
            Err(e) => last = e,
        }
    }
    Err(last)
}
