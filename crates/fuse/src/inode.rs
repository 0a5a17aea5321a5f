//! The inode table: FUSE node ids to backing inodes.
//!
//! Each node the kernel knows (it was named in an entry reply and not yet
//! forgotten) holds an `O_PATH | O_NOFOLLOW` descriptor of its backing
//! inode, found by `openat` of one name relative to its parent's
//! descriptor. Every later operation starts from that descriptor, never
//! from a path string, so:
//! - rename and unlink need no table update: a descriptor follows its
//!   inode wherever it is moved, and an unlinked file open through the
//!   mount stays readable and writable, as on a local filesystem;
//! - nothing outside the backing directory is reachable: a name is one
//!   component (never `.`, `..` or one with a `/`), opened with
//!   `O_NOFOLLOW` below a directory already inside the tree, so a symlink
//!   is never followed by the server (the kernel follows it on the
//!   client's side, by reading its text);
//! - hard links are one node: nodes are found by (device, inode).
//!
//! A regular file's node also keeps the cache [`File`] of its first open
//! until the kernel forgets the node, so its cached folios outlive one
//! open/close (as the kernel keeps a page cache per inode, not per open
//! file), and its size comes from the cache while dirty data may extend it.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use foliocache::File;
use fuser::FileType;
use parking_lot::Mutex;

/// The FUSE node id of the mount's root.
pub const ROOT: u64 = 1;

/// A backing inode the kernel knows.
pub struct Inode {
    /// `O_PATH | O_NOFOLLOW` descriptor of the backing inode.
    pub fd: OwnedFd,
    /// Its (device, inode) in the backing.
    pub key: (u64, u64),
    /// Its type (fixed for an inode's life).
    pub kind: FileType,
    /// The cache's handle on a regular file once it has been opened: kept
    /// until the node is forgotten (see the module doc).
    pub cached: Mutex<Option<File>>,
    /// When the file was last written through the mount (nanoseconds since
    /// the epoch; 0: not since its times were last set): its data may
    /// still be dirty in the cache, the backing's mtime not yet moved, so
    /// the attributes report this instead while it is later.
    pub written: AtomicU64,
}

impl Inode {
    /// `/proc/self/fd/N` of the node's descriptor: opening it reopens the
    /// very inode (no path lookup through the backing tree).
    pub fn proc_path(&self) -> String {
        format!("/proc/self/fd/{}", self.fd.as_raw_fd())
    }

    /// Drops the cache's data of a regular file whose backing inode has
    /// no name left (unlinked, or replaced by a rename), dirty data
    /// unwritten: once its last open has closed no one can read it again,
    /// so writing it back would only cost IO (and, were the writeback to
    /// fail, an unmount's error). The kernel does the same at an unlinked
    /// inode's `evict` (`truncate_inode_pages_final`). A name made for it
    /// meanwhile (`linkat` of an `O_TMPFILE`, say) keeps it.
    pub fn discard_if_unlinked(&self) {
        let cached = self.cached.lock();
        let Some(file) = cached.as_ref() else {
            return;
        };
        match nix::sys::stat::fstat(&self.fd) {
            Ok(st) if st.st_nlink == 0 => {
                if let Err(e) = file.discard() {
                    log::warn!("foliocache-fuse: dropping an unlinked file's data: {e}");
                }
            }
            _ => {}
        }
    }

    /// The size the cache holds for the file, if it has it open.
    pub fn cached_len(&self) -> Option<u64> {
        self.cached.lock().as_ref().map(|f| f.len())
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
}

impl InodeTable {
    /// A table holding only the root, `root` a descriptor of the backing
    /// directory.
    pub fn new(root: OwnedFd, key: (u64, u64)) -> InodeTable {
        let mut t = Tables {
            next: ROOT + 1,
            ..Tables::default()
        };
        t.by_key.insert(key, ROOT);
        t.by_id.insert(
            ROOT,
            Entry {
                inode: Arc::new(Inode {
                    fd: root,
                    key,
                    kind: FileType::Directory,
                    cached: Mutex::new(None),
                    written: AtomicU64::new(0),
                }),
                // The root is never forgotten.
                nlookup: 1 << 62,
            },
        );
        InodeTable {
            tables: Mutex::new(t),
        }
    }

    /// The node `id`, if the kernel knows it.
    pub fn get(&self, id: u64) -> Option<Arc<Inode>> {
        self.tables.lock().by_id.get(&id).map(|e| e.inode.clone())
    }

    /// The node of backing inode `key`, found or made from `fd` (dropped
    /// if the node exists), its lookup count raised by one: what an entry
    /// reply does.
    pub fn insert(&self, fd: OwnedFd, key: (u64, u64), kind: FileType) -> (u64, Arc<Inode>) {
        let mut t = self.tables.lock();
        if let Some(&id) = t.by_key.get(&key) {
            if let Some(e) = t.by_id.get_mut(&id) {
                e.nlookup += 1;
                return (id, e.inode.clone());
            }
        }
        let id = t.next;
        t.next += 1;
        let inode = Arc::new(Inode {
            fd,
            key,
            kind,
            cached: Mutex::new(None),
            written: AtomicU64::new(0),
        });
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
            let f = inode.cached.lock().take();
            drop(f);
        }
    }
}
