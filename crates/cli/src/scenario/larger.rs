//! `larger`: data larger than memory, the database case. Random 4 KiB
//! reads over one file four times a memory budget M, by threads sharing
//! it, uniform and zipfian, 2 and 8 threads; every engine held to M
//! (foliocache's capacity plus its bookkeeping; the other engines in a
//! memory cgroup of M). Cold: every run starts with nothing cached. And
//! one thread at queue depth 32, uniform: `foliocache[qd=32]`
//! (32 reads queued on a `ReadQueue`) beside `direct[qd=32]` (an io_uring of
//! depth 32 on an `O_DIRECT` descriptor) and plain `foliocache` (one
//! synchronous read at a time). See `docs/bench.md`.

use std::time::Duration;

use super::Scenario;
use crate::args::BenchArgs;
use crate::spec::{Dist, EngineKind, EngineSpec, JobSpec, Rw};
use crate::sys::PAGE;
use crate::targets::{Judged, TargetSpec};
use crate::units::{fmt_size, fmt_size_approx};
use crate::zipf::Zipf;

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
const LARGER_M: u64 = 1 << 30;
const LARGER_QUICK_M: u64 = 256 << 20;
/// The smallest M (the memory cgroup's limit).
const LARGER_MIN_M: u64 = 1 << 20;
/// The block size of every read.
const LARGER_BS: u64 = 4096;
/// The zipfian exponent (YCSB's).
pub const THETA: f64 = 0.99;
/// The thread counts.
pub const THREADS: [usize; 2] = [2, 8];
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

/// The scenario. M is `--capacity`, or [`LARGER_M`] ([`LARGER_QUICK_M`]
/// with `--quick`); the file is `--size`, or 4 M.
///
/// # Errors
/// M is below [`LARGER_MIN_M`], the file is smaller than a block, or a
/// built-in engine does not parse.
pub fn scenario(
    args: &BenchArgs,
    quick: bool,
    runtime: Option<Duration>,
) -> Result<Scenario, String> {
    let m = args
        .capacity
        .unwrap_or(if quick { LARGER_QUICK_M } else { LARGER_M });
    if m < LARGER_MIN_M {
        return Err(format!(
            "larger scenario: a memory budget of {} is too small: at least {} (--capacity)",
            fmt_size_approx(m),
            fmt_size(LARGER_MIN_M)
        ));
    }
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
    let mut jobs = Vec::new();
    for dist in [Dist::Uniform, Dist::Zipf(zipf)] {
        for n in THREADS {
            jobs.push(job(dist, n));
        }
    }
    // Job indices, as built above.
    let (uniform8, zipf2) = (1, 2);
    let qd = if args.engines.is_empty() {
        super::builtin_engines(QD_ENGINES)?
    } else {
        Vec::new()
    };
    let qd_job = jobs.len();
    let qd_label = |f: fn(&EngineSpec) -> bool| super::first_label(&qd, f);
    let qd_folio = qd_label(|e| e.kind == EngineKind::Foliocache && e.qd.is_some());
    let qd_direct = qd_label(|e| e.kind == EngineKind::Direct && e.qd.is_some());
    let sync_folio = qd_label(|e| e.kind == EngineKind::Foliocache && e.qd.is_none());
    if !qd.is_empty() {
        jobs.push(JobSpec {
            engines: qd,
            ..job(Dist::Uniform, 1)
        });
    }
    let label = |f: fn(&EngineSpec) -> bool| super::first_label(&engines, f);
    let folio = label(|e| e.kind == EngineKind::Foliocache);
    let kernel = label(|e| e.kind == EngineKind::Kernel);
    let direct = label(|e| e.kind == EngineKind::Direct);
    let mut judged = Judged::default();
    for j in 0..THREADS.len() * 2 {
        let (vs_kernel, vs_direct) = match j {
            _ if j == uniform8 => (Some(1.1), Some(1.0)),
            _ if j == zipf2 => (Some(1.5), None),
            _ => (None, None),
        };
        judged.judged(&folio, &kernel, vs_kernel, Some(j));
        judged.judged(&folio, &direct, vs_direct, Some(j));
    }
    judged.judged(&qd_folio, &qd_direct, Some(QD_VS_DIRECT), Some(qd_job));
    judged.judged(&qd_folio, &sync_folio, Some(QD_VS_SYNC), Some(qd_job));
    let mut targets = judged.targets;
    if let Some(f) = &folio {
        if let Some(d) = &direct {
            targets.push(TargetSpec::CpuPerRead {
                job: uniform8,
                engine: f.clone(),
                than: d.clone(),
                plus_us: 1.0,
            });
        }
        targets.push(TargetSpec::LruGap {
            job: zipf2,
            engine: f.clone(),
            max_points: 2.0,
        });
        targets.push(TargetSpec::ReadAmplification {
            engine: f.clone(),
            max: 1.05,
        });
        targets.push(TargetSpec::Memory {
            engine: f.clone(),
            max_bytes: m,
        });
    }
    Ok(Scenario {
        name: "larger".into(),
        description: format!(
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
        ),
        jobs,
        ratios: judged.ratios,
        targets,
        detailed: false,
        programs: None,
    })
}
