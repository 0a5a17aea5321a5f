//! `randread`: the same cached file read at random by one thread per CPU
//! sharing it, hits under concurrency. See `docs/bench.md`.

use super::{CachedReads, Scenario};
use crate::spec::Rw;
use crate::targets::Judged;
use crate::units::fmt_size;

/// The scenario.
pub fn scenario(c: &CachedReads) -> Scenario {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut judged = Judged::default();
    super::copy_limits(&mut judged, c, &[(0, true)]);
    Scenario {
        name: "randread".into(),
        description: format!(
            "The same {} file, {}, read with 4 KiB reads at uniformly random \
             offsets by {cpus} threads (one per CPU) sharing it: hits under concurrency.",
            fmt_size(c.size),
            c.cached()
        ),
        jobs: vec![c.job(Rw::Randread, 4096, cpus)],
        ratios: judged.ratios,
        targets: judged.targets,
        detailed: false,
        programs: None,
    }
}
