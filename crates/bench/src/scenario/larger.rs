//! `larger`: data larger than memory, the database case. Random 4 KiB
//! reads over one file four times a memory budget M, by threads sharing
//! it, uniform and zipfian, 2 and 8 threads; every engine held to M
//! (foliocache's capacity plus its bookkeeping; the other engines in a
//! memory cgroup of M). Cold: every run starts with nothing cached. And
//! one thread at queue depth 32, uniform: `foliocache[qd=32]`
//! (32 reads queued on a `ReadQueue`) beside `direct[qd=32]` (an io_uring of
//! depth 32 on an `O_DIRECT` descriptor) and plain `foliocache` (one
//! synchronous read at a time). See `docs/bench/larger.md`.

use std::time::Duration;

use super::{FullQuick, Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{Dist, EngineKind, EngineSpec, JobSpec, Rw};
use crate::sys::PAGE;
use crate::targets::{
    self, bandwidth, cpu_per_read, lru_gap, memory, read_amplification, Given, Judged, Target,
};
use crate::units::fmt_size;
use crate::zipf::Zipf;
use Role::{Direct, Folio, Kernel, QdDirect, QdFolio, SyncFolio};

/// The engines of the threaded jobs unless `--engine` gives others.
/// mmap is shown, not targeted.
pub const ENGINES: &[&str] = &["foliocache", "kernel", "direct", "mmap"];
/// The engines of the job of one thread at queue depth 32 (uniform, run
/// unless `--engine` gives engines): foliocache's batched reads, O_DIRECT
/// at the same depth, and foliocache's synchronous reads, which the
/// batched ones must beat [`QD_VS_SYNC`] times.
pub const QD_ENGINES: &[&str] = &["foliocache[qd=32]", "direct[qd=32]", "foliocache"];
/// `foliocache[qd=32]` over `direct[qd=32]`, at least.
pub const QD_VS_DIRECT: f64 = 0.9;
/// `foliocache[qd=32]` over `foliocache` (one synchronous thread), at
/// least.
pub const QD_VS_SYNC: f64 = 3.0;
/// The memory budget M (full, and with `--quick`) unless `--capacity`
/// says otherwise.
const LARGER_M: FullQuick<u64> = FullQuick(1 << 30, 256 << 20);
/// The smallest M (the memory cgroup's limit).
const LARGER_MIN_M: u64 = 1 << 20;
/// The block size of every read.
const LARGER_BS: u64 = 4096;
/// The zipfian exponent (YCSB's).
pub const THETA: f64 = 0.99;
/// The thread counts.
pub const THREADS: [usize; 2] = [2, 8];
/// The threaded jobs: name, zipfian (else uniform), threads.
const THREADED: [(&str, bool, usize); 4] = [
    (UNIFORM_2, false, THREADS[0]),
    (UNIFORM_8, false, THREADS[1]),
    (ZIPF_2, true, THREADS[0]),
    (ZIPF_8, true, THREADS[1]),
];
/// Uniform offsets, 2 threads.
pub const UNIFORM_2: &str = "uniform, 2 jobs";
/// Uniform offsets, 8 threads.
pub const UNIFORM_8: &str = "uniform, 8 jobs";
/// Zipfian offsets, 2 threads.
pub const ZIPF_2: &str = "zipf, 2 jobs";
/// Zipfian offsets, 8 threads.
pub const ZIPF_8: &str = "zipf, 8 jobs";
/// One thread at queue depth 32, uniform ([`QD_ENGINES`]).
pub const QD: &str = "qd=32";

/// The engines the table names: the first of the threaded jobs' engines
/// of each kind, and those of the queue-depth job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The threaded jobs' first foliocache engine.
    Folio,
    /// Their first `kernel`.
    Kernel,
    /// Their first `direct`.
    Direct,
    /// `foliocache[qd=32]`: 32 reads queued on a `ReadQueue`.
    QdFolio,
    /// `direct[qd=32]`: an io_uring of depth 32 on `O_DIRECT`.
    QdDirect,
    /// The queue-depth job's plain `foliocache`: one synchronous read at a
    /// time.
    SyncFolio,
}

/// The scenario's ratios and targets: foliocache over the kernel and
/// direct in every threaded job (held where the issue sets a bound); at
/// queue depth 32 over direct and over one synchronous read at a time;
/// CPU per read beside direct's, the hit ratio beside an exact LRU's,
/// read amplification, and the cache's memory within M.
#[rustfmt::skip]
pub const TARGETS: &[Target<Role>] = &[
    bandwidth(Folio, Kernel).of(UNIFORM_2),
    bandwidth(Folio, Direct).of(UNIFORM_2),
    bandwidth(Folio, Kernel).of(UNIFORM_8).at_least(1.1),
    bandwidth(Folio, Direct).of(UNIFORM_8).at_least(1.0),
    bandwidth(Folio, Kernel).of(ZIPF_2).at_least(1.5),
    bandwidth(Folio, Direct).of(ZIPF_2),
    bandwidth(Folio, Kernel).of(ZIPF_8),
    bandwidth(Folio, Direct).of(ZIPF_8),
    bandwidth(QdFolio, QdDirect).of(QD).at_least(QD_VS_DIRECT),
    bandwidth(QdFolio, SyncFolio).of(QD).at_least(QD_VS_SYNC),
    cpu_per_read(Folio, Direct, UNIFORM_8).at_most(1.0),
    lru_gap(Folio, ZIPF_2).at_most(2.0),
    read_amplification(Folio).at_most(1.05),
    memory(Folio).within_budget(),
];
/// foliocache's bookkeeping as a fraction of its capacity that the
/// capacity leaves room for: `Cache::memory`'s documentation puts it at
/// under 2 % for a densely filled cache (descriptors, allocator, dirty
/// bitmap, index nodes, shadows); 1/40 leaves a margin. The run reports
/// the memory the cache had, and a target holds it to M.
const OVERHEAD_DIVISOR: u64 = 40;

/// foliocache's capacity within a budget of `m`: `m` less the room for
/// its bookkeeping, in whole pages.
pub fn folio_capacity(m: u64) -> u64 {
    (m - m / OVERHEAD_DIVISOR) / PAGE as u64 * PAGE as u64
}

/// The scenario. M is `--capacity`, or [`LARGER_M`]; the file is `--size`, or 4 M.
///
/// # Errors
/// M is below [`LARGER_MIN_M`], the file is smaller than a block, or a
/// built-in engine does not parse.
pub fn scenario(
    args: &BenchArgs,
    quick: bool,
    runtime: Option<Duration>,
) -> Result<Scenario, String> {
    let what = "larger scenario: a memory budget of";
    let m = super::capacity_at_least(args, LARGER_M.get(quick), LARGER_MIN_M, what)?;
    let size = args.size.unwrap_or(4 * m);
    let blocks = size / LARGER_BS;
    let zipf = Zipf::new(blocks, THETA).map_err(|e| format!("larger scenario: {e}"))?;
    let engines = super::engines_or(args, ENGINES)?;
    let capacity = folio_capacity(m);
    let job = |dist: Dist, numjobs: usize| JobSpec {
        dist,
        named_dist: true,
        numjobs,
        shared: true,
        runtime,
        cold: true,
        capacity: Some(capacity),
        memory_limit: Some(m),
        ..JobSpec::new(Rw::Randread, LARGER_BS, size, engines.clone())
    };
    let mut jobs: Vec<ScenarioJob> = THREADED
        .iter()
        .map(|&(name, zipfian, n)| {
            let dist = if zipfian {
                Dist::Zipf(zipf)
            } else {
                Dist::Uniform
            };
            ScenarioJob::new(name, job(dist, n))
        })
        .collect();
    let qd = if args.engines.is_empty() {
        super::builtin_engines(QD_ENGINES)?
    } else {
        Vec::new()
    };
    let label = |role| {
        let (list, f): (&[EngineSpec], fn(&EngineSpec) -> bool) = match role {
            Role::Folio => (&engines, |e| e.kind == EngineKind::Foliocache),
            Role::Kernel => (&engines, |e| e.kind == EngineKind::Kernel),
            Role::Direct => (&engines, |e| e.kind == EngineKind::Direct),
            Role::QdFolio => (&qd, |e| e.kind == EngineKind::Foliocache && e.qd.is_some()),
            Role::QdDirect => (&qd, |e| e.kind == EngineKind::Direct && e.qd.is_some()),
            Role::SyncFolio => (&qd, |e| e.kind == EngineKind::Foliocache && e.qd.is_none()),
        };
        super::first_label(list, f)
    };
    let given = Given {
        consume: false,
        budget: Some(m),
    };
    let Judged { ratios, targets } = targets::judge(TARGETS, label, given);
    if !qd.is_empty() {
        jobs.push(ScenarioJob::new(
            QD,
            JobSpec {
                engines: qd,
                ..job(Dist::Uniform, 1)
            },
        ));
    }
    Ok(Scenario {
        name: "larger".into(),
        description: description(size, m, capacity),
        jobs,
        ratios,
        targets,
        detailed: false,
        programs: None,
    })
}

/// The scenario's description: reads of a `size` file under a budget of
/// `m`, foliocache's capacity `capacity`.
fn description(size: u64, m: u64, capacity: u64) -> String {
    format!(
        "Data larger than memory: random {} reads over one {} file shared by the threads, \
         4x a memory budget M = {} (--capacity); uniform, and zipfian (theta {THETA}, \
         YCSB's generator, ranks spread over the file by a permutation); {} threads. \
         foliocache's capacity is {} (M less room for its bookkeeping, which the cache's \
         memory figure shows); kernel, direct and mmap run with the process in a memory \
         cgroup of M. Cold: every run starts with nothing cached. Per engine: IOPS, \
         latency, hit ratio (foliocache's statistics; the others' from the device's reads), \
         CPU per read, read amplification (device bytes over bytes delivered), and the hit \
         ratios of an exact LRU of foliocache's capacity, Belady's MIN (which knows the \
         future) and an unbounded cache over the same offsets. mmap is shown, not targeted: each fault reads around the page it wants \
         (fault-around, readahead) and under the cgroup those pages are reclaimed before \
         they are used. Then one thread at queue depth 32, uniform: foliocache[qd=32] \
         (32 reads queued on a ReadQueue, one taken and one queued at a time), direct[qd=32] (an io_uring of depth 32 on an \
         O_DIRECT descriptor, kept full) and foliocache (one synchronous read at a time), \
         under the same budget.",
        fmt_size(LARGER_BS),
        fmt_size(size),
        fmt_size(m),
        THREADS.map(|n| n.to_string()).join(" and "),
        fmt_size(capacity),
    )
}
