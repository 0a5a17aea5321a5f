//! `seqread`: a cached file read sequentially by one thread at 4 KiB and
//! 64 KiB, the cost of a cache hit beside its limit (`memcpy`, a bare
//! copy); at 64 KiB also through the FUSE mount.
//! See `docs/bench.md`.

use super::{CachedReads, Scenario};
use crate::spec::{EngineKind, EngineSpec, Rw};
use crate::targets::Judged;
use crate::units::fmt_size;

/// The target for the FUSE mount: 64 KiB cached sequential reads through
/// it at least this fraction of `fuse-null`'s, the same reads through a
/// server that answers zeros from one buffer, with no cache: the
/// crossing's own ceiling on this machine. (Against the kernel's buffered
/// reads no FUSE server comes near: the crossing is two context switches
/// and a copy per request; docs/bench.md, "The FUSE crossing".)
const FUSE_TARGET: f64 = 0.9;

/// The scenario.
pub fn scenario(c: &CachedReads) -> Scenario {
    let mut big = c.job(Rw::Read, 64 << 10, 1);
    if !c.given {
        // The FUSE crossing, at the target's block size only (each run is
        // time-based: a run more), and the crossing alone, its ceiling.
        big.engines.push(EngineSpec::plain(EngineKind::Fuse));
        big.engines.push(EngineSpec::plain(EngineKind::FuseNull));
    }
    let mut judged = fuse_ratios(&c.engines, !c.given);
    // A hit's limits: a bare copy at both sizes, mmap's at 4 KiB.
    super::copy_limits(&mut judged, c, &[(0, true), (1, false)]);
    Scenario {
        name: "seqread".into(),
        description: format!(
            "A {} file, {}, read sequentially by one thread with sync reads of \
             4 KiB and of 64 KiB: the cost of a cache hit.",
            fmt_size(c.size),
            c.cached()
        ),
        jobs: vec![c.job(Rw::Read, 4096, 1), big],
        ratios: judged.ratios,
        targets: judged.targets,
        detailed: false,
        programs: None,
    }
}

/// The ratios at 64 KiB (the second job) where their engines run
/// (`default`: the default engines, which add fuse and fuse-null):
/// `fuse / kernel`, `fuse-null / kernel` (the crossing's ceiling: no FUSE
/// server can do better) and `fuse / fuse-null` (the target's: how close
/// the mount comes to that ceiling).
fn fuse_ratios(engines: &[EngineSpec], default: bool) -> Judged {
    let label = |k: EngineKind| {
        if default {
            Some(k.name().to_string())
        } else {
            super::first_label(engines, |e| e.kind == k)
        }
    };
    let kernel = super::first_label(engines, |e| e.kind == EngineKind::Kernel);
    let (fuse, null) = (label(EngineKind::Fuse), label(EngineKind::FuseNull));
    let mut j = Judged::default();
    j.judged(&fuse, &kernel, None, Some(1));
    j.judged(&null, &kernel, None, Some(1));
    j.judged(&fuse, &null, Some(FUSE_TARGET), Some(1));
    j
}
