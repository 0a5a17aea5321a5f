//! `scaling` (by name only): how each engine's throughput grows with
//! threads, at 1, 2, 4, ... threads up to the machine's CPUs and at twice
//! them (oversubscribed), for four workloads: random and sequential 4 KiB
//! hits of one shared cached file, random 4 KiB writes into it, and cold
//! sequential 128 KiB reads of a file per thread. foliocache runs against
//! the kernel and, for hits, the copy limit (`memcpy`: memory bandwidth
//! sets both). `--plot` draws throughput against threads
//! (`plot.rs`). See `docs/bench/scaling.md`.

use std::time::Duration;

use super::{FullQuick, Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{EngineKind, EngineSpec, JobSpec, Rw};
use crate::targets::{self, bandwidth, Figure, Given, JobName, Judged, Target};
use crate::units::fmt_size;
use Role::{Folio, Kernel, Memcpy};

/// The engines unless `--engine` gives others (a workload runs those of
/// them that can run it: `memcpy` only the hits).
pub const ENGINES: &[&str] = &["foliocache", "kernel", "memcpy"];

/// The workloads, as the table names them; each runs as one job per
/// thread count, named `<workload>, <n> threads` (`1 thread`).
pub const RAND_HITS: JobName = "random 4KiB hits";
/// Sequential 4 KiB hits of the shared file.
pub const SEQ_HITS: JobName = "sequential 4KiB hits";
/// Random 4 KiB writes into the shared file.
pub const RAND_WRITES: JobName = "random 4KiB writes";
/// Cold sequential 128 KiB reads, a file per thread.
pub const COLD_READS: JobName = "cold sequential reads";

/// The shared file of the hits and writes.
const SIZE: FullQuick<u64> = FullQuick(1 << 30, 64 << 20);
/// Each thread's file of the cold reads.
const COLD_SIZE: FullQuick<u64> = FullQuick(256 << 20, 16 << 20);
/// The cold reads' block size (the readahead scenario's).
const COLD_BS: u64 = 128 << 10;
/// A time-based run's length, in seconds.
const RUNTIME: FullQuick<f64> = FullQuick(4.0, 0.5);
/// foliocache's random writes over the kernel's, at every thread count
/// (issue 52).
const WRITE_TARGET: f64 = 1.0;

/// The engines the table names, each the first of the engine list that
/// plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The first plain foliocache engine.
    Folio,
    /// `kernel`.
    Kernel,
    /// `memcpy`: the copy limit of a hit.
    Memcpy,
}

/// The scenario's ratios and targets, of each workload's job at every
/// thread count (the scenario repeats each row for each).
#[rustfmt::skip]
pub const TARGETS: &[Target<Role>] = &[
    bandwidth(Folio, Memcpy).of(RAND_HITS),
    bandwidth(Folio, Kernel).of(RAND_HITS),
    bandwidth(Folio, Memcpy).of(SEQ_HITS),
    bandwidth(Folio, Kernel).of(SEQ_HITS),
    bandwidth(Folio, Kernel).of(RAND_WRITES).at_least(WRITE_TARGET),
    bandwidth(Folio, Kernel).of(COLD_READS),
];

/// The thread counts for `cpus` CPUs: the powers of two below them, the
/// CPUs, and twice the CPUs.
pub fn thread_counts(cpus: usize) -> Vec<usize> {
    let cpus = cpus.max(1);
    let mut n: Vec<usize> = std::iter::successors(Some(1usize), |&t| t.checked_mul(2))
        .take_while(|&t| t < cpus)
        .collect();
    n.extend([cpus, 2 * cpus]);
    n
}

/// The name of `workload`'s job at `threads` threads. Job names are
/// `&'static str` (the tables' rows name them); these few are made once
/// per invocation and live as long as it.
fn job_name(workload: JobName, threads: usize) -> JobName {
    let s = if threads == 1 { "" } else { "s" };
    format!("{workload}, {threads} thread{s}").leak()
}

/// The scenario.
///
/// # Errors
/// A built-in engine that does not parse.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let counts = thread_counts(cpus);
    let size = args.size.unwrap_or(SIZE.get(quick));
    let cold_size = args.size.unwrap_or(COLD_SIZE.get(quick));
    let runtime = Duration::from_secs_f64(args.runtime.unwrap_or(RUNTIME.get(quick)));
    let engines = super::engines_or(args, ENGINES)?;
    let of = |f: fn(&EngineSpec) -> bool| -> Vec<EngineSpec> {
        engines.iter().filter(|e| f(e)).cloned().collect()
    };
    // memcpy copies out of memory holding the file (no writes, no cold
    // reads); threads writing one shared mapping would race.
    let writes = |e: &EngineSpec| {
        !matches!(
            e.kind,
            EngineKind::Memcpy | EngineKind::Mmap | EngineKind::Anon | EngineKind::FuseNull
        )
    };
    let cold = |e: &EngineSpec| e.kind != EngineKind::Memcpy;
    let mut jobs = Vec::new();
    let mut targets_rows = Vec::new();
    for &t in &counts {
        let warm = |rw, engines: Vec<EngineSpec>| JobSpec {
            numjobs: t,
            shared: true,
            runtime: Some(runtime),
            cold: args.cold,
            ..JobSpec::new(rw, 4096, size, engines)
        };
        let workloads = [
            (RAND_HITS, warm(Rw::Randread, engines.clone())),
            (SEQ_HITS, warm(Rw::Read, engines.clone())),
            (RAND_WRITES, warm(Rw::Randwrite, of(writes))),
            (
                COLD_READS,
                JobSpec {
                    numjobs: t,
                    shared: false,
                    cold: true,
                    ..JobSpec::new(Rw::Read, COLD_BS.min(cold_size), cold_size, of(cold))
                },
            ),
        ];
        for (workload, spec) in workloads {
            if spec.engines.is_empty() {
                continue;
            }
            let name = job_name(workload, t);
            jobs.push(ScenarioJob::new(name, spec));
            targets_rows.extend(rows_of(workload, name));
        }
    }
    let label = |role| super::first_label(&engines, plays(role));
    let Judged { ratios, targets } = targets::judge(&targets_rows, label, Given::default());
    let counts = counts.iter().map(ToString::to_string).collect::<Vec<_>>();
    let cached = if args.cold {
        "cold: --cold"
    } else {
        "fully cached"
    };
    Ok(Scenario {
        name: "scaling".into(),
        description: format!(
            "Throughput against threads, at {} threads ({cpus} CPUs; the last twice them, \
             oversubscribed): random and sequential 4 KiB hits of one shared {} file \
             ({cached}), random 4 KiB writes into it (their final sync inside the figures), \
             each run {:.1} s, and cold sequential {} reads of a {} file per thread, one pass. \
             foliocache against the kernel and, for hits, memcpy (a bare copy: memory \
             bandwidth bounds both, so foliocache's hits should scale as memcpy's do: compare \
             its ratio to memcpy at each count with the one at 1 thread). Target: \
             foliocache's random writes at least {WRITE_TARGET}x the kernel's at every count. \
             --plot draws throughput against threads.",
            counts.join(", "),
            fmt_size(size),
            runtime.as_secs_f64(),
            fmt_size(COLD_BS.min(cold_size)),
            fmt_size(cold_size),
        ),
        jobs,
        ratios,
        targets,
        detailed: false,
        programs: None,
    })
}

/// The rows of [`TARGETS`] of `workload`, as rows of its job `name` (at
/// one thread count).
fn rows_of(workload: JobName, name: JobName) -> impl Iterator<Item = Target<Role>> {
    TARGETS.iter().filter_map(move |row| match row.figure {
        Figure::Bandwidth {
            numerator,
            denominator,
            job: Some(j),
        } if j == workload => Some(Target {
            figure: Figure::Bandwidth {
                numerator,
                denominator,
                job: Some(name),
            },
            ..*row
        }),
        _ => None,
    })
}

/// Whether an engine plays `role`.
fn plays(role: Role) -> fn(&EngineSpec) -> bool {
    match role {
        Role::Folio => |e| {
            e.kind == EngineKind::Foliocache && e.qd.is_none() && !e.folio.dontcache && !e.folio.pin
        },
        Role::Kernel => |e| e.kind == EngineKind::Kernel,
        Role::Memcpy => |e| e.kind == EngineKind::Memcpy && !e.inplace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_double_up_to_the_cpus_then_oversubscribe() {
        assert_eq!(thread_counts(1), [1, 2]);
        assert_eq!(thread_counts(2), [1, 2, 4]);
        assert_eq!(thread_counts(6), [1, 2, 4, 6, 12]);
        assert_eq!(thread_counts(16), [1, 2, 4, 8, 16, 32]);
    }

    #[test]
    fn every_workload_row_names_a_workload() {
        for row in TARGETS {
            let Figure::Bandwidth { job: Some(j), .. } = row.figure else {
                panic!("{row:?}");
            };
            assert!(
                [RAND_HITS, SEQ_HITS, RAND_WRITES, COLD_READS].contains(&j),
                "{j}"
            );
        }
    }
}
