//! The objects a [`CachedStore`](crate::CachedStore) tracks: per (path,
//! requested version) the version it caches, that version's mapping in
//! the foliocache cache, and when it was last validated; at most
//! `max_objects` of them, the least recently used going first.
//!
//! ```text
//!   Table (one mutex)
//!     map: (path, version asked) ──> Object { meta, attributes, file, validated }, tick
//!     lru: tick ──> key            (oldest tick evicted past max_objects)
//!     seq: bumped by every invalidation
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
//! The table's mutex and the gates' map's are leaves, held for a hash
//! lookup and a B-tree update; never across a store call or a read. A
//! gate is held across a HEAD, and taken with no other lock held. Objects evicted or invalidated
//! are dropped after it is released (closing a mapping frees its folios).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use foliocache::File;
use object_store::path::Path;
use object_store::{Attributes, ObjectMeta};
use parking_lot::Mutex;
use tokio::sync::Mutex as AsyncMutex;

/// What a table entry is looked up by: the path, and the version id the
/// request named (`None`: the latest version, the one writes invalidate).
pub(crate) type Key = (Path, Option<String>);

/// One version of one object, cached.
#[derive(Debug)]
pub(crate) struct Object {
    /// The version: its size, e_tag, version id.
    pub(crate) meta: ObjectMeta,
    /// Its attributes, as the HEAD that found it returned them.
    pub(crate) attributes: Attributes,
    /// Its mapping in the cache, over a [`RemoteBacking`](crate::remote::RemoteBacking).
    pub(crate) file: File,
    /// When the store last said this is the current version.
    pub(crate) validated: Instant,
}

/// The tracked objects (see the module documentation).
#[derive(Debug)]
pub(crate) struct Objects {
    table: Mutex<Table>,
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
    map: HashMap<Key, (Arc<Object>, u64)>,
    lru: BTreeMap<u64, Key>,
    tick: u64,
    seq: u64,
}

impl Table {
    /// Marks `key` (present, at `tick`) used now.
    fn touch(&mut self, key: &Key) -> Option<Arc<Object>> {
        self.tick += 1;
        let now = self.tick;
        let (obj, tick) = self.map.get_mut(key)?;
        let old = std::mem::replace(tick, now);
        let obj = obj.clone();
        if let Some(k) = self.lru.remove(&old) {
            self.lru.insert(now, k);
        }
        Some(obj)
    }

    /// Removes `key`'s entry.
    fn remove(&mut self, key: &Key) -> Option<Arc<Object>> {
        let (obj, tick) = self.map.remove(key)?;
        self.lru.remove(&tick);
        Some(obj)
    }
}

impl Objects {
    /// A table of at most `max` objects (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        Objects {
            table: Mutex::new(Table::default()),
            max: max.max(1),
            invalidations: AtomicU64::new(0),
            gates: Mutex::new(HashMap::new()),
        }
    }

    /// The object tracked under `key`, marked used.
    pub(crate) fn get(&self, key: &Key) -> Option<Arc<Object>> {
        self.table.lock().touch(key)
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
        self.table.lock().seq
    }

    /// Tracks `obj` under `key` (replacing what was there) unless an
    /// invalidation came after `seq` was read; evicts the least recently
    /// used objects past the bound. Returns whether it was inserted.
    pub(crate) fn insert(&self, key: Key, obj: Arc<Object>, seq: u64) -> bool {
        let mut gone = Vec::new();
        let inserted = {
            let mut t = self.table.lock();
            if t.seq != seq {
                false
            } else {
                gone.extend(t.remove(&key));
                t.tick += 1;
                let tick = t.tick;
                t.lru.insert(tick, key.clone());
                t.map.insert(key, (obj, tick));
                while t.map.len() > self.max {
                    let Some((_, k)) = t.lru.pop_first() else {
                        break;
                    };
                    gone.extend(t.map.remove(&k).map(|(o, _)| o));
                }
                true
            }
        };
        drop(gone);
        inserted
    }

    /// Forgets the latest version of `path` (a write changed it): later
    /// reads look it up again. Versions asked for by id stay: they cannot
    /// change.
    pub(crate) fn invalidate(&self, path: &Path) {
        self.invalidations.fetch_add(1, Ordering::Relaxed);
        let gone = {
            let mut t = self.table.lock();
            t.seq += 1;
            t.remove(&(path.clone(), None))
        };
        drop(gone);
    }

    /// Forgets `obj` if `key` still tracks it (a read found it stale).
    pub(crate) fn remove_if(&self, key: &Key, obj: &Arc<Object>) {
        let gone = {
            let mut t = self.table.lock();
            match t.map.get(key) {
                Some((o, _)) if Arc::ptr_eq(o, obj) => t.remove(key),
                _ => None,
            }
        };
        drop(gone);
    }

    /// Objects tracked now.
    pub(crate) fn len(&self) -> usize {
        self.table.lock().map.len()
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
