//! The inode table: FUSE node ids to backing inodes.
//!
//! Each node the kernel knows (it was named in an entry reply and not yet
//! forgotten) is found by an `O_PATH | O_NOFOLLOW` descriptor of its
//! backing inode, opened by `openat` of one name relative to its parent's
//! descriptor. Every later operation starts from that descriptor, never
//! from a path string, so:
//! - nothing outside the backing directory is reachable: a name is one
//!   component (never `.`, `..` or one with a `/`), opened with
//!   `O_NOFOLLOW` below a directory already inside the tree, so a symlink
//!   is never followed by the server (the kernel follows it on the
//!   client's side, by reading its text);
//! - hard links are one node: nodes are found by (device, inode).
//!
//! The descriptors are bounded (`fds.rs`): a node not in use may
//! close its descriptor, and reopens it when next asked, from its
//! parent's (itself reopened so, up to the root, which never closes) by
//! the name it was last known by, checking that the name still leads to
//! the same (device, inode): a name changed behind the server's back
//! answers `ESTALE`, never another file. Renames through the mount move a
//! node's name with it; a node whose name goes (unlink, rmdir, replaced by
//! a rename) keeps its descriptor for good (pinned), so an unlinked file
//! open through the mount stays readable and writable, as on a local
//! filesystem.
//!
//! A regular file's node also keeps the cache's file of its first open
//! ([`AnyFile`]: a `foliocache::File`, or a `SharedFile` of a named
//! shared cache), so its cached folios outlive one open/close (as the
//! kernel keeps a page cache per inode, not per open file), and its size
//! comes from the cache while dirty data may extend it. That file goes when the kernel forgets
//! the node, or earlier when no handle has it open and the cached files'
//! budget is passed (its dirty data written back then: the kernel's
//! `evict`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use foliocache::{AnyFile, CachedFile};
use fuser::{Errno, FileType};
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, Mode};
use parking_lot::Mutex;

use crate::errno::nix_errno;
use crate::fds::{second_chance, Fds, Release};

/// The FUSE node id of the mount's root.
pub const ROOT: u64 = 1;

/// `/proc/self/fd/N` of a node's descriptor: opening it reopens the very
/// inode (no path lookup through the backing tree). Valid while `fd` is.
pub fn proc_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Where a node is found again once its descriptor closed.
enum Place {
    /// By this name in this directory.
    Named { parent: Arc<Inode>, name: OsString },
    /// Nowhere: its descriptor never closes (the root; a node whose name
    /// went).
    Pinned,
}

/// A backing inode the kernel knows.
pub struct Inode {
    /// Its `O_PATH | O_NOFOLLOW` descriptor, while open.
    fd: Mutex<Option<Arc<OwnedFd>>>,
    place: Mutex<Place>,
    /// Its (device, inode) in the backing.
    pub key: (u64, u64),
    /// Its type (fixed for an inode's life).
    pub kind: FileType,
    /// The cache's handle on a regular file once it has been opened (see
    /// the module doc).
    cached: Mutex<Option<AnyFile>>,
    /// When the file was last written through the mount (nanoseconds since
    /// the epoch; 0: not since its times were last set): its data may
    /// still be dirty in the cache, the backing's mtime not yet moved, so
    /// the attributes report this instead while it is later.
    pub written: AtomicU64,
    /// Handles open on the node: its cached file stays while any is.
    opens: AtomicU32,
    /// Its descriptor, its cached file used since the CLOCK last passed.
    path_used: AtomicBool,
    file_used: AtomicBool,
    fds: Arc<Fds>,
    me: Weak<Inode>,
}

impl Inode {
    fn new(
        fd: OwnedFd,
        place: Place,
        key: (u64, u64),
        kind: FileType,
        fds: &Arc<Fds>,
    ) -> Arc<Inode> {
        let inode = Arc::new_cyclic(|me| Inode {
            fd: Mutex::new(Some(Arc::new(fd))),
            place: Mutex::new(place),
            key,
            kind,
            cached: Mutex::new(None),
            written: AtomicU64::new(0),
            opens: AtomicU32::new(0),
            path_used: AtomicBool::new(true),
            file_used: AtomicBool::new(false),
            fds: fds.clone(),
            me: me.clone(),
        });
        fds.paths.added(Arc::downgrade(&inode), release_path);
        inode
    }

    /// The node's descriptor, reopened if it was closed (see the module
    /// doc). Held, it stays open.
    ///
    /// # Errors
    /// The OS error of reopening it; `ESTALE` if its name now leads to
    /// another inode, or to none.
    pub fn fd(&self) -> Result<Arc<OwnedFd>, Errno> {
        if let Some(fd) = &*self.fd.lock() {
            self.path_used.store(true, Ordering::Relaxed);
            return Ok(fd.clone());
        }
        let (parent, name) = match &*self.place.lock() {
            Place::Named { parent, name } => (parent.clone(), name.clone()),
            Place::Pinned => return Err(Errno::ESTALE),
        };
        let fd = open_named(&parent, &name)?;
        let st = stat::fstat(&fd).map_err(nix_errno)?;
        if (st.st_dev, st.st_ino) != self.key {
            return Err(Errno::ESTALE);
        }
        let fd = Arc::new(fd);
        {
            let mut slot = self.fd.lock();
            if let Some(other) = &*slot {
                return Ok(other.clone());
            }
            *slot = Some(fd.clone());
        }
        self.fds.paths.added(self.me.clone(), release_path);
        Ok(fd)
    }

    /// Whether the node is known by `name` in directory `parent`.
    fn named(&self, parent: &Inode, name: &OsStr) -> bool {
        match &*self.place.lock() {
            Place::Named { parent: p, name: n } => p.key == parent.key && n == name,
            Place::Pinned => false,
        }
    }

    /// The node's name moved to `name` in `parent` (a rename through the
    /// mount), if it was known by the old one.
    pub fn renamed(&self, from: (&Inode, &OsStr), to: (&Arc<Inode>, &OsStr)) {
        if self.named(from.0, from.1) {
            *self.place.lock() = Place::Named {
                parent: to.0.clone(),
                name: to.1.to_os_string(),
            };
        }
    }

    /// The name `name` in `parent` went (unlink, rmdir, replaced by a
    /// rename): if the node was known by it, its descriptor is kept for
    /// good. `held` is that descriptor, taken (`fd`) before the name went:
    /// while it is held the CLOCK leaves it open, so the pinned node has
    /// one.
    pub fn name_gone(&self, parent: &Inode, name: &OsStr, held: &Arc<OwnedFd>) {
        if self.named(parent, name) {
            *self.place.lock() = Place::Pinned;
        }
        debug_assert!(self
            .fd
            .lock()
            .as_ref()
            .is_some_and(|fd| Arc::ptr_eq(fd, held)));
    }

    /// Drops the cache's data of a regular file whose backing inode has
    /// no name left (unlinked, or replaced by a rename), dirty data
    /// unwritten: once its last open has closed no one can read it again,
    /// so writing it back would only cost IO (and, were the writeback to
    /// fail, an unmount's error). The kernel does the same at an unlinked
    /// inode's `evict` (`truncate_inode_pages_final`). A name made for it
    /// meanwhile (`linkat` of an `O_TMPFILE`, say) keeps it. In a named
    /// shared cache the data is written back instead
    /// ([`AnyFile::discard_unlinked`]: another process may have the
    /// file open).
    pub fn discard_if_unlinked(&self) {
        let cached = self.cached.lock();
        let Some(file) = cached.as_ref() else {
            return;
        };
        // A node with no descriptor open has a name (else it is pinned).
        let Some(fd) = self.fd.lock().clone() else {
            return;
        };
        match stat::fstat(&*fd) {
            Ok(st) if st.st_nlink == 0 => {
                if let Err(e) = file.discard_unlinked() {
                    log::warn!("foliocache-fuse: dropping an unlinked file's data: {e}");
                }
            }
            _ => {}
        }
    }

    /// The size the cache holds for the file, if it has it open.
    pub fn cached_len(&self) -> Option<u64> {
        self.cached.lock().as_ref().and_then(|f| f.len().ok())
    }

    /// A handle on the node's cached file, if it has one.
    pub fn cached_file(&self) -> Option<AnyFile> {
        let f = self.cached.lock().as_ref().map(AnyFile::reopen);
        if f.is_some() {
            self.file_used.store(true, Ordering::Relaxed);
        }
        f
    }

    /// Keeps `f` as the node's cached file if it has none, or has a
    /// read-only one and `f` is writable.
    pub fn keep_cached(&self, f: &AnyFile) {
        let mut kept = self.cached.lock();
        let old = match &*kept {
            None => None,
            Some(old) if f.is_writable() && !old.is_writable() => kept.take(),
            Some(_) => return,
        };
        let new = old.is_none();
        *kept = Some(f.reopen());
        drop(kept);
        drop(old);
        self.file_used.store(true, Ordering::Relaxed);
        if new {
            self.fds.files.added(self.me.clone(), release_file);
        }
    }

    /// Drops the node's cached file (at unmount, after a sync).
    fn drop_cached(&self) {
        let f = self.cached.lock().take();
        if f.is_some() {
            self.fds.files.removed();
        }
        drop(f);
    }

    /// A handle opened on the node: its cached file stays until
    /// [`closed`](Self::closed).
    pub fn opened(&self) {
        self.opens.fetch_add(1, Ordering::Relaxed);
    }

    /// A handle on the node closed.
    pub fn closed(&self) {
        self.opens.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Inode {
    fn drop(&mut self) {
        if self.fd.get_mut().is_some() {
            self.fds.paths.removed();
        }
        if self.cached.get_mut().is_some() {
            self.fds.files.removed();
        }
    }
}

/// Opens `name` in `parent` as a node's descriptor.
fn open_named(parent: &Inode, name: &OsStr) -> Result<OwnedFd, Errno> {
    let pfd = parent.fd()?;
    fcntl::openat(
        &*pfd,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(nix_errno)
}

/// The paths CLOCK's question: a node's `O_PATH` descriptor closes unless
/// it was used since the last pass, is in use now, or is pinned.
fn release_path(node: &Inode) -> Release {
    if matches!(*node.place.lock(), Place::Pinned) {
        return Release::Leave;
    }
    if second_chance(&node.path_used) {
        return Release::Keep;
    }
    let mut slot = node.fd.lock();
    match &*slot {
        None => Release::Gone,
        Some(fd) if Arc::strong_count(fd) > 1 => Release::Keep,
        Some(_) => {
            let fd = slot.take();
            drop(slot);
            drop(fd);
            Release::Released
        }
    }
}

/// The files CLOCK's question: a node's cached file closes (written back,
/// an unlinked one's data dropped) unless a handle has it open or it was
/// used since the last pass.
fn release_file(node: &Inode) -> Release {
    if node.opens.load(Ordering::Relaxed) > 0 || second_chance(&node.file_used) {
        return Release::Keep;
    }
    node.discard_if_unlinked();
    let f = node.cached.lock().take();
    match f {
        None => Release::Gone,
        Some(f) => {
            drop(f);
            Release::Released
        }
    }
}

struct Entry {
    inode: Arc<Inode>,
    /// Lookups the kernel holds (entry replies less forgets).
    nlookup: u64,
}

#[derive(Default)]
struct Tables {
    by_id: HashMap<u64, Entry>,
    by_key: HashMap<(u64, u64), u64>,
    next: u64,
}

/// FUSE node ids to backing inodes, with the kernel's lookup counts.
pub struct InodeTable {
    tables: Mutex<Tables>,
    fds: Arc<Fds>,
}

impl InodeTable {
    /// A table holding only the root, `root` a descriptor of the backing
    /// directory, the nodes' descriptors within `fds`' budgets.
    pub(crate) fn new(root: OwnedFd, key: (u64, u64), fds: Arc<Fds>) -> InodeTable {
        let mut t = Tables {
            next: ROOT + 1,
            ..Tables::default()
        };
        t.by_key.insert(key, ROOT);
        t.by_id.insert(
            ROOT,
            Entry {
                inode: Inode::new(root, Place::Pinned, key, FileType::Directory, &fds),
                // The root is never forgotten.
                nlookup: 1 << 62,
            },
        );
        InodeTable {
            tables: Mutex::new(t),
            fds,
        }
    }

    /// The node `id`, if the kernel knows it.
    pub fn get(&self, id: u64) -> Option<Arc<Inode>> {
        self.tables.lock().by_id.get(&id).map(|e| e.inode.clone())
    }

    /// The node of backing inode `key`, found as `name` in `parent`, made
    /// from `fd` unless it exists (`fd` is then dropped), its lookup count
    /// raised by one: what an entry reply does.
    pub fn insert(
        &self,
        fd: OwnedFd,
        key: (u64, u64),
        kind: FileType,
        (parent, name): (&Arc<Inode>, &OsStr),
    ) -> (u64, Arc<Inode>) {
        let mut t = self.tables.lock();
        if let Some(&id) = t.by_key.get(&key) {
            if let Some(e) = t.by_id.get_mut(&id) {
                e.nlookup += 1;
                return (id, e.inode.clone());
            }
        }
        let id = t.next;
        t.next += 1;
        let place = Place::Named {
            parent: parent.clone(),
            name: name.to_os_string(),
        };
        let inode = Inode::new(fd, place, key, kind, &self.fds);
        t.by_key.insert(key, id);
        t.by_id.insert(
            id,
            Entry {
                inode: inode.clone(),
                nlookup: 1,
            },
        );
        (id, inode)
    }

    /// The kernel forgets `n` lookups of `id`; at none the node goes (and
    /// with it the cache's handle on the file, whose drop writes its dirty
    /// data back once no open handle is left; an unlinked file's is
    /// dropped instead: [`Inode::discard_if_unlinked`]).
    pub fn forget(&self, id: u64, n: u64) {
        let gone = {
            let mut t = self.tables.lock();
            let Some(e) = t.by_id.get_mut(&id) else {
                return;
            };
            e.nlookup = e.nlookup.saturating_sub(n);
            if e.nlookup > 0 || id == ROOT {
                return;
            }
            let e = t.by_id.remove(&id);
            if let Some(e) = &e {
                if t.by_key.get(&e.inode.key) == Some(&id) {
                    t.by_key.remove(&e.inode.key);
                }
            }
            e
        };
        // Dropped with no table lock held: a last handle's drop writes back
        // (an unlinked file's data goes unwritten: no one can read it).
        if let Some(e) = &gone {
            e.inode.discard_if_unlinked();
        }
        drop(gone);
    }

    /// The node id of backing inode `key`, if the kernel knows it.
    pub fn id_of(&self, key: (u64, u64)) -> Option<u64> {
        self.tables.lock().by_key.get(&key).copied()
    }

    /// The node of backing inode `key`, if the kernel knows it.
    pub fn by_key(&self, key: (u64, u64)) -> Option<Arc<Inode>> {
        let t = self.tables.lock();
        let id = t.by_key.get(&key)?;
        t.by_id.get(id).map(|e| e.inode.clone())
    }

    /// Every node now (for shutdown and statistics).
    pub fn all(&self) -> Vec<Arc<Inode>> {
        self.tables
            .lock()
            .by_id
            .values()
            .map(|e| e.inode.clone())
            .collect()
    }

    /// Drops the cache handles of every node (at unmount, after a sync).
    pub fn drop_cached(&self) {
        for inode in self.all() {
            inode.drop_cached();
        }
    }

    /// The descriptors held now and the budgets: (`O_PATH` held, budget,
    /// cached files held, budget).
    pub fn descriptors(&self) -> (usize, usize, usize, usize) {
        let (p, f) = (&self.fds.paths, &self.fds.files);
        (p.held(), p.budget(), f.held(), f.budget())
    }
}
