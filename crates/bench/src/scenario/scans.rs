//! The `scans` scenario (by name only): hot point reads beside concurrent
//! scans. A hot reader makes random 4 KiB reads of a file of C/5, back to
//! back, first alone (solo) and then beside [`SCANS`] threads, each
//! reading a file of [`SCAN_CAPACITIES`] C once, start to end, in 64 KiB
//! reads. Two contenders, in turn within each round (the order
//! alternating from round to round): foliocache (a private cache of C,
//! this process, its threads) and the kernel's page cache with this
//! process in a memory cgroup limited to C ([`MemCgroup`]).
//!
//! ```text
//!   cold cache of C; warm the hot file (each page read once, random order)
//!   hot reader: random 4 KiB reads ......................................
//!               |<- solo --->|<- beside the scans ------------------->| stop
//!   scans (4 threads)        |  file 1..4 of 5 C each, once, in 64 KiB |
//! ```
//!
//! Per contender and phase: the hot reader's hit ratio (a read that would
//! have waited for IO, told by a NOWAIT read first as [`hot::read_one`]
//! does, is a miss; a read is one page, so the ratio is in bytes too), its
//! reads per second, and its 99th percentile latency (the NOWAIT try and,
//! on a miss, the read); and the scans' bandwidth. The ratios of the
//! issue's targets: the hit ratio beside the scans over solo (at least
//! 0.95), foliocache's hot reads per second beside the scans over the
//! kernel's (at least 1.5), the p99 beside the scans over solo (at most
//! 1.2); medians over the rounds (`--repeat`).

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use foliocache::Cache;

use super::{capacity_at_least, tell, FullQuick, Program, Scenario};
use crate::args::BenchArgs;
use crate::cgroup::{Availability, MemCgroup};
use crate::data::DataSet;
use crate::hist::Histogram;
use crate::hot::{self, HotFile};
use crate::job::Offsets;
use crate::report::median;
use crate::sys::{self, AlignedBuf};
use crate::units::fmt_size;

/// C, full and with `--quick` (`--capacity` overrides it).
const CAPACITY: FullQuick<u64> = FullQuick(64 << 20, 16 << 20);
/// The smallest C: the kernel's cgroup holds four scans' readahead in
/// flight beside the hot file.
const MIN_CAPACITY: u64 = 4 << 20;
/// How long the hot reader reads alone, full and with `--quick`.
const SOLO: FullQuick<Duration> = FullQuick(Duration::from_secs(2), Duration::from_millis(300));
/// The scans, and each one's file in capacities.
pub const SCANS: usize = 4;
const SCAN_CAPACITIES: u64 = 5;
/// The scans' reads, and the hot reader's.
const SCAN_BS: u64 = 64 << 10;
const HOT_BS: u64 = 4096;

/// The targets: hot hit ratio beside the scans over solo, at least;
/// foliocache's hot reads per second over the kernel's beside the scans,
/// at least; hot p99 beside the scans over solo, at most.
const HIT_KEPT: f64 = 0.95;
const OVER_KERNEL: f64 = 1.5;
const P99_GROWTH: f64 = 1.2;

/// What the scenario runs: its capacity and how long the hot reader reads
/// alone.
#[derive(Debug, Clone)]
pub struct ScansBench {
    /// C, in bytes.
    pub capacity: u64,
    /// The solo phase's length.
    pub solo: Duration,
}

/// The scenario. C is `--capacity`, or [`CAPACITY`].
///
/// # Errors
/// C is below [`MIN_CAPACITY`].
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let capacity = capacity_at_least(
        args,
        CAPACITY.get(quick),
        MIN_CAPACITY,
        "scans scenario: a capacity of",
    )?;
    Ok(Scenario {
        name: "scans".into(),
        description: format!(
            "Hot point reads beside concurrent scans: random {} reads of a {} file (C/5), back \
             to back, alone and then beside {SCANS} threads each reading a {} file (5 C) once \
             in {} reads; foliocache with a cache of C = {} against the kernel with the process \
             in a memory cgroup of C, cold, in turn. The hot reader's hit ratio (reads that did \
             not wait for IO), reads per second and p99 latency, solo and beside the scans.",
            fmt_size(HOT_BS),
            fmt_size(capacity / 5 / HOT_BS * HOT_BS),
            fmt_size(SCAN_CAPACITIES * capacity),
            fmt_size(SCAN_BS),
            fmt_size(capacity)
        ),
        jobs: Vec::new(),
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
        programs: Some(Program::Scans(ScansBench {
            capacity,
            solo: SOLO.get(quick),
        })),
    })
}

/// The contenders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Foliocache,
    Kernel,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Foliocache => "foliocache",
            Contender::Kernel => "kernel",
        }
    }
}

/// The hot reader's figures over one phase.
#[derive(Debug, Default, Clone)]
struct Phase {
    reads: u64,
    misses: u64,
    hist: Histogram,
    secs: f64,
}

impl Phase {
    fn hit_ratio(&self) -> f64 {
        (self.reads - self.misses) as f64 / self.reads.max(1) as f64
    }

    fn reads_per_s(&self) -> f64 {
        self.reads as f64 / self.secs.max(1e-9)
    }

    /// The 99th percentile, in microseconds.
    fn p99_us(&self) -> f64 {
        self.hist.percentile(0.99) as f64 / 1e3
    }

    fn describe(&self) -> String {
        format!(
            "hit {:.3}, {:.0}k reads/s, p99 {:.1} us",
            self.hit_ratio(),
            self.reads_per_s() / 1e3,
            self.p99_us()
        )
    }
}

/// One run's figures: solo, beside the scans, and the scans' bytes per
/// second.
#[derive(Debug, Clone)]
struct RunFigures {
    solo: Phase,
    beside: Phase,
    scan_bps: f64,
}

/// The hot file and the scans' files.
struct Files {
    hot: PathBuf,
    scans: Vec<PathBuf>,
}

/// The hot reader: random reads of `HOT_BS` over `file` until `stage`
/// reaches 2, its figures kept per stage (0: solo, 1: beside the scans).
fn hot_reader(
    file: &HotFile,
    probe: hot::MissProbe,
    len: u64,
    stage: &AtomicU8,
) -> io::Result<[Phase; 2]> {
    let mut buf = AlignedBuf::new(HOT_BS as usize, 0)?;
    let b = buf.as_mut_slice();
    let mut offs = Offsets::new(
        true,
        HOT_BS,
        (len / HOT_BS).max(1),
        0,
        0x9e37_79b9_7f4a_7c15,
    );
    let mut phases = [Phase::default(), Phase::default()];
    let (mut cur, mut t0) = (0usize, Instant::now());
    loop {
        let s = usize::from(stage.load(Ordering::Relaxed));
        if s != cur {
            phases[cur].secs = t0.elapsed().as_secs_f64();
            if s >= phases.len() {
                return Ok(phases);
            }
            (cur, t0) = (s, Instant::now());
        }
        let off = offs.next();
        let t = Instant::now();
        let hit = hot::read_one(file, probe, b, off)?;
        let p = &mut phases[cur];
        p.hist.record(t.elapsed().as_nanos() as u64);
        p.reads += 1;
        p.misses += u64::from(!hit);
    }
}

/// Reads `file` from start to end in `SCAN_BS` reads: its bytes.
fn scan(file: &HotFile) -> io::Result<u64> {
    let mut buf = vec![0u8; SCAN_BS as usize];
    let mut off = 0u64;
    loop {
        let n = match file {
            HotFile::Kernel(f) => std::os::unix::fs::FileExt::read_at(f, &mut buf, off)?,
            HotFile::Folio(f) => f.read_at(&mut buf, off)?,
        };
        if n == 0 {
            return Ok(off);
        }
        off += n as u64;
    }
}

/// Warms the hot file, lets the hot reader read alone for `solo`, then
/// runs the scans beside it.
fn measure(
    hot_file: &HotFile,
    files: &Files,
    scans: &[HotFile],
    solo: Duration,
) -> Result<RunFigures> {
    let probe = hot::probe(hot_file, HOT_BS)?;
    hot::warm(hot_file, &files.hot, HOT_BS)?;
    let len = match hot_file {
        HotFile::Kernel(f) => f.metadata()?.len(),
        HotFile::Folio(f) => f.len(),
    };
    let stage = AtomicU8::new(0);
    std::thread::scope(|s| -> Result<RunFigures> {
        let reader = s.spawn(|| hot_reader(hot_file, probe, len, &stage));
        std::thread::sleep(solo);
        stage.store(1, Ordering::Relaxed);
        let t = Instant::now();
        let threads: Vec<_> = scans.iter().map(|f| s.spawn(move || scan(f))).collect();
        let mut bytes = 0;
        for th in threads {
            bytes += th
                .join()
                .map_err(|_| anyhow::anyhow!("a scan panicked"))?
                .context("a scan")?;
        }
        let secs = t.elapsed().as_secs_f64();
        stage.store(2, Ordering::Relaxed);
        let [solo, beside] = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the hot reader panicked"))?
            .context("the hot reader")?;
        Ok(RunFigures {
            solo,
            beside,
            scan_bps: bytes as f64 / secs,
        })
    })
}

/// One run of `who`, cold: a new cache of C, or the files dropped from
/// the kernel's page cache and the process in a new cgroup of C.
fn one_run(
    who: Contender,
    a: &ScansBench,
    files: &Files,
    avail: &Availability,
) -> Result<RunFigures> {
    match who {
        Contender::Foliocache => {
            let cache = Cache::builder()
                .capacity(usize::try_from(a.capacity).context("capacity too large")?)
                .build()?;
            let open = |p: &PathBuf| -> Result<HotFile> {
                Ok(HotFile::Folio(
                    cache
                        .open(p)
                        .with_context(|| format!("opening {}", p.display()))?,
                ))
            };
            let hot_file = open(&files.hot)?;
            let scans = files.scans.iter().map(open).collect::<Result<Vec<_>>>()?;
            measure(&hot_file, files, &scans, a.solo)
        }
        Contender::Kernel => {
            let open = |p: &PathBuf| -> Result<HotFile> {
                let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
                sys::drop_cache(&f)?;
                Ok(HotFile::Kernel(f))
            };
            let hot_file = open(&files.hot)?;
            let scans = files.scans.iter().map(open).collect::<Result<Vec<_>>>()?;
            let cgroup = MemCgroup::create(avail, a.capacity)?;
            let _inside = cgroup.enter()?;
            measure(&hot_file, files, &scans, a.solo)
        }
    }
}

/// The median of `f` over `runs`.
fn med(runs: &[RunFigures], f: impl Fn(&RunFigures) -> f64) -> f64 {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

/// `x` against a target: `met` or `not met`.
fn judged(x: f64, bound: f64, at_least: bool) -> &'static str {
    if (at_least && x >= bound) || (!at_least && x <= bound) {
        "met"
    } else {
        "not met"
    }
}

/// The ratios of the targets, a line each, from the runs of each
/// contender (the kernel's may be empty).
fn summary(folio: &[RunFigures], kernel: &[RunFigures]) -> Vec<String> {
    let kept = |r: &[RunFigures]| med(r, |f| f.beside.hit_ratio() / f.solo.hit_ratio().max(1e-9));
    let p99 = |r: &[RunFigures]| med(r, |f| f.beside.p99_us() / f.solo.p99_us().max(1e-9));
    let mut lines = Vec::new();
    let (k, p) = (kept(folio), p99(folio));
    let kernel_of = |x: f64| {
        if kernel.is_empty() {
            String::new()
        } else {
            format!(" (kernel {x:.2}x)")
        }
    };
    lines.push(format!(
        "hot hit ratio beside the scans / solo: foliocache {k:.3}x{} (target >= {HIT_KEPT}x: {})",
        kernel_of(kept(kernel)),
        judged(k, HIT_KEPT, true)
    ));
    if !kernel.is_empty() {
        let over = med(folio, |f| f.beside.reads_per_s()) / med(kernel, |f| f.beside.reads_per_s());
        lines.push(format!(
            "hot reads/s beside the scans, foliocache / kernel: {over:.2}x (target >= \
             {OVER_KERNEL}x: {})",
            judged(over, OVER_KERNEL, true)
        ));
    }
    lines.push(format!(
        "hot p99 beside the scans / solo: foliocache {p:.2}x{} (target <= {P99_GROWTH}x: {})",
        kernel_of(p99(kernel)),
        judged(p, P99_GROWTH, false)
    ));
    lines
}

/// Runs the scenario, `repeat` rounds of both contenders (alternating
/// which goes first), saying a line per run and then the ratios. The
/// kernel is left out, with a note, where no memory cgroup can be made.
///
/// # Errors
/// Making the files, a cache, a cgroup, or a read failed.
pub fn run(
    a: &ScansBench,
    data: &mut DataSet,
    avail: &Availability,
    repeat: u32,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<()> {
    let hot_size = (a.capacity / 5 / HOT_BS * HOT_BS).max(HOT_BS);
    let files = Files {
        hot: data.files(hot_size, 1, false)?.remove(0),
        scans: data.files(SCAN_CAPACITIES * a.capacity, SCANS, false)?,
    };
    let mut contenders = vec![Contender::Foliocache];
    match avail {
        Availability::Available { .. } => contenders.push(Contender::Kernel),
        Availability::Unavailable(why) => tell(
            notes,
            say,
            format!("note: the kernel is left out: no memory cgroup can be made here: {why}"),
        ),
    }
    let (mut folio, mut kernel) = (Vec::new(), Vec::new());
    for round in 0..repeat.max(1) {
        let mut order = contenders.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for who in order {
            let r = one_run(who, a, &files, avail)?;
            tell(
                notes,
                say,
                format!(
                    "round {} {:<10} solo: {}; beside the scans: {}; scans {:.0} MiB/s",
                    round + 1,
                    who.name(),
                    r.solo.describe(),
                    r.beside.describe(),
                    r.scan_bps / f64::from(1u32 << 20)
                ),
            );
            match who {
                Contender::Foliocache => folio.push(r),
                Contender::Kernel => kernel.push(r),
            }
        }
    }
    for line in summary(&folio, &kernel) {
        tell(notes, say, line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(solo: (u64, u64, f64), beside: (u64, u64, f64)) -> RunFigures {
        let phase = |(reads, misses, secs): (u64, u64, f64)| Phase {
            reads,
            misses,
            hist: Histogram::new(),
            secs,
        };
        RunFigures {
            solo: phase(solo),
            beside: phase(beside),
            scan_bps: 0.0,
        }
    }

    #[test]
    fn the_summary_judges_each_ratio_against_its_target() {
        // foliocache keeps its hits and reads 2x the kernel's rate; the
        // kernel loses half its hits.
        let folio = vec![run_of((1000, 0, 1.0), (2000, 20, 1.0))];
        let kernel = vec![run_of((1000, 0, 1.0), (1000, 500, 1.0))];
        let lines = summary(&folio, &kernel);
        assert!(
            lines[0].contains("foliocache 0.990x (kernel 0.50x)"),
            "{lines:?}"
        );
        assert!(lines[0].ends_with(": met)"), "{lines:?}");
        assert!(
            lines[1].contains("2.00x") && lines[1].ends_with(": met)"),
            "{lines:?}"
        );
        // Without the kernel: no line against it.
        let lines = summary(&folio, &[]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(!lines[0].contains("kernel"), "{lines:?}");
    }
}
