//! `programs`: a real program, RocksDB's `db_bench` (Debian's
//! `rocksdb-tools`), three ways in one run: on a directory of the data's
//! filesystem itself (`ext4`: buffered, the kernel's page cache), through
//! a foliocache FUSE mount (`mount`, served in this process as the `fuse`
//! engine's is), and under the interposer (`interposer`:
//! `libfoliocache_preload.so`, set up as `foliocache run` sets it up).
//! Each way fills a database (`fillseq`), then reads it (`readseq`,
//! `readrandom`) verifying every block's checksum; the ways interleave,
//! in alternating order, round after round. Then a database larger than
//! memory, read at random in a memory cgroup three ways at equal memory
//! ([`larger`]: ext4, RocksDB's own block cache over `use_direct_reads`,
//! the interposer). Then a forked pool reading a file twice the memory
//! ([`pool`]: Python's `multiprocessing`, five ways at equal memory).
//! PostgreSQL's pgbench runs twice: on a database that fits ([`pgbench`])
//! and on one larger than its memory cgroup ([`pgbench_larger`]).
//! Where `db_bench` is not on
//! `PATH` the scenario says so and runs nothing. See `docs/bench/programs.md`.
//!
//! Unlike the other scenarios it has no jobs for the engines: [`run`]
//! starts the program itself and turns each benchmark's figures into a
//! [`RunRecord`], so the table, the ratios and the targets are the
//! other scenarios'.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::tell;
use super::{FullQuick, Program, Scenario};
use crate::args::BenchArgs;
use crate::cgroup::Availability;
use crate::engine::{FuseFigures, FuseMount};
use crate::report::{Latency, Perf, RunJob, RunRecord};
use crate::targets::{self, bandwidth, Given, JobRuns, Judged, Target};
use crate::units::{fmt_size, fmt_size_approx};

mod command;
pub mod larger;
mod output;
pub mod pgbench;
pub mod pgbench_larger;
pub mod pool;

use command::{checked, interposed, interposer_note, plain, DbRun};
use larger::{Larger, LARGER, LARGER_ALIGNED};
use output::{one_line, r_ops, DbResult};
use pgbench::{Pgbench, SHARED};
use pgbench_larger::{PgLarger, EXT4_25, EXT4_75};
use pool::{Pool, POOL, PRIVATE};

/// The program, and the Debian package that has it.
pub const PROGRAM: &str = "db_bench";
/// A comma-separated list of the jobs to run, where set: `db_bench` (the
/// [`BENCHMARKS`] three ways), `larger` ([`LARGER`]), `pgbench`
/// ([`pgbench`]), `pgbench-larger` ([`pgbench_larger`]; or one of its
/// sizes: `pgbench-larger-3x`, `pgbench-larger-10x`) and `pool`
/// ([`pool`]); all when unset.
const JOBS_ENV: &str = "FOLIOCACHE_PROGRAMS_JOBS";
const PACKAGE: &str = "rocksdb-tools";
/// The benchmarks measured, in the order they run; each is a job of the
/// scenario, by its name.
pub const BENCHMARKS: [&str; 4] = [FILLSEQ, READSEQ, READRANDOM, RESTART];
/// A fresh database filled in key order.
pub const FILLSEQ: &str = "fillseq";
/// The database read in key order (the second pass of a process).
pub const READSEQ: &str = "readseq";
/// Every key read at random.
pub const READRANDOM: &str = "readrandom";
/// The restart case: a database filled in one process (the interposer
/// saving its list of cached ranges at exit, as `foliocache run` does),
/// then a new process (loading that list) reads [`RESTART_PERCENT`]% of its
/// keys in order and as many at random: the random pass, measured, finds
/// what the kernel's page cache keeps across processes on ext4.
pub const RESTART: &str = "readrandom-restart";
/// The restart case's reads (`--reads`), in percent of the keys.
const RESTART_PERCENT: u64 = 30;
/// The scenario's ratios and targets, per benchmark: the interposer's
/// ops/s over ext4's (the targets), and the mount's.
#[rustfmt::skip]
pub const TARGETS: &[Target<&str>] = &[
    bandwidth(INTERPOSER, EXT4).of(FILLSEQ).at_least(0.9),
    bandwidth(MOUNT, EXT4).of(FILLSEQ),
    bandwidth(INTERPOSER, EXT4).of(READSEQ).at_least(1.0),
    bandwidth(MOUNT, EXT4).of(READSEQ),
    bandwidth(INTERPOSER, EXT4).of(READRANDOM).at_least(1.3),
    bandwidth(MOUNT, EXT4).of(READRANDOM),
    bandwidth(INTERPOSER, EXT4).of(RESTART).at_least(0.9),
    bandwidth(MOUNT, EXT4).of(RESTART),
    bandwidth(INTERPOSER, EXT4).of(LARGER).at_least(1.1),
    bandwidth(INTERPOSER, DIRECT).of(LARGER).at_least(1.0),
    bandwidth(DIRECT, EXT4).of(LARGER),
    bandwidth(INTERPOSER, EXT4).of(LARGER_ALIGNED),
    bandwidth(INTERPOSER, DIRECT).of(LARGER_ALIGNED),
    bandwidth(DIRECT, EXT4).of(LARGER_ALIGNED),
    bandwidth(SHARED, EXT4).of(pgbench::SELECT).at_least(1.2),
    bandwidth(SHARED, EXT4).of(pgbench::TPCB).at_least(1.0),
    bandwidth(INTERPOSER, EXT4_25).of(pgbench_larger::SELECT_3X).at_least(1.2),
    bandwidth(INTERPOSER, EXT4_75).of(pgbench_larger::SELECT_3X).at_least(1.2),
    bandwidth(INTERPOSER, EXT4_25).of(pgbench_larger::TPCB_3X).at_least(1.0),
    bandwidth(INTERPOSER, EXT4_75).of(pgbench_larger::TPCB_3X).at_least(1.0),
    bandwidth(INTERPOSER, EXT4_25).of(pgbench_larger::SELECT_10X).at_least(1.2),
    bandwidth(INTERPOSER, EXT4_75).of(pgbench_larger::SELECT_10X).at_least(1.2),
    bandwidth(INTERPOSER, EXT4_25).of(pgbench_larger::TPCB_10X).at_least(1.0),
    bandwidth(INTERPOSER, EXT4_75).of(pgbench_larger::TPCB_10X).at_least(1.0),
    bandwidth(INTERPOSER, EXT4).of(POOL).at_least(1.0),
    bandwidth(INTERPOSER, PRIVATE).of(POOL).at_least(0.9),
    bandwidth(INTERPOSER, MOUNT).of(POOL),
    bandwidth(SHARED, EXT4).of(POOL),
];
/// The ways, by their labels (the engines of the table).
pub const EXT4: &str = "ext4";
/// Through the FUSE mount.
pub const MOUNT: &str = "mount";
/// Under the interposer.
pub const INTERPOSER: &str = "interposer";
/// RocksDB's own block cache over `use_direct_reads` ([`LARGER`] only).
pub const DIRECT: &str = "direct";
/// A key and a value: the bytes each operation moves (db_bench's MB/s
/// counts these, in MiB).
const KEY_BYTES: u64 = 16;
const VALUE_BYTES: u64 = 200;
const KV_BYTES: u64 = KEY_BYTES + VALUE_BYTES;
/// RocksDB's block cache: small, so that reads reach the files.
const BLOCK_CACHE: u64 = 8 << 20;
/// Keys (full, and with `--quick`) unless `--size` says otherwise, and
/// the fewest.
const KEYS: FullQuick<u64> = FullQuick(1_000_000, 200_000);
const MIN_KEYS: u64 = 1000;
/// The seed of readrandom's keys: every way reads the same ones.
const SEED: u64 = 42;
/// The cache (the mount's and the interposer's) unless `--capacity` says
/// otherwise: this many times the raw data, which holds the database, its
/// log while filling, and a compaction's copy.
const CAPACITY_FACTOR: u64 = 4;
/// The variable that makes the interposer print its figures at exit
/// (docs/preload.md).
const PRELOAD_STATS: &str = "FOLIOCACHE_PRELOAD_STATS";

/// What the scenario runs `db_bench` with.
#[derive(Debug, Clone)]
pub struct DbBench {
    /// Keys filled and read.
    pub keys: u64,
    /// The mount's and the interposer's cache.
    pub capacity: u64,
    /// The database larger than memory.
    pub larger: Larger,
    /// PostgreSQL's pgbench.
    pub pgbench: Pgbench,
    /// PostgreSQL's pgbench larger than its memory.
    pub pgbench_larger: PgLarger,
    /// The forked pool.
    pub pool: Pool,
}

impl DbBench {
    /// The raw data: keys and values.
    fn raw_bytes(&self) -> u64 {
        self.keys * KV_BYTES
    }

    /// The restart case's reads of each pass.
    pub fn restart_reads(&self) -> u64 {
        (self.keys * RESTART_PERCENT / 100).max(1)
    }
}

/// Where a job of the scenario runs: a directory of its own under
/// `root`, the memory cgroups it may make (`avail`), `repeat` rounds.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// The scenario's directory.
    pub root: &'a Path,
    /// Whether memory cgroups can be made here.
    pub avail: &'a Availability,
    /// The rounds each job runs.
    pub repeat: u32,
}

/// The scenario: [`KEYS`] keys (full, and with `--quick`; or
/// `--size` over the 216 bytes of a key and its value), a cache of
/// `--capacity` or [`CAPACITY_FACTOR`] times the raw data.
///
/// # Errors
/// `--engine` given (the ways are fixed), or too few keys.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    if !args.engines.is_empty() {
        return Err(format!(
            "programs scenario: --engine does not apply: it runs {PROGRAM} three ways \
             ({EXT4}, {MOUNT}, {INTERPOSER})"
        ));
    }
    let keys = args.size.map_or(KEYS.get(quick), |s| s / KV_BYTES);
    if keys < MIN_KEYS {
        return Err(format!(
            "programs scenario: --size {} is {keys} keys of {KV_BYTES} bytes: at least \
             {MIN_KEYS}",
            fmt_size_approx(args.size.unwrap_or(0))
        ));
    }
    let raw = keys * KV_BYTES;
    let capacity = args
        .capacity
        .unwrap_or_else(|| (CAPACITY_FACTOR * raw).div_ceil(1 << 20) << 20);
    let db = DbBench {
        keys,
        capacity,
        larger: Larger::new(quick),
        pgbench: Pgbench::new(quick),
        pgbench_larger: PgLarger::new(quick),
        pool: Pool::new(quick),
    };
    let Judged { ratios, targets } =
        targets::judge(TARGETS, |way| Some(way.to_string()), Given::default());
    Ok(Scenario {
        name: "programs".into(),
        description: format!(
            "A real program: RocksDB's {PROGRAM} fills a database of {keys} keys of \
             {KEY_BYTES} bytes with values of {VALUE_BYTES} ({} raw; fillseq, a fresh database), \
             then, in a second process, reads it sequentially twice (readseq; the second pass \
             is measured: the first fills the interposer's cache, which starts empty in each \
             process, as the kernel's and the mount's hold the database already) and at random \
             (readrandom, every key), verifying every block's checksum, with no compression \
             and a block cache of {} so that reads reach the files. Three ways: {EXT4} (the \
             data directory itself: buffered, the kernel's page cache), {MOUNT} (a foliocache \
             FUSE mount of a cache of {} served by this process) and {INTERPOSER} \
             (libfoliocache_preload.so, as `foliocache run --capacity {}` runs it). IOPS is \
             {PROGRAM}'s ops/s, bandwidth those ops times {KV_BYTES} bytes (what its MB/s \
             counts), so bandwidth ratios are ops/s ratios; latency from its histogram; `vs \
             kernel` is over {EXT4}; CPU is not measured (-): one process runs several \
             benchmarks. {RESTART}, the restart case: each way fills a fresh database again, \
             the interposer saving its list of cached ranges at exit (`foliocache run`'s state \
             file), and a new process, the interposer loading that list in the background, \
             reads {} keys in order, then {} at random (measured; the kernel's page cache and \
             the mount's keep what the fill left). {} {} {} {}",
            fmt_size_approx(raw),
            fmt_size(BLOCK_CACHE),
            fmt_size(capacity),
            fmt_size(capacity),
            db.restart_reads(),
            db.restart_reads(),
            db.larger.describe(),
            db.pgbench.describe(),
            db.pgbench_larger.describe(),
            db.pool.describe(),
        ),
        jobs: Vec::new(),
        ratios,
        targets,
        detailed: false,
        programs: Some(Program::DbBench(db)),
    })
}

/// `program` found on `PATH`.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Where each way's database goes, and how to start the program.
struct Ways<'a> {
    db_bench: PathBuf,
    db: &'a DbBench,
    /// The ext4 way's directory, and the interposer's (the library's
    /// `--dir`).
    ext4: PathBuf,
    interposer: PathBuf,
    /// The interposer's state file in the restart case.
    state: PathBuf,
    mount: Option<&'a FuseMount>,
}

/// How an invocation runs: its benchmarks, on a fresh database or the
/// existing one, and whether as the restart case (the interposer keeping
/// its state file; reads limited to [`DbBench::restart_reads`]).
#[derive(Clone, Copy)]
struct Invoke<'b> {
    benchmarks: &'b [&'b str],
    existing: bool,
    restart: bool,
}

/// One invocation of the program: its benchmarks' figures and what the
/// way adds (the interposer's or the mount's cache figures).
struct Invocation {
    results: Vec<DbResult>,
    note: Option<String>,
}

impl Ways<'_> {
    /// The database's directory for `way`.
    fn db_dir(&self, way: &str) -> Result<PathBuf> {
        Ok(match way {
            MOUNT => self
                .mount
                .context("programs: the mount way without a mount")?
                .mountpoint()
                .join("db"),
            INTERPOSER => self.interposer.join("db"),
            _ => self.ext4.join("db"),
        })
    }

    /// The command running `how`'s benchmarks (`benchmarks`, joined) on
    /// `way`'s database.
    fn command(&self, way: &str, benchmarks: &str, how: Invoke<'_>) -> Result<Command> {
        let dir = self.db_dir(way)?;
        let run = DbRun {
            benchmarks,
            existing: how.existing,
            keys: self.db.keys,
            cache: BLOCK_CACHE,
            threads: 1,
        };
        let mut args = run.args(&self.db_bench, &dir);
        if how.restart && how.existing {
            args.push(format!("--reads={}", self.db.restart_reads()).into());
        }
        if way == INTERPOSER {
            // Each invocation starts cold, as before warm restarts, but
            // the restart case's.
            let state = how.restart.then(|| self.state.clone());
            return interposed(args, self.db.capacity, &self.interposer, state);
        }
        Ok(plain(&args))
    }

    /// Runs `benchmarks` on `way`: their figures, checked (the program
    /// succeeded, every benchmark reported, readrandom found every key,
    /// the interposer served the files).
    fn invoke(&self, way: &str, how: Invoke<'_>) -> Result<Invocation> {
        let benchmarks = how.benchmarks;
        let list = benchmarks.join(",");
        let what = || format!("programs: {PROGRAM} {list} ({way})");
        let figures0 = self.mount.and_then(FuseMount::cache_figures);
        let out = self.command(way, &list, how)?.output().with_context(what)?;
        let (results, stderr) = checked(&what(), &out, benchmarks)?;
        let note = match way {
            INTERPOSER => Some(interposer_note(&what(), &list, &stderr)?),
            MOUNT => {
                let after = self.mount.and_then(FuseMount::cache_figures);
                figures0.zip(after).map(|(b, a)| mount_note(&list, &b, &a))
            }
            _ => None,
        };
        Ok(Invocation { results, note })
    }
}

impl<'b> Invoke<'b> {
    /// `benchmarks`, on the existing database if `existing`, as the
    /// restart case if `restart`.
    fn new(benchmarks: &'b [&'b str], existing: bool, restart: bool) -> Invoke<'b> {
        Invoke {
            benchmarks,
            existing,
            restart,
        }
    }
}

/// The mount's cache figures during an invocation.
fn mount_note(list: &str, b: &FuseFigures, a: &FuseFigures) -> String {
    format!(
        "{list}: the mount's cache: {} hits, {} misses, {} backing reads",
        a.hits.saturating_sub(b.hits),
        a.misses.saturating_sub(b.misses),
        a.io_reads.saturating_sub(b.io_reads)
    )
}

/// What [`run`] gives: every round's records, of each benchmark (the
/// scenario's jobs) by way (`None`: skipped, `db_bench` missing).
pub type Rounds = Option<Vec<JobRuns>>;

/// Runs the scenario `sc` (built by [`scenario`]) `repeat` rounds in
/// `data_dir` (the bench's `--dir` or temporary directory), saying each
/// run's figures with `say`; `notes` gets the scenario's facts (a way
/// left out, the program missing). Everything it made (the databases, the
/// mount) is gone when it returns, also on an error.
///
/// # Errors
/// The program or a way failed, or its output did not parse.
pub fn run(
    db: &DbBench,
    data_dir: &Path,
    avail: &Availability,
    repeat: u32,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Rounds> {
    let Some(db_bench) = on_path(PROGRAM) else {
        let n = format!(
            "programs: skipped: {PROGRAM} is not on PATH (apt-get install {PACKAGE}); nothing \
             ran"
        );
        tell(notes, say, n);
        return Ok(None);
    };
    let root = tempfile::Builder::new()
        .prefix("foliocache-programs-")
        .tempdir_in(data_dir)
        .with_context(|| format!("programs: a directory in {}", data_dir.display()))?;
    let wanted =
        |job: &str| std::env::var(JOBS_ENV).map_or(true, |v| v.split(',').any(|j| j.trim() == job));
    let mut runs = Vec::new();
    if wanted(PROGRAM) {
        runs = three_ways(db, &db_bench, root.path(), data_dir, repeat, notes, say)?;
    }
    let at = Place {
        root: root.path(),
        avail,
        repeat,
    };
    if wanted("larger") {
        runs.extend(larger::run(&db_bench, &db.larger, at, notes, say)?);
    }
    if wanted("pgbench") {
        runs.extend(pgbench::run(&db.pgbench, root.path(), repeat, notes, say)?);
    }
    let mut pg_larger = db.pgbench_larger.clone();
    pg_larger.select(wanted);
    if !pg_larger.sizes.is_empty() {
        runs.extend(pgbench_larger::run(&pg_larger, at, notes, say)?);
    }
    if wanted(POOL) {
        runs.extend(pool::run(&db.pool, at, notes, say)?);
    }
    root.close().context("programs: removing the databases")?;
    Ok(Some(runs))
}

/// The [`BENCHMARKS`] three ways (two where FUSE is unavailable), `repeat`
/// rounds, in directories of `root` (in `data_dir`).
fn three_ways(
    db: &DbBench,
    db_bench: &Path,
    root: &Path,
    data_dir: &Path,
    repeat: u32,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    let dir = |name: &str| -> Result<PathBuf> {
        let d = root.join(name);
        std::fs::create_dir(&d).with_context(|| format!("programs: creating {}", d.display()))?;
        Ok(d.canonicalize()?)
    };
    let (ext4, backing, interposer) = (dir(EXT4)?, dir("backing")?, dir(INTERPOSER)?);
    let state = root.join("interposer.state");
    if db.capacity < 2 * db.raw_bytes() {
        notes.push(format!(
            "programs: the caches ({}, --capacity) are less than twice the raw data ({}): \
             the database and its log may not fit",
            fmt_size_approx(db.capacity),
            fmt_size_approx(db.raw_bytes())
        ));
    }
    if !on_ext4(&ext4) {
        notes.push(format!(
            "programs: the data directory {} is not on ext4: the `{EXT4}` way runs on its \
             filesystem",
            data_dir.display()
        ));
    }
    // Declared after `root`, so dropped (unmounted) before it goes.
    let mount = match foliocache_fuse::unavailable() {
        Some(why) => {
            notes.push(format!(
                "programs: the {MOUNT} way is left out: FUSE is unavailable here: {why}"
            ));
            None
        }
        None => Some(FuseMount::new(&backing, Some(db.capacity)).context("programs: the mount")?),
    };
    let ways = Ways {
        db_bench: db_bench.to_path_buf(),
        db,
        ext4,
        interposer,
        state,
        mount: mount.as_ref(),
    };
    let labels: Vec<&str> = [EXT4, MOUNT, INTERPOSER]
        .into_iter()
        .filter(|w| *w != MOUNT || ways.mount.is_some())
        .collect();
    let runs = super::rounds::rounds("programs", &labels, &BENCHMARKS, repeat, say, |w| {
        ways.round(labels[w])
    })?;
    drop(ways);
    if let Some(m) = mount {
        m.unmount().context("programs: the mount")?;
    }
    Ok(runs)
}

impl Ways<'_> {
    /// One way's run in a round: fillseq, then readseq twice and
    /// readrandom in a second process; then the restart case (fillseq
    /// again, and readseq and readrandom in a new process); a record per
    /// benchmark of [`BENCHMARKS`].
    fn round(&self, way: &str) -> Result<Vec<RunRecord>> {
        let fill = self.invoke(way, Invoke::new(&[FILLSEQ], false, false))?;
        // The first readseq fills the interposer's cache, empty in each
        // process; the second is measured.
        let reads = self.invoke(
            way,
            Invoke::new(&[READSEQ, READSEQ, READRANDOM], true, false),
        )?;
        // The restart case: its fill starts cold too (no list of an
        // earlier round's files), and saves the list its reads load.
        match std::fs::remove_file(&self.state) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).context("programs: removing the state file")
            }
            _ => {}
        }
        let refill = self.invoke(way, Invoke::new(&[FILLSEQ], false, true))?;
        let restart = self.invoke(way, Invoke::new(&[READSEQ, READRANDOM], true, true))?;
        let warm = &reads.results[0];
        let measured = [
            (FILLSEQ, &fill, &fill.results[0]),
            (READSEQ, &reads, &reads.results[1]),
            (READRANDOM, &reads, &reads.results[2]),
            (RESTART, &restart, &restart.results[1]),
        ];
        Ok(measured
            .into_iter()
            .map(|(name, inv, r)| {
                let mut notes = vec![format!("{PROGRAM}: {}", one_line(r))];
                if name == READSEQ {
                    notes.push(format!(
                        "the first readseq pass, in the same process: {} ops/s",
                        r_ops(warm)
                    ));
                }
                if name == RESTART {
                    notes.push(format!(
                        "before it, in the same process: {}",
                        one_line(&restart.results[0])
                    ));
                    notes.push(format!(
                        "its fill, in the process before: {}",
                        one_line(&refill.results[0])
                    ));
                    notes.extend(refill.note.clone());
                }
                notes.extend(inv.note.clone());
                let mut rec = db_record(way, name, r, self.db.raw_bytes(), 1, notes);
                rec.memory.capacity = (way != EXT4).then_some(self.db.capacity);
                rec
            })
            .collect())
    }
}

/// The record of benchmark `name`'s figures `r` on `way`, of a database
/// of `raw` bytes of keys and values, read by `threads` threads.
fn db_record(
    way: &str,
    name: &'static str,
    r: &DbResult,
    raw: u64,
    threads: u32,
    notes: Vec<String>,
) -> RunRecord {
    let job = RunJob {
        rw: name,
        bs: KV_BYTES,
        numjobs: threads as usize,
        file_size: raw,
        ..RunJob::default()
    };
    let lat = r.lat.unwrap_or_default();
    program_record(way, job, (r.ops, r.seconds, r.ops_per_s), lat, notes)
}

/// A program's record on `way`: `job`'s operations (each counted as
/// `job.bs` bytes in the bandwidth), `ops` of them in `seconds`, at
/// `per_s`, with latency `lat`. CPU is not measured: the program's
/// processes do the work, and one process runs several benchmarks.
fn program_record(
    way: &str,
    job: RunJob,
    (ops, seconds, per_s): (u64, f64, f64),
    lat: Latency,
    notes: Vec<String>,
) -> RunRecord {
    let bs = job.bs;
    RunRecord {
        engine: way.to_string(),
        job,
        perf: Perf {
            bytes: ops * bs,
            ops,
            seconds,
            bw_bytes: per_s * bs as f64,
            iops: per_s,
            lat_ns: lat,
            cpu_us_per_op: f64::NAN,
            cpu_s_per_gib: f64::NAN,
            ..Perf::default()
        },
        notes,
        ..RunRecord::default()
    }
}

/// Whether `dir` is on ext4 (`statfs`'s `EXT4_SUPER_MAGIC`, which ext2
/// and ext3 share).
fn on_ext4(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == 0xEF53)
}
