//! `uncached`: one job streams a file of 4C once through a cache of C
//! (foliocache's capacity; the kernel engines' memory cgroup limit), first
//! alone, then beside a hot reader of a C/4 file: what uncached reads
//! (`RWF_DONTCACHE`, `ReadFlags::DONTCACHE`) spare the hot set. See
//! `docs/bench/uncached.md`.

use super::{FullQuick, Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{EngineKind, EngineSpec, HotSpec, JobSpec, Rw};
use crate::targets::{self, bandwidth, cpu_per_gib, flat, hit_ratio, Given, Judged, Target};
use crate::units::{fmt_period, fmt_size, fmt_size_approx};
use Role::{Cached, Dontcache, Kernel, Uncached};

/// The engines unless `--engine` gives others: `foliocache` (cached: the
/// cache fills and then reclaims), `foliocache[dontcache]` (every read
/// uncached), `kernel` and `dontcache` (`RWF_DONTCACHE`).
pub const ENGINES: &[&str] = &["foliocache", "foliocache[dontcache]", "kernel", "dontcache"];
/// The capacity C (full, and with `--quick`) unless `--capacity` or
/// `--size` (a quarter of it) says otherwise.
const UNCACHED_C: FullQuick<u64> = FullQuick(1 << 30, 256 << 20);
/// The smallest C the scenario runs with (the kernel engines' memory
/// limit).
const UNCACHED_MIN_C: u64 = 1 << 20;
/// The block sizes: the stream's, and the hot reader's.
const UNCACHED_BS: u64 = 64 << 10;
const HOT_BS: u64 = 4096;
/// The hot reader's reads per second, in all, unless `--hot-rate` says
/// otherwise: each page of the hot file read about once a second with
/// `--quick` (16384 pages), once every 4 s in a full run (65536 pages).
/// The kernel's LRU keeps a page only if it is read twice while inactive,
/// and a cached stream at device speed sweeps the inactive list faster
/// than that, so its cached stream costs the hot reader part of its hits
/// and an uncached one does not: what the experiment shows. foliocache's
/// cached stream goes first (its streamed list, docs/design.md section 7). At 0 (as fast as it
/// can) every page is read often enough to turn active and stay beside
/// any stream. The hit ratios measured at each rate are in
/// `docs/measurements/2026-11-22-uncached.md`.
pub const DEFAULT_HOT_RATE: u64 = 16384;
/// The stream's pace beside the hot reader, in bytes per second; a paced
/// hot reader follows the stream's bytes at its rate per this pace
/// (`hot::Follow`): every engine streams the same bytes between two hot
/// reads (an unpaced faster stream sweeps the cache more often between
/// them and takes more of the hot set for that alone: foliocache's cached
/// stream ran twice as fast as the kernel's; and a stream that stalls
/// while the reader goes on lets it activate its pages for free: the
/// kernel's, beside the reader). Below every cached engine's speed
/// beside the reader in `docs/measurements/2026-11-22-uncached.md` (1.61
/// GiB/s and up); the kernel's `RWF_DONTCACHE` runs slower and keeps its
/// own speed. Measured in `docs/measurements/2026-11-27-hot-beside-stream.md`.
pub const BESIDE_PACE: u64 = 1 << 30;
/// The jobs: the stream alone, and beside the hot reader.
pub const ALONE: &str = "alone";
/// The stream beside the hot reader.
pub const BESIDE: &str = "beside the hot reader";

/// The engines the table names, each the first of the engine list that
/// plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A foliocache engine with `dontcache`: every read uncached.
    Uncached,
    /// A foliocache engine without it: the cache fills, then reclaims.
    Cached,
    /// `kernel`.
    Kernel,
    /// `dontcache`: the kernel's uncached reads (`RWF_DONTCACHE`).
    Dontcache,
}

/// The scenario's ratios and targets: the uncached stream flat alone, as
/// fast as the cached one and as the kernel's uncached reads, at no more
/// CPU than the latter, and the hot reader's hits kept beside it.
#[rustfmt::skip]
pub const TARGETS: &[Target<Role>] = &[
    flat(Uncached, ALONE).at_least(0.8),
    bandwidth(Uncached, Cached).at_least(1.0),
    bandwidth(Uncached, Dontcache).at_least(1.0),
    cpu_per_gib(Uncached, Dontcache, ALONE).at_most(1.0),
    hit_ratio(Uncached, BESIDE).at_least(0.99),
    bandwidth(Uncached, Kernel),
    bandwidth(Cached, Kernel),
    bandwidth(Dontcache, Kernel),
];
/// Timeline intervals per second (50 ms: a stream lasts a second or two).
const UNCACHED_BINS: u32 = 20;

/// The scenario. C is `--capacity`, or a quarter of `--size`, or
/// [`UNCACHED_C`].
///
/// # Errors
/// C is below [`UNCACHED_MIN_C`], or a built-in engine does not parse.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let c = match (args.capacity, args.size) {
        (Some(c), _) => c,
        (None, Some(size)) => size / 4,
        (None, None) => UNCACHED_C.get(quick),
    };
    if c < UNCACHED_MIN_C {
        return Err(format!(
            "uncached scenario: a capacity of {} is too small: at least {} (--capacity, or \
             --size, which sets it to a quarter of the file)",
            fmt_size_approx(c),
            fmt_size(UNCACHED_MIN_C)
        ));
    }
    let size = args.size.unwrap_or(4 * c);
    let hot_size = (c / 4) / HOT_BS * HOT_BS;
    let engines = super::engines_or(args, ENGINES)?;
    let stream = JobSpec {
        cold: true,
        bins_per_second: UNCACHED_BINS,
        capacity: Some(c),
        memory_limit: Some(c),
        ..JobSpec::new(Rw::Read, UNCACHED_BS, size, engines.clone())
    };
    let rate = args.hot_rate.unwrap_or(DEFAULT_HOT_RATE);
    let beside = JobSpec {
        hot: Some(HotSpec {
            file_size: hot_size,
            bs: HOT_BS,
            rate,
        }),
        pace: Some(BESIDE_PACE),
        ..stream.clone()
    };
    let label = |role| {
        let f: fn(&EngineSpec) -> bool = match role {
            Role::Uncached => |e| e.kind == EngineKind::Foliocache && e.folio.dontcache,
            Role::Cached => |e| e.kind == EngineKind::Foliocache && !e.folio.dontcache,
            Role::Kernel => |e| e.kind == EngineKind::Kernel,
            Role::Dontcache => |e| e.kind == EngineKind::Dontcache,
        };
        super::first_label(&engines, f)
    };
    let Judged { ratios, targets } = targets::judge(TARGETS, label, Given::default());
    Ok(Scenario {
        name: "uncached".into(),
        description: format!(
            "Uncached buffered reads: one job reads a {} file once, start to end, with \
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
             would wait for IO, found with a NOWAIT read first, is a miss), and the stream \
             paced to {}/s with the hot reader following its bytes (a paced reader's read i \
             is due once the stream has moved i x pace/rate, and the stream waits for a reader its \
             misses held up), so that every engine's reader makes the same reads at the same \
             places in the stream (an engine too slow for the pace runs as fast as it can). The kernel's LRU \
             keeps a page only once it is read twice while inactive (foliocache's cached stream goes \
             first: its streamed list): {}. Timelines per 50 ms.",
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
            fmt_size(BESIDE_PACE),
            if rate == 0 {
                "unthrottled, it reads every page often enough to keep it active beside any \
                 stream"
            } else {
                "a page read less often than a cached stream sweeps the inactive list is lost \
                 to the kernel's cached stream, and kept beside an uncached one"
            },
        ),
        jobs: vec![
            ScenarioJob::new(ALONE, stream),
            ScenarioJob::new(BESIDE, beside),
        ],
        ratios,
        targets,
        detailed: true,
        programs: None,
    })
}
