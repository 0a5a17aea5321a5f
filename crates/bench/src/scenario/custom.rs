//! A custom job: the one job `--rw`, `--bs`, `--numjobs` and `--shared`
//! describe, on the engines given or every engine on files.

use std::time::Duration;

use super::{Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{EngineKind, EngineSpec, JobSpec, Rw};
use crate::units::fmt_size;

/// The job's name: the scenario's only one.
pub const CUSTOM: &str = "custom";
/// A custom job's block size unless `--bs` says otherwise.
const DEFAULT_BS: u64 = 4096;
/// A custom job's file size unless `--size` says otherwise.
const DEFAULT_SIZE: u64 = 1 << 30;

/// The job as a scenario of its own, `custom`.
pub fn scenario(args: &BenchArgs) -> Scenario {
    let rw = args.rw.unwrap_or(Rw::Read);
    let engines = if args.engines.is_empty() {
        EngineKind::ALL
            .into_iter()
            // fuse and fuse-null by name only: they mount, and need
            // /dev/fuse; memcpy only reads.
            .filter(|k| k.on_files() && !k.fuse() && !(*k == EngineKind::Memcpy && rw.is_write()))
            .map(EngineSpec::plain)
            .collect()
    } else {
        args.engines.clone()
    };
    let job = JobSpec {
        numjobs: args.numjobs.map_or(1, usize::from),
        shared: args.shared,
        runtime: args.runtime.map(Duration::from_secs_f64),
        cold: args.cold,
        memory_limit: args.memory_limit,
        ..JobSpec::new(
            rw,
            args.bs.unwrap_or(DEFAULT_BS),
            args.size.unwrap_or(DEFAULT_SIZE),
            engines,
        )
    };
    Scenario {
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
        jobs: vec![ScenarioJob::new(CUSTOM, job)],
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
        programs: None,
    }
}
