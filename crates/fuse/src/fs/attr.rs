//! Attributes and times: a backing file's `stat` as the kernel's
//! [`FileAttr`], and `setattr` (mode, owner, size, times) passed through.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foliocache::CachedFile;
use fuser::{Errno, FileAttr, FileHandle, FileType, INodeNo, TimeOrNow};
use nix::fcntl::{self, AT_FDCWD};
use nix::sys::stat::{self, FileStat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{self, Gid, Uid};

use crate::errno::{io_errno, nix_errno};
use crate::inode::{proc_path, Inode};

use super::{FolioFs, Handle, Res};

/// Now, in nanoseconds since the epoch (at least 1).
pub(super) fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
    })
}

pub(super) fn ts_to_time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = nsec.clamp(0, 999_999_999) as u32;
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::new(sec.unsigned_abs(), 0))
            .and_then(|t| t.checked_add(Duration::new(0, nsec)))
            .unwrap_or(UNIX_EPOCH)
    }
}

pub(super) fn kind_of(mode: u32) -> Option<FileType> {
    let fmt = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
    Some(match fmt {
        SFlag::S_IFREG => FileType::RegularFile,
        SFlag::S_IFDIR => FileType::Directory,
        SFlag::S_IFLNK => FileType::Symlink,
        SFlag::S_IFIFO => FileType::NamedPipe,
        SFlag::S_IFSOCK => FileType::Socket,
        SFlag::S_IFCHR => FileType::CharDevice,
        SFlag::S_IFBLK => FileType::BlockDevice,
        _ => return None,
    })
}

/// Attributes of node `id` from the backing's `st` (`size` the cache's if
/// it has the file). `ino` is the node id: fuser sends it as the entry's
/// node id, and `stat(2)` through the mount shows it.
pub(super) fn attr_of(id: u64, st: &FileStat, kind: FileType, size: Option<u64>) -> FileAttr {
    FileAttr {
        ino: INodeNo(id),
        size: size.unwrap_or(st.st_size.max(0) as u64),
        blocks: st.st_blocks.max(0) as u64,
        atime: ts_to_time(st.st_atime, st.st_atime_nsec),
        mtime: ts_to_time(st.st_mtime, st.st_mtime_nsec),
        ctime: ts_to_time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind,
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

pub(super) fn time_spec(t: Option<TimeOrNow>) -> TimeSpec {
    match t {
        None => TimeSpec::UTIME_OMIT,
        Some(TimeOrNow::Now) => TimeSpec::UTIME_NOW,
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => TimeSpec::from_duration(d),
            Err(e) => {
                let d = e.duration();
                // Before the epoch: negative seconds, positive nanoseconds.
                let (s, n) = (d.as_secs() as i64, d.subsec_nanos() as i64);
                if n == 0 {
                    TimeSpec::new(-s, 0)
                } else {
                    TimeSpec::new(-s - 1, 1_000_000_000 - n)
                }
            }
        },
    }
}

/// What a `setattr` asks to change (each `None`: unchanged), and the
/// handle it came through, if any.
pub(super) struct SetAttr {
    pub(super) mode: Option<u32>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) size: Option<u64>,
    pub(super) atime: Option<TimeOrNow>,
    pub(super) mtime: Option<TimeOrNow>,
    pub(super) fh: Option<FileHandle>,
}

impl FolioFs {
    pub(super) fn stat_attr(&self, id: u64, inode: &Inode) -> Res<FileAttr> {
        let st = stat::fstat(&*inode.fd()?).map_err(nix_errno)?;
        // The cache's size of the file: the node's file's, or, with a
        // shared cache, the group's while it holds unsaved data of it.
        let size = inode.cached_len().or_else(|| {
            self.shared_cache()
                .and_then(|(cache, _)| cache.unsaved_len(inode.key.0, inode.key.1))
        });
        let mut a = attr_of(id, &st, inode.kind, size);
        // Written through the mount since the backing's mtime moved (the
        // data may still be dirty in the cache): that write's time, as a
        // local filesystem reports it at once.
        let w = inode.written.load(Ordering::Relaxed);
        if w > 0 {
            let written = UNIX_EPOCH + Duration::from_nanos(w);
            if written > a.mtime {
                a.mtime = written;
            }
            if written > a.ctime {
                a.ctime = written;
            }
        }
        Ok(a)
    }

    pub(super) fn do_setattr(&self, id: u64, inode: &Inode, change: SetAttr) -> Res<FileAttr> {
        let (mode, uid, gid) = (change.mode, change.uid, change.gid);
        let (size, atime, mtime, fh) = (change.size, change.atime, change.mtime, change.fh);
        if let Some(size) = size {
            match inode.kind {
                FileType::RegularFile => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            let from_handle = fh
                .and_then(|fh| self.handle(fh).ok())
                .and_then(|h| match &*h {
                    Handle::File { file, .. } if file.is_writable() => Some(file.reopen()),
                    _ => None,
                });
            let file = match from_handle {
                Some(f) => f,
                None => self.writable(inode).map_err(|e| io_errno(&e))?,
            };
            file.set_len(size).map_err(|e| io_errno(&e))?;
        }
        if let Some(mode) = mode {
            if inode.kind == FileType::Symlink {
                return Err(Errno::EOPNOTSUPP);
            }
            stat::fchmodat(
                AT_FDCWD,
                proc_path(&*inode.fd()?).as_str(),
                Mode::from_bits_truncate(mode & 0o7777),
                stat::FchmodatFlags::FollowSymlink,
            )
            .map_err(nix_errno)?;
        }
        if uid.is_some() || gid.is_some() {
            unistd::fchownat(
                &*inode.fd()?,
                "",
                uid.map(Uid::from_raw),
                gid.map(Gid::from_raw),
                fcntl::AtFlags::AT_EMPTY_PATH | fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(nix_errno)?;
        }
        if atime.is_some() || mtime.is_some() {
            if inode.kind == FileType::Symlink {
                return Err(Errno::EOPNOTSUPP);
            }
            // Dirty data written back later would move mtime past what is
            // set now: write it back first.
            let kept = inode.cached_file();
            if let Some(f) = kept {
                if f.is_writable() {
                    f.sync_data().map_err(|e| io_errno(&e))?;
                }
            }
            stat::utimensat(
                AT_FDCWD,
                proc_path(&*inode.fd()?).as_str(),
                &time_spec(atime),
                &time_spec(mtime),
                UtimensatFlags::FollowSymlink,
            )
            .map_err(nix_errno)?;
            // The times set now are the file's (its data is written back).
            inode.written.store(0, Ordering::Relaxed);
        }
        self.stat_attr(id, inode)
    }
}
