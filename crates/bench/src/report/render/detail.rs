//! The detail below a detailed scenario's table (`uncached`'s): each
//! run's CPU, flatness, cache figures and memory; the hot reader's
//! figures beside each stream; every run's throughput over time.

use std::fmt::Write as _;

use super::{fmt_interval, fmt_limit_short, fmt_series};
use crate::report::{flatness, RunRecord, ScenarioReport};
use crate::units::{fmt_bw, fmt_count, fmt_size_approx};

/// Which stream a run is: `alone`, or `beside the hot reader`.
fn stream_of(r: &RunRecord) -> &'static str {
    if r.hot.is_some() {
        "beside the hot reader"
    } else {
        "alone"
    }
}

/// A scenario's detail below its table: each result's CPU per GiB,
/// flatness, memory limit and cache figures; the hot reader's; the
/// timelines (`ew`: the engine column's width).
pub fn tables(s: &mut String, sc: &ScenarioReport, ew: usize) {
    cache(s, sc, ew);
    if sc.results.iter().any(|r| r.hot.is_some()) {
        hot(s, sc, ew);
    }
    timelines(s, sc, ew);
}

/// Each result's CPU, flatness, cache figures and memory.
fn cache(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   CPU and cache of those runs (flat: the worst interval after the first over their \
         median; memory: foliocache's capacity, or the kernel engines' cgroup limit and peak):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>11}  {}",
        "stream",
        "engine",
        "cpu s",
        "cpu s/GiB",
        "flat",
        "evictions",
        "refaults",
        "activated",
        "dropbehind",
        "shadows",
        "shadow mem",
        "cached end",
        "memory"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in &sc.results {
        let flat = flatness(r).map_or("-".to_string(), |f| format!("{:.2}", f.worst));
        let (ev, rf, act, db, sh, shb, cached, mem) = match &r.cache.foliocache {
            Some(f) => (
                f.evictions.to_string(),
                f.refaults.to_string(),
                f.activations.to_string(),
                f.dropbehind_drops.to_string(),
                f.shadows.to_string(),
                fmt_size_approx(f.shadow_bytes),
                fmt_size_approx(f.bytes_cached),
                format!(
                    "capacity {}",
                    fmt_size_approx(r.memory.capacity.unwrap_or(0))
                ),
            ),
            None => {
                let d = || "-".to_string();
                (
                    d(),
                    d(),
                    d(),
                    d(),
                    d(),
                    d(),
                    d(),
                    r.memory
                        .memory_limit
                        .as_ref()
                        .map_or("-".into(), fmt_limit_short),
                )
            }
        };
        let p = &r.perf;
        let line = format!(
            "{:<24} {:<ew$} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>11}  {}",
            stream_of(r),
            r.engine,
            format!("{:.2}", p.cpu_s.user + p.cpu_s.sys),
            format!("{:.3}", p.cpu_s_per_gib),
            flat,
            ev,
            rf,
            act,
            db,
            sh,
            shb,
            cached,
            mem
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// The hot reader's figures beside each stream that had one.
fn hot(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   the hot reader beside the stream (hits: of its reads during the stream; misses/GiB: \
         per GiB streamed meanwhile):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>13} {:>10} {:>9} {:>10} {:>9} {:>9} {:>10}  {}",
        "",
        "stream engine",
        "stream bw",
        "hot reads",
        "misses",
        "misses/GiB",
        "hits",
        "reads/s",
        "paced to",
        "misses told by"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in sc.results.iter().filter(|r| r.hot.is_some()) {
        let Some(h) = &r.hot else { continue };
        let line = format!(
            "{:<24} {:<ew$} {:>13} {:>10} {:>9} {:>10} {:>9} {:>9} {:>10}  {}",
            "",
            r.engine,
            fmt_bw(r.perf.bw_bytes),
            h.reads,
            h.misses,
            h.misses_per_gib.map_or("-".into(), |x| format!("{x:.0}")),
            h.hit_ratio
                .map_or("-".into(), |x| format!("{:.2}%", x * 100.0)),
            fmt_count(h.reads_per_s),
            if h.rate_limit_per_s == 0 {
                "-".to_string()
            } else {
                format!("{}/s", h.rate_limit_per_s)
            },
            h.miss_detection
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// Every result's throughput per second, and per finer interval where it
/// has a finer timeline.
fn timelines(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   throughput over time (GiB/s; a partial last second is its own rate):"
    );
    for r in &sc.results {
        let _ = writeln!(
            s,
            "   {:<ew$} {:<22} per second: {}",
            r.engine,
            stream_of(r),
            fmt_series(&r.timing.timeline_bw_bytes)
        );
        if let Some(t) = &r.timing.fine_timeline {
            let _ = writeln!(
                s,
                "   {:<ew$} {:<22} per {:<6} {}",
                "",
                "",
                format!("{}:", fmt_interval(t.interval_s)),
                if t.bw_bytes.is_empty() {
                    "(the run lasted less than one)".to_string()
                } else {
                    fmt_series(&t.bw_bytes)
                }
            );
        }
    }
}
