//! `seqread`: a cached file read sequentially by one thread at 4 KiB and
//! 64 KiB, the cost of a cache hit beside its limit (`memcpy`, a bare
//! copy); at 64 KiB also through the FUSE mount.
//! See `docs/bench/seqread.md`.

use super::Cached::{Folio, Fuse, FuseNull, Inplace, Kernel, Memcpy, Mmap, Pin};
use super::{Cached, CachedReads, Scenario, ScenarioJob, MEMCPY_TARGET, MMAP_TARGET, PIN_TARGET};
use crate::spec::{EngineKind, EngineSpec, Rw};
use crate::targets::{bandwidth, Judged, Target};
use crate::units::fmt_size;

/// The jobs: one thread reading 4 KiB, and 64 KiB, at a time.
pub const READ_4K: &str = "4KiB";
/// The 64 KiB job.
pub const READ_64K: &str = "64KiB";

/// The target for the FUSE mount: 64 KiB cached sequential reads through
/// it at least this fraction of `fuse-null`'s, the same reads through a
/// server that answers zeros from one buffer, with no cache: the
/// crossing's own ceiling on this machine. (Against the kernel's buffered
/// reads no FUSE server comes near: the crossing is two context switches
/// and a copy per request; `docs/measurements/2026-11-22-fuse-crossing.md`.)
const FUSE_TARGET: f64 = 0.9;

/// The scenario's ratios and targets. At 64 KiB, the mount: `fuse` and
/// `fuse-null` (the crossing's ceiling: no FUSE server can do better)
/// over the kernel, and `fuse` over `fuse-null` (how close the mount
/// comes to that ceiling). A hit's limits: a bare copy at both sizes,
/// mmap's at 4 KiB; the pin (with `--consume`) beside mmap, foliocache's
/// copy and zero copy's limit.
#[rustfmt::skip]
pub const TARGETS: &[Target<Cached>] = &[
    bandwidth(Fuse, Kernel).of(READ_64K),
    bandwidth(FuseNull, Kernel).of(READ_64K),
    bandwidth(Fuse, FuseNull).of(READ_64K).at_least(FUSE_TARGET),
    bandwidth(Folio, Memcpy).of(READ_4K).at_least(MEMCPY_TARGET),
    bandwidth(Folio, Mmap).of(READ_4K).at_least(MMAP_TARGET),
    bandwidth(Pin, Mmap).of(READ_4K).at_least_with_consume(PIN_TARGET),
    bandwidth(Pin, Folio).of(READ_4K),
    bandwidth(Pin, Inplace).of(READ_4K),
    bandwidth(Folio, Memcpy).of(READ_64K).at_least(MEMCPY_TARGET),
    bandwidth(Pin, Folio).of(READ_64K),
    bandwidth(Pin, Inplace).of(READ_64K),
];

/// The scenario.
pub fn scenario(c: &CachedReads) -> Scenario {
    let mut big = c.job(Rw::Read, 64 << 10, 1);
    if !c.given {
        // The FUSE crossing, at the target's block size only (each run is
        // time-based: a run more), and the crossing alone, its ceiling.
        big.engines.push(EngineSpec::plain(EngineKind::Fuse));
        big.engines.push(EngineSpec::plain(EngineKind::FuseNull));
    }
    let Judged { ratios, targets } = c.judge(TARGETS);
    Scenario {
        name: "seqread".into(),
        description: format!(
            "A {} file, {}, read sequentially by one thread with sync reads of \
             4 KiB and of 64 KiB: the cost of a cache hit.",
            fmt_size(c.size),
            c.cached()
        ),
        jobs: vec![
            ScenarioJob::new(READ_4K, c.job(Rw::Read, 4096, 1)),
            ScenarioJob::new(READ_64K, big),
        ],
        ratios,
        targets,
        detailed: false,
        programs: None,
    }
}
