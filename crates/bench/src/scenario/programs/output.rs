//! What `db_bench` prints, read: each benchmark's figures and latency
//! ([`parse`]), the interposer's figures line ([`preload_figures`]), and a
//! benchmark's figures in short for the notes.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};

use super::PROGRAM;
use crate::report::Latency;

/// One benchmark's figures, as `db_bench` prints them.
#[derive(Debug, Clone, PartialEq)]
pub struct DbResult {
    /// `fillseq`, `readseq`, `readrandom`.
    pub name: String,
    /// Microseconds per operation.
    pub micros_per_op: f64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// The benchmark's seconds.
    pub seconds: f64,
    /// Operations.
    pub ops: u64,
    /// MB/s (MiB: 2^20 bytes).
    pub mb_per_s: f64,
    /// readrandom's keys found and looked up.
    pub found: Option<(u64, u64)>,
    /// From `--histogram=1`: percentiles, mean and largest.
    pub lat: Option<Latency>,
}

/// The word before `unit` among `words`, as a number.
fn before(words: &[&str], unit: &str) -> Option<f64> {
    let i = words.iter().position(|w| *w == unit)?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

/// The word after `key` among `words`, as a number.
fn after(words: &[&str], key: &str) -> Option<f64> {
    let i = words.iter().position(|w| *w == key)?;
    words.get(i + 1)?.parse().ok()
}

/// Microseconds as whole nanoseconds.
fn ns(us: f64) -> u64 {
    (us * 1e3).round() as u64
}

/// Every benchmark's figures in `db_bench`'s output, in order: a result
/// line (`name : X micros/op Y ops/sec S seconds N operations; M MB/s`,
/// readrandom's with `(F of N found)`), and below it, with
/// `--histogram=1`, the latency lines (`Count: ... Average: ...`, `Min:
/// ... Max: ...`, `Percentiles: P50: ... P75: ... P99: ...`).
///
/// # Errors
/// A result line whose figures do not parse.
pub fn parse(out: &str) -> Result<Vec<DbResult>> {
    let mut results: Vec<DbResult> = Vec::new();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if line.contains(" micros/op ") {
            let (name, _) = line.split_once(':').context("no `:`")?;
            let figure = |v: Option<f64>, what: &str| {
                v.with_context(|| format!("{PROGRAM}: no {what} in `{line}`"))
            };
            let found = line
                .trim_end()
                .split_once('(')
                .and_then(|(_, f)| f.strip_suffix("found)"))
                .map(|f| {
                    let w: Vec<&str> = f.split_whitespace().collect();
                    match (w.first().map(|x| x.parse()), w.get(2).map(|x| x.parse())) {
                        (Some(Ok(a)), Some(Ok(b))) if w.get(1) == Some(&"of") => Ok((a, b)),
                        _ => bail!("{PROGRAM}: a found count that does not parse in `{line}`"),
                    }
                })
                .transpose()?;
            results.push(DbResult {
                name: name.trim().to_string(),
                micros_per_op: figure(before(&words, "micros/op"), "micros/op")?,
                ops_per_s: figure(before(&words, "ops/sec"), "ops/sec")?,
                seconds: figure(before(&words, "seconds"), "seconds")?,
                ops: figure(before(&words, "operations;"), "operations")? as u64,
                mb_per_s: figure(before(&words, "MB/s"), "MB/s")?,
                found,
                lat: None,
            });
            continue;
        }
        let Some(last) = results.last_mut() else {
            continue;
        };
        let lat = last.lat.get_or_insert_with(Latency::default);
        match words.first().copied() {
            Some("Count:") => lat.mean = after(&words, "Average:").unwrap_or(0.0) * 1e3,
            Some("Min:") => lat.max = ns(after(&words, "Max:").unwrap_or(0.0)),
            Some("Percentiles:") => {
                lat.p50 = ns(after(&words, "P50:").unwrap_or(0.0));
                lat.p75 = ns(after(&words, "P75:").unwrap_or(0.0));
                lat.p99 = ns(after(&words, "P99:").unwrap_or(0.0));
                lat.p999 = ns(after(&words, "P99.9:").unwrap_or(0.0));
            }
            _ => {}
        }
    }
    // A result with no histogram lines below it has no latency.
    for r in &mut results {
        if r.lat.is_some_and(|l| l.mean == 0.0 && l.p50 == 0) {
            r.lat = None;
        }
    }
    Ok(results)
}

/// The interposer's lines in its stderr (`foliocache-preload: pid ...`,
/// after db_bench's own messages, maybe on their line), in order.
fn preload_lines(stderr: &str) -> impl Iterator<Item = &str> {
    const START: &str = "foliocache-preload: pid";
    stderr
        .match_indices(START)
        .filter_map(|(at, _)| stderr[at..].lines().next())
}

/// The interposer's figures line (with [`super::PRELOAD_STATS`] set) in its
/// stderr, and the opens it served: the last line that counts opens (a
/// warm start's line follows it).
pub fn preload_figures(stderr: &str) -> Option<(String, u64)> {
    preload_lines(stderr)
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let opens = before(&words, "opens")? as u64;
            Some((line.to_string(), opens))
        })
        .last()
}

/// The interposer's warm start line (`... warm start: R of N ranges ...`)
/// in its stderr, if it loaded a state file.
pub fn warm_line(stderr: &str) -> Option<String> {
    preload_lines(stderr)
        .filter(|line| line.contains("warm start:"))
        .map(str::to_string)
        .last()
}

/// `r`'s ops/s, whole.
pub fn r_ops(r: &DbResult) -> String {
    format!("{:.0}", r.ops_per_s)
}

/// `r` as db_bench printed it, in short.
pub fn one_line(r: &DbResult) -> String {
    let mut s = format!(
        "{} {:.3} micros/op {} ops/s {:.3} s {} ops {:.1} MB/s",
        r.name,
        r.micros_per_op,
        r_ops(r),
        r.seconds,
        r.ops,
        r.mb_per_s
    );
    if let Some((f, n)) = r.found {
        let _ = write!(s, " ({f} of {n} found)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::programs::KV_BYTES;

    /// db_bench 7.8.3's output (Debian's rocksdb-tools), captured as it
    /// printed it (`testdata/`): a fillseq, then readseq twice and
    /// readrandom with `--histogram=1`, histogram buckets shortened.
    const FILL: &str = include_str!("testdata/db_bench_fill.txt");
    const READS: &str = include_str!("testdata/db_bench_reads.txt");

    #[test]
    fn parses_a_fillseq_with_its_histogram() {
        let r = parse(FILL).unwrap();
        assert_eq!(r.len(), 1);
        let f = &r[0];
        assert_eq!(f.name, "fillseq");
        assert_eq!(f.micros_per_op, 7.450);
        assert_eq!(f.ops_per_s, 133_788.0);
        assert_eq!(f.seconds, 1.495);
        assert_eq!(f.ops, 200_000);
        assert_eq!(f.mb_per_s, 27.6);
        assert_eq!(f.found, None);
        let lat = f.lat.unwrap();
        assert_eq!(
            (lat.p50, lat.p75, lat.p99, lat.p999),
            (2000, 2630, 6010, 48_210)
        );
        assert_eq!(lat.max, 28_102_000);
        assert!((lat.mean - 7450.0).abs() < 1e-6);
        // Its MB/s is MiB/s of keys and values: ops/s times 216 bytes.
        let mib = f.ops_per_s * KV_BYTES as f64 / f64::from(1 << 20);
        assert!((mib - f.mb_per_s).abs() < 0.05, "{mib}");
    }

    #[test]
    fn parses_reads_in_order_with_found_counts_and_without_a_histogram() {
        let r = parse(READS).unwrap();
        let names: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["readseq", "readseq", "readrandom"]);
        assert_eq!(r[0].lat.unwrap().p99, 3470);
        // The second readseq printed no histogram.
        assert_eq!(r[1].lat, None);
        assert_eq!(r[1].ops_per_s, 1_115_710.0);
        assert_eq!(r[2].found, Some((200_000, 200_000)));
        assert_eq!(r[2].lat.unwrap().p50, 3220);
        assert_eq!(r[2].mb_per_s, 26.1);
    }

    #[test]
    fn a_result_line_that_does_not_parse_is_an_error() {
        let e =
            parse("fillseq : x micros/op 1 ops/sec 1 seconds 1 operations; 1 MB/s").unwrap_err();
        assert!(format!("{e:#}").contains("no micros/op"), "{e:#}");
        let e = parse(
            "readrandom : 1 micros/op 1 ops/sec 1 seconds 1 operations; 1 MB/s (x of 1 found)",
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("found count"), "{e:#}");
        assert!(parse("no results here\n").unwrap().is_empty());
    }

    #[test]
    fn the_interposers_figures_line_gives_its_opens() {
        let err = "noise ... finished 100 ops    foliocache-preload: pid 12: 7 opens served; 10 hits, 2 misses; 2 reads \
                   (8192 bytes) and 0 writes (0 bytes) on the files\n";
        let (line, opens) = preload_figures(err).unwrap();
        assert_eq!(opens, 7);
        assert!(line.starts_with("foliocache-preload: pid 12"));
        assert_eq!(preload_figures("nothing"), None);
        assert_eq!(warm_line(err), None);
    }

    #[test]
    fn a_warm_starts_line_after_the_figures_is_found_apart() {
        let err = "foliocache-preload: pid 9: 12 opens served; 1 hits, 0 misses; 0 reads \
                   (0 bytes) and 0 writes (0 bytes) on the files\n\
                   foliocache-preload: pid 9: warm start: 3 of 3 ranges (12288 of 12288 bytes) \
                   loaded, 2 files loaded, 1 skipped\n";
        let (line, opens) = preload_figures(err).unwrap();
        assert_eq!(opens, 12);
        assert!(line.ends_with("on the files"), "{line}");
        let warm = warm_line(err).unwrap();
        assert!(warm.contains("3 of 3 ranges"), "{warm}");
        assert!(!warm.contains("opens"), "{warm}");
    }
}
