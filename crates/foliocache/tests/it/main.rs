//! The cache's integration tests, one binary (`cargo test -p foliocache
//! --test it`), a module per theme. `loom`, `memory_audit` and `soak` are
//! binaries of their own: see `docs/testing.md`.

mod common;

/// The modules in layers: no import goes up a layer, no import cycle is
/// longer than three modules (`docs/design.md`).
mod layering;

/// The page arena: allocation by order, splitting and merging, populate.
mod arena;

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

/// Readahead: the window's size and its asynchronous marker, sequential
/// and random streams, advice.
mod readahead;

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
    mod rules;
    mod shadows;
    mod skew;
}

/// The write path: a model of random writes, POSIX semantics, durability
/// seen by another process, stress with real threads, discarding a file's
/// unwritten data.
mod write {
    mod allocate;
    mod discard;
    mod durability;
    mod model;
    mod pool;
    mod semantics;
    mod shift;
    mod smoke;
    mod stress;
    mod uring;
}

/// Fault injection at the IO seam (`backing::FaultyBacking`): reads,
/// writeback and sync, and the matrix of every path against every fault.
mod faults {
    mod matrix;
    mod reads;
    mod writes;
}

/// Regression tests, one a bug found and fixed.
mod regress {
    mod close_size;
    mod close_writeback_error;
    mod dontcache_write_error;
    mod failed_write_size;
    mod lru_putback;
    mod read_past_truncate;
}
