//! [`ObjectFs`]: the objects of an object store (S3, a local directory
//! through object_store's `LocalFileSystem`, any `ObjectStore`) as a
//! read-only tree, their bytes served through a foliocache page cache
//! (`foliocache_object_store::CachedStore`, optionally with its disk
//! tier), as `mountpoint-s3` serves a bucket.
//!
//! Names: a key's `/`-separated parts are the tree's names under the
//! mount's prefix: an object is a file, a prefix that others extend a
//! directory; where a key is both (an object `a` beside objects `a/b`),
//! the directory shadows the file, as in mountpoint-s3. Parts that are
//! not valid file names (empty, `.`, `..`, a control character, longer
//! than 255 bytes) are not shown: counted (the control file's
//! `names_skipped`) and said once in the log. object_store's
//! `LocalFileSystem` (`file://`) fails a whole directory's listing on one
//! such name: that directory is then listed from the keys under it
//! (`list_skipping`); it also hides files named `NAME#DIGITS`
//! (its own uploads in progress), which S3 serves.
//!
//! What a read returns: a file's node is one version of its object (its
//! e_tag, time and size, found by a listing or a HEAD at most a
//! time-to-live old): a new version found by a later lookup is a new
//! node. Every read of an open file is a ranged GET pinned to its
//! node's version (`If-Match`), served from the cache when the cache
//! holds it: one open file never mixes two versions. A file whose object
//! was replaced or deleted since its open fails its next read that
//! reaches the store with `ESTALE`; a new open sees the new version.
//! Metadata (entries, attributes, directory listings) is trusted for the
//! time-to-live ([`ObjectOptions::ttl`]), as the kernel keeps entries and
//! attributes for it: a change made by others is seen at most that long
//! after.
//!
//! The kernel's page cache ([`ObjectOptions::kernel_cache`], on by
//! default): files are opened with `FOPEN_KEEP_CACHE`, so the kernel
//! keeps a node's pages across opens and a warm re-read never reaches
//! the server; a node's pages are of its one version, so they never go
//! stale (a new version is a new node, with pages of its own). Those
//! pages are outside the cache's capacity, reclaimed by the kernel as
//! any file's (and charged to the reading process's memory cgroup). Off,
//! files are opened with `FOPEN_DIRECT_IO`: the cache (and its disk
//! tier) keeps the one copy. Writes of every kind are refused (`EROFS`:
//! the mount is read-only). The control file ([`crate::control`])
//! answers `foliocache stat` with the cache's figures and the store's.
//!
//! Locking: the node table and the handle table are each behind a
//! `parking_lot` mutex held for a table operation only, never across a
//! request to the store; the store's own locks are its (see
//! `foliocache_object_store`). The requests run on a tokio runtime of
//! the file system's own: each FUSE thread blocks on its request.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use foliocache::Cache;
use foliocache_object_store::{CachedStore, DiskTier};
use fuser::{
    BackgroundSession, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, MountOption, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request, Session,
};
use futures_util::StreamExt;
use object_store::path::{Path, PathPart};
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;

use crate::control::{self, CONTROL_INO, CONTROL_NAME};
use crate::MountOptions;

/// The root's node id (FUSE's).
const ROOT: u64 = 1;

/// The largest read the kernel is asked to send at once.
const MAX_IO: u32 = 1 << 20;

/// The store the tree is read from.
type Store = CachedStore<Arc<dyn ObjectStore>>;

/// How an [`ObjectFs`] serves its store.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ObjectOptions {
    /// How long metadata is trusted: the kernel's entries and attributes,
    /// a directory's listing, an object's version (its HEAD). A change
    /// made by others is seen at most this long after. Zero: every
    /// lookup, open and listing asks the store.
    pub ttl: Duration,
    /// The cache's disk tier (`None`: memory only).
    pub disk_tier: Option<Arc<DiskTier>>,
    /// Threads of the runtime the store's requests run on (at least 1).
    pub runtime_threads: usize,
    /// Whether the kernel keeps the files' pages across opens
    /// (`FOPEN_KEEP_CACHE`; a node is one version of its object, so its
    /// pages never go stale): a warm re-read is a page-cache hit that never
    /// reaches the server. The pages are the kernel's, outside the cache's
    /// capacity, reclaimed as any file's are. Off: every read is a request
    /// to the server (`FOPEN_DIRECT_IO`), the cache keeping the one copy.
    pub kernel_cache: bool,
}

impl Default for ObjectOptions {
    /// A one-second time-to-live, no disk tier, two runtime threads, the
    /// kernel's page cache kept across opens.
    fn default() -> ObjectOptions {
        ObjectOptions {
            ttl: Duration::from_secs(1),
            disk_tier: None,
            runtime_threads: 2,
            kernel_cache: true,
        }
    }
}

/// What a name is: a directory (a prefix) or a file (an object).
#[derive(Clone, Debug)]
enum Entry {
    Dir,
    File(ObjectMeta),
}

/// A directory's listing: its entries by name, sorted.
#[derive(Debug, Default)]
struct Listing {
    entries: Vec<(String, Entry)>,
    /// Names left out as not file names.
    skipped: u64,
}

impl Listing {
    /// The listing of a store's answer for the prefix `dir`: directories
    /// shadow objects of the same name; names that are not file names
    /// and the prefix's own marker object are left out.
    fn new(dir: &Path, found: object_store::ListResult) -> Listing {
        let mut entries: Vec<(String, Entry)> = Vec::new();
        let mut skipped = 0;
        let mut named = |p: &Path| {
            let n = p.filename().filter(|n| is_file_name(n)).map(str::to_owned);
            skipped += u64::from(n.is_none());
            n
        };
        for p in &found.common_prefixes {
            if let Some(n) = named(p) {
                entries.push((n, Entry::Dir));
            }
        }
        let dirs: std::collections::HashSet<String> =
            entries.iter().map(|(n, _)| n.clone()).collect();
        for meta in found.objects {
            if meta.location == *dir {
                continue;
            }
            if let Some(n) = named(&meta.location).filter(|n| !dirs.contains(n)) {
                entries.push((n, Entry::File(meta)));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        Listing { entries, skipped }
    }

    fn get(&self, name: &str) -> Option<&Entry> {
        let i = self
            .entries
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&self.entries[i].1)
    }
}

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

/// Whether `name` is shown as a file name: a valid key part (no `/`, no
/// control character, not `.` or `..`), not empty, and no longer than a
/// file name may be (`NAME_MAX`, 255 bytes; an S3 key part may be longer).
fn is_file_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && PathPart::parse(name).is_ok()
}

/// A node the kernel knows.
struct Node {
    /// Its key (a directory's: the prefix).
    key: Path,
    /// Its parent's node id and its name there (the root's: itself, "").
    parent: u64,
    name: String,
    entry: Entry,
    /// The kernel's lookups of it not yet forgotten.
    lookups: u64,
    /// A directory's listing and when it was made.
    listing: Option<(Instant, Arc<Listing>)>,
}

/// The nodes the kernel knows, by id and by (parent, name).
struct Nodes {
    by_ino: HashMap<u64, Node>,
    by_name: HashMap<(u64, String), u64>,
    next: u64,
}

/// An open file, directory or control file.
enum Open {
    /// The object's key and the version opened (shared with each read).
    File(Arc<(Path, ObjectMeta)>),
    Dir {
        ino: u64,
        parent: u64,
        listing: Arc<Listing>,
    },
    Control(Arc<Mutex<control::Session>>),
}

/// The open handles by number.
struct Handles {
    open: HashMap<u64, Open>,
    next: u64,
}

/// An object store's tree, read-only, served through a foliocache cache.
/// See the module documentation.
pub struct ObjectFs {
    store: Arc<Store>,
    runtime: tokio::runtime::Runtime,
    nodes: Mutex<Nodes>,
    handles: Mutex<Handles>,
    ttl: Duration,
    owner: (u32, u32),
    /// When the tree was made: its directories' times (a prefix has none
    /// of its own).
    made: SystemTime,
    /// The URL served (the control file's answer names it).
    source: String,
    /// Whether the kernel maps the files shared (`FUSE_DIRECT_IO_ALLOW_MMAP`).
    shared_mmap: AtomicBool,
    /// Files opened with `FOPEN_KEEP_CACHE` ([`ObjectOptions::kernel_cache`]).
    kernel_cache: bool,
    /// Read requests the kernel sent for objects' bytes.
    read_requests: AtomicU64,
    /// Names not shown (not file names) in the listings made, and whether
    /// the log said so yet (once a mount).
    names_skipped: AtomicU64,
    said_skipped: AtomicBool,
}

impl ObjectFs {
    /// The tree of `inner`'s keys under `prefix` (empty: the whole
    /// store), its objects' bytes cached in `cache` (and the disk tier
    /// `opts` names), with `opts`'s time-to-live. Files and directories
    /// belong to the calling process's user and group.
    ///
    /// # Errors
    /// Starting the runtime's threads.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        prefix: Path,
        cache: Cache,
        opts: &ObjectOptions,
    ) -> io::Result<ObjectFs> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.runtime_threads.max(1))
            .thread_name("foliocache-objects")
            .enable_all()
            .build()?;
        let mut b = CachedStore::builder(inner, cache).revalidate_after(opts.ttl);
        if let Some(tier) = &opts.disk_tier {
            b = b.disk_tier(tier.clone());
        }
        let root = Node {
            key: prefix,
            parent: ROOT,
            name: String::new(),
            entry: Entry::Dir,
            lookups: 1,
            listing: None,
        };
        Ok(ObjectFs {
            store: Arc::new(b.build()),
            runtime,
            nodes: Mutex::new(Nodes {
                by_ino: HashMap::from([(ROOT, root)]),
                by_name: HashMap::new(),
                next: ROOT + 1,
            }),
            handles: Mutex::new(Handles {
                open: HashMap::new(),
                next: 1,
            }),
            ttl: opts.ttl,
            owner: (
                nix::unistd::getuid().as_raw(),
                nix::unistd::getgid().as_raw(),
            ),
            made: SystemTime::now(),
            source: String::new(),
            shared_mmap: AtomicBool::new(false),
            kernel_cache: opts.kernel_cache,
            read_requests: AtomicU64::new(0),
            names_skipped: AtomicU64::new(0),
            said_skipped: AtomicBool::new(false),
        })
    }

    /// The tree under the store and prefix `url` names, configured by
    /// `options` (see [`store_for_url`]), checked reachable (one listing
    /// of the prefix), as [`new`](Self::new) makes it.
    ///
    /// # Errors
    /// [`store_for_url`]'s; the listing's (no such bucket, no
    /// credentials, the store unreachable); [`new`](Self::new)'s.
    pub fn for_url(
        url: &str,
        options: impl IntoIterator<Item = (String, String)>,
        cache: Cache,
        opts: &ObjectOptions,
    ) -> io::Result<ObjectFs> {
        let (inner, prefix) = store_for_url(url, options)?;
        let mut fs = ObjectFs::new(inner, prefix, cache, opts)?;
        fs.source = url.to_owned();
        let root = fs.nodes.lock().by_ino[&ROOT].key.clone();
        let prefix = (!root.as_ref().is_empty()).then_some(&root);
        fs.runtime
            .block_on(fs.store.list_with_delimiter(prefix))
            .map_err(|e| io::Error::other(format!("listing {url}: {e}")))?;
        Ok(fs)
    }

    /// The cached store the tree is read through (its figures:
    /// [`CachedStore::stats`], [`CachedStore::register_metrics`]), kept
    /// by the caller past a mount that takes the file system.
    pub fn store(&self) -> &Arc<CachedStore<Arc<dyn ObjectStore>>> {
        &self.store
    }

    /// The attributes of node `ino` whose entry is `entry`.
    fn attr(&self, ino: u64, entry: &Entry) -> FileAttr {
        let (kind, perm, size, time) = match entry {
            Entry::Dir => (FileType::Directory, 0o555, 0, self.made),
            Entry::File(m) => (
                FileType::RegularFile,
                0o444,
                m.size,
                SystemTime::from(m.last_modified),
            ),
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.owner.0,
            gid: self.owner.1,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Whether something found at `at` is still to be trusted.
    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.ttl
    }

    /// What `key` is in the store: a directory if any key extends it (one
    /// page of a listing), else the object's HEAD (through the cache,
    /// which then tracks that version); both asked at once.
    fn probe(&self, key: &Path) -> Result<Entry, Errno> {
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

    /// Directory `ino`'s listing: its own if fresh, else the store's.
    fn listing(&self, ino: u64) -> Result<Arc<Listing>, Errno> {
        let key = {
            let nodes = self.nodes.lock();
            let node = nodes.by_ino.get(&ino).ok_or(Errno::ENOENT)?;
            if !matches!(node.entry, Entry::Dir) {
                return Err(Errno::ENOTDIR);
            }
            if let Some((at, l)) = &node.listing {
                if self.fresh(*at) {
                    return Ok(l.clone());
                }
            }
            node.key.clone()
        };
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let (found, unparsed) = self
            .runtime
            .block_on(async {
                match self.store.list_with_delimiter(prefix).await {
                    Err(object_store::Error::InvalidPath { .. }) => self.list_skipping(&key).await,
                    r => r.map(|found| (found, 0)),
                }
            })
            .map_err(|e| store_errno("listing", &key, &e))?;
        let mut listing = Listing::new(&key, found);
        listing.skipped += unparsed;
        self.count_skipped(&key, listing.skipped);
        let listing = Arc::new(listing);
        if let Some(node) = self.nodes.lock().by_ino.get_mut(&ino) {
            node.listing = Some((Instant::now(), listing.clone()));
        }
        Ok(listing)
    }

    /// The listing of directory `dir` from the store's listing of every
    /// key under it, the keys the store could not read as paths left out
    /// (how many: the second figure), for a directory whose listing failed
    /// on one: object_store's `LocalFileSystem` fails a whole directory's
    /// listing for one name with a control character (or not UTF-8). It
    /// walks the whole subtree; an empty directory has no key, so is not
    /// shown.
    async fn list_skipping(
        &self,
        dir: &Path,
    ) -> object_store::Result<(object_store::ListResult, u64)> {
        let prefix = (!dir.as_ref().is_empty()).then_some(dir);
        let mut keys = self.store.list(prefix);
        let mut found = object_store::ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        let mut dirs = std::collections::BTreeSet::new();
        let mut unparsed = 0;
        while let Some(key) = keys.next().await {
            let meta = match key {
                Ok(meta) => meta,
                Err(object_store::Error::InvalidPath { .. }) => {
                    unparsed += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Some(mut parts) = meta.location.prefix_match(dir) else {
                continue;
            };
            let under = match (parts.next(), parts.next()) {
                (Some(first), Some(_)) => Some(dir.clone().join(first)),
                (Some(_), None) => None,
                (None, _) => continue,
            };
            drop(parts);
            match under {
                Some(sub) => {
                    dirs.insert(sub);
                }
                None => found.objects.push(meta),
            }
        }
        found.common_prefixes = dirs.into_iter().collect();
        Ok((found, unparsed))
    }

    /// Counts `skipped` names left out of `dir`'s listing; the first time
    /// any are, the log says so (once a mount: a listing is made again at
    /// each time-to-live).
    fn count_skipped(&self, dir: &Path, skipped: u64) {
        if skipped == 0 {
            return;
        }
        self.names_skipped.fetch_add(skipped, Ordering::Relaxed);
        if !self.said_skipped.swap(true, Ordering::Relaxed) {
            log::warn!(
                "foliocache-fuse: {skipped} keys under `{dir}` are not file names (a control \
                 character, `.`, `..`, longer than 255 bytes, or not UTF-8): not shown; \
                 `foliocache stat` counts them (said once)"
            );
        }
    }

    /// The entry `name` of directory `parent`: from the parent's listing
    /// while fresh, else from the store. Counts a lookup of its node.
    fn lookup_entry(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
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
    fn remember(&self, parent: u64, name: &str, key: Path, entry: Entry) -> FileAttr {
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
    fn current(&self, ino: u64) -> Result<Entry, Errno> {
        let nodes = self.nodes.lock();
        let node = nodes.by_ino.get(&ino).ok_or(Errno::ENOENT)?;
        Ok(node.entry.clone())
    }

    /// `range` of the version `meta` names of object `key`.
    fn read_range(
        &self,
        key: &Path,
        meta: &ObjectMeta,
        range: Range<u64>,
    ) -> Result<bytes::Bytes, Errno> {
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: meta.e_tag.clone(),
            ..GetOptions::default()
        };
        let got = self.runtime.block_on(async {
            let found = self.store.get_opts(key, opts).await?;
            found.bytes().await
        });
        match got {
            // One piece (a read is at most MAX_IO, a stream's pieces up to
            // 4 MiB): the bytes copied out of the cache, not again.
            Ok(b) => Ok(b),
            // The version opened is gone: the open file is stale.
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::NotModified { .. }
                | object_store::Error::NotFound { .. },
            ) => Err(Errno::ESTALE),
            Err(e) => Err(store_errno("GET", key, &e)),
        }
    }

    /// What the control file answers (`foliocache stat`): the cache's
    /// figures as a directory mount's, the store's, and for each path
    /// asked an error (no per-file figures here).
    fn stats_json(&self, paths: &[String]) -> serde_json::Value {
        let mut v = control::own_cache_json(self.store.cache());
        let s = self.store.stats();
        let tier = self.store.disk_tier().map(|t| t.stats());
        v["object_store"] = serde_json::json!({
            "url": self.source,
            "hits": s.hits,
            "misses": s.misses,
            "remote_gets": s.remote_gets,
            "remote_get_bytes": s.remote_get_bytes,
            "remote_get_errors": s.remote_get_errors,
            "remote_heads": s.remote_heads,
            "stale_versions": s.stale_versions,
            "objects": s.objects,
            "read_requests": self.read_requests.load(Ordering::Relaxed),
            "kernel_cache": self.kernel_cache,
            "names_skipped": self.names_skipped.load(Ordering::Relaxed),
            "disk_tier": tier.map(|t| serde_json::json!({
                "hits": t.hits,
                "misses": t.misses,
                "writes": t.writes,
                "corrupt": t.corrupt,
                "slots": t.slots,
            })),
        });
        v["dontcache"] = false.into();
        v["shared_mmap"] = self.shared_mmap.load(Ordering::Relaxed).into();
        v["files"] = paths
            .iter()
            .map(|p| serde_json::json!({ "path": p, "error": "no per-file figures on an object store's mount" }))
            .collect::<Vec<_>>()
            .into();
        v
    }

    fn add_handle(&self, open: Open) -> FileHandle {
        let mut h = self.handles.lock();
        let fh = h.next;
        h.next += 1;
        h.open.insert(fh, open);
        FileHandle(fh)
    }
}

/// The store and the prefix in it that `url` names, as object_store's
/// `parse_url_opts` reads it: `file:///DIR` (a local directory, through
/// `LocalFileSystem`), `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`,
/// `az://CONTAINER/PREFIX` (and the `https://` forms object_store knows
/// for them), configured by `options`, the keys object_store's builders
/// read, in any case (`aws_access_key_id`, `aws_secret_access_key`,
/// `aws_region`, `aws_endpoint`, `aws_allow_http`,
/// `google_service_account`, `azure_storage_account_name`, ...; others
/// are ignored): as `foliocache mount` passes them, the `AWS_*`,
/// `GOOGLE_*` and `AZURE_*` environment variables and the AWS profile's
/// files.
///
/// # Errors
/// `InvalidInput`: not a URL, a scheme this build does not read (and
/// `memory://`, which would mount an empty store of this process's own),
/// a `file://` path that is not a directory, the store's configuration
/// error.
pub fn store_for_url(
    url: &str,
    options: impl IntoIterator<Item = (String, String)>,
) -> io::Result<(Arc<dyn ObjectStore>, Path)> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: not a URL: {e}")))?;
    if parsed.scheme() == "memory" {
        return Err(invalid(format!(
            "{url}: a memory:// store lives inside this process and starts empty: there is \
             nothing to mount (file:///DIR, s3://BUCKET, gs://BUCKET and az://CONTAINER are)"
        )));
    }
    if parsed.scheme() == "file" {
        let dir = parsed
            .to_file_path()
            .map_err(|()| invalid(format!("{url}: not a local path")))?;
        if !dir.is_dir() {
            return Err(invalid(format!(
                "{url}: {} is not a directory",
                dir.display()
            )));
        }
    }
    let (store, prefix) = object_store::parse_url_opts(&parsed, options)
        .map_err(|e| invalid(format!("{url}: {e}")))?;
    Ok((Arc::from(store), prefix))
}

/// fuser's configuration for a mount of `url` with `opts`: `opts`'s
/// ([`MountOptions::fuser_config`]), read-only.
fn config(opts: &MountOptions, url: &str) -> io::Result<fuser::Config> {
    let own = [
        (opts.cache_name.is_some(), "a named cache"),
        (opts.dontcache, "dontcache"),
        (opts.state.is_some(), "a state file (warm restarts)"),
    ];
    if let Some((_, what)) = own.iter().find(|(set, _)| *set) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: not for a mount of an object store ({url})"),
        ));
    }
    let mut c = opts.config_named(url);
    c.mount_options.push(MountOption::RO);
    Ok(c)
}

/// Mounts the object store `url` names (configured by the environment
/// and the AWS profile's files: [`store_for_url`]) at `mountpoint`, read-only,
/// through a cache `opts` sizes (its `capacity`, `max_folio`; its
/// `metrics` served with the store's figures) and `objects`'s
/// time-to-live and disk tier, and serves it in this thread until it is
/// unmounted or the process gets SIGINT, SIGTERM or SIGHUP (as
/// [`serve`](crate::serve)). `ready` is called once the mount is up.
///
/// # Errors
/// [`ObjectFs::for_url`]'s; `InvalidInput` for `opts` asking for a
/// named cache, `dontcache` or a state file; the mount's; the metrics
/// server's.
pub fn serve_objects(
    url: &str,
    mountpoint: &std::path::Path,
    opts: &MountOptions,
    objects: &ObjectOptions,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let signals = crate::block_unmount_signals()?;
    let m = crate::check_mountpoint(mountpoint)?;
    let config = config(opts, url)?;
    let env = crate::cloud_env::store_options();
    let fs = ObjectFs::for_url(url, env, opts.build_cache()?, objects)?;
    // Served until this returns (the mount ended).
    let _metrics = match opts.metrics {
        Some(addr) => {
            let mut registry = prometheus_client::registry::Registry::default();
            foliocache::metrics::register(fs.store.cache(), &mut registry);
            fs.store.register_metrics(&mut registry);
            Some(foliocache::metrics::serve(addr, registry)?)
        }
        None => None,
    };
    let session = Session::new(fs, &m, &config)?;
    crate::run_until_unmounted(session, &m, signals, ready)
}

/// Mounts `fs` at `mountpoint` read-only with `opts`'s threads and
/// options, named `source`, and serves it in background threads (tests,
/// programs that embed the mount); dropping the session unmounts.
///
/// # Errors
/// `InvalidInput` as [`serve_objects`]; the mount's.
pub fn spawn_objects(
    fs: ObjectFs,
    source: &str,
    mountpoint: &std::path::Path,
    opts: &MountOptions,
) -> io::Result<BackgroundSession> {
    let m = crate::check_mountpoint(mountpoint)?;
    Session::new(fs, &m, &config(opts, source)?)?.spawn()
}

/// The errno of a store's error other than "not found": logged (the
/// program sees only `EIO`), `EIO`.
fn store_errno(what: &str, key: &Path, e: &object_store::Error) -> Errno {
    log::warn!("foliocache-fuse: {what} of {key}: {e}");
    Errno::EIO
}

/// Whether `name` in `parent` is the control file (`foliocache stat`'s,
/// [`control`]): at the root, it hides an object of its name.
fn is_control(parent: u64, name: &OsStr) -> bool {
    parent == ROOT && name.as_encoded_bytes() == CONTROL_NAME.as_bytes()
}

/// A stable inode number for a listed entry the kernel has not looked
/// up (readdir's `d_ino`): a hash of its key, never the root's.
fn listed_ino(key: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() | (1 << 63)
}

impl Filesystem for ObjectFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Shared mappings of the direct-IO files (Linux 6.6 and later);
        // the mount is read-only, so they are never dirty.
        let mmap = config
            .add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok();
        self.shared_mmap.store(mmap, Ordering::Relaxed);
        // Requests of up to MAX_IO (`max_pages` follows the larger of the
        // two), readahead as large as the kernel allows.
        let _ = config.set_max_write(MAX_IO);
        if let Err(most) = config.set_max_readahead(MAX_IO) {
            let _ = config.set_max_readahead(most);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if is_control(parent.0, name) {
            return reply.entry(&self.ttl, &control::attr(self.owner), Generation(0));
        }
        match self.lookup_entry(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut nodes = self.nodes.lock();
        let Some(node) = nodes.by_ino.get_mut(&ino.0) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(nlookup);
        if node.lookups > 0 || ino.0 == ROOT {
            return;
        }
        let (parent, name) = (node.parent, node.name.clone());
        nodes.by_ino.remove(&ino.0);
        let k = (parent, name);
        if nodes.by_name.get(&k) == Some(&ino.0) {
            nodes.by_name.remove(&k);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == CONTROL_INO {
            return reply.attr(&self.ttl, &control::attr(self.owner));
        }
        match self.current(ino.0) {
            Ok(entry) => reply.attr(&self.ttl, &self.attr(ino.0, &entry)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY) {
            return reply.error(Errno::EROFS);
        }
        if ino.0 == CONTROL_INO {
            let fh = self.add_handle(Open::Control(Arc::default()));
            return reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
        }
        let key = match self.nodes.lock().by_ino.get(&ino.0) {
            Some(n) if matches!(n.entry, Entry::Dir) => return reply.error(Errno::EISDIR),
            Some(n) => n.key.clone(),
            None => return reply.error(Errno::ENOENT),
        };
        match self.current(ino.0) {
            Ok(Entry::File(meta)) => {
                let fh = self.add_handle(Open::File(Arc::new((key, meta))));
                // The node is one version: what the kernel kept of it is
                // still its bytes (`fuse_finish_open` keeps the pages).
                let flags = if self.kernel_cache {
                    FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    FopenFlags::FOPEN_DIRECT_IO
                };
                reply.opened(fh, flags);
            }
            Ok(Entry::Dir) => reply.error(Errno::EISDIR),
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
        // The handle's table is let go before the read (or the answer).
        let opened = match self.handles.lock().open.get(&fh.0) {
            Some(Open::File(opened)) => Ok(opened.clone()),
            Some(Open::Control(session)) => Err(session.clone()),
            _ => return reply.error(Errno::EBADF),
        };
        let (key, meta) = match &opened {
            Ok(opened) => (&opened.0, &opened.1),
            Err(session) => {
                let data = session
                    .lock()
                    .read(offset, size as usize, |paths| self.stats_json(paths));
                return reply.data(&data);
            }
        };
        self.read_requests.fetch_add(1, Ordering::Relaxed);
        let end = offset.saturating_add(u64::from(size)).min(meta.size);
        if offset >= end {
            return reply.data(&[]);
        }
        match self.read_range(key, meta, offset..end) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is ever written: nothing to flush.
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        // No extended attributes: ENOSYS tells the kernel to stop asking
        // (`fuse_getxattr` remembers it).
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
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
        self.handles.lock().open.remove(&fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let parent = match self.nodes.lock().by_ino.get(&ino.0) {
            Some(n) => n.parent,
            None => return reply.error(Errno::ENOENT),
        };
        match self.listing(ino.0) {
            Ok(listing) => {
                let fh = self.add_handle(Open::Dir {
                    ino: ino.0,
                    parent,
                    listing,
                });
                reply.opened(fh, FopenFlags::empty());
            }
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
        let (ino, parent, listing) = match self.handles.lock().open.get(&fh.0) {
            Some(Open::Dir {
                ino,
                parent,
                listing,
            }) => (*ino, *parent, listing.clone()),
            _ => return reply.error(Errno::EBADF),
        };
        let dots = [
            (FileType::Directory, ".", Some(ino)),
            (FileType::Directory, "..", Some(parent)),
        ];
        let hidden = |n: &str| is_control(ino, OsStr::new(n));
        let entries = listing
            .entries
            .iter()
            .filter(|(n, _)| !hidden(n))
            .map(|(n, e)| match e {
                Entry::Dir => (FileType::Directory, n.as_str(), None),
                Entry::File(_) => (FileType::RegularFile, n.as_str(), None),
            });
        // The ids of the entries this reply carries only (a listing is
        // read in many replies): a node's if the kernel knows it, else
        // one from its key.
        let nodes = self.nodes.lock();
        let dir = nodes.by_ino.get(&ino).map(|n| &n.key);
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (kind, name, id)) in dots.into_iter().chain(entries).enumerate().skip(start) {
            let id = id.unwrap_or_else(|| match nodes.by_name.get(&(ino, name.to_owned())) {
                Some(&known) => known,
                // A valid part (the listing keeps only those).
                None => listed_ino(
                    &dir.cloned()
                        .unwrap_or_default()
                        .join(PathPart::parse(name).unwrap_or_default()),
                ),
            });
            if reply.add(INodeNo(id), i as u64 + 1, kind, name) {
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
        self.handles.lock().open.remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // No sizes to give (a store has no capacity); names up to S3's
        // key length are longer than any file name here.
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: Default::default(),
            size: 1,
            e_tag: None,
            version: None,
        }
    }

    #[test]
    fn a_directory_shadows_an_object_of_its_name_and_bad_names_are_left_out() {
        let dir = Path::from("d");
        let found = object_store::ListResult {
            common_prefixes: vec![Path::from("d/a"), Path::from("d/b")],
            objects: vec![meta("d"), meta("d/a"), meta("d/c"), meta("d/b")],
            extensions: Default::default(),
        };
        let l = Listing::new(&dir, found);
        let names: Vec<_> = l.entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(matches!(l.get("a"), Some(Entry::Dir)));
        assert!(matches!(l.get("c"), Some(Entry::File(_))));
        assert!(l.get("d").is_none());
        assert!(!is_file_name("..") && !is_file_name("") && !is_file_name("a\nb"));
        assert!(is_file_name(&"x".repeat(255)) && !is_file_name(&"x".repeat(256)));
        assert!(is_file_name("a b%2F"));
    }
}
