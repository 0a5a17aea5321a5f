//! A scenario's ratios and targets: what it asks of its engines (its
//! table, [`table`]: [`Target`] rows resolved into [`RatioSpec`]s and
//! [`TargetSpec`]s) and how the runs are held against it ([`evaluate`]:
//! the ratios of the rounds, then each target checked, by [`checks`] and
//! [`per_read`]). The targets and why each is set are in `docs/bench.md`.

use crate::report::{self, Ratio, RunRecord, Summary, TargetCheck};

mod checks;
mod per_read;
mod table;
#[cfg(test)]
mod tests;

pub use table::{
    bandwidth, cpu_per_gib, cpu_per_read, flat, hit_ratio, judge, lru_gap, memory,
    read_amplification, writes_alone, Figure, Given, JobName, Judged, RatioSpec, Target,
    TargetSpec,
};

/// Every round's runs of one job of a scenario.
#[derive(Debug, Clone)]
pub struct JobRuns {
    /// The job's name in its scenario.
    pub job: JobName,
    /// Every round's run of each engine, `engines[engine][round]`, in the
    /// job's engine order.
    pub engines: Vec<Vec<RunRecord>>,
}

/// A scenario's summary: its ratios ([`RatioSpec`]) and its targets
/// ([`TargetSpec`]) checked against its runs, every round's of each job;
/// `None` for a scenario without ratios.
pub fn evaluate(ratios: &[RatioSpec], targets: &[TargetSpec], runs: &[JobRuns]) -> Option<Summary> {
    summarise(ratios, runs).map(|mut s| {
        s.targets = check_targets(targets, &s.ratios, runs);
        s
    })
}

/// The runs of engine `label` in job `job` (`None`: the first job that
/// ran it).
fn find<'a>(runs: &'a [JobRuns], job: Option<JobName>, label: &str) -> Option<&'a [RunRecord]> {
    runs.iter()
        .filter(|r| job.is_none_or(|j| r.job == j))
        .flat_map(|r| &r.engines)
        .find(|rs| rs.first().is_some_and(|r| r.engine == label))
        .map(Vec::as_slice)
}

/// The scenario's ratios: of the best runs, and of the runs of each round
/// (made seconds apart, so the disk's minute-to-minute swings cancel);
/// `None` for a scenario without ratios. A ratio whose engines did not
/// both run is left out.
fn summarise(specs: &[RatioSpec], runs: &[JobRuns]) -> Option<Summary> {
    if specs.is_empty() {
        return None;
    }
    let ratios = specs
        .iter()
        .filter_map(|s| {
            let num = find(runs, s.job, &s.numerator)?;
            let den = find(runs, s.job, &s.denominator)?;
            let best = |rs: &[RunRecord]| rs.iter().map(|r| r.perf.bw_bytes).fold(0.0, f64::max);
            let per_round: Vec<f64> = num
                .iter()
                .zip(den)
                .filter(|(_, d)| d.perf.bw_bytes > 0.0)
                .map(|(n, d)| n.perf.bw_bytes / d.perf.bw_bytes)
                .collect();
            let median = report::median(&per_round);
            // A memory job's writes without their setup (the cache's build),
            // for two foliocache engines (whose setups are alike).
            let writes_bw = |r: &RunRecord| {
                r.cache.foliocache.as_ref()?;
                let t = r.perf.seconds - r.timing.setup_s?;
                (t > 0.0).then(|| r.perf.bytes as f64 / t)
            };
            let writes_alone: Option<Vec<f64>> = num
                .iter()
                .zip(den)
                .map(|(n, d)| Some(writes_bw(n)? / writes_bw(d)?))
                .collect::<Option<Vec<f64>>>()
                .filter(|w| !w.is_empty());
            let writes_alone_median = writes_alone.as_deref().map(report::median);
            let b = best(den);
            let of_job = s
                .job
                .and_then(|_| num.first())
                .map_or(String::new(), |r| format!(" ({})", job_of_ratio(r, runs)));
            Some(Ratio {
                name: format!("{} / {}{of_job}", s.numerator, s.denominator),
                job: s
                    .job
                    .and_then(|_| num.first())
                    .map(|r| r.job.rw.to_string()),
                job_name: s.job,
                numerator: s.numerator.clone(),
                denominator: s.denominator.clone(),
                best: if b > 0.0 { best(num) / b } else { f64::NAN },
                per_round,
                median_per_round: median,
                target: s.target,
                writes_alone_per_round: writes_alone,
                writes_alone_median,
            })
        })
        .collect();
    Some(Summary {
        ratios,
        targets: Vec::new(),
    })
}

/// The job a ratio or target of `r`'s is of ([`report::job_of_ratio`]),
/// with `, N threads` where the scenario runs the same reads or writes at
/// several thread counts (`scaling`), so that it says which (a job with a
/// distribution says its count already: `larger`'s).
fn job_of_ratio(r: &RunRecord, runs: &[JobRuns]) -> String {
    let other_count = r.job.dist.is_none()
        && runs
            .iter()
            .flat_map(|j| j.engines.iter().flatten())
            .any(|o| {
                o.job.rw == r.job.rw && o.job.bs == r.job.bs && o.job.numjobs != r.job.numjobs
            });
    let job = report::job_of_ratio(r);
    if other_count {
        let n = r.job.numjobs;
        format!("{job}, {n} thread{}", if n == 1 { "" } else { "s" })
    } else {
        job
    }
}

/// The runs of engine `label` in job `job` (none where it did not run).
fn runs_of<'a>(runs: &'a [JobRuns], job: JobName, label: &str) -> &'a [RunRecord] {
    find(runs, Some(job), label).unwrap_or(&[])
}

/// The runs of engine `label` in every job.
fn all_runs_of<'a>(runs: &'a [JobRuns], label: &str) -> Vec<&'a RunRecord> {
    runs.iter()
        .flat_map(|r| &r.engines)
        .flatten()
        .filter(|r| r.engine == label)
        .collect()
}

/// Checks a scenario's targets against its runs (every round's, not only
/// the best) and its ratios.
fn check_targets(specs: &[TargetSpec], ratios: &[Ratio], runs: &[JobRuns]) -> Vec<TargetCheck> {
    specs
        .iter()
        .map(|t| {
            let mut c = check_target(t, ratios, runs);
            c.caveat = ignored_dontcache(runs, t);
            c
        })
        .collect()
}

/// Checks one target.
fn check_target(t: &TargetSpec, ratios: &[Ratio], runs: &[JobRuns]) -> TargetCheck {
    let b = t.bound;
    match &t.figure {
        Figure::Flat { job, engine } => checks::flat(runs_of(runs, job, engine), engine, b),
        Figure::Bandwidth {
            numerator,
            denominator,
            job,
        } => {
            let of = job
                .and_then(|j| runs.iter().find(|r| r.job == j)?.engines.first()?.first())
                .map(|r| job_of_ratio(r, runs));
            checks::bandwidth(ratios, numerator, denominator, *job, of, b)
        }
        Figure::WritesAlone {
            numerator,
            denominator,
        } => checks::writes_alone(ratios, numerator, denominator, b),
        Figure::CpuPerGib { job, engine, than } => checks::cpu_per_gib(
            runs_of(runs, job, engine),
            runs_of(runs, job, than),
            engine,
            than,
            b,
        ),
        Figure::CpuPerRead { job, engine, than } => per_read::cpu(
            runs_of(runs, job, engine),
            runs_of(runs, job, than),
            engine,
            than,
            b,
        ),
        Figure::LruGap { job, engine } => per_read::lru_gap(runs_of(runs, job, engine), engine, b),
        Figure::ReadAmplification { engine } => {
            per_read::amplification(&all_runs_of(runs, engine), engine, b)
        }
        Figure::Memory { engine } => per_read::memory(&all_runs_of(runs, engine), engine, b as u64),
        Figure::HitRatio { job, engine } => {
            let others: Vec<&[RunRecord]> = runs
                .iter()
                .filter(|r| r.job == *job)
                .flat_map(|r| &r.engines)
                .map(Vec::as_slice)
                .filter(|rs| rs.first().is_some_and(|r| &r.engine != engine))
                .collect();
            checks::hits(runs_of(runs, job, engine), &others, engine, b)
        }
    }
}

/// A caveat for a target about a foliocache engine with `dontcache`
/// whose runs dropped nothing behind: the library ignored the flag.
fn ignored_dontcache(runs: &[JobRuns], t: &TargetSpec) -> Option<String> {
    let engine = t.figure.engine();
    let folio: Vec<&RunRecord> = all_runs_of(runs, engine)
        .into_iter()
        .filter(|r| {
            r.cache
                .foliocache
                .as_ref()
                .is_some_and(|f| f.read_flags == "DONTCACHE")
        })
        .collect();
    (!folio.is_empty() && folio.iter().all(|r| report::dontcache_ignored(r))).then(|| {
        format!(
            "{engine} dropped no folio behind its reads in any run, yet evicted or kept what it \
             read: the library does not act on ReadFlags::DONTCACHE yet, so these are figures \
             of cached reads"
        )
    })
}

/// A check named `name` of a figure held `comparison` (`>=` or `<=`)
/// `threshold`, not yet made.
pub(crate) fn check(name: String, comparison: &'static str, threshold: f64) -> TargetCheck {
    TargetCheck {
        name,
        met: None,
        value: None,
        comparison,
        threshold,
        per_run: Vec::new(),
        detail: String::new(),
        caveat: None,
    }
}

/// `v`, each as `f` writes it, space separated.
pub(crate) fn fmt_runs(v: &[f64], f: impl Fn(f64) -> String) -> String {
    v.iter().map(|&x| f(x)).collect::<Vec<_>>().join(" ")
}

/// Holds `engine`'s runs against `other`'s round by round: `f` of each
/// pair (a round where it gives nothing left out) into `c.per_run`, their
/// median into `c.value`, met if at most `c.threshold`. `None`, with the
/// reason in `c.detail`, where there is nothing to hold.
pub(crate) fn paired_median(
    c: &mut TargetCheck,
    runs: &[RunRecord],
    than: &[RunRecord],
    engine: &str,
    other: &str,
    f: impl Fn(&RunRecord, &RunRecord) -> Option<f64>,
) -> Option<f64> {
    if runs.is_empty() || than.is_empty() {
        c.detail = format!("not checked: {engine} or {other} did not run");
        return None;
    }
    c.per_run = runs.iter().zip(than).filter_map(|(r, t)| f(r, t)).collect();
    if c.per_run.is_empty() {
        c.detail = format!("not checked: {other} used no measurable CPU");
        return None;
    }
    let med = report::median(&c.per_run);
    c.value = Some(med);
    c.met = Some(med <= c.threshold);
    Some(med)
}

/// `figure` of each run, to `digits` decimals, space separated.
pub(crate) fn fmt_figures(
    rs: &[RunRecord],
    figure: fn(&RunRecord) -> f64,
    digits: usize,
) -> String {
    fmt_runs(&rs.iter().map(figure).collect::<Vec<_>>(), |x| {
        format!("{x:.digits$}")
    })
}
