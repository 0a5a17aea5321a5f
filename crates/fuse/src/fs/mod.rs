//! [`FolioFs`]: the FUSE operations over a backing directory and a cache.
//!
//! Metadata operations pass through to the backing directory with the
//! `*at` system calls on the descriptors of the inode table
//! ([`crate::inode`]); file data goes through the [`Cache`]. Every file is
//! opened toward the kernel with `FOPEN_DIRECT_IO`, so the kernel keeps no
//! second copy of what the cache holds.
//!
//! One part per file: `attr.rs` attributes and times; `names.rs` names in
//! directories (lookup, create, the directory listing); `data.rs` file
//! data (open, read, write, fallocate); `stats.rs` the control file's
//! statistics; `ops.rs` the FUSE requests, each answered from those.
//!
//! The cache is the mount's own ([`FolioFs::new`]) or a named shared
//! cache other programs attach to ([`FolioFs::with_shared`]): its files
//! are then served from the group's pages, each write seen by the
//! group's next read and each of theirs by the mount's, and the kernel
//! keeps no entry or attribute past its request, since the group changes
//! the backing behind the server.

mod attr;
mod data;
mod names;
mod ops;
mod stats;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use foliocache::{AnyFile, Cache, CachedFile, SharedCache};
use fuser::{Errno, FileHandle, FileType, INodeNo};
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, Mode};
use nix::unistd::{self};
use parking_lot::Mutex;

use crate::control::{self, CONTROL_INO};
use crate::inode::{proc_path, Inode, InodeTable};

/// How long the kernel may keep an entry or attributes with the mount's
/// own cache: the backing changes only through this server, which
/// answers every change. With a named shared cache, none: the group's
/// processes change the backing, and sizes, behind the server.
const TTL: Duration = Duration::from_secs(1);

/// The largest read or write the kernel is asked to send at once.
const MAX_IO: u32 = 1 << 20;

type Res<T> = Result<T, Errno>;

/// An open file, directory or control file.
enum Handle {
    File {
        file: AnyFile,
        /// Its node (for the time of its last write).
        inode: Opened,
    },
    Dir {
        entries: Vec<(u64, FileType, OsString)>,
    },
    Control(Mutex<control::Session>),
}

/// A node with a handle open on it: its cached file stays while so
/// (`Inode::opened`).
struct Opened(Arc<Inode>);

impl Opened {
    fn new(inode: Arc<Inode>) -> Opened {
        inode.opened();
        Opened(inode)
    }
}

impl std::ops::Deref for Opened {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        &self.0
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.closed();
    }
}

/// The FUSE filesystem: a backing directory served through one [`Cache`].
///
/// Build one with [`FolioFs::new`] and mount it with fuser (or
/// [`crate::spawn`] / [`crate::session`]). Requests may be served by
/// several threads at once: every table is behind its own short lock, and
/// the cache is thread-safe.
pub struct FolioFs {
    store: Store,
    /// How long the kernel may keep an entry or attributes ([`TTL`], or
    /// none with a shared cache).
    ttl: Duration,
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

/// The cache the files are served through.
enum Store {
    /// The mount's own.
    Private(Cache),
    /// A named shared cache, attached to by its name.
    Shared { cache: SharedCache, name: String },
}

/// The nodes' descriptors are budgeted from the open-file limit: lets the
/// process have as many as its hard limit allows (the soft limit is often
/// 1024).
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
    /// ([`ReadFlags::DONTCACHE`](foliocache::ReadFlags::DONTCACHE),
    /// [`WriteFlags::DONTCACHE`](foliocache::WriteFlags::DONTCACHE)).
    ///
    /// # Errors
    /// The OS error of opening `backing_dir` (`ENOTDIR` if it is not a
    /// directory).
    pub fn new(backing_dir: &Path, cache: Cache, dontcache: bool) -> io::Result<FolioFs> {
        Self::with_max_open(backing_dir, cache, dontcache, None)
    }

    /// [`new`](Self::new), keeping at most `max_open` descriptors open for
    /// the nodes the kernel knows (see [`crate::MountOptions::max_open`];
    /// `None`: from the open-file limit, raised to its hard limit first).
    ///
    /// # Errors
    /// As [`new`](Self::new); `InvalidInput` for a `max_open` above the
    /// open-file limit (raised to its hard limit) less the 256 descriptors
    /// kept for the rest.
    pub fn with_max_open(
        backing_dir: &Path,
        cache: Cache,
        dontcache: bool,
        max_open: Option<usize>,
    ) -> io::Result<FolioFs> {
        Self::with_store(backing_dir, Store::Private(cache), dontcache, max_open)
    }

    /// A filesystem serving the tree under `backing_dir` through the
    /// named shared cache `cache` (attached to by `name`,
    /// [`SharedCache::attach_named`]), keeping at most `max_open`
    /// descriptors as [`with_max_open`](Self::with_max_open) does. Every
    /// program attached to the cache shares its pages with the mount; the
    /// kernel keeps no entry or attribute past its request.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_shared(
        backing_dir: &Path,
        cache: SharedCache,
        name: &str,
        max_open: Option<usize>,
    ) -> io::Result<FolioFs> {
        let store = Store::Shared {
            cache,
            name: name.to_owned(),
        };
        Self::with_store(backing_dir, store, false, max_open)
    }

    fn with_store(
        backing_dir: &Path,
        store: Store,
        dontcache: bool,
        max_open: Option<usize>,
    ) -> io::Result<FolioFs> {
        let fd = fcntl::open(
            backing_dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let st = stat::fstat(&fd)?;
        raise_fd_limit();
        crate::fds::check_max_open(max_open)?;
        let fds = Arc::new(crate::fds::Fds::new(max_open));
        let ttl = match store {
            Store::Private(_) => TTL,
            Store::Shared { .. } => Duration::ZERO,
        };
        Ok(FolioFs {
            store,
            ttl,
            inodes: InodeTable::new(fd, (st.st_dev, st.st_ino), fds),
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
    /// With a named shared cache, `InvalidInput`: its pages are the
    /// group's, kept by its host.
    pub fn warm_restarts(&mut self, path: &Path) -> io::Result<()> {
        let Some(cache) = self.cache() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "warm restarts are for a mount's own cache: a named cache keeps its \
                 pages while its host lives",
            ));
        };
        self.saver = Some(crate::warm::start(cache, path)?);
        self.state = Some(path.to_path_buf());
        Ok(())
    }

    /// The mount's own cache the files are served through (`None` with a
    /// named shared cache: [`shared_cache`](Self::shared_cache)).
    pub fn cache(&self) -> Option<&Cache> {
        match &self.store {
            Store::Private(cache) => Some(cache),
            Store::Shared { .. } => None,
        }
    }

    /// The named shared cache the files are served through, and its
    /// name (`None` with the mount's own cache).
    pub fn shared_cache(&self) -> Option<(&SharedCache, &str)> {
        match &self.store {
            Store::Private(_) => None,
            Store::Shared { cache, name } => Some((cache, name)),
        }
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
        let mut r = match &self.store {
            Store::Private(cache) => cache.sync_all(),
            Store::Shared { cache, .. } => sync_shared(cache, &inodes),
        };
        if let Err(e) = &r {
            let failed: Vec<(String, io::Error)> = inodes
                .iter()
                .filter_map(|inode| {
                    let file = inode.cached_file()?;
                    let e = file.sync_all().err()?;
                    let path = inode
                        .fd()
                        .ok()
                        .and_then(|fd| std::fs::read_link(proc_path(&fd)).ok());
                    let path = path.map_or_else(
                        || format!("inode {}", inode.key.1),
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
        if let (Some(path), Some(cache)) = (&self.state, self.cache()) {
            crate::warm::save(cache, path);
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

    /// Forgets the handle `fh` (a release of a file or directory): the
    /// file it held closes when its last user is done with it.
    fn close_handle(&self, fh: FileHandle) {
        let h = self.handles.lock().remove(&fh.0);
        drop(h);
    }

    /// The descriptors the nodes hold now, and their budgets: (`O_PATH`
    /// descriptors, their budget, cached files, their budget).
    pub fn descriptors(&self) -> (usize, usize, usize, usize) {
        self.inodes.descriptors()
    }
}

/// The shutdown's writeback with a named shared cache: each file the
/// kernel knows, through the mount's descriptor (what the group's pages
/// hold of it, the mount's writes and the group's), then everything else
/// the group left dirty, by path (the mount's writes to files the kernel
/// has forgotten among it). Only the first part's errors fail the
/// unmount: the rest are other programs' files (one renamed or deleted
/// since is skipped), which the cache's host writes back too, and are
/// logged.
fn sync_shared(cache: &SharedCache, inodes: &[Arc<Inode>]) -> io::Result<()> {
    let mut r = Ok(());
    for inode in inodes {
        if let Some(file) = inode.cached_file() {
            let synced = file.sync_data();
            if r.is_ok() {
                r = synced;
            }
        }
    }
    if let Err(e) = cache.write_back_all() {
        log::warn!("foliocache-fuse: writing back the shared cache at unmount: {e}");
    }
    r
}

impl Drop for FolioFs {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
