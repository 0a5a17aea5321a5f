//! foliocache: a page cache that programs embed.
//!
//! The Linux page cache's design in user space, over files opened with
//! `O_DIRECT`: a bounded arena of folios, an index per file
//! ([`xarray`]), cache hits with no system call. See the workspace README and
//! `DESIGN.md` for the architecture.
//!
//! This crate is being built up issue by issue. Present now:
//! - [`Cache`] and [`File`]: open a file through the cache and read it; the
//!   first read of a range goes to the file with `O_DIRECT`, later reads are
//!   memory copies with no system call, and the cache never holds more
//!   folio memory than its capacity (reclaim runs inline);
//! - [`arena`]: the folio arena, one mapping sized by the cache's capacity,
//!   handed out by a buddy allocator by order;
//! - [`copy`]: the copy a hit makes (`rep movsb` where it is fast);
//! - [`folio`]: the folio descriptor: reference count, a lock a thread can
//!   sleep on, and the page-cache flags;
//! - [`Mapping`]: a file's page index; an evicted folio leaves a
//!   [`Shadow`] in its slot, and a folio read back soon after starts on
//!   the active list (refault detection, [`workingset`]); shadows are
//!   bounded by a budget;
//! - [`readahead`]: the kernel's on-demand readahead, windows inserted in
//!   one lock hold and read through io_uring;
//! - uncached reads ([`ReadFlags::DONTCACHE`], per read or per file, and
//!   [`Advice::NoReuse`]), reads that never wait for IO
//!   ([`ReadFlags::NOWAIT`]), and `cachestat(2)`'s figures per file
//!   ([`File::cachestat`]);
//! - writes ([`Cache::open_options`], [`File::write_at`]): folios found or
//!   created in batches ([`Mapping::grab_folios`]), dirty until the
//!   background flusher, a throttled writer or `sync_data`/`sync_all`
//!   writes them back in contiguous runs ([`writeback`]); writeback errors
//!   reported once per handle; [`File::set_len`], [`File::punch_hole`],
//!   uncached writes ([`WriteFlags::DONTCACHE`]); and memory files with no
//!   backing store ([`Cache::memfile`]).
//!
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
#![deny(unsafe_code)]
#![warn(missing_docs)]

// Unsafe code lives in these modules only: the arena's mapping and buddy
// allocator, the folio lock's parking, the copies in and out of arena
// memory, the index item type and the read path's IO buffers (filemap,
// readahead, writeback), and reclaim's step from a folio to its mapping.
// (The arena and the copy routines are also the benchmarks' own, through
// `internals`: what only those use is dead code without it.)
#[allow(unsafe_code)]
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
mod arena;
mod cache;
#[allow(unsafe_code)]
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
mod copy;
mod file;
#[allow(unsafe_code)]
pub mod filemap;
mod flags;
#[allow(unsafe_code)]
mod folio;
mod lru;
#[allow(unsafe_code)]
mod readahead;
mod sync;
mod truncate;
#[allow(unsafe_code)]
mod vmscan;
mod workingset;
mod write;
#[allow(unsafe_code)]
mod writeback;

pub use arena::Populate;
pub use cache::{Cache, CacheBuilder, CacheStats, MemoryUsage, ALLOC_WAIT, CLOSED_DIRTY_KEEP};
pub use file::File;
pub use flags::ReadFlags;
pub use readahead::{Advice, ReadaheadConfig, Window};
pub use workingset::CacheStat;
pub use write::{OpenOptions, WriteFlags, WRITE_CHUNK_PAGES};

/// What the benchmarks and the crate's own tests reach inside the cache:
/// the arena and the copy routines on their own, and the A/B switches that
/// compare a mechanism with the one it replaced (one folio at a time
/// against batches). Not part of the API: enabled by the `internals`
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
    pub use crate::readahead::Insert;
}
