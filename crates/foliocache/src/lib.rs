//! foliocache: a page cache that programs embed.
//!
//! # The problem
//! A storage engine that opens its files with `O_DIRECT` owns its IO but
//! loses the kernel's page cache: every read is a system call and a device
//! trip. Buffered IO keeps the cache but pays a system call per hit, lets
//! the kernel decide how much memory the data takes, and evicts it on the
//! kernel's terms. foliocache is the kernel's page cache in user space,
//! over `O_DIRECT` files: a hit is a lookup and a memory copy with no
//! system call, memory is bounded by the capacity the program gives it,
//! and misses read ahead, large folios, workingset-aware reclaim, writeback
//! and `cachestat` work as the kernel's do.
//!
//! # Concepts
//! - A [`Cache`] owns one arena of memory (its capacity), cut into
//!   *folios*: power-of-two runs of 4 KiB pages, each with a descriptor
//!   (reference count, lock, flags) as the kernel's `struct folio`.
//! - A [`File`] opened through it reads and writes through the file's
//!   *mapping* (the kernel's `address_space`): an index from page offset to
//!   folio, or to the *shadow* an evicted folio left, which tells a later
//!   miss how recently it was evicted (refault detection).
//! - A miss reads a readahead window into new folios with one IO per run;
//!   a write dirties folios that the flusher, a throttled writer or a sync
//!   writes back. When the arena is full, reclaim evicts from the inactive
//!   end of two LRU lists.
//! - The arena is mapped whole but faulted in as it is used, 2 MiB at a
//!   time ([`Populate`]); a capacity above what the process may use (its
//!   memory cgroup's limit, the machine's available memory) is refused at
//!   build; while memory is short the cache shrinks toward a floor and
//!   gives the memory back, and grows again afterwards
//!   ([`PressureConfig`]).
//! - Two layers: the crate root is the API most programs need; the
//!   [`filemap`] module is the advanced layer underneath (a mapping's
//!   folios, locked or referenced, as the kernel's `filemap_*` calls hand
//!   them out), for a program that manages folios itself.
//! - [`File::read_many`] reads a batch of [`ReadReq`]s from one thread:
//!   the misses of all of them go to the IO engine in one submission. A
//!   [`ReadQueue`] pipelines a stream of reads the same way: each starts
//!   when queued, and they complete oldest first.
//!
//! The modules follow the kernel's `mm/` files: `filemap` (lookup, add,
//! the read path and readahead's IO, pins), `readahead` (the windows),
//! `truncate`, `lru`, `vmscan` (reclaim and shadow trimming), `writeback`
//! (with `bdi`, its control), `workingset`, `folio` (descriptors and the
//! cache's memory), `mm` (allocation that reclaims, the state the parts
//! share) and the `arena` (the page allocator). They form layers: a module
//! names only modules of its own layer and below, and calls no method of
//! `Mapping`, `File`, `Cache` or `CacheInner` defined only above it. The
//! two import cycles are the kernel's: `filemap`, `mm` and `vmscan`
//! (`filemap.c`, `page_alloc.c` and `vmscan.c`), and `lru` and
//! `workingset` (`swap.c` and `workingset.c`). `docs/design.md` in the
//! repository draws them, and a test (`tests/it/layering.rs`) keeps them
//! so.
//!
//! # Locking
//! Every lock, outermost first. A thread holding a lock takes only locks
//! below it; the function named takes the lower lock while holding the
//! upper one.
//!
//! ```text
//! inode_lock (per file, rwsem: writers shared, extending writes, set_len,
//! │           punch_hole, collapse_range and insert_range exclusive)
//! ├─ wb_lock -- writeback::throttle, shift_range (writeback first)
//! ├─ invalidate_lock (per file, rwsem: a read's folio creation shared,
//! │  │               set_len/punch_hole/collapse/insert exclusive)
//! │  │               -- truncate::truncate_to, shift_range
//! │  └─ wb_lock (per file, one writeback at a time: FileWb::lock)
//! │        -- truncate::truncate_to
//! │     └─ folio lock (sleeping; several only in index order)
//! │           -- Mapping::writeback (dirty_batch), InvalidateLocked::truncate_bytes
//! ├─ folio lock -- File::write_at (Mapping::grab_folios)
//! │  ├─ index lock (per file, the xarray's) -- Mapping::add_folio,
//! │  │     remove_locked, mark_dirty, start_writeback, remove_frozen
//! │  ├─ LRU lock (per cache) -- lru_add_all, lru_detach, remove_locked
//! │  │  └─ the flusher's wake-up -- Flusher::kick (reclaim met a dirty
//! │  │        folio)
//! │  ├─ buddy lock (the arena's) -- mm's alloc_folio (a write's
//! │  │     gap), FrozenFolio::free (reclaim)
//! │  └─ backing lock (per file, held only to clone the backing) --
//! │        Mapping::backing, for the IO that fills or writes the folio
//! └─ readahead state (per handle) -- taken and dropped before any folio
//!    lock (File::readahead plans a window, then builds it unlocked)
//!
//! invalidate_lock (shared) -- Mapping::read's miss (create_folio,
//! │                            sync_readahead), File::read_many's misses
//! │                            (start_misses)
//! └─ folio lock, index lock, LRU lock, buddy lock, as above
//!
//! LRU lock -- reclaim's isolate_lru_folios takes folios off the lists
//!             (a locked folio is only seen as busy: no folio lock is
//!             taken under it) and drops it; shrink_folio_list then
//!             trylocks, freezes and removes them (folio lock, index lock,
//!             buddy lock, as above) and takes it again to put back the
//!             folios that stay
//!
//! trimming (per cache, one shadow trimmer) -- vmscan's maybe_trim_shadows
//! └─ mapping table (per cache) -- mm's live_mappings
//!    (dropped before the trimmer takes each file's index lock)
//!
//! closed_dirty (per cache), the flusher's wake-up, the writeback
//! pool's queue and batch counters (`wbpool.rs`) and a file's queue of
//! uncached writes' writeback (`FileWb::kick_uncached`): leaf locks, held
//! only to move a list, a span, a flag or a count. The pool's batch jobs
//! (backing writes) take no lock of the cache: `Mapping::writeback` waits
//! for them holding its `wb_lock` and folio locks; its detached jobs (an
//! async sync, an uncached writes' writeback) take the locks a blocking
//! sync takes, in their order.
//! ```
//!
//! A name ending in `_locked` takes a folio its caller holds locked (a
//! [`filemap::LockedFolio`]); a function that needs a lock of the cache's
//! held takes its guard's contents as a parameter (`activate_on` takes the
//! `&mut` LRU lists).
//!
//! A folio lock sleeps; the index, LRU, buddy, backing, mapping-table and
//! `closed_dirty` locks never do and are held for a bounded walk. Nothing
//! waits for memory (which may reclaim and write back) while holding a
//! folio lock it could not give up: a write's grab waits only for its
//! first folio. The lock of a folio is taken through [`FolioRef::lock`]
//! and released by its guard, [`filemap::LockedFolio`].
//!
//! [`FolioRef::lock`]: filemap::FolioRef::lock
//!
//! # Example
//! ```no_run
//! let cache = foliocache::Cache::builder().capacity(64 << 20).build()?;
//! let file = cache.open("data.bin")?;
//! let mut buf = [0u8; 100];
//! let n = file.read_at(&mut buf, 12345)?;
//!
//! let log = cache.open_options().read(true).write(true).create(true).open("log.bin")?;
//! log.write_at(b"record", log.len())?;
//! log.sync_data()?; // durable: written back and fdatasync'ed
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # When not to use it
//! - Data read once, or larger than any memory you would give it, read
//!   sequentially: `O_DIRECT` alone, or `RWF_DONTCACHE`, costs less.
//! - Files that other processes write while you cache them: the cache is
//!   coherent within one process (every handle of a file opened through one
//!   [`Cache`] shares its mapping), not with writers outside it. For a
//!   group of processes (a program that forks its workers), use
//!   [`SharedCache`]: one cache in shared memory, coherent across them.
//! - Memory-mapped access: the cache hands out copies, or borrowed slices
//!   ([`File::pin`], [`CachedFile::read_with`]), not mappings.

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

// Unsafe code lives only in the modules marked `allow(unsafe_code)`, each
// with its reason. (The arena and the copy routines are also the
// benchmarks' own, through `internals`: what only those use is dead code
// without it.)
// Unsafe: maps the arena and hands out its memory by address.
#[allow(unsafe_code)]
#[cfg_attr(not(feature = "internals"), allow(dead_code, unreachable_pub))]
mod arena;
mod bdi;
mod cache;
mod cached;
// Unsafe: copies in and out of arena memory by address, racing readers.
#[allow(unsafe_code)]
#[cfg_attr(not(feature = "internals"), allow(dead_code, unreachable_pub))]
// (Its atomics are memory accesses of the copy, and a static that records
// the copy routines chosen: never part of a protocol the loom models
// check.)
#[allow(clippy::disallowed_types)]
mod copy;
mod errseq;
mod file;
// Unsafe: the index's item type, a hit's and a write's copies, reclaim's
// folio-to-mapping step, a pin's loan of a folio's bytes (`filemap::pin`).
#[allow(unsafe_code)]
pub mod filemap;
mod flags;
// Unsafe: the folio lock's parking, the descriptor table, a locked folio's memory for IO.
#[allow(unsafe_code)]
mod folio;
pub mod future;
// Unsafe: maps the guardian's shared memory file, reads and writes it by
// offset; its child is a `clone` that makes only system calls. (Its
// atomics live in memory another process reads: never in a loom model.)
#[allow(unsafe_code, clippy::disallowed_types)]
mod guardian;
mod huge_hints;
mod kick;
// `Identity` is public for the state file's tests through `internals`.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
mod loaded;
mod lru;
#[cfg(feature = "prometheus")]
pub mod metrics;
mod mm;
mod mrc;
mod pressure;
mod read_many;
mod readahead;
// Unsafe: the shared cache's segment, mapped and read by offset, its
// pages copied by address, its locks futexes. (Its atomics live in memory
// other processes write: never in a loom model.)
#[allow(unsafe_code, clippy::disallowed_types)]
mod shared;
mod shift;
// Unsafe: maps memory files shared by processes and reaches them by
// checked offset (the guardian's segment, the group's, the arena's
// shared region). (Its atomics live in memory other processes write:
// never in a loom model.)
#[allow(unsafe_code, clippy::disallowed_types)]
mod shm;
mod stats;
mod sync;
mod truncate;
mod vmscan;
mod warm;
// Unsafe: a pool job borrows the caller's closure for the call's length.
#[allow(unsafe_code)]
mod wbpool;
mod workingset;
mod write;
mod writeback;

pub use arena::Populate;
pub use cache::{parse_size, Cache, CacheBuilder, CacheStats, MemoryUsage};
pub use cached::{AnyFile, CacheFigures, CachedFile, SharedHandle};
pub use file::File;
pub use filemap::pin::{OwnedPin, Pinned};
pub use flags::ReadFlags;
pub use guardian::{persist, Guardian, WrittenBack};
pub use loaded::WarmProgress;
pub use mrc::{CurvePoint, HitRatioCurve, CAPACITY_RATIOS, KNOWN_BOUND};
pub use pressure::{capacity_fits, PressureConfig};
pub use read_many::{Completed, ReadQueue, ReadReq};
pub use readahead::{Advice, ReadaheadConfig, Window};
pub use shared::{Flusher, Host as SharedHost, ReadCounts, SharedCache, SharedFile, SharedStats};
pub use stats::{Latencies, LATENCY_BUCKETS};
pub use warm::{WarmLoad, WarmSaved, WarmStart};
pub use workingset::CacheStat;
pub use write::{OpenOptions, WriteFlags};

/// What the benchmarks and the crate's own tests reach inside the cache:
/// the arena and the copy routines on their own, the A/B switches that
/// compare a mechanism with the one it replaced (one folio at a time
/// against batches), and the tuning the tests check against (a write's
/// piece size). Not part of the API: enabled by the `internals`
/// feature, hidden from the documentation, changed without notice.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    /// The folio arena.
    pub mod arena {
        pub use crate::arena::*;
    }
    /// The copies a hit makes.
    pub mod copy {
        pub use crate::copy::*;
    }
    /// The warm-restart state file's format.
    pub mod warm {
        pub use crate::warm::format::*;
    }
    /// An async job's end and a task's wait for it (the loom models).
    pub use crate::future::job::{Done as AsyncDone, Wait as AsyncWait};
    pub use crate::readahead::Insert;
    pub use crate::stats::Probe as MrcProbe;
    /// The shared cache's crash points.
    pub mod shared_crash {
        pub use crate::shared::crash::{die_at, steps};
    }
    pub use crate::write::WRITE_CHUNK_PAGES;
    pub use crate::writeback::{THROTTLE_MIN_PAGES, UNCACHED_AHEAD_PAGES};
}
