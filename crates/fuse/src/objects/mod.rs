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
//! after. A node's attributes never change, so the kernel keeps them a
//! day (`NODE_ATTR_TTL`); its entries (name to node) for the
//! time-to-live, so a lookup after it finds a new version.
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
//!
//! Files: the node table (`nodes.rs`), directory listings, whole
//! (`listing.rs`) and in pages as the kernel reads them (`dir.rs`), the
//! FUSE requests and open handles (`ops.rs`),
//! mounting a URL's store (`mount.rs`); here the file system's state,
//! its attributes and the control file's answer.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use foliocache::Cache;
use foliocache_object_store::{CachedStore, DiskTier, Throttled};
use fuser::{Errno, FileAttr, FileType, INodeNo};
use futures_util::StreamExt;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use parking_lot::Mutex;

use crate::control::{self, CONTROL_NAME};

mod dir;
mod listing;
mod mount;
mod nodes;
mod ops;

use dir::Pager;
pub use mount::{serve_objects, spawn_objects, store_for_url};
use nodes::{Node, Nodes};
use ops::Handles;

/// The root's node id (FUSE's).
const ROOT: u64 = 1;

/// The largest read the kernel is asked to send at once.
const MAX_IO: u32 = 1 << 20;

/// How long the kernel may keep a node's attributes (`attr_valid`): a
/// node's never change (a directory's are the tree's, a file's node is
/// one version of its object), so a day. A new version is found by the
/// kernel's lookup of the name, which the entry's time-to-live
/// ([`ObjectOptions::ttl`]) governs, not by a `GETATTR`: `fstat` of an
/// open file, and the attribute checks of `fuse_update_attributes`, cost
/// no request however short the time-to-live.
const NODE_ATTR_TTL: Duration = Duration::from_secs(24 * 3600);

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
    /// Keys asked for in one page of a directory's listing, from a store
    /// that lists in pages (S3, GCS, Azure; at least 1; S3 gives at most
    /// 1,000 a page, the default): `ls` of a large prefix gets its first
    /// entries once the first page has come, and the mount holds about two
    /// pages of it at a time.
    pub listing_page: usize,
    /// For testing a mount against a slow store: each request to the
    /// store waits this long first (its first-byte latency; zero: none).
    /// Applied by [`ObjectFs::for_url`] (object_store's `Throttled::link`
    /// around the store the URL names); listings are not slowed.
    pub store_latency: Duration,
    /// For testing: the store's GETs come through one link of this many
    /// bytes a second that every GET in flight shares (0: as fast as the
    /// store gives them). Applied by [`ObjectFs::for_url`].
    pub store_bandwidth: u64,
}

impl Default for ObjectOptions {
    /// A one-second time-to-live, no disk tier, two runtime threads, the
    /// kernel's page cache kept across opens, listings in pages of 1,000
    /// keys, the store as fast as it is.
    fn default() -> ObjectOptions {
        ObjectOptions {
            ttl: Duration::from_secs(1),
            disk_tier: None,
            runtime_threads: 2,
            kernel_cache: true,
            listing_page: 1000,
            store_latency: Duration::ZERO,
            store_bandwidth: 0,
        }
    }
}

/// What a name is: a directory (a prefix) or a file (an object).
#[derive(Clone, Debug)]
enum Entry {
    Dir,
    File(ObjectMeta),
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
    /// What lists the store's directories in pages (`None`: the store
    /// answers a directory's listing whole), and the keys of a page.
    pager: Option<Pager>,
    listing_page: usize,
    /// Read requests the kernel sent for objects' bytes.
    read_requests: AtomicU64,
    /// The other requests a warm re-read can cost: lookups, attribute
    /// requests and opens (of files, not directories).
    lookup_requests: AtomicU64,
    getattr_requests: AtomicU64,
    open_requests: AtomicU64,
    /// Names not shown (not file names) in the listings made, and whether
    /// the log said so yet (once a mount).
    names_skipped: AtomicU64,
    said_skipped: AtomicBool,
}

impl ObjectFs {
    /// The tree of `inner`'s keys under `prefix` (empty: the whole
    /// store), its objects' bytes cached in `cache` (and the disk tier
    /// `opts` names), with `opts`'s time-to-live. Files and directories
    /// belong to the calling process's user and group. A directory is
    /// listed whole (`list_with_delimiter`) before its first entry is
    /// given; [`paged`](Self::paged) lists in pages.
    ///
    /// # Errors
    /// Starting the runtime's threads.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        prefix: Path,
        cache: Cache,
        opts: &ObjectOptions,
    ) -> io::Result<ObjectFs> {
        ObjectFs::with_pager(inner, None, prefix, cache, opts)
    }

    /// As [`new`](Self::new), a directory listed in pages of
    /// [`ObjectOptions::listing_page`] keys through `inner`'s
    /// `PaginatedListStore` (as S3, GCS and Azure are from
    /// [`for_url`](Self::for_url)): its first entries are given before its
    /// last page has come, and a large prefix is held a page at a time.
    /// The pages are taken to come in key order, as S3's, GCS's and
    /// Azure's do (where not, a directory and an object of the same name
    /// may both be listed).
    ///
    /// # Errors
    /// Starting the runtime's threads.
    pub fn paged<S: ObjectStore + PaginatedListStore>(
        inner: Arc<S>,
        prefix: Path,
        cache: Cache,
        opts: &ObjectOptions,
    ) -> io::Result<ObjectFs> {
        let pager: Pager = inner.clone();
        ObjectFs::with_pager(inner, Some(pager), prefix, cache, opts)
    }

    /// [`new`](Self::new), listing through `pager` where given.
    fn with_pager(
        inner: Arc<dyn ObjectStore>,
        pager: Option<Pager>,
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
            pager,
            listing_page: opts.listing_page.max(1),
            read_requests: AtomicU64::new(0),
            lookup_requests: AtomicU64::new(0),
            getattr_requests: AtomicU64::new(0),
            open_requests: AtomicU64::new(0),
            names_skipped: AtomicU64::new(0),
            said_skipped: AtomicBool::new(false),
        })
    }

    /// The tree under the store and prefix `url` names, configured by
    /// `options` (see [`store_for_url`]), checked reachable (the first key
    /// of a listing of the prefix), as [`new`](Self::new) makes it; S3's,
    /// GCS's and Azure's directories listed in pages, as
    /// [`paged`](Self::paged)'s are; the store slowed as `opts`'s
    /// `store_latency` and `store_bandwidth` say.
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
        let (mut inner, pager, prefix) = mount::open_url(url, options)?;
        if !opts.store_latency.is_zero() || opts.store_bandwidth > 0 {
            let slow = Throttled::link(inner, opts.store_latency, opts.store_bandwidth);
            inner = Arc::new(slow);
        }
        let mut fs = ObjectFs::with_pager(inner, pager, prefix, cache, opts)?;
        fs.source = url.to_owned();
        let root = fs.nodes.lock().by_ino[&ROOT].key.clone();
        fs.runtime
            .block_on(fs.reachable(&root))
            .map_err(|e| io::Error::other(format!("listing {url}: {e}")))?;
        Ok(fs)
    }

    /// Whether the store answers a listing of `prefix`: its first key
    /// (one page of one key where it lists in pages; a prefix of millions
    /// of keys is not listed whole to find out).
    async fn reachable(&self, prefix: &Path) -> object_store::Result<()> {
        let under = (!prefix.as_ref().is_empty()).then_some(prefix);
        if let Some(pager) = &self.pager {
            let opts = object_store::list::PaginatedListOptions {
                delimiter: Some("/".into()),
                max_keys: Some(1),
                ..Default::default()
            };
            let dir = under.map(|p| format!("{p}/"));
            return pager.list_paginated(dir.as_deref(), opts).await.map(drop);
        }
        match self.store.list(under).next().await {
            // A key the store cannot read as a path is still an answer.
            Some(Err(object_store::Error::InvalidPath { .. })) | Some(Ok(_)) | None => Ok(()),
            Some(Err(e)) => Err(e),
        }
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
            "lookup_requests": self.lookup_requests.load(Ordering::Relaxed),
            "getattr_requests": self.getattr_requests.load(Ordering::Relaxed),
            "open_requests": self.open_requests.load(Ordering::Relaxed),
            "kernel_cache": self.kernel_cache,
            "names_skipped": self.names_skipped.load(Ordering::Relaxed),
            "disk_tier": tier.map(|t| serde_json::json!({
                "hits": t.hits,
                "misses": t.misses,
                "writes": t.writes,
                "corrupt": t.corrupt,
                "slots": t.slots,
            })),
            "tier_curves": tier_curves_json(&self.store.tier_curves()),
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
}

/// The store's tiers' curves ([`CachedStore::tier_curves`]) for the
/// control file: each tier's points (capacity ratio, hit ratio or null
/// while not known, GETs and bytes or null where the tier's size does not
/// decide them).
fn tier_curves_json(c: &foliocache_object_store::TierCurves) -> serde_json::Value {
    let points = |t: &foliocache_object_store::TierCurve| {
        t.points
            .iter()
            .map(|p| {
                serde_json::json!({
                    "capacity_ratio": p.capacity_ratio,
                    "hit_ratio": p.known.then_some(p.hit_ratio),
                    "remote_gets": p.remote_gets,
                    "remote_bytes": p.remote_bytes,
                })
            })
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "memory": points(&c.memory),
        "disk": c.disk.as_ref().map(points),
    })
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
