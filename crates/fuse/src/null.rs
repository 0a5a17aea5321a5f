//! [`NullFs`]: the FUSE crossing alone, with no cache behind it: the
//! ceiling any FUSE server with direct IO reaches on this kernel.
//!
//! It mirrors the regular files at the top of a directory (names and
//! sizes, read once at mount), read-only, and answers every read with
//! zeros from one static buffer: no lookup of data, no copy out of a
//! cache, one memory copy of hot bytes into the reply. Opened, like
//! [`crate::FolioFs`]'s files, with `FOPEN_DIRECT_IO`, every read crosses
//! into the server. `foliocache bench` mounts it beside the `fuse` engine
//! (the `fuse-null` engine) so that the cost of the crossing itself is
//! measured in the same run: `fuse-null / kernel` is what no FUSE server
//! can beat, `fuse / fuse-null` is how close foliocache-fuse comes to it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    BackgroundSession, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, MountOption, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEntry, ReplyOpen, Request, Session,
};

use crate::MountOptions;

/// The largest read the kernel is asked to send, and the zeros buffer.
const MAX_READ: usize = 1 << 20;

/// What every read copies from.
static ZEROS: [u8; MAX_READ] = [0; MAX_READ];

/// The mirrored files never change: let the kernel keep their entries.
const TTL: Duration = Duration::from_secs(3600);

/// The root's node id (FUSE's).
const ROOT: u64 = 1;

/// A read-only directory of files of zeros, one per regular file at the
/// top of a directory, of the same names and sizes. See the module
/// documentation.
pub struct NullFs {
    /// Name, size; node id = index + 2.
    files: Vec<(OsString, u64)>,
    by_name: HashMap<OsString, u64>,
    owner: (u32, u32),
}

impl NullFs {
    /// Mirrors the regular files at the top of `dir` (symlinks and
    /// subdirectories are left out).
    ///
    /// # Errors
    /// Reading `dir`'s entries or their metadata.
    pub fn new(dir: &Path) -> io::Result<NullFs> {
        let mut files = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let m = e.metadata()?;
            if m.is_file() {
                files.push((e.file_name(), m.len()));
            }
        }
        files.sort();
        let by_name = files
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i as u64 + 2))
            .collect();
        let m = std::fs::metadata(dir)?;
        Ok(NullFs {
            files,
            by_name,
            owner: (m.uid(), m.gid()),
        })
    }

    /// The attributes of node `ino`, if it exists.
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size) = if ino == ROOT {
            (FileType::Directory, 0o555, 0)
        } else {
            let i = usize::try_from(ino.checked_sub(2)?).ok()?;
            (FileType::RegularFile, 0o444, self.files.get(i)?.1)
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink: if ino == ROOT { 2 } else { 1 },
            uid: self.owner.0,
            gid: self.owner.1,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Reads of up to MAX_READ in one request, as FolioFs asks.
        let _ = config.set_max_write(MAX_READ as u32);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.by_name.get(name).and_then(|&ino| self.attr(ino)) {
            Some(a) if parent.0 == ROOT => reply.entry(&TTL, &a, Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == ROOT {
            return reply.error(Errno::EISDIR);
        }
        if self.attr(ino.0).is_none() {
            return reply.error(Errno::ENOENT);
        }
        if !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY) {
            return reply.error(Errno::EROFS);
        }
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(a) = self.attr(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let n = a.size.saturating_sub(offset).min(u64::from(size));
        // The kernel sends at most MAX_READ; a bigger ask is answered
        // short, as a read may be.
        let n = usize::try_from(n).unwrap_or(MAX_READ).min(MAX_READ);
        reply.data(&ZEROS[..n]);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == ROOT {
            reply.opened(FileHandle(0), FopenFlags::empty());
        } else {
            reply.error(Errno::ENOTDIR);
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dots = [
            (ROOT, FileType::Directory, OsStr::new(".")),
            (ROOT, FileType::Directory, OsStr::new("..")),
        ];
        let files = self
            .files
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (i as u64 + 2, FileType::RegularFile, n.as_os_str()));
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, kind, name)) in dots.into_iter().chain(files).enumerate().skip(start) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mounts a [`NullFs`] mirroring `dir` at `mountpoint` and serves it in
/// background threads with the configuration [`crate::spawn`] would give
/// `opts` (the same threads, descriptors and options, read-only), so the
/// two crossings compare. Dropping the session unmounts.
///
/// # Errors
/// Reading `dir`; the mount's.
pub fn spawn_null(
    dir: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<BackgroundSession> {
    let fs = NullFs::new(dir)?;
    let mut c = opts.fuser_config(dir);
    c.mount_options.push(MountOption::RO);
    Session::new(fs, mountpoint, &c)?.spawn()
}
