//! What a bench invocation runs: named reference scenarios, or one custom
//! job from the command line, resolved into a [`Plan`].
//!
//! Scenarios reproduce the reference experiments (the seeds table of
//! `../shared/reference/linux-page-cache.md`) on foliocache and the kernel
//! side by side. Present: `seqread` and `randread`. The scenarios of
//! features that have not landed (readahead, uncached, populate) are
//! absent, not faked: naming one is an error.

use std::time::Duration;

use crate::args::{BenchArgs, Rw};
use crate::clock::ClockKind;
use crate::engine::{EngineKind, EngineSpec, NO_WRITES};
use crate::report::fmt_size;
use crate::sys::PAGE;

/// The scenarios this build has, in the order `--seeds` runs them.
pub const NAMES: [&str; 2] = ["seqread", "randread"];

/// A scenario's file size (full, and with `--quick`).
const SCENARIO_SIZE: u64 = 1 << 30;
const QUICK_SIZE: u64 = 512 << 20;
/// A scenario engine run's length (full, and with `--quick`).
const RUNTIME: f64 = 10.0;
const QUICK_RUNTIME: f64 = 4.0;
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

    /// Whole blocks in a data file (reads and writes never pass the last
    /// whole block).
    pub fn nblocks(&self) -> u64 {
        self.file_size / self.bs
    }

    /// A short title: `randread bs=4KiB numjobs=2 shared`.
    pub fn title(&self) -> String {
        format!(
            "{} bs={} numjobs={}{}",
            self.rw.name(),
            fmt_size(self.bs),
            self.numjobs,
            if self.shared && self.numjobs > 1 {
                " shared"
            } else {
                ""
            }
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
    /// The jobs, run in order.
    pub jobs: Vec<JobSpec>,
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
        let size = args
            .size
            .unwrap_or(if quick { QUICK_SIZE } else { SCENARIO_SIZE });
        let rt = runtime(if quick { QUICK_RUNTIME } else { RUNTIME });
        let engines = if args.engines.is_empty() {
            [EngineKind::Foliocache, EngineKind::Kernel, EngineKind::Mmap]
                .map(EngineSpec::plain)
                .to_vec()
        } else {
            args.engines.clone()
        };
        names
            .iter()
            .map(|n| scenario(n, size, rt, &engines, args.cold))
            .collect::<Result<Vec<_>, _>>()?
    };
    for s in &scenarios {
        for j in &s.jobs {
            check_job(j, args)?;
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
            .filter(|k| !rw.is_write() || k.supports_writes())
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
    })
}

fn scenario(
    name: &str,
    size: u64,
    runtime: Option<Duration>,
    engines: &[EngineSpec],
    cold: bool,
) -> Result<Scenario, String> {
    let job = |rw, bs, numjobs| JobSpec {
        rw,
        bs,
        numjobs,
        shared: true,
        file_size: size,
        runtime,
        engines: engines.to_vec(),
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
            jobs: vec![job(Rw::Read, 4096, 1), job(Rw::Read, 64 << 10, 1)],
        },
        "randread" => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            Scenario {
                name: name.into(),
                description: format!(
                    "The same {} file, {cached}, read with 4 KiB reads at uniformly random \
                     offsets by {cpus} threads (one per CPU) sharing it: hits under concurrency.",
                    fmt_size(size)
                ),
                jobs: vec![job(Rw::Randread, 4096, cpus)],
            }
        }
        other => {
            return Err(format!(
                "unknown scenario `{other}` (available: {})",
                NAMES.join(", ")
            ))
        }
    };
    Ok(s)
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
        match e.kind {
            EngineKind::Foliocache if j.rw.is_write() => return Err(NO_WRITES.into()),
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
            EngineKind::Mmap if j.rw.is_write() && j.shared && j.numjobs > 1 => {
                return Err(
                    "mmap engine: threads writing one shared mapping would race \
                            (a data race in this process); drop --shared for mmap writes"
                        .into(),
                )
            }
            _ => {}
        }
    }
    if usize::try_from(j.file_size).is_err() {
        return Err("--size too large for this machine".into());
    }
    Ok(())
}
