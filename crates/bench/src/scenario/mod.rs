//! What a bench invocation runs: named scenarios, or one custom job from
//! the command line, resolved into a [`Plan`].
//!
//! One file per scenario, each building its jobs, each job named
//! ([`ScenarioJob`]), and keeping its ratios and targets in one table
//! (its `TARGETS`: rows of a figure of its engines, by role, of a job, by
//! name, and a bound; [`crate::targets::judge`] resolves the table
//! against the engines that run): [`seqread`], [`randread`],
//! [`readahead`], [`uncached`], [`populate`], [`write`](mod@write),
//! [`larger`] (by name only), [`programs`] (by name only: RocksDB's
//! `db_bench` on ext4, through the FUSE mount and under the interposer,
//! which it runs itself), [`scaling`] (by name only: throughput against
//! threads), [`redb`](mod@redb) and [`sqlite`] (by name only: the databases
//! embedded in the bench on their own storage and on foliocache, sharing
//! [`embedded`]), [`objectstore`] (by name only: caches in front of
//! object storage), [`advisor`] (by name only: the cache's predicted hit
//! ratios at other sizes against measured ones), [`policy`] (by name
//! only: replacement policies over traces against Belady's MIN), [`scans`] (by
//! name only: hot point reads beside four scans, foliocache against the
//! kernel in a memory cgroup), [`crash`] (by name only:
//! what a writer killed at random moments loses, four ways), and
//! [`custom`] for a job given by `--rw`/`--bs`.
//! What each measures is in `docs/bench.md`, and why on its page under
//! `docs/bench/`; the figures behind its choices in `docs/measurements/`.

use std::time::Duration;

use crate::args::{BenchArgs, SCENARIOS};
use crate::clock::ClockKind;
use crate::spec::{EngineKind, EngineSpec, JobSpec, Rw};
use crate::sys::PAGE;
use crate::targets::{self, Given, JobName, Judged, RatioSpec, Target, TargetSpec};
use crate::units::{fmt_size, fmt_size_approx};

pub mod advisor;
pub mod crash;
pub mod custom;
pub mod embedded;
pub mod larger;
pub mod objectstore;
pub mod policy;
pub mod populate;
pub mod programs;
pub mod randread;
pub mod readahead;
pub mod redb;
pub mod rounds;
pub mod scaling;
pub mod scans;
pub mod seqread;
pub mod sqlite;
pub mod traces;
pub mod uncached;
pub mod write;

#[cfg(test)]
mod tests;

/// The hidden entry points of the processes the bench starts from its
/// own binary: a configuration of the `redb` or `sqlite` scenario
/// ([`embedded::child_main`], run by the scenario's `one_run`) and the
/// `objectstore` scenario's restart reader ([`objectstore::child_main`]);
/// `None` in any other process.
pub fn child_main() -> Option<std::process::ExitCode> {
    embedded::child_main(|run| match run.scenario.as_str() {
        "redb" => redb::one_run(run),
        "sqlite" => sqlite::one_run(run),
        other => anyhow::bail!("{}: no scenario {other:?}", embedded::CHILD_ENV),
    })
    .or_else(objectstore::child_main)
}

/// The file size of seqread and randread (full, and with `--quick`).
const SCENARIO_SIZE: FullQuick<u64> = FullQuick(1 << 30, 512 << 20);
/// A time-based scenario engine run's length (full, and with `--quick`).
const RUNTIME: FullQuick<f64> = FullQuick(10.0, 4.0);

/// The smallest `--memory-limit`: below it the cgroup's own charges
/// leave the page cache nothing.
const MIN_MEMORY_LIMIT: u64 = 1 << 20;

/// A setting's value in a full run, and with `--quick`.
#[derive(Debug, Clone, Copy)]
pub struct FullQuick<T>(pub T, pub T);

impl<T: Copy> FullQuick<T> {
    /// The value with `--quick` or without.
    pub fn get(self, quick: bool) -> T {
        if quick {
            self.1
        } else {
            self.0
        }
    }
}

/// Says `line` now and keeps it among the scenario's notes (the
/// report's and the JSON's).
fn tell(notes: &mut Vec<String>, say: &dyn Fn(&str), line: String) {
    say(&line);
    notes.push(line);
}

/// `--capacity`, else `default`: at least `min`, or an error that names
/// it `what` (`larger scenario: a memory budget of`).
fn capacity_at_least(args: &BenchArgs, default: u64, min: u64, what: &str) -> Result<u64, String> {
    let c = args.capacity.unwrap_or(default);
    if c < min {
        return Err(format!(
            "{what} {} is too small: at least {} (--capacity)",
            fmt_size_approx(c),
            fmt_size(min)
        ));
    }
    Ok(c)
}

/// A named group of jobs, reported together.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `seqread`, `randread`, or `custom`.
    pub name: String,
    /// What it measures, in a sentence or two.
    pub description: String,
    /// The jobs, each by its name. Their runs interleave: each round runs
    /// every engine of every job, in alternating order.
    pub jobs: Vec<ScenarioJob>,
    /// Bandwidth ratios between engines (possibly of different jobs) to
    /// report beside the table: the scenario's table resolved to the
    /// engines that run ([`crate::targets::judge`]).
    pub ratios: Vec<RatioSpec>,
    /// The targets, checked in the summary (met or not): from the
    /// same table.
    pub targets: Vec<TargetSpec>,
    /// Print each engine's timeline, CPU per GiB, cache figures and hot
    /// reader below the table.
    pub detailed: bool,
    /// A program the scenario runs itself instead of jobs (`programs`,
    /// `redb`, `sqlite`).
    pub programs: Option<Program>,
}

/// What a scenario without jobs runs itself.
#[derive(Debug, Clone)]
pub enum Program {
    /// RocksDB's `db_bench` ([`programs`]).
    DbBench(programs::DbBench),
    /// A database embedded in the bench: [`redb`](mod@redb)'s or
    /// [`sqlite`]'s [`Embedded`](embedded::Embedded), and its sizes.
    Embedded(&'static embedded::Embedded, embedded::EmbeddedBench),
    /// A writer killed at random moments ([`crash`]).
    Kills(crash::Kills),
    /// Caches in front of object storage ([`objectstore`]).
    ObjectStore(objectstore::ObjectBench),
    /// The cache's predicted hit ratios against measured ones ([`advisor`]).
    Advisor(advisor::Advisor),
    /// Replacement policies over traces, against Belady's MIN ([`policy`]).
    Policy(policy::PolicyBench),
    /// Hot point reads beside concurrent scans ([`scans`]).
    Scans(scans::ScansBench),
}

impl Scenario {
    /// The job named `name`.
    #[cfg(test)]
    pub fn job(&self, name: &str) -> Option<&JobSpec> {
        self.jobs.iter().find(|j| j.name == name).map(|j| &j.spec)
    }

    /// The jobs, without their names.
    pub fn specs(&self) -> impl Iterator<Item = &JobSpec> {
        self.jobs.iter().map(|j| &j.spec)
    }
}

/// A job of a scenario, and the name its scenario's table gives it.
#[derive(Debug, Clone)]
pub struct ScenarioJob {
    /// Its name in the scenario (`4KiB`, `alone`, `zipf, 8 jobs`).
    pub name: JobName,
    /// The job.
    pub spec: JobSpec,
}

impl ScenarioJob {
    /// `spec`, named `name`.
    pub fn new(name: JobName, spec: JobSpec) -> ScenarioJob {
        ScenarioJob { name, spec }
    }
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
    /// `--consume`.
    pub consume: bool,
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
        vec![custom::scenario(args)]
    } else {
        let names: Vec<&str> = if args.scenarios.is_empty() {
            SCENARIOS.to_vec()
        } else {
            args.scenarios.clone()
        };
        let rt = runtime(RUNTIME.get(quick));
        names
            .iter()
            .map(|n| build(n, args, quick, rt))
            .collect::<Result<Vec<_>, _>>()?
    };
    for j in scenarios.iter().flat_map(Scenario::specs) {
        check_job(j, args)?;
    }
    if args.hot_rate.is_some()
        && !scenarios
            .iter()
            .flat_map(Scenario::specs)
            .any(|j| j.hot.is_some())
        && !scenarios.iter().any(|s| s.name == "scans")
    {
        return Err(
            "--hot-rate paces the uncached or scans scenario's hot reader: add --scenario \
             uncached or scans (or --seeds)"
                .into(),
        );
    }
    if args.settle.is_some() && !scenarios.iter().flat_map(Scenario::specs).any(|j| j.memory) {
        return Err(
            "--settle paces the populate scenario's runs: add --scenario populate (or --seeds)"
                .into(),
        );
    }
    if let Some(l) = args.memory_limit {
        if !custom {
            return Err(
                "--memory-limit limits a custom job's engines (give --rw, --bs, --numjobs or \
                 --shared)"
                    .into(),
            );
        }
        if l < MIN_MEMORY_LIMIT {
            return Err(format!(
                "--memory-limit {}: at least {}",
                fmt_size_approx(l),
                fmt_size(MIN_MEMORY_LIMIT)
            ));
        }
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
        consume: args.consume,
        capacity: args.capacity,
        quick,
        clock: args.clock.resolve(),
    })
}

/// Builds the scenario `name` (one of [`SCENARIOS`]); `runtime` is the
/// length of a time-based run.
fn build(
    name: &str,
    args: &BenchArgs,
    quick: bool,
    runtime: Option<Duration>,
) -> Result<Scenario, String> {
    match name {
        "seqread" => Ok(seqread::scenario(&CachedReads::new(args, quick, runtime))),
        "randread" => Ok(randread::scenario(&CachedReads::new(args, quick, runtime))),
        "readahead" => readahead::scenario(args, quick),
        "uncached" => uncached::scenario(args, quick),
        "populate" => populate::scenario(args, quick),
        "write" => write::scenario(args, quick),
        "larger" => larger::scenario(args, quick, runtime),
        "programs" => programs::scenario(args, quick),
        "scaling" => scaling::scenario(args, quick),
        "redb" => redb::DB.scenario(args, quick),
        "sqlite" => sqlite::DB.scenario(args, quick),
        "crash" => crash::scenario(args, quick),
        "objectstore" => objectstore::scenario(args, quick),
        "advisor" => advisor::scenario(args, quick),
        "policy" => policy::scenario(args, quick),
        "scans" => scans::scenario(args, quick),
        other => Err(format!(
            "unknown scenario `{other}` (available: {})",
            crate::args::all_scenarios().join(", ")
        )),
    }
}

/// What seqread and randread share: one file, read warm (unless
/// `--cold`) and time-based, by the engines given or foliocache, kernel
/// and mmap.
pub struct CachedReads {
    /// The file's size.
    pub size: u64,
    /// The engines, in order.
    pub engines: Vec<EngineSpec>,
    /// Whether `--engine` gave them.
    pub given: bool,
    /// A run's length.
    pub runtime: Option<Duration>,
    /// `--cold`.
    pub cold: bool,
    /// `--consume`.
    pub consume: bool,
}

impl CachedReads {
    /// The engines that seqread and randread run unless `--engine` says
    /// otherwise.
    pub const ENGINES: [EngineKind; 4] = [
        EngineKind::Foliocache,
        EngineKind::Kernel,
        EngineKind::Mmap,
        EngineKind::Memcpy,
    ];

    fn new(args: &BenchArgs, quick: bool, runtime: Option<Duration>) -> CachedReads {
        let size = args.size.unwrap_or(SCENARIO_SIZE.get(quick));
        let given = !args.engines.is_empty();
        let engines = if given {
            args.engines.clone()
        } else {
            let mut e = Self::ENGINES.map(EngineSpec::plain).to_vec();
            if args.consume {
                // Zero copy: what `--consume` is there to weigh, and its
                // limit (the bytes summed where they lie in memory, with
                // no lookup).
                e.insert(1, EngineSpec::pin());
                e.push(EngineSpec::memcpy_inplace());
            }
            e
        };
        CachedReads {
            size,
            engines,
            given,
            runtime,
            cold: args.cold,
            consume: args.consume,
        }
    }

    /// A job of `numjobs` threads sharing the file.
    pub fn job(&self, rw: Rw, bs: u64, numjobs: usize) -> JobSpec {
        JobSpec {
            numjobs,
            runtime: self.runtime,
            cold: self.cold,
            ..JobSpec::new(rw, bs, self.size, self.engines.clone())
        }
    }

    /// The label of the engine playing `role` in the scenario: the first
    /// of the engines that plays it; for `Fuse` and `FuseNull` with the
    /// default engines, which add them to a job, their names.
    pub fn label(&self, role: Cached) -> Option<String> {
        let kind = |k: EngineKind| first_label(&self.engines, move |e| e.kind == k);
        let fuse = |k: EngineKind| {
            if self.given {
                kind(k)
            } else {
                Some(k.name().to_string())
            }
        };
        match role {
            Cached::Folio => first_label(&self.engines, |e| {
                e.kind == EngineKind::Foliocache
                    && e.qd.is_none()
                    && !e.folio.dontcache
                    && !e.folio.pin
            }),
            Cached::Pin => first_label(&self.engines, |e| {
                e.kind == EngineKind::Foliocache && e.folio.pin
            }),
            Cached::Memcpy => first_label(&self.engines, |e| {
                e.kind == EngineKind::Memcpy && !e.inplace
            }),
            Cached::Inplace => {
                first_label(&self.engines, |e| e.kind == EngineKind::Memcpy && e.inplace)
                    .filter(|_| self.consume)
            }
            Cached::Mmap => kind(EngineKind::Mmap),
            Cached::Kernel => kind(EngineKind::Kernel),
            Cached::Fuse => fuse(EngineKind::Fuse),
            Cached::FuseNull => fuse(EngineKind::FuseNull),
        }
    }

    /// `table` resolved to the scenario's engines ([`CachedReads::label`]).
    pub fn judge(&self, table: &[Target<Cached>]) -> Judged {
        let given = Given {
            consume: self.consume,
            budget: None,
        };
        targets::judge(table, |r| self.label(r), given)
    }

    /// How the description says the file starts.
    pub fn cached(&self) -> &'static str {
        if self.cold {
            "(run --cold: each engine starts with the file out of every cache)"
        } else {
            "fully cached"
        }
    }
}

/// The engines of a scenario: those given with `--engine`, else its
/// built-in list.
///
/// # Errors
/// A built-in engine that does not parse ([`builtin_engines`]).
fn engines_or(args: &BenchArgs, builtin: &[&str]) -> Result<Vec<EngineSpec>, String> {
    if args.engines.is_empty() {
        builtin_engines(builtin)
    } else {
        Ok(args.engines.clone())
    }
}

/// Parses a scenario's built-in engine list. Every entry must parse: a
/// bad one is a bug, which is an error here (never dropped) and fails the
/// tests (`every_builtin_engine_spec_parses` runs every built-in list).
///
/// # Errors
/// The first entry that does not parse, with the reason.
pub fn builtin_engines(list: &[&str]) -> Result<Vec<EngineSpec>, String> {
    list.iter().map(|e| builtin_engine(e)).collect()
}

/// Parses one built-in engine spec.
///
/// # Errors
/// It does not parse: the spec and the reason.
pub fn builtin_engine(spec: &str) -> Result<EngineSpec, String> {
    EngineSpec::parse(spec).map_err(|why| format!("built-in engine `{spec}`: {why}"))
}

/// The engines the tables of the cached-read scenarios (seqread,
/// randread) name, each found by [`CachedReads::label`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// The first foliocache engine that copies (not `pin`, `dontcache` or
    /// `qd=`).
    Folio,
    /// The first `foliocache[pin]`: zero copy.
    Pin,
    /// The first `memcpy` that copies: a cached read's limit.
    Memcpy,
    /// The first `memcpy[inplace]`, with `--consume` only: zero copy's
    /// limit.
    Inplace,
    /// The first `mmap`.
    Mmap,
    /// The first `kernel`.
    Kernel,
    /// `fuse`.
    Fuse,
    /// `fuse-null`: the FUSE crossing alone.
    FuseNull,
}

/// foliocache's bandwidth at least this fraction of `memcpy`'s (a bare
/// copy into the same buffer) in the cached-read scenarios.
pub const MEMCPY_TARGET: f64 = 0.95;
/// foliocache's bandwidth at least this fraction of `mmap`'s in the
/// cached-read scenarios (4 KiB reads).
pub const MMAP_TARGET: f64 = 1.0;
/// `foliocache[pin]`'s bandwidth at least this multiple of `mmap`'s with
/// `--consume` (4 KiB reads): both read the bytes in place, and a pin
/// costs no page-table walk over 4 KiB pages.
pub const PIN_TARGET: f64 = 1.2;

/// The label of the first of `engines` that `f` accepts.
fn first_label(engines: &[EngineSpec], f: impl Fn(&EngineSpec) -> bool) -> Option<String> {
    engines.iter().find(|e| f(e)).map(|e| e.label.clone())
}

/// Checks that a job can run as the command line shapes it.
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
        if e.qd.is_some() && (j.rw.is_write() || j.memory) {
            return Err(format!(
                "engine `{}`: qd=N engines only read: use them in read jobs",
                e.label
            ));
        }
        match e.kind {
            EngineKind::Direct if !j.bs.is_multiple_of(PAGE as u64) => {
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
            EngineKind::Memcpy if j.rw.is_write() => {
                return Err(
                    "memcpy engine: it copies out of memory holding the file: read jobs only"
                        .into(),
                )
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
