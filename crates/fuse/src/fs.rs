//! [`FolioFs`]: the FUSE operations over a backing directory and a cache.
//!
//! Metadata operations pass through to the backing directory with the
//! `*at` system calls on the descriptors of the inode table
//! ([`crate::inode`]); file data goes through the [`Cache`]. Every file is
//! opened toward the kernel with `FOPEN_DIRECT_IO`, so the kernel keeps no
//! second copy of what the cache holds.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foliocache::{Cache, File, ReadFlags, WriteFlags};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow,
};
use nix::fcntl::{self, FallocateFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{self, FileStat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{self, Gid, Uid, UnlinkatFlags};
use parking_lot::Mutex;

use crate::control::{self, CONTROL_INO, CONTROL_NAME};
use crate::errno::{io_errno, nix_errno};
use crate::inode::{Inode, InodeTable, ROOT};

/// How long the kernel may keep an entry or attributes: the backing
/// changes only through this server, which answers every change.
const TTL: Duration = Duration::from_secs(1);

/// The largest read or write the kernel is asked to send at once.
const MAX_IO: u32 = 1 << 20;

type Res<T> = Result<T, Errno>;

/// An open file, directory or control file.
enum Handle {
    File {
        file: File,
        /// Its node (for the time of its last write).
        inode: Arc<Inode>,
    },
    Dir {
        entries: Vec<(u64, FileType, OsString)>,
    },
    Control(Mutex<control::Session>),
}

/// The FUSE filesystem: a backing directory served through one [`Cache`].
///
/// Build one with [`FolioFs::new`] and mount it with fuser (or
/// [`crate::spawn`] / [`crate::session`]). Requests may be served by
/// several threads at once: every table is behind its own short lock, and
/// the cache is thread-safe.
pub struct FolioFs {
    cache: Cache,
    inodes: InodeTable,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    dontcache: bool,
    /// Running as root: files made for a request are given the requester's
    /// owner, as a local filesystem would.
    chown_created: bool,
    /// The server's effective user and group (owner of the control file).
    owner: (u32, u32),
    shut: AtomicBool,
    /// The kernel maps the files shared (`FUSE_DIRECT_IO_ALLOW_MMAP` was
    /// agreed at init).
    shared_mmap: AtomicBool,
    /// The writeback error of the shutdown, for [`crate::serve`] to report.
    sync_error: Arc<Mutex<Option<String>>>,
    /// Where the warm-restart list is saved at unmount, if anywhere.
    state: Option<std::path::PathBuf>,
    /// The periodic save of that list (stops when dropped).
    saver: Option<crate::warm::Saver>,
}

/// Now, in nanoseconds since the epoch (at least 1).
fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
    })
}

fn ts_to_time(sec: i64, nsec: i64) -> SystemTime {
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

fn kind_of(mode: u32) -> Option<FileType> {
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
fn attr_of(id: u64, st: &FileStat, kind: FileType, size: Option<u64>) -> FileAttr {
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

/// A name the kernel sends is one path component; refuse anything else
/// so that no name leads out of its directory.
fn check_name(name: &OsStr) -> Res<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if b.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

fn time_spec(t: Option<TimeOrNow>) -> TimeSpec {
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

/// Every node the kernel knows holds a descriptor: lets the process have
/// as many as its hard limit allows (the soft limit is often 1024).
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

impl FolioFs {
    /// A filesystem serving the tree under `backing_dir` through `cache`.
    /// With `dontcache`, every read and write is uncached
    /// ([`ReadFlags::DONTCACHE`], [`WriteFlags::DONTCACHE`]).
    ///
    /// # Errors
    /// The OS error of opening `backing_dir` (`ENOTDIR` if it is not a
    /// directory).
    pub fn new(backing_dir: &Path, cache: Cache, dontcache: bool) -> io::Result<FolioFs> {
        let fd = fcntl::open(
            backing_dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let st = stat::fstat(&fd)?;
        raise_fd_limit();
        Ok(FolioFs {
            cache,
            inodes: InodeTable::new(fd, (st.st_dev, st.st_ino)),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            dontcache,
            chown_created: unistd::geteuid().is_root(),
            owner: (unistd::geteuid().as_raw(), unistd::getegid().as_raw()),
            shut: AtomicBool::new(false),
            shared_mmap: AtomicBool::new(false),
            sync_error: Arc::new(Mutex::new(None)),
            state: None,
            saver: None,
        })
    }

    /// Warm restarts with the state file at `path`: starts loading it
    /// into the cache in the background, saves it every 30 s while the
    /// file system lives, and at unmount ([`shutdown`](Self::shutdown)).
    ///
    /// # Errors
    /// The OS error of starting the saving thread.
    pub fn warm_restarts(&mut self, path: &Path) -> io::Result<()> {
        self.saver = Some(crate::warm::start(&self.cache, path)?);
        self.state = Some(path.to_path_buf());
        Ok(())
    }

    /// The cache the files are served through.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Writes back every dirty folio (but an unlinked file's, which goes
    /// unwritten) and drops the cache's handles: what unmounting does (also
    /// on drop). Idempotent.
    ///
    /// When the writeback fails, each file the kernel knows is synced
    /// again on its own, which reports the error its handle has not yet
    /// seen (`Cache::sync_all` tried every file, so one file's failure kept
    /// no other's data from the backing): the error names each failed file
    /// by its backing path. A failed file's data stays dirty until the
    /// cache goes, and is lost with it: the error is what says so.
    ///
    /// # Errors
    /// Every file whose writeback or sync failed, by path, with the first
    /// one's error kind; [`Cache::sync_all`]'s error if no file the kernel
    /// knows reports one (a file it has forgotten failed).
    pub fn shutdown(&self) -> io::Result<()> {
        if self.shut.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // The data of unlinked files goes unwritten, as at their last close:
        // the mount going away closes them.
        let inodes = self.inodes.all();
        for inode in &inodes {
            inode.discard_if_unlinked();
        }
        let mut r = self.cache.sync_all();
        if let Err(e) = &r {
            let failed: Vec<(String, io::Error)> = inodes
                .iter()
                .filter_map(|inode| {
                    let file = inode.cached.lock().clone()?;
                    let e = file.sync_all().err()?;
                    let path = std::fs::read_link(inode.proc_path()).map_or_else(
                        |_| format!("inode {}", inode.key.1),
                        |p| p.display().to_string(),
                    );
                    Some((path, e))
                })
                .collect();
            if !failed.is_empty() {
                let list: Vec<String> = failed.iter().map(|(p, e)| format!("{p}: {e}")).collect();
                r = Err(io::Error::new(
                    failed[0].1.kind(),
                    format!(
                        "{} file(s) not written back: {}",
                        failed.len(),
                        list.join("; ")
                    ),
                ));
            } else {
                log::debug!("foliocache-fuse: the failed writeback was of a forgotten file: {e}");
            }
        }
        // The list of what is cached, before the cached files go (after
        // the writeback: files with dirty data are left out of it).
        if let Some(path) = &self.state {
            crate::warm::save(&self.cache, path);
        }
        self.handles.lock().clear();
        self.inodes.drop_cached();
        if let Err(e) = &r {
            log::error!("foliocache-fuse: writeback at unmount failed: {e}");
            *self.sync_error.lock() = Some(e.to_string());
        }
        r
    }

    /// Whether the kernel lets programs map the mount's files shared
    /// (`MAP_SHARED`): it has `FUSE_DIRECT_IO_ALLOW_MMAP` (Linux 6.6 and
    /// later). Known once the mount is up; false before.
    pub fn shared_mmap(&self) -> bool {
        self.shared_mmap.load(Ordering::Relaxed)
    }

    /// Where [`shutdown`](Self::shutdown) leaves its writeback error, if
    /// any (shared: read it after the session has ended).
    pub fn sync_error(&self) -> Arc<Mutex<Option<String>>> {
        self.sync_error.clone()
    }

    fn inode(&self, ino: INodeNo) -> Res<Arc<Inode>> {
        if ino.0 == CONTROL_INO {
            // Only a directory's operations reach here with it.
            return Err(Errno::ENOTDIR);
        }
        self.inodes.get(ino.0).ok_or(Errno::ESTALE)
    }

    fn handle(&self, fh: FileHandle) -> Res<Arc<Handle>> {
        self.handles.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn add_handle(&self, h: Handle) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, Arc::new(h));
        FileHandle(fh)
    }

    fn file_of(&self, fh: FileHandle) -> Res<Arc<Handle>> {
        let h = self.handle(fh)?;
        match &*h {
            Handle::File { .. } => Ok(h),
            Handle::Dir { .. } => Err(Errno::EISDIR),
            Handle::Control(_) => Ok(h),
        }
    }

    fn stat_attr(&self, id: u64, inode: &Inode) -> Res<FileAttr> {
        let st = stat::fstat(&inode.fd).map_err(nix_errno)?;
        let mut a = attr_of(id, &st, inode.kind, inode.cached_len());
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

    /// The directory `parent` for an operation on its entry `name`: the
    /// control file's name there is refused with `control` (the errno a
    /// local filesystem gives for that operation on an existing file of
    /// its kind); a bad name is refused as [`check_name`] says.
    fn parent_of(&self, parent: INodeNo, name: &OsStr, control: Errno) -> Res<Arc<Inode>> {
        if Self::is_control(parent, name) {
            return Err(control);
        }
        check_name(name)?;
        self.inode(parent)
    }

    /// The entry of a node this request just made as `name` in `p`, given
    /// the requester's owner first (see `chown_new`).
    fn made_entry(&self, req: &Request, p: &Inode, name: &OsStr) -> Res<FileAttr> {
        let _ = self.chown_new(req, p, name);
        self.lookup_entry(p, name)
    }

    fn is_control(parent: INodeNo, name: &OsStr) -> bool {
        parent.0 == ROOT && name.as_bytes() == CONTROL_NAME.as_bytes()
    }

    fn entry_reply(&self, reply: ReplyEntry, r: Res<FileAttr>) {
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Finds `name` in `parent` (never following a symlink) and enters it
    /// in the table: one lookup the kernel now holds.
    fn lookup_entry(&self, parent: &Inode, name: &OsStr) -> Res<FileAttr> {
        check_name(name)?;
        let fd = fcntl::openat(
            &parent.fd,
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(nix_errno)?;
        self.enter_entry(fd)
    }

    /// Enters the inode of `fd` in the table (one more lookup held by the
    /// kernel) and gives its attributes, `ino` its node id.
    fn enter_entry(&self, fd: OwnedFd) -> Res<FileAttr> {
        let st = stat::fstat(&fd).map_err(nix_errno)?;
        let kind = kind_of(st.st_mode).ok_or(Errno::EIO)?;
        let (id, inode) = self.inodes.insert(fd, (st.st_dev, st.st_ino), kind);
        Ok(attr_of(id, &st, kind, inode.cached_len()))
    }

    /// Gives a node made for a request its requester as owner (when the
    /// server runs as root).
    fn chown_new(&self, req: &Request, parent: &Inode, name: &OsStr) -> Res<()> {
        if !self.chown_created {
            return Ok(());
        }
        unistd::fchownat(
            &parent.fd,
            name,
            Some(Uid::from_raw(req.uid())),
            Some(Gid::from_raw(req.gid())),
            fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(nix_errno)
    }

    /// A cache handle on `inode` (a regular file) with these rights; the
    /// node keeps one too (see [`crate::inode`]).
    fn open_cached(&self, inode: &Inode, write: bool, append: bool) -> io::Result<File> {
        let f = self
            .cache
            .open_options()
            .read(true)
            .write(write)
            .append(append)
            .open(inode.proc_path())?;
        if self.dontcache {
            f.set_default_flags(ReadFlags::DONTCACHE);
        }
        let mut kept = inode.cached.lock();
        let replace = match &*kept {
            None => true,
            Some(old) => write && !old.is_writable(),
        };
        if replace {
            let old = kept.replace(f.reopen());
            drop(kept);
            drop(old);
        }
        Ok(f)
    }

    /// A writable cache handle on `inode`: the node's own if writable.
    fn writable(&self, inode: &Inode) -> io::Result<File> {
        if let Some(f) = inode.cached.lock().as_ref() {
            if f.is_writable() {
                return Ok(f.reopen());
            }
        }
        self.open_cached(inode, true, false)
    }

    #[allow(clippy::too_many_arguments)] // setattr's own fields, one each
    fn do_setattr(
        &self,
        id: u64,
        inode: &Inode,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Res<FileAttr> {
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
                inode.proc_path().as_str(),
                Mode::from_bits_truncate(mode & 0o7777),
                stat::FchmodatFlags::FollowSymlink,
            )
            .map_err(nix_errno)?;
        }
        if uid.is_some() || gid.is_some() {
            unistd::fchownat(
                &inode.fd,
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
            let kept = inode.cached.lock().as_ref().map(|f| f.reopen());
            if let Some(f) = kept {
                if f.is_writable() {
                    f.sync_data().map_err(|e| io_errno(&e))?;
                }
            }
            stat::utimensat(
                AT_FDCWD,
                inode.proc_path().as_str(),
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

    fn read_dir(&self, inode: &Inode, root: bool) -> Res<Vec<(u64, FileType, OsString)>> {
        let fd = fcntl::openat(
            &inode.fd,
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
                        &inode.fd,
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

    fn do_create(
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
        let (fd, made) =
            match fcntl::openat(&p.fd, name, base | OFlag::O_CREAT | OFlag::O_EXCL, perm) {
                Ok(fd) => (fd, true),
                Err(nix::errno::Errno::EEXIST) if flags & OFlag::O_EXCL.bits() == 0 => (
                    fcntl::openat(&p.fd, name, base, perm).map_err(nix_errno)?,
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
        let attr = self.enter_entry(path_fd)?;
        let id = attr.ino.0;
        let inode = self.inodes.get(id).ok_or(Errno::EIO)?;
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
        if flags & OFlag::O_TRUNC.bits() != 0 && write && !file.is_empty() {
            // The file was there already (made by someone else since the
            // kernel looked): O_TRUNC cuts it, cached data included.
            file.set_len(0).map_err(|e| io_errno(&e))?;
        }
        let fh = self.add_handle(Handle::File { file, inode });
        Ok((attr, fh))
    }

    /// Serves a read: the data goes to `reply` from the cache's memory in
    /// place, or from a buffer of the serving thread's, reused from read
    /// to read (no allocation, no zeroing on the hot path).
    fn do_read(&self, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
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

    fn do_write(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Res<u32> {
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
    fn do_fallocate(&self, fh: FileHandle, offset: u64, len: u64, mode: i32) -> Res<()> {
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

    /// The figures `foliocache stat` shows, as JSON: the cache's, and
    /// cachestat of each path (relative to the mount root) asked for.
    pub(crate) fn stats_json(&self, paths: &[String]) -> serde_json::Value {
        let files: Vec<serde_json::Value> = paths
            .iter()
            .map(|p| match self.cachestat_of(p) {
                Ok(cs) => serde_json::json!({
                    "path": p,
                    "cached": cs.cached,
                    "dirty": cs.dirty,
                    "writeback": cs.writeback,
                    "evicted": cs.evicted,
                    "recently_evicted": cs.recently_evicted,
                }),
                Err(e) => serde_json::json!({ "path": p, "error": e.to_string() }),
            })
            .collect();
        serde_json::json!({
            "cache": control::cache_stats_json(&self.cache.stats()),
            "io_engine": self.cache.io_engine_name(),
            "dontcache": self.dontcache,
            "shared_mmap": self.shared_mmap(),
            "warm": crate::warm::progress_json(&self.cache.warm_progress()),
            "files": files,
        })
    }

    /// cachestat of the whole file at `rel` (below the root, each
    /// component looked up without following symlinks).
    fn cachestat_of(&self, rel: &str) -> io::Result<foliocache::CacheStat> {
        let root = self
            .inodes
            .get(ROOT)
            .ok_or_else(|| io::Error::other("no root"))?;
        let mut cur: Option<OwnedFd> = None;
        for comp in rel.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if comp == ".." {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "`..` is not allowed in a control path",
                ));
            }
            let dir: &OwnedFd = cur.as_ref().unwrap_or(&root.fd);
            let fd = fcntl::openat(
                dir.as_fd(),
                comp,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            cur = Some(fd);
        }
        let fd = cur.ok_or_else(|| io::Error::from(nix::errno::Errno::EISDIR))?;
        let st = stat::fstat(&fd)?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
            return Err(nix::errno::Errno::EINVAL.into());
        }
        // Not opened through the cache: an open would take a warm-loaded
        // file over, and its folios would go with that handle.
        self.cache.cachestat_file(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
    }
}

impl Drop for FolioFs {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

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
            Ok(a) => reply.attr(&TTL, &a),
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
        let r = self
            .inode(ino)
            .and_then(|i| self.do_setattr(ino.0, &i, mode, uid, gid, size, atime, mtime, fh));
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self.inode(ino).and_then(|i| {
            if i.kind != FileType::Symlink {
                return Err(Errno::EINVAL);
            }
            fcntl::readlinkat(&i.fd, "").map_err(nix_errno)
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
        let r = (|| {
            let p = self.parent_of(parent, name, Errno::EEXIST)?;
            stat::mkdirat(&p.fd, name, Mode::from_bits_truncate(mode & 0o7777))
                .map_err(nix_errno)?;
            self.made_entry(req, &p, name)
        })();
        self.entry_reply(reply, r);
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
        let r = (|| {
            let p = self.parent_of(parent, name, Errno::EEXIST)?;
            let kind = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
            // FIFOs, sockets and plain files; devices would be useless on
            // a nodev mount, and are refused as a local user is refused.
            if !matches!(kind, SFlag::S_IFIFO | SFlag::S_IFSOCK | SFlag::S_IFREG) {
                return Err(Errno::EPERM);
            }
            stat::mknodat(
                &p.fd,
                name,
                kind,
                Mode::from_bits_truncate(mode & 0o7777),
                stat::dev_t::from(rdev),
            )
            .map_err(nix_errno)?;
            self.made_entry(req, &p, name)
        })();
        self.entry_reply(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.parent_of(parent, name, Errno::EPERM).and_then(|p| {
            unistd::unlinkat(&p.fd, name, UnlinkatFlags::NoRemoveDir).map_err(nix_errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.parent_of(parent, name, Errno::ENOTDIR).and_then(|p| {
            unistd::unlinkat(&p.fd, name, UnlinkatFlags::RemoveDir).map_err(nix_errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let p = self.parent_of(parent, link_name, Errno::EEXIST)?;
            // The link's text is stored as given; it is only ever read back
            // (readlink), never followed by the server.
            unistd::symlinkat(target, &p.fd, link_name).map_err(nix_errno)?;
            self.made_entry(req, &p, link_name)
        })();
        self.entry_reply(reply, r);
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
            fcntl::renameat2(&p.fd, name, &np.fd, newname, f).map_err(nix_errno)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
            unistd::linkat(
                AT_FDCWD,
                i.proc_path().as_str(),
                &np.fd,
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
            let file = self
                .open_cached(&i, write, append)
                .map_err(|e| io_errno(&e))?;
            Ok(self.add_handle(Handle::File { file, inode: i }))
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
        match self.handle(fh) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let h = self.handles.lock().remove(&fh.0);
        drop(h);
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
                    let kept = self
                        .inode(ino)?
                        .cached
                        .lock()
                        .as_ref()
                        .filter(|f| f.is_writable())
                        .map(File::reopen);
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
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let h = self.handles.lock().remove(&fh.0);
        drop(h);
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
                &i.fd,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(nix_errno)?;
            unistd::fsync(&fd).map_err(nix_errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = self
            .inode(INodeNo(ROOT))
            .and_then(|i| nix::sys::statvfs::fstatvfs(&i.fd).map_err(nix_errno));
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
            Ok((attr, fh)) => {
                reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::FOPEN_DIRECT_IO)
            }
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
        match self.do_fallocate(fh, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
