//! What a bench invocation runs: named reference scenarios, or one custom
//! job from the command line, resolved into a [`Plan`].
//!
//! Scenarios reproduce the reference experiments (the seeds table of
//! `../shared/reference/linux-page-cache.md`) on foliocache and the kernel
//! side by side: `seqread`, `randread`, `readahead`, `uncached`,
//! `populate` (seed (e): filling fresh memory through the cache's batched
//! folio grab, against a `memset` of anonymous memory) and `write`
//! (buffered writes, with the sync that makes them durable in the
//! figures).

use std::time::Duration;

use crate::args::{BenchArgs, Rw};
use crate::clock::ClockKind;
use crate::engine::{EngineKind, EngineSpec};
use crate::report::fmt_size;
use crate::sys::PAGE;
use foliocache::internals::Insert;

/// The scenarios this build has, in the order `--seeds` runs them.
pub const NAMES: [&str; 6] = [
    "seqread",
    "randread",
    "readahead",
    "uncached",
    "populate",
    "write",
];

/// A scenario's file size (full, and with `--quick`).
const SCENARIO_SIZE: u64 = 1 << 30;
const QUICK_SIZE: u64 = 512 << 20;
/// `readahead`'s file size per thread (full, and with `--quick`).
const RA_SIZE: u64 = 1 << 30;
const RA_QUICK_SIZE: u64 = 256 << 20;
/// `readahead`'s block sizes: the reads under test, and `direct`'s.
const RA_BS: u64 = 128 << 10;
const RA_DIRECT_BS: u64 = 1 << 20;
/// A scenario engine run's length (full, and with `--quick`).
const RUNTIME: f64 = 10.0;
const QUICK_RUNTIME: f64 = 4.0;
/// `uncached`'s capacity C (full, and with `--quick`); the stream's file
/// is 4C, the hot file C/4.
const UNCACHED_C: u64 = 1 << 30;
const UNCACHED_QUICK_C: u64 = 256 << 20;
/// The smallest C `uncached` runs with (the kernel engines' memory limit).
const UNCACHED_MIN_C: u64 = 1 << 20;
/// `uncached`'s block sizes: the stream's, and the hot reader's.
const UNCACHED_BS: u64 = 64 << 10;
const HOT_BS: u64 = 4096;
/// The hot reader's reads per second, in all, unless `--hot-rate` says
/// otherwise: each page of the hot file read about once a second with
/// `--quick` (16384 pages), once every 4 s in a full run (65536 pages).
/// Both LRUs keep a page only if it is read twice while inactive; a cached
/// stream at device speed (2-2.8 GiB/s here) sweeps the inactive list in a
/// fraction of a second, so at this rate a good part of the hot set is
/// lost to it (hits beside the cached streams: 65-85% with `--quick`,
/// 69-90% full; 100% beside `foliocache[dontcache]`), and the experiment
/// shows what uncached streaming is for. At 4x the rate (`--quick`) the
/// cached streams still cost 4-14% of the hits; at 0, as fast as it can,
/// every page is read several times a second, turns active, and stays
/// beside any stream.
pub const DEFAULT_HOT_RATE: u64 = 16384;
/// `uncached`'s timeline intervals per second (50 ms: a quick run's stream
/// lasts about half a second, a full one about two).
const UNCACHED_BINS: u32 = 20;
/// `populate`'s memory (full, and with `--quick`) and write size.
const POPULATE_SIZE: u64 = 3 << 30;
const POPULATE_QUICK_SIZE: u64 = 1 << 30;
const POPULATE_BS: u64 = 2 << 20;
/// The pause before each populate run: this VM hands memory left free for
/// about 2 s back to the host, and the next first touch of it costs 3-13 us
/// a page; without the pause a run would reuse the pages the run before it
/// freed, still backed, and look several times faster.
pub const POPULATE_SETTLE: Duration = Duration::from_millis(2000);
/// The populate scenario's foliocache engine, the one its targets judge:
/// `File::write_at` into a memfile, whose writes grab their folios with
/// `grab_folios`, 4 KiB folios and pages, the arena populated as
/// [`POPULATE_MODE_WHY`] says.
pub const POPULATE_FOLIO: &str = "foliocache[huge=off,folio=4k]";
/// The same, its writes creating their folios one at a time
/// (`File::set_write_insert(Insert::Single)`): the only difference.
pub const POPULATE_SINGLE: &str = "foliocache[huge=off,folio=4k,grab=single]";
/// The same as [`POPULATE_FOLIO`] with 2 MiB folios: one folio per write,
/// so batching has nothing to batch.
pub const POPULATE_LARGE: &str = "foliocache[huge=off,folio=2m]";
/// Why the populate scenario's foliocache engines populate their arena as
/// they do, and why 4 KiB folios.
///
/// Measured on this VM (1 GiB, fresh memory each time): the first touch of
/// transparent huge pages (the arena asks for them by default) ran at
/// 0.26-0.45 GiB/s, `MADV_POPULATE_WRITE` of 4 KiB pages at 0.9-2.7 GiB/s
/// (a `memset` of 4 KiB pages 0.4-2.2 GiB/s). Eager keeps the faults out
/// of the writes (lazy measured the same in all, with huge pages, and
/// put 5 ms faults in 2 MiB writes).
pub const POPULATE_MODE_WHY: &str = "huge=off with populate=eager: the arena is faulted in at \
     build as 4 KiB pages with MADV_POPULATE_WRITE (0.9-2.7 GiB/s on this VM, against \
     0.26-0.45 GiB/s for the transparent huge pages the arena asks for by default; anon[thp] \
     shows that cost), and that build is part of the run; folio=4k: a 2 MiB write is 512 \
     folios, which grab_folios creates in one batch and grab=single one at a time (with \
     2 MiB folios, the folio=2m row, a write is one folio either way)";
/// The target of population through `grab_folios`: at most this many
/// times the time of the anonymous memset.
const POPULATE_MAX_TIME_VS_ANON: f64 = 1.05;
/// The target of batched population over one folio at a time.
const POPULATE_MIN_VS_SINGLE: f64 = 1.1;
/// `write`'s sequential file (full, and with `--quick`); its random-write
/// file is an eighth of it (4 KiB `O_DIRECT` writes each wait for the
/// device).
const WRITE_SIZE: u64 = 1 << 30;
const WRITE_QUICK_SIZE: u64 = 128 << 20;
const WRITE_SEQ_BS: u64 = 64 << 10;
const WRITE_RAND_BS: u64 = 4 << 10;
/// A custom job's defaults.
const DEFAULT_BS: u64 = 4096;
const DEFAULT_SIZE: u64 = 1 << 30;

/// One job: an IO pattern run on each of a list of engines.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The IO pattern.
    pub rw: Rw,
    /// Bytes per read or write.
    pub bs: u64,
    /// Threads.
    pub numjobs: usize,
    /// Whether the threads share one file (else one file each).
    pub shared: bool,
    /// Each data file's size.
    pub file_size: u64,
    /// Time-based run length, or one pass over the data per thread.
    pub runtime: Option<Duration>,
    /// The engines, in order.
    pub engines: Vec<EngineSpec>,
    /// Every engine starts cold: the files dropped from the page cache, a
    /// fresh foliocache cache (`--cold`, or a scenario that is cold by
    /// itself).
    pub cold: bool,
    /// Timeline intervals per second (1: a point per second; 20: per
    /// 50 ms, with the per-second timeline derived from them).
    pub bins_per_second: u32,
    /// foliocache's capacity for this job, if the scenario sets it (else
    /// `--capacity`, or 1.25x the data).
    pub capacity: Option<u64>,
    /// The engines other than foliocache run with the process in a memory
    /// cgroup limited to this many bytes (the page cache they bring in
    /// counts against it), where the machine allows it.
    pub memory_limit: Option<u64>,
    /// A second reader beside the job: random reads of a hot file, warmed
    /// into the engine's cache first, counting its hits.
    pub hot: Option<HotSpec>,
    /// The job writes into memory, not data files (the populate
    /// scenario): each engine gets fresh memory for every run (see
    /// [`crate::engine`]), whose setup is part of the run, and there is
    /// no sync at the end.
    pub memory: bool,
    /// A pause before each run, after the last run's memory was freed,
    /// so that this VM has handed it back to the host and every run's
    /// first touch costs what fresh memory costs.
    pub settle: Option<Duration>,
}

/// The hot reader beside a job ([`JobSpec::hot`]): one thread reading a
/// file of its own at random, through the same cache as the job's engine,
/// from before the job starts until it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotSpec {
    /// The hot file's size.
    pub file_size: u64,
    /// Bytes per read.
    pub bs: u64,
    /// Reads per second, in all, on a deadline schedule (0: as fast as it
    /// can).
    pub rate: u64,
}

impl JobSpec {
    /// Data files the job uses.
    pub fn nfiles(&self) -> usize {
        if self.shared {
            1
        } else {
            self.numjobs
        }
    }

    /// The timeline's interval.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(1) / self.bins_per_second.max(1)
    }

    /// Whole blocks in a data file (reads and writes never pass the last
    /// whole block).
    pub fn nblocks(&self) -> u64 {
        self.file_size / self.bs
    }

    /// A short title: `randread bs=4KiB numjobs=2 shared`, `read bs=64KiB
    /// numjobs=1 + hot randread 4KiB`.
    pub fn title(&self) -> String {
        format!(
            "{} bs={} numjobs={}{}{}",
            self.rw.name(),
            fmt_size(self.bs),
            self.numjobs,
            if self.shared && self.numjobs > 1 {
                " shared"
            } else {
                ""
            },
            self.hot.map_or(String::new(), |h| format!(
                " + hot randread {}{}",
                fmt_size(h.bs),
                fmt_rate(h.rate)
            ))
        )
    }
}

/// A named group of jobs, reported together.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `seqread`, `randread`, or `custom`.
    pub name: String,
    /// What it measures, in a sentence or two.
    pub description: String,
    /// The jobs. Their runs interleave: each round runs every engine of
    /// every job, in alternating order.
    pub jobs: Vec<JobSpec>,
    /// Bandwidth ratios between engines (possibly of different jobs) to
    /// report beside the table.
    pub ratios: Vec<RatioSpec>,
    /// The targets, checked in the summary (met or not).
    pub targets: Vec<TargetSpec>,
    /// Print each engine's timeline, CPU per GiB, cache figures and hot
    /// reader below the table.
    pub detailed: bool,
}

/// A target a scenario checks, by engine label and job index.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSpec {
    /// Every timeline interval of each of `engine`'s runs of job `job`
    /// after the first is at least `min` times the run's median interval
    /// (per second where runs last 4 s or more, else per finer interval).
    Flat {
        /// The job.
        job: usize,
        /// The engine.
        engine: String,
        /// The least fraction of the median.
        min: f64,
    },
    /// The bandwidth ratio of the scenario's ratio `numerator /
    /// denominator`, median of the rounds, is at least `min`.
    Bandwidth {
        /// The engine above the line.
        numerator: String,
        /// The engine below it.
        denominator: String,
        /// The job of the ratio ([`RatioSpec::job`]).
        job: Option<usize>,
        /// The least ratio.
        min: f64,
    },
    /// CPU seconds per GiB of `engine` over `than`'s in job `job`, median
    /// of the rounds, is at most `max`.
    CpuPerGib {
        /// The job.
        job: usize,
        /// The engine measured.
        engine: String,
        /// The engine it is held against.
        than: String,
        /// The largest ratio.
        max: f64,
    },
    /// The hot reader's hit ratio beside `engine` in job `job` is at least
    /// `min` in every run.
    HitRatio {
        /// The job (one with a hot reader).
        job: usize,
        /// The engine.
        engine: String,
        /// The least hit ratio.
        min: f64,
    },
}

/// A bandwidth ratio a scenario reports: `numerator / denominator`, by
/// engine label.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioSpec {
    /// The engine above the line.
    pub numerator: String,
    /// The engine below it.
    pub denominator: String,
    /// The ratio the issue asks for, if any.
    pub target: Option<f64>,
    /// The job whose runs it pairs (for a scenario whose jobs run the
    /// same engines); `None`: the first job that ran each engine.
    pub job: Option<usize>,
}

/// foliocache's default capacity: 1.25x the data, in whole 2 MiB.
pub fn default_capacity(data: u64) -> u64 {
    const GRAIN: u64 = 2 << 20;
    (data + data / 4).div_ceil(GRAIN) * GRAIN
}

/// Everything one invocation runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// How many times each job's engine list runs (alternating order).
    pub repeat: u32,
    /// `--cold`.
    pub cold: bool,
    /// `--verify`.
    pub verify: bool,
    /// `--buf-offset`.
    pub buf_offset: usize,
    /// `--capacity`.
    pub capacity: Option<u64>,
    /// `--quick`.
    pub quick: bool,
    /// The clock that times operations (resolved).
    pub clock: ClockKind,
}

/// Resolves the command line into a plan.
///
/// # Errors
/// A usage error message: a combination of options that cannot run.
pub fn plan(args: &BenchArgs) -> Result<Plan, String> {
    let custom = args.is_custom_job();
    // No job and no scenario named: the reference set, shortened unless
    // --seeds was asked for explicitly.
    let quick = args.quick || (!custom && !args.seeds && args.scenarios.is_empty());
    let runtime = |default: f64| Some(Duration::from_secs_f64(args.runtime.unwrap_or(default)));
    let scenarios = if custom {
        vec![custom_job(args)?]
    } else {
        let names: Vec<&str> = if args.scenarios.is_empty() {
            NAMES.to_vec()
        } else {
            args.scenarios.clone()
        };
        let rt = runtime(if quick { QUICK_RUNTIME } else { RUNTIME });
        names
            .iter()
            .map(|n| scenario(n, args, quick, rt))
            .collect::<Result<Vec<_>, _>>()?
    };
    for s in &scenarios {
        for j in &s.jobs {
            check_job(j, args)?;
        }
    }
    if args.hot_rate.is_some()
        && !scenarios
            .iter()
            .flat_map(|s| &s.jobs)
            .any(|j| j.hot.is_some())
    {
        return Err(
            "--hot-rate paces the uncached scenario's hot reader: add --scenario uncached (or \
             --seeds)"
                .into(),
        );
    }
    if args.settle.is_some() && !scenarios.iter().flat_map(|s| &s.jobs).any(|j| j.memory) {
        return Err(
            "--settle paces the populate scenario's runs: add --scenario populate (or --seeds)"
                .into(),
        );
    }
    if let Some(c) = args.capacity {
        if c < PAGE as u64 {
            return Err(format!("--capacity {c}: at least one page (4k)"));
        }
    }
    let repeat = args.repeat.unwrap_or(if custom { 1 } else { 2 });
    Ok(Plan {
        scenarios,
        repeat,
        cold: args.cold,
        verify: args.verify,
        buf_offset: args.buf_offset as usize,
        capacity: args.capacity,
        quick,
        clock: args.clock.resolve(),
    })
}

fn custom_job(args: &BenchArgs) -> Result<Scenario, String> {
    let rw = args.rw.unwrap_or(Rw::Read);
    let engines = if args.engines.is_empty() {
        EngineKind::ALL
            .into_iter()
            // fuse and fuse-null by name only: they mount, and need
            // /dev/fuse.
            .filter(|k| k.on_files() && !k.fuse())
            .map(EngineSpec::plain)
            .collect()
    } else {
        args.engines.clone()
    };
    let job = JobSpec {
        rw,
        bs: args.bs.unwrap_or(DEFAULT_BS),
        numjobs: args.numjobs.map_or(1, usize::from),
        shared: args.shared,
        file_size: args.size.unwrap_or(DEFAULT_SIZE),
        runtime: args.runtime.map(Duration::from_secs_f64),
        engines,
        cold: args.cold,
        bins_per_second: 1,
        capacity: None,
        memory_limit: None,
        hot: None,
        memory: false,
        settle: None,
    };
    Ok(Scenario {
        name: "custom".into(),
        description: format!(
            "{} on {} file{} of {}, {}{}",
            job.title(),
            job.nfiles(),
            if job.nfiles() == 1 { "" } else { "s" },
            fmt_size(job.file_size),
            match job.runtime {
                Some(d) => format!("{:.1} s per engine", d.as_secs_f64()),
                None => "one pass per thread".into(),
            },
            if args.cold {
                ", cold caches"
            } else {
                ", warm caches"
            }
        ),
        jobs: vec![job],
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
    })
}

fn scenario(
    name: &str,
    args: &BenchArgs,
    quick: bool,
    runtime: Option<Duration>,
) -> Result<Scenario, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let size = args
        .size
        .unwrap_or(if quick { QUICK_SIZE } else { SCENARIO_SIZE });
    let engines = if args.engines.is_empty() {
        [EngineKind::Foliocache, EngineKind::Kernel, EngineKind::Mmap]
            .map(EngineSpec::plain)
            .to_vec()
    } else {
        args.engines.clone()
    };
    let cold = args.cold;
    let job = |rw, bs, numjobs| JobSpec {
        rw,
        bs,
        numjobs,
        shared: true,
        file_size: size,
        runtime,
        engines: engines.clone(),
        cold,
        bins_per_second: 1,
        capacity: None,
        memory_limit: None,
        hot: None,
        memory: false,
        settle: None,
    };
    let cached = if cold {
        "(run --cold: each engine starts with the file out of every cache)"
    } else {
        "fully cached"
    };
    let s = match name {
        "seqread" => Scenario {
            name: name.into(),
            description: format!(
                "A {} file, {cached}, read sequentially by one thread with sync reads of \
                 4 KiB and of 64 KiB: the cost of a cache hit.",
                fmt_size(size)
            ),
            jobs: {
                let mut big = job(Rw::Read, 64 << 10, 1);
                if args.engines.is_empty() {
                    // The FUSE crossing, at the target's block
                    // size only (each run is time-based: a run more),
                    // and the crossing alone, its ceiling.
                    big.engines.push(EngineSpec::plain(EngineKind::Fuse));
                    big.engines.push(EngineSpec::plain(EngineKind::FuseNull));
                }
                vec![job(Rw::Read, 4096, 1), big]
            },
            ratios: fuse_ratios(&engines, args.engines.is_empty()),
            targets: fuse_ratios(&engines, args.engines.is_empty())
                .into_iter()
                .filter_map(|r| {
                    Some(TargetSpec::Bandwidth {
                        min: r.target?,
                        numerator: r.numerator,
                        denominator: r.denominator,
                        job: r.job,
                    })
                })
                .collect(),
            detailed: false,
        },
        "randread" => Scenario {
            name: name.into(),
            description: format!(
                "The same {} file, {cached}, read with 4 KiB reads at uniformly random \
                 offsets by {cpus} threads (one per CPU) sharing it: hits under concurrency.",
                fmt_size(size)
            ),
            jobs: vec![job(Rw::Randread, 4096, cpus)],
            ratios: Vec::new(),
            targets: Vec::new(),
            detailed: false,
        },
        "readahead" => readahead(args, quick, cpus),
        "uncached" => uncached(args, quick)?,
        "populate" => populate(args, quick),
        "write" => write(args, quick),
        other => {
            return Err(format!(
                "unknown scenario `{other}` (available: {})",
                NAMES.join(", ")
            ))
        }
    };
    Ok(s)
}

/// The target for the FUSE mount: 64 KiB cached sequential reads
/// through it at least this fraction of the kernel's buffered reads.
const FUSE_TARGET: f64 = 0.5;

/// seqread's ratios at 64 KiB (its second job) where their engines run
/// (`default`: the default engines, which add fuse and fuse-null):
/// `fuse / kernel` (the target's), `fuse-null / kernel` (the crossing's
/// ceiling: no FUSE server can do better) and `fuse / fuse-null` (how
/// close the mount comes to that ceiling).
fn fuse_ratios(engines: &[EngineSpec], default: bool) -> Vec<RatioSpec> {
    let label = |k: EngineKind| {
        if default {
            Some(k.name().to_string())
        } else {
            engines
                .iter()
                .find(|e| e.kind == k)
                .map(|e| e.label.clone())
        }
    };
    let kernel = engines
        .iter()
        .find(|e| e.kind == EngineKind::Kernel)
        .map(|e| e.label.clone());
    let pairs = [
        (label(EngineKind::Fuse), kernel.clone(), Some(FUSE_TARGET)),
        (label(EngineKind::FuseNull), kernel, None),
        (label(EngineKind::Fuse), label(EngineKind::FuseNull), None),
    ];
    pairs
        .into_iter()
        .filter_map(|(n, d, target)| {
            Some(RatioSpec {
                numerator: n?,
                denominator: d?,
                target,
                job: Some(1),
            })
        })
        .collect()
}

/// `readahead`, seed (a): cold sequential reads, bs 128 KiB, 2 threads per
/// CPU each reading its own file once; `direct` at 1 MiB as the device's
/// ceiling. Cold by itself, one pass (a second pass would be warm, so
/// `--runtime` does not apply).
///
/// Engines: `foliocache`, `foliocache[insert=single]` and `kernel` at
/// 128 KiB, `direct` at 1 MiB; or those given with `--engine`, every one at
/// 128 KiB except `direct`, which runs at 1 MiB.
fn readahead(args: &BenchArgs, quick: bool, cpus: usize) -> Scenario {
    let numjobs = 2 * cpus;
    let size = args
        .size
        .unwrap_or(if quick { RA_QUICK_SIZE } else { RA_SIZE });
    let engines: Vec<EngineSpec> = if args.engines.is_empty() {
        [
            "foliocache",
            "foliocache[insert=single]",
            "kernel",
            "direct",
        ]
        .iter()
        .filter_map(|e| EngineSpec::parse(e).ok())
        .collect()
    } else {
        args.engines.clone()
    };
    let (direct, reads): (Vec<EngineSpec>, Vec<EngineSpec>) = engines
        .into_iter()
        .partition(|e| e.kind == EngineKind::Direct);
    let job = |bs, engines: Vec<EngineSpec>| JobSpec {
        rw: Rw::Read,
        bs,
        numjobs,
        shared: false,
        file_size: size,
        runtime: None,
        engines,
        cold: true,
        bins_per_second: 1,
        capacity: None,
        memory_limit: None,
        hot: None,
        memory: false,
        settle: None,
    };
    // Ratios: the first foliocache engine over the kernel, direct, and
    // every other foliocache engine (the targets where it sets one).
    let mut ratios = Vec::new();
    if let Some(num) = reads.iter().find(|e| e.kind == EngineKind::Foliocache) {
        let others = reads
            .iter()
            .filter(|e| e.kind == EngineKind::Kernel)
            .chain(&direct)
            .chain(
                reads
                    .iter()
                    .filter(|e| e.kind == EngineKind::Foliocache && e.label != num.label),
            );
        for den in others {
            let target = match (num.label.as_str(), den.label.as_str()) {
                ("foliocache", "kernel" | "foliocache[insert=single]") => Some(1.0),
                ("foliocache", "direct") => Some(0.9),
                _ => None,
            };
            ratios.push(RatioSpec {
                numerator: num.label.clone(),
                denominator: den.label.clone(),
                target,
                job: None,
            });
        }
    }
    let data = size * numjobs as u64;
    let capacity = args.capacity.unwrap_or_else(|| default_capacity(data));
    let mut jobs = Vec::new();
    if !reads.is_empty() {
        jobs.push(job(RA_BS, reads));
    }
    if !direct.is_empty() {
        jobs.push(job(RA_DIRECT_BS, direct));
    }
    Scenario {
        name: "readahead".into(),
        description: format!(
            "Seed (a), cold sequential reads: {numjobs} threads (2 per CPU), each reading its \
             own {} file once, start to end, with sync reads of {} ({} for direct, the device's \
             ceiling). Cold whatever --cold says: before every run the files are dropped from the \
             kernel page cache (POSIX_FADV_DONTNEED) and foliocache gets a fresh cache of {}{}. \
             One pass per thread, not time-based (a second pass would be warm; --runtime does not \
             apply). The host caches this virtio disk, so cold figures swing from minute to \
             minute: engines interleave in alternating order, and the summary's per-round ratios \
             pair runs made seconds apart.",
            fmt_size(size),
            fmt_size(RA_BS),
            fmt_size(RA_DIRECT_BS),
            crate::report::fmt_size_approx(capacity),
            if capacity >= data {
                format!(
                    " (for {} of data: nothing is evicted)",
                    crate::report::fmt_size_approx(data)
                )
            } else {
                format!(
                    " (less than the {} of data: reclaim runs during the run)",
                    crate::report::fmt_size_approx(data)
                )
            }
        ),
        jobs,
        ratios,
        targets: Vec::new(),
        detailed: false,
    }
}

/// `uncached`, seed (d): one job streams a file of 4C once, sequential
/// 64 KiB reads, through a cache of C (foliocache's capacity; the kernel
/// engines' memory cgroup limit), first alone, then beside a hot reader
/// (random 4 KiB reads of a C/4 file warmed into the cache first, all along
/// the stream). Cold, one pass; C is `--capacity`, or a quarter of
/// `--size`, or 1 GiB (256 MiB with `--quick`).
///
/// Engines: `foliocache` (cached: the cache fills and then reclaims),
/// `foliocache[dontcache]` (every read uncached), `kernel` and `dontcache`
/// (`RWF_DONTCACHE`); or those given with `--engine`.
fn uncached(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let c = match (args.capacity, args.size) {
        (Some(c), _) => c,
        (None, Some(size)) => size / 4,
        (None, None) if quick => UNCACHED_QUICK_C,
        (None, None) => UNCACHED_C,
    };
    if c < UNCACHED_MIN_C {
        return Err(format!(
            "uncached scenario: a capacity of {} is too small: at least {} (--capacity, or \
             --size, which sets it to a quarter of the file)",
            crate::report::fmt_size_approx(c),
            fmt_size(UNCACHED_MIN_C)
        ));
    }
    let size = args.size.unwrap_or(4 * c);
    let hot_size = (c / 4) / HOT_BS * HOT_BS;
    let engines: Vec<EngineSpec> = if args.engines.is_empty() {
        ["foliocache", "foliocache[dontcache]", "kernel", "dontcache"]
            .iter()
            .filter_map(|e| EngineSpec::parse(e).ok())
            .collect()
    } else {
        args.engines.clone()
    };
    let stream = JobSpec {
        rw: Rw::Read,
        bs: UNCACHED_BS,
        numjobs: 1,
        shared: true,
        file_size: size,
        runtime: None,
        engines: engines.clone(),
        cold: true,
        bins_per_second: UNCACHED_BINS,
        capacity: Some(c),
        memory_limit: Some(c),
        hot: None,
        memory: false,
        settle: None,
    };
    let rate = args.hot_rate.unwrap_or(DEFAULT_HOT_RATE);
    let beside = JobSpec {
        hot: Some(HotSpec {
            file_size: hot_size,
            bs: HOT_BS,
            rate,
        }),
        ..stream.clone()
    };
    // The roles, by the first engine of each kind.
    let label =
        |f: &dyn Fn(&EngineSpec) -> bool| engines.iter().find(|e| f(e)).map(|e| e.label.clone());
    let folio_uncached = label(&|e| e.kind == EngineKind::Foliocache && e.folio.dontcache);
    let folio_cached = label(&|e| e.kind == EngineKind::Foliocache && !e.folio.dontcache);
    let kernel = label(&|e| e.kind == EngineKind::Kernel);
    let dontcache = label(&|e| e.kind == EngineKind::Dontcache);
    let mut ratios = Vec::new();
    let mut ratio = |n: &Option<String>, d: &Option<String>, target| {
        if let (Some(n), Some(d)) = (n, d) {
            ratios.push(RatioSpec {
                numerator: n.clone(),
                denominator: d.clone(),
                target,
                job: None,
            });
        }
    };
    ratio(&folio_uncached, &folio_cached, Some(1.0));
    ratio(&folio_uncached, &dontcache, Some(1.0));
    ratio(&folio_uncached, &kernel, None);
    ratio(&folio_cached, &kernel, None);
    ratio(&dontcache, &kernel, None);
    let mut targets = Vec::new();
    if let Some(u) = &folio_uncached {
        targets.push(TargetSpec::Flat {
            job: 0,
            engine: u.clone(),
            min: 0.8,
        });
        for d in [&folio_cached, &dontcache].into_iter().flatten() {
            targets.push(TargetSpec::Bandwidth {
                numerator: u.clone(),
                denominator: d.clone(),
                job: None,
                min: 1.0,
            });
        }
        if let Some(d) = &dontcache {
            targets.push(TargetSpec::CpuPerGib {
                job: 0,
                engine: u.clone(),
                than: d.clone(),
                max: 1.0,
            });
        }
        targets.push(TargetSpec::HitRatio {
            job: 1,
            engine: u.clone(),
            min: 0.99,
        });
    }
    Ok(Scenario {
        name: "uncached".into(),
        description: format!(
            "Seed (d), uncached buffered reads: one job reads a {} file once, start to end, with \
             sync reads of {}, through a cache of C = {} (foliocache's capacity; the other \
             engines run with the process in a memory cgroup limited to C): the cached engines \
             fill their cache and then must reclaim, the uncached ones (RWF_DONTCACHE, \
             ReadFlags::DONTCACHE) drop what they read. Cold: before every run the files are \
             dropped from the kernel page cache and foliocache gets an empty cache; one pass \
             (--runtime does not apply). Then the \
             same stream beside a hot reader: random {} reads of a {} file, warmed into the \
             engine's cache first (each block read once, in a random order, so that it sits in small folios as a random \
             reader's data does), {}, \
             all along the stream, counting its hits (a read that \
             would wait for IO, found with a NOWAIT read first, is a miss). Both LRUs keep a \
             page only once it is read twice while inactive: {}. Timelines per 50 ms.",
            fmt_size(size),
            fmt_size(UNCACHED_BS),
            fmt_size(c),
            fmt_size(HOT_BS),
            fmt_size(hot_size),
            if rate == 0 {
                "as fast as it can (--hot-rate 0)".to_string()
            } else {
                format!(
                    "{rate} reads/s in all (--hot-rate), each page about every {}",
                    fmt_period(hot_size / HOT_BS, rate)
                )
            },
            if rate == 0 {
                "unthrottled, it reads every page often enough to keep it active beside any \
                 stream"
            } else {
                "a page read less often than a cached stream sweeps the inactive list is lost \
                 to it, and kept beside an uncached one"
            },
        ),
        jobs: vec![stream, beside],
        ratios,
        targets,
        detailed: true,
    })
}

/// `populate`, seed (e): one thread fills fresh memory of S (3 GiB, 1 GiB
/// with `--quick`, `--size`) with 2 MiB writes, once: [`POPULATE_FOLIO`]
/// (`File::write_at` into a memfile of a new cache of S, 4 KiB folios,
/// grabbed with `grab_folios`), [`POPULATE_SINGLE`] (the same, one folio
/// at a time), [`POPULATE_LARGE`] (2 MiB folios), `anon` (a `memset` of a
/// fresh anonymous mapping), `anon[thp]` (with `MADV_HUGEPAGE`) and
/// `kernel` (a memfd written with `pwrite`). Each run starts with fresh
/// memory after a pause ([`POPULATE_SETTLE`]), and its setup (the cache's
/// build with its arena's populate) is part of its time.
fn populate(args: &BenchArgs, quick: bool) -> Scenario {
    let size = args.size.unwrap_or(if quick {
        POPULATE_QUICK_SIZE
    } else {
        POPULATE_SIZE
    });
    let engines: Vec<EngineSpec> = if args.engines.is_empty() {
        [
            POPULATE_FOLIO,
            POPULATE_SINGLE,
            POPULATE_LARGE,
            "anon",
            "anon[thp]",
            "kernel",
        ]
        .iter()
        .filter_map(|e| EngineSpec::parse(e).ok())
        .collect()
    } else {
        args.engines.clone()
    };
    // Whole writes of up to 2 MiB, whole pages.
    let bs = POPULATE_BS
        .min(size / PAGE as u64 * PAGE as u64)
        .max(PAGE as u64);
    let size = if size >= bs { size / bs * bs } else { size };
    let capacity = size.div_ceil(2 << 20) * (2 << 20);
    let settle = args.settle.map_or(POPULATE_SETTLE, Duration::from_secs_f64);
    let job = JobSpec {
        rw: Rw::Write,
        bs,
        numjobs: 1,
        shared: false,
        file_size: size,
        runtime: None,
        engines: engines.clone(),
        cold: true,
        bins_per_second: 1,
        capacity: Some(args.capacity.unwrap_or(capacity)),
        memory_limit: None,
        hot: None,
        memory: true,
        settle: Some(settle),
    };
    // An engine of the list by its label, or else by its options (so that
    // `--engine 'foliocache[folio=4k,huge=off]'` is the same engine).
    let find = |want: &str| -> Option<String> {
        let w = EngineSpec::parse(want).ok()?;
        engines
            .iter()
            .find(|e| e.label == w.label)
            .or_else(|| {
                engines
                    .iter()
                    .find(|e| e.kind == w.kind && e.folio == w.folio && e.anon == w.anon)
            })
            .map(|e| e.label.clone())
    };
    // The targets' engines: the defaults', or else the first foliocache
    // engine that grabs in batches and the first that grabs one at a time.
    let first_folio = |grab: Insert| {
        engines
            .iter()
            .find(|e| e.kind == EngineKind::Foliocache && e.folio.grab == grab)
            .map(|e| e.label.clone())
    };
    let folio = find(POPULATE_FOLIO).or_else(|| first_folio(Insert::Batched));
    let single = find(POPULATE_SINGLE).or_else(|| first_folio(Insert::Single));
    let large = find(POPULATE_LARGE).filter(|l| Some(l) != folio.as_ref());
    let anon = find("anon");
    let anon_thp = find("anon[thp]");
    let kernel = find("kernel");
    let mut ratios = Vec::new();
    let mut targets = Vec::new();
    let mut ratio = |n: &Option<String>, d: &Option<String>, target: Option<f64>| {
        if let (Some(n), Some(d)) = (n, d) {
            ratios.push(RatioSpec {
                numerator: n.clone(),
                denominator: d.clone(),
                target,
                job: None,
            });
            if let Some(min) = target {
                targets.push(TargetSpec::Bandwidth {
                    numerator: n.clone(),
                    denominator: d.clone(),
                    job: None,
                    min,
                });
            }
        }
    };
    ratio(&folio, &anon, Some(1.0 / POPULATE_MAX_TIME_VS_ANON));
    ratio(&folio, &single, Some(POPULATE_MIN_VS_SINGLE));
    ratio(&large, &anon, None);
    ratio(&folio, &large, None);
    ratio(&folio, &anon_thp, None);
    ratio(&folio, &kernel, None);
    ratio(&kernel, &anon, None);
    Scenario {
        name: "populate".into(),
        description: format!(
            "Seed (e), batched folio population: one thread fills {} of fresh memory with {} \
             writes, once: {POPULATE_FOLIO} writes into a memfile of a new cache of {} \
             (File::write_at, which grabs its folios with grab_folios; {POPULATE_MODE_WHY}); \
             {POPULATE_SINGLE} is the same with File::set_write_insert(Insert::Single); \
             {POPULATE_LARGE} the same with 2 MiB folios; anon memsets a fresh anonymous \
             mapping (its page faults included), anon[thp] one that asks for transparent huge \
             pages as foliocache's arena does by default; kernel writes a memfd with pwrite. \
             First touch of fresh memory costs 3-13 us a page on this VM: every run gets fresh \
             memory, after a pause of {:.1} s so that the pages the last run freed have gone \
             back to the host, and its setup (mapping, memfd, or the cache's build with its \
             arena's populate) is part of its time. Targets: {POPULATE_FOLIO} in at most \
             {:.2}x the anonymous memset's time (bandwidth at least {:.3}x), and at least \
             {:.1}x {POPULATE_SINGLE}.",
            fmt_size(size),
            fmt_size(bs),
            crate::report::fmt_size_approx(job.capacity.unwrap_or(capacity)),
            settle.as_secs_f64(),
            POPULATE_MAX_TIME_VS_ANON,
            1.0 / POPULATE_MAX_TIME_VS_ANON,
            POPULATE_MIN_VS_SINGLE,
        ),
        jobs: vec![job],
        ratios,
        targets,
        detailed: false,
    }
}

/// `write`: buffered writes with the sync that makes them durable inside
/// the figure: one thread writes a file of S (1 GiB, 256 MiB with
/// `--quick`, `--size`) sequentially with 64 KiB writes, then a file of
/// S/8 with 4 KiB writes at random offsets (as many as it has blocks), one
/// pass each (time-based with `--runtime`), each run ended by `fsync` /
/// `File::sync_all`: `foliocache`, `foliocache[dontcache]`, `kernel`
/// (`pwrite`), `direct` (`O_DIRECT`) and `dontcache` (`RWF_DONTCACHE`).
/// Warm like the read scenarios (the files cached before each run of a
/// cached engine) unless `--cold`; foliocache reopens the file for each run.
fn write(args: &BenchArgs, quick: bool) -> Scenario {
    let size = args
        .size
        .unwrap_or(if quick { WRITE_QUICK_SIZE } else { WRITE_SIZE });
    let rand_size = (size / 8).max(WRITE_RAND_BS);
    let engines: Vec<EngineSpec> = if args.engines.is_empty() {
        [
            "foliocache",
            "foliocache[dontcache]",
            "kernel",
            "direct",
            "dontcache",
        ]
        .iter()
        .filter_map(|e| EngineSpec::parse(e).ok())
        .collect()
    } else {
        args.engines.clone()
    };
    let runtime = args.runtime.map(Duration::from_secs_f64);
    let job = |rw, bs, file_size| JobSpec {
        rw,
        bs,
        numjobs: 1,
        shared: true,
        file_size,
        runtime,
        engines: engines.clone(),
        cold: args.cold,
        bins_per_second: 1,
        capacity: None,
        memory_limit: None,
        hot: None,
        memory: false,
        settle: None,
    };
    let seq_bs = WRITE_SEQ_BS.min(size);
    let jobs = vec![
        job(Rw::Write, seq_bs, size),
        job(Rw::Randwrite, WRITE_RAND_BS.min(rand_size), rand_size),
    ];
    let label =
        |f: &dyn Fn(&EngineSpec) -> bool| engines.iter().find(|e| f(e)).map(|e| e.label.clone());
    let folio = label(&|e| e.kind == EngineKind::Foliocache && !e.folio.dontcache);
    let folio_uncached = label(&|e| e.kind == EngineKind::Foliocache && e.folio.dontcache);
    let kernel = label(&|e| e.kind == EngineKind::Kernel);
    let direct = label(&|e| e.kind == EngineKind::Direct);
    let dontcache = label(&|e| e.kind == EngineKind::Dontcache);
    let mut ratios = Vec::new();
    let mut targets = Vec::new();
    for j in 0..jobs.len() {
        let mut ratio = |n: &Option<String>, d: &Option<String>, target: Option<f64>| {
            if let (Some(n), Some(d)) = (n, d) {
                ratios.push(RatioSpec {
                    numerator: n.clone(),
                    denominator: d.clone(),
                    target,
                    job: Some(j),
                });
                if let Some(min) = target {
                    targets.push(TargetSpec::Bandwidth {
                        numerator: n.clone(),
                        denominator: d.clone(),
                        job: Some(j),
                        min,
                    });
                }
            }
        };
        ratio(&folio, &kernel, (j == 0).then_some(1.0));
        ratio(&folio_uncached, &dontcache, None);
        ratio(&folio_uncached, &kernel, None);
        ratio(&direct, &kernel, None);
        ratio(&dontcache, &kernel, None);
    }
    let cached = if args.cold {
        "cold (--cold: each engine starts with the file out of every cache)"
    } else {
        "warm (the file cached before each run of a cached engine, as in the read scenarios; \
         the uncached engines start without it)"
    };
    Scenario {
        name: "write".into(),
        description: format!(
            "Buffered writes, durable: one thread writes a {} file sequentially with {} \
             writes, then a {} file with {} writes at uniformly random offsets, {}, and the \
             run ends with fsync (File::sync_all for foliocache, whose write_at fills its \
             cache and whose writeback writes with O_DIRECT): the figures include the sync. \
             Engines: foliocache, foliocache[dontcache] (WriteFlags::DONTCACHE), kernel \
             (pwrite), direct (O_DIRECT) and dontcache (pwritev2 RWF_DONTCACHE); {cached}. \
             Target: foliocache's sequential write at least the kernel's.",
            fmt_size(size),
            fmt_size(seq_bs),
            fmt_size(rand_size),
            fmt_size(WRITE_RAND_BS.min(rand_size)),
            match runtime {
                Some(d) => format!("each for {:.1} s (--runtime)", d.as_secs_f64()),
                None => "one pass each (as many writes as the file has blocks)".into(),
            },
        ),
        jobs,
        ratios,
        targets,
        detailed: false,
    }
}

/// ` at 16384/s`, or nothing for an unthrottled reader.
fn fmt_rate(rate: u64) -> String {
    if rate == 0 {
        String::new()
    } else {
        format!(" at {rate}/s")
    }
}

/// How often each of `pages` is read at `rate` reads/s in all: `4.0 s`,
/// `250 ms`.
fn fmt_period(pages: u64, rate: u64) -> String {
    let secs = pages as f64 / rate.max(1) as f64;
    if secs >= 1.0 {
        format!("{secs:.1} s")
    } else {
        format!("{:.0} ms", secs * 1e3)
    }
}

fn check_job(j: &JobSpec, args: &BenchArgs) -> Result<(), String> {
    if j.file_size < j.bs {
        return Err(format!(
            "--size {} is smaller than the block size {}",
            fmt_size(j.file_size),
            fmt_size(j.bs)
        ));
    }
    let mut labels: Vec<&str> = Vec::new();
    for e in &j.engines {
        if labels.contains(&e.label.as_str()) {
            return Err(format!("engine `{}` given twice", e.label));
        }
        labels.push(&e.label);
        if j.memory && !e.kind.on_memory() {
            return Err(format!(
                "engine `{}` does not populate memory (the populate scenario's engines: \
                 foliocache, kernel, anon)",
                e.label
            ));
        }
        if !j.memory && !e.kind.on_files() {
            return Err(format!(
                "engine `{}` only populates memory: use it with --scenario populate",
                e.label
            ));
        }
        match e.kind {
            EngineKind::Direct if j.bs % PAGE as u64 != 0 => {
                return Err(format!(
                    "direct engine: --bs must be a multiple of 4096 for O_DIRECT (got {})",
                    j.bs
                ))
            }
            EngineKind::Direct if args.buf_offset != 0 => {
                return Err(
                    "direct engine: O_DIRECT needs a 4096-aligned buffer: --buf-offset must be 0"
                        .into(),
                )
            }
            k if k.fuse() && j.hot.is_some() => {
                return Err(format!(
                    "{} engine: the uncached scenario's hot reader does not run through the \
                     mount: leave it out of --scenario uncached",
                    k.name()
                ))
            }
            EngineKind::FuseNull if j.rw.is_write() || j.memory => {
                return Err(
                    "fuse-null engine: its files are read-only zeros: read jobs only".into(),
                )
            }
            EngineKind::Mmap | EngineKind::Anon if j.rw.is_write() && j.shared && j.numjobs > 1 => {
                return Err(
                    "mmap engine: threads writing one shared mapping would race \
                            (a data race in this process); drop --shared for mmap writes"
                        .into(),
                )
            }
            _ => {}
        }
    }
    if let Some(h) = j.hot {
        if h.file_size < h.bs {
            return Err(format!(
                "the hot file ({}) is smaller than its block size {}",
                fmt_size(h.file_size),
                fmt_size(h.bs)
            ));
        }
    }
    if usize::try_from(j.file_size).is_err() {
        return Err("--size too large for this machine".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn plan_of(args: &[&str]) -> Plan {
        let mut argv = vec!["foliocache", "bench"];
        argv.extend_from_slice(args);
        let Command::Bench(b) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!("a bench command line")
        };
        plan(&b).unwrap()
    }

    fn labels(j: &JobSpec) -> Vec<&str> {
        j.engines.iter().map(|e| e.label.as_str()).collect()
    }

    #[test]
    fn readahead_is_cold_one_pass_with_direct_at_1mib() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let p = plan_of(&["--scenario", "readahead", "--quick"]);
        assert_eq!(p.repeat, 2);
        assert!(!p.cold, "--cold was not given");
        let sc = &p.scenarios[0];
        assert_eq!(sc.jobs.len(), 2);
        let (a, b) = (&sc.jobs[0], &sc.jobs[1]);
        assert_eq!(
            labels(a),
            ["foliocache", "foliocache[insert=single]", "kernel"]
        );
        assert_eq!(labels(b), ["direct"]);
        for (j, bs) in [(a, 128 << 10), (b, 1 << 20)] {
            assert_eq!(j.bs, bs);
            assert_eq!(j.numjobs, 2 * cpus);
            assert!(!j.shared);
            assert!(j.cold);
            assert!(j.runtime.is_none());
            assert_eq!(j.file_size, 256 << 20);
        }
        let r: Vec<(&str, &str, Option<f64>)> = sc
            .ratios
            .iter()
            .map(|r| (r.numerator.as_str(), r.denominator.as_str(), r.target))
            .collect();
        assert_eq!(
            r,
            [
                ("foliocache", "kernel", Some(1.0)),
                ("foliocache", "direct", Some(0.9)),
                ("foliocache", "foliocache[insert=single]", Some(1.0)),
            ]
        );
        let full = plan_of(&["--scenario", "readahead"]);
        assert_eq!(full.scenarios[0].jobs[0].file_size, 1 << 30);
        // --runtime does not make it time-based; --size sets each file.
        let p = plan_of(&["--scenario", "readahead", "--runtime", "1", "--size", "8M"]);
        assert!(p.scenarios[0].jobs.iter().all(|j| j.runtime.is_none()));
        assert!(p.scenarios[0].jobs.iter().all(|j| j.file_size == 8 << 20));
    }

    #[test]
    fn readahead_with_given_engines() {
        let p = plan_of(&[
            "--scenario",
            "readahead",
            "--engine",
            "foliocache[io=threads]",
            "--engine",
            "kernel",
        ]);
        let sc = &p.scenarios[0];
        assert_eq!(sc.jobs.len(), 1, "no direct, no 1 MiB job");
        assert_eq!(sc.ratios.len(), 1);
        assert_eq!(sc.ratios[0].numerator, "foliocache[io=threads]");
        assert_eq!(sc.ratios[0].target, None);
        let p = plan_of(&["--scenario", "readahead", "--engine", "direct"]);
        assert_eq!(p.scenarios[0].jobs.len(), 1);
        assert_eq!(p.scenarios[0].jobs[0].bs, 1 << 20);
        assert!(p.scenarios[0].ratios.is_empty());
    }

    #[test]
    fn the_default_run_has_every_scenario_and_only_readahead_uncached_and_populate_are_cold() {
        let p = plan_of(&[]);
        assert!(p.quick);
        let names: Vec<&str> = p.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, NAMES);
        for s in &p.scenarios {
            for j in &s.jobs {
                let cold = ["readahead", "uncached", "populate"].contains(&s.name.as_str());
                assert_eq!(j.cold, cold, "{}", s.name);
            }
        }
        let p = plan_of(&["--seeds", "--cold"]);
        assert!(p.scenarios.iter().flat_map(|s| &s.jobs).all(|j| j.cold));
    }

    #[test]
    fn uncached_streams_4c_through_c_alone_then_beside_a_hot_c_over_4() {
        let p = plan_of(&["--scenario", "uncached", "--quick"]);
        let sc = &p.scenarios[0];
        assert!(sc.detailed);
        assert_eq!(sc.jobs.len(), 2);
        let c = 256 << 20;
        for (i, j) in sc.jobs.iter().enumerate() {
            assert_eq!(
                labels(j),
                ["foliocache", "foliocache[dontcache]", "kernel", "dontcache"]
            );
            assert_eq!((j.rw, j.bs, j.numjobs), (Rw::Read, 64 << 10, 1));
            assert_eq!(j.file_size, 4 * c);
            assert_eq!((j.capacity, j.memory_limit), (Some(c), Some(c)));
            assert!(j.cold && j.runtime.is_none());
            assert_eq!(j.interval(), Duration::from_millis(50));
            let hot = (i == 1).then_some(HotSpec {
                file_size: c / 4,
                bs: 4096,
                rate: DEFAULT_HOT_RATE,
            });
            assert_eq!(j.hot, hot);
        }
        assert!(
            sc.jobs[1]
                .title()
                .ends_with(&format!("+ hot randread 4KiB at {DEFAULT_HOT_RATE}/s")),
            "{}",
            sc.jobs[1].title()
        );
        let r: Vec<(&str, &str, Option<f64>)> = sc
            .ratios
            .iter()
            .map(|r| (r.numerator.as_str(), r.denominator.as_str(), r.target))
            .collect();
        assert_eq!(
            r,
            [
                ("foliocache[dontcache]", "foliocache", Some(1.0)),
                ("foliocache[dontcache]", "dontcache", Some(1.0)),
                ("foliocache[dontcache]", "kernel", None),
                ("foliocache", "kernel", None),
                ("dontcache", "kernel", None),
            ]
        );
        assert_eq!(sc.targets.len(), 5);
        assert!(matches!(&sc.targets[0], TargetSpec::Flat { job: 0, min, .. } if *min == 0.8));
        assert!(matches!(&sc.targets[4], TargetSpec::HitRatio { job: 1, min, .. } if *min == 0.99));
        // Full size; --capacity sets C; --size sets the stream and C to a
        // quarter of it.
        let full = plan_of(&["--scenario", "uncached"]);
        assert_eq!(full.scenarios[0].jobs[0].file_size, 4 << 30);
        let p = plan_of(&["--scenario", "uncached", "--capacity", "16M"]);
        let j = &p.scenarios[0].jobs[1];
        assert_eq!((j.file_size, j.capacity), (64 << 20, Some(16 << 20)));
        assert_eq!(j.hot.map(|h| h.file_size), Some(4 << 20));
        let p = plan_of(&["--scenario", "uncached", "--size", "8M"]);
        let j = &p.scenarios[0].jobs[0];
        assert_eq!((j.file_size, j.memory_limit), (8 << 20, Some(2 << 20)));
    }

    #[test]
    fn hot_rate_paces_the_hot_reader_and_needs_one() {
        let rate = |p: &Plan| p.scenarios[0].jobs[1].hot.map(|h| h.rate);
        let p = plan_of(&["--scenario", "uncached", "--hot-rate", "1000"]);
        assert_eq!(rate(&p), Some(1000));
        assert!(p.scenarios[0].description.contains("1000 reads/s"));
        let p = plan_of(&["--scenario", "uncached", "--hot-rate", "0"]);
        assert_eq!(rate(&p), Some(0));
        assert!(p.scenarios[0].jobs[1]
            .title()
            .ends_with("hot randread 4KiB"));
        assert!(p.scenarios[0].description.contains("as fast as it can"));
        // The seeds include uncached; a scenario without a hot reader, or a
        // custom job, does not take it.
        plan_of(&["--seeds", "--hot-rate", "10"]);
        for argv in [
            &["--scenario", "seqread", "--hot-rate", "10"][..],
            &["--rw", "read", "--hot-rate", "10"],
        ] {
            let mut a = vec!["foliocache", "bench"];
            a.extend_from_slice(argv);
            let Command::Bench(b) = Cli::try_parse_from(a).unwrap().command else {
                unreachable!("a bench command line")
            };
            assert!(plan(&b).unwrap_err().contains("--hot-rate"), "{argv:?}");
        }
    }

    #[test]
    fn uncached_targets_follow_the_engines_given() {
        let p = plan_of(&[
            "--scenario",
            "uncached",
            "--engine",
            "foliocache[dontcache,ra=kernel]",
            "--engine",
            "kernel",
        ]);
        let sc = &p.scenarios[0];
        assert_eq!(sc.ratios.len(), 1, "only over kernel");
        let kinds: Vec<&str> = sc
            .targets
            .iter()
            .map(|t| match t {
                TargetSpec::Flat { .. } => "flat",
                TargetSpec::Bandwidth { .. } => "bw",
                TargetSpec::CpuPerGib { .. } => "cpu",
                TargetSpec::HitRatio { .. } => "hits",
            })
            .collect();
        assert_eq!(
            kinds,
            ["flat", "hits"],
            "no cached or dontcache engine to beat"
        );
        let p = plan_of(&["--scenario", "uncached", "--engine", "kernel"]);
        assert!(p.scenarios[0].targets.is_empty());
    }

    #[test]
    fn populate_fills_fresh_memory_once_in_2mib_writes() {
        let p = plan_of(&["--scenario", "populate", "--quick"]);
        let sc = &p.scenarios[0];
        assert_eq!(sc.jobs.len(), 1);
        let j = &sc.jobs[0];
        assert_eq!(
            labels(j),
            [
                POPULATE_FOLIO,
                POPULATE_SINGLE,
                POPULATE_LARGE,
                "anon",
                "anon[thp]",
                "kernel"
            ]
        );
        // The two that the grab target compares differ only in the insert
        // mode; the large-folio row only in the folio size.
        let e = &j.engines;
        assert_eq!((e[0].folio.huge, e[0].folio.max_folio), (false, Some(4096)));
        assert_eq!(e[0].folio.populate, foliocache::Populate::Eager);
        assert_eq!(e[0].folio.grab, Insert::Batched);
        let mut single = e[1].folio.clone();
        single.grab = Insert::Batched;
        assert_eq!(single, e[0].folio);
        let mut large = e[2].folio.clone();
        large.max_folio = Some(4096);
        assert_eq!(large, e[0].folio);
        assert_eq!((j.rw, j.bs, j.numjobs), (Rw::Write, 2 << 20, 1));
        assert_eq!(j.file_size, 1 << 30);
        assert_eq!(j.capacity, Some(1 << 30), "no more arena than the data");
        assert!(j.memory && j.cold && j.runtime.is_none());
        assert_eq!(j.settle, Some(POPULATE_SETTLE));
        let r: Vec<(&str, &str, Option<f64>)> = sc
            .ratios
            .iter()
            .map(|r| (r.numerator.as_str(), r.denominator.as_str(), r.target))
            .collect();
        assert_eq!(
            r,
            [
                (POPULATE_FOLIO, "anon", Some(1.0 / 1.05)),
                (POPULATE_FOLIO, POPULATE_SINGLE, Some(1.1)),
                (POPULATE_LARGE, "anon", None),
                (POPULATE_FOLIO, POPULATE_LARGE, None),
                (POPULATE_FOLIO, "anon[thp]", None),
                (POPULATE_FOLIO, "kernel", None),
                ("kernel", "anon", None),
            ]
        );
        // Engines given by their options in another order are found.
        let p = plan_of(&[
            "--scenario",
            "populate",
            "--engine",
            "foliocache[grab=single,folio=4k,huge=off]",
            "--engine",
            "foliocache[folio=4k,huge=off]",
        ]);
        let r = &p.scenarios[0].ratios;
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].numerator.as_str(), r[0].denominator.as_str()),
            (
                "foliocache[folio=4k,huge=off]",
                "foliocache[grab=single,folio=4k,huge=off]"
            )
        );
        assert_eq!(sc.targets.len(), 2);
        assert_eq!(
            plan_of(&["--scenario", "populate"]).scenarios[0].jobs[0].file_size,
            3 << 30
        );
        // --size: whole 2 MiB writes (a smaller size is one write).
        let j = &plan_of(&["--scenario", "populate", "--size", "5M"]).scenarios[0].jobs[0];
        assert_eq!((j.file_size, j.bs), (4 << 20, 2 << 20));
        let j = &plan_of(&["--scenario", "populate", "--size", "101k"]).scenarios[0].jobs[0];
        assert_eq!((j.file_size, j.bs), (100 << 10, 100 << 10));
    }

    #[test]
    fn write_runs_seq_and_random_writes_with_per_job_ratios() {
        let p = plan_of(&["--scenario", "write", "--quick"]);
        let sc = &p.scenarios[0];
        let jobs: Vec<(Rw, u64, u64, bool)> = sc
            .jobs
            .iter()
            .map(|j| (j.rw, j.bs, j.file_size, j.memory))
            .collect();
        assert_eq!(
            jobs,
            [
                (Rw::Write, 64 << 10, 128 << 20, false),
                (Rw::Randwrite, 4096, 16 << 20, false)
            ]
        );
        for j in &sc.jobs {
            assert_eq!(
                labels(j),
                [
                    "foliocache",
                    "foliocache[dontcache]",
                    "kernel",
                    "direct",
                    "dontcache"
                ]
            );
            assert!(j.runtime.is_none() && !j.cold && j.settle.is_none());
        }
        let first = &sc.ratios[0];
        assert_eq!(
            (first.numerator.as_str(), first.denominator.as_str()),
            ("foliocache", "kernel")
        );
        assert_eq!((first.target, first.job), (Some(1.0), Some(0)));
        assert!(sc
            .ratios
            .iter()
            .any(|r| r.job == Some(1) && r.numerator == "foliocache" && r.target.is_none()));
        assert_eq!(
            sc.targets,
            [TargetSpec::Bandwidth {
                numerator: "foliocache".into(),
                denominator: "kernel".into(),
                job: Some(0),
                min: 1.0
            }]
        );
        let p = plan_of(&["--scenario", "write", "--runtime", "2", "--cold"]);
        assert!(p.scenarios[0]
            .jobs
            .iter()
            .all(|j| j.runtime == Some(Duration::from_secs(2)) && j.cold));
        assert_eq!(p.scenarios[0].jobs[0].file_size, 1 << 30);
    }

    #[test]
    fn memory_engines_only_where_they_apply() {
        let err = |argv: &[&str]| {
            let mut a = vec!["foliocache", "bench"];
            a.extend_from_slice(argv);
            let Command::Bench(b) = Cli::try_parse_from(a).unwrap().command else {
                unreachable!("a bench command line")
            };
            plan(&b).unwrap_err()
        };
        assert!(err(&["--rw", "write", "--engine", "anon"]).contains("only populates memory"));
        assert!(err(&["--scenario", "populate", "--engine", "direct"])
            .contains("does not populate memory"));
        // grab= is a write's insert mode: any write job takes it.
        let p = plan_of(&["--rw", "write", "--engine", "foliocache[grab=single]"]);
        assert_eq!(p.scenarios[0].jobs[0].engines[0].folio.grab, Insert::Single);
        // The custom job's default engines leave anon out.
        let p = plan_of(&["--rw", "write"]);
        assert_eq!(
            labels(&p.scenarios[0].jobs[0]),
            ["foliocache", "kernel", "direct", "dontcache", "mmap"]
        );
    }

    #[test]
    fn uncached_refuses_a_tiny_cache() {
        let mut argv = vec![
            "foliocache",
            "bench",
            "--scenario",
            "uncached",
            "--capacity",
            "512k",
        ];
        let Command::Bench(b) = Cli::try_parse_from(&argv).unwrap().command else {
            unreachable!("a bench command line")
        };
        let e = plan(&b).unwrap_err();
        assert!(e.contains("too small: at least 1MiB"), "{e}");
        argv.truncate(4);
        argv.extend(["--size", "1M"]);
        let Command::Bench(b) = Cli::try_parse_from(&argv).unwrap().command else {
            unreachable!("a bench command line")
        };
        assert!(plan(&b).unwrap_err().contains("too small"));
    }
}
