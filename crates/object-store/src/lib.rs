//! foliocache in front of object storage: an [`object_store::ObjectStore`]
//! whose reads are served from a foliocache page cache.
//!
//! # The problem
//! Engines on object storage (SlateDB, lance, DataFusion and others) read
//! small ranges of large immutable objects, over and over, at tens of
//! milliseconds a request. Each writes its own range cache, and each meets
//! the same problems: fixed parts that fetch megabytes per miss, memory
//! past its limit, concurrent misses of one range making several requests.
//! foliocache already solves them for local files: memory bounded
//! (metadata included), folios of 4 KiB to 2 MiB, readahead for sequential
//! reads, refault-aware reclaim, one read per missing folio however many
//! threads miss it. This crate puts an object behind a foliocache mapping.
//!
//! # Concepts
//! - A [`CachedStore<S>`] wraps any `S: ObjectStore` and is one itself
//!   (object_store 0.14, the version SlateDB 0.18 and lance 14 build on).
//! - Each object read is tracked as **one version**: its first read's
//!   request (the GET of a bounded range's blocks, whose bytes it keeps,
//!   with a disk tier too; else, or where the tier likely holds the
//!   object's chunks, a HEAD) finds its size and e_tag (or
//!   version id), and a mapping of the [`foliocache::Cache`]
//!   is opened over a backing whose block reads are **ranged GETs pinned to
//!   that version** (`If-Match`, or the version id). Folios are keyed by
//!   (path, version, offset): the mapping is the version, its index the
//!   offset.
//! - A read copies what is cached on the caller's task without waiting;
//!   the rest is read through the cache's read path on tokio's blocking
//!   pool: missing folios are inserted and read in runs, **one GET per run
//!   of contiguous folios**, sequential reads grow readahead windows, and a
//!   second reader of a folio being read waits for it instead of sending
//!   its own GET.
//! - **Coherence**: writes through the store (put, multipart completion,
//!   delete, copy, rename) invalidate what they touch; a read whose pinned
//!   GET finds the version gone (`Precondition`, `NotFound`) looks the
//!   object up again and reads the new version (a GET of a prefetch
//!   that finds it gone marks it for the next read). Objects changed by
//!   others are seen after [`CachedStoreBuilder::revalidate_after`] (a
//!   GET answered by the cached version counts as a HEAD that found it
//!   unchanged), or at once through [`CachedStore::invalidate`]. Errors of the inner store pass
//!   through and are never cached. Listing passes through. After a
//!   restart over a disk tier, an object's first read is served from the
//!   version the tier recorded, its HEAD sent beside the read (a version
//!   replaced by another writer meanwhile is read until that HEAD
//!   answers, then only the new one: docs/object-store.md, "Restart").
//! - A [`DiskTier`] (optional, [`CachedStoreBuilder::disk_tier`]) keeps
//!   64 KiB chunks of object versions in a local file opened `O_DIRECT`,
//!   between memory and the remote store: checksummed, reopened warm
//!   without reading an index, a chunk admitted when a page of it misses in
//!   memory a second time (see [`disk`]); it keeps each object's latest
//!   version too, so that a restarted store needs no HEAD before a hit.
//! - **GETs sized by the remote**: each GET's latency and bandwidth are
//!   measured; with a disk tier, a point miss among others near it
//!   fetches the aligned window around it (half of latency x bandwidth: a
//!   GET that small is latency-bound) and keeps it all on disk, concurrent
//!   misses of one window making one GET; a stream's (more than two reads
//!   in a row) readahead windows are set to latency x bandwidth, and any
//!   other miss fetches what it asked for (module `window`,
//!   docs/object-store.md).
//! - **Bounds**: the folios are the cache's (its capacity, its reclaim);
//!   the objects tracked are at most
//!   [`max_objects`](CachedStoreBuilder::max_objects), evicted by CLOCK
//!   (its mapping closes, its folios go); the remote GET bytes in flight
//!   are at most [`get_budget`](CachedStoreBuilder::get_budget) (a GET
//!   takes its bytes before it is sent, gives them back once they are in
//!   the folios or the tier), and a GET's body streams into the folios
//!   chunk by chunk: no buffer of its size is made.
//!
//! # Locking
//! | what | takes | may block |
//! |---|---|---|
//! | the table of tracked objects | one rwlock, a leaf: shared for a lookup, exclusive for an insert or a removal; never across a store call or a read | no |
//! | a lookup of an object not tracked | its key's gate (an async mutex) across the HEAD or first GET | the task waits for the lookup before it |
//! | a read | the cache's locks, as [`foliocache::File::read_at`] takes them; a miss runs on tokio's blocking pool, never on a runtime worker | a miss: for its GET, on the blocking thread |
//! | a miss's GET | no lock of this crate; the folio locks of the run it fills | for the GET, driven by the runtime's handle |
//! | the GET budget | its bytes, taken with the run's folio locks held; a holder waits on nothing that takes a folio lock | while the bytes in flight would pass the budget |
//!
//! # Example
//! ```
//! use foliocache_object_store::CachedStore;
//! use object_store::{memory::InMemory, path::Path, ObjectStore, ObjectStoreExt};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let cache = foliocache::Cache::builder().capacity(16 << 20).build()?;
//! let store = CachedStore::new(InMemory::new(), cache);
//! let path = Path::from("sst/000001.sst");
//! store.put(&path, vec![1u8; 1 << 20].into()).await?;
//!
//! let block = store.get_range(&path, 65536..69632).await?; // one GET, no HEAD
//! let again = store.get_range(&path, 65536..69632).await?; // memory
//! assert_eq!(block, again);
//! let s = store.stats();
//! assert_eq!((s.remote_heads, s.remote_gets, s.hits), (0, 1, 1));
//!
//! store.put(&path, vec![2u8; 1 << 20].into()).await?; // invalidates
//! assert_eq!(store.get_range(&path, 0..1).await?[0], 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # When not to use it
//! - Objects that others rewrite under the same path and that must be read
//!   fresh every time: every read would need a HEAD; read them from the
//!   inner store.
//! - Data read once (a full scan that will not come back): the inner
//!   store's streaming GET costs less.
//! - Outside tokio, misses block the executor's thread (the store works,
//!   but one miss holds a thread for its GET).

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod disk;
mod forward;
mod hint;
mod window;

pub use disk::{DiskTier, DiskTierStats, TierCurve, TierPoint, TIER_RATIOS};
pub use hint::CacheHint;

/// The cache over one version of object_store's trait, `$name` built from
/// the files of `src/cached/` with `object_store` naming `$krate`: one
/// code, compiled once per version enabled. Where the versions differ:
/// `$field`s, the fields of a `GetResult` the version has beyond 0.13's.
macro_rules! trait_version {
    ($(#[$attr:meta])* $name:ident, $krate:path, { $($field:ident: $value:expr),* }) => {
        $(#[$attr])*
        #[path = "cached"]
        pub mod $name {
            use $krate as object_store;

            mod budget;
            #[cfg(feature = "prometheus")]
            mod metrics;
            mod objects;
            mod read;
            mod record;
            mod remote;
            mod store;
            mod throttled;
            mod through;
            mod upload;

            pub use store::{
                CachedStore, CachedStoreBuilder, CachedStoreStats, TierCurves, DEFAULT_MAX_OBJECTS,
                DEFAULT_WRITE_QUEUE,
            };
            pub use throttled::Throttled;

            /// A `GetResult` of this version.
            fn get_result(
                payload: object_store::GetResultPayload,
                meta: object_store::ObjectMeta,
                range: std::ops::Range<u64>,
                attributes: object_store::Attributes,
            ) -> object_store::GetResult {
                object_store::GetResult {
                    payload,
                    meta,
                    range,
                    attributes,
                    $($field: $value),*
                }
            }
        }
    };
}

trait_version! {
    /// [`v014::CachedStore`] for object_store 0.14's trait
    /// (parquet 60, SlateDB 0.18, lance 14): feature `object-store-014`
    /// (default), re-exported at the crate's root.
    #[cfg(feature = "object-store-014")]
    v014, ::object_store, { extensions: Default::default() }
}

trait_version! {
    /// [`v013::CachedStore`] for object_store 0.13's trait
    /// (DataFusion 55): feature `object-store-013`, re-exported at the
    /// crate's root when `object-store-014` is off.
    #[cfg(feature = "object-store-013")]
    v013, ::object_store_013, {}
}

#[cfg(not(any(feature = "object-store-013", feature = "object-store-014")))]
compile_error!("foliocache-object-store implements object_store's trait: enable feature `object-store-014` (the default) or `object-store-013`, or both");

#[cfg(feature = "object-store-014")]
pub use v014::{
    CachedStore, CachedStoreBuilder, CachedStoreStats, Throttled, TierCurves, DEFAULT_MAX_OBJECTS,
    DEFAULT_WRITE_QUEUE,
};

#[cfg(all(feature = "object-store-013", not(feature = "object-store-014")))]
pub use v013::{
    CachedStore, CachedStoreBuilder, CachedStoreStats, Throttled, TierCurves, DEFAULT_MAX_OBJECTS,
    DEFAULT_WRITE_QUEUE,
};

/// What [`forward_object_store!`] names from this crate's dependencies
/// (not an API).
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use futures_util::stream::BoxStream;
    #[cfg(feature = "object-store-014")]
    pub use object_store;
    #[cfg(feature = "object-store-013")]
    pub use object_store_013;
    #[cfg(all(feature = "object-store-013", not(feature = "object-store-014")))]
    pub use object_store_013 as object_store;
}

/// The example of `docs/object-store.md`, run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/object-store.md")]
struct ObjectStoreDoc;
