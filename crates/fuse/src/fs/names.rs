//! Names in directories: checks, lookups and the entries the kernel is
//! given for them, files and nodes made for a request (owned by the
//! requester when running as root), and the directory listing.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use foliocache::CachedFile;
use fuser::{Errno, FileAttr, FileHandle, FileType, Generation, INodeNo, ReplyEntry, Request};
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, Mode, SFlag};
use nix::unistd::{self, Gid, Uid, UnlinkatFlags};

use crate::control::CONTROL_NAME;
use crate::errno::{io_errno, nix_errno};
use crate::inode::{Inode, ROOT};

use super::attr::{attr_of, kind_of};
use super::{FolioFs, Handle, Opened, Res};

/// A name the kernel sends is one path component; refuse anything else
/// so that no name leads out of its directory.
pub(super) fn check_name(name: &OsStr) -> Res<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if b.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

impl FolioFs {
    /// The directory `parent` for an operation on its entry `name`: the
    /// control file's name there is refused with `control` (the errno a
    /// local filesystem gives for that operation on an existing file of
    /// its kind); a bad name is refused as [`check_name`] says.
    pub(super) fn parent_of(
        &self,
        parent: INodeNo,
        name: &OsStr,
        control: Errno,
    ) -> Res<Arc<Inode>> {
        if Self::is_control(parent, name) {
            return Err(control);
        }
        check_name(name)?;
        self.inode(parent)
    }

    /// The entry of a node this request just made as `name` in `p`, given
    /// the requester's owner first (see `chown_new`).
    pub(super) fn made_entry(&self, req: &Request, p: &Arc<Inode>, name: &OsStr) -> Res<FileAttr> {
        let _ = self.chown_new(req, p, name);
        self.lookup_entry(p, name)
    }

    pub(super) fn is_control(parent: INodeNo, name: &OsStr) -> bool {
        parent.0 == ROOT && name.as_bytes() == CONTROL_NAME.as_bytes()
    }

    pub(super) fn entry_reply(&self, reply: ReplyEntry, r: Res<FileAttr>) {
        match r {
            Ok(attr) => reply.entry(&self.ttl, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Finds `name` in `parent` (never following a symlink) and enters it
    /// in the table: one lookup the kernel now holds.
    pub(super) fn lookup_entry(&self, parent: &Arc<Inode>, name: &OsStr) -> Res<FileAttr> {
        check_name(name)?;
        let fd = fcntl::openat(
            &*parent.fd()?,
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(nix_errno)?;
        self.enter_entry(fd, (parent, name))
    }

    /// Enters the inode of `fd`, found as `name` in `parent`, in the table
    /// (one more lookup held by the kernel) and gives its attributes,
    /// `ino` its node id.
    pub(super) fn enter_entry(&self, fd: OwnedFd, place: (&Arc<Inode>, &OsStr)) -> Res<FileAttr> {
        let st = stat::fstat(&fd).map_err(nix_errno)?;
        let kind = kind_of(st.st_mode).ok_or(Errno::EIO)?;
        let (id, inode) = self.inodes.insert(fd, (st.st_dev, st.st_ino), kind, place);
        Ok(attr_of(id, &st, kind, inode.cached_len()))
    }

    /// Gives a node made for a request its requester as owner (when the
    /// server runs as root).
    pub(super) fn chown_new(&self, req: &Request, parent: &Inode, name: &OsStr) -> Res<()> {
        if !self.chown_created {
            return Ok(());
        }
        unistd::fchownat(
            &*parent.fd()?,
            name,
            Some(Uid::from_raw(req.uid())),
            Some(Gid::from_raw(req.gid())),
            fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(nix_errno)
    }

    pub(super) fn read_dir(
        &self,
        inode: &Inode,
        root: bool,
    ) -> Res<Vec<(u64, FileType, OsString)>> {
        let dir_fd = inode.fd()?;
        let fd = fcntl::openat(
            &*dir_fd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(nix_errno)?;
        let dir = nix::dir::Dir::from_fd(fd).map_err(nix_errno)?;
        let mut out = Vec::new();
        for ent in dir {
            let ent = ent.map_err(nix_errno)?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes()).to_os_string();
            if root && name.as_bytes() == CONTROL_NAME.as_bytes() {
                continue;
            }
            use nix::dir::Type;
            let kind = match ent.file_type() {
                Some(Type::Fifo) => FileType::NamedPipe,
                Some(Type::CharacterDevice) => FileType::CharDevice,
                Some(Type::Directory) => FileType::Directory,
                Some(Type::BlockDevice) => FileType::BlockDevice,
                Some(Type::File) => FileType::RegularFile,
                Some(Type::Symlink) => FileType::Symlink,
                Some(Type::Socket) => FileType::Socket,
                None => {
                    match stat::fstatat(
                        &*dir_fd,
                        name.as_os_str(),
                        fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .ok()
                    .and_then(|st| kind_of(st.st_mode))
                    {
                        Some(k) => k,
                        None => continue,
                    }
                }
            };
            let key = (inode.key.0, ent.ino());
            out.push((self.inodes.id_of(key).unwrap_or(ent.ino()), kind, name));
        }
        Ok(out)
    }

    pub(super) fn do_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(FileAttr, FileHandle)> {
        let p = self.parent_of(parent, name, Errno::EEXIST)?;
        // O_EXCL first, so that only a file made here is given to the
        // requester; O_NONBLOCK so that an existing FIFO does not block.
        let base = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_WRONLY | OFlag::O_NONBLOCK;
        let perm = Mode::from_bits_truncate(mode & 0o7777);
        let pfd = p.fd()?;
        let (fd, made) =
            match fcntl::openat(&*pfd, name, base | OFlag::O_CREAT | OFlag::O_EXCL, perm) {
                Ok(fd) => (fd, true),
                Err(nix::errno::Errno::EEXIST) if flags & OFlag::O_EXCL.bits() == 0 => (
                    fcntl::openat(&*pfd, name, base, perm).map_err(nix_errno)?,
                    false,
                ),
                Err(e) => return Err(nix_errno(e)),
            };
        let st = stat::fstat(&fd).map_err(nix_errno)?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
            return Err(Errno::EISDIR);
        }
        if made && self.chown_created {
            let _ = unistd::fchown(
                &fd,
                Some(Uid::from_raw(req.uid())),
                Some(Gid::from_raw(req.gid())),
            );
        }
        let path_fd = fcntl::open(
            format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)).as_str(),
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(nix_errno)?;
        drop(fd);
        let attr = self.enter_entry(path_fd, (&p, name))?;
        let id = attr.ino.0;
        let inode = Opened::new(self.inodes.get(id).ok_or(Errno::EIO)?);
        let acc = flags & OFlag::O_ACCMODE.bits();
        let write = acc == OFlag::O_WRONLY.bits() || acc == OFlag::O_RDWR.bits();
        let append = flags & OFlag::O_APPEND.bits() != 0;
        let file = match self.open_cached(&inode, write, append) {
            Ok(f) => f,
            Err(e) => {
                self.inodes.forget(id, 1);
                return Err(io_errno(&e));
            }
        };
        if flags & OFlag::O_TRUNC.bits() != 0 && write && !file.is_empty().unwrap_or(true) {
            // The file was there already (made by someone else since the
            // kernel looked): O_TRUNC cuts it, cached data included.
            file.set_len(0).map_err(|e| io_errno(&e))?;
        }
        let fh = self.add_handle(Handle::File { file, inode });
        Ok((attr, fh))
    }

    /// Removes the name `name` from directory `parent` (`unlinkat` with
    /// `flags`); `control` is the error for the control file's name.
    pub(super) fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        control: Errno,
        flags: UnlinkatFlags,
    ) -> Res<()> {
        let p = self.parent_of(parent, name, control)?;
        let pfd = p.fd()?;
        let victim = self.node_named(&pfd, name);
        unistd::unlinkat(&*pfd, name, flags).map_err(nix_errno)?;
        if let Some((node, fd)) = victim {
            node.name_gone(&p, name, &fd);
        }
        Ok(())
    }

    /// The node the kernel knows as `name` in the directory `dir`, if any,
    /// with its descriptor held (open before the name changes: see
    /// [`Inode::name_gone`]).
    pub(super) fn node_named(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
    ) -> Option<(Arc<Inode>, Arc<OwnedFd>)> {
        let st = stat::fstatat(dir, name, fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        let node = self.inodes.by_key((st.st_dev, st.st_ino))?;
        let fd = node.fd().ok()?;
        Some((node, fd))
    }

    /// Makes `name` in directory `parent` with `make` (given the
    /// directory's descriptor; the control file's name is taken: `EEXIST`), and
    /// answers with the new entry, owned by the requester when running as
    /// root.
    pub(super) fn make_entry(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
        make: impl FnOnce(&OwnedFd) -> Res<()>,
    ) {
        let r = self.parent_of(parent, name, Errno::EEXIST).and_then(|p| {
            make(&*p.fd()?)?;
            self.made_entry(req, &p, name)
        });
        self.entry_reply(reply, r);
    }
}
