//! [`CacheHint`]: what the caller of one request knows of its bytes'
//! future, passed in the request's `extensions`.
//!
//! # The problem
//! A cache that sees only ranges cannot tell a query, whose blocks come
//! back, from a compaction, which reads each input once and deletes it;
//! nor a write-ahead log read once at recovery from an SST read all day.
//! Engines that cache object storage meet the same failures again and
//! again: a compaction's reads evict the query's hot set; a write-through
//! cache drops writes when its queue is full; a new file is evicted before
//! the compaction that reads it once, and every one of its blocks is a
//! GET. The engine knows which request is which (SlateDB tags each call
//! with who makes it, `Main`, `Reader`, `Compactor` or `GC`, and what it
//! touches, a WAL or a compacted SST), so the request says it.
//!
//! # Who sets what
//! | caller (SlateDB's tags as the example) | request | hint |
//! |---|---|---|
//! | `Main` writing a WAL or an L0 SST a `Compactor` reads soon | put | [`KeepUntilRead`](CacheHint::KeepUntilRead) |
//! | `Compactor` reading its inputs (compacted SSTs, deleted after) | get | [`ReadOnce`](CacheHint::ReadOnce) |
//! | `Compactor` writing its output (the next queries read it) | put | [`Normal`](CacheHint::Normal) |
//! | `Reader`, `Main` serving gets and scans | get | [`Normal`](CacheHint::Normal) |
//! | `GC` reading manifests, a backup copying everything | get, put | [`DontCache`](CacheHint::DontCache) |
//! | a reader of a whole object from its start (the object mount's read at offset 0) | get | [`Sequential`](CacheHint::Sequential) |
//!
//! ```
//! use foliocache_object_store::CacheHint;
//! use object_store::{GetOptions, PutOptions};
//!
//! let mut get = GetOptions::default();
//! get.extensions.insert(CacheHint::ReadOnce);
//! let mut put = PutOptions::default();
//! put.extensions.insert(CacheHint::KeepUntilRead);
//! assert_eq!(get.extensions.get::<CacheHint>(), Some(&CacheHint::ReadOnce));
//! ```

/// What one request's caller knows of its bytes' future (see the module
/// documentation): put in a request's `extensions`
/// (`GetOptions::extensions`, `PutOptions::extensions`); a request
/// without one is [`Normal`](CacheHint::Normal). Every hint is a matter
/// of what the cache keeps, never of what a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CacheHint {
    /// Cache as usual: a read's bytes stay in memory (and go to the disk
    /// tier when missed again), a put's bytes are written through to the
    /// disk tier.
    #[default]
    Normal,
    /// Read once (a compaction's input, a scan): what is cached is
    /// served, a miss's bytes are read without being kept in memory
    /// (foliocache's `DONTCACHE`: its folios go after the read), and a
    /// disk tier chunk the miss finds is not promoted: it becomes its
    /// set's first to go (its kept-until-read mark cleared), so that the
    /// query's hot chunks outlive the compaction's. While such a read of
    /// an object is under way, a normal read's tier hits on the same
    /// object are not promoted either (what the tier keeps, never what a
    /// read returns). On a put: as `Normal`.
    ReadOnce,
    /// Neither read into the cache nor written through: a read memory
    /// answers at once (at most 4 MiB, every byte cached) is served from
    /// it, any other is the inner store's own GET, passed through; a put
    /// only invalidates what was cached of its path.
    DontCache,
    /// On a put: written through to the disk tier and kept there until
    /// its first read (the tier's eviction passes over it), unless every
    /// slot of its set (16) is kept: then the least recent kept chunk
    /// goes, counted in [`DiskTierStats::kept_evicted`](crate::DiskTierStats)
    /// (the tier never refuses a write, and a put never fails for it).
    /// For a file read once, soon (a WAL, an L0 SST its compaction
    /// reads). Without a disk tier a put writes nothing through (memory
    /// is filled by reads), and the hint does nothing. What it costs:
    /// kept chunks hold their slots, so a hot set larger than the tier
    /// less the kept bytes loses those slots' hits. On a get: as
    /// `Normal`.
    KeepUntilRead,
    /// On a get: the caller reads on from this range to the object's end
    /// (a file read from its start, as the object mount marks a read at
    /// offset 0): once the range's bytes are in, the object is a stream's
    /// and its prefetch starts, as it would after three reads in a row, so
    /// that a whole-object reader does not pay a round trip to the store
    /// for each of its first reads before the pipe fills. What it costs
    /// where the caller stops early: the prefetch's first span (8 MiB,
    /// at most the object) fetched and cached. On a put: as `Normal`.
    Sequential,
}
