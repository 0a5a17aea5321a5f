//! The record in words: the fio-like block printed as a run ends
//! ([`block`](fn@block)), and a scenario's side-by-side table with the tables
//! below it, its ratios and its targets ([`table`](fn@table)); and the words and
//! figures they share (a memory limit, the hot reader, a timeline).

use std::fmt::Write as _;

use crate::report::{HotFigures, MemoryLimit, Readahead};
use crate::units::{fmt_count, fmt_size, fmt_size_approx, GIB_F64};

mod block;
mod detail;
mod subtables;
mod table;

pub use block::block;
pub use table::table;

/// A memory limit, short: `cgroup v1 256.0MiB, peak 255.9MiB`, `none`.
fn fmt_limit_short(m: &MemoryLimit) -> String {
    match (m.limit_bytes, m.peak_bytes) {
        (None, _) => "none".into(),
        (Some(l), Some(p)) => format!(
            "{} {}, peak {}",
            m.mechanism,
            fmt_size_approx(l),
            fmt_size_approx(p)
        ),
        (Some(l), None) => format!("{} {}", m.mechanism, fmt_size_approx(l)),
    }
}

/// A memory limit in words: `cgroup v1, 256MiB (peak 255.9MiB, hit 12
/// times)`, `NONE: why`.
pub fn fmt_limit(m: &MemoryLimit) -> String {
    match m.limit_bytes {
        None => format!(
            "NONE ({}): the kernel engines ran without a limit",
            m.reason.as_deref().unwrap_or("no mechanism")
        ),
        Some(l) => {
            let mut t = format!("{}, {}", m.mechanism, fmt_size_approx(l));
            if let Some(p) = m.peak_bytes {
                let _ = write!(t, " (peak {}", fmt_size_approx(p));
                if let Some(h) = m.limit_hits {
                    let _ = write!(t, ", hit the limit {h} times");
                }
                t.push(')');
            }
            if let Some(c) = &m.cgroup {
                let _ = write!(t, " in {c}");
            }
            t
        }
    }
}

/// The hot reader in words.
fn fmt_hot(h: &HotFigures) -> String {
    format!(
        "{} reads of {} at random in a {} file ({} of {} pages cached after warming): {} \
         ({} misses{}, told by {}), {} reads/s ({})",
        h.reads,
        fmt_size(h.bs),
        fmt_size_approx(h.file_size),
        h.warm_cached_pages,
        h.pages,
        h.hit_ratio.map_or("hits not measured".into(), |x| format!(
            "{:.2}% hits",
            x * 100.0
        )),
        h.misses,
        h.misses_per_gib
            .map_or(String::new(), |x| format!(", {x:.0} per GiB the job moved")),
        h.miss_detection,
        fmt_count(h.reads_per_s),
        fmt_hot_rate(h.rate_limit_per_s)
    )
}

/// `paced to 16384/s`, or `unpaced`.
fn fmt_hot_rate(rate: u64) -> String {
    if rate == 0 {
        "unpaced".into()
    } else {
        format!("paced to {rate}/s")
    }
}

/// `100ms`, `1s`.
fn fmt_interval(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{secs:.0}s")
    } else {
        format!("{:.0}ms", secs * 1e3)
    }
}

/// Bandwidths in GiB/s, two decimals, space separated.
fn fmt_series(bw: &[f64]) -> String {
    let v: Vec<String> = bw.iter().map(|b| format!("{:.2}", b / GIB_F64)).collect();
    v.join(" ")
}

/// `windows up to 2MiB`, `off`.
fn fmt_ra(ra: &Readahead) -> String {
    if ra.max_pages == 0 {
        "off".into()
    } else {
        format!("windows up to {}", fmt_size(ra.max_pages * 4096))
    }
}
