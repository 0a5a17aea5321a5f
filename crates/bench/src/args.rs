//! `foliocache bench [OPTIONS]`'s command line, fio-like.
//!
//! Parsing is clap's (derive); the value parsers here turn sizes
//! (`4k`, `64KiB`, `1G`, `3GiB`, plain bytes), engines (`name[options]`)
//! and scenario names into typed values, so a bad value is a usage error
//! (exit code 2, the usage line) before anything runs.

use std::path::PathBuf;

use clap::Args;

use crate::clock::ClockKind;
use crate::spec::{EngineSpec, Rw};
use crate::units::parse_size;

/// The scenarios `--scenario` takes, in the order `--seeds` runs them
/// ([`crate::scenario`] builds each).
pub const SCENARIOS: [&str; 6] = [
    "seqread",
    "randread",
    "readahead",
    "uncached",
    "populate",
    "write",
];

/// The scenarios `--scenario` takes that `--seeds` does not run: too long
/// for the reference set (`larger`: 16 cold runs of a file 4x memory;
/// `programs`: an outside program, `db_bench`, three ways, a minute with
/// `--quick`; `scaling`: four workloads at every thread count; `redb` and
/// `sqlite`: databases built and measured in every configuration, at two
/// sizes; `objectstore`: caches in front of throttled object storage;
/// `advisor`: the cache's predicted hit ratios against measured ones, five
/// workloads at five sizes; `policy`: replacement policies replayed over
/// traces against Belady's MIN; `scans`: hot point reads beside four
/// scans, solo and together, foliocache and the kernel in a memory cgroup;
/// `crash`: a writer killed a thousand times
/// each of three ways).
pub const BY_NAME: [&str; 10] = [
    "larger",
    "programs",
    "scaling",
    "redb",
    "sqlite",
    "objectstore",
    "advisor",
    "policy",
    "scans",
    "crash",
];

/// Every scenario `--scenario` takes: [`SCENARIOS`], then [`BY_NAME`].
pub fn all_scenarios() -> Vec<&'static str> {
    SCENARIOS.iter().chain(&BY_NAME).copied().collect()
}

/// Options of `foliocache bench`.
// The field docs are the help text clap prints, where `foliocache[pin]`
// is an engine's spelling, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, Args)]
#[command(after_help = AFTER_HELP)]
pub struct BenchArgs {
    /// An engine to run, repeatable: foliocache, kernel, direct, dontcache,
    /// mmap, memcpy (copies out of memory holding the file's bytes: a
    /// cached read's limit; reads only), anon (populate only), fuse
    /// (through a foliocache FUSE mount),
    /// fuse-null (through a mount serving zeros with no cache: the FUSE
    /// crossing alone; reads only), tokio-fs (by name only: tokio's
    /// spawn_blocking of a buffered pread, from tasks=N tasks on one
    /// current-thread runtime per thread; reads only), optionally with
    /// options in brackets,
    /// e.g. `foliocache[insert=single,ra=kernel]` (options: see below).
    /// Default: every engine that applies (each scenario's own list).
    #[arg(long = "engine", value_name = "ENGINE", value_parser = EngineSpec::parse)]
    pub engines: Vec<EngineSpec>,

    /// The IO pattern of a custom job.
    #[arg(long, value_enum, value_name = "RW", conflicts_with_all = ["scenarios", "seeds"])]
    pub rw: Option<Rw>,

    /// Block size of each read or write (custom job; default 4k).
    #[arg(long, value_name = "SIZE", value_parser = parse_nonzero_size,
          conflicts_with_all = ["scenarios", "seeds"])]
    pub bs: Option<u64>,

    /// Data file size (custom job default 1G; overrides a scenario's size,
    /// readahead's per thread; uncached's stream, whose cache is then a
    /// quarter of it unless --capacity is given).
    #[arg(long, value_name = "SIZE", value_parser = parse_nonzero_size)]
    pub size: Option<u64>,

    /// Threads of a custom job, each with its own file unless `--shared`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024),
          conflicts_with_all = ["scenarios", "seeds"])]
    pub numjobs: Option<u16>,

    /// The jobs of a custom job share one file.
    #[arg(long, conflicts_with_all = ["scenarios", "seeds"])]
    pub shared: bool,

    /// Run each engine for this many seconds (time-based; a scenario's
    /// default is 4 s with --quick, 10 s without; readahead, uncached and
    /// populate are always one pass, write one pass unless given). A custom
    /// job without it makes one pass over its data. A write run ends with
    /// a sync, inside its figures.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub runtime: Option<f64>,

    /// foliocache's memory (default: 1.25x the job's data, so all of it
    /// fits; for uncached: C, 1G or 256M with --quick, also the other
    /// engines' memory cgroup limit; for larger: the memory budget M, 1G
    /// or 256M with --quick, foliocache's capacity M less 1/40 for its
    /// bookkeeping).
    #[arg(long, value_name = "SIZE", value_parser = parse_nonzero_size)]
    pub capacity: Option<u64>,

    /// objectstore: the remote store's latency per request, in
    /// milliseconds (default 20; S3's first-byte latency is 100 to 200).
    #[arg(long, value_name = "MS")]
    pub remote_latency: Option<u64>,

    /// Drop the data from every cache before each engine's run
    /// (posix_fadvise DONTNEED for the kernel, a fresh cache for
    /// foliocache) instead of warming it.
    #[arg(long)]
    pub cold: bool,

    /// Where data files go (default: a temporary directory, removed after
    /// the run unless --keep).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Keep the data files after the run; with --dir, a later run reuses
    /// a kept file of the right size and content instead of writing it
    /// again.
    #[arg(long)]
    pub keep: bool,

    /// Run a custom job's engines other than foliocache with the process
    /// in a memory cgroup limited to SIZE (their page cache counts
    /// against it), where the machine allows it.
    #[arg(long, value_name = "SIZE", value_parser = parse_nonzero_size,
          conflicts_with_all = ["scenarios", "seeds"])]
    pub memory_limit: Option<u64>,

    /// Run a named scenario (repeatable): seqread, randread, readahead,
    /// uncached, populate, write (the reference set), larger, programs,
    /// scaling, redb, sqlite (by name only).
    #[arg(long = "scenario", value_name = "NAME", value_parser = parse_scenario,
          conflicts_with = "seeds")]
    pub scenarios: Vec<&'static str>,

    /// Run every reference scenario.
    #[arg(long)]
    pub seeds: bool,

    /// Shorten the scenarios (512 MiB file and 4 s runs; readahead 256 MiB
    /// per thread; uncached a 256 MiB cache and a 1 GiB stream; populate
    /// 1 GiB; write 128 MiB) so the whole set takes under three minutes on
    /// 2 cores; larger (by name only) a 256 MiB budget and a 1 GiB file.
    #[arg(long)]
    pub quick: bool,

    /// Reads per second of `uncached`'s hot reader, in all, on a deadline
    /// schedule (0: unthrottled, back to back). Default 16384: each page of
    /// the hot file is read about once a second with --quick (64 MiB),
    /// once every 4 s in a full run (256 MiB): a warm working set, not a
    /// hot one. The kernel's LRU keeps a page only once it is read twice
    /// while inactive, and a cached stream at device speed sweeps the
    /// inactive list in a fraction of a second: at this rate its cached
    /// stream takes a good part of the hot set, an uncached one leaves it
    /// (foliocache's cached stream goes first, its streamed list) (`docs/measurements/2026-11-22-uncached.md` has the figures). Unthrottled, every
    /// page is read several times a second, turns active, and stays beside
    /// any stream. With `scans`: its fixed rate, for every contender and
    /// round (default: the slowest back to back solo rate over 100).
    #[arg(long, value_name = "N")]
    pub hot_rate: Option<u64>,

    /// Run the engine list this many times, alternating its order, and
    /// report each engine's best run (default: 2 for scenarios, 1 for a
    /// custom job).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: Option<u32>,

    /// crash: kills per way and group trials (default 1000 each; with
    /// --quick 100 kills and 3 trials). A group trial kills 120 of a
    /// launch's writers one at a time, then every process, the launcher
    /// too, then runs `foliocache recover`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub trials: Option<u64>,

    /// crash: kills per way, when not `--trials` (0: the group trials
    /// alone, as a long run of them takes).
    #[arg(long, value_name = "N")]
    pub kills: Option<u64>,

    /// populate: the pause before each run, in seconds (default 2), so
    /// that the memory the last run freed has gone back to the host and
    /// each run's first touch is of fresh memory (this VM hands memory
    /// left free about 2 s back). 0 for tests: runs then reuse memory the
    /// host still backs, and look faster than they are.
    #[arg(long, value_name = "SECS", value_parser = parse_pause)]
    pub settle: Option<f64>,

    /// Write the results as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,

    /// Draw throughput over time per engine as an SVG chart at PATH.
    #[arg(long, value_name = "PATH.svg")]
    pub plot: Option<PathBuf>,

    /// Check every block read against the data generator (and, for writes,
    /// read the files back after each run): slower, so the figures of a
    /// verifying run are not comparable.
    #[arg(long)]
    pub verify: bool,

    /// Start each thread's buffer this many bytes past a 4 KiB boundary
    /// (0-4095), to measure copies into misaligned buffers.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u16).range(0..4096))]
    pub buf_offset: u16,

    /// Do something with the bytes every read gives: sum them as 8-byte
    /// words. Copy engines sum the buffer they copied into; mmap and
    /// foliocache[pin] sum the bytes in place (zero copy). seqread and
    /// randread add foliocache[pin] to their default engines.
    #[arg(long, conflicts_with = "verify")]
    pub consume: bool,

    /// What times each operation: the CPU's TSC (where the kernel's
    /// clocksource is tsc) or std's Instant.
    #[arg(long, value_enum, default_value_t = ClockKind::Auto)]
    pub clock: ClockKind,
}

const AFTER_HELP: &str = "\
Sizes: bytes, or with a binary suffix: 4k, 64KiB, 1M, 1G, 3GiB (k = KiB = 1024).
Without --rw/--bs/--numjobs/--shared/--scenario/--seeds, bench runs the
built-in scenarios (--seeds), shortened (--quick) unless --seeds is given.
Scenarios: seqread (a fully cached file, sequential 4 KiB and 64 KiB reads,
1 job), randread (the same file, 4 KiB random reads, one job per CPU) and
readahead (cold sequential 128 KiB reads, 2 jobs per CPU each with its own
file, one pass: foliocache, foliocache[insert=single], kernel, and direct at
1 MiB; cold whatever --cold says) and uncached (a cold 64 KiB stream of 4C
through a cache of C, alone and beside a hot reader of a C/4 file:
foliocache, foliocache[dontcache], kernel and dontcache, the last two in a
memory cgroup limited to C where the machine allows; C = --capacity, 1G,
256M with --quick; the hot reader paced to --hot-rate reads/s), populate
(fill 3 GiB of fresh memory, 1 GiB with --quick, with 2 MiB writes, once:
foliocache[huge=off,folio=4k] into a memfile, its arena's populate (4 KiB
pages) in its time; the same with grab=single; the same with folio=2m;
anon, a memset of a fresh anonymous mapping; anon[thp], with huge pages;
kernel, a memfd; each run after a 2 s pause so its memory is fresh) and
write (a 1 GiB file, 128 MiB with --quick, written sequentially in 64 KiB,
then an eighth of it at random in 4 KiB, one pass, fsync inside the
figures: foliocache, foliocache[dontcache], kernel, direct, dontcache).
By name only: larger (random 4 KiB reads of a file 4x a memory budget M,
1G, 256M with --quick, --capacity; uniform and zipfian, 2 and 8 threads,
cold: foliocache within M, kernel, direct and mmap in a memory cgroup of M);
programs (RocksDB's db_bench, where installed: fillseq, readseq and
readrandom with checksums, 1M keys, 200k with --quick, --size / 216 bytes;
on the data directory (ext4), through a foliocache FUSE mount and under the
interposer, libfoliocache_preload.so; caches of --capacity, default 4x the
data; then readrandom, 2 threads, of 4M keys, 900k with --quick, in a memory
cgroup of 256M, 96M with --quick: ext4, RocksDB's block cache at 3/4 of it
(at most 40M less) over use_direct_reads, the interposer at that and 1/32); scaling (throughput against threads, 1, 2, 4, ... up to the CPUs and
twice them: random and sequential 4 KiB hits of a shared 1 GiB file, 64 MiB
with --quick, random 4 KiB writes into it, 4 s runs, 0.5 s with --quick,
and cold sequential 128 KiB reads of a 256 MiB file per thread, 16 MiB with
--quick: foliocache, kernel and, for hits, memcpy);
redb (redb-bench's workloads on redb's FileBackend, its cache at 1/2
and 3/4 of a limit M, on O_DIRECT, and on foliocache; data that fits M and
4x M; M = --capacity, 256M, 32M with --quick; every configuration in a memory
cgroup of M); sqlite (a speedtest1-like mix through the unix VFS and the
foliocache VFS, with and without mmap_size; same sizes and limit);
objectstore (objects behind LocalFileSystem and ThrottledStore, S3's
bandwidth per request and --remote-latency MS: no cache, SlateDB's 4 MiB
parts, foyer 0.22's HybridCache (feature foyer), foliocache in memory and with its
disk tier; zipf point reads, the same beside scans, a restart after kill -9;
memory M = --capacity, 64M, 16M with --quick; disk and data 4x M).
foliocache engine options: populate=eager|lazy, folio=SIZE,
insert=batched|single, ra=SIZE|kernel|off, io=uring|threads|auto, dontcache
(every read with ReadFlags::DONTCACHE, from an empty cache; every write with
WriteFlags::DONTCACHE), grab=batched|single (how writes create their
folios: File::set_write_insert), huge=on|off (the arena's transparent huge
pages: CacheBuilder::huge_pages), async and tasks=N (File::read_at_async
from N tasks, 1 by default, on one current-thread runtime per thread; reads
only).
tokio-fs engine options: tasks=N (1 by default).
anon engine options: thp (MADV_HUGEPAGE), populate (MADV_POPULATE_WRITE
first, in the run's setup).";

impl BenchArgs {
    /// True if the command line describes a custom job rather than
    /// scenarios.
    pub fn is_custom_job(&self) -> bool {
        self.rw.is_some() || self.bs.is_some() || self.numjobs.is_some() || self.shared
    }
}

fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err(format!("`{s}`: must be more than 0 bytes")),
        n => Ok(n),
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('s');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a duration (want seconds, more than 0, e.g. 5 or 0.5)"
        )),
    }
}

fn parse_pause(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('s');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a pause (want seconds from 0 to 600, e.g. 2.5)"
        )),
    }
}

fn parse_scenario(s: &str) -> Result<&'static str, String> {
    let all = all_scenarios();
    all.iter()
        .copied()
        .find(|n| *n == s)
        .ok_or_else(|| format!("unknown scenario `{s}` (available: {})", all.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonzero_sizes() {
        assert!(parse_nonzero_size("0").is_err());
        assert_eq!(parse_nonzero_size("1"), Ok(1));
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("5"), Ok(5.0));
        assert_eq!(parse_seconds("0.5s"), Ok(0.5));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("soon").is_err());
    }

    #[test]
    fn scenarios() {
        assert_eq!(parse_scenario("seqread"), Ok("seqread"));
        assert_eq!(parse_scenario("readahead"), Ok("readahead"));
        assert_eq!(parse_scenario("uncached"), Ok("uncached"));
        assert_eq!(parse_scenario("populate"), Ok("populate"));
        assert_eq!(parse_scenario("write"), Ok("write"));
        let e = parse_scenario("fill").unwrap_err();
        assert!(
            e.contains(
                "unknown scenario `fill` (available: seqread, randread, readahead, uncached, \
                 populate, write, larger, programs, scaling, redb, sqlite, objectstore, advisor, policy, scans, crash)"
            ),
            "{e}"
        );
    }
}
