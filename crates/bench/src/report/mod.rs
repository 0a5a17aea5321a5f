//! Results: one [`RunRecord`] per engine run ([`record`], its figures in
//! [`figures`]), printed as a fio-like block when the run ends, gathered
//! per scenario into a side-by-side table with each engine's ratio to
//! `kernel` ([`render`]), and written as JSON (`"version": 1`: a
//! [`Report`]).

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

mod figures;
mod flatness;
mod record;
mod render;

pub use figures::{
    Cpu, FineTimeline, FolioFigures, HotFigures, HugeMapped, Latency, LruFigures, MemoryLimit,
    Readahead, Residency,
};
pub use flatness::{flatness, median, Flatness};
pub use record::{
    dist_of, dontcache_ignored, job_of_ratio, CacheFigures, MemoryFigures, Perf, RunJob, RunRecord,
    Timing,
};
pub use render::{block, fmt_limit, table};

/// The JSON document.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The format's version: 1.
    pub version: u32,
    /// The command that reproduces the run.
    pub command: String,
    /// The machine.
    pub host: Host,
    /// `--quick`.
    pub quick: bool,
    /// `--cold`.
    pub cold: bool,
    /// `--verify` (figures of a verifying run are not comparable).
    pub verify: bool,
    /// Runs of each engine per job; the result kept is the best.
    pub repeat: u32,
    /// The clock that timed operations: `tsc` or `instant`.
    pub clock: &'static str,
    /// What a clock read and a histogram update cost, per operation.
    pub timing_overhead_ns: f64,
    /// How a result is chosen among repeats.
    pub selection: &'static str,
    /// The scenarios run.
    pub scenarios: Vec<ScenarioReport>,
}

/// The machine the bench ran on.
#[derive(Debug, Serialize)]
pub struct Host {
    /// CPUs available to the process.
    pub cpus: usize,
    /// `uname -r`.
    pub kernel: String,
    /// The CPU's model name (`/proc/cpuinfo`), or "unknown".
    pub cpu: String,
    /// The copy routine foliocache chose from this CPU's features, and why
    /// (`foliocache::internals::copy::chosen`; `FOLIOCACHE_COPY` forces
    /// one).
    pub copy: String,
}

impl Host {
    /// This machine.
    pub fn this() -> Host {
        Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            cpu: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| {
                    let line = s.lines().find(|l| l.starts_with("model name"))?;
                    Some(line.split_once(':')?.1.trim().to_string())
                })
                .unwrap_or_else(|| "unknown".into()),
            copy: foliocache::internals::copy::chosen(),
        }
    }
}

/// One scenario's results.
#[derive(Debug, Serialize)]
pub struct ScenarioReport {
    /// Its name.
    pub name: String,
    /// What it measures.
    pub description: String,
    /// One result per job and engine (the best of the repeats).
    pub results: Vec<RunRecord>,
    /// Ratios between engines the scenario is about, and its targets
    /// (absent for a scenario without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The memory limit the scenario's kernel engines ran under: the
    /// mechanism (`cgroup v1`, `cgroup v2`, or `none` with the reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<MemoryLimit>,
    /// Facts about the scenario as a whole (an engine left out, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Print each result's timeline, CPU per GiB, cache figures and hot
    /// reader below the table.
    #[serde(skip)]
    pub detailed: bool,
}

/// A scenario's ratios between engines, and its targets.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// One per pair of engines that both ran.
    pub ratios: Vec<Ratio>,
    /// The targets, each met or not (absent for a scenario without
    /// them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetCheck>,
}

/// One of the targets, checked.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    /// What is checked: `foliocache[dontcache] flat`.
    pub name: String,
    /// Whether it is met (null: it could not be checked; `detail` says
    /// why).
    pub met: Option<bool>,
    /// The figure checked.
    pub value: Option<f64>,
    /// `>=` or `<=`.
    pub comparison: &'static str,
    /// The bound the figure must respect.
    pub threshold: f64,
    /// The figure in each run or round.
    pub per_run: Vec<f64>,
    /// How the figure is made, in words.
    pub detail: String,
    /// Why the figure may not mean what it says (the library ignored a
    /// flag, say).
    pub caveat: Option<String>,
}

/// A job of a scenario, by the name the scenario gives it (the targets'
/// tables name jobs so: `crate::targets`).
pub type JobName = &'static str;

/// `numerator / denominator` bandwidth.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// `foliocache / kernel`.
    pub name: String,
    /// The engine label above the line.
    pub numerator: String,
    /// The engine label below it.
    pub denominator: String,
    /// The job of both engines' runs (`write`, `randwrite`), for a
    /// scenario whose jobs run the same engines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// That job's name in its scenario (not in the JSON: `job` says it).
    #[serde(skip)]
    pub job_name: Option<JobName>,
    /// Of the two engines' best runs (the figures in the table).
    pub best: f64,
    /// Of the two engines' runs in each round, in round order (runs seconds
    /// apart, so less exposed to the disk's swings).
    pub per_round: Vec<f64>,
    /// The median of `per_round`.
    pub median_per_round: f64,
    /// The target for it, if any.
    pub target: Option<f64>,
    /// For a memory job (populate) of two foliocache engines: the ratio
    /// of the writes alone (each run's bytes over its time without its
    /// setup, the cache's build) in each round; beside the whole runs'
    /// ratio, which the target judges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes_alone_per_round: Option<Vec<f64>>,
    /// The median of `writes_alone_per_round`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes_alone_median: Option<f64>,
}

/// Writes `report` as pretty JSON to `path`.
///
/// # Errors
/// Creating or writing the file.
pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
