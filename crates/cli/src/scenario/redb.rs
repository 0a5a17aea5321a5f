//! `redb`: the redb database (crates.io `redb`) on its own `FileBackend`
//! and on foliocache (`foliocache-redb`), with redb's benchmark's
//! workloads, every configuration under one memory limit M. See
//! `docs/bench.md` and `docs/redb.md`.
//!
//! Configurations (the table's engines):
//! - `file[cache=1/2]`, `file[cache=3/4]`: redb's `FileBackend` (buffered
//!   `pread`/`pwrite`), redb's cache at a half and three quarters of M;
//!   the rest is the kernel's page cache;
//! - `file[direct]`: `FileBackend` over a file opened with `O_DIRECT`
//!   (what redb users do for a bound on memory), redb's cache at three
//!   quarters of M;
//! - `foliocache`: [`foliocache_redb::FolioBackend`], redb's cache at a
//!   sixteenth of M (its write buffer), foliocache most of the rest;
//! - `memory[bound]`: a backend in memory ([`MemBound`]: chunks behind a
//!   lock, a read is a lock and a copy, nothing else), redb's cache a
//!   sixteenth of M as `foliocache`'s, with data that fits only, and
//!   without the memory limit (the database in memory, beside redb's heap,
//!   outgrows M): the most
//!   any backend under redb's small cache could give, since each of redb's
//!   cache misses costs redb a fresh zeroed buffer, a copy into it and an
//!   LRU insertion whatever the backend does (see docs/redb.md);
//! - `direct[bound]`: [`MemBound`] over an `O_DIRECT` file under the same
//!   small redb cache, data that fits only, without M: reads out of
//!   memory, and a sync writes the pages changed since the last one
//!   through foliocache's IO engine in one batch and flushes
//!   (`fdatasync`). The IO any write-back cache over `O_DIRECT` has to do
//!   for a commit, with nothing of a cache's own: the bound of
//!   `foliocache`'s commits;
//! - `file (better)`: in each round, the faster of the two buffered
//!   configurations, which the targets compare with.
//!
//! Workloads (redb-bench's, 24-byte keys and 150-byte values): bulk load
//! in one transaction, individual writes with a commit each, random point
//! reads, range reads, reads from 4 threads, removals; each at two sizes,
//! data that fits M and data 4x M. Every configuration's database passes
//! redb's integrity check after its run, or the scenario fails.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use backing::aio::{IoEngine, IoEngineConfig, WriteReq};
use backing::{AlignedBuf, Backing, FileBacking, FileOptions, IoBuf};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTableMetadata, StorageBackend, TableDefinition,
};

use super::embedded::{self, scatter, ChildRun, Measured, Sizes};
use super::{Program, Scenario};
use crate::args::BenchArgs;
use crate::cgroup::Availability;
use crate::targets::{self, bandwidth, Given, JobName, JobRuns, Judged, Target};
use crate::units::{fmt_size, fmt_size_approx};

/// The key and value sizes (redb-bench's).
const KEY: usize = 24;
const VALUE: usize = 150;
const ENTRY: u64 = (KEY + VALUE) as u64;
/// M (full, and with `--quick`) unless `--capacity` says otherwise.
const M: u64 = 256 << 20;
const QUICK_M: u64 = 32 << 20;
/// The smallest M.
const MIN_M: u64 = 16 << 20;
/// Random reads (full, and with `--quick`); range reads are a tenth as
/// many ranges of [`RANGE`] entries; individual writes a hundredth.
const READS: u64 = 1_000_000;
const QUICK_READS: u64 = 20_000;
/// Entries per range read.
const RANGE: usize = 10;
/// Threads of the threaded reads.
const THREADS: u64 = 4;

/// The configurations, by label.
pub const FILE_HALF: &str = "file[cache=1/2]";
/// redb's cache at three quarters of M.
pub const FILE_3_4: &str = "file[cache=3/4]";
/// `FileBackend` on an `O_DIRECT` file.
pub const FILE_DIRECT: &str = "file[direct]";
/// On foliocache.
pub const FOLIO: &str = "foliocache";
/// [`MemBound`] under the same small redb cache as [`FOLIO`]: the bound
/// of any backend (data that fits only).
pub const MEM_BOUND: &str = "memory[bound]";
/// [`MemBound`] over an `O_DIRECT` file, its syncs through the IO engine,
/// under the same small redb cache: the bound of a write-back cache over
/// `O_DIRECT` (data that fits only).
pub const DIRECT_BOUND: &str = "direct[bound]";
/// The faster buffered configuration, round by round.
pub const FILE_BETTER: &str = "file (better)";
/// The configurations that run, in order.
const CONFIGS: [&str; 6] = [
    FILE_HALF,
    FILE_3_4,
    FILE_DIRECT,
    FOLIO,
    MEM_BOUND,
    DIRECT_BOUND,
];
/// The bounds: run without M, and with data that fits only.
const BOUNDS: [&str; 2] = [MEM_BOUND, DIRECT_BOUND];

/// The jobs: each workload, in the order they run on one database, at
/// each size (`fits`, `4x`).
pub const JOBS: [[JobName; 6]; 2] = [
    [
        "bulk load, fits",
        "individual writes, fits",
        "random reads, fits",
        "range reads, fits",
        "4-thread reads, fits",
        "removals, fits",
    ],
    [
        "bulk load, 4x",
        "individual writes, 4x",
        "random reads, 4x",
        "range reads, 4x",
        "4-thread reads, 4x",
        "removals, 4x",
    ],
];

/// The scenario's ratios and targets (the issue's): foliocache over the
/// better buffered configuration and over `O_DIRECT`.
#[rustfmt::skip]
pub const TARGETS: &[Target<&str>] = &[
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[1][2]).at_least(1.15),
    bandwidth(FOLIO, FILE_DIRECT).of(JOBS[1][2]).at_least(2.0),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[0][2]).at_least(0.9),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[0][1]).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[1][1]).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[0][0]).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[1][0]).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[0][3]),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[1][3]),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[0][4]),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[1][4]),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[0][5]),
    bandwidth(FOLIO, FILE_BETTER).of(JOBS[1][5]),
    bandwidth(FOLIO, FILE_DIRECT).of(JOBS[1][0]),
    bandwidth(FOLIO, FILE_DIRECT).of(JOBS[1][1]),
    // The bound where the data fits: what redb's miss path allows any
    // backend under a small redb cache, and how near foliocache comes.
    bandwidth(MEM_BOUND, FILE_BETTER).of(JOBS[0][2]),
    bandwidth(FOLIO, MEM_BOUND).of(JOBS[0][2]),
    bandwidth(FOLIO, MEM_BOUND).of(JOBS[0][0]),
    bandwidth(FOLIO, MEM_BOUND).of(JOBS[0][1]),
    bandwidth(FOLIO, MEM_BOUND).of(JOBS[0][3]),
    // The bound of commits: the IO of a write-back cache over O_DIRECT,
    // and how near foliocache comes.
    bandwidth(DIRECT_BOUND, FILE_BETTER).of(JOBS[0][1]),
    bandwidth(FOLIO, DIRECT_BOUND).of(JOBS[0][1]),
];

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct RedbBench {
    /// M: every configuration's memory limit.
    pub limit: u64,
    /// Entries of each size: fits, 4x.
    pub entries: [u64; 2],
    /// Random reads per read workload.
    pub reads: u64,
}

/// The scenario: M is `--capacity` or [`M`] ([`QUICK_M`] with
/// `--quick`); the data that fits M is a quarter of it in raw entries,
/// the larger `--size` or 4 M.
///
/// # Errors
/// `--engine` given, or M too small.
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    let (limit, big) =
        embedded::limit_and_size("redb", args, &CONFIGS, [M, QUICK_M, MIN_M], quick)?;
    let entries = [(limit / 4 / ENTRY).max(100), (big / ENTRY).max(100)];
    let reads = if quick { QUICK_READS } else { READS };
    let Judged { ratios, targets } =
        targets::judge(TARGETS, |c| Some(c.to_string()), Given::default());
    Ok(Scenario {
        name: "redb".into(),
        description: format!(
            "redb on its FileBackend and on foliocache, redb-bench's workloads ({KEY}-byte \
             keys, {VALUE}-byte values): bulk load in one transaction, {} individual writes \
             with a commit each, {reads} random point reads, {} range reads of {RANGE} entries, \
             {reads} reads from {THREADS} threads, removal of half the entries; at two sizes: \
             {} entries ({} raw: fits M) and {} ({} raw: 4x M). Every configuration runs in a \
             memory cgroup of M = {} (--capacity): {FILE_HALF} and {FILE_3_4} (redb's cache at \
             a half and three quarters of M, the kernel's page cache the rest), {FILE_DIRECT} \
             (O_DIRECT, redb's cache at three quarters of M), {FOLIO} (redb's cache a sixteenth \
             of M, foliocache's {}), {MEM_BOUND} (a backend in memory, a lock and a copy per read, under the same small \
             redb cache, data that fits only, run without M: the bound of any backend), {DIRECT_BOUND} (the same over an \
             O_DIRECT file, a sync writing the changed pages through the IO engine and flushing: the bound \
             of a write-back cache's commits); {FILE_BETTER} is the \
             faster of the first two, round by round. Bandwidth is operations times {ENTRY} bytes (a key and its value); latency \
             the mean. Each database passes redb's integrity check after its run.",
            individual_writes(reads),
            reads / 10,
            entries[0],
            fmt_size_approx(entries[0] * ENTRY),
            entries[1],
            fmt_size_approx(entries[1] * ENTRY),
            fmt_size(limit),
            fmt_size(folio_capacity(limit)),
        ),
        jobs: Vec::new(),
        ratios,
        targets,
        detailed: false,
        programs: Some(Program::Redb(RedbBench {
            limit,
            entries,
            reads,
        })),
    })
}

/// Individual writes for `reads` random reads: at least 1,000, so that the
/// workload lasts long enough that one slow flush of the device does not
/// decide a round (with a few hundred it lasted tens of milliseconds, and
/// `file (better)`, the faster of two such samples, sat above either
/// configuration's mean).
fn individual_writes(reads: u64) -> u64 {
    (reads / 100).max(1000)
}

/// redb's cache in each configuration, for M = `m`.
fn redb_cache(config: &str, m: u64) -> u64 {
    match config {
        FILE_HALF => m / 2,
        FILE_3_4 | FILE_DIRECT => m / 4 * 3,
        _ => m / 16,
    }
}

/// foliocache's capacity for M = `m`: what redb's cache leaves, less the
/// process's own memory ([`embedded::headroom`]) and what redb's heap
/// grows by with its database ([`heap_growth`]), in whole MiB (at least
/// 1 MiB).
pub fn folio_capacity(m: u64) -> u64 {
    m.saturating_sub(m / 16 + embedded::headroom(m) + heap_growth(m))
        .max(1 << 20)
        >> 20
        << 20
}

/// What redb's process grows by over a run with data 4x M, besides its
/// caches: a sixteenth of M. The heap grows with the database (redb's
/// state, and foliocache's index of a file four times its cache); without
/// room for that growth the pressure watcher held the process at its
/// cgroup's limit, and the OOM killer ended some runs (docs/redb.md,
/// "Bounding a redb process's memory").
fn heap_growth(m: u64) -> u64 {
    m / 16
}

/// Runs the scenario in `data_dir`.
///
/// # Errors
/// A configuration failed to run, or its database failed redb's
/// integrity check.
pub fn run(
    rb: &RedbBench,
    data_dir: &Path,
    repeat: u32,
    avail: &Availability,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    let sizes = Sizes {
        scenario: "redb",
        configs: &CONFIGS,
        jobs: &JOBS,
        n: rb.entries,
        limit: rb.limit,
        ops: rb.reads,
        bytes_per_op: ENTRY,
        unlimited: &[
            (
                MEM_BOUND,
                "the in-memory bound runs without M: it measures redb's miss path, not memory \
                 (the database, with redb's heap, outgrows M where foliocache's cache holds it)",
            ),
            (
                DIRECT_BOUND,
                "the O_DIRECT bound runs without M: it measures a commit's IO, not memory",
            ),
        ],
    };
    let mut runs = embedded::run_sizes(&sizes, data_dir, repeat, avail, notes, say, |c| {
        (c == FOLIO).then(|| folio_capacity(rb.limit))
    })?;
    embedded::add_better(&mut runs, FILE_HALF, FILE_3_4, FILE_BETTER);
    Ok(runs)
}

/// A fresh database at `path` for `config`: its backend and redb's cache.
fn open(config: &str, path: &Path, m: u64) -> Result<(Database, Option<foliocache::Cache>)> {
    let mut b = Database::builder();
    b.set_cache_size(redb_cache(config, m) as usize);
    let (db, cache) = match config {
        FOLIO => {
            let cache = embedded::folio_cache(folio_capacity(m), m)?;
            let backend = foliocache_redb::FolioBackend::open(&cache, path)?;
            (b.create_with_backend(backend)?, Some(cache))
        }
        FILE_DIRECT => {
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .with_context(|| format!("redb: opening {} with O_DIRECT", path.display()))?;
            (b.create_with_backend(Aligned::new(f))?, None)
        }
        MEM_BOUND => (b.create_with_backend(MemBound::default())?, None),
        DIRECT_BOUND => (b.create_with_backend(MemBound::on_disk(path)?)?, None),
        _ => (b.create(path)?, None),
    };
    Ok((db, cache))
}

/// One configuration's run at one size, in its child process
/// ([`embedded::child_main`]): every workload on a fresh database of
/// `run.n` entries, then redb's integrity check; the database is removed
/// after.
///
/// # Errors
/// redb's, or the check failed.
pub fn one_run(run: &ChildRun) -> Result<Vec<Measured>> {
    let (config, path, entries) = (run.config.as_str(), run.path.as_path(), run.n);
    let _ = std::fs::remove_file(path);
    let Some(jobs) = JOBS.get(run.size) else {
        bail!("redb: no size {}", run.size);
    };
    if BOUNDS.contains(&config) && run.size != 0 {
        return Ok(embedded::failed(
            jobs,
            "not run: the bound holds the whole database in the process, and data 4x M does not fit M",
        ));
    }
    let reads = run.ops;
    let (mut db, cache) = open(config, path, run.limit)?;
    let db_ref = &db;
    let mut out = Vec::new();
    // After each workload, what foliocache did so far.
    let note = |out: &mut Vec<Measured>| {
        if let (Some(m), Some(c)) = (out.last_mut(), &cache) {
            embedded::add_note(m, embedded::cache_note(c));
        }
    };
    out.push(embedded::timed(jobs[0], entries, || {
        let tx = db_ref.begin_write()?;
        {
            let mut t = tx.open_table(TABLE)?;
            for i in 0..entries {
                t.insert(key(i).as_slice(), value(i).as_slice())?;
            }
        }
        tx.commit()?;
        Ok(None)
    })?);
    note(&mut out);
    let writes = individual_writes(reads);
    out.push(embedded::timed(jobs[1], writes, || {
        for i in 0..writes {
            let k = entries + i;
            let mut tx = db_ref.begin_write()?;
            tx.set_durability(Durability::Immediate)?;
            tx.open_table(TABLE)?
                .insert(key(k).as_slice(), value(k).as_slice())?;
            tx.commit()?;
        }
        Ok(None)
    })?);
    note(&mut out);
    let total = entries + writes;
    out.push(embedded::timed(jobs[2], reads, || {
        let found = point_reads(db_ref, total, reads, 1)?;
        check_found(found, reads)
    })?);
    note(&mut out);
    let ranges = (reads / 10).max(1);
    out.push(embedded::timed(jobs[3], ranges, || {
        let rx = db_ref.begin_read()?;
        let t = rx.open_table(TABLE)?;
        let mut seen = 0u64;
        for i in 0..ranges {
            let from = key(scatter(i ^ 0x5eed) % total);
            for e in t.range(from.as_slice()..)?.take(RANGE) {
                let (_, v) = e?;
                seen += u64::from(v.value().len() == VALUE);
            }
        }
        Ok(Some(format!("{seen} entries read in {ranges} ranges")))
    })?);
    note(&mut out);
    out.push(embedded::timed(jobs[4], reads, || {
        let found = point_reads(db_ref, total, reads, THREADS)?;
        check_found(found, reads)
    })?);
    note(&mut out);
    let removals = total / 2;
    out.push(embedded::timed(jobs[5], removals, || {
        let tx = db_ref.begin_write()?;
        {
            let mut t = tx.open_table(TABLE)?;
            for i in 0..removals {
                t.remove(key(i * 2).as_slice())?;
            }
        }
        tx.commit()?;
        Ok(None)
    })?);
    note(&mut out);
    if !db.check_integrity()? {
        bail!("redb ({config}): the integrity check repaired the database after the run");
    }
    let left = db.begin_read()?.open_table(TABLE)?.len()?;
    if left != total - removals {
        bail!(
            "redb ({config}): {left} entries left, not {}",
            total - removals
        );
    }
    drop(db);
    drop(cache);
    let _ = std::fs::remove_file(path);
    Ok(out)
}

/// The table.
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

/// Entry `i`'s key: its scattered image (so keys arrive in random order,
/// as redb-bench's random ones), then `i`, then padding.
fn key(i: u64) -> [u8; KEY] {
    let mut k = [0u8; KEY];
    k[..8].copy_from_slice(&scatter(i).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_be_bytes());
    k
}

/// Entry `i`'s value.
fn value(i: u64) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for (n, c) in v.chunks_mut(8).enumerate() {
        let w = scatter(i.wrapping_add(n as u64)).to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
    v
}

/// `reads` reads of random entries among `total`, split over `threads`
/// threads, each in a read transaction of its own: the entries found
/// with their values whole.
fn point_reads(db: &Database, total: u64, reads: u64, threads: u64) -> Result<u64> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<u64> {
                    let rx = db.begin_read()?;
                    let tb = rx.open_table(TABLE)?;
                    let mut found = 0;
                    for n in (t..reads).step_by(threads as usize) {
                        let i = scatter(n ^ (t << 48)) % total;
                        if let Some(v) = tb.get(key(i).as_slice())? {
                            found += u64::from(v.value() == value(i).as_slice());
                        }
                    }
                    Ok(found)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a reader panicked"))?)
            .sum()
    })
}

/// Every read found its entry.
fn check_found(found: u64, reads: u64) -> Result<Option<String>> {
    if found != reads {
        bail!("redb: {found} of {reads} random reads found their entry");
    }
    Ok(Some(format!("{found} of {reads} found")))
}

/// A `StorageBackend` over an `O_DIRECT` file, as a redb user must write
/// one: redb's `FileBackend` hands the kernel redb's own buffers, which
/// `O_DIRECT` refuses (`EINVAL`) unless they are aligned; this one reads
/// and writes the whole 4 KiB blocks around each request through a
/// page-aligned buffer of the thread's (an anonymous mapping, grown as
/// needed), and a write of part of a block reads the block first.
#[derive(Debug)]
struct Aligned {
    file: std::fs::File,
    len: std::sync::Mutex<u64>,
}

/// `O_DIRECT`'s alignment here.
const BLOCK: u64 = 4096;

impl Aligned {
    fn new(file: std::fs::File) -> Aligned {
        let len = file.metadata().map_or(0, |m| m.len());
        Aligned {
            file,
            len: std::sync::Mutex::new(len),
        }
    }

    fn len_lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.len.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f` with the blocks covering `offset..offset + n` (their
    /// start and an aligned buffer of their size, zeroed or not).
    fn with_blocks<R>(
        offset: u64,
        n: usize,
        f: impl FnOnce(u64, &mut [u8]) -> std::io::Result<R>,
    ) -> std::io::Result<R> {
        thread_local! {
            static BUF: std::cell::RefCell<Option<memmap2::MmapMut>> =
                const { std::cell::RefCell::new(None) };
        }
        let start = offset / BLOCK * BLOCK;
        let len = ((offset + n as u64).div_ceil(BLOCK) * BLOCK - start) as usize;
        BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.as_ref().is_none_or(|m| m.len() < len) {
                *buf = Some(memmap2::MmapMut::map_anon(len.next_power_of_two())?);
            }
            match buf.as_mut() {
                Some(m) => f(start, &mut m[..len]),
                None => Err(std::io::Error::other("no buffer")),
            }
        })
    }
}

impl Aligned {
    /// Reads the blocks at `start` into `b`, zeros past the end on disk
    /// (a file grown by `set_len`).
    fn read_blocks(&self, start: u64, b: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut got = 0;
        while got < b.len() {
            match self.file.read_at(&mut b[got..], start + got as u64)? {
                0 => break,
                k => got += k,
            }
        }
        b[got..].fill(0);
        Ok(())
    }
}

impl StorageBackend for Aligned {
    fn len(&self) -> std::io::Result<u64> {
        Ok(*self.len_lock())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        if offset
            .checked_add(out.len() as u64)
            .is_none_or(|end| end > *self.len_lock())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of the storage",
            ));
        }
        Aligned::with_blocks(offset, out.len(), |start, b| {
            self.read_blocks(start, b)?;
            let from = (offset - start) as usize;
            out.copy_from_slice(&b[from..from + out.len()]);
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut l = self.len_lock();
        self.file.set_len(len)?;
        *l = len;
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        Aligned::with_blocks(offset, data.len(), |start, b| {
            let from = (offset - start) as usize;
            if from != 0 || data.len() != b.len() {
                self.read_blocks(start, b)?;
            }
            b[from..from + data.len()].copy_from_slice(data);
            self.file.write_all_at(b, start)
        })?;
        let mut l = self.len_lock();
        *l = (*l).max(offset + data.len() as u64);
        Ok(())
    }
}

/// A `StorageBackend` in memory, for the bound of what any backend could
/// give redb ([`MEM_BOUND`]): a read is a shared lock and a copy. The
/// storage is chunks of [`CHUNK`] bytes that are never moved, so growth
/// costs only the new chunks (redb's `InMemoryBackend`, one `Vec` resized,
/// briefly holds twice the database while it grows, and outgrew M).
///
/// [`MemBound::on_disk`] keeps a file too ([`DIRECT_BOUND`]): the bound
/// of a commit over a write-back cache on `O_DIRECT`. A write marks its
/// pages; a sync writes the marked pages, runs of adjacent ones as one
/// write each, straight from the chunks (aligned, so no bounce copy)
/// through the IO engine in one batch ([`IoEngine::write_all`], the
/// thread's own io_uring as foliocache's writeback uses it), then
/// `fdatasync`s; `set_len` sets the file's length too. That is the IO a
/// commit over foliocache does, without any of a cache's own work.
#[derive(Debug, Default)]
struct MemBound {
    /// The chunks, and the storage's length.
    data: std::sync::RwLock<(Vec<AlignedBuf>, u64)>,
    /// The file behind the memory, for [`DIRECT_BOUND`].
    disk: Option<Disk>,
}

/// [`MemBound`]'s file: where its syncs write, and what they write.
struct Disk {
    file: Arc<dyn Backing>,
    engine: IoEngine,
    /// The pages written since the last sync.
    dirty: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

/// [`MemBound`]'s chunk.
const CHUNK: usize = 1 << 16;

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk")
            .field("file", &self.file.info())
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl MemBound {
    /// An empty storage over a new `O_DIRECT` file at `path`.
    fn on_disk(path: &Path) -> Result<MemBound> {
        let opts = FileOptions::new().write(true).create(true).truncate(true);
        let file = FileBacking::open(path, &opts)
            .with_context(|| format!("redb: opening {} with O_DIRECT", path.display()))?;
        if !file.is_direct() {
            bail!(
                "{DIRECT_BOUND}: {} is not O_DIRECT: {}",
                path.display(),
                file.info()
            );
        }
        Ok(MemBound {
            data: Default::default(),
            disk: Some(Disk {
                file: Arc::new(file),
                engine: IoEngine::new(IoEngineConfig::new()).context("redb: the IO engine")?,
                dirty: Default::default(),
            }),
        })
    }

    /// Writes the pages marked since the last sync to the file, and
    /// flushes it. On an error the pages stay marked, for the next sync.
    fn sync_disk(&self, disk: &Disk) -> std::io::Result<()> {
        let pages = std::mem::take(&mut *disk.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        let r = self.write_pages(disk, &pages);
        if r.is_err() {
            disk.dirty
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(pages);
        }
        r
    }

    /// Writes `pages` to the file in one batch, and flushes it.
    fn write_pages(
        &self,
        disk: &Disk,
        pages: &std::collections::BTreeSet<u64>,
    ) -> std::io::Result<()> {
        let d = self.data.read().unwrap_or_else(|e| e.into_inner());
        // Runs of adjacent pages: (offset, the pages' memory).
        let mut runs: Vec<(u64, Vec<IoBuf<'_>>)> = Vec::new();
        for &p in pages {
            let at = p * BLOCK;
            if at >= d.1 {
                break;
            }
            let within = (at % CHUNK as u64) as usize;
            let chunk = &d.0[(at / CHUNK as u64) as usize];
            let page = IoBuf::new(&chunk[within..within + BLOCK as usize])
                .map_err(std::io::Error::from)?;
            match runs.last_mut() {
                Some((start, bufs)) if *start + bufs.len() as u64 * BLOCK == at => bufs.push(page),
                _ => runs.push((at, vec![page])),
            }
        }
        let reqs: Vec<WriteReq<'_>> = runs
            .iter()
            .map(|(offset, bufs)| WriteReq {
                backing: &disk.file,
                offset: *offset,
                bufs,
            })
            .collect();
        for r in disk.engine.write_all(&reqs) {
            r?;
        }
        if runs
            .last()
            .is_some_and(|(at, bufs)| at + bufs.len() as u64 * BLOCK > d.1)
        {
            // The last page went past the length.
            disk.file.set_len(d.1)?;
        }
        disk.file.sync_data()
    }

    /// Calls `f` on each chunk's part of `offset..offset + n`, with that
    /// part's position in the range.
    fn each(offset: u64, n: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
        let mut done = 0;
        while done < n {
            let at = offset + done as u64;
            let (c, within) = ((at / CHUNK as u64) as usize, (at % CHUNK as u64) as usize);
            let k = (CHUNK - within).min(n - done);
            f(c, done, within..within + k);
            done += k;
        }
    }

    /// `offset..offset + n` lies within a storage of `len` bytes.
    fn within(len: u64, offset: u64, n: usize) -> std::io::Result<()> {
        if offset.checked_add(n as u64).is_none_or(|end| end > len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "past the end of the storage",
            ));
        }
        Ok(())
    }
}

impl StorageBackend for MemBound {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.data.read().unwrap_or_else(|e| e.into_inner()).1)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let d = self.data.read().unwrap_or_else(|e| e.into_inner());
        MemBound::within(d.1, offset, out.len())?;
        MemBound::each(offset, out.len(), |c, at, r| {
            out[at..at + r.len()].copy_from_slice(&d.0[c][r]);
        });
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut d = self.data.write().unwrap_or_else(|e| e.into_inner());
        if let Some(disk) = &self.disk {
            // The file first: if it fails, nothing changed.
            disk.file.set_len(len)?;
        }
        let chunks = len.div_ceil(CHUNK as u64) as usize;
        while d.0.len() < chunks {
            d.0.push(AlignedBuf::zeroed(CHUNK)?);
        }
        d.0.truncate(chunks);
        if len < d.1 {
            // What a later growth exposes again reads as zeros.
            let tail = (len % CHUNK as u64) as usize;
            if let Some(last) = d.0.last_mut().filter(|_| tail != 0) {
                last[tail..].fill(0);
            }
        }
        d.1 = len;
        if let Some(disk) = &self.disk {
            let first = len.div_ceil(BLOCK);
            disk.dirty
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .split_off(&first);
        }
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        match &self.disk {
            Some(disk) => self.sync_disk(disk),
            None => Ok(()),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut d = self.data.write().unwrap_or_else(|e| e.into_inner());
        MemBound::within(d.1, offset, data.len())?;
        MemBound::each(offset, data.len(), |c, at, r| {
            let n = r.len();
            d.0[c][r].copy_from_slice(&data[at..at + n]);
        });
        if let Some(disk) = self.disk.as_ref().filter(|_| !data.is_empty()) {
            let (first, last) = (offset / BLOCK, (offset + data.len() as u64 - 1) / BLOCK);
            disk.dirty
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(first..=last);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A [`MemBound`] on an `O_DIRECT` file in a fresh directory, or `None`
    /// where the directory's filesystem has no `O_DIRECT` (skipped with a
    /// reason; under CI it fails).
    fn on_disk(dir: &tempfile::TempDir) -> Option<(MemBound, std::path::PathBuf)> {
        let path = dir.path().join("bound.db");
        match MemBound::on_disk(&path) {
            Ok(m) => Some((m, path)),
            Err(e) => {
                test_support::skip_or_fail("direct[bound]", format!("{e:#}"));
                None
            }
        }
    }

    #[test]
    fn the_o_direct_bound_writes_what_a_sync_covers_and_nothing_past_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let Some((m, path)) = on_disk(&dir) else {
            return;
        };
        m.set_len(5 * BLOCK).unwrap();
        // A run of two pages, a page alone, and part of a page.
        m.write(BLOCK, &[1; 2 * BLOCK as usize]).unwrap();
        m.write(4 * BLOCK, &[2; BLOCK as usize]).unwrap();
        m.write(10, &[3; 20]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![0; 5 * BLOCK as usize]);
        m.sync_data().unwrap();
        let mut want = vec![0u8; 5 * BLOCK as usize];
        want[BLOCK as usize..3 * BLOCK as usize].fill(1);
        want[4 * BLOCK as usize..].fill(2);
        want[10..30].fill(3);
        assert_eq!(std::fs::read(&path).unwrap(), want);
        // Written, then cut off before the sync: the page is not written
        // (the file ends before it), and growth reads as zeros again.
        m.write(4 * BLOCK, &[4; BLOCK as usize]).unwrap();
        m.set_len(4 * BLOCK).unwrap();
        m.sync_data().unwrap();
        want.truncate(4 * BLOCK as usize);
        assert_eq!(std::fs::read(&path).unwrap(), want);
        m.set_len(5 * BLOCK).unwrap();
        let mut out = [9u8; BLOCK as usize];
        m.read(4 * BLOCK, &mut out).unwrap();
        assert_eq!(out, [0; BLOCK as usize]);
        // A length that ends inside a page: the file ends there too.
        m.set_len(5 * BLOCK - 100).unwrap();
        m.write(4 * BLOCK, &[5; 8]).unwrap();
        m.sync_data().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file.len() as u64, 5 * BLOCK - 100);
        assert_eq!(
            &file[4 * BLOCK as usize..][..9],
            &[5, 5, 5, 5, 5, 5, 5, 5, 0]
        );
        // Past the end: an error, as redb's contract asks.
        assert!(m.read(5 * BLOCK - 100, &mut [0; 1]).is_err());
        assert!(m.write(5 * BLOCK - 100, &[0; 1]).is_err());
    }

    #[test]
    fn redb_commits_on_the_o_direct_bound_reach_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let Some((m, path)) = on_disk(&dir) else {
            return;
        };
        let mut b = Database::builder();
        b.set_cache_size(1 << 20);
        let db = b.create_with_backend(m).unwrap();
        let table: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
        for i in 0..50u64 {
            let tx = db.begin_write().unwrap();
            tx.open_table(table)
                .unwrap()
                .insert(i, &[7u8; 150][..])
                .unwrap();
            tx.commit().unwrap();
        }
        let len = db
            .begin_read()
            .unwrap()
            .open_table(table)
            .unwrap()
            .len()
            .unwrap();
        assert_eq!(len, 50);
        drop(db);
        // What the commits synced is on the file: redb opens it with its
        // own FileBackend and finds every entry.
        let db = Database::open(&path).unwrap();
        let t = db.begin_read().unwrap().open_table(table).unwrap();
        assert_eq!(t.len().unwrap(), 50);
        assert_eq!(t.get(49).unwrap().unwrap().value(), &[7u8; 150][..]);
    }
}
