//! `foliocache stat --watch`: a line of rates per interval from a running
//! mount's figures, as `vmstat 1` prints them; and the parsers of the
//! options that name an interval or a listening address.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::control::query;

/// The columns: a heading, and how a row's value comes from two samples
/// `(before, after)` and the seconds between them.
type Column = (&'static str, fn(&Sample, &Sample, f64) -> f64);

/// The cache's figures at one instant, the ones a row needs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sample {
    hits: u64,
    misses: u64,
    /// Bytes reads returned, and of them those found cached (readahead's
    /// counted where it was read: docs/metrics.md).
    read_bytes: u64,
    memory_bytes: u64,
    io_bytes: u64,
    io_write_bytes: u64,
    evictions: u64,
    refaults: u64,
    dirty_bytes: u64,
    bytes_cached: u64,
    /// The hit ratio predicted at twice the capacity, where the mount's
    /// answer has a curve (`Cache::hit_ratio_curve`).
    predicted_2x: Option<f64>,
}

impl Sample {
    fn from_json(v: &serde_json::Value) -> Result<Sample> {
        let c = &v["cache"];
        let n = |k: &str| {
            c[k].as_u64()
                .with_context(|| format!("the mount's answer has no cache.{k}"))
        };
        Ok(Sample {
            hits: n("hits")?,
            misses: n("misses")?,
            read_bytes: n("read_bytes")?,
            memory_bytes: n("memory_bytes")?,
            io_bytes: n("io_bytes")?,
            io_write_bytes: n("io_write_bytes")?,
            evictions: n("evictions")?,
            refaults: n("refaults")?,
            dirty_bytes: n("dirty_bytes")?,
            bytes_cached: n("bytes_cached")?,
            predicted_2x: crate::control::predicted(c, 2.0),
        })
    }
}

/// Per second, from two readings of a counter (0 if it went back: the
/// mount restarted).
fn rate(before: u64, after: u64, secs: f64) -> f64 {
    after.saturating_sub(before) as f64 / secs
}

const MB: f64 = 1e6;
const MIB: f64 = (1u64 << 20) as f64;

const COLUMNS: [Column; 11] = [
    ("hits/s", |a, b, s| rate(a.hits, b.hits, s)),
    ("misses/s", |a, b, s| rate(a.misses, b.misses, s)),
    ("hit%", |a, b, _| {
        let (h, m) = (
            b.hits.saturating_sub(a.hits),
            b.misses.saturating_sub(a.misses),
        );
        if h + m == 0 {
            0.0
        } else {
            100.0 * h as f64 / (h + m) as f64
        }
    }),
    ("read MB/s", |a, b, s| rate(a.io_bytes, b.io_bytes, s) / MB),
    ("wb MB/s", |a, b, s| {
        rate(a.io_write_bytes, b.io_write_bytes, s) / MB
    }),
    ("evict/s", |a, b, s| rate(a.evictions, b.evictions, s)),
    ("refault/s", |a, b, s| rate(a.refaults, b.refaults, s)),
    ("dirty MiB", |_, b, _| b.dirty_bytes as f64 / MIB),
    ("cached MiB", |_, b, _| b.bytes_cached as f64 / MIB),
    // A gauge: the share of the bytes read from memory the cache predicts
    // at twice its size over its recent window, as `mem%` counts it (NaN,
    // shown as -, where the mount has no curve or the point is unknown).
    ("2x mem%", |_, b, _| {
        b.predicted_2x.map_or(f64::NAN, |h| 100.0 * h)
    }),
    // In bytes: of what reads returned in the interval, the share found
    // cached (`hit%` counts page lookups).
    ("mem%", |a, b, _| {
        let read = b.read_bytes.saturating_sub(a.read_bytes);
        let memory = b.memory_bytes.saturating_sub(a.memory_bytes);
        if read == 0 {
            0.0
        } else {
            100.0 * memory as f64 / read as f64
        }
    }),
];

/// The heading is printed again after this many rows, as `vmstat` does.
const ROWS_PER_HEADING: u64 = 20;

fn heading() -> String {
    COLUMNS
        .iter()
        .map(|(h, _)| format!("{h:>11}"))
        .collect::<String>()
}

fn row(before: &Sample, after: &Sample, secs: f64) -> String {
    COLUMNS
        .iter()
        .map(|(_, f)| match f(before, after, secs) {
            v if v.is_nan() => format!("{:>11}", "-"),
            v => format!("{v:>11.1}"),
        })
        .collect::<String>()
}

/// Prints a row of rates every `interval` to `out`, `count` rows (or until
/// the process is interrupted), from the mount at `mnt`.
///
/// # Errors
/// The mount cannot be asked (not a mount, gone), or `out` fails.
pub fn watch(
    mnt: &Path,
    interval: Duration,
    count: Option<u64>,
    out: &mut impl Write,
) -> Result<()> {
    let sample = || -> Result<(Sample, Instant)> {
        let v: serde_json::Value =
            serde_json::from_str(&query(mnt, "")?).context("the mount's answer")?;
        Ok((Sample::from_json(&v)?, Instant::now()))
    };
    let (mut before, mut at) = sample()?;
    let mut rows = 0u64;
    while count.is_none_or(|c| rows < c) {
        if rows.is_multiple_of(ROWS_PER_HEADING) {
            writeln!(out, "{}", heading())?;
        }
        std::thread::sleep(interval);
        let (after, now) = sample()?;
        let secs = now.duration_since(at).as_secs_f64().max(1e-9);
        writeln!(out, "{}", row(&before, &after, secs))?;
        out.flush()?;
        (before, at) = (after, now);
        rows += 1;
    }
    Ok(())
}

/// An interval in seconds (fractions allowed), more than zero and at most
/// a day.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("`{s}`: not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "`{s}`: must be more than 0 and at most 86400 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A listening address: `PORT` (on the loopback address: metrics are not
/// for the network unless asked) or `HOST:PORT`.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse::<SocketAddr>().map_err(|_| {
        format!("`{s}`: not PORT or HOST:PORT (e.g. 9100, 127.0.0.1:9100, [::1]:9100)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_gives_rates_over_the_interval_and_gauges_as_they_are() {
        let a = Sample {
            hits: 100,
            misses: 10,
            io_bytes: 0,
            evictions: 5,
            ..Sample::default()
        };
        let b = Sample {
            hits: 400,
            misses: 110,
            read_bytes: 8_000_000,
            memory_bytes: 2_000_000,
            io_bytes: 4_000_000,
            io_write_bytes: 2_000_000,
            evictions: 5,
            refaults: 1,
            dirty_bytes: 3 << 20,
            bytes_cached: 10 << 20,
            predicted_2x: Some(0.9),
        };
        let cells: Vec<f64> = row(&a, &b, 2.0)
            .split_whitespace()
            .map(|c| c.parse().unwrap())
            .collect();
        assert_eq!(
            cells,
            [150.0, 50.0, 75.0, 2.0, 1.0, 0.0, 0.5, 3.0, 10.0, 90.0, 25.0]
        );
        // No curve in the mount's answer: a dash.
        assert_eq!(row(&a, &a, 1.0).split_whitespace().nth(9), Some("-"));
        // Each heading right-aligned over its column.
        assert_eq!(heading().len(), row(&a, &b, 2.0).len());
        // A counter that went back (a restarted mount) reads as 0, not a wrap.
        assert_eq!(rate(10, 5, 1.0), 0.0);
    }

    #[test]
    fn intervals_and_addresses_parse_or_say_why_not() {
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "x", "inf", "NaN", "100000"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_listen("9100").unwrap().to_string(), "127.0.0.1:9100");
        assert_eq!(
            parse_listen("0.0.0.0:80").unwrap().to_string(),
            "0.0.0.0:80"
        );
        assert_eq!(parse_listen("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen("70000").is_err());
    }
}
