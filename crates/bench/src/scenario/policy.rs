//! The `policy` scenario (by name only): which replacement policy, over
//! traces of page reads, against Belady's MIN (the bound: no policy of
//! the same capacity misses less). Each trace is replayed through the
//! cache itself (a file in memory per file of the trace, random-advised
//! 4 KiB reads: one page a read, no readahead), through a page-level
//! model of its policy ([`sim::TwoLists`], which checks the model
//! against the cache), and through the candidates: the two lists with
//! one-pass streams evicted first, S3-FIFO, ARC, and an exact LRU.
//!
//! The traces: a hot reader over C/5 beside 4 scans of 5 C each (the
//! hot reader reading once every 1, 4 or 16 scan reads: between two
//! reads of a hot page the scans read 0.2, 0.8 or 3.2 C), a zipf 0.99
//! over 4 C, a loop over 1.1 C, the `advisor`'s scan beside a hot C/2,
//! a file of C/2 read from start to end again and again beside a zipf
//! over 4 C (where evicting streams first could lose), and `db_bench
//! readrandom` over a database of about 3.3 C (recorded
//! with strace, [`super::traces::dbtrace`], where it is installed).
//! Per trace: each policy's misses over MIN's, and where the trace has
//! a hot reader, its hit ratio after its warm-up. docs/design.md
//! (section 7) says what was kept and why.

use std::path::Path;

use anyhow::{bail, Result};
use backing::{Backing, MemBacking};
use foliocache::{Advice, Cache, PressureConfig};

use super::tell;
use super::traces::{dbtrace, Workload};
use super::{capacity_at_least, FullQuick, Program, Scenario};
use crate::args::BenchArgs;
use crate::units::fmt_size;

pub mod sim;

use sim::{Policy, Read};

/// C, full and with `--quick` (`--capacity` overrides it).
const CAPACITY: FullQuick<u64> = FullQuick(64 << 20, 16 << 20);

/// The page size the traces read in.
const PAGE: u64 = 4096;

/// Scan reads per hot read in the hot-beside-scans traces.
const SCAN_PER_HOT: [u64; 3] = [1, 4, 16];

/// The scans beside the hot reader, and each one's size in capacities.
const SCANS: u32 = 4;
const SCAN_CAPACITIES: u64 = 5;

/// The policies replayed, in the table's order (MIN first, apart).
const POLICIES: [&str; 6] = ["cache", "model", "streams", "S3-FIFO", "ARC", "LRU"];

/// What the scenario runs: its capacity.
#[derive(Debug, Clone)]
pub struct PolicyBench {
    /// C, in bytes.
    pub capacity: u64,
}

/// A trace: its reads, the size of each of its files in pages, and its
/// hot reader, if any.
pub struct Trace {
    /// Its name in the table.
    pub name: String,
    /// The reads, in order.
    pub reads: Vec<Read>,
    /// Each file's pages (file `i` is `file_pages[i]`).
    pub file_pages: Vec<u64>,
    /// The hot reader's reads: those of this file below this page, after
    /// this many reads of the trace (its warm-up).
    pub hot: Option<(u32, u64, usize)>,
}

impl Trace {
    /// Whether read `i` is one of the hot reader's, past its warm-up.
    fn is_hot(&self, i: usize) -> bool {
        self.hot.is_some_and(|(file, below, skip)| {
            let r = self.reads[i];
            i >= skip && r.file == file && r.page < below
        })
    }
}

/// A hot reader over C/5 (file 0, warmed first: each page read once in
/// a random order) beside [`SCANS`] scans of [`SCAN_CAPACITIES`] C each
/// (files 1 to 4, each its own reader, taking turns), one hot read every
/// `per_hot` scan reads, uniform over the hot file.
pub fn hot_beside_scans(c: u64, per_hot: u64) -> Trace {
    let hot = (c / 5).max(1);
    let mut warm: Vec<u64> = (0..hot).collect();
    warm.sort_by_key(|&p| crate::data::mix(p ^ 0x5eed));
    let mut reads: Vec<Read> = warm
        .iter()
        .map(|&page| Read {
            reader: 0,
            file: 0,
            page,
        })
        .collect();
    let skip = reads.len();
    let mut n = 0u64;
    for page in 0..SCAN_CAPACITIES * c {
        for s in 1..=SCANS {
            reads.push(Read {
                reader: s,
                file: s,
                page,
            });
            n += 1;
            if n.is_multiple_of(per_hot) {
                reads.push(Read {
                    reader: 0,
                    file: 0,
                    page: crate::data::mix(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % hot,
                });
            }
        }
    }
    let mut file_pages = vec![hot];
    file_pages.extend([SCAN_CAPACITIES * c; SCANS as usize]);
    Trace {
        name: format!("hot C/5 + 4 scans, 1:{per_hot}"),
        reads,
        file_pages,
        hot: Some((0, hot, skip)),
    }
}

/// One of the advisor's workloads over C of `c` pages, one file; the
/// scan beside a hot set is two readers (the hot pages, and the scan's).
fn advisor_trace(w: Workload, c: u64) -> Trace {
    let (pages, file) = w.trace(c);
    let hot = matches!(w, Workload::ScanHot).then_some(c / 2);
    let reads = pages
        .into_iter()
        .map(|page| Read {
            reader: u32::from(hot.is_some_and(|h| page >= h)),
            file: 0,
            page,
        })
        .collect();
    Trace {
        name: w.name(),
        reads,
        file_pages: vec![file],
        hot: hot.map(|h| (0, h, 0)),
    }
}

/// A file of C/2 read again and again from start to end (a small table
/// scanned over and over) beside a zipf 0.99 over 4 C, taking turns: the
/// stream a policy that evicts streams first could lose.
fn loop_beside_zipf(c: u64) -> Trace {
    let (zipf, pages) = Workload::Zipf(0.99).trace(c);
    let small = (c / 2).max(1);
    let reads = zipf
        .into_iter()
        .enumerate()
        .map(|(i, page)| match i % 2 {
            0 => Read {
                reader: 0,
                file: 0,
                page,
            },
            _ => Read {
                reader: 1,
                file: 1,
                page: (i as u64 / 2) % small,
            },
        })
        .collect();
    Trace {
        name: "loop C/2 + zipf 0.99 4C".into(),
        reads,
        file_pages: vec![pages, small],
        hot: None,
    }
}

/// The scenario (`--capacity` sets C).
///
/// # Errors
/// A capacity under 4 MiB.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let capacity = capacity_at_least(
        args,
        CAPACITY.get(quick),
        4 << 20,
        "policy scenario: a capacity of",
    )?;
    Ok(Scenario {
        name: "policy".into(),
        description: format!(
            "Which replacement policy: traces of 4 KiB page reads replayed with room for C = {} \
             through the cache itself (random-advised reads of files in memory), a page-level \
             model of its two lists, the two lists with one-pass streams evicted first, \
             S3-FIFO, ARC and an exact LRU; each one's misses over Belady's MIN's, and a hot \
             reader's hit ratio where the trace has one.",
            fmt_size(capacity)
        ),
        jobs: Vec::new(),
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
        programs: Some(Program::Policy(PolicyBench { capacity })),
    })
}

/// Replays `trace` through a cache of `c` pages: whether each read hit
/// (its page cached just before it, `File::cachestat`).
pub fn through_the_cache(trace: &Trace, c: u64) -> Result<Vec<bool>> {
    let cache = Cache::builder()
        .capacity((c * PAGE) as usize)
        .pressure(PressureConfig::off())
        .build()?;
    let files = trace
        .file_pages
        .iter()
        .map(|&pages| -> Result<foliocache::File> {
            let b = MemBacking::new();
            b.set_len(pages * PAGE)?;
            let f = cache.open_backing(b)?;
            f.advise(0, 0, Advice::Random)?;
            Ok(f)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut buf = vec![0u8; PAGE as usize];
    trace
        .reads
        .iter()
        .map(|r| -> Result<bool> {
            let f = &files[r.file as usize];
            let off = r.page * PAGE;
            let hit = f.cachestat(off, PAGE)?.cached == 1;
            f.read_at(&mut buf, off)?;
            Ok(hit)
        })
        .collect()
}

/// Replays `trace` through the policy `name` with room for `c` pages.
pub fn through(name: &str, trace: &Trace, c: u64) -> Result<Vec<bool>> {
    let c = c as usize;
    let mut p: Box<dyn Policy> = match name {
        "cache" => return through_the_cache(trace, c as u64),
        "model" => Box::new(sim::TwoLists::new(c, false)),
        "streams" => Box::new(sim::TwoLists::new(c, true)),
        "S3-FIFO" => Box::new(sim::S3Fifo::new(c)),
        "ARC" => Box::new(sim::Arc::new(c)),
        "LRU" => Box::new(sim::Lru::new(c)),
        other => bail!("policy scenario: no policy {other}"),
    };
    Ok(trace.reads.iter().map(|r| p.read(*r)).collect())
}

/// A trace's rows: each policy's misses over MIN's, and the hot reader's
/// hit ratio under each (MIN's first).
pub fn rows(trace: &Trace, c: u64) -> Result<(String, Option<String>)> {
    let keys: Vec<u64> = trace.reads.iter().map(|r| r.key()).collect();
    let (min, _) = crate::lru::min_replay(c as usize, &keys);
    let misses = |hit: &[bool]| hit.iter().filter(|&&h| !h).count().max(1) as f64;
    let hot_ratio = |hit: &[bool]| {
        let (mut n, mut h) = (0u64, 0u64);
        for (i, &x) in hit.iter().enumerate() {
            if trace.is_hot(i) {
                n += 1;
                h += u64::from(x);
            }
        }
        h as f64 / n.max(1) as f64
    };
    let min_misses = misses(&min[..]);
    let mut cells = Vec::new();
    let mut hot = vec![format!("{:>8.3}", hot_ratio(&min[..]))];
    for name in POLICIES {
        let hit = through(name, trace, c)?;
        cells.push(format!("{:>7.2}x", misses(&hit[..]) / min_misses));
        hot.push(format!("{:>8.3}", hot_ratio(&hit[..])));
    }
    let row = format!(
        "{:<26} {:>9} {:>9}  {}",
        trace.name,
        trace.reads.len(),
        min_misses as u64,
        cells.join(" ")
    );
    let hot = trace.hot.is_some().then(|| {
        let cells: Vec<String> = std::iter::once("MIN")
            .chain(POLICIES)
            .zip(&hot)
            .map(|(n, v)| format!("{n} {}", v.trim()))
            .collect();
        format!("{:<26} hot hit ratio: {}", "", cells.join(", "))
    });
    Ok((row, hot))
}

/// Runs the scenario, saying a row per trace (and one of the hot
/// reader's hit ratios where it has one). The db_bench trace is recorded
/// in a directory of `dir`.
///
/// # Errors
/// A cache that cannot be built or a read that fails; the db_bench trace
/// failing to record where its programs are installed, or (under
/// `CI=true`) missing.
pub fn run(a: &PolicyBench, dir: &Path, notes: &mut Vec<String>, say: &dyn Fn(&str)) -> Result<()> {
    let c = a.capacity / PAGE;
    let head = format!(
        "{:<26} {:>9} {:>9}  {}   (misses / MIN's)",
        "trace (C pages)",
        "reads",
        "MIN miss",
        POLICIES.map(|p| format!("{p:>8}")).join(" ")
    );
    tell(notes, say, head);
    let mut traces: Vec<Trace> = SCAN_PER_HOT
        .iter()
        .map(|&k| hot_beside_scans(c, k))
        .collect();
    traces.extend(
        [Workload::Zipf(0.99), Workload::Loop, Workload::ScanHot]
            .into_iter()
            .map(|w| advisor_trace(w, c)),
    );
    traces.push(loop_beside_zipf(c));
    // A database of about 3.3 C (the recording makes one of about 4 x
    // its `c`), about 24 C of page reads (a Get reads two pages, mostly).
    match dbtrace::record(dir, c * 33 / 40, 12 * c)? {
        Ok(t) => traces.push(Trace {
            name: format!("db_bench readrandom {:.1}C", t.file_pages as f64 / c as f64),
            reads: t
                .pages
                .into_iter()
                .map(|page| Read {
                    reader: 0,
                    file: 0,
                    page,
                })
                .collect(),
            file_pages: vec![t.file_pages],
            hot: None,
        }),
        Err(why) => dbtrace::skipped("policy", "db_bench readrandom", &why, notes, say)?,
    }
    for t in &traces {
        let (row, hot) = rows(t, c)?;
        for line in std::iter::once(row).chain(hot) {
            tell(notes, say, line);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_beside_scans_reads_each_scan_once_and_the_hot_file_at_its_rate() {
        let t = hot_beside_scans(100, 4);
        let scan = t.reads.iter().filter(|r| r.file > 0).count() as u64;
        assert_eq!(scan, u64::from(SCANS) * SCAN_CAPACITIES * 100);
        let hot = (0..t.reads.len()).filter(|&i| t.is_hot(i)).count() as u64;
        assert_eq!(hot, scan / 4);
        assert!(t
            .reads
            .iter()
            .all(|r| r.page < t.file_pages[r.file as usize]));
    }

    #[test]
    fn the_model_follows_the_cache() {
        // The page-level model of the two lists against the cache itself,
        // on a zipf and beside scans: within 2 points of hit ratio.
        let c = 1024;
        for t in [
            advisor_trace(Workload::Zipf(0.99), c),
            hot_beside_scans(c, 4),
        ] {
            let ratio = |h: Vec<bool>| h.iter().filter(|&&x| x).count() as f64 / h.len() as f64;
            let cache = ratio(through("cache", &t, c).unwrap());
            let model = ratio(through("model", &t, c).unwrap());
            assert!(
                (cache - model).abs() < 0.02,
                "{}: cache {cache}, model {model}",
                t.name
            );
        }
    }
}
