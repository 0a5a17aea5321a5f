//! The targets of figures per read (the `larger` scenario's): CPU per
//! read against another engine's, the hit ratio against an exact LRU's,
//! read amplification and the cache's memory.

use super::{check, fmt_figures, fmt_runs, paired_median};
use crate::report::{self, RunRecord, TargetCheck};
use crate::units::fmt_size_approx;

/// `engine`'s CPU µs per read less `other`'s, round by round: the median
/// at most `plus_us`.
pub fn cpu(
    runs: &[RunRecord],
    than: &[RunRecord],
    engine: &str,
    other: &str,
    plus_us: f64,
) -> TargetCheck {
    let of = runs.first().map_or(String::new(), report::dist_of);
    let mut c = check(
        format!("{engine} CPU per read - {other}'s (us{of})"),
        "<=",
        plus_us,
    );
    let Some(med) = paired_median(&mut c, runs, than, engine, other, |r, t| {
        Some(r.perf.cpu_us_per_op - t.perf.cpu_us_per_op)
    }) else {
        return c;
    };
    let per = |rs| fmt_figures(rs, |r| r.perf.cpu_us_per_op, 2);
    c.detail = format!(
        "at most {plus_us:.1} us more, median of the rounds {med:+.2} us ({engine} {} us, \
         {other} {} us per read)",
        per(runs),
        per(than)
    );
    c
}

/// `engine`'s hit ratio at most `max_points` below the exact LRU's, in
/// every run.
pub fn lru_gap(runs: &[RunRecord], engine: &str, max_points: f64) -> TargetCheck {
    let of = runs.first().map_or(String::new(), report::dist_of);
    let mut c = check(
        format!("{engine} hit ratio below an exact LRU's (points{of})"),
        "<=",
        max_points,
    );
    let pairs: Option<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| Some((r.cache.hit_ratio?, r.cache.lru.as_ref()?.hit_ratio)))
        .collect();
    let Some(pairs) = pairs.filter(|p| !p.is_empty()) else {
        c.detail = format!("not checked: {engine} did not run a zipfian job with its hit ratio");
        return c;
    };
    c.per_run = pairs.iter().map(|(h, l)| (l - h) * 100.0).collect();
    let worst = c.per_run.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    c.value = Some(worst);
    c.met = Some(worst <= max_points);
    c.detail = format!(
        "at most {max_points:.0} points below in every run (above is better): worst {worst:+.2} \
         (runs, measured / LRU: {})",
        pairs
            .iter()
            .map(|(h, l)| format!("{:.1}% / {:.1}%", h * 100.0, l * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    c
}

/// `engine`'s read amplification at most `max` in every run.
pub fn amplification(runs: &[&RunRecord], engine: &str, max: f64) -> TargetCheck {
    let mut c = check(format!("{engine} read amplification"), "<=", max);
    let v: Option<Vec<f64>> = runs.iter().map(|r| r.cache.read_amplification).collect();
    let Some(v) = v.filter(|v| !v.is_empty()) else {
        c.detail =
            format!("not checked: {engine} did not run, or a run's device reads are unknown");
        return c;
    };
    let worst = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    c.per_run = v;
    c.value = Some(worst);
    c.met = Some(worst <= max);
    // The device's counters are the whole device's: beside them, what the
    // cache itself read, which no other process's IO reaches.
    let own: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let f = r.cache.foliocache.as_ref()?;
            (r.perf.bytes > 0).then(|| format!("{:.3}", f.io_bytes as f64 / r.perf.bytes as f64))
        })
        .collect();
    c.detail = format!(
        "device bytes per byte delivered, at most {max:.2} in every run of every job: worst \
         {worst:.3} (runs: {}){}",
        fmt_runs(&c.per_run, |x| format!("{x:.3}")),
        if own.is_empty() {
            String::new()
        } else {
            format!(
                "; the cache's own reads per byte delivered: {}",
                own.join(" ")
            )
        }
    );
    c
}

/// foliocache `engine`'s memory at most `max_bytes` after every run.
pub fn memory(runs: &[&RunRecord], engine: &str, max_bytes: u64) -> TargetCheck {
    let mut c = check(format!("{engine} memory within M"), "<=", max_bytes as f64);
    let v: Option<Vec<f64>> = runs
        .iter()
        .map(|r| r.cache.foliocache.as_ref().map(|f| f.memory_bytes as f64))
        .collect();
    let Some(v) = v.filter(|v| !v.is_empty()) else {
        c.detail = format!("not checked: {engine} did not run");
        return c;
    };
    let worst = v.iter().copied().fold(0.0, f64::max);
    c.per_run = v;
    c.value = Some(worst);
    c.met = Some(worst <= max_bytes as f64);
    c.detail = format!(
        "the cache's arena and bookkeeping (Cache::memory) after every run, at most M = {}: \
         largest {}",
        fmt_size_approx(max_bytes),
        fmt_size_approx(worst as u64)
    );
    c
}
