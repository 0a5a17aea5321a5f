//! A scenario's side-by-side table: a row per job and engine (each
//! engine's best run), the tables below it that the scenario's runs call
//! for, its notes, its ratios and its targets.

use std::fmt::Write as _;

use super::{detail, subtables};
use crate::report::{RunRecord, ScenarioReport, Summary};
use crate::units::{fmt_bw, fmt_count, fmt_ns, fmt_ratio, fmt_size};

/// The side-by-side table of a scenario; for a scenario with cold runs, a
/// second table of the IO each engine's best run did; then the scenario's
/// ratios.
pub fn table(sc: &ScenarioReport, repeat: u32) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "== {}: {}", sc.name, sc.description);
    if sc.results.is_empty() {
        // A scenario with a table of its own (`crash`), or that ran
        // nothing: its notes say what it found.
        for n in &sc.notes {
            let _ = writeln!(s, "   {n}");
        }
        return s;
    }
    if repeat > 1 {
        let _ = writeln!(
            s,
            "   (each engine's best of {repeat} runs, engine order alternating between runs; \
             spread: how much slower its worst run was)"
        );
    }
    let ew = sc
        .results
        .iter()
        .map(|r| r.engine.len())
        .max()
        .unwrap_or(0)
        .max(14);
    rows(&mut s, sc, repeat, ew);
    if sc.results.iter().any(|r| r.timing.setup_s.is_some()) {
        subtables::setup(&mut s, sc, ew);
    } else if sc.results.iter().any(|r| r.job.cold) {
        subtables::io(&mut s, sc, ew);
    }
    if sc.results.iter().any(|r| r.job.dist.is_some()) {
        subtables::per_read(&mut s, sc, ew);
    }
    if sc.detailed {
        detail::tables(&mut s, sc, ew);
    }
    for n in &sc.notes {
        let _ = writeln!(s, "   note: {n}");
    }
    if let Some(sum) = &sc.summary {
        summary(&mut s, sum);
    }
    s
}

/// The table's head and its rows, the job named on its first row only
/// (`ew`: the engine column's width).
fn rows(s: &mut String, sc: &ScenarioReport, repeat: u32, ew: usize) {
    let job_of = |r: &RunRecord| {
        format!(
            "{}{} bs={} j={}",
            r.job.rw,
            r.job
                .dist
                .as_ref()
                .map_or(String::new(), |d| format!(" {d}")),
            fmt_size(r.job.bs),
            r.job.numjobs
        )
    };
    let jw = sc
        .results
        .iter()
        .map(|r| job_of(r).len())
        .max()
        .unwrap_or(0)
        .max(24);
    let mut head = format!(
        "{:<jw$} {:<ew$} {:>13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>13} {:>10} {:>7}",
        "job",
        "engine",
        "bandwidth",
        "IOPS",
        "lat p50",
        "lat p75",
        "lat p99",
        "p99.9",
        "max",
        "cpu usr+sys",
        "vs kernel",
        if repeat > 1 { "spread" } else { "" }
    );
    head.truncate(head.trim_end().len());
    let _ = writeln!(s, "{head}");
    let mut last_job = String::new();
    for r in &sc.results {
        let job = job_of(r);
        let shown = if job == last_job {
            String::new()
        } else {
            job.clone()
        };
        last_job = job;
        let p = &r.perf;
        let mut line = format!(
            "{:<jw$} {:<ew$} {:>13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>13} {:>10} {:>7}",
            shown,
            r.engine,
            fmt_bw(p.bw_bytes),
            fmt_count(p.iops),
            fmt_ns(p.lat_ns.p50),
            fmt_ns(p.lat_ns.p75),
            fmt_ns(p.lat_ns.p99),
            fmt_ns(p.lat_ns.p999),
            fmt_ns(p.lat_ns.max),
            if p.cpu_s_per_gib.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}+{:.2}s", p.cpu_s.user, p.cpu_s.sys)
            },
            r.best
                .ratio_to_kernel
                .map_or("-".to_string(), |x| format!("{x:.2}x")),
            spread(&r.best.repeats_bw_bytes)
        );
        line.truncate(line.trim_end().len());
        let _ = writeln!(s, "{line}");
    }
}

/// The scenario's ratios, each of the best runs and of every round's, and
/// its targets, each met or not.
fn summary(s: &mut String, sum: &Summary) {
    let _ = writeln!(
        s,
        "   ratios (bandwidth; of the best runs, and of the runs of each round):"
    );
    let nw = sum.ratios.iter().map(|r| r.name.len()).max().unwrap_or(0);
    for r in &sum.ratios {
        let rounds: Vec<String> = r.per_round.iter().map(|x| format!("{x:.2}x")).collect();
        let _ = writeln!(
            s,
            "   {:<nw$}  {:>6}  rounds {} (median {:.2}x){}",
            r.name,
            format!("{:.2}x", r.best),
            rounds.join(" "),
            r.median_per_round,
            r.target
                .map_or(String::new(), |t| format!("; target {}", fmt_ratio(t)))
        );
        if let (Some(w), Some(m)) = (&r.writes_alone_per_round, r.writes_alone_median) {
            let rounds: Vec<String> = w.iter().map(|x| format!("{x:.2}x")).collect();
            let _ = writeln!(
                s,
                "   {:<nw$}          rounds {} (median {m:.2}x)",
                "  (the writes alone, setup left out)",
                rounds.join(" "),
            );
        }
    }
    if !sum.targets.is_empty() {
        let _ = writeln!(s, "   targets:");
        for t in &sum.targets {
            let verdict = match t.met {
                Some(true) => "[met]    ",
                Some(false) => "[NOT MET]",
                None => "[n/a]    ",
            };
            let _ = writeln!(s, "   {verdict} {}: {}", t.name, t.detail);
            if let Some(c) = &t.caveat {
                let _ = writeln!(s, "              caveat: {c}");
            }
        }
    }
}

/// How much slower the worst of several runs was than the best: `4%`;
/// empty for one run.
fn spread(bws: &[f64]) -> String {
    let best = bws.iter().copied().fold(0.0, f64::max);
    let worst = bws.iter().copied().fold(f64::INFINITY, f64::min);
    if bws.len() < 2 || best <= 0.0 {
        return String::new();
    }
    format!("{:.0}%", (best - worst) / best * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads() {
        assert_eq!(spread(&[1.0]), "");
        assert_eq!(spread(&[100.0, 90.0]), "10%");
        assert_eq!(spread(&[90.0, 100.0, 95.0]), "10%");
    }
}
