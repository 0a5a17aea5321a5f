//! The checks of a scenario's targets of whole runs: flat throughput,
//! bandwidth and the writes alone over another engine's, CPU per GiB, the
//! hot reader's hits (those of figures per read are in
//! [`super::per_read`]).

use super::{check, fmt_figures, fmt_runs, paired_median, JobName};
use crate::report::{self, Flatness, Ratio, RunRecord, TargetCheck};
use crate::units::fmt_ratio;

/// [`Figure::Flat`](super::Figure::Flat): every run of `engine` flat to
/// at least `min` of its median interval.
pub fn flat(runs: &[RunRecord], engine: &str, min: f64) -> TargetCheck {
    let mut c = check(format!("{engine} flat throughput"), ">=", min);
    if runs.is_empty() {
        c.detail = format!("not checked: {engine} did not run");
        return c;
    }
    let flats: Vec<Option<Flatness>> = runs.iter().map(report::flatness).collect();
    if flats.iter().any(Option::is_none) {
        c.detail = format!(
            "not checked: a run of {:.2} s has fewer than 3 timeline intervals after its first",
            runs.iter()
                .map(|r| r.perf.seconds)
                .fold(f64::INFINITY, f64::min)
        );
        return c;
    }
    let flats: Vec<Flatness> = flats.into_iter().flatten().collect();
    c.per_run = flats.iter().map(|f| f.worst).collect();
    let worst = c.per_run.iter().copied().fold(f64::INFINITY, f64::min);
    c.value = Some(worst);
    c.met = Some(worst >= min);
    // Each run is judged at its own interval (the same for runs of about
    // the same length); the text names them.
    let grains: Vec<f64> = flats.iter().map(|f| f.interval_s).collect();
    let unit = |g: f64| {
        if g >= 1.0 {
            "second".to_string()
        } else {
            format!("{:.0} ms", g * 1e3)
        }
    };
    let mut names: Vec<String> = grains.iter().map(|&g| unit(g)).collect();
    names.dedup();
    c.detail = format!(
        "every {} after the first at least {min:.1}x the median: worst {worst:.2}x (runs: {})",
        names.join(" or "),
        fmt_runs(&c.per_run, |x| format!("{x:.2}x")),
    );
    if grains.iter().any(|&g| g < 1.0) {
        c.detail.push_str(
            "; runs too short for whole seconds are judged at the coarsest interval that gives \
             5 after the first",
        );
    }
    c
}

/// [`Figure::Bandwidth`](super::Figure::Bandwidth): the scenario's ratio
/// `num / den` of `job` (`of`: its job in words), median of the rounds at
/// least `min`.
pub fn bandwidth(
    ratios: &[Ratio],
    num: &str,
    den: &str,
    job: Option<JobName>,
    of: Option<String>,
    min: f64,
) -> TargetCheck {
    let of = of.map_or(String::new(), |w| format!(" ({w})"));
    let mut c = check(format!("{num} bandwidth / {den}{of}"), ">=", min);
    let Some(r) = ratio_of(ratios, num, den, job) else {
        c.detail = format!("not checked: {num} or {den} did not run");
        return c;
    };
    c.per_run = r.per_round.clone();
    c.value = Some(r.median_per_round);
    c.met = Some(r.median_per_round >= min);
    c.detail = format!(
        "at least {}, median of the rounds {:.2}x (rounds: {}; best runs {:.2}x)",
        fmt_ratio(min),
        r.median_per_round,
        fmt_runs(&r.per_round, |x| format!("{x:.2}x")),
        r.best
    );
    c
}

/// The scenario's ratio `num / den` of job `job` (`None`: of the first
/// job that ran each engine).
fn ratio_of<'r>(
    ratios: &'r [Ratio],
    num: &str,
    den: &str,
    job: Option<JobName>,
) -> Option<&'r Ratio> {
    ratios
        .iter()
        .find(|r| r.numerator == num && r.denominator == den && r.job_name == job)
}

/// [`Figure::WritesAlone`](super::Figure::WritesAlone): the least round's ratio of the writes
/// alone, from the scenario's ratio of the same engines.
pub fn writes_alone(ratios: &[Ratio], num: &str, den: &str, min: f64) -> TargetCheck {
    let mut c = check(
        format!("{num} / {den}, the writes alone, every round"),
        ">=",
        min,
    );
    let Some(rounds) =
        ratio_of(ratios, num, den, None).and_then(|r| r.writes_alone_per_round.as_ref())
    else {
        c.detail = format!(
            "not checked: {num} or {den} did not run, or a run's setup was not timed apart"
        );
        return c;
    };
    let least = rounds.iter().copied().fold(f64::INFINITY, f64::min);
    c.per_run = rounds.clone();
    c.value = Some(least);
    c.met = Some(least >= min);
    c.detail = format!(
        "at least {} in every round, least {least:.2}x (rounds: {})",
        fmt_ratio(min),
        fmt_runs(rounds, |x| format!("{x:.2}x"))
    );
    c
}

/// [`Figure::CpuPerGib`](super::Figure::CpuPerGib): `engine`'s CPU per
/// GiB over `other`'s, round by round, median at most `max`.
pub fn cpu_per_gib(
    runs: &[RunRecord],
    than: &[RunRecord],
    engine: &str,
    other: &str,
    max: f64,
) -> TargetCheck {
    let mut c = check(format!("{engine} CPU s/GiB / {other}'s"), "<=", max);
    let Some(med) = paired_median(&mut c, runs, than, engine, other, |r, t| {
        (t.perf.cpu_s_per_gib > 0.0).then(|| r.perf.cpu_s_per_gib / t.perf.cpu_s_per_gib)
    }) else {
        return c;
    };
    let per = |rs| fmt_figures(rs, |r| r.perf.cpu_s_per_gib, 3);
    c.detail = format!(
        "at most {max:.1}x, median of the rounds {med:.2}x ({engine} {} s/GiB, {other} {} s/GiB)",
        per(runs),
        per(than)
    );
    c
}

/// The hot hit ratio beside `engine` (the target), with the ratios beside
/// the job's `others` (its other engines, the cached streams among them:
/// what an uncached stream spares) in the detail, for information.
pub fn hits(runs: &[RunRecord], others: &[&[RunRecord]], engine: &str, min: f64) -> TargetCheck {
    let mut c = check(format!("hot hit ratio beside {engine}"), ">=", min);
    let ratios: Vec<Option<f64>> = runs
        .iter()
        .map(|r| r.hot.as_ref().and_then(|h| h.hit_ratio))
        .collect();
    if ratios.is_empty() || ratios.iter().any(Option::is_none) {
        c.detail = format!("not checked: {engine} did not run beside the hot reader, or its misses could not be told");
        return c;
    }
    c.per_run = ratios.into_iter().flatten().collect();
    let worst = c.per_run.iter().copied().fold(f64::INFINITY, f64::min);
    c.value = Some(worst);
    c.met = Some(worst >= min);
    let how = runs
        .first()
        .and_then(|r| r.hot.as_ref())
        .map_or(String::new(), |h| h.miss_detection.clone());
    let rate = runs
        .first()
        .and_then(|r| r.hot.as_ref())
        .map_or(0, |h| h.rate_limit_per_s);
    let rate = if rate == 0 {
        "unpaced".to_string()
    } else {
        format!("{rate} reads/s")
    };
    c.detail = format!(
        "at least {:.0}% in every run: worst {:.2}% (runs: {}; misses told by {how}; hot \
         reader {rate})",
        min * 100.0,
        worst * 100.0,
        fmt_runs(&c.per_run, |x| format!("{:.2}%", x * 100.0))
    );
    let beside: Vec<String> = others
        .iter()
        .filter_map(|rs| {
            let name = &rs.first()?.engine;
            let v: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.hot.as_ref()?.hit_ratio)
                .collect();
            (!v.is_empty())
                .then(|| format!("{name} {}", fmt_runs(&v, |x| format!("{:.2}%", x * 100.0))))
        })
        .collect();
    if !beside.is_empty() {
        c.detail += &format!(
            "; for information, beside the other streams: {}",
            beside.join(", ")
        );
    }
    c
}
