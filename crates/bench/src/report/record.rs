//! One engine's run of one job: the [`RunRecord`], its fields grouped by
//! what is read together (what ran, how fast and at what cost, how its
//! time went, what the caches did, its memory, the choice among repeats),
//! and its JSON object, one flat object of `"version": 1` whatever the
//! grouping ([`RunRecord`]'s `Serialize`).

use serde::ser::{Serialize, SerializeStruct, Serializer};

use super::figures::{
    Cpu, FineTimeline, FolioFigures, HotFigures, HugeMapped, Latency, LruFigures, MemoryLimit,
    Residency,
};
use crate::units::fmt_size;

/// One engine's run of one job (its `Default` is an empty record, which
/// a run fills in).
#[derive(Debug, Clone, Default)]
pub struct RunRecord {
    /// The engine's label, as given.
    pub engine: String,
    /// What the engine ran.
    pub job: RunJob,
    /// What the run did and what it cost.
    pub perf: Perf,
    /// How the run's time went.
    pub timing: Timing,
    /// What the caches did.
    pub cache: CacheFigures,
    /// The run's memory: foliocache's capacity, the mapping, the limit.
    pub memory: MemoryFigures,
    /// Where the run stands among the engine's repeats.
    pub best: Best,
    /// The hot reader beside the run, if the job has one.
    pub hot: Option<HotFigures>,
    /// Facts and warnings about the run.
    pub notes: Vec<String>,
}

/// The job an engine ran, and the run's options.
#[derive(Debug, Clone, Default)]
pub struct RunJob {
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
    /// The distribution of a random job's offsets (`zipf 0.99`,
    /// `uniform`), where its scenario names it.
    pub dist: Option<String>,
    /// Requested run length (null: one pass per thread).
    pub runtime_s: Option<f64>,
    /// Bytes past a page boundary of each thread's buffer.
    pub buf_offset: usize,
    /// `--consume`: every read's bytes were summed (in place by `mmap` and
    /// `foliocache[pin]`).
    pub consume: bool,
    /// Whether every cache was dropped before the run.
    pub cold: bool,
}

/// What a run did (bytes, operations, seconds), how fast (bandwidth,
/// IOPS, latency) and at what CPU cost: the figures of the table.
#[derive(Debug, Clone, Default)]
pub struct Perf {
    /// Bytes read or written.
    pub bytes: u64,
    /// Operations.
    pub ops: u64,
    /// Wall seconds: the IO, and for a write job on files the final sync
    /// ([`Timing::sync_s`]), for a memory job the setup
    /// ([`Timing::setup_s`]).
    pub seconds: f64,
    /// Bandwidth, bytes per second.
    pub bw_bytes: f64,
    /// Operations per second.
    pub iops: f64,
    /// Per-operation latency.
    pub lat_ns: Latency,
    /// CPU seconds.
    pub cpu_s: Cpu,
    /// CPU seconds (user and system) per GiB read or written (null where
    /// not measured, as `cpu_us_per_op`; `cpu_s` is then 0).
    pub cpu_s_per_gib: f64,
    /// CPU microseconds (user and system) per operation (null where not
    /// measured: the `programs` scenario's runs, whose one process runs
    /// several benchmarks).
    pub cpu_us_per_op: f64,
}

/// How a run's time went: the setup and the sync inside its seconds, and
/// its throughput over time.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    /// A write run's final sync (`fsync`, `msync`, `File::sync_all`),
    /// part of `seconds` and of the bandwidth (null for reads and memory
    /// jobs).
    pub sync_s: Option<f64>,
    /// A memory job's setup (populate): the time to map the memory, make
    /// the memfd, or build foliocache's cache (with `populate=eager`, its
    /// arena's populate) and open its file; part of `seconds` and of the
    /// bandwidth (null for jobs on files).
    pub setup_s: Option<f64>,
    /// Bytes per second for each second of the run (the last, partial
    /// second is left out unless it is at least 0.1 s or the only one).
    pub timeline_bw_bytes: Vec<f64>,
    /// A finer timeline, for scenarios that ask for one.
    pub fine_timeline: Option<FineTimeline>,
}

/// What the caches did during a run: the share of reads that were hits,
/// the bytes read from storage, foliocache's statistics, the device's
/// reads, the page cache before the run.
#[derive(Debug, Clone, Default)]
pub struct CacheFigures {
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
    pub lru: Option<LruFigures>,
    /// foliocache's figures (foliocache engines).
    pub foliocache: Option<FolioFigures>,
    /// The reads the data's block device completed during the run (null
    /// where the data is not on a block device).
    pub device: Option<crate::disk::DeviceReads>,
    /// Kernel page-cache residency of the data before the run.
    pub page_cache: Option<Residency>,
}

/// A run's memory: foliocache's capacity, how the engine's mapping was
/// mapped, the memory limit it ran under.
#[derive(Debug, Clone, Default)]
pub struct MemoryFigures {
    /// foliocache's capacity in bytes (null for other engines).
    pub capacity: Option<u64>,
    /// How the engine's mapping was mapped before the run (`mmap`,
    /// `memcpy`).
    pub huge_mapped: Option<HugeMapped>,
    /// The memory limit the run ran under (kernel engines of a scenario
    /// that limits them).
    pub memory_limit: Option<MemoryLimit>,
}

/// Where a run stands among its engine's repeats: filled in once the best
/// run is chosen (the record kept is the best).
#[derive(Debug, Clone, Default)]
pub struct Best {
    /// Bandwidth over the `kernel` engine's in the same job (null without
    /// a kernel result).
    pub ratio_to_kernel: Option<f64>,
    /// Bandwidths of every repeat, in run order (this record is the best).
    pub repeats_bw_bytes: Vec<f64>,
}

/// The record as the JSON of `"version": 1` has it: one flat object, its
/// fields in the order they have always had (a user-facing format, which
/// scripts may read by position as well as by name), whatever the groups
/// of [`RunRecord`]. `dist`, `lru`, `fine_timeline`, `huge_mapped`,
/// `memory_limit` and `hot` are left out where absent; every other field
/// is always there (null where absent).
impl Serialize for RunRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (j, p, t, c, m, b) = (
            &self.job,
            &self.perf,
            &self.timing,
            &self.cache,
            &self.memory,
            &self.best,
        );
        let mut o = s.serialize_struct("RunRecord", 38)?;
        o.serialize_field("engine", &self.engine)?;
        o.serialize_field("rw", j.rw)?;
        o.serialize_field("bs", &j.bs)?;
        o.serialize_field("numjobs", &j.numjobs)?;
        o.serialize_field("shared", &j.shared)?;
        o.serialize_field("file_size", &j.file_size)?;
        o.serialize_field("bytes", &p.bytes)?;
        o.serialize_field("ops", &p.ops)?;
        o.serialize_field("seconds", &p.seconds)?;
        o.serialize_field("sync_s", &t.sync_s)?;
        o.serialize_field("setup_s", &t.setup_s)?;
        o.serialize_field("bw_bytes", &p.bw_bytes)?;
        o.serialize_field("iops", &p.iops)?;
        if let Some(d) = &j.dist {
            o.serialize_field("dist", d)?;
        }
        o.serialize_field("cpu_us_per_op", &p.cpu_us_per_op)?;
        o.serialize_field("hit_ratio", &c.hit_ratio)?;
        o.serialize_field("hit_ratio_from", &c.hit_ratio_from)?;
        o.serialize_field("read_amplification", &c.read_amplification)?;
        if let Some(l) = &c.lru {
            o.serialize_field("lru", l)?;
        }
        o.serialize_field("lat_ns", &p.lat_ns)?;
        o.serialize_field("cpu_s", &p.cpu_s)?;
        o.serialize_field("cpu_s_per_gib", &p.cpu_s_per_gib)?;
        o.serialize_field("capacity", &m.capacity)?;
        o.serialize_field("timeline_bw_bytes", &t.timeline_bw_bytes)?;
        if let Some(f) = &t.fine_timeline {
            o.serialize_field("fine_timeline", f)?;
        }
        o.serialize_field("ratio_to_kernel", &b.ratio_to_kernel)?;
        o.serialize_field("runtime_s", &j.runtime_s)?;
        o.serialize_field("buf_offset", &j.buf_offset)?;
        o.serialize_field("consume", &j.consume)?;
        o.serialize_field("cold", &j.cold)?;
        o.serialize_field("repeats_bw_bytes", &b.repeats_bw_bytes)?;
        o.serialize_field("foliocache", &c.foliocache)?;
        o.serialize_field("device", &c.device)?;
        o.serialize_field("page_cache", &c.page_cache)?;
        if let Some(h) = &m.huge_mapped {
            o.serialize_field("huge_mapped", h)?;
        }
        if let Some(l) = &m.memory_limit {
            o.serialize_field("memory_limit", l)?;
        }
        if let Some(h) = &self.hot {
            o.serialize_field("hot", h)?;
        }
        o.serialize_field("notes", &self.notes)?;
        o.end()
    }
}

/// `, zipf 0.99, 8 jobs` for a record of a job whose offsets are not
/// uniform (several such jobs share an rw and a block size); nothing
/// otherwise.
pub fn dist_of(r: &RunRecord) -> String {
    r.job
        .dist
        .as_ref()
        .map_or(String::new(), |d| format!(", {d}, {} jobs", r.job.numjobs))
}

/// How a ratio's target names its job: `write 64KiB`, `randread 4KiB,
/// zipf 0.99, 2 jobs` (the block size tells apart a scenario's jobs of
/// one pattern, as seqread's 4 KiB and 64 KiB).
pub fn job_of_ratio(r: &RunRecord) -> String {
    format!("{} {}{}", r.job.rw, fmt_size(r.job.bs), dist_of(r))
}

/// Whether a foliocache run with `DONTCACHE` reads looks like the
/// library ignored the flag: no folio dropped behind, and yet folios
/// evicted, or at least half of what the run read (up to the capacity)
/// still cached at the end.
pub fn dontcache_ignored(r: &RunRecord) -> bool {
    let Some(f) = &r.cache.foliocache else {
        return false;
    };
    let read = r.perf.bytes.min(r.memory.capacity.unwrap_or(u64::MAX));
    f.read_flags == "DONTCACHE"
        && r.perf.bytes > 0
        && f.dropbehind_drops == 0
        && (f.evictions > 0 || f.bytes_cached.saturating_mul(2) >= read)
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    use super::*;

    /// The fields of a record's JSON object, in the order of
    /// `"version": 1`.
    const V1_FIELDS: [&str; 38] = [
        "engine",
        "rw",
        "bs",
        "numjobs",
        "shared",
        "file_size",
        "bytes",
        "ops",
        "seconds",
        "sync_s",
        "setup_s",
        "bw_bytes",
        "iops",
        "dist",
        "cpu_us_per_op",
        "hit_ratio",
        "hit_ratio_from",
        "read_amplification",
        "lru",
        "lat_ns",
        "cpu_s",
        "cpu_s_per_gib",
        "capacity",
        "timeline_bw_bytes",
        "fine_timeline",
        "ratio_to_kernel",
        "runtime_s",
        "buf_offset",
        "consume",
        "cold",
        "repeats_bw_bytes",
        "foliocache",
        "device",
        "page_cache",
        "huge_mapped",
        "memory_limit",
        "hot",
        "notes",
    ];

    /// The keys of `r`'s JSON object, in order (a `serde_json::Value`
    /// keeps them sorted).
    fn keys(r: &RunRecord) -> Vec<String> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Vec<String>, A::Error> {
                let mut keys = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    m.next_value::<IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(keys)
            }
        }
        let text = serde_json::to_string(r).unwrap();
        serde_json::Deserializer::from_str(&text)
            .deserialize_map(Keys)
            .unwrap()
    }

    #[test]
    fn json_is_one_flat_object_in_the_v1_order() {
        let full = RunRecord {
            job: RunJob {
                dist: Some("zipf 0.99".into()),
                ..RunJob::default()
            },
            timing: Timing {
                fine_timeline: Some(FineTimeline {
                    interval_s: 0.05,
                    bw_bytes: vec![1.0],
                }),
                ..Timing::default()
            },
            cache: CacheFigures {
                lru: Some(LruFigures {
                    capacity_pages: 1,
                    hit_ratio: 0.5,
                    min_hit_ratio: 0.6,
                    unbounded_hit_ratio: 0.7,
                    sampled_one_in: 1,
                }),
                ..CacheFigures::default()
            },
            memory: MemoryFigures {
                huge_mapped: Some(HugeMapped {
                    huge_bytes: 0,
                    bytes: 1,
                }),
                memory_limit: Some(MemoryLimit {
                    mechanism: "none",
                    limit_bytes: None,
                    cgroup: None,
                    peak_bytes: None,
                    limit_hits: None,
                    reason: Some("why".into()),
                }),
                ..MemoryFigures::default()
            },
            hot: Some(HotFigures {
                file_size: 1,
                bs: 1,
                warm_cached_pages: 1,
                pages: 1,
                reads: 1,
                misses: 0,
                hit_ratio: None,
                reads_per_s: 1.0,
                misses_per_gib: None,
                rate_limit_per_s: 0,
                miss_detection: "cachestat".into(),
            }),
            ..RunRecord::default()
        };
        assert_eq!(keys(&full), V1_FIELDS);
        // The optional ones left out where absent, the others always there.
        let optional = [
            "dist",
            "lru",
            "fine_timeline",
            "huge_mapped",
            "memory_limit",
            "hot",
        ];
        let want: Vec<&str> = V1_FIELDS
            .into_iter()
            .filter(|f| !optional.contains(f))
            .collect();
        assert_eq!(keys(&RunRecord::default()), want);
    }
}
