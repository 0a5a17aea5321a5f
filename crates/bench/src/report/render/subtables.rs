//! The tables below a scenario's table that its runs call for: a memory
//! job's setup and writes apart ([`setup`]), cold runs' IO ([`io`]), and
//! figures per read of reads larger than memory ([`per_read`]).

use std::fmt::Write as _;

use super::fmt_ra;
use crate::report::ScenarioReport;
use crate::units::{fmt_bw, fmt_count, fmt_ns, fmt_size_approx};

/// Figures per read: hit ratios (with an exact LRU's beside
/// foliocache's), CPU, read amplification, evictions and the cache's
/// memory, for a scenario of reads larger than memory (`ew`: the engine
/// column's width).
pub fn per_read(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   per read (hit: foliocache's statistics, the others' device reads; LRU, MIN, all: an \
         exact LRU, Belady's MIN (the best any policy could do) and an unbounded cache, LRU \
         and MIN of foliocache's capacity, over the same offsets; amp: bytes read from storage per byte \
         delivered, foliocache's own reads, the others' reads by this process):"
    );
    let _ = writeln!(
        s,
        "   {:<28} {:<ew$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9} {:>6} {:>10} {:>10}",
        "job",
        "engine",
        "IOPS",
        "p50",
        "p99",
        "p99.9",
        "max",
        "hit",
        "LRU",
        "MIN",
        "all",
        "cpu us",
        "amp",
        "evictions",
        "memory"
    );
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    for r in &sc.results {
        let (c, p) = (&r.cache, &r.perf);
        let f = c.foliocache.as_ref();
        let mut line = format!(
            "   {:<28} {:<ew$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9.2} {:>6} {:>10} {:>10}",
            format!(
                "{}{} j={}",
                r.job.rw,
                r.job
                    .dist
                    .as_ref()
                    .map_or(" uniform".to_string(), |d| format!(" {d}")),
                r.job.numjobs
            ),
            r.engine,
            fmt_count(p.iops),
            fmt_ns(p.lat_ns.p50),
            fmt_ns(p.lat_ns.p99),
            fmt_ns(p.lat_ns.p999),
            fmt_ns(p.lat_ns.max),
            pct(c.hit_ratio),
            pct(c.lru.as_ref().map(|l| l.hit_ratio)),
            pct(c.lru.as_ref().map(|l| l.min_hit_ratio)),
            pct(c.lru.as_ref().map(|l| l.unbounded_hit_ratio)),
            p.cpu_us_per_op,
            c.read_amplification
                .map_or("-".to_string(), |a| format!("{a:.2}")),
            f.map_or("-".to_string(), |f| f.evictions.to_string()),
            f.map_or("-".to_string(), |f| fmt_size_approx(f.memory_bytes)),
        );
        line.truncate(line.trim_end().len());
        let _ = writeln!(s, "{line}");
    }
}

/// A memory job's runs split into their setup and their writes: what
/// first touch cost where (foliocache's arena populate, in its setup with
/// `populate=eager`, in its writes with `lazy`; anon's page faults in its
/// memset), and the writes' own bandwidth beside the whole run's.
pub fn setup(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   setup and writes of those runs (the bandwidth above is of both; setup: mapping the \
         memory, or building foliocache's cache, whose arena populate is in it with \
         populate=eager):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>9} {:>15} {:>9} {:>13}  {}",
        "", "engine", "setup s", "arena populate", "writes s", "writes alone", "writes by"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in &sc.results {
        let setup = r.timing.setup_s.unwrap_or(0.0);
        let writes = (r.perf.seconds - setup).max(0.0);
        let (populate, how) = match &r.cache.foliocache {
            Some(f) => (
                format!("{:.3} s {}", f.populate_s, f.populate),
                format!(
                    "{}, {} pages",
                    f.write_insert,
                    if f.huge_pages { "huge" } else { "4 KiB" }
                ),
            ),
            None => ("-".to_string(), String::new()),
        };
        let line = format!(
            "{:<24} {:<ew$} {:>9} {:>15} {:>9} {:>13}  {}",
            "",
            r.engine,
            format!("{setup:.3}"),
            populate,
            format!("{writes:.3}"),
            if writes > 0.0 {
                fmt_bw(r.perf.bytes as f64 / writes)
            } else {
                "-".into()
            },
            how
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// The IO of each result's run: foliocache's reads of its files, the
/// block device's reads, and foliocache's readahead engine.
pub fn io(s: &mut String, sc: &ScenarioReport, ew: usize) {
    let _ = writeln!(
        s,
        "   IO of those runs (cache: the reads foliocache issued; device: the reads the block \
         device completed, the whole device's):"
    );
    let head = format!(
        "{:<24} {:<ew$} {:>10} {:>9} {:>10} {:>9} {:>10}  {}",
        "",
        "engine",
        "cache IOs",
        "avg size",
        "dev reads",
        "avg size",
        "in flight",
        "foliocache IO"
    );
    let _ = writeln!(s, "{}", head.trim_end());
    for r in &sc.results {
        let (cios, csize, how) = match &r.cache.foliocache {
            Some(f) => (
                f.io_reads.to_string(),
                f.io_bytes
                    .checked_div(f.io_reads)
                    .map_or("-".into(), fmt_size_approx),
                format!(
                    "{}; readahead {}, insert {}",
                    f.io_engine,
                    fmt_ra(&f.readahead),
                    f.readahead.insert
                ),
            ),
            None => ("-".into(), "-".into(), String::new()),
        };
        let (dreads, dsize, inflight) = match &r.cache.device {
            Some(d) => (
                d.reads.to_string(),
                fmt_size_approx(d.avg_read_bytes),
                format!("{:.1}", d.reads_in_flight),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let line = format!(
            "{:<24} {:<ew$} {:>10} {:>9} {:>10} {:>9} {:>10}  {}",
            "", r.engine, cios, csize, dreads, dsize, inflight, how
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}
