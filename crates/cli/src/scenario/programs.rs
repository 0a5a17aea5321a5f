//! `programs`: a real program, RocksDB's `db_bench` (Debian's
//! `rocksdb-tools`), three ways in one run: on a directory of the data's
//! filesystem itself (`ext4`: buffered, the kernel's page cache), through
//! a foliocache FUSE mount (`mount`, served in this process as the `fuse`
//! engine's is), and under the interposer (`interposer`:
//! `libfoliocache_preload.so`, set up as `foliocache run` sets it up).
//! Each way fills a database (`fillseq`), then reads it (`readseq`,
//! `readrandom`) verifying every block's checksum; the ways interleave,
//! in alternating order, round after round. Where `db_bench` is not on
//! `PATH` the scenario says so and runs nothing. See `docs/bench.md`.
//!
//! Unlike the other scenarios it has no jobs for the engines: [`run`]
//! starts the program itself and turns each benchmark's figures into a
//! [`RunRecord`], so the table, the ratios and the targets are the
//! other scenarios'.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::Scenario;
use crate::args::BenchArgs;
use crate::engine::{FuseFigures, FuseMount};
use crate::launch::{self, RunArgs};
use crate::report::{Latency, MemoryFigures, Perf, RunJob, RunRecord};
use crate::targets::Judged;
use crate::units::{fmt_size, fmt_size_approx};

/// The program, and the Debian package that has it.
pub const PROGRAM: &str = "db_bench";
const PACKAGE: &str = "rocksdb-tools";
/// The benchmarks measured, in the order they run; each is a job of the
/// scenario (its index is the job's in the ratios and targets).
pub const BENCHMARKS: [&str; 3] = ["fillseq", "readseq", "readrandom"];
/// The interposer's ops/s over ext4's the issue asks for, per benchmark
/// (fillseq, readseq, readrandom).
const TARGETS: [f64; 3] = [0.9, 1.0, 1.3];
/// The ways, by their labels (the engines of the table).
pub const EXT4: &str = "ext4";
/// Through the FUSE mount.
pub const MOUNT: &str = "mount";
/// Under the interposer.
pub const INTERPOSER: &str = "interposer";
/// A key and a value: the bytes each operation moves (db_bench's MB/s
/// counts these, in MiB).
const KEY_BYTES: u64 = 16;
const VALUE_BYTES: u64 = 200;
const KV_BYTES: u64 = KEY_BYTES + VALUE_BYTES;
/// RocksDB's block cache: small, so that reads reach the files.
const BLOCK_CACHE: u64 = 8 << 20;
/// Keys (full, and with `--quick`) unless `--size` says otherwise, and
/// the fewest.
const KEYS: u64 = 1_000_000;
const QUICK_KEYS: u64 = 200_000;
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
}

impl DbBench {
    /// The raw data: keys and values.
    fn raw_bytes(&self) -> u64 {
        self.keys * KV_BYTES
    }
}

/// The scenario: [`KEYS`] keys ([`QUICK_KEYS`] with `--quick`, or
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
    let keys = args
        .size
        .map_or(if quick { QUICK_KEYS } else { KEYS }, |s| s / KV_BYTES);
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
    let some = |s: &str| Some(s.to_string());
    let mut judged = Judged::default();
    for (job, target) in TARGETS.into_iter().enumerate() {
        judged.judged(&some(INTERPOSER), &some(EXT4), Some(target), Some(job));
        judged.ratio(&some(MOUNT), &some(EXT4), None, Some(job));
    }
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
             benchmarks.",
            fmt_size_approx(raw),
            fmt_size(BLOCK_CACHE),
            fmt_size(capacity),
            fmt_size(capacity),
        ),
        jobs: Vec::new(),
        ratios: judged.ratios,
        targets: judged.targets,
        detailed: false,
        programs: Some(DbBench { keys, capacity }),
    })
}

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

/// The interposer's figures line (with [`PRELOAD_STATS`] set) in its
/// stderr, and the opens it served.
fn preload_figures(stderr: &str) -> Option<(String, u64)> {
    // After db_bench's own messages, maybe on their line.
    const START: &str = "foliocache-preload: pid";
    let from = stderr.rfind(START)?;
    let line = stderr[from..].lines().next()?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let opens = before(&words, "opens")? as u64;
    Some((line.to_string(), opens))
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
    mount: Option<&'a FuseMount>,
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

    /// The command running `benchmarks` on `way`'s database (an existing
    /// one if `existing`, else a fresh one).
    fn command(&self, way: &str, benchmarks: &str, existing: bool) -> Result<Command> {
        let mut args: Vec<OsString> = vec![self.db_bench.clone().into()];
        let mut db = OsString::from("--db=");
        db.push(self.db_dir(way)?);
        args.push(db);
        args.extend(
            [
                format!("--benchmarks={benchmarks}"),
                format!("--use_existing_db={}", u8::from(existing)),
                format!("--num={}", self.db.keys),
                format!("--key_size={KEY_BYTES}"),
                format!("--value_size={VALUE_BYTES}"),
                format!("--cache_size={BLOCK_CACHE}"),
                format!("--seed={SEED}"),
                "--compression_type=none".into(),
                "--verify_checksum=1".into(),
                "--threads=1".into(),
                "--progress_reports=0".into(),
                "--histogram=1".into(),
            ]
            .map(OsString::from),
        );
        if way == INTERPOSER {
            let mut cmd = launch::preloaded(&RunArgs {
                capacity: Some(self.db.capacity),
                dirs: vec![self.interposer.clone()],
                command: args,
            })?;
            cmd.env(PRELOAD_STATS, "1");
            return Ok(cmd);
        }
        let mut cmd = Command::new(&args[0]);
        cmd.args(&args[1..]).env_remove("LD_PRELOAD");
        Ok(cmd)
    }

    /// Runs `benchmarks` on `way`: their figures, checked (the program
    /// succeeded, every benchmark reported, readrandom found every key,
    /// the interposer served the files).
    fn invoke(&self, way: &str, benchmarks: &[&str], existing: bool) -> Result<Invocation> {
        let list = benchmarks.join(",");
        let what = || format!("programs: {PROGRAM} {list} ({way})");
        let figures0 = self.mount.and_then(FuseMount::cache_figures);
        let out = self
            .command(way, &list, existing)?
            .output()
            .with_context(what)?;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if !out.status.success() {
            bail!(
                "{} failed ({}):\n{}\n{}",
                what(),
                out.status,
                tail(&stderr),
                tail(&stdout)
            );
        }
        let results = parse(&stdout).with_context(what)?;
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        if names != benchmarks {
            bail!(
                "{}: reported {names:?}, not {benchmarks:?}:\n{}",
                what(),
                tail(&stdout)
            );
        }
        for r in &results {
            if let Some((found, of)) = r.found.filter(|(f, n)| f != n) {
                bail!("{}: {} found {found} of {of} keys", what(), r.name);
            }
        }
        let note = match way {
            INTERPOSER => {
                let (line, opens) = preload_figures(&stderr).with_context(|| {
                    format!(
                        "{}: no figures from the interposer:\n{}",
                        what(),
                        tail(&stderr)
                    )
                })?;
                if opens == 0 {
                    bail!(
                        "{}: the interposer served none of its files: {line}",
                        what()
                    );
                }
                Some(format!("{list}: {line}"))
            }
            MOUNT => {
                let after = self.mount.and_then(FuseMount::cache_figures);
                figures0.zip(after).map(|(b, a)| mount_note(&list, &b, &a))
            }
            _ => None,
        };
        Ok(Invocation { results, note })
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

/// The last lines of a program's output.
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// What [`run`] gives: every round's records, `runs[benchmark][way][round]`
/// (`None`: skipped, `db_bench` missing).
pub type Rounds = Option<Vec<Vec<Vec<RunRecord>>>>;

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
    repeat: u32,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Rounds> {
    let Some(db_bench) = on_path(PROGRAM) else {
        let n = format!(
            "programs: skipped: {PROGRAM} is not on PATH (apt-get install {PACKAGE}); nothing \
             ran"
        );
        say(&n);
        notes.push(n);
        return Ok(None);
    };
    let root = tempfile::Builder::new()
        .prefix("foliocache-programs-")
        .tempdir_in(data_dir)
        .with_context(|| format!("programs: a directory in {}", data_dir.display()))?;
    let dir = |name: &str| -> Result<PathBuf> {
        let d = root.path().join(name);
        std::fs::create_dir(&d).with_context(|| format!("programs: creating {}", d.display()))?;
        Ok(d.canonicalize()?)
    };
    let (ext4, backing, interposer) = (dir(EXT4)?, dir("backing")?, dir(INTERPOSER)?);
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
        db_bench,
        db,
        ext4,
        interposer,
        mount: mount.as_ref(),
    };
    let labels: Vec<&str> = [EXT4, MOUNT, INTERPOSER]
        .into_iter()
        .filter(|w| *w != MOUNT || ways.mount.is_some())
        .collect();
    let mut runs: Vec<Vec<Vec<RunRecord>>> = BENCHMARKS
        .iter()
        .map(|_| vec![Vec::new(); labels.len()])
        .collect();
    for round in 0..repeat {
        let mut order: Vec<usize> = (0..labels.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for w in order {
            let records = ways.round(labels[w])?;
            say(&records_line(&records, round + 1, repeat));
            for (b, r) in records.into_iter().enumerate() {
                runs[b][w].push(r);
            }
        }
    }
    drop(ways);
    if let Some(m) = mount {
        m.unmount().context("programs: the mount")?;
    }
    root.close().context("programs: removing the databases")?;
    Ok(Some(runs))
}

impl Ways<'_> {
    /// One way's run in a round: fillseq, then readseq twice and
    /// readrandom in a second process; a record per benchmark of
    /// [`BENCHMARKS`].
    fn round(&self, way: &str) -> Result<Vec<RunRecord>> {
        let fill = self.invoke(way, &["fillseq"], false)?;
        let reads = self.invoke(way, &["readseq", "readseq", "readrandom"], true)?;
        let warm = &reads.results[0];
        let measured = [&fill.results[0], &reads.results[1], &reads.results[2]];
        Ok(BENCHMARKS
            .iter()
            .zip(measured)
            .enumerate()
            .map(|(i, (name, r))| {
                let mut notes = vec![format!("{PROGRAM}: {}", one_line(r))];
                if i == 1 {
                    notes.push(format!(
                        "the first readseq pass, in the same process: {} ops/s",
                        r_ops(warm)
                    ));
                }
                let inv = if i == 0 { &fill } else { &reads };
                notes.extend(inv.note.clone());
                self.record(way, name, r, notes)
            })
            .collect())
    }

    /// The record of benchmark `name`'s figures `r` on `way`.
    fn record(&self, way: &str, name: &'static str, r: &DbResult, notes: Vec<String>) -> RunRecord {
        RunRecord {
            engine: way.to_string(),
            job: RunJob {
                rw: name,
                bs: KV_BYTES,
                numjobs: 1,
                file_size: self.db.raw_bytes(),
                ..RunJob::default()
            },
            perf: Perf {
                bytes: r.ops * KV_BYTES,
                ops: r.ops,
                seconds: r.seconds,
                bw_bytes: r.ops_per_s * KV_BYTES as f64,
                iops: r.ops_per_s,
                lat_ns: r.lat.unwrap_or_default(),
                // Not measured: one process runs several benchmarks.
                cpu_us_per_op: f64::NAN,
                cpu_s_per_gib: f64::NAN,
                ..Perf::default()
            },
            memory: MemoryFigures {
                capacity: (way != EXT4).then_some(self.db.capacity),
                ..MemoryFigures::default()
            },
            notes,
            ..RunRecord::default()
        }
    }
}

/// `r`'s ops/s, whole.
fn r_ops(r: &DbResult) -> String {
    format!("{:.0}", r.ops_per_s)
}

/// `r` as db_bench printed it, in short.
fn one_line(r: &DbResult) -> String {
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

/// A way's round in one line.
fn records_line(records: &[RunRecord], round: u32, repeat: u32) -> String {
    let mut s = String::new();
    if let Some(r) = records.first() {
        let _ = write!(s, "{}: programs (round {round} of {repeat}):", r.engine);
    }
    for r in records {
        let _ = write!(
            s,
            " {} {:.0} ops/s {:.1} MB/s;",
            r.job.rw,
            r.perf.iops,
            r.perf.bw_bytes / f64::from(1 << 20)
        );
    }
    s.pop();
    s
}

/// Whether `dir` is on ext4 (`statfs`'s `EXT4_SUPER_MAGIC`, which ext2
/// and ext3 share).
fn on_ext4(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == 0xEF53)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// db_bench 7.8.3's output (Debian's rocksdb-tools), captured: a
    /// fillseq, then readseq twice and readrandom with `--histogram=1`,
    /// histogram buckets shortened.
    const FILL: &str = "\
DB path: [/tmp/prog-dbb/db]
fillseq      :       7.450 micros/op 133788 ops/sec 1.495 seconds 200000 operations;   27.6 MB/s
Microseconds per write:
Count: 200000 Average: 7.4500  StdDev: 198.17
Min: 2  Median: 2.0000  Max: 28102
Percentiles: P50: 2.00 P75: 2.63 P99: 6.01 P99.9: 48.21 P99.99: 9364.86
------------------------------------------------------
(       1,       2 ]   109655  54.828%  54.828% ###########
(   22000,   33000 ]        1   0.001% 100.000% 
";
    const READS: &str = "\
WARNING: Assertions are enabled; benchmarks unnecessarily slow
------------------------------------------------
DB path: [/tmp/prog-dbb/db]
readseq      :       1.043 micros/op 958850 ops/sec 0.209 seconds 200000 operations;  197.5 MB/s
Microseconds per read:
Count: 200000 Average: 1.0663  StdDev: 84.31
Min: 0  Median: 0.5295  Max: 24083
Percentiles: P50: 0.53 P75: 0.79 P99: 3.47 P99.9: 6.00 P99.99: 1300.00
------------------------------------------------------
[       0,       1 ]   188841  94.421%  94.421% ###################

DB path: [/tmp/prog-dbb/db]
readseq      :       0.896 micros/op 1115710 ops/sec 0.179 seconds 200000 operations;  229.8 MB/s
DB path: [/tmp/prog-dbb/db]
readrandom   :       7.881 micros/op 126678 ops/sec 1.579 seconds 200000 operations;   26.1 MB/s (200000 of 200000 found)

Microseconds per read:
Count: 200000 Average: 7.8814  StdDev: 199.19
Min: 1  Median: 3.2180  Max: 13311
Percentiles: P50: 3.22 P75: 3.69 P99: 5.96 P99.9: 56.82 P99.99: 11657.14
";

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
        assert_eq!((lat.p50, lat.p75, lat.p99), (2000, 2630, 6010));
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
    }
}
