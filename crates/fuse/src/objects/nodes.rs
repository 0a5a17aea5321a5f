//! The nodes the kernel knows ([`Nodes`]): a directory is a prefix, a
//! file's node one version of its object; looked up from a parent's
//! listing while fresh, else from the store (a listing page and a HEAD at
//! once), and forgotten as the kernel forgets them.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Instant;

use fuser::{Errno, FileAttr};
use futures_util::StreamExt;
use object_store::path::{Path, PathPart};
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use super::listing::{is_file_name, Listing};
use super::{store_errno, Entry, ObjectFs};

/// Whether `a` and `b` are one version of an object (an object's node
/// is one version: `ObjectFs::remember`): the same size and e_tag, or
/// without e_tags the same time. Where both have an e_tag the times are
/// not compared: S3 gives a listing's to the millisecond and a HEAD's to
/// the second.
fn same_version(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    a.size == b.size
        && match (&a.e_tag, &b.e_tag) {
            (Some(x), Some(y)) => x == y,
            (None, None) => a.last_modified == b.last_modified,
            _ => false,
        }
}

/// A node the kernel knows.
pub(super) struct Node {
    /// Its key (a directory's: the prefix).
    pub(super) key: Path,
    /// Its parent's node id and its name there (the root's: itself, "").
    pub(super) parent: u64,
    pub(super) name: String,
    pub(super) entry: Entry,
    /// The kernel's lookups of it not yet forgotten.
    pub(super) lookups: u64,
    /// A directory's listing and when it was made.
    pub(super) listing: Option<(Instant, Arc<Listing>)>,
}

/// The nodes the kernel knows, by id and by (parent, name).
pub(super) struct Nodes {
    pub(super) by_ino: HashMap<u64, Node>,
    pub(super) by_name: HashMap<(u64, String), u64>,
    pub(super) next: u64,
}

impl ObjectFs {
    /// Whether something found at `at` is still to be trusted.
    pub(super) fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.ttl
    }

    /// What `key` is in the store: a directory if any key extends it (one
    /// page of a listing), else the object's HEAD (through the cache,
    /// which then tracks that version); both asked at once.
    pub(super) fn probe(&self, key: &Path) -> Result<Entry, Errno> {
        let (under, head) = self.runtime.block_on(async {
            let mut list = self.store.list(Some(key));
            futures_util::join!(list.next(), self.store.head(key))
        });
        match (under, head) {
            // A key under it, even one the store cannot read as a path.
            (Some(Ok(_) | Err(object_store::Error::InvalidPath { .. })), _) => Ok(Entry::Dir),
            (_, Ok(meta)) => Ok(Entry::File(meta)),
            (Some(Err(e)), _) => Err(store_errno("listing", key, &e)),
            (None, Err(object_store::Error::NotFound { .. })) => Err(Errno::ENOENT),
            (None, Err(e)) => Err(store_errno("HEAD", key, &e)),
        }
    }

    /// The entry `name` of directory `parent`: from the parent's listing
    /// while fresh, else from the store. Counts a lookup of its node.
    pub(super) fn lookup_entry(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let name = name
            .to_str()
            .filter(|n| is_file_name(n))
            .ok_or(Errno::ENOENT)?;
        let (key, listed) = {
            let nodes = self.nodes.lock();
            let dir = nodes.by_ino.get(&parent).ok_or(Errno::ENOENT)?;
            if !matches!(dir.entry, Entry::Dir) {
                return Err(Errno::ENOTDIR);
            }
            let listed = match &dir.listing {
                Some((at, l)) if self.fresh(*at) => Some(l.get(name).cloned()),
                _ => None,
            };
            let part = PathPart::parse(name).map_err(|_| Errno::ENOENT)?;
            (dir.key.clone().join(part), listed)
        };
        let entry = match listed {
            Some(found) => found.ok_or(Errno::ENOENT)?,
            None => self.probe(&key)?,
        };
        Ok(self.remember(parent, name, key, entry))
    }

    /// Records the node `name` of `parent` as `entry` and counts a lookup
    /// of it; its attributes. A file's node is one version of its object:
    /// a new version (or a change of kind) is a new node, so the kernel
    /// drops the old one's dentry (`fuse_dentry_revalidate` sees another
    /// node id) and the pages it keeps of a node
    /// ([`ObjectOptions::kernel_cache`]) are never of two versions; a file
    /// open on the old node keeps reading that version.
    pub(super) fn remember(&self, parent: u64, name: &str, key: Path, entry: Entry) -> FileAttr {
        let mut nodes = self.nodes.lock();
        let nodes = &mut *nodes;
        let known = nodes.by_name.get(&(parent, name.to_owned())).copied();
        let same = |n: &Node| match (&n.entry, &entry) {
            (Entry::Dir, Entry::Dir) => true,
            (Entry::File(a), Entry::File(b)) => same_version(a, b),
            _ => false,
        };
        let ino = match known.filter(|i| nodes.by_ino.get(i).is_some_and(same)) {
            Some(ino) => ino,
            None => {
                let ino = nodes.next;
                nodes.next += 1;
                nodes.by_ino.insert(
                    ino,
                    Node {
                        key,
                        parent,
                        name: name.to_owned(),
                        entry: entry.clone(),
                        lookups: 0,
                        listing: None,
                    },
                );
                nodes.by_name.insert((parent, name.to_owned()), ino);
                ino
            }
        };
        let node = nodes.by_ino.get_mut(&ino).expect("just found or made");
        node.lookups += 1;
        self.attr(ino, &node.entry)
    }

    /// Node `ino`'s entry: a directory, or the one version of an object
    /// it is ([`remember`](Self::remember)). A path's new version is found
    /// by the kernel's lookup once the entry's time-to-live has passed.
    pub(super) fn current(&self, ino: u64) -> Result<Entry, Errno> {
        let nodes = self.nodes.lock();
        let node = nodes.by_ino.get(&ino).ok_or(Errno::ENOENT)?;
        Ok(node.entry.clone())
    }
}
