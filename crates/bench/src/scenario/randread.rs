//! `randread`: the same cached file read at random by one thread per CPU
//! sharing it, hits under concurrency. See `docs/bench/randread.md`.

use super::Cached::{Folio, Inplace, Memcpy, Mmap, Pin};
use super::{Cached, CachedReads, Scenario, ScenarioJob, MEMCPY_TARGET, MMAP_TARGET, PIN_TARGET};
use crate::spec::Rw;
use crate::targets::{bandwidth, Judged, Target};
use crate::units::fmt_size;

/// The job: 4 KiB reads at random, one thread per CPU.
pub const RANDREAD_4K: &str = "4KiB";

/// The scenario's ratios and targets: a hit's limits, a bare copy's and
/// mmap's; the pin (with `--consume`) beside mmap, foliocache's copy and
/// zero copy's limit.
#[rustfmt::skip]
pub const TARGETS: &[Target<Cached>] = &[
    bandwidth(Folio, Memcpy).of(RANDREAD_4K).at_least(MEMCPY_TARGET),
    bandwidth(Folio, Mmap).of(RANDREAD_4K).at_least(MMAP_TARGET),
    bandwidth(Pin, Mmap).of(RANDREAD_4K).at_least_with_consume(PIN_TARGET),
    bandwidth(Pin, Folio).of(RANDREAD_4K),
    bandwidth(Pin, Inplace).of(RANDREAD_4K),
];

/// The scenario.
pub fn scenario(c: &CachedReads) -> Scenario {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Judged { ratios, targets } = c.judge(TARGETS);
    Scenario {
        name: "randread".into(),
        description: format!(
            "The same {} file, {}, read with 4 KiB reads at uniformly random \
             offsets by {cpus} threads (one per CPU) sharing it: hits under concurrency.",
            fmt_size(c.size),
            c.cached()
        ),
        jobs: vec![ScenarioJob::new(
            RANDREAD_4K,
            c.job(Rw::Randread, 4096, cpus),
        )],
        ratios,
        targets,
        detailed: false,
        programs: None,
    }
}
