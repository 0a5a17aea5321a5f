//! The `scans` scenario (by name only): hot point reads beside concurrent
//! scans. A hot reader makes random 4 KiB reads of a file of C/5, first
//! alone (solo) and then beside [`SCANS`] threads, each reading a file of
//! [`SCAN_CAPACITIES`] C once, start to end, in 64 KiB reads. Two modes,
//! a run each: back to back (each read as the last ends: its reads per
//! second), and at a fixed rate (the slowest back to back solo rate of
//! the first round over [`PACE_SHARE`], the same for every contender and
//! round, so solo the reader is idle most of the time; each read's
//! latency counts from when it was due, so a stall counts for every read
//! it held up, not just the one it hit). Three contenders, in turn within
//! each round and mode (the order rotating from round to round):
//! foliocache (a private cache of C, this process, its threads), the
//! kernel's page cache with this process in a memory cgroup limited to C
//! ([`MemCgroup`]), and the bound: foliocache's hot reader beside
//! [`SCANS`] threads that copy memory for as long as the solo phase,
//! touching no cache (what the scheduler alone does to the hot reader's
//! tail with five threads on the host's CPUs).
//!
//! ```text
//!   a run: cold cache of C; warm the hot file (each page read once, random order)
//!   hot reader (back to back, or fixed rate): |<- solo ->|<- beside the scans ->| stop
//!   scans (4 threads):                                   | files 1..4 of 5 C each, once, in 64 KiB |
//!   a round: every contender back to back, then every contender at the fixed rate
//! ```
//!
//! Per contender, mode and phase: the hot reader's hit ratio (a read that
//! would have waited for IO, told by a NOWAIT read first as
//! [`hot::read_one`] does, is a miss; a read is one page, so the ratio is
//! in bytes too), its reads per second and latency percentiles (the
//! NOWAIT try and, on a miss, the read; at the fixed rate, from when the
//! read was due); and what ran beside it: bytes per second and CPU
//! seconds per second. The ratios of the issue's targets, medians over
//! the rounds (`--repeat`): the hit ratio beside the scans over solo at
//! the fixed rate (at least 0.95), foliocache's hot reads per second
//! beside the scans over the kernel's back to back (at least 1.5), the
//! p99 beside the scans over solo at the fixed rate (at most 1.2), beside
//! the bound's.

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
/// How long the hot reader reads alone, full and with `--quick` (and how
/// long the bound's threads burn CPU beside it).
const SOLO: FullQuick<Duration> = FullQuick(Duration::from_secs(2), Duration::from_millis(300));
/// The scans, and each one's file in capacities.
pub const SCANS: usize = 4;
const SCAN_CAPACITIES: u64 = 5;
/// The scans' reads, and the hot reader's.
const SCAN_BS: u64 = 64 << 10;
const HOT_BS: u64 = 4096;
/// The fixed rate is the back to back solo rate over this: solo, the
/// reader reads about 1 % of the time, the margin that keeps its schedule
/// whatever a read or a wake-up costs on the host.
const PACE_SHARE: f64 = 100.0;
/// The longest the fixed-rate reader sleeps at once, so that it sees the
/// phase end soon.
const MAX_SLEEP: Duration = Duration::from_millis(5);
/// What a bound's thread copies from, over and over (no file, no cache).
const BURN_BYTES: usize = 4 << 20;

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
    /// The fixed rate, reads per second (`--hot-rate`); `None`: the
    /// slowest back to back solo rate of the first round over
    /// `PACE_SHARE`.
    pub rate: Option<u64>,
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
            "Hot point reads beside concurrent scans: random {} reads of a {} file (C/5), alone \
             and then beside {SCANS} threads each reading a {} file (5 C) once in {} reads, back \
             to back and then at a fixed rate (the slowest solo back to back rate of round 1 / {PACE_SHARE}, each \
             read timed from when it was due); foliocache with a cache of C = {} against the \
             kernel with the process in a memory cgroup of C, cold, and the bound (foliocache's \
             hot reader beside {SCANS} threads copying memory), in turn. The hot reader's hit \
             ratio (reads that did not wait for IO), reads per second and latency percentiles, \
             solo and beside the scans.",
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
            rate: args.hot_rate.filter(|&r| r > 0),
        })),
    })
}

/// The contenders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Foliocache,
    Kernel,
    /// foliocache's hot reader beside threads that only burn CPU.
    Bound,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Foliocache => "foliocache",
            Contender::Kernel => "kernel",
            Contender::Bound => "bound",
        }
    }
}

/// How the hot reader issues its reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pace {
    /// Each read as the last ends; a read's latency is its own time.
    BackToBack,
    /// Read `i` of a phase is due `i` periods (nanoseconds) after the
    /// phase starts; its latency counts from then.
    Fixed { period_ns: f64 },
}

impl Pace {
    /// When read `i` of a phase that started at `t0` is due.
    fn due(self, t0: Instant, i: u64) -> Instant {
        match self {
            Pace::BackToBack => t0,
            Pace::Fixed { period_ns } => t0 + Duration::from_nanos((i as f64 * period_ns) as u64),
        }
    }
}

/// The hot reader's figures over one phase.
#[derive(Debug, Default, Clone)]
struct Phase {
    reads: u64,
    misses: u64,
    /// Reads due at the fixed rate but not started when the phase ended
    /// (each in `hist`, timed from when it was due to the end).
    owed: u64,
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

    /// The `q` quantile, in microseconds.
    fn us(&self, q: f64) -> f64 {
        self.hist.percentile(q) as f64 / 1e3
    }

    /// The 99th percentile, in microseconds.
    fn p99_us(&self) -> f64 {
        self.us(0.99)
    }

    /// Ends a phase that started at `t0` at `now`, `issued` reads in: at
    /// the fixed rate, the reads due but not started count with their
    /// wait so far (a stall that outlasts the phase still counts).
    fn close(&mut self, pace: Pace, t0: Instant, issued: u64, now: Instant) {
        self.secs = now.duration_since(t0).as_secs_f64();
        if let Pace::Fixed { .. } = pace {
            let mut i = issued;
            while pace.due(t0, i) <= now {
                self.hist
                    .record(now.duration_since(pace.due(t0, i)).as_nanos() as u64);
                self.owed += 1;
                i += 1;
            }
        }
    }

    fn describe(&self) -> String {
        let owed = if self.owed > 0 {
            format!(" ({} owed at the end)", self.owed)
        } else {
            String::new()
        };
        format!(
            "hit {:.3}, {:.1}k reads/s{owed}, p50/p99/p99.9 {:.1}/{:.1}/{:.1} us",
            self.hit_ratio(),
            self.reads_per_s() / 1e3,
            self.us(0.5),
            self.us(0.99),
            self.us(0.999)
        )
    }
}

/// One mode's figures: the hot reader solo and beside, and what ran
/// beside it (bytes and CPU seconds, each per second).
#[derive(Debug, Clone, Default)]
struct ModeFigures {
    solo: Phase,
    beside: Phase,
    beside_bps: f64,
    beside_cpu: f64,
}

impl ModeFigures {
    fn describe(&self) -> String {
        format!(
            "solo: {}; beside: {}; beside ran {:.0} MiB/s on {:.2} CPUs",
            self.solo.describe(),
            self.beside.describe(),
            self.beside_bps / f64::from(1u32 << 20),
            self.beside_cpu
        )
    }
}

/// A contender's figures in a round: back to back, and at the fixed
/// rate.
#[derive(Debug, Clone)]
struct RunFigures {
    back: ModeFigures,
    fixed: ModeFigures,
}

/// The hot file and the scans' files.
struct Files {
    hot: PathBuf,
    scans: Vec<PathBuf>,
}

/// What runs beside the hot reader in its second phase.
#[derive(Clone, Copy)]
enum Beside<'a> {
    /// A scan of each file, once.
    Scans(&'a [HotFile]),
    /// [`SCANS`] threads copying memory for this long.
    Burn(Duration),
}

/// The hot reader: random reads of `HOT_BS` over `file` until `stage`
/// reaches 2, at `pace`, its figures kept per stage (0: solo, 1: beside
/// the scans).
fn hot_reader(
    file: &HotFile,
    probe: hot::MissProbe,
    len: u64,
    stage: &AtomicU8,
    pace: Pace,
) -> io::Result<[Phase; 2]> {
    if pace != Pace::BackToBack {
        sys::precise_timers()?;
    }
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
    let (mut cur, mut t0, mut issued) = (0usize, Instant::now(), 0u64);
    loop {
        let s = usize::from(stage.load(Ordering::Relaxed));
        if s != cur {
            let now = Instant::now();
            phases[cur].close(pace, t0, issued, now);
            if s >= phases.len() {
                return Ok(phases);
            }
            (cur, t0, issued) = (s, now, 0);
        }
        let start = match pace {
            Pace::BackToBack => Instant::now(),
            Pace::Fixed { .. } => {
                let (due, now) = (pace.due(t0, issued), Instant::now());
                if due > now {
                    std::thread::sleep((due - now).min(MAX_SLEEP));
                    continue;
                }
                due
            }
        };
        issued += 1;
        let hit = hot::read_one(file, probe, b, offs.next())?;
        let p = &mut phases[cur];
        p.hist.record(start.elapsed().as_nanos() as u64);
        p.reads += 1;
        p.misses += u64::from(!hit);
    }
}

/// Reads `file` from start to end in `SCAN_BS` reads: its bytes and the
/// thread's CPU time.
fn scan(file: &HotFile) -> io::Result<(u64, Duration)> {
    let cpu0 = sys::thread_cpu_time();
    let mut buf = vec![0u8; SCAN_BS as usize];
    let mut off = 0u64;
    loop {
        let n = match file {
            HotFile::Kernel(f) => std::os::unix::fs::FileExt::read_at(f, &mut buf, off)?,
            HotFile::Folio(f) => f.read_at(&mut buf, off)?,
        };
        if n == 0 {
            return Ok((off, sys::thread_cpu_time().saturating_sub(cpu0)));
        }
        off += n as u64;
    }
}

/// Copies `SCAN_BS` at a time out of [`BURN_BYTES`] of its own memory for
/// `how_long`, touching no file: its bytes and the thread's CPU time.
fn burn(how_long: Duration) -> io::Result<(u64, Duration)> {
    let cpu0 = sys::thread_cpu_time();
    let src: Vec<u8> = (0..BURN_BYTES).map(|i| i as u8).collect();
    let mut buf = vec![0u8; SCAN_BS as usize];
    let (t, mut bytes) = (Instant::now(), 0u64);
    while t.elapsed() < how_long {
        let at = (bytes % BURN_BYTES as u64) as usize;
        buf.copy_from_slice(&src[at..at + SCAN_BS as usize]);
        std::hint::black_box(&mut buf);
        bytes += SCAN_BS;
    }
    Ok((bytes, sys::thread_cpu_time().saturating_sub(cpu0)))
}

/// The hot reader at `pace`, alone for `solo` and then beside `beside`:
/// its figures, and those of what ran beside it.
fn phases(
    hot_file: &HotFile,
    probe: hot::MissProbe,
    len: u64,
    beside: Beside<'_>,
    solo: Duration,
    pace: Pace,
) -> Result<ModeFigures> {
    let stage = AtomicU8::new(0);
    std::thread::scope(|s| -> Result<ModeFigures> {
        let reader = s.spawn(|| hot_reader(hot_file, probe, len, &stage, pace));
        std::thread::sleep(solo);
        stage.store(1, Ordering::Relaxed);
        let t = Instant::now();
        let threads: Vec<_> = match beside {
            Beside::Scans(files) => files.iter().map(|f| s.spawn(move || scan(f))).collect(),
            Beside::Burn(d) => (0..SCANS).map(|_| s.spawn(move || burn(d))).collect(),
        };
        let (mut bytes, mut cpu) = (0, Duration::ZERO);
        for th in threads {
            let (b, c) = th
                .join()
                .map_err(|_| anyhow::anyhow!("a scan panicked"))?
                .context("a scan")?;
            (bytes, cpu) = (bytes + b, cpu + c);
        }
        let secs = t.elapsed().as_secs_f64();
        stage.store(2, Ordering::Relaxed);
        let [solo, beside] = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the hot reader panicked"))?
            .context("the hot reader")?;
        Ok(ModeFigures {
            solo,
            beside,
            beside_bps: bytes as f64 / secs,
            beside_cpu: cpu.as_secs_f64() / secs,
        })
    })
}

/// Warms the hot file and runs the hot reader at `pace`: solo for
/// `solo`, then beside `beside`.
fn measure(
    hot_file: &HotFile,
    files: &Files,
    beside: Beside<'_>,
    solo: Duration,
    pace: Pace,
) -> Result<ModeFigures> {
    let probe = hot::probe(hot_file, HOT_BS)?;
    hot::warm(hot_file, &files.hot, HOT_BS)?;
    let len = match hot_file {
        HotFile::Kernel(f) => f.metadata()?.len(),
        HotFile::Folio(f) => f.len(),
    };
    phases(hot_file, probe, len, beside, solo, pace)
}

/// One run of `who`, cold: a new cache of C, or the files dropped from
/// the kernel's page cache and the process in a new cgroup of C.
fn one_run(
    who: Contender,
    a: &ScansBench,
    files: &Files,
    avail: &Availability,
    pace: Pace,
) -> Result<ModeFigures> {
    match who {
        Contender::Foliocache | Contender::Bound => {
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
            if who == Contender::Bound {
                return measure(&hot_file, files, Beside::Burn(a.solo), a.solo, pace);
            }
            let scans = files.scans.iter().map(open).collect::<Result<Vec<_>>>()?;
            measure(&hot_file, files, Beside::Scans(&scans), a.solo, pace)
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
            measure(&hot_file, files, Beside::Scans(&scans), a.solo, pace)
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

/// A mode's hit ratio beside the scans over solo.
fn kept(m: &ModeFigures) -> f64 {
    m.beside.hit_ratio() / m.solo.hit_ratio().max(1e-9)
}

/// A mode's p99 beside the scans over solo.
fn p99_growth(m: &ModeFigures) -> f64 {
    m.beside.p99_us() / m.solo.p99_us().max(1e-9)
}

/// The ratios of the targets, a line each, from the runs of each
/// contender (the kernel's may be empty; the bound's too).
fn summary(folio: &[RunFigures], kernel: &[RunFigures], bound: &[RunFigures]) -> Vec<String> {
    let of = |r: &[RunFigures], f: fn(&ModeFigures) -> f64, fixed: bool| {
        med(r, |x| f(if fixed { &x.fixed } else { &x.back }))
    };
    let kernel_of = |f: fn(&ModeFigures) -> f64, fixed: bool| {
        if kernel.is_empty() {
            String::new()
        } else {
            format!(" (kernel {:.2}x)", of(kernel, f, fixed))
        }
    };
    let mut lines = Vec::new();
    let k = of(folio, kept, true);
    lines.push(format!(
        "hot hit ratio beside the scans / solo, fixed rate: foliocache {k:.3}x{} (target >= \
         {HIT_KEPT}x: {}); back to back: foliocache {:.3}x{}",
        kernel_of(kept, true),
        judged(k, HIT_KEPT, true),
        of(folio, kept, false),
        kernel_of(kept, false)
    ));
    if !kernel.is_empty() {
        let over = med(folio, |f| f.back.beside.reads_per_s())
            / med(kernel, |f| f.back.beside.reads_per_s());
        lines.push(format!(
            "hot reads/s beside the scans, foliocache / kernel, back to back: {over:.2}x (target \
             >= {OVER_KERNEL}x: {})",
            judged(over, OVER_KERNEL, true)
        ));
    }
    let p = of(folio, p99_growth, true);
    let against_bound = if bound.is_empty() {
        String::new()
    } else {
        let b = of(bound, p99_growth, true);
        let side = if b > P99_GROWTH { "below" } else { "above" };
        format!(
            "; the bound (beside {SCANS} threads burning CPU) {b:.2}x: the target is {side} it, \
             foliocache {:.2}x the bound",
            p / b.max(1e-9)
        )
    };
    lines.push(format!(
        "hot p99 beside the scans / solo, fixed rate: foliocache {p:.2}x{} (target <= \
         {P99_GROWTH}x: {}){against_bound}",
        kernel_of(p99_growth, true),
        judged(p, P99_GROWTH, false)
    ));
    lines.push(format!(
        "hot p99 beside the scans / solo, back to back: foliocache {:.2}x{}",
        of(folio, p99_growth, false),
        kernel_of(p99_growth, false)
    ));
    lines
}

/// Runs the scenario, `repeat` rounds of every contender (the order
/// rotating), saying a line per run and mode and then the ratios. The
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
    let mut contenders = vec![Contender::Foliocache, Contender::Bound];
    // Each scan holds a readahead window and its async window in flight:
    // where the device's windows make that more than C, the kernel's
    // cgroup cannot reclaim its way through them and its OOM killer ends
    // the whole bench (seen at C = 16 MiB with 8 MiB windows).
    let ra = crate::disk::readahead_bytes(&files.scans[0]).unwrap_or(0);
    match avail {
        Availability::Unavailable(why) => tell(
            notes,
            say,
            format!("note: the kernel is left out: no memory cgroup can be made here: {why}"),
        ),
        _ if 2 * SCANS as u64 * ra > a.capacity => tell(
            notes,
            say,
            format!(
                "note: the kernel is left out: {SCANS} scans' readahead windows of {} (the \
                 device's read_ahead_kb), two each in flight, do not fit its cgroup of {}",
                fmt_size(ra),
                fmt_size(a.capacity)
            ),
        ),
        Availability::Available { .. } => contenders.push(Contender::Kernel),
    }
    let (mut folio, mut kernel, mut bound) = (Vec::new(), Vec::new(), Vec::new());
    let mut rate = None;
    for round in 0..repeat.max(1) {
        let mut order = contenders.clone();
        order.rotate_left(round as usize % contenders.len());
        let mut back = Vec::new();
        for &who in &order {
            let m = one_run(who, a, &files, avail, Pace::BackToBack)?;
            let line = format!(
                "round {} {:<10} back to back: {}",
                round + 1,
                who.name(),
                m.describe()
            );
            tell(notes, say, line);
            back.push(m);
        }
        // One rate for every contender and round: `--hot-rate`, or the
        // slowest solo of the first round's, over PACE_SHARE.
        let r = *rate.get_or_insert_with(|| {
            if let Some(r) = a.rate {
                return r as f64;
            }
            let slowest = back
                .iter()
                .map(|m| m.solo.reads_per_s())
                .fold(f64::INFINITY, f64::min);
            (slowest / PACE_SHARE).max(1.0)
        });
        let pace = Pace::Fixed { period_ns: 1e9 / r };
        for (&who, back) in order.iter().zip(back) {
            let fixed = one_run(who, a, &files, avail, pace)?;
            let line = format!(
                "round {} {:<10} fixed rate {:.1}k/s: {}",
                round + 1,
                who.name(),
                r / 1e3,
                fixed.describe()
            );
            tell(notes, say, line);
            let figures = RunFigures { back, fixed };
            match who {
                Contender::Foliocache => folio.push(figures),
                Contender::Kernel => kernel.push(figures),
                Contender::Bound => bound.push(figures),
            }
        }
    }
    for line in summary(&folio, &kernel, &bound) {
        tell(notes, say, line);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
