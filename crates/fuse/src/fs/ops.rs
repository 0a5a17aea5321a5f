//! The FUSE requests: each one checked against the control file, served
//! by the parts in this folder, and answered.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use foliocache::{AnyFile, CachedFile};
use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use nix::fcntl::{self, OFlag, AT_FDCWD};
use nix::sys::stat::{self, Mode, SFlag};
use nix::unistd::{self, UnlinkatFlags};
use parking_lot::Mutex;

use crate::control::{self, CONTROL_INO};
use crate::errno::{io_errno, nix_errno};
use crate::inode::{proc_path, ROOT};

use super::attr::SetAttr;
use super::names::check_name;
use super::{FolioFs, Handle, Opened, Res, MAX_IO, TTL};

impl Filesystem for FolioFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // Shared mappings of files opened with direct IO (kernel 6.6 and
        // later): the kernel then keeps the mapped pages in its page cache,
        // writes their dirty ones back (through `write`, so into our cache)
        // before every direct read or write of their range, and drops the
        // pages a direct write covers, so mappings and read/write agree.
        let mmap = config
            .add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok();
        self.shared_mmap.store(mmap, Ordering::Relaxed);
        if !mmap {
            log::warn!(
                "foliocache-fuse: this kernel (FUSE ABI {:?}) cannot map direct-IO files \
                 shared (FUSE_DIRECT_IO_ALLOW_MMAP needs Linux 6.6 or later): a shared \
                 mmap of a file on the mount fails with ENODEV; private mappings work",
                config.kernel_abi()
            );
        }
        let _ = config.set_max_write(MAX_IO);
        Ok(())
    }

    fn destroy(&mut self) {
        let _ = self.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if Self::is_control(parent, name) {
            return reply.entry(&TTL, &control::attr(self.owner), Generation(0));
        }
        let r = self.inode(parent).and_then(|p| self.lookup_entry(&p, name));
        self.entry_reply(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 != CONTROL_INO {
            self.inodes.forget(ino.0, nlookup);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == CONTROL_INO {
            return reply.attr(&TTL, &control::attr(self.owner));
        }
        match self.inode(ino).and_then(|i| self.stat_attr(ino.0, &i)) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if ino.0 == CONTROL_INO {
            // An O_TRUNC open of the control file: nothing to cut.
            return reply.attr(&TTL, &control::attr(self.owner));
        }
        let change = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        let r = self
            .inode(ino)
            .and_then(|i| self.do_setattr(ino.0, &i, change));
        match r {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self.inode(ino).and_then(|i| {
            if i.kind != FileType::Symlink {
                return Err(Errno::EINVAL);
            }
            fcntl::readlinkat(&*i.fd()?, "").map_err(nix_errno)
        });
        match r {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.make_entry(req, parent, name, reply, |p| {
            stat::mkdirat(p, name, Mode::from_bits_truncate(mode & 0o7777)).map_err(nix_errno)
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.make_entry(req, parent, name, reply, |p| {
            let kind = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
            // FIFOs, sockets and plain files; devices would be useless on
            // a nodev mount, and are refused as a local user is refused.
            if !matches!(kind, SFlag::S_IFIFO | SFlag::S_IFSOCK | SFlag::S_IFREG) {
                return Err(Errno::EPERM);
            }
            stat::mknodat(
                p,
                name,
                kind,
                Mode::from_bits_truncate(mode & 0o7777),
                stat::dev_t::from(rdev),
            )
            .map_err(nix_errno)
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.remove(parent, name, Errno::EPERM, UnlinkatFlags::NoRemoveDir);
        empty_reply(reply, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.remove(parent, name, Errno::ENOTDIR, UnlinkatFlags::RemoveDir);
        empty_reply(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.make_entry(req, parent, link_name, reply, |p| {
            // The link's text is stored as given; it is only ever read back
            // (readlink), never followed by the server.
            unistd::symlinkat(target, p, link_name).map_err(nix_errno)
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            if Self::is_control(parent, name) || Self::is_control(newparent, newname) {
                return Err(Errno::EPERM);
            }
            check_name(name)?;
            check_name(newname)?;
            let p = self.inode(parent)?;
            let np = self.inode(newparent)?;
            let f = fcntl::RenameFlags::from_bits(flags.bits()).ok_or(Errno::EINVAL)?;
            let (pfd, npfd) = (p.fd()?, np.fd()?);
            // The nodes known by both names, their descriptors held while
            // their names change (see `Inode::name_gone`).
            let moved = self.node_named(&pfd, name);
            let mut replaced = self.node_named(&npfd, newname);
            if let (Some((a, _)), Some((b, _))) = (&moved, &replaced) {
                if a.key == b.key {
                    // Two names of one inode: rename(2) does nothing.
                    replaced = None;
                }
            }
            fcntl::renameat2(&*pfd, name, &*npfd, newname, f).map_err(nix_errno)?;
            let exchange = f.contains(fcntl::RenameFlags::RENAME_EXCHANGE);
            match (&replaced, exchange) {
                (Some((node, _)), true) => node.renamed((&np, newname), (&p, name)),
                (Some((node, fd)), false) => node.name_gone(&np, newname, fd),
                (None, _) => {}
            }
            if let Some((node, _)) = &moved {
                node.renamed((&p, name), (&np, newname));
            }
            Ok(())
        })();
        empty_reply(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            if ino.0 == CONTROL_INO {
                return Err(Errno::EPERM);
            }
            if Self::is_control(newparent, newname) {
                return Err(Errno::EEXIST);
            }
            check_name(newname)?;
            let i = self.inode(ino)?;
            if i.kind == FileType::Directory {
                return Err(Errno::EPERM);
            }
            let np = self.inode(newparent)?;
            let (ifd, npfd) = (i.fd()?, np.fd()?);
            unistd::linkat(
                AT_FDCWD,
                proc_path(&ifd).as_str(),
                &*npfd,
                newname,
                fcntl::AtFlags::AT_SYMLINK_FOLLOW,
            )
            .map_err(nix_errno)?;
            self.lookup_entry(&np, newname)
        })();
        self.entry_reply(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == CONTROL_INO {
            let fh = self.add_handle(Handle::Control(Mutex::new(control::Session::default())));
            return reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
        }
        let r = (|| {
            let i = self.inode(ino)?;
            match i.kind {
                FileType::RegularFile => {}
                FileType::Directory => return Err(Errno::EISDIR),
                FileType::Symlink => return Err(Errno::ELOOP),
                _ => return Err(Errno::ENXIO),
            }
            let write = !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY);
            let append = flags.0 & OFlag::O_APPEND.bits() != 0;
            // O_TRUNC: the kernel sends a setattr of size 0 itself.
            // Open before its file is kept, so that the kept one is not
            // taken as unused meanwhile.
            let inode = Opened::new(i);
            let file = self
                .open_cached(&inode, write, append)
                .map_err(|e| io_errno(&e))?;
            Ok(self.add_handle(Handle::File { file, inode }))
        })();
        match r {
            Ok(fh) => reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read(fh, offset, size, reply);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.do_write(fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Data stays dirty in the cache after close, as in the kernel's
        // page cache; fsync makes it durable.
        empty_reply(reply, self.handle(fh).map(drop));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.close_handle(fh);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.handle(fh).and_then(|h| {
            let file = match &*h {
                Handle::File { file, .. } if file.is_writable() => file.reopen(),
                // fsync on a read-only descriptor syncs the file too, as
                // on a local filesystem: through the node's handle.
                Handle::File { .. } => {
                    let kept = self.inode(ino)?.cached_file().filter(AnyFile::is_writable);
                    match kept {
                        Some(f) => f,
                        None => return Ok(()),
                    }
                }
                _ => return Ok(()),
            };
            let r = if datasync {
                file.sync_data()
            } else {
                file.sync_all()
            };
            r.map_err(|e| io_errno(&e))
        });
        empty_reply(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self.inode(ino).and_then(|i| {
            if i.kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            self.read_dir(&i, ino.0 == ROOT)
        });
        match r {
            Ok(entries) => reply.opened(
                self.add_handle(Handle::Dir { entries }),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let Handle::Dir { entries } = &*h else {
            return reply.error(Errno::ENOTDIR);
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(start) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.close_handle(fh);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.inode(ino).and_then(|i| {
            let fd = fcntl::openat(
                &*i.fd()?,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(nix_errno)?;
            unistd::fsync(&fd).map_err(nix_errno)
        });
        empty_reply(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = self
            .inode(INodeNo(ROOT))
            .and_then(|i| nix::sys::statvfs::fstatvfs(&*i.fd()?).map_err(nix_errno));
        match r {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                s.name_max() as u32,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.do_create(req, parent, name, mode, flags) {
            Ok((attr, fh)) => reply.created(
                &self.ttl,
                &attr,
                Generation(0),
                fh,
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty_reply(reply, self.do_fallocate(fh, offset, length, mode));
    }
}

/// Answers a request whose reply carries nothing but success or an error.
fn empty_reply(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}
