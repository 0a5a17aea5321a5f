//! `objectstore`: caches in front of object storage, side by side at the
//! same budgets (memory M, disk D = 4 M), over object_store's
//! `LocalFileSystem` behind its `ThrottledStore` (S3's latency and
//! bandwidth per request: [`remote`]). The engines are [`engines`]'s: no
//! cache, SlateDB's 4 MiB parts, foyer 0.22's `HybridCache` as a range
//! cache (with the bench's `foyer` feature: `foyer`), foliocache in memory
//! and with its disk tier. See docs/bench/objectstore.md.
//!
//! Jobs:
//! - `zipf`: point reads of 4 KiB to 64 KiB, zipfian (0.99) over the
//!   pages of objects of 4 M in all, from 8 tasks; a warm-up of as many
//!   reads first, then the measured ones;
//! - `zipf+scan`: the same while a task reads large objects (64 MiB,
//!   16 MiB with `--quick`) sequentially in 1 MiB pieces beside them;
//! - `restart`: a child process reads through an engine with a disk tier
//!   and is killed (SIGKILL) while it writes the tier; a new engine
//!   reopens the tier: the time its index takes to recover and the time
//!   to its first disk hit ([`restart`]);
//! - `memory`: foliocache's engines each read twice the point reads beside
//!   the scans in a child process inside a memory cgroup of its bound plus
//!   10 %: the cgroup's peak and whether the OOM killer came ([`memory`]);
//! - `hits`: an object of M/2 cached whole, read at random from one task
//!   through the cached store, against foliocache's hits on a local file
//!   of the same bytes and `object_store`'s `InMemory` (the trait's
//!   floor), 4 KiB and 64 KiB ([`hits`]);
//! - `mount`: warm re-reads of an object through the object mount (the
//!   kernel's page cache kept across opens, and not) against the same
//!   bytes in a file with the kernel's cache warm, 1 MiB sequential and
//!   4 KiB random, the contenders interleaved ([`mount`](mod@mount));
//! - `cold`: an object read cold through a fresh object mount (with and
//!   without a disk tier) against the bare link it comes over (one GET
//!   streamed), at 100 MB/s and 1 GB/s: first byte and whole ([`cold`]);
//! - `lsm`: an LSM engine's trace through foliocache with its disk tier,
//!   with the per-call hints and without: files written at 3x the tier,
//!   each read once by a compaction after a lag, beside a query's hot
//!   set; then puts at twice the tier's write bandwidth ([`lsm`]);
//! - `parquet` (the bench's feature `parquet`): arrow-rs `parquet`'s
//!   reader through the stores (module `parquet`);
//! - `datafusion`, only when named: DataFusion 55's SQL over Parquet
//!   through the stores, its client built when asked ([`clients`]);
//! - `slatedb`, only when named: SlateDB 0.18's random gets and a scan
//!   through its own `CachedObjectStore` and through foliocache with its
//!   disk tier, its client built when asked ([`clients`]).
//!
//! `FOLIOCACHE_OBJSTORE_JOBS` (a comma-separated list of jobs) runs only
//! those (the tests run `memory` alone). `FOLIOCACHE_OBJSTORE_DISK` (a
//! size: `8G`) sets D and the point reads' data, whatever M; with
//! `FOLIOCACHE_OBJSTORE_FILL=1` the restart's child fills its tier with
//! every chunk of the data before it is killed ([`restart`]): the issue's
//! restart with an 8 GiB tier is `FOLIOCACHE_OBJSTORE_JOBS=restart
//! FOLIOCACHE_OBJSTORE_DISK=8G FOLIOCACHE_OBJSTORE_FILL=1`.
//!
//! A read is a hit when it took less than the remote's latency (every
//! GET sleeps that long first, so a read that sent or waited for one
//! cannot be faster); every read's bytes are checked.

use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use object_store::path::Path;

use super::rounds::{rounds, scatter};
use super::{FullQuick, Program, Scenario};
use crate::args::BenchArgs;
use crate::cgroup::Availability;
use crate::report::{Latency, RunJob, RunRecord};
use crate::targets::{JobName, JobRuns};
use crate::zipf::Zipf;
pub use engines::PARTS;
use engines::{Engine, Objects, ENGINES, FOLIO, FOLIO_DISK, FOYER};
use remote::Remote;

mod clients;
mod cold;
mod engines;
#[cfg(feature = "foyer")]
mod foyer;
mod hits;
mod lru;
mod lsm;
mod memory;
mod mount;
#[cfg(feature = "parquet")]
mod parquet;
mod remote;
mod restart;

/// The point reads.
pub const ZIPF: JobName = "zipf";
/// The point reads beside scans.
pub const SCAN: JobName = "zipf+scan";
/// The restart after `kill -9`.
pub const RESTART: JobName = "restart";
/// The memory bound, in a cgroup.
pub const MEMORY: JobName = "memory";
/// Cached reads against a local file's hits.
pub const HITS: JobName = "hits";
/// Warm re-reads through the object mount against ext4.
pub const MOUNT: JobName = "mount";
/// Cold reads through the object mount against the bare link.
pub const COLD: JobName = "cold";
/// The LSM-like trace, with the hints and without.
pub const LSM: JobName = "lsm";
/// arrow-rs `parquet`'s queries through the stores (the bench's feature
/// `parquet`).
pub const PARQUET: JobName = "parquet";
/// DataFusion 55's SQL through the stores (only when named: its client is
/// built by the job).
pub const DATAFUSION: JobName = "datafusion";
/// SlateDB 0.18's gets and scan through the stores (only when named: its
/// client is built by the job).
pub const SLATEDB: JobName = "slatedb";
/// The jobs, in order.
const JOBS: &[JobName] = &[
    ZIPF,
    SCAN,
    RESTART,
    MEMORY,
    HITS,
    MOUNT,
    COLD,
    LSM,
    #[cfg(feature = "parquet")]
    PARQUET,
    DATAFUSION,
    SLATEDB,
];
/// How to build the bench with the `parquet` job.
const PARQUET_BUILD: &str =
    "cargo run --release --features foliocache-bench/parquet -- bench --scenario objectstore";
/// How to build the bench with the `foyer` engine.
const FOYER_BUILD: &str =
    "cargo run --release --features foliocache-bench/foyer -- bench --scenario objectstore";
/// The variable naming the jobs to run (all when unset).
const JOBS_ENV: &str = "FOLIOCACHE_OBJSTORE_JOBS";
/// The variable setting D and the point reads' data (default 4 M).
const DISK_ENV: &str = "FOLIOCACHE_OBJSTORE_DISK";
/// The variable that makes the restart's child fill its tier first.
const FILL_ENV: &str = "FOLIOCACHE_OBJSTORE_FILL";

/// In a child process of the scenario (the restart's, the memory job's
/// reader): runs it; `None` in the bench itself.
pub fn child_main() -> Option<std::process::ExitCode> {
    restart::child_main().or_else(memory::child_main)
}

/// Whether `job` runs ([`JOBS_ENV`]).
fn runs(job: JobName) -> bool {
    std::env::var(JOBS_ENV).map_or(true, |v| v.split(',').any(|j| j.trim() == job))
}

/// Whether `job` is named in [`JOBS_ENV`] (the jobs that run only then).
fn named(job: JobName) -> bool {
    std::env::var(JOBS_ENV).is_ok_and(|v| v.split(',').any(|j| j.trim() == job))
}

/// M (full, `--quick`).
const M: FullQuick<u64> = FullQuick(64 << 20, 16 << 20);
/// The `parquet` job's file (full, `--quick`).
#[cfg(feature = "parquet")]
const PARQUET_FILE: FullQuick<u64> = FullQuick(256 << 20, 16 << 20);
/// The `datafusion` job's file (full, `--quick`).
const DATAFUSION_FILE: FullQuick<u64> = FullQuick(256 << 20, 16 << 20);
/// The `slatedb` job's values (full, `--quick`).
const SLATEDB_DATA: FullQuick<u64> = FullQuick(256 << 20, 16 << 20);
/// The `slatedb` job's rounds and gets a round (full, `--quick`).
const SLATEDB_ROUNDS: FullQuick<(u64, u64)> = FullQuick((3, 2000), (1, 500));
/// A scanned object's size.
const SCAN_OBJECT: FullQuick<u64> = FullQuick(64 << 20, 16 << 20);
/// Measured point reads (as many again warm the caches first).
const OPS: FullQuick<u64> = FullQuick(20_000, 1_500);
/// The `mount` job's object (full, `--quick`).
const MOUNT_OBJECT: FullQuick<u64> = FullQuick(256 << 20, 32 << 20);
/// The `mount` job's rounds (full, `--quick`).
const MOUNT_ROUNDS: FullQuick<usize> = FullQuick(5, 2);
/// The `cold` job's object (full, `--quick`).
const COLD_OBJECT: FullQuick<u64> = FullQuick(128 << 20, 8 << 20);
/// The `cold` job's rounds (full, `--quick`).
const COLD_ROUNDS: FullQuick<usize> = FullQuick(3, 1);
/// Each small object's size.
const OBJECT: u64 = 4 << 20;
/// Tasks doing point reads.
const TASKS: u64 = 8;
/// The page reads are aligned to and sized in.
const PAGE: u64 = 4096;

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct ObjectBench {
    /// Memory of every engine.
    pub m: u64,
    /// The disk tier of those with one, and the point reads' data.
    pub d: u64,
    /// A scanned object's size.
    pub scan_object: u64,
    /// Measured point reads.
    pub ops: u64,
    /// The remote's latency per request.
    pub latency: Duration,
    /// Whether the restart's child fills its tier before it is killed.
    pub fill: bool,
    /// The `mount` job's object size.
    pub mount_object: u64,
    /// The `mount` job's rounds.
    pub mount_rounds: usize,
    /// The `cold` job's object size.
    pub cold_object: u64,
    /// The `cold` job's rounds.
    pub cold_rounds: usize,
    /// The `parquet` job's file size (the job is built with the `parquet`
    /// feature).
    #[cfg(feature = "parquet")]
    pub parquet_file: u64,
    /// The `datafusion` job's file size.
    pub datafusion_file: u64,
    /// The `slatedb` job's bytes of values.
    pub slatedb_data: u64,
    /// The `slatedb` job's rounds and gets a round.
    pub slatedb_rounds: (u64, u64),
}

/// The scenario from the command line.
///
/// # Errors
/// `--engine` given (the engines are fixed), or M too small.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    if !args.engines.is_empty() {
        return Err(format!(
            "objectstore scenario: --engine does not apply: its engines are fixed ({})",
            ENGINES.join(", ")
        ));
    }
    let m = super::capacity_at_least(args, M.get(quick), 8 << 20, "objectstore scenario: M =")?;
    let ms = args
        .remote_latency
        .unwrap_or(remote::DEFAULT_LATENCY_MS)
        .max(1);
    let d = match std::env::var(DISK_ENV) {
        Ok(v) => crate::units::parse_size(&v)
            .map_err(|e| format!("objectstore scenario: {DISK_ENV}={v}: {e}"))?
            .max(OBJECT),
        Err(_) => 4 * m,
    };
    let bench = ObjectBench {
        m,
        d,
        scan_object: SCAN_OBJECT.get(quick),
        ops: OPS.get(quick),
        latency: Duration::from_millis(ms),
        fill: std::env::var(FILL_ENV).is_ok_and(|v| !v.is_empty() && v != "0"),
        mount_object: MOUNT_OBJECT.get(quick),
        mount_rounds: MOUNT_ROUNDS.get(quick),
        cold_object: COLD_OBJECT.get(quick),
        cold_rounds: COLD_ROUNDS.get(quick),
        #[cfg(feature = "parquet")]
        parquet_file: PARQUET_FILE.get(quick),
        datafusion_file: DATAFUSION_FILE.get(quick),
        slatedb_data: SLATEDB_DATA.get(quick),
        slatedb_rounds: SLATEDB_ROUNDS.get(quick),
    };
    if !JOBS.contains(&PARQUET) && std::env::var(JOBS_ENV).is_ok() && runs(PARQUET) {
        return Err(format!(
            "objectstore scenario: the parquet job is built with the bench's `parquet` feature \
             (arrow and parquet, minutes of build): {PARQUET_BUILD}"
        ));
    }
    Ok(Scenario {
        name: "objectstore".into(),
        description: format!(
            "object storage: LocalFileSystem behind ThrottledStore ({ms} ms a request, {} MB/s a \
             GET); memory M = {} MiB, disk D = {} MiB; {} zipfian point reads of 4-64 KiB over {} \
             MiB of objects, alone and beside scans of {} MiB objects; a restart after kill -9",
            remote::BANDWIDTH / 1_000_000,
            bench.m >> 20,
            bench.d >> 20,
            bench.ops,
            bench.d >> 20,
            bench.scan_object >> 20
        ),
        jobs: Vec::new(),
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
        programs: Some(Program::ObjectStore(bench)),
    })
}

/// The 8 bytes at `offset` (a multiple of 8) of object `obj`: every
/// read is checked against them.
fn word(obj: u32, offset: u64) -> [u8; 8] {
    scatter((u64::from(obj) << 40) | (offset >> 3)).to_le_bytes()
}

/// `range` of object `obj`'s bytes.
fn object_bytes(obj: u32, range: std::ops::Range<u64>) -> Vec<u8> {
    let first = range.start & !7;
    let mut out = Vec::with_capacity((range.end - first + 8) as usize);
    for at in (first..range.end).step_by(8) {
        out.extend_from_slice(&word(obj, at));
    }
    out.drain(..(range.start - first) as usize);
    out.truncate((range.end - range.start) as usize);
    out
}

/// The point reads' objects (indexes from 0) and the scanned ones after
/// them, written under `dir`.
fn write_objects(dir: &FsPath, b: &ObjectBench) -> Result<Objects> {
    let mut list = Vec::new();
    let small = (b.d / OBJECT).max(1);
    for i in 0..small + 2 {
        let (name, size) = if i < small {
            (format!("small/{i}"), OBJECT)
        } else {
            (format!("scan/{i}"), b.scan_object)
        };
        let file = dir.join(&name);
        std::fs::create_dir_all(file.parent().expect("a parent"))?;
        std::fs::write(&file, object_bytes(i as u32, 0..size))
            .with_context(|| format!("objectstore: writing {}", file.display()))?;
        list.push((Path::from(name), size));
    }
    Ok(Objects { list })
}

/// The `i`-th point read of a sequence: (object, range), zipfian over the
/// pages of the `small` objects.
fn point(zipf: &Zipf, i: u64) -> (u32, std::ops::Range<u64>) {
    let bits = scatter(i);
    let page = zipf.draw(bits);
    let per_obj = OBJECT / PAGE;
    let obj = (page / per_obj) as u32;
    let start = (page % per_obj) * PAGE;
    let len = PAGE * (1 + (scatter(bits) >> 60));
    (obj, start..(start + len).min(OBJECT))
}

/// Checks `got` is `range` of `obj`.
fn check(obj: u32, range: &std::ops::Range<u64>, got: &[u8]) -> Result<()> {
    ensure!(
        got == object_bytes(obj, range.clone()),
        "object {obj} {range:?}: {} bytes, not the object's",
        got.len()
    );
    Ok(())
}

/// What a job's point reads measured.
struct Measured {
    /// Each read's latency, in ns.
    lat: Vec<u64>,
    bytes: u64,
    seconds: f64,
    /// Remote GETs and bytes during them.
    gets: u64,
    remote_bytes: u64,
    /// The scanner's 1 MiB reads (the scan runs as long as the point
    /// reads, so its reads differ by engine) and the GETs of the scanned
    /// objects among `gets`.
    scan_reads: u64,
    scan_gets: u64,
}

/// Reads `ops` point reads (sequence numbers from `from`) from
/// [`TASKS`] tasks; with `scan`, a task scans the large objects beside them.
async fn point_reads(
    e: &Arc<Engine>,
    zipf: &Arc<Zipf>,
    objects: &Objects,
    from: u64,
    ops: u64,
    scan: bool,
) -> Result<Measured> {
    let (gets0, bytes0) = e.remote().seen.now();
    let scan_gets = || {
        e.remote()
            .seen
            .scan_gets
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let scan_gets0 = scan_gets();
    let t = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scanner = scan.then(|| {
        let (e, done) = (e.clone(), done.clone());
        let large: Vec<(u32, u64)> = (0..objects.list.len() as u32)
            .filter(|&i| objects.list[i as usize].0.as_ref().starts_with("scan/"))
            .map(|i| (i, objects.list[i as usize].1))
            .collect();
        tokio::spawn(async move {
            let mut reads = 0;
            'all: loop {
                for &(obj, size) in &large {
                    for at in (0..size).step_by(1 << 20) {
                        if done.load(std::sync::atomic::Ordering::Relaxed) {
                            break 'all;
                        }
                        e.read(obj, at..(at + (1 << 20)).min(size)).await?;
                        reads += 1;
                    }
                }
            }
            anyhow::Ok(reads)
        })
    });
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (e, zipf) = (e.clone(), zipf.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut bytes = 0;
                for i in (from + task..from + ops).step_by(TASKS as usize) {
                    let (obj, range) = point(&zipf, i);
                    let t = Instant::now();
                    let got = e.read(obj, range.clone()).await?;
                    lat.push(t.elapsed().as_nanos() as u64);
                    check(obj, &range, &got)?;
                    bytes += got.len() as u64;
                }
                anyhow::Ok((lat, bytes))
            })
        })
        .collect();
    let mut m = Measured {
        lat: Vec::new(),
        bytes: 0,
        seconds: 0.0,
        gets: 0,
        remote_bytes: 0,
        scan_reads: 0,
        scan_gets: 0,
    };
    for task in tasks {
        let (lat, bytes) = task.await??;
        m.lat.extend(lat);
        m.bytes += bytes;
    }
    m.seconds = t.elapsed().as_secs_f64();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(s) = scanner {
        m.scan_reads = s.await??;
    }
    let (gets, bytes) = e.remote().seen.now();
    (m.gets, m.remote_bytes) = (gets - gets0, bytes - bytes0);
    m.scan_gets = scan_gets() - scan_gets0;
    Ok(m)
}

/// The record of `engine`'s run of `job`.
fn record(
    engine: &str,
    job: JobName,
    m: &mut Measured,
    latency: Duration,
    note: String,
) -> RunRecord {
    m.lat.sort_unstable();
    let q = |p: f64| {
        m.lat
            .get(((m.lat.len() as f64 * p) as usize).min(m.lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let ops = m.lat.len() as u64;
    let hits = m
        .lat
        .iter()
        .filter(|&&l| l < latency.as_nanos() as u64)
        .count();
    let mut r = RunRecord {
        engine: engine.to_string(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: job,
        bs: m.bytes / ops.max(1),
        numjobs: TASKS as usize,
        dist: Some("zipf 0.99".into()),
        ..RunJob::default()
    };
    r.perf.bytes = m.bytes;
    r.perf.ops = ops;
    r.perf.seconds = m.seconds;
    r.perf.bw_bytes = m.bytes as f64 / m.seconds.max(1e-9);
    r.perf.iops = ops as f64 / m.seconds.max(1e-9);
    r.perf.lat_ns = Latency {
        p50: q(0.5),
        p75: q(0.75),
        p99: q(0.99),
        p999: q(0.999),
        mean: m.lat.iter().sum::<u64>() as f64 / ops.max(1) as f64,
        max: m.lat.last().copied().unwrap_or(0),
    };
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.cache.hit_ratio = Some(hits as f64 / ops.max(1) as f64);
    r.cache.hit_ratio_from = Some("reads faster than the remote's latency");
    r.cache.read_amplification = Some(m.remote_bytes as f64 / m.bytes.max(1) as f64);
    // The summary reads the GETs as this note's second word.
    let mut remote = format!("remote: {} GETs, {} bytes", m.gets, m.remote_bytes);
    if m.scan_reads > 0 {
        remote += &format!(
            "; the scan: {} reads of 1 MiB, {} GETs of its objects",
            m.scan_reads, m.scan_gets
        );
    }
    r.notes.push(remote);
    if !note.is_empty() {
        r.notes.push(note);
    }
    r
}

/// A job through the object mount.
type MountJob = fn(&ObjectBench, &FsPath) -> Result<RunRecord>;

/// Runs every engine `repeat` rounds over objects written in a temporary
/// directory in `data_dir`; the comparisons go to `notes`.
///
/// # Errors
/// The data could not be written, or an engine failed or read a wrong byte.
pub fn run(
    b: &ObjectBench,
    data_dir: &FsPath,
    repeat: u32,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    let root = tempfile::Builder::new()
        .prefix("foliocache-objectstore-")
        .tempdir_in(data_dir)?;
    let remote_dir = root.path().join("remote");
    std::fs::create_dir_all(&remote_dir)?;
    let objects = write_objects(&remote_dir, b)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    let small = (b.d / OBJECT).max(1);
    let zipf = Arc::new(Zipf::new(small * OBJECT / PAGE, 0.99).map_err(anyhow::Error::msg)?);
    let mut cgroups = None;
    let mut no_mount = None;
    let runs = rounds("objectstore", &ENGINES, JOBS, repeat, say, |c| {
        let label = ENGINES[c];
        let disk = root.path().join(format!("tier-{c}"));
        let _ = std::fs::remove_file(&disk);
        let mut records = Vec::new();
        for (job, scan) in [(ZIPF, false), (SCAN, true)]
            .into_iter()
            .filter(|j| runs(j.0))
        {
            let remote = Remote::new(&remote_dir, b.latency)?;
            let e = Arc::new(Engine::new(
                label,
                remote,
                objects.clone(),
                b.m,
                &disk,
                b.d,
            )?);
            rt.block_on(point_reads(&e, &zipf, &objects, 0, b.ops, scan))?;
            let mut m = rt.block_on(point_reads(&e, &zipf, &objects, b.ops, b.ops, scan))?;
            records.push(record(label, job, &mut m, b.latency, e.note()));
            drop(e);
            let _ = std::fs::remove_file(&disk);
        }
        let spec = restart::Spec {
            label: label.into(),
            remote: remote_dir.clone(),
            disk: disk.clone(),
            m: b.m,
            d: b.d,
            latency: b.latency,
            objects: small + 2,
            scan_object: b.scan_object,
            ops: b.ops,
            fill: b.fill,
        };
        if [FOYER, FOLIO_DISK].contains(&label) && runs(RESTART) {
            records.push(restart::run(&spec, &objects, &zipf, &rt)?);
            let _ = std::fs::remove_file(&disk);
        }
        if [FOLIO, FOLIO_DISK].contains(&label) && runs(MEMORY) {
            let avail = cgroups.get_or_insert_with(Availability::probe);
            records.push(memory::run(&spec, avail)?);
            let _ = std::fs::remove_file(&disk);
        }
        if label == FOLIO && runs(HITS) {
            records.push(hits::run(b, root.path(), &rt)?);
        }
        for (job, run) in [(MOUNT, mount::run as MountJob), (COLD, cold::run)] {
            if label == FOLIO && runs(job) {
                match foliocache_fuse::unavailable() {
                    None => records.push(run(b, root.path())?),
                    Some(why) => no_mount = Some(why),
                }
            }
        }
        if label == FOLIO_DISK && runs(LSM) {
            records.push(lsm::run(b.m, b.latency, root.path(), &rt)?);
        }
        #[cfg(feature = "parquet")]
        if label == FOLIO && runs(PARQUET) {
            records.push(parquet::run(b.parquet_file, root.path(), &rt)?);
        }
        records.extend(clients::run_named(label, b, root.path())?);
        Ok(records)
    })?;
    not_run(no_mount, notes, say);
    compare(&runs, notes, say);
    Ok(runs)
}

/// What did not run and why, to the notes: the mount job where FUSE is
/// unavailable (`no_mount`), the jobs and engines not built.
fn not_run(no_mount: Option<String>, notes: &mut Vec<String>, say: &dyn Fn(&str)) {
    let mut lines = Vec::new();
    if let Some(why) = no_mount {
        lines.push(format!(
            "mount and cold jobs skipped: FUSE is unavailable here: {why}"
        ));
    }
    if !JOBS.contains(&PARQUET) {
        lines.push(format!(
            "parquet job not built (the bench's `parquet` feature): {PARQUET_BUILD}"
        ));
    }
    if !ENGINES.contains(&FOYER) {
        lines.push(format!(
            "foyer engine not built (the bench's `foyer` feature): {FOYER_BUILD}"
        ));
    }
    for line in lines {
        say(&line);
        notes.push(line);
    }
}

/// Each engine's figures against the 4 MiB parts' and foyer's, to the
/// notes.
fn compare(runs: &[JobRuns], notes: &mut Vec<String>, say: &dyn Fn(&str)) {
    for job in runs
        .iter()
        .filter(|j| [HITS, MOUNT, COLD, LSM, PARQUET, DATAFUSION, SLATEDB].contains(&j.job))
    {
        for r in job.engines.iter().flatten() {
            for line in &r.notes {
                say(line);
                notes.push(line.clone());
            }
        }
    }
    for job in runs.iter().filter(|j| {
        ![
            RESTART, MEMORY, HITS, MOUNT, COLD, LSM, PARQUET, DATAFUSION, SLATEDB,
        ]
        .contains(&j.job)
    }) {
        let last = |label: &str| {
            job.engines
                .iter()
                .filter_map(|rs| rs.last())
                .find(|r| r.engine == label)
        };
        let gets = |r: &RunRecord| {
            r.notes
                .first()
                .and_then(|n| n.split_whitespace().nth(1)?.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        for base in [PARTS, FOYER] {
            let Some(bs) = last(base) else { continue };
            for e in [FOLIO, FOLIO_DISK] {
                let Some(r) = last(e) else { continue };
                let line = format!(
                    "{}: {e} / {base}: remote GETs {:.2}x, remote bytes {:.2}x, p99 {:.2}x, p50 {:.2}x; hit ratio {:.3} vs {:.3}",
                    job.job,
                    gets(r) / gets(bs),
                    r.cache.read_amplification.unwrap_or(f64::NAN) / bs.cache.read_amplification.unwrap_or(f64::NAN) * (r.perf.bytes as f64 / bs.perf.bytes.max(1) as f64),
                    r.perf.lat_ns.p99 as f64 / bs.perf.lat_ns.p99.max(1) as f64,
                    r.perf.lat_ns.p50 as f64 / bs.perf.lat_ns.p50.max(1) as f64,
                    r.cache.hit_ratio.unwrap_or(f64::NAN),
                    bs.cache.hit_ratio.unwrap_or(f64::NAN),
                );
                say(&line);
                notes.push(line);
            }
        }
    }
}
