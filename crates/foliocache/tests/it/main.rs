//! The cache's integration tests, one binary (`cargo test -p foliocache
//! --test it`), a module per theme. `loom`, `memory_audit` and `soak` are
//! binaries of their own: see `docs/testing.md`.

mod common;

/// The modules in layers: no import goes up a layer, no import cycle is
/// longer than three modules (`docs/design.md`).
mod layering;

/// One cache for many processes: a model, forked processes, coherence,
/// kills, a scribbled segment.
mod shared;

/// One face for both caches (`CachedFile`): the same tests, a model test
/// included, on `File`, `SharedFile` and `AnyFile` of each.
mod face;

/// The page arena: allocation by order, splitting and merging, populate.
mod arena;

/// The guardian: a writer killed at random moments loses no byte its
/// writes accepted.
mod guardian;

/// Memory: a lazily populated arena, the capacity checked against the
/// process's limits, giving memory back under pressure.
mod memory;

/// Reads through the cache: against the file read directly, in place
/// (`read_with`), borrowed (`pin`), under memory pressure, and never another file's bytes.
mod read {
    mod basic;
    mod pin;
    mod pressure;
    mod security;
    mod with;
}

/// Batched reads (`File::read_many`): a model, faults, concurrency.
mod read_many;

mod future;

/// Readahead: the window's size and its asynchronous marker, sequential
/// and random streams, advice.
mod readahead;

/// Random reads and readahead: the kernel's window at most beside cached
/// pages, memory only for the pages a window reads.
mod readahead_random;

/// Uncached reads and writes (`DONTCACHE`) and the figures that show them.
mod dontcache;

/// The filemap operations on a `Mapping`, and `grab_folios`.
mod filemap {
    mod grab;
    mod ops;
}

/// Reclaim and refaults: the workingset rules, eviction shadows, and the
/// policy under skewed access.
mod workingset {
    mod curves;
    mod rules;
    mod shadows;
    mod skew;
    mod streams;
}

/// The write path, a module per behaviour it specifies; each holds its
/// properties, and its model and stress tests where it has them.
mod write {
    /// What a write makes visible, and to whom: the bytes through the
    /// cache and on the backing, every handle and open of a path sharing
    /// one file, the whole write path against a file image (`model`), and
    /// writers, readers and syncs on real threads (`stress`).
    mod visible {
        mod bytes;
        mod handles;
        mod model;
        mod stress;
    }
    /// What a sync promises, seen from another process.
    mod durability;
    /// Opening for writing: `OpenOptions` and what a handle may do.
    mod open;
    /// The file's size and holes: extending writes, `set_len`,
    /// `punch_hole`, the largest file, and races on them.
    mod size;
    /// Dirty data and its writeback: the counts, the dirty limit and
    /// throttling, the flusher (`dirty`); what a throttled writer waits
    /// for (`throttle`); writeback on the pool and through io_uring; a
    /// writer that needs memory waits for writeback (`reclaim`).
    mod writeback {
        mod dirty;
        mod pool;
        mod reclaim;
        mod throttle;
        mod uring;
    }
    /// `allocate` (`fallocate`).
    mod allocate;
    /// `discard`: a file's unwritten data dropped.
    mod discard;
    /// Error reporting (errseq): a failed writeback or sync reported once
    /// per handle, the data kept and retried.
    mod errors;
    /// Memfiles: files with no backing.
    mod memfile;
    /// Space reserved at write: a full filesystem fails the write.
    mod reserve;
    /// `collapse_range` and `insert_range`.
    mod shift;
    /// Uncached writes (`DONTCACHE`).
    mod uncached;
}

/// Fault injection at the IO seam (`backing::FaultyBacking`): reads, and
/// the matrix of every path against every fault (the write path's errors
/// are `write::errors`).
mod faults {
    mod matrix;
    mod reads;
}

/// Power loss: random operation sequences over a backing that records
/// every change and sync, and every crash state of the record checked
/// against what the syncs acknowledged (`test_support::crash`); and
/// broken backings that the check must catch.
mod crash {
    mod broken;
    mod driver;
    mod random;
}

/// The cache's own threads run the builder's start hook.
mod threads;
/// Warm restarts: the state file saved and loaded, changed files
/// skipped, bad state files, the capacity, the parser.
mod warm;

/// Regression tests, one a bug found and fixed.
mod regress {
    mod close_size;
    mod close_writeback_error;
    mod dontcache_write_error;
    mod failed_write_size;
    mod late_mapping_drop;
    mod lru_putback;
    mod read_past_truncate;
    mod reclaim_dirty_below_background;
}
