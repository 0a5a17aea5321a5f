//! `readahead`: cold sequential reads, 2 threads per CPU each reading its
//! own file once at 128 KiB, with `direct` at 1 MiB as the device's
//! ceiling. Cold whatever `--cold` says, one pass (a second would be warm,
//! so `--runtime` does not apply). See `docs/bench/readahead.md`.

use super::{FullQuick, Scenario, ScenarioJob};
use crate::args::BenchArgs;
use crate::spec::{default_capacity, EngineKind, EngineSpec, JobSpec, Rw};
use crate::targets::{self, bandwidth, Given, RatioSpec, Target};
use crate::units::{fmt_size, fmt_size_approx};

/// The engines unless `--engine` gives others (every one runs at
/// [`RA_BS`] except `direct`, at [`RA_DIRECT_BS`]).
pub const ENGINES: &[&str] = &[
    "foliocache",
    "foliocache[insert=single]",
    "kernel",
    "direct",
];
/// The jobs: the reads under test, at [`RA_BS`], and `direct`'s, at
/// [`RA_DIRECT_BS`].
pub const READS: &str = "reads";
/// `direct`'s job.
pub const DIRECT: &str = "direct";
/// The file size per thread (full, and with `--quick`).
const RA_SIZE: FullQuick<u64> = FullQuick(1 << 30, 256 << 20);
/// The block sizes: the reads under test, and `direct`'s.
const RA_BS: u64 = 128 << 10;
const RA_DIRECT_BS: u64 = 1 << 20;

/// The scenario.
///
/// # Errors
/// A built-in engine that does not parse.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let numjobs = 2 * cpus;
    let size = args.size.unwrap_or(RA_SIZE.get(quick));
    let engines = super::engines_or(args, ENGINES)?;
    let (direct, reads): (Vec<EngineSpec>, Vec<EngineSpec>) = engines
        .into_iter()
        .partition(|e| e.kind == EngineKind::Direct);
    let job = |bs, engines: Vec<EngineSpec>| JobSpec {
        numjobs,
        shared: false,
        cold: true,
        ..JobSpec::new(Rw::Read, bs, size, engines)
    };
    let ratios = ratios(&reads, &direct);
    let data = size * numjobs as u64;
    let capacity = args.capacity.unwrap_or_else(|| default_capacity(data));
    let mut jobs = Vec::new();
    if !reads.is_empty() {
        jobs.push(ScenarioJob::new(READS, job(RA_BS, reads)));
    }
    if !direct.is_empty() {
        jobs.push(ScenarioJob::new(DIRECT, job(RA_DIRECT_BS, direct)));
    }
    Ok(Scenario {
        name: "readahead".into(),
        description: format!(
            "Cold sequential reads: {numjobs} threads (2 per CPU), each reading its \
             own {} file once, start to end, with sync reads of {} ({} for direct, the device's \
             ceiling). Cold whatever --cold says: before every run the files are dropped from the \
             kernel page cache (POSIX_FADV_DONTNEED) and foliocache gets a fresh cache of {}{}. \
             One pass per thread, not time-based (a second pass would be warm; --runtime does not \
             apply). The host caches this virtio disk, so cold figures swing from minute to \
             minute: engines interleave in alternating order, and the summary's per-round ratios \
             pair runs made seconds apart.",
            fmt_size(size),
            fmt_size(RA_BS),
            fmt_size(RA_DIRECT_BS),
            fmt_size_approx(capacity),
            if capacity >= data {
                format!(
                    " (for {} of data: nothing is evicted)",
                    fmt_size_approx(data)
                )
            } else {
                format!(
                    " (less than the {} of data: reclaim runs during the run)",
                    fmt_size_approx(data)
                )
            }
        ),
        jobs,
        ratios,
        targets: Vec::new(),
        detailed: false,
        programs: None,
    })
}

/// The targets the ratios show, not checked: the default foliocache
/// engine over the kernel, direct and one folio at a time, by label
/// (another foliocache engine's ratios show none).
#[rustfmt::skip]
pub const TARGETS: &[Target<&str>] = &[
    bandwidth("foliocache", "kernel").shown(1.0),
    bandwidth("foliocache", "direct").shown(0.9),
    bandwidth("foliocache", "foliocache[insert=single]").shown(1.0),
];

/// The first foliocache engine over the kernel, direct, and every other
/// foliocache engine, each with the target [`TARGETS`] shows for it.
fn ratios(reads: &[EngineSpec], direct: &[EngineSpec]) -> Vec<RatioSpec> {
    let Some(num) = reads.iter().find(|e| e.kind == EngineKind::Foliocache) else {
        return Vec::new();
    };
    let shown = targets::judge(TARGETS, |e| Some(e.to_string()), Given::default()).ratios;
    let others = reads
        .iter()
        .filter(|e| e.kind == EngineKind::Kernel)
        .chain(direct)
        .chain(
            reads
                .iter()
                .filter(|e| e.kind == EngineKind::Foliocache && e.label != num.label),
        );
    others
        .map(|den| RatioSpec {
            numerator: num.label.clone(),
            denominator: den.label.clone(),
            target: shown
                .iter()
                .find(|r| r.numerator == num.label && r.denominator == den.label)
                .and_then(|r| r.target),
            job: None,
        })
        .collect()
}
