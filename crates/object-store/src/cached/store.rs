//! [`CachedStore`]: the `ObjectStore` in front of another, its builder and
//! its figures.

use super::object_store;
use std::fmt;
use std::future::{ready, Future};
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use foliocache::Cache;
use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, Error, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions, Result,
};
use backing::BLOCK;
use tokio::runtime::Handle;

use super::budget::GetBudget;
use super::through::WriteThrough;
use crate::CacheHint;
use crate::disk::{record_key, DiskTier, TierCurve, TierPoint};
use super::objects::{Key, Object, Objects, Validity};
use super::read::{cached, prefetch, read, read_ranges, stream_rest, CHUNK};
use super::record;
use super::remote::{
    counted_get, gone, into_store_error, same_version, unchanged, Counters, RecordWrite,
    RemoteBacking, STORE,
};
use super::upload::InvalidatingUpload;

/// Reads that found their version gone (the store answered
/// `Precondition`, `NotModified` or `NotFound` to a GET pinned to it) and
/// looked the object up again, before the store's answer is returned.
const MAX_STALE_RETRIES: u32 = 2;

/// The smallest default GET budget ([`CachedStoreBuilder::get_budget`]):
/// 16 read-around windows of 512 KiB (the window at S3's 20 to 200 ms and
/// 90 MB/s is 512 KiB to 4 MiB, crate::window), so that a small cache's
/// concurrent misses do not queue behind one another (an eighth of a
/// small cache alone held misses waiting for each other's GETs:
/// docs/object-store.md, "Bounds").
const MIN_GET_BUDGET: u64 = 8 << 20;

/// The default bound on the bytes being written through to the disk tier
/// at once ([`CachedStoreBuilder::write_queue`]).
pub const DEFAULT_WRITE_QUEUE: u64 = 32 << 20;

/// The default bound on tracked objects ([`CachedStoreBuilder::max_objects`]).
pub const DEFAULT_MAX_OBJECTS: usize = 4096;

/// An [`ObjectStore`] that serves reads of `S`'s objects from a foliocache
/// [`Cache`], and passes writes and listings through.
///
/// Each object read is tracked as one version (its e_tag, or version id):
/// its first read's GET (of a bounded range) or a HEAD finds it, and its
/// bytes are read into a mapping of the cache by ranged GETs pinned to
/// that version. See the crate documentation for
/// what is cached and when it is dropped.
///
/// ```
/// use foliocache_object_store::CachedStore;
/// use object_store::{memory::InMemory, path::Path, ObjectStore, ObjectStoreExt};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let cache = foliocache::Cache::builder().capacity(16 << 20).build()?;
/// let store = CachedStore::new(InMemory::new(), cache);
/// let path = Path::from("data/part-0");
/// store.put(&path, vec![7u8; 100_000].into()).await?;
///
/// let a = store.get_range(&path, 4096..8192).await?; // one GET, no HEAD
/// let b = store.get_range(&path, 4096..8192).await?; // from memory
/// assert_eq!(a, b);
/// assert_eq!(store.stats().remote_gets, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct CachedStore<S: ObjectStore> {
    inner: Arc<S>,
    cache: Cache,
    objects: Arc<Objects>,
    counters: Arc<Counters>,
    revalidate_after: Option<Duration>,
    tier: Option<Arc<DiskTier>>,
    budget: Arc<GetBudget>,
    /// Puts written through to the tier, if there is one.
    through: Option<WriteThrough>,
}

/// Configures a [`CachedStore`]: [`CachedStore::builder`].
#[derive(Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct CachedStoreBuilder<S: ObjectStore> {
    inner: S,
    cache: Cache,
    max_objects: usize,
    revalidate_after: Option<Duration>,
    tier: Option<Arc<DiskTier>>,
    read_around: Option<u64>,
    get_budget: Option<u64>,
    write_queue: u64,
}

impl<S: ObjectStore> CachedStoreBuilder<S> {
    /// A second tier on local disk, below the cache's memory: a miss in
    /// memory reads the chunks the tier holds from it, and a chunk missed
    /// twice is written there (see [`DiskTier`]). Default: none.
    pub fn disk_tier(mut self, tier: Arc<DiskTier>) -> Self {
        self.tier = Some(tier);
        self
    }

    /// The most objects tracked at once (default [`DEFAULT_MAX_OBJECTS`],
    /// at least 1): past it, an object the CLOCK hand finds unread since
    /// its last pass goes: its mapping closes and its folios go. Each tracked object costs its metadata
    /// (path, e_tag: about 200 bytes) and a mapping (a few hundred bytes,
    /// [`Cache::memory`]'s `file_bytes`) beside the folios it caches.
    pub fn max_objects(mut self, n: usize) -> Self {
        self.max_objects = n;
        self
    }

    /// Looks a tracked object up again (a HEAD) when a read comes more
    /// than `after` since the store last confirmed its version (a HEAD
    /// that found it, or a GET naming it that it answered: a stream's
    /// GETs keep it confirmed), so that writes made by others, not
    /// through this store, are seen within `after`. Default: never (objects change only through this store,
    /// or not at all, as SSTs and table fragments do). Reads of a version
    /// by id are never revalidated: a version does not change. With it
    /// set, a store restarted over a disk tier does not trust the tier's
    /// record of an object's version: its first read waits for a HEAD
    /// (the record says the tier likely holds its chunks: not a GET of
    /// its range).
    pub fn revalidate_after(mut self, after: Duration) -> Self {
        self.revalidate_after = Some(after);
        self
    }

    /// Fixes the window a point miss fetches, with a disk tier, at
    /// `bytes` (rounded up to a power of two within 64 KiB and 4 MiB; 0:
    /// only the bytes missed); a point miss is a read of at most an
    /// eighth of its window, the third miss in it. Default: measured, the largest power of
    /// two within half of the remote's latency times its bandwidth,
    /// as its GETs time them (none before they have: crate::window).
    pub fn read_around(mut self, bytes: u64) -> Self {
        self.read_around = Some(bytes);
        self
    }

    /// The most bytes of remote GETs in flight at once (rounded up to
    /// 4 KiB): a GET takes its bytes from this budget before it is sent
    /// and gives them back once they are in the cache's folios (a
    /// read-around window: once the disk tier has them), so that what
    /// the store holds beside the cache's memory is bounded. A GET larger
    /// than the budget waits for all of it and goes alone. Default: an
    /// eighth of the cache's capacity (foliocache caps a readahead window
    /// there too), at least 8 MiB (docs/object-store.md, "Bounds").
    pub fn get_budget(mut self, bytes: u64) -> Self {
        self.get_budget = Some(bytes);
        self
    }

    /// The most bytes of puts being written through to the disk tier at
    /// once (default [`DEFAULT_WRITE_QUEUE`]): a put past it waits for
    /// room, never drops its write ([`CachedStoreStats::write_waits`]
    /// counts the waits). A put larger than the queue waits for all of
    /// it and is written alone. Without a disk tier, nothing is written
    /// through.
    pub fn write_queue(mut self, bytes: u64) -> Self {
        self.write_queue = bytes;
        self
    }

    /// The store.
    pub fn build(self) -> CachedStore<S> {
        let counters = Counters::default();
        if let Some(bytes) = self.read_around {
            counters.link.fix(bytes);
        }
        let budget = self
            .get_budget
            .unwrap_or_else(|| (self.cache.memory().arena_bytes / 8).max(MIN_GET_BUDGET));
        // A stream's prefetch reaches at most half the cache ahead (what
        // `File::readahead` reads of a span at most) while that much is
        // free, a quarter once the cache is full (as the cache's own
        // streams' unread windows, `UnreadCap`: the rest is the other
        // readers'), within the budget (docs/object-store.md, "the
        // cache").
        let arena = self.cache.memory().arena_bytes;
        let half = (arena / 2).max(BLOCK as u64);
        counters
            .prefetch_most
            .store(budget.min(half), Ordering::Relaxed);
        counters
            .prefetch_full
            .store((arena / 4).max(BLOCK as u64), Ordering::Relaxed);
        CachedStore {
            inner: Arc::new(self.inner),
            cache: self.cache,
            objects: Arc::new(Objects::new(self.max_objects, self.tier.clone())),
            counters: Arc::new(counters),
            revalidate_after: self.revalidate_after,
            through: self
                .tier
                .clone()
                .map(|t| WriteThrough::new(t, self.write_queue)),
            tier: self.tier,
            budget: Arc::new(GetBudget::new(budget)),
        }
    }
}

/// A [`CachedStore`]'s figures, from [`CachedStore::stats`]. The cache's
/// own (folio hits and misses, memory) are [`Cache::stats`] and
/// [`Cache::memory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CachedStoreStats {
    /// Reads served from memory without a wait: a GET's piece, a range of
    /// `get_ranges`, or a merged span of its misses.
    pub hits: u64,
    /// Reads that needed bytes not cached (a GET was made, or one in
    /// flight waited for).
    pub misses: u64,
    /// Ranged GETs sent to the inner store, failed ones included.
    pub remote_gets: u64,
    /// Bytes those GETs returned.
    pub remote_get_bytes: u64,
    /// GETs that failed (the store's error, or a short body).
    pub remote_get_errors: u64,
    /// HEADs sent to the inner store (an object's version looked up).
    pub remote_heads: u64,
    /// Paths invalidated by writes through the store.
    pub invalidations: u64,
    /// Reads that found the version they cached replaced or gone (their
    /// own GET's answer, or an earlier GET's, a prefetch's included), and
    /// looked the object up again.
    pub stale_versions: u64,
    /// Objects whose version came from the disk tier's record (a store
    /// restarted over its tier), their HEAD sent beside the first read
    /// instead of before it.
    pub recorded_versions: u64,
    /// Point misses that waited for another miss's GET of the same
    /// window instead of sending their own (with a disk tier).
    pub coalesced: u64,
    /// The window a point miss fetches now, in bytes (0: only what it
    /// missed), measured or as [`CachedStoreBuilder::read_around`] fixed
    /// it.
    pub read_around: u64,
    /// Chunks of puts written through to the disk tier (each a
    /// [`DiskTier::put`], counted in its `writes` unless its IO failed).
    pub written_through: u64,
    /// Puts that waited for room in the write-through queue
    /// ([`CachedStoreBuilder::write_queue`]) instead of dropping their
    /// write.
    pub write_waits: u64,
    /// Reads passed to the inner store uncached: [`CacheHint::DontCache`]
    /// reads of bytes not all cached.
    pub passed_through: u64,
    /// Read-around windows whose chunks are being written to the disk
    /// tier in the background now (a gauge: 0 once the tier holds every
    /// window fetched so far; a read meanwhile misses the tier and is
    /// served by memory or the window's GET).
    pub tier_writes_pending: u64,
    /// Objects tracked now.
    pub objects: u64,
    /// The most objects tracked at once.
    pub max_objects: u64,
}

/// The curves of a [`CachedStore`]'s tiers, from
/// [`CachedStore::tier_curves`]: the hit ratio each tier would have had
/// at 0.25x, 0.5x, 1x, 2x and 4x its size (the other tier as it is), and
/// the GETs and bytes the store would have fetched (docs/object-store.md,
/// "The tiers' curves"; docs/metrics.md says how to read them).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct TierCurves {
    /// The memory tier's: the cache's own curve
    /// ([`Cache::hit_ratio_curve`]: a cache shared with other stores or
    /// files is one curve of all their reads), its points' GETs and
    /// bytes the store's measured ones scaled by the ratio of the
    /// predicted miss ratio to the measured one (the curve's recent
    /// window's ratio, the store's counts since it was made); with a disk
    /// tier, no GETs (a memory miss goes to the tier first: its curve
    /// says them).
    pub memory: TierCurve,
    /// The disk tier's ([`DiskTier::hit_ratio_curve`]), if there is one.
    pub disk: Option<TierCurve>,
}

impl<S: ObjectStore> CachedStore<S> {
    /// The curves of its tiers (see [`TierCurves`]): what a user pays for
    /// (GETs and the bytes they fetch) at other sizes of memory and disk.
    ///
    /// ```
    /// use foliocache_object_store::CachedStore;
    /// use object_store::{memory::InMemory, path::Path, ObjectStore, ObjectStoreExt};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let cache = foliocache::Cache::builder().capacity(16 << 20).build()?;
    /// let store = CachedStore::new(InMemory::new(), cache);
    /// let path = Path::from("data/part-0");
    /// store.put(&path, vec![7u8; 100_000].into()).await?;
    /// store.get_range(&path, 0..4096).await?;
    /// let curves = store.tier_curves();
    /// let one = curves.memory.at(1.0).unwrap();
    /// assert_eq!(one.remote_gets, Some(1.0)); // 1x: the GETs sent
    /// assert!(curves.disk.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn tier_curves(&self) -> TierCurves {
        let curve = self.cache.hit_ratio_curve();
        let s = self.stats();
        let miss = 1.0 - curve.points[2].hit_ratio;
        let points = curve.points.map(|p| {
            // The store's GETs (or bytes), scaled by the miss ratios.
            let pay = |measured: u64| {
                (self.tier.is_none() && curve.accesses > 0 && miss > 0.0)
                    .then(|| measured as f64 * (1.0 - p.hit_ratio) / miss)
            };
            TierPoint {
                capacity_ratio: p.capacity_ratio,
                hit_ratio: p.hit_ratio,
                known: p.known().is_some(),
                remote_gets: pay(s.remote_gets),
                remote_bytes: pay(s.remote_get_bytes),
            }
        });
        TierCurves {
            memory: TierCurve {
                points,
                accesses: curve.accesses,
                sampled: curve.sampled,
            },
            disk: self.tier.as_ref().map(|t| t.hit_ratio_curve()),
        }
    }

    /// `inner` with reads cached in `cache`, with the defaults (see
    /// [`CachedStoreBuilder`]).
    ///
    /// The cache may be shared with other stores and files; its IO
    /// engine's pool threads (`IoEngineConfig::threads`) bound the
    /// asynchronous readahead GETs in flight at once.
    pub fn new(inner: S, cache: Cache) -> Self {
        Self::builder(inner, cache).build()
    }

    /// A builder for `inner` cached in `cache`.
    pub fn builder(inner: S, cache: Cache) -> CachedStoreBuilder<S> {
        CachedStoreBuilder {
            inner,
            cache,
            max_objects: DEFAULT_MAX_OBJECTS,
            revalidate_after: None,
            tier: None,
            read_around: None,
            get_budget: None,
            write_queue: DEFAULT_WRITE_QUEUE,
        }
    }

    /// The store it wraps.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The cache it reads into.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Its budget of remote GET bytes in flight, in bytes
    /// ([`CachedStoreBuilder::get_budget`]).
    pub fn get_budget(&self) -> u64 {
        self.budget.bytes()
    }

    /// The bytes of its GET budget not taken now:
    /// [`get_budget`](Self::get_budget) when no GET is in flight.
    pub fn get_budget_available(&self) -> u64 {
        self.budget.available()
    }

    /// Its disk tier, if it has one.
    pub fn disk_tier(&self) -> Option<&Arc<DiskTier>> {
        self.tier.as_ref()
    }

    /// Tracks `meta` as the latest version of `path`, validated now, if
    /// the store tracks no version of it yet: its next read sends its GET
    /// at once, not a HEAD first (one round trip to the first byte, not
    /// two). For a caller that already knows the version from a listing
    /// or a HEAD of its own that it trusts as current (the object mount
    /// passes its node's, which every read of it names by `If-Match`). Its
    /// attributes are unknown: a read of it answers none until a HEAD
    /// finds the object again (after [`CachedStoreBuilder::revalidate_after`]).
    /// A version that is not the store's current one costs no wrong byte:
    /// each GET names its version, and the store answers `Precondition`.
    ///
    /// # Errors
    /// Opening the version's mapping in the cache (out of file slots).
    pub fn track(&self, path: &Path, meta: ObjectMeta) -> Result<()> {
        let key = Key(path.clone(), None);
        if self.objects.get(&key).is_some() {
            return Ok(());
        }
        let seq = self.objects.seq();
        let record = self.record_write(path, &meta, &Attributes::default());
        let obj = Arc::new(self.open(path, meta, Attributes::default(), record, None)?);
        self.objects.insert(key, obj, seq);
        Ok(())
    }

    /// Forgets what is cached of `path`'s latest version: the next read
    /// looks it up again. For a program that knows an object changed by a
    /// write that did not go through this store.
    pub fn invalidate(&self, path: &Path) {
        self.objects.invalidate(path);
    }

    /// The store's figures now.
    pub fn stats(&self) -> CachedStoreStats {
        let c = &*self.counters;
        CachedStoreStats {
            hits: Counters::get(&c.hits),
            misses: Counters::get(&c.misses),
            remote_gets: Counters::get(&c.gets),
            remote_get_bytes: Counters::get(&c.get_bytes),
            remote_get_errors: Counters::get(&c.get_errors),
            remote_heads: Counters::get(&c.heads),
            invalidations: self.objects.invalidations(),
            stale_versions: Counters::get(&c.stale),
            recorded_versions: Counters::get(&c.recorded),
            coalesced: Counters::get(&c.coalesced),
            read_around: c.link.point_window(),
            written_through: Counters::get(&c.written_through),
            write_waits: Counters::get(&c.write_waits),
            passed_through: Counters::get(&c.passed_through),
            tier_writes_pending: c.pending_windows.load(Ordering::Relaxed),
            objects: self.objects.len() as u64,
            max_objects: self.objects.max() as u64,
        }
    }

    /// Registers the store's figures (and its disk tier's) in `registry`,
    /// read at each scrape, named `foliocache_object_store_*`: hits and
    /// misses per tier (`tier="memory"`, `tier="disk"`), remote GETs, their
    /// bytes and errors, HEADs, invalidations, stale versions, objects
    /// tracked (see docs/metrics.md). The collector holds the store
    /// weakly: a dropped store leaves the output. The cache's own figures
    /// are [`foliocache::metrics::register`]'s (a cache may serve several
    /// stores: register it once).
    #[cfg(feature = "prometheus")]
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        super::metrics::register(&self.counters, &self.objects, self.tier.as_ref(), registry);
    }

    /// Whether `obj`, tracked, answers a read with `options` without a
    /// new lookup: no GET found it replaced, not due for revalidation
    /// (the store said it is current, by a HEAD or by a GET's answer,
    /// within `revalidate_after`), and the version the caller names
    /// (`If-Match`), if any, is this one.
    fn is_current(&self, obj: &Object, options: &GetOptions) -> bool {
        if obj.superseded() {
            return false;
        }
        if options.version.is_none() {
            if let Some(after) = self.revalidate_after {
                if obj.since_validated() >= after {
                    return false;
                }
            }
        }
        match (&options.if_match, &obj.meta.e_tag) {
            (Some(m), _) if m == "*" => true,
            (Some(m), Some(e)) => m.split(',').map(str::trim).any(|x| x == e),
            (Some(_), None) => false,
            (None, _) => true,
        }
    }

    /// The tracked object `options` asks for (its version id, or the
    /// latest), looked up with a HEAD if it is not tracked or not current,
    /// and tracked from then on unless a write invalidated its path
    /// meanwhile. Concurrent lookups of one key make one HEAD. With
    /// `trust_record` (not on a retry after a stale version), the latest
    /// version of an object not tracked is the disk tier's record of it
    /// if there is one, its HEAD sent beside the read
    /// ([`Self::recorded`]); not where a GET found the tracked version
    /// gone (the record may name that version still).
    async fn lookup(
        &self,
        location: &Path,
        options: &GetOptions,
        trust_record: bool,
    ) -> Result<(Key, Arc<Object>)> {
        let key = Key(location.clone(), options.version.clone());
        if let Some(obj) = self.objects.get(&key) {
            if self.is_current(&obj, options) {
                return Ok((key, obj));
            }
        }
        // One lookup of a key at a time; those behind it find its result.
        let gate = self.objects.gate(&key);
        let _held = gate.mutex().lock().await;
        let tracked = self.objects.get(&key);
        if let Some(obj) = tracked.as_ref().filter(|o| self.is_current(o, options)) {
            return Ok((key, obj.clone()));
        }
        // A version a GET found gone: the tier's record may name it still.
        let untracked = tracked.is_none();
        let superseded = tracked.is_some_and(|o| o.superseded());
        let seq = self.objects.seq();
        let latest = options.version.is_none();
        let record = match trust_record && !superseded && latest {
            true => self.record_of(&key).await,
            false => None,
        };
        let held = record.is_some();
        if let Some(found) = record.filter(|_| self.revalidate_after.is_none()) {
            if let Some(obj) = self.recorded(&key, found, options, seq) {
                return Ok((key, obj));
            }
        }
        // The first read's GET, but not for a path whose chunks the tier
        // likely holds (it has its record; this store wrote it through
        // lately): a HEAD costs no bytes.
        let held = held || self.through.as_ref().is_some_and(|t| t.wrote(location));
        if untracked && latest && !held {
            if let Some(obj) = self.first_get(&key, options, seq).await? {
                return Ok((key, obj));
            }
        }
        let head = GetOptions {
            head: true,
            version: options.version.clone(),
            ..GetOptions::default()
        };
        Counters::add(&self.counters.heads, 1);
        let found = self.inner.get_opts(location, head).await?;
        // Due for revalidation and found unchanged: the same object, its
        // cached folios kept (not one a GET found replaced: it goes, as
        // the HEAD would have dropped it).
        if let Some(obj) = self.objects.get(&key) {
            if obj.superseded() {
                Counters::add(&self.counters.stale, 1);
            } else if unchanged(&obj.meta, &found.meta) {
                obj.revalidated();
                return Ok((key, obj));
            }
        }
        let record = match latest {
            true => self.record_write(location, &found.meta, &found.attributes),
            false => None,
        };
        let obj = Arc::new(self.open(location, found.meta, found.attributes, record, None)?);
        self.objects.insert(key.clone(), obj.clone(), seq);
        Ok((key, obj))
    }

    /// The latest version of `key`'s path, not tracked, found by the GET
    /// of the read `options` asks (a range of at most [`CHUNK`] bytes),
    /// widened to whole blocks, instead of a HEAD: its answer names the
    /// version and its attributes as a HEAD's would, and its bytes are
    /// handed to the mapping's first miss (`RemoteBacking::with_primed`),
    /// the read that follows: one round trip to the first byte, as the
    /// uncached store's, not two. With a disk tier that miss is the
    /// tier's as any other (its lookup, admission and curve), the GET its
    /// fetch. Tracked unless a write invalidated the path since `seq`.
    /// `None` (a HEAD then) for another read, or if the GET fails (the
    /// HEAD says why).
    ///
    /// # Errors
    /// Opening the version's mapping in the cache.
    async fn first_get(&self, key: &Key, options: &GetOptions, seq: u64) -> Result<Option<Arc<Object>>> {
        let Some(GetRange::Bounded(r)) = &options.range else {
            return Ok(None);
        };
        let block = BLOCK as u64;
        let Some(end) = r.end.checked_next_multiple_of(block) else {
            return Ok(None);
        };
        if options.head || r.start >= r.end || r.end - r.start > CHUNK {
            return Ok(None);
        }
        let pages = r.start / block * block..end;
        let mut found = None;
        // The answer's meta, attributes and range, kept (a range not
        // within the blocks asked: an error, the store's answer to
        // something else).
        let answer = |f: &GetResult| {
            if f.range.start < pages.start || f.range.end > pages.end {
                return Err(Error::Generic {
                    store: STORE,
                    source: format!("a GET of {pages:?} answered {:?}", f.range).into(),
                });
            }
            found = Some((f.meta.clone(), f.attributes.clone(), f.range.clone()));
            Ok(f.range.clone())
        };
        let mut pieces: Vec<Bytes> = Vec::new();
        let on = (&*self.inner, &*self.budget, &*self.counters);
        let get = GetOptions::default();
        let got = counted_get(on, &key.0, get, pages.clone(), answer, |_, b| pieces.push(b)).await;
        let (Ok(taken), Some((meta, attributes, range))) = (got, found) else {
            return Ok(None);
        };
        drop(taken);
        let data = match pieces.len() {
            1 => pieces.swap_remove(0),
            _ => pieces.concat().into(),
        };
        // Bytes of the blocks asked, at their offset, for a read that
        // follows (its preconditions hold, its range is valid): else not
        // handed on, so that no bytes wait beside the cache for a miss
        // that will not come.
        let whole = range.start == pages.start && range.end == pages.end.min(meta.size);
        let read = r.start < meta.size && options.check_preconditions(&meta).is_ok();
        let primed = (whole && read).then_some((range.start, data));
        let record = self.record_write(&key.0, &meta, &attributes);
        let obj = Arc::new(self.open(&key.0, meta, attributes, record, primed)?);
        self.objects.insert(key.clone(), obj.clone(), seq);
        Ok(Some(obj))
    }

    /// `meta`'s version of `location`, its mapping opened; `record` writes
    /// its record once the tier holds a chunk of it.
    fn open(
        &self,
        location: &Path,
        meta: ObjectMeta,
        attributes: Attributes,
        record: Option<RecordWrite>,
        primed: Option<(u64, Bytes)>,
    ) -> Result<Object> {
        let once = Arc::default();
        let validity = Arc::new(Validity::new());
        let backing = RemoteBacking::new(
            self.inner.clone(),
            location.clone(),
            meta.clone(),
            Handle::try_current().ok(),
            self.counters.clone(),
            self.tier.clone(),
            self.budget.clone(),
        )
        .with_record(record)
        .with_primed(primed)
        .with_once(Arc::clone(&once))
        .with_validity(Arc::clone(&validity));
        let file = self.cache.open_backing(backing).map_err(into_store_error)?;
        Ok(Object::new(meta, attributes, file, once, validity))
    }

    /// The disk tier's record of `key`'s path (a store restarted over the
    /// tier): its latest version and attributes as a HEAD found them;
    /// `None` without a tier, a record, or a tokio runtime.
    async fn record_of(&self, key: &Key) -> Option<(ObjectMeta, Attributes)> {
        let tier = self.tier.clone()?;
        let handle = Handle::try_current().ok()?;
        let rkey = record_key(key.0.as_ref());
        let data = handle
            .spawn_blocking(move || tier.get_record(rkey))
            .await
            .ok()??;
        record::decode(&key.0, &data)
    }

    /// The latest version of `key`'s path as the disk tier's record has
    /// it (`found`, [`Self::record_of`]), tracked; `None` outside tokio,
    /// if it is not the version `options` names (`If-Match`: the caller
    /// knows a newer one), or if a write invalidated the path since
    /// `seq`. Its HEAD goes in the background ([`Self::validate`]): the
    /// read is served meanwhile, from the tier's chunks of that version
    /// (docs/object-store.md, "Restart").
    fn recorded(
        &self,
        key: &Key,
        (meta, attributes): (ObjectMeta, Attributes),
        options: &GetOptions,
        seq: u64,
    ) -> Option<Arc<Object>> {
        let handle = Handle::try_current().ok()?;
        let obj = Arc::new(self.open(&key.0, meta, attributes, None, None).ok()?);
        if !self.is_current(&obj, options) || !self.objects.insert(key.clone(), obj.clone(), seq) {
            return None;
        }
        Counters::add(&self.counters.recorded, 1);
        self.validate(&handle, key.clone(), obj.clone());
        Some(obj)
    }

    /// The HEAD of an object tracked from the tier's record, on
    /// `handle`: if the store names another version (or fails), the
    /// record is dropped and the object forgotten, so that reads from
    /// then on look it up again and see only the new version's bytes.
    fn validate(&self, handle: &Handle, key: Key, obj: Arc<Object>) {
        let (inner, objects) = (self.inner.clone(), self.objects.clone());
        let (counters, tier) = (self.counters.clone(), self.tier.clone());
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        Counters::add(&counters.heads, 1);
        handle.spawn(async move {
            let found = inner.get_opts(&key.0, head).await;
            if found.is_ok_and(|f| same_version(&f.meta, &obj.meta)) {
                return;
            }
            if let Some(tier) = tier {
                let rkey = record_key(key.0.as_ref());
                let _ = tokio::task::spawn_blocking(move || tier.put_record(rkey, &[])).await;
            }
            objects.remove_if(&key, &obj);
            Counters::add(&counters.stale, 1);
        });
    }

    /// What writes the disk tier's record of `meta` (with `attributes`),
    /// the latest version of `location` a HEAD found, once the tier holds
    /// a chunk of it ([`RemoteBacking`]): a restart then serves it without
    /// a HEAD. The record is written, then dropped again unless the store
    /// still tracks that version as the path's latest: a write through
    /// the store that invalidated the path before the check is seen by
    /// it, one after it drops the record itself (`Objects::invalidate`).
    fn record_write(
        &self,
        location: &Path,
        meta: &ObjectMeta,
        attributes: &Attributes,
    ) -> Option<RecordWrite> {
        let tier = self.tier.clone()?;
        let data = record::encode(meta, attributes)?;
        let (objects, rkey) = (self.objects.clone(), record_key(location.as_ref()));
        let (key, meta) = (Key(location.clone(), None), meta.clone());
        Some(Box::new(move || {
            tier.put_record(rkey, &data);
            if !objects.tracks(&key, |o| same_version(&o.meta, &meta)) {
                tier.put_record(rkey, &[]);
            }
        }))
    }

    /// Whether a read's error says its version is gone: look again.
    fn stale(&self, e: &Error, key: &Key, obj: &Arc<Object>, tries: &mut u32) -> bool {
        if !gone(e) || *tries >= MAX_STALE_RETRIES {
            return false;
        }
        *tries += 1;
        Counters::add(&self.counters.stale, 1);
        self.objects.remove_if(key, obj);
        true
    }

    /// A read `options` asks for answered from memory at once: a HEAD,
    /// or a range of at most [`CHUNK`] bytes all cached, of an object
    /// tracked and current whose preconditions hold. `None` for any other
    /// (the slow path, [`get_cached`](Self::get_cached), answers it).
    /// Allocates the returned bytes and what a `GetResult` holds (its
    /// metadata, its stream), as `InMemory`'s `get_opts` does; no lock
    /// but the table's (shared, held throughout: no reference to the
    /// object taken) and the folio's pin, no wait.
    fn get_now(&self, location: &Path, options: &GetOptions) -> Option<GetResult> {
        let version = options.version.as_deref();
        self.objects
            .with(location, version, |obj| self.hit(obj, options))
            .flatten()
    }

    /// [`get_now`](Self::get_now) of the tracked `obj`.
    fn hit(&self, obj: &Object, options: &GetOptions) -> Option<GetResult> {
        if !self.is_current(obj, options) || options.check_preconditions(&obj.meta).is_err() {
            return None;
        }
        let size = obj.meta.size;
        if options.head {
            return Some(result(obj, 0..size, stream::empty().boxed()));
        }
        let range = match &options.range {
            None => 0..size,
            Some(r) => r.as_range(size).ok()?,
        };
        if range.end - range.start > CHUNK {
            return None;
        }
        let bytes = cached(obj, range.start, (range.end - range.start) as usize)
            .ok()?
            .ok()?;
        if obj.note_read(&range) {
            prefetch(obj, range.end, &self.counters, &self.cache);
        }
        Counters::add(&self.counters.hits, 1);
        let body = stream::once(ready(Ok(bytes))).boxed();
        Some(result(obj, range, body))
    }

    /// `get_opts` of a valid range (or a HEAD) of a tracked object, with
    /// `hint` ([`CacheHint::ReadOnce`]: its misses are not kept;
    /// [`CacheHint::Sequential`]: its first piece read, the object's
    /// prefetch starts from its end).
    async fn get_cached(
        &self,
        location: &Path,
        options: GetOptions,
        hint: CacheHint,
    ) -> Result<GetResult> {
        let once = hint == CacheHint::ReadOnce;
        let mut tries = 0;
        loop {
            let (key, obj) = self.lookup(location, &options, tries == 0).await?;
            options.check_preconditions(&obj.meta)?;
            let size = obj.meta.size;
            if options.head {
                return Ok(result(&obj, 0..size, stream::empty().boxed()));
            }
            let range = match options.range.as_ref().map(|r| r.as_range(size)) {
                None => 0..size,
                Some(Ok(r)) => r,
                // An invalid range: the inner store's answer, its error.
                Some(Err(_)) => return self.inner.get_opts(location, options).await,
            };
            let first = range.start..range.end.min(range.start + CHUNK);
            match read(&obj, first.clone(), &self.counters, &self.cache, once).await {
                Ok(bytes) => {
                    if hint == CacheHint::Sequential {
                        // After the first bytes, so that the prefetch's
                        // GETs do not share the link with them.
                        obj.begin_stream(first.end);
                        prefetch(&obj, first.end, &self.counters, &self.cache);
                    }
                    let first = bytes;
                    let rest = stream_rest(
                        obj.clone(),
                        first,
                        range.clone(),
                        self.counters.clone(),
                        self.cache.clone(),
                        once,
                    );
                    return Ok(result(&obj, range, rest));
                }
                Err(e) if self.stale(&e, &key, &obj, &mut tries) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The [`CacheHint`] a request's `extensions` carry (`Normal` if none).
fn hint_of(extensions: &object_store::Extensions) -> CacheHint {
    extensions.get::<CacheHint>().copied().unwrap_or_default()
}

/// The `GetResult` of `range` of `obj`, its bytes in `stream`.
fn result(obj: &Object, range: Range<u64>, stream: BoxStream<'static, Result<Bytes>>) -> GetResult {
    super::get_result(
        GetResultPayload::Stream(stream),
        obj.meta.clone(),
        range,
        obj.attributes.clone(),
    )
}

impl<S: ObjectStore> fmt::Debug for CachedStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedStore")
            .field("inner", &self.inner)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<S: ObjectStore> fmt::Display for CachedStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.inner)
    }
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for CachedStore<S> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let hint = hint_of(&opts.extensions);
        let through = self
            .through
            .as_ref()
            .filter(|_| hint != CacheHint::DontCache)
            .map(|t| (t, payload.clone()));
        let r = self.inner.put_opts(location, payload, opts).await;
        self.objects.invalidate(location);
        if let (Ok(put), Some((t, payload))) = (&r, through) {
            let keep = hint == CacheHint::KeepUntilRead;
            t.write(location, payload, put, keep, &self.counters).await;
        }
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(InvalidatingUpload {
            inner,
            path: location.clone(),
            objects: self.objects.clone(),
        }))
    }

    // Not an `async fn`: a hit answers with a ready future, no state
    // machine of the slow path's size behind it.
    fn get_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        options: GetOptions,
    ) -> Pin<Box<dyn Future<Output = Result<GetResult>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        if let Some(hit) = self.get_now(location, &options) {
            return Box::pin(ready(Ok(hit)));
        }
        match hint_of(&options.extensions) {
            CacheHint::DontCache => {
                Counters::add(&self.counters.passed_through, 1);
                self.inner.get_opts(location, options)
            }
            hint => Box::pin(self.get_cached(location, options, hint)),
        }
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let mut tries = 0;
        loop {
            let (key, obj) = self
                .lookup(location, &GetOptions::default(), tries == 0)
                .await?;
            let size = obj.meta.size;
            let Ok(clamped) = ranges
                .iter()
                .map(|r| GetRange::Bounded(r.clone()).as_range(size))
                .collect::<std::result::Result<Vec<_>, _>>()
            else {
                // An invalid range: the inner store's answer, its error.
                return self.inner.get_ranges(location, ranges).await;
            };
            match read_ranges(&obj, &clamped, &self.counters, &self.cache).await {
                Ok(v) => return Ok(v),
                Err(e) if self.stale(&e, &key, &obj, &mut tries) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // Each path is invalidated as it goes to the store (a failed
        // delete may still have deleted it) and again once deleted (a
        // lookup that raced the delete is not kept).
        let (before, after) = (self.objects.clone(), self.objects.clone());
        let locations = locations
            .map(move |p| {
                if let Ok(p) = &p {
                    before.invalidate(p);
                }
                p
            })
            .boxed();
        self.inner
            .delete_stream(locations)
            .map(move |r| {
                if let Ok(p) = &r {
                    after.invalidate(p);
                }
                r
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let r = self.inner.copy_opts(from, to, options).await;
        self.objects.invalidate(to);
        r
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let r = self.inner.rename_opts(from, to, options).await;
        self.objects.invalidate(from);
        self.objects.invalidate(to);
        r
    }
}
