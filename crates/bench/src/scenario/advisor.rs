//! The `advisor` scenario (by name only): how well the cache predicts its
//! own hit ratio at other sizes (`Cache::hit_ratio_curve`, docs/design.md
//! "How big should the cache be"). For each workload it runs a trace of
//! 4 KiB reads through a cache of capacity C and prints the curve the
//! cache predicts at its end; then runs the same trace through caches of
//! 0.25, 0.5, 2 and 4 times C and prints the hit ratio each measured,
//! beside the prediction.
//!
//! The file is in memory (`MemBacking`): the figures are hit ratios, not
//! bandwidth, and a miss costs a copy, so a run is quick. A hit ratio is
//! in bytes, as the curve's: the share of the bytes reads returned that
//! came from memory (`CacheStats::memory_bytes`), a page readahead
//! brought in counted as a miss where it was first read. Reads are
//! random-advised (no readahead: one page a read, what the curve counts).
//! A trace's hit ratio at each size is measured over the reads the curve
//! of C covered (its window, one or two epochs of 16 capacities of reads
//! and at least 65,536, ending at the trace's end): inside the second
//! half for C's traces, but reaching into the warm-up for the object
//! store's, whose C is a quarter of the others' ([`measured_from`]).
//! The pool's and the group's rows likewise (in reads of 16 pages, 8
//! threads side by side); the one pass over the whole pass, which its
//! curve covers.
//!
//! Two workloads have the shapes of programs a newcomer tried
//! ([`shapes`]): a pass over 20,000 small files, each opened, read once
//! and closed (measured over the pass), and a pool of 8 threads reading
//! random 64 KiB ranges of a file of 2 C with readahead on. The last
//! workload is a program's: the reads `db_bench readrandom`
//! makes of a database of 4 C, recorded at each run ([`dbtrace`]), where
//! `db_bench` and `strace` are installed (it is skipped, with the reason,
//! where they are not).
//!
//! Two rows are the group's cache's (`SharedCache`, a sparse file in the
//! run's directory, 8 threads): the pool, and the zipf 0.99 trace dealt
//! out to the threads in turn; their curve is the group's
//! (`SharedCache::hit_ratio_curve`), their hit ratios the group's, in
//! bytes.
//!
//! The object store's tiers ([`store`]): the memory tier's curve on two
//! of the traces, rows as the others' (their gaps counted in the last
//! line), and the disk tier's hit ratios and GETs at 0.5x and 2x against
//! tiers of those sizes, with the GETs' target (within 10 %).
//!
//! The last two rows are fio's ([`fio`]): random 4 KiB reads of a file of
//! 8 C on two skewed distributions the traces do not use (`zipf:1.1`,
//! `pareto:0.9`) under `foliocache run --capacity C --metrics PORT`,
//! the group's curve scraped from the endpoint while fio runs, beside
//! the hit ratios the same fio job had under `run` at each other size;
//! each point is checked at every scrape where it was known (a line
//! each), as a user may read it at any of them. Skipped, with the
//! reason, where fio is not installed (as the db_bench trace).
//!
//! A point the curve does not know yet (`CurvePoint::known`) is shown as
//! `n/k` and left out of the gaps; the last line counts the points within
//! 2 points of the measured hit ratio and their mean absolute error.

use std::path::Path;

use anyhow::Result;
use backing::MemBacking;
use foliocache::{Advice, Cache, HitRatioCurve, CAPACITY_RATIOS};

use super::tell;
use super::traces::{dbtrace, Workload, PAGE, TRACE_CAPACITIES};
use super::{capacity_at_least, FullQuick, Program, Scenario};
use crate::args::BenchArgs;
use crate::units::fmt_size;

mod fio;
mod shapes;
mod store;

/// C, full and with `--quick` (`--capacity` overrides it).
const CAPACITY: FullQuick<u64> = FullQuick(64 << 20, 16 << 20);

/// What the scenario runs: its capacity and its workloads.
#[derive(Debug, Clone)]
pub struct Advisor {
    /// C, in bytes.
    pub capacity: u64,
}

const WORKLOADS: [Workload; 5] = [
    Workload::Zipf(0.8),
    Workload::Zipf(0.99),
    Workload::Zipf(1.2),
    Workload::Loop,
    Workload::ScanHot,
];

/// The scenario (`--capacity` sets C).
///
/// # Errors
/// A capacity under 4 MiB.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let capacity = capacity_at_least(
        args,
        CAPACITY.get(quick),
        4 << 20,
        "advisor scenario: a capacity of",
    )?;
    Ok(Scenario {
        name: "advisor".into(),
        description: format!(
            "How big should the cache be: for each workload, the hit ratios the cache predicts \
             at 0.25x, 0.5x, 1x, 2x and 4x its capacity C = {} (Cache::hit_ratio_curve, at the \
             end of a trace of {TRACE_CAPACITIES} C of random-advised 4 KiB reads from a file \
             in memory) beside the hit ratios measured by running the same trace through a \
             cache of each size (over the reads the curve covered: its window). Then a pass \
             over 20,000 small files read once each, and a pool of 8 threads reading random 64 \
             KiB ranges of a file of 2 C; the last workload is the reads of db_bench \
             readrandom, recorded with strace at each run; then fio's random reads on zipf:1.1 \
             and pareto:0.9 under foliocache run --metrics, the group's curve scraped during \
             the run, each point checked at every scrape where it was known. A point the \
             curve does not know yet shows n/k.",
            fmt_size(capacity)
        ),
        jobs: Vec::new(),
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
        programs: Some(Program::Advisor(Advisor { capacity })),
    })
}

/// How a workload runs through a cache of some capacity.
#[derive(Clone, Copy)]
enum Job<'a> {
    /// A trace of page reads of a file of so many pages.
    Trace(&'a [u64], u64),
    /// A pass over many small files ([`shapes::one_pass`]).
    OnePass,
    /// Threads reading random ranges of one file ([`shapes::pool`]).
    Pool,
    /// The pool through the group's cache, a file in this directory
    /// ([`shapes::group_pool`]).
    GroupPool(&'a Path),
    /// A trace through the group's cache ([`shapes::group_trace`]).
    GroupTrace(&'a [u64], u64, &'a Path),
    /// A trace through an object store's memory tier ([`store::memory`]).
    Store(&'a [u64], u64),
}

impl Job<'_> {
    /// Runs the job through a cache of `capacity` bytes (C of `c`
    /// pages): the hit ratio it measured, and the curve at its end. The
    /// hit ratio is over the last `window` page reads where given (the
    /// reads the curve of C covered), else over the second half; the one
    /// pass's over the whole pass (its window).
    fn run(self, c: u64, capacity: u64, window: Option<u64>) -> Result<(f64, HitRatioCurve)> {
        match self {
            Job::Trace(trace, pages) => run_trace(trace, pages, capacity, window),
            Job::OnePass => shapes::one_pass(c, capacity),
            Job::Pool => shapes::pool(c, capacity, window),
            Job::GroupPool(dir) => shapes::group_pool(dir, c, capacity, window),
            Job::GroupTrace(trace, pages, dir) => {
                shapes::group_trace(dir, trace, pages, capacity, window)
            }
            Job::Store(trace, pages) => store::memory(trace, pages, capacity, window),
        }
    }
}

/// A cache of `capacity` bytes, as every run of the scenario builds it.
fn cache(capacity: u64) -> Result<Cache> {
    Ok(Cache::builder().capacity(capacity as usize).build()?)
}

/// The hit ratio a cache had between two of its `stats()`, as the curve
/// counts it: the share of the bytes reads returned that came from memory
/// (`CacheStats::memory_bytes`; a page readahead brought in is a miss
/// where it was first read, not a hit as a page lookup).
fn hit_ratio(before: &foliocache::CacheStats, after: &foliocache::CacheStats) -> f64 {
    let read = after.read_bytes - before.read_bytes;
    let memory = after.memory_bytes().saturating_sub(before.memory_bytes());
    memory as f64 / read.max(1) as f64
}

/// Where a trace's measured part starts: its last `window` reads, or its
/// second half. The curve covers a window of whole epochs ending at the
/// trace's end (`HitRatioCurve::accesses` reads, one page each here),
/// which may reach back past the half (a trace shorter than four epochs:
/// the object store's rows, whose C is a quarter of the others'), into
/// the warm-up; a hit ratio measured over other reads than the curve's
/// compares two figures of different reads.
pub(super) fn measured_from(len: usize, window: Option<u64>) -> usize {
    window.map_or(len / 2, |w| {
        len.saturating_sub(usize::try_from(w).unwrap_or(usize::MAX))
    })
}

/// Runs `trace` (a file of `pages`) through a cache of `capacity` bytes;
/// the hit ratio over the trace's last `window` reads (or its second
/// half: [`measured_from`]), and the curve at its end.
fn run_trace(
    trace: &[u64],
    pages: u64,
    capacity: u64,
    window: Option<u64>,
) -> Result<(f64, HitRatioCurve)> {
    let cache = cache(capacity)?;
    let backing = MemBacking::with_data(vec![0u8; (pages * PAGE) as usize]);
    let file = cache.open_backing(backing)?;
    file.advise(0, 0, Advice::Random)?;
    let mut buf = vec![0u8; PAGE as usize];
    let from = measured_from(trace.len(), window);
    for &p in &trace[..from] {
        file.read_at(&mut buf, p * PAGE)?;
    }
    let before = cache.stats();
    for &p in &trace[from..] {
        file.read_at(&mut buf, p * PAGE)?;
    }
    Ok((hit_ratio(&before, &cache.stats()), cache.hit_ratio_curve()))
}

/// The gaps between predicted and measured hit ratios over the rows: the
/// scenario's check.
#[derive(Default)]
struct Gaps {
    /// Each known point's gap, in points of hit ratio.
    known: Vec<f64>,
    /// Points not known yet.
    unknown: usize,
}

impl Gaps {
    /// The last line: how many known points are within 2 points of the
    /// hit ratio measured at their size, and the mean absolute error.
    fn summary(&self) -> String {
        let n = self.known.len();
        let within = self.known.iter().filter(|g| **g <= 2.0).count();
        let mean = self.known.iter().sum::<f64>() / n.max(1) as f64;
        let worst = self.known.iter().copied().fold(0.0, f64::max);
        format!(
            "points within 2 of measured: {within} of {n} known ({} not yet known); mean \
             absolute error {mean:.2} points, worst {worst:.2} (targets: all, at most 0.5)",
            self.unknown
        )
    }
}

/// A table row: `name`'s predicted and measured hit ratio at each size for
/// `job` and C of `capacity` bytes, and the largest gap of a known point;
/// each gap counted into `gaps`.
fn row(name: &str, job: Job<'_>, capacity: u64, gaps: &mut Gaps) -> Result<String> {
    let c = capacity / PAGE;
    let (_, curve) = job.run(c, capacity, None)?;
    let mut cells = Vec::new();
    let mut worst = 0.0f64;
    for p in curve.points {
        let size = (capacity as f64 * p.capacity_ratio) as u64;
        // Measured over the reads the curve covered (`run`).
        let (measured, _) = job.run(c, size, Some(curve.accesses))?;
        match p.known() {
            Some(h) => {
                let gap = (h - measured).abs();
                worst = worst.max(gap);
                gaps.known.push(100.0 * gap);
                cells.push(format!("{h:>6.3}/{measured:<6.3}"));
            }
            None => {
                gaps.unknown += 1;
                cells.push(format!("{:>6}/{measured:<6.3}", "n/k"));
            }
        }
    }
    Ok(format!(
        "{:<18} {}  {:>9.3}   (window {} reads, {} sampled)",
        name,
        cells.join(" "),
        worst,
        curve.accesses,
        curve.sampled
    ))
}

/// Runs the scenario, saying a table row per workload: predicted and
/// measured hit ratio at each size, and the largest gap. The db_bench
/// trace is recorded in a directory of `dir`.
///
/// # Errors
/// A cache that cannot be built, or a read that fails; the db_bench trace
/// failing to record where its programs are installed, or (under
/// `CI=true`, whose test command installs them) missing.
pub fn run(a: &Advisor, dir: &Path, notes: &mut Vec<String>, say: &dyn Fn(&str)) -> Result<()> {
    let c = a.capacity / PAGE;
    say(&format!(
        "{:<18} {}  {:>9}",
        "workload (C pages)",
        CAPACITY_RATIOS
            .map(|r| format!("{:>13}", format!("{r}x pred/meas")))
            .join(" "),
        "worst gap"
    ));
    let mut gaps = Gaps::default();
    for w in WORKLOADS {
        let (trace, pages) = w.trace(c);
        let line = row(&w.name(), Job::Trace(&trace, pages), a.capacity, &mut gaps)?;
        tell(notes, say, line);
    }
    for (name, job) in [(shapes::ONE_PASS, Job::OnePass), (shapes::POOL, Job::Pool)] {
        let line = row(name, job, a.capacity, &mut gaps)?;
        tell(notes, say, line);
    }
    // The group's cache (`SharedCache::hit_ratio_curve`): its curve, of a
    // clock, beside the hit ratios groups' caches of each size had.
    let (zipf, pages) = Workload::Zipf(0.99).trace(c);
    for (name, job) in [
        (shapes::GROUP_POOL, Job::GroupPool(dir)),
        (shapes::GROUP_ZIPF, Job::GroupTrace(&zipf, pages, dir)),
    ] {
        let line = row(name, job, a.capacity, &mut gaps)?;
        tell(notes, say, line);
    }
    // The object store's tiers, at a quarter of C (each read goes through
    // the store's async path: a quarter of the reads).
    let cs = (c / 4).max(1024);
    for w in [Workload::Zipf(0.99), Workload::Loop] {
        let (trace, pages) = w.trace(cs);
        let name = format!("store mem: {}", w.name());
        let line = row(&name, Job::Store(&trace, pages), cs * PAGE, &mut gaps)?;
        tell(notes, say, line);
    }
    let (trace, pages) = Workload::Zipf(0.99).trace(cs);
    store::disk_rows(&trace, pages, cs, &mut |line| tell(notes, say, line))?;
    // About as many page reads as the others (a Get reads a block, most
    // often over two pages).
    match dbtrace::record(dir, c, TRACE_CAPACITIES * c / 2)? {
        Ok(t) => {
            let job = Job::Trace(&t.pages, t.file_pages);
            let line = row("db_bench readrand", job, a.capacity, &mut gaps)?;
            tell(notes, say, line);
            notes.push(format!(
                "db_bench readrand: {} page reads from {} pread64 calls on {} files of {} \
                 (recorded with strace)",
                t.pages.len(),
                t.preads,
                t.files,
                fmt_size(t.file_pages * PAGE)
            ));
        }
        Err(why) => dbtrace::skipped("advisor", "db_bench readrand", &why, notes, say)?,
    }
    fio::rows(a.capacity, dir, &mut gaps, notes, say)?;
    let line = gaps.summary();
    tell(notes, say, line);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_stay_inside_their_files() {
        for w in WORKLOADS {
            let (trace, pages) = w.trace(64);
            assert_eq!(trace.len() as u64, TRACE_CAPACITIES * 64);
            assert!(trace.iter().all(|&p| p < pages), "{}", w.name());
        }
    }

    #[test]
    fn a_zipf_trace_follows_its_law() {
        // The hottest page's share is 1 / sum(i^-s): within a tenth.
        for s in [0.8, 0.99, 1.2] {
            let (trace, n) = Workload::Zipf(s).trace(256);
            let mut counts = std::collections::HashMap::new();
            for p in &trace {
                *counts.entry(*p).or_insert(0u64) += 1;
            }
            let top = *counts.values().max().unwrap() as f64 / trace.len() as f64;
            let want = 1.0 / (1..=n).map(|i| (i as f64).powf(-s)).sum::<f64>();
            assert!(
                (top / want - 1.0).abs() < 0.1,
                "zipf {s}: {top} against {want}"
            );
        }
    }

    /// The measured part is the curve's window at the trace's end, all of
    /// the trace when the window is longer (a short trace's window holds
    /// its warm-up), the second half with no window.
    #[test]
    fn a_hit_ratio_is_measured_over_the_reads_the_curve_covered() {
        assert_eq!(measured_from(1000, None), 500);
        assert_eq!(measured_from(1000, Some(300)), 700);
        assert_eq!(measured_from(1000, Some(1000)), 0);
        assert_eq!(measured_from(1000, Some(u64::MAX)), 0);
        // Through a cache: the 1x hit ratio measured over the curve's
        // window is the curve's 1x point (the same reads, the same cache).
        let (trace, pages) = Workload::Zipf(0.99).trace(1024);
        let (_, curve) = run_trace(&trace, pages, 4 << 20, None).unwrap();
        let (measured, _) = run_trace(&trace, pages, 4 << 20, Some(curve.accesses)).unwrap();
        let one = curve.at(1.0).unwrap();
        assert!((measured - one).abs() < 0.002, "{measured} against {one}");
    }

    #[test]
    fn the_one_x_point_is_the_hit_ratio_the_cache_had() {
        let (trace, pages) = Workload::Zipf(0.99).trace(1024);
        let (_, curve) = run_trace(&trace, pages, 4 << 20, None).unwrap();
        assert!(curve.accesses > 0);
        let one = curve.at(1.0).unwrap();
        let quarter = curve
            .at(0.25)
            .expect("a point below 1x is known at the trace's end");
        assert!(quarter <= one, "{curve:?}");
        // 4x needs reuse distances of 4 C, which a trace this short may not
        // have settled yet (`CurvePoint::known`): checked where it is known.
        if let Some(four) = curve.at(4.0) {
            assert!(four >= one, "{curve:?}");
        }
    }
}
