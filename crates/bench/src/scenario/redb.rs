//! `redb`: the redb database (crates.io `redb`) on its own `FileBackend`
//! and on foliocache (`foliocache-redb`), with redb's benchmark's
//! workloads, every configuration under one memory limit M. See
//! `docs/bench/databases.md` and `docs/redb.md`.
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

use anyhow::{bail, Context, Result};
use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata, TableDefinition};

use super::embedded::{self, ChildRun, Embedded, EmbeddedBench, Measured};
use super::rounds::scatter;
use super::FullQuick;
use crate::targets::{bandwidth, JobName, Target};
use crate::units::{fmt_size, fmt_size_approx};
use storage::{Aligned, MemBound};

mod storage;

/// The key and value sizes (redb-bench's).
const KEY: usize = 24;
const VALUE: usize = 150;
const ENTRY: u64 = (KEY + VALUE) as u64;
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
/// The bounds: run without M, and with data that fits only.
const BOUNDS: [&str; 2] = [MEM_BOUND, DIRECT_BOUND];

/// One size's jobs, by workload, in the order they run on one database.
#[derive(Debug, Clone, Copy)]
pub struct Jobs {
    /// Every entry inserted in one transaction.
    pub bulk_load: JobName,
    /// Inserts, each in a transaction committed durably.
    pub individual_writes: JobName,
    /// Random point reads.
    pub random_reads: JobName,
    /// Reads of [`RANGE`] entries from a random key.
    pub range_reads: JobName,
    /// Random point reads from [`THREADS`] threads.
    pub threaded_reads: JobName,
    /// Half the entries removed in one transaction.
    pub removals: JobName,
}

impl Jobs {
    /// The jobs in the order they run.
    const fn all(&self) -> [JobName; 6] {
        [
            self.bulk_load,
            self.individual_writes,
            self.random_reads,
            self.range_reads,
            self.threaded_reads,
            self.removals,
        ]
    }
}

/// The jobs with data that fits M.
pub const FITS: Jobs = Jobs {
    bulk_load: "bulk load, fits",
    individual_writes: "individual writes, fits",
    random_reads: "random reads, fits",
    range_reads: "range reads, fits",
    threaded_reads: "4-thread reads, fits",
    removals: "removals, fits",
};
/// The jobs with data 4x M.
pub const BIG: Jobs = Jobs {
    bulk_load: "bulk load, 4x",
    individual_writes: "individual writes, 4x",
    random_reads: "random reads, 4x",
    range_reads: "range reads, 4x",
    threaded_reads: "4-thread reads, 4x",
    removals: "removals, 4x",
};

/// The scenario's ratios and targets (the issue's): foliocache over the
/// better buffered configuration and over `O_DIRECT`.
#[rustfmt::skip]
pub const TARGETS: &[Target<&str>] = &[
    bandwidth(FOLIO, FILE_BETTER).of(BIG.random_reads).at_least(1.15),
    bandwidth(FOLIO, FILE_DIRECT).of(BIG.random_reads).at_least(2.0),
    bandwidth(FOLIO, FILE_BETTER).of(FITS.random_reads).at_least(0.9),
    bandwidth(FOLIO, FILE_BETTER).of(FITS.individual_writes).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(BIG.individual_writes).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(FITS.bulk_load).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(BIG.bulk_load).at_least(1.0),
    bandwidth(FOLIO, FILE_BETTER).of(FITS.range_reads),
    bandwidth(FOLIO, FILE_BETTER).of(BIG.range_reads),
    bandwidth(FOLIO, FILE_BETTER).of(FITS.threaded_reads),
    bandwidth(FOLIO, FILE_BETTER).of(BIG.threaded_reads),
    bandwidth(FOLIO, FILE_BETTER).of(FITS.removals),
    bandwidth(FOLIO, FILE_BETTER).of(BIG.removals),
    bandwidth(FOLIO, FILE_DIRECT).of(BIG.bulk_load),
    bandwidth(FOLIO, FILE_DIRECT).of(BIG.individual_writes),
    // The bound where the data fits: what redb's miss path allows any
    // backend under a small redb cache, and how near foliocache comes.
    bandwidth(MEM_BOUND, FILE_BETTER).of(FITS.random_reads),
    bandwidth(FOLIO, MEM_BOUND).of(FITS.random_reads),
    bandwidth(FOLIO, MEM_BOUND).of(FITS.bulk_load),
    bandwidth(FOLIO, MEM_BOUND).of(FITS.individual_writes),
    bandwidth(FOLIO, MEM_BOUND).of(FITS.range_reads),
    // The bound of commits: the IO of a write-back cache over O_DIRECT,
    // and how near foliocache comes.
    bandwidth(DIRECT_BOUND, FILE_BETTER).of(FITS.individual_writes),
    bandwidth(FOLIO, DIRECT_BOUND).of(FITS.individual_writes),
];

/// The scenario's shape: M 256 MiB (32 MiB with `--quick`, at least
/// 16 MiB), 1,000,000 random reads (20,000 with `--quick`); range reads
/// are a tenth as many ranges, individual writes [`individual_writes`].
pub static DB: Embedded = Embedded {
    name: "redb",
    configs: &[
        FILE_HALF,
        FILE_3_4,
        FILE_DIRECT,
        FOLIO,
        MEM_BOUND,
        DIRECT_BOUND,
    ],
    jobs: [FITS.all(), BIG.all()],
    m: FullQuick(256 << 20, 32 << 20),
    min_m: 16 << 20,
    bytes_per_op: ENTRY,
    min_n: 100,
    ops: FullQuick(1_000_000, 20_000),
    targets: TARGETS,
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
    capacity: |config, m| (config == FOLIO).then(|| folio_capacity(m)),
    describe: description,
    better: Some([FILE_HALF, FILE_3_4, FILE_BETTER]),
    baseline: FILE_BETTER,
};

/// What the scenario runs, in a paragraph.
fn description(b: &EmbeddedBench) -> String {
    let (reads, entries, limit) = (b.ops, b.n, b.limit);
    format!(
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
    )
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
/// `run.n` entries ([`workloads`]), then redb's integrity check; the
/// database is removed after.
///
/// # Errors
/// redb's, or the check failed.
pub fn one_run(run: &ChildRun) -> Result<Vec<Measured>> {
    let (config, path) = (run.config.as_str(), run.path.as_path());
    let _ = std::fs::remove_file(path);
    let jobs = match run.size {
        0 => FITS,
        1 => BIG,
        _ => bail!("redb: no size {}", run.size),
    };
    if BOUNDS.contains(&config) && run.size != 0 {
        return Ok(embedded::failed(
            &jobs.all(),
            "not run: the bound holds the whole database in the process, and data 4x M does not fit M",
        ));
    }
    let (mut db, cache) = open(config, path, run.limit)?;
    let (out, total) = workloads(&db, &jobs, run, cache.as_ref())?;
    if !db.check_integrity()? {
        bail!("redb ({config}): the integrity check repaired the database after the run");
    }
    let left = db.begin_read()?.open_table(TABLE)?.len()?;
    let removals = total / 2;
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

/// Every workload of `jobs` on `db`, filled with `run.n` entries, each
/// noted with what foliocache's `cache` did so far: their figures, and
/// the entries before the removals.
///
/// # Errors
/// redb's, or a read that did not find its entry.
fn workloads(
    db: &Database,
    jobs: &Jobs,
    run: &ChildRun,
    cache: Option<&foliocache::Cache>,
) -> Result<(Vec<Measured>, u64)> {
    let (entries, reads) = (run.n, run.ops);
    let mut out = Vec::new();
    let mut push = |m: Measured| {
        out.push(m);
        if let (Some(m), Some(c)) = (out.last_mut(), cache) {
            embedded::add_note(m, embedded::cache_note(c));
        }
    };
    push(embedded::timed(jobs.bulk_load, entries, || {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(TABLE)?;
            for i in 0..entries {
                t.insert(key(i).as_slice(), value(i).as_slice())?;
            }
        }
        tx.commit()?;
        Ok(None)
    })?);
    let writes = individual_writes(reads);
    push(embedded::timed(jobs.individual_writes, writes, || {
        for i in 0..writes {
            let k = entries + i;
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::Immediate)?;
            tx.open_table(TABLE)?
                .insert(key(k).as_slice(), value(k).as_slice())?;
            tx.commit()?;
        }
        Ok(None)
    })?);
    let total = entries + writes;
    push(embedded::timed(jobs.random_reads, reads, || {
        check_found(point_reads(db, total, reads, 1)?, reads)
    })?);
    let ranges = (reads / 10).max(1);
    push(embedded::timed(jobs.range_reads, ranges, || {
        range_reads(db, total, ranges)
    })?);
    push(embedded::timed(jobs.threaded_reads, reads, || {
        check_found(point_reads(db, total, reads, THREADS)?, reads)
    })?);
    let removals = total / 2;
    push(embedded::timed(jobs.removals, removals, || {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(TABLE)?;
            for i in 0..removals {
                t.remove(key(i * 2).as_slice())?;
            }
        }
        tx.commit()?;
        Ok(None)
    })?);
    Ok((out, total))
}

/// `ranges` reads of [`RANGE`] entries from random keys among `total`,
/// in one read transaction.
fn range_reads(db: &Database, total: u64, ranges: u64) -> Result<Option<String>> {
    let rx = db.begin_read()?;
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
