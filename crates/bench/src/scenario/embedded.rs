//! What the scenarios of databases embedded in the bench (`redb`,
//! `sqlite`) share: each configuration's run in a child process under the
//! memory limit, the rounds (`super::rounds`), the records of timed
//! workloads, and a column of the better of two baselines.
//!
//! # The memory limit
//! Each configuration runs at each size in a child process of its own
//! (this binary again, told what to run by [`CHILD_ENV`](child::CHILD_ENV)), started inside
//! a fresh memory cgroup limited to the scenario's M ([`MemCgroup`](crate::cgroup::MemCgroup), the
//! one the `larger` scenario's kernel engines run in): the bench enters
//! the cgroup, starts the child (which stays in it) and leaves. Every page
//! the child faults in (the database's cache and heap, the kernel's page
//! cache of its file, foliocache's arena) counts against M, so every
//! configuration has the same memory and starts from nothing. A child
//! that outgrows M is killed by the cgroup's OOM killer: its workloads are
//! reported with no figures and a note, and the other configurations go
//! on. Each child runs with one malloc arena (`one_malloc_arena`: glibc's
//! arenas per thread kept freed cache pages and took redb past M), and a
//! configuration that is a bound rather than a contender may run without
//! the limit ([`Sizes::unlimited`]).
//!
//! ```text
//!   bench ──enter cg──> spawn child ──leave cg──> wait ──> records
//!                        └─ FOLIOCACHE_EMBEDDED_RUN=redb\tfoliocache\t...
//!                           prints one line per workload: job, ops, seconds, note
//! ```

use std::time::Instant;

use anyhow::{Context, Result};

use super::rounds::rounds;
use super::{FullQuick, Program, Scenario};
use crate::args::BenchArgs;
use crate::cgroup::Availability;
use crate::report::{Latency, MemoryFigures, MemoryLimit, Perf, RunJob, RunRecord};
use crate::targets::{self, Given, JobName, JobRuns, Judged, Target};
use child::run_child;
pub use child::{child_main, ChildRun, CHILD_ENV};

mod child;

/// The memory a configuration's process needs besides its caches under
/// M = `limit` (its binary's pages, heap, threads, and foliocache's
/// bookkeeping and arena rounding beside its capacity): an eighth of M
/// and 2 MiB. (Measured with one malloc arena, [`child_main`]: redb's
/// `foliocache` configuration at M = 32 MiB peaked at 22 MiB with a cache
/// of 18 MiB, 4 MiB besides it; a quarter of M and 4 MiB, needed while
/// glibc's arenas per thread held freed memory, left a third of M
/// unused.)
pub fn headroom(limit: u64) -> u64 {
    limit / 8 + (2 << 20)
}

/// foliocache's cache for a configuration under M = `limit`: `capacity`
/// bytes, its pressure watcher's reserve a thirty-second of M (the default
/// reserve, at least 16 MiB, is most of a small M: the cache would shrink
/// to its floor at once).
///
/// # Errors
/// The cache's build.
pub fn folio_cache(capacity: u64, limit: u64) -> Result<foliocache::Cache> {
    foliocache::Cache::builder()
        .capacity(capacity as usize)
        .pressure(foliocache::PressureConfig::default().reserve((limit / 32) as usize))
        .build()
        .context("foliocache's cache")
}

/// What foliocache's `cache` did, for a workload's note: its hits and
/// misses and a miss's mean wait (a miss's device read, what bounds a
/// workload that misses), the bytes it read and wrote, and how far its
/// pressure watcher held it below its capacity (a cache shrunk under M
/// misses where its capacity would not).
pub fn cache_note(cache: &foliocache::Cache) -> String {
    let s = cache.stats();
    let wait = s.miss_latency.sum.as_secs_f64() * 1e6 / s.miss_latency.count.max(1) as f64;
    format!(
        "foliocache so far: {} hits, {} misses (mean wait {wait:.0} us), {} MiB read, {} MiB \
         written, allowed {} of {} MiB ({} pressure shrinks)",
        s.hits,
        s.misses,
        s.io_bytes >> 20,
        s.io_write_bytes >> 20,
        s.allowed_bytes >> 20,
        s.capacity_bytes >> 20,
        s.pressure_shrinks
    )
}

/// The bytes this process has read from and written to the storage so
/// far (`/proc/self/io`'s `read_bytes` and `write_bytes`: what reached the
/// block layer, the kernel's page cache misses and writeback, and
/// `O_DIRECT` IO, of every thread); `None` where the kernel does not say.
fn storage_io() -> Option<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    Some((field("read_bytes:")?, field("write_bytes:")?))
}

/// The storage IO of the process so far, for the note of a
/// configuration's last workload.
pub fn process_io_note() -> Option<String> {
    let (read, written) = storage_io()?;
    Some(format!(
        "the process's storage IO over its workloads: {} MiB read, {} MiB written",
        read >> 20,
        written >> 20
    ))
}

/// A workload's storage IO, `before` and after it, for its note: what
/// every configuration moved to and from the device, whichever cache did
/// it, and per operation, where a workload bound by the device shows its
/// floor (a configuration that reads as many bytes per operation as
/// another cannot be much faster on the same device).
fn workload_io_note(before: (u64, u64), ops: u64) -> Option<String> {
    let (read, written) = storage_io()?;
    let (read, written) = (
        read.saturating_sub(before.0),
        written.saturating_sub(before.1),
    );
    let per_op = read as f64 / ops.max(1) as f64 / 1024.0;
    Some(format!(
        "storage IO in this workload: {:.1} MiB read ({per_op:.2} KiB per operation), {:.1} MiB \
         written",
        read as f64 / (1 << 20) as f64,
        written as f64 / (1 << 20) as f64
    ))
}

/// Appends `extra` to `m`'s note.
pub fn add_note(m: &mut Measured, extra: String) {
    m.note = Some(match m.note.take() {
        Some(n) => format!("{n}; {extra}"),
        None => extra,
    });
}

/// A workload's figures: its job, operations and time.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The job (workload and size) it measured.
    pub job: JobName,
    /// Operations done.
    pub ops: u64,
    /// Seconds they took.
    pub seconds: f64,
    /// A fact about it (found keys, rows).
    pub note: Option<String>,
}

/// Runs `f`, which does `ops` operations of `job`, and times it; its
/// note gets the workload's storage IO ([`workload_io_note`]).
///
/// # Errors
/// `f`'s.
pub fn timed(
    job: JobName,
    ops: u64,
    f: impl FnOnce() -> Result<Option<String>>,
) -> Result<Measured> {
    let io = storage_io();
    let t = Instant::now();
    let note = f()?;
    let seconds = t.elapsed().as_secs_f64();
    let mut m = Measured {
        job,
        ops,
        seconds,
        note,
    };
    if let Some(io) = io.and_then(|before| workload_io_note(before, ops)) {
        add_note(&mut m, io);
    }
    Ok(m)
}

/// The figures of a run that has none: each of `jobs` with no operations
/// and `why`.
pub fn failed(jobs: &[JobName], why: &str) -> Vec<Measured> {
    jobs.iter()
        .map(|&job| Measured {
            job,
            ops: 0,
            seconds: 0.0,
            note: Some(why.to_string()),
        })
        .collect()
}

/// The record of configuration `config`'s workload `m`: `bytes_per_op`
/// bytes per operation (what its bandwidth counts), over data of
/// `data_bytes`; foliocache's `capacity` where it has one.
pub fn record(
    config: &str,
    m: &Measured,
    bytes_per_op: u64,
    data_bytes: u64,
    capacity: Option<u64>,
    limit: &MemoryLimit,
) -> RunRecord {
    let secs = m.seconds.max(1e-9);
    let iops = if m.ops == 0 { 0.0 } else { m.ops as f64 / secs };
    RunRecord {
        engine: config.to_string(),
        job: RunJob {
            rw: m.job,
            bs: bytes_per_op,
            numjobs: 1,
            file_size: data_bytes,
            ..RunJob::default()
        },
        perf: Perf {
            bytes: m.ops * bytes_per_op,
            ops: m.ops,
            seconds: m.seconds,
            bw_bytes: iops * bytes_per_op as f64,
            iops,
            lat_ns: Latency {
                mean: secs * 1e9 / m.ops.max(1) as f64,
                ..Latency::default()
            },
            // Not measured per workload: the database's threads and the
            // cache's run together.
            cpu_us_per_op: f64::NAN,
            cpu_s_per_gib: f64::NAN,
            ..Perf::default()
        },
        memory: MemoryFigures {
            capacity,
            memory_limit: Some(limit.clone()),
            ..MemoryFigures::default()
        },
        notes: m.note.iter().cloned().collect(),
        ..RunRecord::default()
    }
}

/// A database scenario, as `redb` and `sqlite` declare it: what
/// [`Embedded::scenario`] builds from the command line and
/// [`Embedded::run`] runs, alike for both.
#[derive(Debug)]
pub struct Embedded {
    /// `redb` or `sqlite`.
    pub name: &'static str,
    /// The configurations, in order.
    pub configs: &'static [&'static str],
    /// Each size's jobs, in the order they run: data that fits M, data
    /// 4x M.
    pub jobs: [[JobName; 6]; 2],
    /// M unless `--capacity` says otherwise.
    pub m: FullQuick<u64>,
    /// The smallest M.
    pub min_m: u64,
    /// The raw bytes of an entry or row: what a workload's bandwidth
    /// counts per operation, and what the sizes are counted in.
    pub bytes_per_op: u64,
    /// The fewest entries or rows of a size.
    pub min_n: u64,
    /// Operations of the read (and change) workloads.
    pub ops: FullQuick<u64>,
    /// The ratios and targets.
    pub targets: &'static [Target<&'static str>],
    /// Configurations that run without the limit, with why (a bound whose
    /// memory is not what it measures).
    pub unlimited: &'static [(&'static str, &'static str)],
    /// foliocache's capacity in a configuration under M, where it has one.
    pub capacity: fn(&str, u64) -> Option<u64>,
    /// What the scenario runs, in a paragraph.
    pub describe: fn(&EmbeddedBench) -> String,
    /// `[a, b, label]`: a configuration `label` added to every job, the
    /// faster of `a` and `b` round by round ([`add_better`]).
    pub better: Option<[&'static str; 3]>,
    /// The configuration the report's ratios are over.
    pub baseline: &'static str,
}

/// What a database scenario runs ([`Embedded::scenario`]).
#[derive(Debug, Clone)]
pub struct EmbeddedBench {
    /// M: every configuration's memory limit.
    pub limit: u64,
    /// Entries or rows of each size: data that fits M, data 4x M.
    pub n: [u64; 2],
    /// Operations of the read (and change) workloads.
    pub ops: u64,
}

impl Embedded {
    /// The scenario from the command line: M is `--capacity`, else
    /// [`Embedded::m`]'s (its quick one with `--quick`), at least its
    /// smallest; the data that fits M is a quarter of it in raw entries or
    /// rows, the larger `--size` or 4 M.
    ///
    /// # Errors
    /// `--engine` given (the configurations are fixed), or M too small.
    pub fn scenario(&'static self, args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
        let name = self.name;
        if !args.engines.is_empty() {
            return Err(format!(
                "{name} scenario: --engine does not apply: its configurations are fixed ({})",
                self.configs.join(", ")
            ));
        }
        let what = format!("{name} scenario: M =");
        let limit = super::capacity_at_least(args, self.m.get(quick), self.min_m, &what)?;
        let big = args.size.unwrap_or(4 * limit);
        let count = |bytes: u64| (bytes / self.bytes_per_op).max(self.min_n);
        let bench = EmbeddedBench {
            limit,
            n: [count(limit / 4), count(big)],
            ops: self.ops.get(quick),
        };
        let Judged { ratios, targets } =
            targets::judge(self.targets, |c| Some(c.to_string()), Given::default());
        Ok(Scenario {
            name: name.into(),
            description: (self.describe)(&bench),
            jobs: Vec::new(),
            ratios,
            targets,
            detailed: false,
            programs: Some(Program::Embedded(self, bench)),
        })
    }

    /// Runs every configuration at both sizes of `bench`, each in its
    /// child process under the limit ([`run_child`]), `repeat` rounds, in
    /// a temporary directory in `data_dir`, then adds the better of two
    /// baselines ([`Embedded::better`]). A configuration killed or failed
    /// is said, and its records carry why.
    ///
    /// # Errors
    /// A child could not be started, or the directory not made.
    pub fn run(
        &self,
        bench: &EmbeddedBench,
        data_dir: &std::path::Path,
        repeat: u32,
        avail: &Availability,
        notes: &mut Vec<String>,
        say: &dyn Fn(&str),
    ) -> Result<Vec<JobRuns>> {
        let name = self.name;
        if let Availability::Unavailable(why) = avail {
            notes.push(format!(
                "{name}: no memory limit could be set ({why}): the configurations ran unlimited"
            ));
        }
        let root = tempfile::Builder::new()
            .prefix(&format!("foliocache-{name}-"))
            .tempdir_in(data_dir)
            .with_context(|| format!("{name}: a directory in {}", data_dir.display()))?;
        let jobs = self.jobs.as_flattened();
        let mut runs = rounds(name, self.configs, jobs, repeat, say, |c| {
            let mut records = Vec::new();
            for (size, &n) in bench.n.iter().enumerate() {
                let run = ChildRun {
                    scenario: name.into(),
                    config: self.configs[c].into(),
                    path: root.path().join(format!("{size}.db")),
                    limit: bench.limit,
                    size,
                    n,
                    ops: bench.ops,
                };
                let (measured, limit) = self.run_one(avail, &run, say)?;
                let cap = (self.capacity)(&run.config, bench.limit);
                let (per_op, data) = (self.bytes_per_op, n * self.bytes_per_op);
                records.extend(
                    measured
                        .iter()
                        .map(|m| record(&run.config, m, per_op, data, cap, &limit)),
                );
            }
            Ok(records)
        })?;
        root.close()
            .with_context(|| format!("{name}: removing the databases"))?;
        if let Some([a, b, label]) = self.better {
            add_better(&mut runs, a, b, label);
        }
        Ok(runs)
    }

    /// `run` in its child process, under the limit unless its
    /// configuration runs without ([`Embedded::unlimited`]): its figures,
    /// or each job's with no operations and why (said).
    fn run_one(
        &self,
        avail: &Availability,
        run: &ChildRun,
        say: &dyn Fn(&str),
    ) -> Result<(Vec<Measured>, MemoryLimit)> {
        let unlimited;
        let avail = match self.unlimited.iter().find(|u| u.0 == run.config) {
            Some((_, why)) => {
                unlimited = Availability::Unavailable(why.to_string());
                &unlimited
            }
            None => avail,
        };
        let jobs = &self.jobs[run.size];
        let (measured, limit) = run_child(avail, run, jobs)?;
        let measured = measured.unwrap_or_else(|why| {
            say(&why);
            failed(jobs, &why)
        });
        Ok((measured, limit))
    }
}

/// Adds to every job a configuration `label`: in each round, the run of
/// whichever of `a` and `b` was faster, relabelled (a note names it), so
/// that a target can hold a configuration to the better of two baselines.
pub fn add_better(runs: &mut [JobRuns], a: &str, b: &str, label: &str) {
    for job in runs {
        let col = |l: &str| {
            job.engines
                .iter()
                .position(|rs| rs.first().is_some_and(|r| r.engine == l))
        };
        let (Some(ia), Some(ib)) = (col(a), col(b)) else {
            continue;
        };
        let better: Vec<RunRecord> = job.engines[ia]
            .iter()
            .zip(&job.engines[ib])
            .map(|(x, y)| {
                let mut r = if x.perf.bw_bytes >= y.perf.bw_bytes {
                    x.clone()
                } else {
                    y.clone()
                };
                r.notes.push(format!("the run of {}", r.engine));
                r.engine = label.to_string();
                r
            })
            .collect();
        job.engines.push(better);
    }
}
