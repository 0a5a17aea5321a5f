//! `write`: buffered writes with the sync that makes them durable inside
//! the figures: one thread writes a file sequentially at 64 KiB, then an
//! eighth of it at random at 4 KiB, each run ended by `fsync`
//! (`File::sync_all` for foliocache). Targets: foliocache over the
//! kernel, 1.3x sequential and 1.0x random. See `docs/bench/write.md`.

use std::time::Duration;

use super::{FullQuick, Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{default_capacity, EngineKind, EngineSpec, JobSpec, Rw};
use crate::targets::{self, bandwidth, Given, Judged, Target};
use crate::units::fmt_size;
use Role::{Direct, Dontcache, Folio, FolioUncached, Kernel};

/// The engines unless `--engine` gives others: `foliocache`,
/// `foliocache[dontcache]`, `kernel` (`pwrite`), `direct` (`O_DIRECT`)
/// and `dontcache` (`RWF_DONTCACHE`).
pub const ENGINES: &[&str] = &[
    "foliocache",
    "foliocache[dontcache]",
    "kernel",
    "direct",
    "dontcache",
];
/// The sequential file (full, and with `--quick`); the random-write file
/// is an eighth of it (4 KiB `O_DIRECT` writes each wait for the device).
const WRITE_SIZE: FullQuick<u64> = FullQuick(1 << 30, 128 << 20);
/// The block sizes: sequential and random.
const WRITE_SEQ_BS: u64 = 64 << 10;
const WRITE_RAND_BS: u64 = 4 << 10;
/// The targets (issue 21), foliocache over the kernel: sequential 64 KiB
/// writes and random 4 KiB writes, each with its sync.
const WRITE_SEQ_TARGET: f64 = 1.3;
const WRITE_RAND_TARGET: f64 = 1.0;

/// The jobs: sequential writes, and random ones.
pub const SEQUENTIAL: &str = "sequential";
/// The random writes.
pub const RANDOM: &str = "random";

/// The engines the table names, each the first of the engine list that
/// plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A foliocache engine without `dontcache`.
    Folio,
    /// A foliocache engine with `dontcache` (`WriteFlags::DONTCACHE`).
    FolioUncached,
    /// `kernel`: `pwrite`.
    Kernel,
    /// `direct`: `O_DIRECT`.
    Direct,
    /// `dontcache`: `RWF_DONTCACHE`.
    Dontcache,
}

/// The scenario's ratios and targets, for each job: foliocache over the
/// kernel (the targets), foliocache's uncached writes over the kernel's,
/// and each uncached engine over the kernel.
#[rustfmt::skip]
pub const TARGETS: &[Target<Role>] = &[
    bandwidth(Folio, Kernel).of(SEQUENTIAL).at_least(WRITE_SEQ_TARGET),
    bandwidth(FolioUncached, Dontcache).of(SEQUENTIAL),
    bandwidth(FolioUncached, Kernel).of(SEQUENTIAL),
    bandwidth(Direct, Kernel).of(SEQUENTIAL),
    bandwidth(Dontcache, Kernel).of(SEQUENTIAL),
    bandwidth(Folio, Kernel).of(RANDOM).at_least(WRITE_RAND_TARGET),
    bandwidth(FolioUncached, Dontcache).of(RANDOM),
    bandwidth(FolioUncached, Kernel).of(RANDOM),
    bandwidth(Direct, Kernel).of(RANDOM),
    bandwidth(Dontcache, Kernel).of(RANDOM),
];

/// The scenario: one pass each (time-based with `--runtime`), warm like
/// the read scenarios unless `--cold`; foliocache reopens the file for
/// each run.
///
/// # Errors
/// A built-in engine does not parse.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let size = args.size.unwrap_or(WRITE_SIZE.get(quick));
    let rand_size = (size / 8).max(WRITE_RAND_BS);
    let engines = super::engines_or(args, ENGINES)?;
    let runtime = args.runtime.map(Duration::from_secs_f64);
    // The kernel's engines each run in a memory cgroup, so the report
    // shows their peak beside foliocache's peak bytes cached (an uncached
    // stream's footprint): twice foliocache's capacity, never a limit
    // the run meets.
    let job = |rw, bs, file_size| JobSpec {
        runtime,
        cold: args.cold,
        memory_limit: Some(2 * default_capacity(file_size)),
        ..JobSpec::new(rw, bs, file_size, engines.clone())
    };
    let seq_bs = WRITE_SEQ_BS.min(size);
    let jobs = vec![
        ScenarioJob::new(SEQUENTIAL, job(Rw::Write, seq_bs, size)),
        ScenarioJob::new(
            RANDOM,
            job(Rw::Randwrite, WRITE_RAND_BS.min(rand_size), rand_size),
        ),
    ];
    let label = |role| {
        let f: fn(&EngineSpec) -> bool = match role {
            Role::Folio => |e| e.kind == EngineKind::Foliocache && !e.folio.dontcache,
            Role::FolioUncached => |e| e.kind == EngineKind::Foliocache && e.folio.dontcache,
            Role::Kernel => |e| e.kind == EngineKind::Kernel,
            Role::Direct => |e| e.kind == EngineKind::Direct,
            Role::Dontcache => |e| e.kind == EngineKind::Dontcache,
        };
        super::first_label(&engines, f)
    };
    let Judged { ratios, targets } = targets::judge(TARGETS, label, Given::default());
    let cached = if args.cold {
        "cold (--cold: each engine starts with the file out of every cache)"
    } else {
        "warm (the file cached before each run of a cached engine, as in the read scenarios; \
         the uncached engines start without it)"
    };
    Ok(Scenario {
        name: "write".into(),
        description: format!(
            "Buffered writes, durable: one thread writes a {} file sequentially with {} \
             writes, then a {} file with {} writes at uniformly random offsets, {}, and the \
             run ends with fsync (File::sync_all for foliocache, whose write_at fills its \
             cache and whose writeback writes with O_DIRECT): the figures include the sync. \
             Engines: foliocache, foliocache[dontcache] (WriteFlags::DONTCACHE), kernel \
             (pwrite), direct (O_DIRECT) and dontcache (pwritev2 RWF_DONTCACHE); {cached}. \
             Targets: foliocache's sequential write at least {WRITE_SEQ_TARGET}x the \
             kernel's, its random write at least {WRITE_RAND_TARGET}x.",
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
        programs: None,
    })
}
