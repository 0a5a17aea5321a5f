//! The figures a run record holds beside its own: latency percentiles,
//! CPU time, foliocache's statistics over the run, the hot reader's, the
//! memory limit, and how the data was cached or mapped before the run.
//! Each is a nested object of the JSON ([`super::RunRecord`]'s fields
//! name them).

use serde::Serialize;

use crate::cgroup::{Availability, MemCgroup};

/// Latency percentiles, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 75th percentile.
    pub p75: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile: the tail a few slow operations in a thousand
    /// make (a waiter overtaken, a throttled writer).
    pub p999: u64,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: u64,
}

/// CPU seconds of the process during the run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cpu {
    /// User time.
    pub user: f64,
    /// System time.
    pub sys: f64,
}

/// A memory limit a run (or a scenario's kernel engines) ran under.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryLimit {
    /// `cgroup v1`, `cgroup v2`, or `none`.
    pub mechanism: &'static str,
    /// The limit (null: none).
    pub limit_bytes: Option<u64>,
    /// The cgroup (a run's), or the parent its cgroups are made in (a
    /// scenario's).
    pub cgroup: Option<String>,
    /// The cgroup's peak usage during the run (a run's only).
    pub peak_bytes: Option<u64>,
    /// Times the usage hit the limit during the run (a run's only).
    pub limit_hits: Option<u64>,
    /// Why there is no limit.
    pub reason: Option<String>,
}

impl MemoryLimit {
    /// The memory limit of a run in `cg`, with its peak and limit hits so
    /// far, as the report states it.
    pub fn of_run(cg: &MemCgroup) -> MemoryLimit {
        let u = cg.usage();
        MemoryLimit {
            mechanism: cg.version().name(),
            limit_bytes: Some(cg.limit()),
            cgroup: Some(cg.path().display().to_string()),
            peak_bytes: u.peak_bytes,
            limit_hits: u.limit_hits,
            reason: None,
        }
    }

    /// The scenario's memory limit as the report states it.
    pub fn of_scenario(avail: &Availability, limit: u64) -> MemoryLimit {
        let (mechanism, limit_bytes, cgroup, reason) = match avail {
            Availability::Available {
                version, parent, ..
            } => (
                version.name(),
                Some(limit),
                Some(parent.display().to_string()),
                None,
            ),
            Availability::Unavailable(why) => ("none", None, None, Some(why.clone())),
        };
        MemoryLimit {
            mechanism,
            limit_bytes,
            cgroup,
            peak_bytes: None,
            limit_hits: None,
            reason,
        }
    }
}

/// The hot reader beside a run: random reads of a file warmed into the
/// engine's cache first, from before the run started until it ended
/// (counted while the run ran).
#[derive(Debug, Clone, Serialize)]
pub struct HotFigures {
    /// The hot file's size.
    pub file_size: u64,
    /// Bytes per read.
    pub bs: u64,
    /// Pages of the hot file cached after warming, and its pages.
    pub warm_cached_pages: u64,
    /// Pages of the hot file.
    pub pages: u64,
    /// Reads during the run.
    pub reads: u64,
    /// Reads that were not hits (would have waited for IO).
    pub misses: u64,
    /// `(reads - misses) / reads` (null if misses could not be told).
    pub hit_ratio: Option<f64>,
    /// Reads per second.
    pub reads_per_s: f64,
    /// Misses per GiB the job moved while they were counted: the hot set
    /// a stream costs per byte it streams, comparable between streams of
    /// different speeds where the hit ratio is not (a faster stream sweeps
    /// the cache more often between two reads of a hot page). Null if
    /// misses could not be told or the job moved nothing.
    pub misses_per_gib: Option<f64>,
    /// The reads per second it was paced to (`--hot-rate`); 0: unpaced,
    /// as fast as it could.
    pub rate_limit_per_s: u64,
    /// How a miss is told from a hit: `RWF_NOWAIT`, `ReadFlags::NOWAIT`,
    /// or `cachestat` where the library ignores NOWAIT.
    pub miss_detection: String,
}

/// A timeline finer than per second.
#[derive(Debug, Clone, Serialize)]
pub struct FineTimeline {
    /// Seconds per point.
    pub interval_s: f64,
    /// Bytes per second in each full interval of the run.
    pub bw_bytes: Vec<f64>,
}

/// foliocache's figures for a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FolioFigures {
    /// `eager` or `lazy`.
    pub populate: &'static str,
    /// Time the arena took to fault in at build (0 for lazy): paid once
    /// per cache, outside every measurement.
    pub populate_s: f64,
    /// The warm pass before the run (null for a cold run).
    pub warm_s: Option<f64>,
    /// The largest folio, if set by an engine option.
    pub max_folio_bytes: Option<u64>,
    /// Reads issued to the file during the measured run.
    pub io_reads: u64,
    /// Bytes those reads returned.
    pub io_bytes: u64,
    /// Folio lookups that hit during the run.
    pub hits: u64,
    /// Folios created and filled during the run.
    pub misses: u64,
    /// Folios evicted during the run.
    pub evictions: u64,
    /// The flags of every read of the run: `none` or `DONTCACHE`.
    pub read_flags: &'static str,
    /// How the run's writes (`File::write_at_flags`) created their folios
    /// (`File::set_write_insert`, engine option `grab=`): `grab_folios`
    /// (batched, the default) or `grab_folios_single` (one at a time).
    pub write_insert: &'static str,
    /// Whether the arena asked for transparent huge pages (engine option
    /// `huge=on|off`, `CacheBuilder::huge_pages`).
    pub huge_pages: bool,
    /// The flags of every write of the run: `none` or `DONTCACHE`.
    pub write_flags: &'static str,
    /// Writes issued to the backing during the run (writeback, sync).
    pub io_writes: u64,
    /// Bytes those writes carried.
    pub io_write_bytes: u64,
    /// Times a writer waited on the dirty limit during the run.
    pub throttled: u64,
    /// Writeback errors during the run.
    pub writeback_errors: u64,
    /// Dirty bytes after the run (0 after a sync that wrote everything).
    pub dirty_bytes: u64,
    /// Folios added over an eviction shadow during the run.
    pub refaults: u64,
    /// Folios activated during the run.
    pub activations: u64,
    /// Dropbehind folios removed after an uncached read during the run.
    pub dropbehind_drops: u64,
    /// Eviction shadows after the run.
    pub shadows: u64,
    /// Bytes of index nodes holding only shadows after the run.
    pub shadow_bytes: u64,
    /// Bytes cached after the run.
    pub bytes_cached: u64,
    /// The most bytes cached during a write run (sampled every
    /// millisecond: `run::peak_cached`); null for a read run.
    pub peak_cached_bytes: Option<u64>,
    /// How the file is read underneath (O_DIRECT or the fallback).
    pub backing: String,
    /// Whether the file is read with O_DIRECT underneath.
    pub backing_direct: bool,
    /// The engine that ran readahead IO (`io_uring (depth 256)`,
    /// `threads (2)`).
    pub io_engine: String,
    /// The cache's readahead settings.
    pub readahead: Readahead,
    /// The cache's memory after the run (`Cache::memory`): the arena (the
    /// capacity) and its bookkeeping.
    pub memory_bytes: u64,
    /// Of `memory_bytes`, the bookkeeping (`MemoryUsage::overhead_bytes`).
    pub overhead_bytes: u64,
}

/// The hit ratios caches of the cache's capacity get over the offsets
/// the run read, replayed offline ([`crate::lru::replay`]).
#[derive(Debug, Clone, Serialize)]
pub struct LruFigures {
    /// The capacity, in 4 KiB pages (the cache's capacity).
    pub capacity_pages: u64,
    /// An exact LRU's hit ratio, of pages read.
    pub hit_ratio: f64,
    /// Belady's MIN's: the most any replacement policy of this capacity
    /// could get over these offsets.
    pub min_hit_ratio: f64,
    /// An unbounded cache's: 1 - the pages read for the first time over
    /// the pages read (every first read is a miss, whatever the cache).
    pub unbounded_hit_ratio: f64,
    /// The replay took one page in this many (1: every page, exact; a
    /// long run's is sampled: `lru.rs`).
    pub sampled_one_in: u64,
}

/// foliocache's readahead settings for a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Readahead {
    /// The largest window, in 4 KiB pages (0: readahead off).
    pub max_pages: u64,
    /// The device's optimal request, in pages.
    pub io_pages: u64,
    /// `batched` or `single`.
    pub insert: &'static str,
}

/// Page-cache residency of a run's data before it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Residency {
    /// Pages in the kernel page cache.
    pub resident_pages: usize,
    /// Pages of data.
    pub pages: usize,
    /// `after warming` or `after drop`.
    pub when: &'static str,
}

/// How a run's memory was mapped (`mmap`, `memcpy`): by 2 MiB page-table
/// entries where the page cache holds the file in 2 MiB folios (or the
/// anonymous copy has transparent huge pages), else by 4 KiB ones, each
/// a TLB entry of its own.
#[derive(Debug, Clone, Serialize)]
pub struct HugeMapped {
    /// Bytes mapped by 2 MiB entries.
    pub huge_bytes: u64,
    /// Bytes mapped.
    pub bytes: u64,
}
