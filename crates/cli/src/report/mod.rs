//! Results: one [`RunRecord`] per engine run, printed as a fio-like block
//! when the run ends, gathered per scenario into a side-by-side table with
//! each engine's ratio to `kernel`, and written as JSON (`"version": 1`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::units::{fmt_bw, fmt_count, fmt_ns, fmt_ratio, fmt_size, fmt_size_approx, GIB_F64};

/// The JSON document.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The format's version: 1.
    pub version: u32,
    /// The command that reproduces the run.
    pub command: String,
    /// The machine.
    pub host: Host,
    /// `--quick`.
    pub quick: bool,
    /// `--cold`.
    pub cold: bool,
    /// `--verify` (figures of a verifying run are not comparable).
    pub verify: bool,
    /// Runs of each engine per job; the result kept is the best.
    pub repeat: u32,
    /// The clock that timed operations: `tsc` or `instant`.
    pub clock: &'static str,
    /// What a clock read and a histogram update cost, per operation.
    pub timing_overhead_ns: f64,
    /// How a result is chosen among repeats.
    pub selection: &'static str,
    /// The scenarios run.
    pub scenarios: Vec<ScenarioReport>,
}

/// The machine the bench ran on.
#[derive(Debug, Serialize)]
pub struct Host {
    /// CPUs available to the process.
    pub cpus: usize,
    /// `uname -r`.
    pub kernel: String,
    /// The CPU's model name (`/proc/cpuinfo`), or "unknown".
    pub cpu: String,
    /// The copy routine foliocache chose from this CPU's features, and why
    /// (`foliocache::internals::copy::chosen`; `FOLIOCACHE_COPY` forces
    /// one).
    pub copy: String,
}

impl Host {
    /// This machine.
    pub fn this() -> Host {
        Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            cpu: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| {
                    let line = s.lines().find(|l| l.starts_with("model name"))?;
                    Some(line.split_once(':')?.1.trim().to_string())
                })
                .unwrap_or_else(|| "unknown".into()),
            copy: foliocache::internals::copy::chosen(),
        }
    }
}

/// One scenario's results.
#[derive(Debug, Serialize)]
pub struct ScenarioReport {
    /// Its name.
    pub name: String,
    /// What it measures.
    pub description: String,
    /// One result per job and engine (the best of the repeats).
    pub results: Vec<RunRecord>,
    /// Ratios between engines the scenario is about, and its targets
    /// (absent for a scenario without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The memory limit the scenario's kernel engines ran under: the
    /// mechanism (`cgroup v1`, `cgroup v2`, or `none` with the reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<MemoryLimit>,
    /// Facts about the scenario as a whole (an engine left out, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Print each result's timeline, CPU per GiB, cache figures and hot
    /// reader below the table.
    #[serde(skip)]
    pub detailed: bool,
}

/// A scenario's ratios between engines, and its targets.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// One per pair of engines that both ran.
    pub ratios: Vec<Ratio>,
    /// The targets, each met or not (absent for a scenario without
    /// them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetCheck>,
}

/// One of the targets, checked.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    /// What is checked: `foliocache[dontcache] flat`.
    pub name: String,
    /// Whether it is met (null: it could not be checked; `detail` says
    /// why).
    pub met: Option<bool>,
    /// The figure checked.
    pub value: Option<f64>,
    /// `>=` or `<=`.
    pub comparison: &'static str,
    /// The bound the figure must respect.
    pub threshold: f64,
    /// The figure in each run or round.
    pub per_run: Vec<f64>,
    /// How the figure is made, in words.
    pub detail: String,
    /// Why the figure may not mean what it says (the library ignored a
    /// flag, say).
    pub caveat: Option<String>,
}

/// `numerator / denominator` bandwidth.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// `foliocache / kernel`.
    pub name: String,
    /// The engine label above the line.
    pub numerator: String,
    /// The engine label below it.
    pub denominator: String,
    /// The job of both engines' runs (`write`, `randwrite`), for a
    /// scenario whose jobs run the same engines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The index of that job (not in the JSON: `job` names it).
    #[serde(skip)]
    pub job_index: Option<usize>,
    /// Of the two engines' best runs (the figures in the table).
    pub best: f64,
    /// Of the two engines' runs in each round, in round order (runs seconds
    /// apart, so less exposed to the disk's swings).
    pub per_round: Vec<f64>,
    /// The median of `per_round`.
    pub median_per_round: f64,
    /// The target for it, if any.
    pub target: Option<f64>,
    /// For a memory job (populate) of two foliocache engines: the ratio
    /// of the writes alone (each run's bytes over its time without its
    /// setup, the cache's build) in each round; beside the whole runs'
    /// ratio, which the target judges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes_alone_per_round: Option<Vec<f64>>,
    /// The median of `writes_alone_per_round`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes_alone_median: Option<f64>,
}

/// Latency percentiles, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 75th percentile.
    pub p75: u64,
    /// 99th percentile.
    pub p99: u64,
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

/// One engine's run of one job (its `Default` is an empty record, which
/// a run fills in).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunRecord {
    /// The engine's label, as given.
    pub engine: String,
    /// `read`, `randread`, `write` or `randwrite`.
    pub rw: &'static str,
    /// Block size in bytes.
    pub bs: u64,
    /// Threads.
    pub numjobs: usize,
    /// Whether the threads shared one file.
    pub shared: bool,
    /// Bytes per data file.
    pub file_size: u64,
    /// Bytes read or written.
    pub bytes: u64,
    /// Operations.
    pub ops: u64,
    /// Wall seconds: the IO, and for a write job on files the final sync
    /// (`sync_s`), for a memory job the setup (`setup_s`).
    pub seconds: f64,
    /// A write run's final sync (`fsync`, `msync`, `File::sync_all`),
    /// part of `seconds` and of the bandwidth (null for reads and memory
    /// jobs).
    pub sync_s: Option<f64>,
    /// A memory job's setup (populate): the time to map the memory, make
    /// the memfd, or build foliocache's cache (with `populate=eager`, its
    /// arena's populate) and open its file; part of `seconds` and of the
    /// bandwidth (null for jobs on files).
    pub setup_s: Option<f64>,
    /// Bandwidth, bytes per second.
    pub bw_bytes: f64,
    /// Operations per second.
    pub iops: f64,
    /// The distribution of a random job's offsets (`zipf 0.99`,
    /// `uniform`), where its scenario names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dist: Option<String>,
    /// CPU microseconds (user and system) per operation (null where not
    /// measured: the `programs` scenario's runs, whose one process runs
    /// several benchmarks).
    pub cpu_us_per_op: f64,
    /// Of a read run: the share of reads served without reading the
    /// device (null where it cannot be told; `hit_ratio_from` says how).
    pub hit_ratio: Option<f64>,
    /// `foliocache statistics` (hits over hits and misses), or `device
    /// reads` (1 - the device reads over the run's reads: the bytes the
    /// process had read from storage in blocks of the job's size, or
    /// where the kernel does not count those the whole device's reads;
    /// one device read per miss, an upper bound where the device reads
    /// more than a block per miss).
    pub hit_ratio_from: Option<&'static str>,
    /// Of a read run: bytes read from storage over bytes delivered:
    /// foliocache's own reads; for the other engines the bytes the process
    /// had read (`/proc/self/io`), or the whole device's where the kernel
    /// does not count those.
    pub read_amplification: Option<f64>,
    /// For a foliocache run of a random job: an exact LRU of its capacity,
    /// Belady's MIN and an unbounded cache over the same offsets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lru: Option<LruFigures>,
    /// Per-operation latency.
    pub lat_ns: Latency,
    /// CPU seconds.
    pub cpu_s: Cpu,
    /// CPU seconds (user and system) per GiB read or written (null where
    /// not measured, as `cpu_us_per_op`; `cpu_s` is then 0).
    pub cpu_s_per_gib: f64,
    /// foliocache's capacity in bytes (null for other engines).
    pub capacity: Option<u64>,
    /// Bytes per second for each second of the run (the last, partial
    /// second is left out unless it is at least 0.1 s or the only one).
    pub timeline_bw_bytes: Vec<f64>,
    /// A finer timeline, for scenarios that ask for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fine_timeline: Option<FineTimeline>,
    /// Bandwidth over the `kernel` engine's in the same job (null without
    /// a kernel result).
    pub ratio_to_kernel: Option<f64>,
    /// Requested run length (null: one pass per thread).
    pub runtime_s: Option<f64>,
    /// Bytes past a page boundary of each thread's buffer.
    pub buf_offset: usize,
    /// `--consume`: every read's bytes were summed (in place by `mmap` and
    /// `foliocache[pin]`).
    pub consume: bool,
    /// Whether every cache was dropped before the run.
    pub cold: bool,
    /// Bandwidths of every repeat, in run order (this record is the best).
    pub repeats_bw_bytes: Vec<f64>,
    /// foliocache's figures (foliocache engines).
    pub foliocache: Option<FolioFigures>,
    /// The reads the data's block device completed during the run (null
    /// where the data is not on a block device).
    pub device: Option<crate::disk::DeviceReads>,
    /// Kernel page-cache residency of the data before the run.
    pub page_cache: Option<Residency>,
    /// How the engine's mapping was mapped before the run (`mmap`,
    /// `memcpy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub huge_mapped: Option<HugeMapped>,
    /// The memory limit the run ran under (kernel engines of a scenario
    /// that limits them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<MemoryLimit>,
    /// The hot reader beside the run, if the job has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot: Option<HotFigures>,
    /// Facts and warnings about the run.
    pub notes: Vec<String>,
}

/// `, zipf 0.99, 8 jobs` for a record of a job whose offsets are not
/// uniform (several such jobs share an rw and a block size); nothing
/// otherwise.
pub fn dist_of(r: &RunRecord) -> String {
    r.dist
        .as_ref()
        .map_or(String::new(), |d| format!(", {d}, {} jobs", r.numjobs))
}

/// How a ratio's target names its job: `write 64KiB`, `randread 4KiB,
/// zipf 0.99, 2 jobs` (the block size tells apart a scenario's jobs of
/// one pattern, as seqread's 4 KiB and 64 KiB).
pub fn job_of_ratio(r: &RunRecord) -> String {
    format!("{} {}{}", r.rw, fmt_size(r.bs), dist_of(r))
}

/// Writes `report` as pretty JSON to `path`.
///
/// # Errors
/// Creating or writing the file.
pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The fio-like block for one run.
pub fn block(r: &RunRecord, scenario: &str, run: Option<(u32, u32)>) -> String {
    let mut s = String::new();
    let rep = run.map_or(String::new(), |(i, n)| format!(", run {i} of {n}"));
    let _ = writeln!(
        s,
        "{}: {}: {} bs={} numjobs={}{} file={} ({:.2} s{rep})",
        r.engine,
        scenario,
        r.rw,
        fmt_size(r.bs),
        r.numjobs,
        if r.shared && r.numjobs > 1 {
            " shared"
        } else {
            ""
        },
        fmt_size(r.file_size),
        r.seconds
    );
    let _ = writeln!(
        s,
        "  {}: IOPS={}, BW={} ({:.1} MB/s) ({} in {:.2}s)",
        r.rw,
        fmt_count(r.iops),
        fmt_bw(r.bw_bytes),
        r.bw_bytes / 1e6,
        fmt_size_approx(r.bytes),
        r.seconds
    );
    let _ = writeln!(
        s,
        "    lat: p50={}, p75={}, p99={}, mean={}, max={}",
        fmt_ns(r.lat_ns.p50),
        fmt_ns(r.lat_ns.p75),
        fmt_ns(r.lat_ns.p99),
        fmt_ns(r.lat_ns.mean as u64),
        fmt_ns(r.lat_ns.max)
    );
    let _ = writeln!(
        s,
        "    cpu: user={:.2}s, sys={:.2}s ({:.3} s/GiB)",
        r.cpu_s.user, r.cpu_s.sys, r.cpu_s_per_gib
    );
    if let Some(t) = &r.fine_timeline {
        let _ = writeln!(
            s,
            "    timeline (GiB/s per {}): {}",
            fmt_interval(t.interval_s),
            fmt_series(&t.bw_bytes)
        );
    }
    if let Some(t) = r.sync_s {
        let _ = writeln!(
            s,
            "    sync at the end: {t:.3} s (in the figures; the writes {:.3} s)",
            r.seconds - t
        );
    }
    if let Some(t) = r.setup_s {
        let _ = writeln!(
            s,
            "    memory setup: {t:.3} s (in the figures; the writes {:.3} s)",
            r.seconds - t
        );
    }
    if let Some(f) = &r.foliocache {
        let _ = writeln!(
            s,
            "    foliocache: capacity {} ({}, folios up to {}), arena populated {} in {:.3} s at build ({}){}",
            fmt_size_approx(r.capacity.unwrap_or(0)),
            if f.huge_pages {
                "huge pages asked for"
            } else {
                "4 KiB pages, huge=off"
            },
            fmt_size_approx(f.max_folio_bytes.unwrap_or(2 << 20)),
            f.populate,
            f.populate_s,
            if r.setup_s.is_some() {
                "in the run's memory setup"
            } else {
                "not in the run"
            },
            f.warm_s
                .map_or(String::new(), |w| format!(", warm pass {w:.3} s"))
        );
        let _ = writeln!(
            s,
            "    foliocache: during the run {} hits, {} misses, {} IOs ({}{}), {} evictions; file read {}",
            f.hits,
            f.misses,
            f.io_reads,
            fmt_size_approx(f.io_bytes),
            f.io_bytes
                .checked_div(f.io_reads)
                .map_or(String::new(), |a| format!(", avg {}", fmt_size_approx(a))),
            f.evictions,
            if f.backing_direct {
                "with O_DIRECT".to_string()
            } else {
                format!("through the buffered fallback ({})", f.backing)
            }
        );
        if r.rw == "write" || r.rw == "randwrite" {
            let _ = writeln!(
                s,
                "    foliocache: writes by write_at, folios by {} (flags {}); during the run {} write IOs ({}{}), {} \
                 throttled waits, {} writeback errors; {} dirty after the run",
                f.write_insert,
                f.write_flags,
                f.io_writes,
                fmt_size_approx(f.io_write_bytes),
                f.io_write_bytes
                    .checked_div(f.io_writes)
                    .map_or(String::new(), |a| format!(", avg {}", fmt_size_approx(a))),
                f.throttled,
                f.writeback_errors,
                fmt_size_approx(f.dirty_bytes)
            );
        }
        let _ = writeln!(
            s,
            "    foliocache: readahead {}, insert {}; IO engine {}",
            fmt_ra(&f.readahead),
            f.readahead.insert,
            f.io_engine
        );
        let _ = writeln!(
            s,
            "    foliocache: reads with flags {}; {} refaults, {} activations, {} dropbehind drops; \
             after the run {} cached, {} shadows ({})",
            f.read_flags,
            f.refaults,
            f.activations,
            f.dropbehind_drops,
            fmt_size_approx(f.bytes_cached),
            f.shadows,
            fmt_size_approx(f.shadow_bytes)
        );
    }
    if let Some(m) = &r.memory_limit {
        let _ = writeln!(s, "    memory limit: {}", fmt_limit(m));
    }
    if let Some(h) = &r.hot {
        let _ = writeln!(s, "    hot reader: {}", fmt_hot(h));
    }
    if let Some(d) = &r.device {
        let _ = writeln!(
            s,
            "    device {}: {} reads ({}, avg {}), {:.1} in flight on average (whole device)",
            d.device,
            d.reads,
            fmt_size_approx(d.bytes),
            fmt_size_approx(d.avg_read_bytes),
            d.reads_in_flight
        );
    }
    if let Some(p) = &r.page_cache {
        let _ = writeln!(
            s,
            "    page cache {}: {} of {} pages resident",
            p.when, p.resident_pages, p.pages
        );
    }
    if let Some(h) = &r.huge_mapped {
        let _ = writeln!(
            s,
            "    mapped by 2 MiB entries: {} of {}; the rest by 4 KiB ones",
            fmt_size_approx(h.huge_bytes),
            fmt_size_approx(h.bytes)
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "    {n}");
    }
    s
}

/// Whether a foliocache run with `DONTCACHE` reads looks like the
/// library ignored the flag: no folio dropped behind, and yet folios
/// evicted, or at least half of what the run read (up to the capacity)
/// still cached at the end.
pub fn dontcache_ignored(r: &RunRecord) -> bool {
    let Some(f) = &r.foliocache else {
        return false;
    };
    let read = r.bytes.min(r.capacity.unwrap_or(u64::MAX));
    f.read_flags == "DONTCACHE"
        && r.bytes > 0
        && f.dropbehind_drops == 0
        && (f.evictions > 0 || f.bytes_cached.saturating_mul(2) >= read)
}

/// A memory limit, short: `cgroup v1 256.0MiB, peak 255.9MiB`, `none`.
fn fmt_limit_short(m: &MemoryLimit) -> String {
    match (m.limit_bytes, m.peak_bytes) {
        (None, _) => "none".into(),
        (Some(l), Some(p)) => format!(
            "{} {}, peak {}",
            m.mechanism,
            fmt_size_approx(l),
            fmt_size_approx(p)
        ),
        (Some(l), None) => format!("{} {}", m.mechanism, fmt_size_approx(l)),
    }
}

/// A memory limit in words: `cgroup v1, 256MiB (peak 255.9MiB, hit 12
/// times)`, `NONE: why`.
pub fn fmt_limit(m: &MemoryLimit) -> String {
    match m.limit_bytes {
        None => format!(
            "NONE ({}): the kernel engines ran without a limit",
            m.reason.as_deref().unwrap_or("no mechanism")
        ),
        Some(l) => {
            let mut t = format!("{}, {}", m.mechanism, fmt_size_approx(l));
            if let Some(p) = m.peak_bytes {
                let _ = write!(t, " (peak {}", fmt_size_approx(p));
                if let Some(h) = m.limit_hits {
                    let _ = write!(t, ", hit the limit {h} times");
                }
                t.push(')');
            }
            if let Some(c) = &m.cgroup {
                let _ = write!(t, " in {c}");
            }
            t
        }
    }
}

/// The hot reader in words.
fn fmt_hot(h: &HotFigures) -> String {
    format!(
        "{} reads of {} at random in a {} file ({} of {} pages cached after warming): {} \
         ({} misses, told by {}), {} reads/s ({})",
        h.reads,
        fmt_size(h.bs),
        fmt_size_approx(h.file_size),
        h.warm_cached_pages,
        h.pages,
        h.hit_ratio.map_or("hits not measured".into(), |x| format!(
            "{:.2}% hits",
            x * 100.0
        )),
        h.misses,
        h.miss_detection,
        fmt_count(h.reads_per_s),
        fmt_hot_rate(h.rate_limit_per_s)
    )
}

/// `paced to 16384/s`, or `unpaced`.
fn fmt_hot_rate(rate: u64) -> String {
    if rate == 0 {
        "unpaced".into()
    } else {
        format!("paced to {rate}/s")
    }
}

/// `100ms`, `1s`.
fn fmt_interval(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{secs:.0}s")
    } else {
        format!("{:.0}ms", secs * 1e3)
    }
}

/// Bandwidths in GiB/s, two decimals, space separated.
fn fmt_series(bw: &[f64]) -> String {
    let v: Vec<String> = bw.iter().map(|b| format!("{:.2}", b / GIB_F64)).collect();
    v.join(" ")
}

/// How flat a run's throughput was: its worst interval after the first
/// over the median of those intervals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flatness {
    /// The worst interval's bandwidth over the median's.
    pub worst: f64,
    /// The interval used, in seconds.
    pub interval_s: f64,
    /// Intervals looked at (after the first).
    pub intervals: usize,
}

/// Intervals after the first that a flatness figure wants.
const FLAT_INTERVALS: usize = 5;
/// The fewest it makes do with (at the finest interval).
const FLAT_MIN_INTERVALS: usize = 3;
/// The intervals flatness is judged at, coarsest first, in seconds.
const FLAT_GRAINS: [f64; 5] = [1.0, 0.5, 0.25, 0.1, 0.05];

/// The flatness of `r`'s throughput, judged per second where the run is
/// long enough, else at the coarsest of 500, 250, 100 or 50 ms (whole
/// intervals of its finer timeline) that gives [`FLAT_INTERVALS`]
/// intervals after the first: the coarser, the less a figure depends on
/// how the engine's reads complete in steps (foliocache's in readahead
/// windows of 8 MiB: at 50 ms, a step is several percent of an
/// interval). `None` with fewer than 3 intervals after the first even at
/// the finest (too short a run to tell).
pub fn flatness(r: &RunRecord) -> Option<Flatness> {
    let full_secs = r.seconds.floor() as usize;
    let whole_secs = &r.timeline_bw_bytes[..full_secs.min(r.timeline_bw_bytes.len())];
    let (fine, step): (&[f64], f64) = match &r.fine_timeline {
        Some(t) => (&t.bw_bytes, t.interval_s),
        None => (whole_secs, 1.0),
    };
    let mut finest = None;
    for grain in FLAT_GRAINS {
        let m = (grain / step).round() as usize;
        if m == 0 || ((m as f64) * step - grain).abs() > 1e-9 {
            continue;
        }
        let series: Vec<f64> = fine
            .chunks_exact(m)
            .map(|c| c.iter().sum::<f64>() / m as f64)
            .collect();
        let after = series.get(1..).unwrap_or(&[]).to_vec();
        if after.len() >= FLAT_INTERVALS {
            return Some(flat_of(&after, grain));
        }
        finest = Some((after, grain));
    }
    match finest {
        Some((after, grain)) if after.len() >= FLAT_MIN_INTERVALS => Some(flat_of(&after, grain)),
        _ => None,
    }
}

fn flat_of(after: &[f64], interval_s: f64) -> Flatness {
    let med = median(after);
    let worst = after.iter().copied().fold(f64::INFINITY, f64::min);
    Flatness {
        worst: if med > 0.0 { worst / med } else { 0.0 },
        interval_s,
        intervals: after.len(),
    }
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// `windows up to 2MiB`, `off`.
fn fmt_ra(ra: &Readahead) -> String {
    if ra.max_pages == 0 {
        "off".into()
    } else {
        format!("windows up to {}", fmt_size(ra.max_pages * 4096))
    }
}

/// The side-by-side table of a scenario; for a scenario with cold runs, a
/// second table of the IO each engine's best run did; then the scenario's
/// ratios.
pub fn table(sc: &ScenarioReport, repeat: u32) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "== {}: {}", sc.name, sc.description);
    if repeat > 1 {
        let _ = writeln!(
            s,
            "   (each engine's best of {repeat} runs, engine order alternating between runs; \
             spread: how much slower its worst run was)"
        );
    }
    let ew = sc
        .results
        .iter()
        .map(|r| r.engine.len())
        .max()
        .unwrap_or(0)
        .max(14);
    let job_of = |r: &RunRecord| {
        format!(
            "{}{} bs={} j={}",
            r.rw,
            r.dist.as_ref().map_or(String::new(), |d| format!(" {d}")),
            fmt_size(r.bs),
            r.numjobs
        )
    };
    let jw = sc
        .results
        .iter()
        .map(|r| job_of(r).len())
        .max()
        .unwrap_or(0)
        .max(24);
    let mut head = format!(
        "{:<jw$} {:<ew$} {:>13} {:>9} {:>9} {:>9} {:>9} {:>13} {:>10} {:>7}",
        "job",
        "engine",
        "bandwidth",
        "IOPS",
        "lat p50",
        "lat p75",
        "lat p99",
        "cpu usr+sys",
        "vs kernel",
        if repeat > 1 { "spread" } else { "" }
    );
    head.truncate(head.trim_end().len());
    let _ = writeln!(s, "{head}");
    let mut last_job = String::new();
    for r in &sc.results {
        let job = job_of(r);
        let shown = if job == last_job {
            String::new()
        } else {
            job.clone()
        };
        last_job = job;
        let mut line = format!(
            "{:<jw$} {:<ew$} {:>13} {:>9} {:>9} {:>9} {:>9} {:>13} {:>10} {:>7}",
            shown,
            r.engine,
            fmt_bw(r.bw_bytes),
            fmt_count(r.iops),
            fmt_ns(r.lat_ns.p50),
            fmt_ns(r.lat_ns.p75),
            fmt_ns(r.lat_ns.p99),
            if r.cpu_s_per_gib.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}+{:.2}s", r.cpu_s.user, r.cpu_s.sys)
            },
            r.ratio_to_kernel
                .map_or("-".to_string(), |x| format!("{x:.2}x")),
            spread(&r.repeats_bw_bytes)
        );
        line.truncate(line.trim_end().len());
        let _ = writeln!(s, "{line}");
    }
    if sc.results.iter().any(|r| r.setup_s.is_some()) {
        setup_table(&mut s, sc, ew);
    } else if sc.results.iter().any(|r| r.cold) {
        io_table(&mut s, sc, ew);
    }
    if sc.results.iter().any(|r| r.dist.is_some()) {
        per_read_table(&mut s, sc, ew);
    }
    if sc.detailed {
        detail_tables(&mut s, sc, ew);
    }
    for n in &sc.notes {
        let _ = writeln!(s, "   note: {n}");
    }
    if let Some(sum) = &sc.summary {
        let _ = writeln!(
            s,
            "   ratios (bandwidth; of the best runs, and of the runs of each round):"
        );
        let nw = sum.ratios.iter().map(|r| r.name.len()).max().unwrap_or(0);
        for r in &sum.ratios {
            let rounds: Vec<String> = r.per_round.iter().map(|x| format!("{x:.2}x")).collect();
            let _ = writeln!(
                s,
                "   {:<nw$}  {:>6}  rounds {} (median {:.2}x){}",
                r.name,
                format!("{:.2}x", r.best),
                rounds.join(" "),
                r.median_per_round,
                r.target
                    .map_or(String::new(), |t| format!("; target {}", fmt_ratio(t)))
            );
            if let (Some(w), Some(m)) = (&r.writes_alone_per_round, r.writes_alone_median) {
                let rounds: Vec<String> = w.iter().map(|x| format!("{x:.2}x")).collect();
                let _ = writeln!(
                    s,
                    "   {:<nw$}          rounds {} (median {m:.2}x)",
                    "  (the writes alone, setup left out)",
                    rounds.join(" "),
                );
            }
        }
        if !sum.targets.is_empty() {
            let _ = writeln!(s, "   targets:");
            for t in &sum.targets {
                let verdict = match t.met {
                    Some(true) => "[met]    ",
                    Some(false) => "[NOT MET]",
                    None => "[n/a]    ",
                };
                let _ = writeln!(s, "   {verdict} {}: {}", t.name, t.detail);
                if let Some(c) = &t.caveat {
                    let _ = writeln!(s, "              caveat: {c}");
                }
            }
        }
    }
    s
}

/// A scenario's detail below its table: each result's CPU per GiB,
/// flatness, memory limit and cache figures; the hot reader's; the
/// timelines.
fn detail_tables(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let job_of = |r: &RunRecord| {
        if r.hot.is_some() {
            "beside the hot reader"
        } else {
            "alone"
        }
    };
    let _ = writeln!(
        s,
        "   CPU and cache of those runs (flat: the worst interval after the first over their \
         median; memory: foliocache's capacity, or the kernel engines' cgroup limit and peak):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>11}  {}",
        "stream",
        "engine",
        "cpu s",
        "cpu s/GiB",
        "flat",
        "evictions",
        "refaults",
        "activated",
        "dropbehind",
        "shadows",
        "shadow mem",
        "cached end",
        "memory"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in &sc.results {
        let flat = flatness(r).map_or("-".to_string(), |f| format!("{:.2}", f.worst));
        let (ev, rf, act, db, sh, shb, cached, mem) = match &r.foliocache {
            Some(f) => (
                f.evictions.to_string(),
                f.refaults.to_string(),
                f.activations.to_string(),
                f.dropbehind_drops.to_string(),
                f.shadows.to_string(),
                fmt_size_approx(f.shadow_bytes),
                fmt_size_approx(f.bytes_cached),
                format!("capacity {}", fmt_size_approx(r.capacity.unwrap_or(0))),
            ),
            None => {
                let d = || "-".to_string();
                (
                    d(),
                    d(),
                    d(),
                    d(),
                    d(),
                    d(),
                    d(),
                    r.memory_limit.as_ref().map_or("-".into(), fmt_limit_short),
                )
            }
        };
        let line = format!(
            "{:<24} {:<ew$} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>11}  {}",
            job_of(r),
            r.engine,
            format!("{:.2}", r.cpu_s.user + r.cpu_s.sys),
            format!("{:.3}", r.cpu_s_per_gib),
            flat,
            ev,
            rf,
            act,
            db,
            sh,
            shb,
            cached,
            mem
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    if sc.results.iter().any(|r| r.hot.is_some()) {
        let _ = writeln!(
            s,
            "   the hot reader beside the stream (hits: of its reads during the stream):"
        );
        let head = format!(
            "{:<24} {:<ew$} {:>13} {:>10} {:>9} {:>9} {:>9} {:>10}  {}",
            "",
            "stream engine",
            "stream bw",
            "hot reads",
            "misses",
            "hits",
            "reads/s",
            "paced to",
            "misses told by"
        );
        let _ = writeln!(s, "{}", head.trim_end());
        for r in sc.results.iter().filter(|r| r.hot.is_some()) {
            let Some(h) = &r.hot else { continue };
            let line = format!(
                "{:<24} {:<ew$} {:>13} {:>10} {:>9} {:>9} {:>9} {:>10}  {}",
                "",
                r.engine,
                fmt_bw(r.bw_bytes),
                h.reads,
                h.misses,
                h.hit_ratio
                    .map_or("-".into(), |x| format!("{:.2}%", x * 100.0)),
                fmt_count(h.reads_per_s),
                if h.rate_limit_per_s == 0 {
                    "-".to_string()
                } else {
                    format!("{}/s", h.rate_limit_per_s)
                },
                h.miss_detection
            );
            let _ = writeln!(s, "{}", line.trim_end());
        }
    }
    let _ = writeln!(
        s,
        "   throughput over time (GiB/s; a partial last second is its own rate):"
    );
    for r in &sc.results {
        let _ = writeln!(
            s,
            "   {:<ew$} {:<22} per second: {}",
            r.engine,
            job_of(r),
            fmt_series(&r.timeline_bw_bytes)
        );
        if let Some(t) = &r.fine_timeline {
            let _ = writeln!(
                s,
                "   {:<ew$} {:<22} per {:<6} {}",
                "",
                "",
                format!("{}:", fmt_interval(t.interval_s)),
                if t.bw_bytes.is_empty() {
                    "(the run lasted less than one)".to_string()
                } else {
                    fmt_series(&t.bw_bytes)
                }
            );
        }
    }
}

/// A memory job's runs split into their setup and their writes: what
/// first touch cost where (foliocache's arena populate, in its setup with
/// `populate=eager`, in its writes with `lazy`; anon's page faults in its
/// memset), and the writes' own bandwidth beside the whole run's.
/// Figures per read: hit ratios (with an exact LRU's beside
/// foliocache's), CPU, read amplification, evictions and the cache's
/// memory, for a scenario of reads larger than memory.
fn per_read_table(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   per read (hit: foliocache's statistics, the others' device reads; LRU, MIN, all: an \
         exact LRU, Belady's MIN (the best any policy could do) and an unbounded cache, LRU \
         and MIN of foliocache's capacity, over the same offsets; amp: bytes read from storage per byte \
         delivered, foliocache's own reads, the others' reads by this process):"
    );
    let _ = writeln!(
        s,
        "   {:<28} {:<ew$} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9} {:>6} {:>10} {:>10}",
        "job",
        "engine",
        "IOPS",
        "p50",
        "p99",
        "hit",
        "LRU",
        "MIN",
        "all",
        "cpu us",
        "amp",
        "evictions",
        "memory"
    );
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    for r in &sc.results {
        let f = r.foliocache.as_ref();
        let mut line = format!(
            "   {:<28} {:<ew$} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9.2} {:>6} {:>10} {:>10}",
            format!(
                "{}{} j={}",
                r.rw,
                r.dist
                    .as_ref()
                    .map_or(" uniform".to_string(), |d| format!(" {d}")),
                r.numjobs
            ),
            r.engine,
            fmt_count(r.iops),
            fmt_ns(r.lat_ns.p50),
            fmt_ns(r.lat_ns.p99),
            pct(r.hit_ratio),
            pct(r.lru.as_ref().map(|l| l.hit_ratio)),
            pct(r.lru.as_ref().map(|l| l.min_hit_ratio)),
            pct(r.lru.as_ref().map(|l| l.unbounded_hit_ratio)),
            r.cpu_us_per_op,
            r.read_amplification
                .map_or("-".to_string(), |a| format!("{a:.2}")),
            f.map_or("-".to_string(), |f| f.evictions.to_string()),
            f.map_or("-".to_string(), |f| fmt_size_approx(f.memory_bytes)),
        );
        line.truncate(line.trim_end().len());
        let _ = writeln!(s, "{line}");
    }
}

fn setup_table(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   setup and writes of those runs (the bandwidth above is of both; setup: mapping the \
         memory, or building foliocache's cache, whose arena populate is in it with \
         populate=eager):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>9} {:>15} {:>9} {:>13}  {}",
        "", "engine", "setup s", "arena populate", "writes s", "writes alone", "writes by"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in &sc.results {
        let setup = r.setup_s.unwrap_or(0.0);
        let writes = (r.seconds - setup).max(0.0);
        let (populate, how) = match &r.foliocache {
            Some(f) => (
                format!("{:.3} s {}", f.populate_s, f.populate),
                format!(
                    "{}, {} pages",
                    f.write_insert,
                    if f.huge_pages { "huge" } else { "4 KiB" }
                ),
            ),
            None => ("-".to_string(), String::new()),
        };
        let line = format!(
            "{:<24} {:<ew$} {:>9} {:>15} {:>9} {:>13}  {}",
            "",
            r.engine,
            format!("{setup:.3}"),
            populate,
            format!("{writes:.3}"),
            if writes > 0.0 {
                fmt_bw(r.bytes as f64 / writes)
            } else {
                "-".into()
            },
            how
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// The IO of each result's run: foliocache's reads of its files, the
/// block device's reads, and foliocache's readahead engine.
fn io_table(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   IO of those runs (cache: the reads foliocache issued; device: the reads the block \
         device completed, the whole device's):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>10} {:>9} {:>10} {:>9} {:>10}  {}",
        "",
        "engine",
        "cache IOs",
        "avg size",
        "dev reads",
        "avg size",
        "in flight",
        "foliocache IO"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in &sc.results {
        let (cios, csize, how) = match &r.foliocache {
            Some(f) => (
                f.io_reads.to_string(),
                f.io_bytes
                    .checked_div(f.io_reads)
                    .map_or("-".into(), fmt_size_approx),
                format!(
                    "{}; readahead {}, insert {}",
                    f.io_engine,
                    fmt_ra(&f.readahead),
                    f.readahead.insert
                ),
            ),
            None => ("-".into(), "-".into(), String::new()),
        };
        let (dreads, dsize, inflight) = match &r.device {
            Some(d) => (
                d.reads.to_string(),
                fmt_size_approx(d.avg_read_bytes),
                format!("{:.1}", d.reads_in_flight),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let line = format!(
            "{:<24} {:<ew$} {:>10} {:>9} {:>10} {:>9} {:>10}  {}",
            "", r.engine, cios, csize, dreads, dsize, inflight, how
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// How much slower the worst of several runs was than the best: `4%`;
/// empty for one run.
fn spread(bws: &[f64]) -> String {
    let best = bws.iter().copied().fold(0.0, f64::max);
    let worst = bws.iter().copied().fold(f64::INFINITY, f64::min);
    if bws.len() < 2 || best <= 0.0 {
        return String::new();
    }
    format!("{:.0}%", (best - worst) / best * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads() {
        assert_eq!(spread(&[1.0]), "");
        assert_eq!(spread(&[100.0, 90.0]), "10%");
        assert_eq!(spread(&[90.0, 100.0, 95.0]), "10%");
    }

    fn record(seconds: f64, fine: &[f64]) -> RunRecord {
        RunRecord {
            engine: "e".into(),
            rw: "read",
            bs: 4096,
            numjobs: 1,
            shared: true,
            file_size: 4096,
            seconds,
            fine_timeline: Some(FineTimeline {
                interval_s: 0.05,
                bw_bytes: fine.to_vec(),
            }),
            cold: true,
            ..RunRecord::default()
        }
    }

    #[test]
    fn flatness_takes_the_coarsest_interval_with_five_after_the_first() {
        // 30 intervals of 50 ms: 250 ms gives 6 (5 after the first).
        let mut fine = vec![10.0; 30];
        fine[7] = 2.0; // one bad 50 ms interval, inside the 2nd 250 ms
        let f = flatness(&record(1.5, &fine)).unwrap();
        assert_eq!((f.interval_s, f.intervals), (0.25, 5));
        assert!((f.worst - 0.84).abs() < 1e-9, "{f:?}");
        // 8 intervals: only 50 ms gives 5 after the first.
        let f = flatness(&record(0.4, &[1.0, 5.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0])).unwrap();
        assert_eq!((f.interval_s, f.intervals), (0.05, 7));
        assert!((f.worst - 0.8).abs() < 1e-9);
        // 4: 3 after the first at 50 ms, the least it judges; 3: none.
        assert_eq!(flatness(&record(0.2, &[1.0; 4])).unwrap().intervals, 3);
        assert!(flatness(&record(0.15, &[1.0; 3])).is_none());
        // Long runs are judged per second.
        let f = flatness(&record(6.2, &[3.0; 124])).unwrap();
        assert_eq!((f.interval_s, f.intervals, f.worst), (1.0, 5, 1.0));
    }
}
