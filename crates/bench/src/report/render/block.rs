//! The fio-like block printed when a run ends: what ran, its bandwidth,
//! latency and CPU, how its time went, foliocache's figures, and what
//! else was measured beside it.

use std::fmt::Write as _;

use super::{fmt_hot, fmt_interval, fmt_limit, fmt_ra, fmt_series};
use crate::report::{FolioFigures, RunRecord};
use crate::units::{fmt_bw, fmt_count, fmt_ns, fmt_size, fmt_size_approx};

/// The fio-like block for one run (`run`: its round and the rounds, where
/// there are several).
pub fn block(r: &RunRecord, scenario: &str, run: Option<(u32, u32)>) -> String {
    let mut s = String::new();
    head(&mut s, r, scenario, run);
    timing(&mut s, r);
    if let Some(f) = &r.cache.foliocache {
        folio(&mut s, r, f);
    }
    beside(&mut s, r);
    s
}

/// What ran; its bandwidth, latency and CPU.
fn head(s: &mut String, r: &RunRecord, scenario: &str, run: Option<(u32, u32)>) {
    let (j, p) = (&r.job, &r.perf);
    let rep = run.map_or(String::new(), |(i, n)| format!(", run {i} of {n}"));
    let _ = writeln!(
        s,
        "{}: {}: {} bs={} numjobs={}{} file={} ({:.2} s{rep})",
        r.engine,
        scenario,
        j.rw,
        fmt_size(j.bs),
        j.numjobs,
        if j.shared && j.numjobs > 1 {
            " shared"
        } else {
            ""
        },
        fmt_size(j.file_size),
        p.seconds
    );
    let _ = writeln!(
        s,
        "  {}: IOPS={}, BW={} ({:.1} MB/s) ({} in {:.2}s)",
        j.rw,
        fmt_count(p.iops),
        fmt_bw(p.bw_bytes),
        p.bw_bytes / 1e6,
        fmt_size_approx(p.bytes),
        p.seconds
    );
    let _ = writeln!(
        s,
        "    lat: p50={}, p75={}, p99={}, p99.9={}, mean={}, max={}",
        fmt_ns(p.lat_ns.p50),
        fmt_ns(p.lat_ns.p75),
        fmt_ns(p.lat_ns.p99),
        fmt_ns(p.lat_ns.p999),
        fmt_ns(p.lat_ns.mean as u64),
        fmt_ns(p.lat_ns.max)
    );
    let _ = writeln!(
        s,
        "    cpu: user={:.2}s, sys={:.2}s ({:.3} s/GiB)",
        p.cpu_s.user, p.cpu_s.sys, p.cpu_s_per_gib
    );
}

/// The finer timeline, and the sync or setup inside the run's seconds.
fn timing(s: &mut String, r: &RunRecord) {
    let t = &r.timing;
    if let Some(f) = &t.fine_timeline {
        let _ = writeln!(
            s,
            "    timeline (GiB/s per {}): {}",
            fmt_interval(f.interval_s),
            fmt_series(&f.bw_bytes)
        );
    }
    if let Some(sync) = t.sync_s {
        let _ = writeln!(
            s,
            "    sync at the end: {sync:.3} s (in the figures; the writes {:.3} s)",
            r.perf.seconds - sync
        );
    }
    if let Some(setup) = t.setup_s {
        let _ = writeln!(
            s,
            "    memory setup: {setup:.3} s (in the figures; the writes {:.3} s)",
            r.perf.seconds - setup
        );
    }
}

/// foliocache's figures: its cache, its IO, its writes, its readahead.
fn folio(s: &mut String, r: &RunRecord, f: &FolioFigures) {
    let _ = writeln!(
        s,
        "    foliocache: capacity {} ({}, folios up to {}), arena populated {} in {:.3} s at build ({}){}",
        fmt_size_approx(r.memory.capacity.unwrap_or(0)),
        if f.huge_pages {
            "huge pages asked for"
        } else {
            "4 KiB pages, huge=off"
        },
        fmt_size_approx(f.max_folio_bytes.unwrap_or(2 << 20)),
        f.populate,
        f.populate_s,
        if r.timing.setup_s.is_some() {
            "in the run's memory setup"
        } else {
            "not in the run"
        },
        f.warm_s
            .map_or(String::new(), |w| format!(", warm pass {w:.3} s"))
    );
    let _ = writeln!(
        s,
        "    foliocache: during the run {} hits, {} misses, {} IOs ({}{}), {} evictions; file read {}",
        f.hits,
        f.misses,
        f.io_reads,
        fmt_size_approx(f.io_bytes),
        f.io_bytes
            .checked_div(f.io_reads)
            .map_or(String::new(), |a| format!(", avg {}", fmt_size_approx(a))),
        f.evictions,
        if f.backing_direct {
            "with O_DIRECT".to_string()
        } else {
            format!("through the buffered fallback ({})", f.backing)
        }
    );
    if r.job.rw == "write" || r.job.rw == "randwrite" {
        let _ = writeln!(
            s,
            "    foliocache: writes by write_at, folios by {} (flags {}); during the run {} write IOs ({}{}), {} \
             throttled waits, {} writeback errors{}; {} dirty after the run",
            f.write_insert,
            f.write_flags,
            f.io_writes,
            fmt_size_approx(f.io_write_bytes),
            f.io_write_bytes
                .checked_div(f.io_writes)
                .map_or(String::new(), |a| format!(", avg {}", fmt_size_approx(a))),
            f.throttled,
            f.writeback_errors,
            f.peak_cached_bytes.map_or(String::new(), |p| format!(
                ", peak {} cached",
                fmt_size_approx(p)
            )),
            fmt_size_approx(f.dirty_bytes)
        );
    }
    let _ = writeln!(
        s,
        "    foliocache: readahead {}, insert {}; IO engine {}",
        fmt_ra(&f.readahead),
        f.readahead.insert,
        f.io_engine
    );
    let _ = writeln!(
        s,
        "    foliocache: reads with flags {}; {} refaults, {} activations, {} dropbehind drops; \
         after the run {} cached, {} shadows ({})",
        f.read_flags,
        f.refaults,
        f.activations,
        f.dropbehind_drops,
        fmt_size_approx(f.bytes_cached),
        f.shadows,
        fmt_size_approx(f.shadow_bytes)
    );
}

/// What was measured beside the run: its memory limit, the hot reader,
/// the device, the page cache and the mapping before it; its notes.
fn beside(s: &mut String, r: &RunRecord) {
    if let Some(m) = &r.memory.memory_limit {
        let _ = writeln!(s, "    memory limit: {}", fmt_limit(m));
    }
    if let Some(h) = &r.hot {
        let _ = writeln!(s, "    hot reader: {}", fmt_hot(h));
    }
    if let Some(d) = &r.cache.device {
        let _ = writeln!(
            s,
            "    device {}: {} reads ({}, avg {}), {:.1} in flight on average (whole device)",
            d.device,
            d.reads,
            fmt_size_approx(d.bytes),
            fmt_size_approx(d.avg_read_bytes),
            d.reads_in_flight
        );
    }
    if let Some(p) = &r.cache.page_cache {
        let _ = writeln!(
            s,
            "    page cache {}: {} of {} pages resident",
            p.when, p.resident_pages, p.pages
        );
    }
    if let Some(h) = &r.memory.huge_mapped {
        let _ = writeln!(
            s,
            "    mapped by 2 MiB entries: {} of {}; the rest by 4 KiB ones",
            fmt_size_approx(h.huge_bytes),
            fmt_size_approx(h.bytes)
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "    {n}");
    }
}
