//! The objects a [`CachedStore`](crate::CachedStore) tracks: per (path,
//! requested version) the version it caches, that version's mapping in
//! the foliocache cache, and when it was last validated; at most
//! `max_objects` of them, evicted by CLOCK (second chance): a read marks
//! its object referenced, and the hand passes over a referenced object
//! once, clearing the mark, before it evicts it.
//!
//! ```text
//!   Table (one rwlock: reads share it)
//!     map:   (path, version asked) ──> Object { meta, attributes, file, validated, referenced }, gen
//!     order: (key, gen), oldest first: the clock hand at the front (an
//!            entry whose gen is not the map's is a leftover, skipped)
//!     seq:   bumped by every invalidation
//! ```
//!
//! # Coherence with writes
//! A write through the store (put, multipart completion, delete, copy's or
//! rename's target, rename's source) invalidates its path after the inner
//! store answered: the entry goes, and `seq` moves on. A read that looked
//! the object up (a HEAD) notes `seq` first and inserts what it found only
//! if no invalidation came in between, so a HEAD that raced a write cannot
//! install the version the write replaced.
//!
//! # One lookup per object at a time
//! Reads of an object not tracked yet, arriving together, would each send
//! a HEAD and open a mapping of their own, and each read the same bytes
//! into it. So a lookup holds the key's *gate* (an async mutex, kept in
//! `gates` while anyone holds or waits for it) across its HEAD; the reads
//! behind it find the object tracked when they get the gate.
//!
//! # Locking
//! The table's rwlock (shared by lookups, which only set an object's
//! referenced bit; exclusive to insert and remove) and the gates' map's
//! mutex are leaves, never held across a store call or a read that may
//! wait: a hit ([`Objects::with`]) pins its folio under the shared lock,
//! which takes no lock of ours and waits for no IO. A gate is held across
//! a HEAD, and taken with no other lock held. Objects evicted or
//! invalidated are dropped after the table's lock is released (closing a
//! mapping frees its folios).
//!
//! # The hasher
//! Every hit hashes its path, so the table hashes with foldhash (a
//! multiply-fold hash, a few nanoseconds for a path) rather than std's
//! SipHash-1-3. Paths are chosen by the store's clients, so a client
//! could try to make them collide (hash flooding); that is bounded here:
//! foldhash's `RandomState` seeds each table from a per-process secret
//! (no fixed set of inputs collides in every process), the table's hash
//! order is never shown (the clock's order is insertion order), an entry
//! is made only for an object a HEAD found (or the disk tier's record of
//! one), and the table holds at most `max_objects` of them, so even a
//! path colliding with every entry costs a lookup `max_objects`
//! comparisons, not a quadratic blow-up.

use super::object_store;
use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foliocache::{Advice, File, ReadaheadConfig};
use object_store::path::Path;
use object_store::{Attributes, ObjectMeta};
use parking_lot::{Mutex, RwLock};
use tokio::sync::Mutex as AsyncMutex;

use crate::disk::{record_key, DiskTier};
use crate::window::MIN_DEPTH;

/// What a table entry is looked up by: the path, and the version id the
/// request named (`None`: the latest version, the one writes invalidate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key(pub(crate) Path, pub(crate) Option<String>);

/// A key's parts, borrowed: what a lookup hashes and compares, so that a
/// hit makes no [`Key`] (no copy of the path).
trait KeyView {
    fn parts(&self) -> (&str, Option<&str>);
}

impl KeyView for Key {
    fn parts(&self) -> (&str, Option<&str>) {
        (self.0.as_ref(), self.1.as_deref())
    }
}

impl KeyView for (&Path, Option<&str>) {
    fn parts(&self) -> (&str, Option<&str>) {
        (self.0.as_ref(), self.1)
    }
}

// `Key` and its view hash alike (the map's `Borrow` contract).
impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyView + '_ {}

impl<'a> Borrow<dyn KeyView + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

/// One version of one object, cached.
#[derive(Debug)]
pub(crate) struct Object {
    /// The version: its size, e_tag, version id.
    pub(crate) meta: ObjectMeta,
    /// Its attributes, as the HEAD that found it returned them.
    pub(crate) attributes: Attributes,
    /// Its mapping in the cache, over a [`RemoteBacking`](super::remote::RemoteBacking).
    pub(crate) file: File,
    /// When the store last said this is the current version, and whether
    /// a GET found it replaced: shared with its backing, whose GETs say
    /// both ([`Validity`]).
    validity: Arc<Validity>,
    /// Read since the clock hand last passed it.
    referenced: AtomicBool,
    /// The readahead window last set on `file`, in pages (0: none;
    /// [`CACHE_DEFAULT`]: the cache's default, never set).
    stream_pages: AtomicU64,
    /// Where the last read of the object ended, and how many reads in a
    /// row began where the one before ended ([`note_read`](Self::note_read)).
    last_end: AtomicU64,
    run: AtomicU32,
    /// Reads of the object marked [`CacheHint::ReadOnce`](crate::CacheHint)
    /// under way, shared with its backing: while there is one, the disk
    /// tier's chunks the backing finds are not promoted
    /// ([`read_once`](Self::read_once)).
    once: Arc<AtomicU32>,
    /// A stream's prefetch ([`prefetch_span`](Self::prefetch_span)): where
    /// it has reached, and how far ahead of the reader it reaches (0: not
    /// started).
    prefetched: AtomicU64,
    depth: AtomicU64,
}

/// What the store last said of an object's version, shared by the
/// object and its backing: a HEAD that finds the version unchanged
/// ([`Objects`]' lookups) and a GET that names it and is answered by it
/// (super::remote) both say it is current now; a GET that finds it
/// replaced or gone says it is not, for good.
///
/// A GET says so only where its condition tests the object's current
/// version: `If-Match` (its e_tag) or `If-Unmodified-Since`. A GET by
/// version id is answered by that version whatever the current one is,
/// so it confirms nothing (such an object is revalidated by HEADs alone).
#[derive(Debug)]
pub(crate) struct Validity {
    /// When the store last said this is the current version: nanoseconds
    /// after [`epoch`], as its answer came (a revalidation that finds the
    /// same version moves it, keeping the object and its cached folios).
    validated: AtomicU64,
    /// A GET found the version replaced or gone: the object is never
    /// current again (a lookup replaces it, as a HEAD that found another
    /// version would).
    superseded: AtomicBool,
}

impl Validity {
    /// A version the store said is current now.
    pub(crate) fn new() -> Self {
        Validity {
            validated: AtomicU64::new(since_epoch()),
            superseded: AtomicBool::new(false),
        }
    }

    /// The store said again that this is the current version.
    pub(crate) fn confirm(&self) {
        self.validated.fetch_max(since_epoch(), Ordering::Relaxed);
    }

    /// The store said this version is no longer the current one.
    pub(crate) fn supersede(&self) {
        self.superseded.store(true, Ordering::Relaxed);
    }
}

/// A read marked read-once under way ([`Object::read_once`]): ends when
/// dropped.
pub(crate) struct ReadingOnce(Arc<AtomicU32>);

impl Drop for ReadingOnce {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `File::readahead`'s largest window, one GET: a prefetch's span is
/// whole ones from where it starts.
const SPAN_WINDOW: u64 = 2 << 20;

/// `Object::stream_pages` before any window was set.
const CACHE_DEFAULT: u64 = u64::MAX;
/// Reads in a row, each beginning where the last ended, after which the
/// next is a stream's: a reader's second read starting at the first's end
/// may be the next column of a table (Parquet reads a row group's filter
/// column, then the column after it), not a stream.
const STREAM_RUN: u32 = 2;

impl Object {
    /// The version `meta` (with its `attributes`) cached in `file`;
    /// `once` counts its read-once reads for its backing, `validity` is
    /// what the store last said of it (shared with the backing).
    pub(crate) fn new(
        meta: ObjectMeta,
        attributes: Attributes,
        file: File,
        once: Arc<AtomicU32>,
        validity: Arc<Validity>,
    ) -> Self {
        Object {
            meta,
            attributes,
            file,
            validity,
            referenced: AtomicBool::new(false),
            stream_pages: AtomicU64::new(CACHE_DEFAULT),
            last_end: AtomicU64::new(u64::MAX),
            run: AtomicU32::new(0),
            once,
            prefetched: AtomicU64::new(0),
            depth: AtomicU64::new(0),
        }
    }

    /// Notes a read marked [`CacheHint::ReadOnce`](crate::CacheHint) under
    /// way until the guard is dropped: the disk tier's chunks its misses
    /// find are made first to go, not promoted. A normal read of the same
    /// object meanwhile does not promote them either (a matter of what the
    /// tier keeps, never of what a read returns).
    pub(crate) fn read_once(&self) -> ReadingOnce {
        self.once.fetch_add(1, Ordering::Relaxed);
        ReadingOnce(self.once.clone())
    }

    /// How long ago the store last said this is the current version.
    pub(crate) fn since_validated(&self) -> Duration {
        let at = self.validity.validated.load(Ordering::Relaxed);
        Duration::from_nanos(since_epoch().saturating_sub(at))
    }

    /// The store said again that this is the current version.
    pub(crate) fn revalidated(&self) {
        self.validity.confirm();
    }

    /// Whether a GET found this version replaced or gone ([`Validity`]).
    pub(crate) fn superseded(&self) -> bool {
        self.validity.superseded.load(Ordering::Relaxed)
    }

    /// Notes a read of `range` (a hit or a miss): whether it is a
    /// stream's, the last of more than [`STREAM_RUN`] reads in a row each
    /// beginning where the one before ended. Racing readers of one object
    /// may break a run (the pattern is a guess, never a correctness
    /// matter).
    pub(crate) fn note_read(&self, range: &Range<u64>) -> bool {
        if self.last_end.swap(range.end, Ordering::Relaxed) == range.start {
            self.run.fetch_add(1, Ordering::Relaxed) + 1 >= STREAM_RUN
        } else {
            self.run.store(0, Ordering::Relaxed);
            false
        }
    }

    /// Marks the object a stream's whose last read ended at `end`
    /// ([`CacheHint::Sequential`](crate::CacheHint)): the next read from
    /// `end` is a stream's ([`note_read`](Self::note_read)).
    pub(crate) fn begin_stream(&self, end: u64) {
        self.last_end.store(end, Ordering::Relaxed);
        self.run.store(STREAM_RUN - 1, Ordering::Relaxed);
    }

    /// How far the stream's next prefetch reaches ahead of its reader
    /// before its bound: [`MIN_DEPTH`] until its first span, then doubled
    /// at each extension ([`prefetch_span`](Self::prefetch_span)).
    fn prefetch_depth(&self) -> u64 {
        match self.depth.load(Ordering::Relaxed) {
            0 => MIN_DEPTH,
            d => d,
        }
    }

    /// Whether a stream's read ending at `end` may extend its prefetch:
    /// not where the prefetch reaches at least half its depth ahead of
    /// `end`, or to the object's end ([`prefetch_span`](Self::prefetch_span)
    /// with no smaller bound), so that a read between extensions does not
    /// compute the bound.
    pub(crate) fn prefetch_due(&self, end: u64) -> bool {
        let depth = self.prefetch_depth();
        let from = self.prefetched.load(Ordering::Relaxed);
        let ahead = from >= end && from <= end.saturating_add(depth);
        !(ahead && (from >= self.meta.size || from >= end.saturating_add(depth / 2)))
    }

    /// A stream's read ending at `end`: the bytes to read ahead of it now,
    /// if its prefetch is to be extended (it reaches less than half its
    /// depth ahead of `end`): from where it reached (or `end`, for a
    /// stream that started again elsewhere) to about `end` plus the depth
    /// (whole windows of `File::readahead`, each a GET, from there), which
    /// starts at [`MIN_DEPTH`] (the link model's floor, which a stream's
    /// bound is not below unless the GET budget or the cache is smaller)
    /// and doubles at each extension, never
    /// past `most` (what the link needs, the cache can hold and the GET
    /// budget allows: `read::prefetch`; a bound that fell since the last
    /// extension shrinks the depth at once). Racing readers may both
    /// extend it: the cache skips what is cached or being read.
    pub(crate) fn prefetch_span(&self, end: u64, most: u64) -> Option<Range<u64>> {
        let size = self.meta.size;
        let depth = self.prefetch_depth().min(most).max(1);
        let mut from = self.prefetched.load(Ordering::Relaxed);
        if from < end || from > end.saturating_add(depth) {
            from = end;
        }
        if from >= size || from >= end.saturating_add(depth / 2) {
            return None;
        }
        // Whole windows of `File::readahead` from `from` (each its own
        // GET), unless the span is less than one or reaches the end: a
        // span cut anywhere would end in a piece of a window, and the next
        // span begin with the rest, two GETs for one at each extension.
        // From `from`, not on multiples of the window, so the folios'
        // sizes stay those the stream's own alignment gives (see
        // docs/object-store.md, "A stream's prefetch is as deep as the
        // link needs").
        let reach = end.saturating_add(depth);
        let whole = (reach - from) / SPAN_WINDOW * SPAN_WINDOW;
        let to = match whole == 0 || reach >= size {
            true => reach.min(size),
            false => from + whole,
        };
        self.prefetched.store(to, Ordering::Relaxed);
        self.depth
            .store(depth.saturating_mul(2).min(most).max(depth), Ordering::Relaxed);
        Some(from..to)
    }

    /// Sets the file's readahead window to `pages` (0: random, a miss reads
    /// what it asked for), if not set already: a stream's GETs grow to
    /// the remote's latency times its bandwidth (crate::window), any other
    /// read fetches what it asked for. Setting it starts the window over,
    /// so it is set only when it changes.
    pub(crate) fn tune_readahead(&self, pages: u64) {
        if self.stream_pages.swap(pages, Ordering::Relaxed) != pages {
            match pages {
                // Random advice (`POSIX_FADV_RANDOM`): a miss reads the
                // pages asked for as one IO, one GET (readahead turned off
                // would read them in pieces).
                0 => {
                    // Never fails for these advices.
                    let _ = self.file.advise(0, 0, Advice::Random);
                }
                p => self.file.set_readahead(ReadaheadConfig::new(p, p)),
            }
        }
    }
}

/// The instant validation times count from (the first asked for).
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds from [`epoch`] to now.
fn since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The tracked objects (see the module documentation).
#[derive(Debug)]
pub(crate) struct Objects {
    table: RwLock<Table>,
    /// The disk tier, whose version record of a path an invalidation
    /// drops (super::record).
    tier: Option<Arc<DiskTier>>,
    max: usize,
    /// Invalidations so far.
    invalidations: AtomicU64,
    /// The gates of lookups in progress (see the module documentation).
    gates: Mutex<HashMap<Key, Arc<AsyncMutex<()>>>>,
}

/// A lookup's claim on its key's gate: taking it
/// ([`lock`](AsyncMutex::lock)) waits for the lookup before; dropping
/// it forgets the gate once no one else holds or waits for it.
pub(crate) struct Gate<'a> {
    objects: &'a Objects,
    key: Key,
    gate: Arc<AsyncMutex<()>>,
}

impl Gate<'_> {
    /// The gate's mutex.
    pub(crate) fn mutex(&self) -> &AsyncMutex<()> {
        &self.gate
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let mut gates = self.objects.gates.lock();
        // The map's reference and this one (dropped after this): nobody
        // else holds or waits (clones are made only under the map's lock).
        if Arc::strong_count(&self.gate) == 2 {
            gates.remove(&self.key);
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<Key, (Arc<Object>, u64), foldhash::fast::RandomState>,
    order: VecDeque<(Key, u64)>,
    next_gen: u64,
    seq: u64,
}

impl Table {
    /// Removes `key`'s entry (its place in `order` becomes a leftover).
    fn remove(&mut self, key: &Key) -> Option<Arc<Object>> {
        let (obj, _) = self.map.remove(key)?;
        self.compact();
        Some(obj)
    }

    /// Drops the leftovers of `order` once they outnumber the entries.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(k, g)| map.get(k).is_some_and(|(_, g2)| g2 == g));
        }
    }

    /// Runs the clock hand until at most `max` objects are tracked,
    /// putting the evicted ones in `gone`.
    fn evict(&mut self, max: usize, gone: &mut Vec<Arc<Object>>) {
        while self.map.len() > max {
            let Some((k, g)) = self.order.pop_front() else {
                break;
            };
            let Some((obj, g2)) = self.map.get(&k) else {
                continue;
            };
            if *g2 != g {
                continue;
            }
            if obj.referenced.swap(false, Ordering::Relaxed) {
                self.order.push_back((k, g));
            } else if let Some((obj, _)) = self.map.remove(&k) {
                gone.push(obj);
            }
        }
    }
}

impl Objects {
    /// A table of at most `max` objects (at least 1), whose
    /// invalidations drop `tier`'s version records.
    pub(crate) fn new(max: usize, tier: Option<Arc<DiskTier>>) -> Self {
        Objects {
            table: RwLock::new(Table::default()),
            tier,
            max: max.max(1),
            invalidations: AtomicU64::new(0),
            gates: Mutex::new(HashMap::new()),
        }
    }

    /// The object tracked under `key`, marked referenced.
    pub(crate) fn get(&self, key: &Key) -> Option<Arc<Object>> {
        self.with(&key.0, key.1.as_deref(), Arc::clone)
    }

    /// `f` of the object tracked under the key of `path` and `version`
    /// (the version id a request names; no [`Key`] made), marked
    /// referenced, called under the table's shared lock (no
    /// reference taken: a hit's whole path). `f` must not wait (see
    /// Locking in the module documentation).
    pub(crate) fn with<R>(
        &self,
        path: &Path,
        version: Option<&str>,
        f: impl FnOnce(&Arc<Object>) -> R,
    ) -> Option<R> {
        let t = self.table.read();
        let (obj, _) = t.map.get(&(path, version) as &dyn KeyView)?;
        if !obj.referenced.load(Ordering::Relaxed) {
            obj.referenced.store(true, Ordering::Relaxed);
        }
        Some(f(obj))
    }

    /// Whether `key` tracks an object `f` holds for (not marking it
    /// referenced).
    pub(crate) fn tracks(&self, key: &Key, f: impl FnOnce(&Object) -> bool) -> bool {
        self.table.read().map.get(key).is_some_and(|(o, _)| f(o))
    }

    /// The gate of lookups of `key` (see the module documentation).
    pub(crate) fn gate(&self, key: &Key) -> Gate<'_> {
        let gate = self.gates.lock().entry(key.clone()).or_default().clone();
        Gate {
            objects: self,
            key: key.clone(),
            gate,
        }
    }

    /// The invalidation count, to pass to [`insert`](Self::insert).
    pub(crate) fn seq(&self) -> u64 {
        self.table.read().seq
    }

    /// Tracks `obj` under `key` (replacing what was there) unless an
    /// invalidation came after `seq` was read; evicts objects past the
    /// bound. Returns whether it was inserted.
    pub(crate) fn insert(&self, key: Key, obj: Arc<Object>, seq: u64) -> bool {
        let mut gone = Vec::new();
        let inserted = {
            let mut t = self.table.write();
            if t.seq != seq {
                false
            } else {
                gone.extend(t.remove(&key));
                let gen = t.next_gen;
                t.next_gen += 1;
                t.order.push_back((key.clone(), gen));
                t.map.insert(key, (obj, gen));
                t.evict(self.max, &mut gone);
                true
            }
        };
        drop(gone);
        inserted
    }

    /// Forgets the latest version of `path` (a write changed it): later
    /// reads look it up again. Versions asked for by id stay: they cannot
    /// change. The disk tier's record of its version is dropped too,
    /// after the entry (a record written meanwhile by a reader is dropped
    /// by that reader, which finds the entry gone: `Objects::tracks`), so
    /// that a restart after the write does not serve the version it
    /// replaced.
    pub(crate) fn invalidate(&self, path: &Path) {
        self.invalidations.fetch_add(1, Ordering::Relaxed);
        let gone = {
            let mut t = self.table.write();
            t.seq += 1;
            t.remove(&Key(path.clone(), None))
        };
        drop(gone);
        if let Some(tier) = &self.tier {
            tier.drop_record(record_key(path.as_ref()));
        }
    }

    /// Forgets `obj` if `key` still tracks it (a read found it stale).
    pub(crate) fn remove_if(&self, key: &Key, obj: &Arc<Object>) {
        let gone = {
            let mut t = self.table.write();
            match t.map.get(key) {
                Some((o, _)) if Arc::ptr_eq(o, obj) => t.remove(key),
                _ => None,
            }
        };
        drop(gone);
    }

    /// Objects tracked now.
    pub(crate) fn len(&self) -> usize {
        self.table.read().map.len()
    }

    /// Invalidations so far.
    pub(crate) fn invalidations(&self) -> u64 {
        self.invalidations.load(Ordering::Relaxed)
    }

    /// The most objects tracked at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}
