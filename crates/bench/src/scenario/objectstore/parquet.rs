//! The `parquet` job of the `objectstore` scenario (the bench's feature
//! `parquet`): arrow-rs `parquet`'s `ParquetObjectReader`, a real client,
//! reading a Parquet file of many row groups through four stores side by
//! side:
//!
//! - `local`: the file on the local file system (`LocalFileSystem`), the
//!   kernel's page cache warm (every query run once before, then timed
//!   over [`WARM_PASSES`] passes);
//! - `bare`: the file behind [`Throttled`] at [`LATENCY`] a request and
//!   [`BANDWIDTH`] a GET, uncached (every query cold);
//! - `foliocache`: [`CachedStore`] over the same, its memory a quarter of
//!   the file; a fresh store runs the queries cold, then again warm;
//! - `foliocache+disk`: the same with a [`DiskTier`] of the file's size.
//!
//! Two queries (`foliocache_object_store_clients::table`): `scan`, a
//! projection of two columns with a filter over every row group; and
//! `lookups`, a few rows of [`LOOKUPS`] row groups spread over the file,
//! each read with its footer, as a point query is. Every answer is
//! checked against the local file's. The figures: each cache's warm time
//! against `local` (the target 1.05x), its cold time against
//! `bare` (1.05x), and the bytes it fetched from the remote against the
//! bytes the reader asked for ([`Asked`], 1.05x), cold and warm.

use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use foliocache_object_store::{CachedStore, CachedStoreStats, DiskTier, Throttled};
use foliocache_object_store_clients::table::{run as query, Query, RecordBatch};
use foliocache_object_store_clients::{Asked, Table};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStore;

use super::PARQUET;
use crate::report::{RunJob, RunRecord};

/// The file's row groups.
const GROUPS: u64 = 32;
/// The remote's first-byte latency a request.
pub const LATENCY: Duration = Duration::from_millis(50);
/// The remote's bandwidth a GET (S3's per request, as [`super::remote`]).
pub const BANDWIDTH: u64 = 90_000_000;
/// Row groups the lookups read.
const LOOKUPS: usize = 8;
/// Warm passes, for the local file and each cache: a warm scan is tens
/// of milliseconds, which one descheduling on a loaded host doubles, so
/// the warm time is the median of these passes' (a cache's remote bytes
/// and reads warm their mean).
const WARM_PASSES: usize = 5;

/// The two queries, by name.
fn queries(t: &Table) -> [(&'static str, Vec<Query>); 2] {
    let groups = t.groups() as usize;
    let skip = (t.rows_per_group / 2) as usize;
    let lookups = (0..LOOKUPS)
        .map(|i| Query::Lookup {
            group: (i * 7919) % groups,
            skip,
            take: 16,
        })
        .collect();
    [
        ("scan", vec![Query::Filter { below: 100 }]),
        ("lookups", lookups),
    ]
}

/// A run of one query's parts through a store: its time, its answers,
/// and the bytes the reader asked for.
struct Pass {
    seconds: f64,
    answers: Vec<Vec<RecordBatch>>,
    asked: u64,
}

/// Runs `parts` through `store`.
async fn pass(
    store: Arc<dyn ObjectStore>,
    path: &Path,
    size: u64,
    parts: &[Query],
) -> Result<Pass> {
    let asked = Arc::new(Asked::new(store));
    let t = Instant::now();
    let mut answers = Vec::new();
    for &q in parts {
        answers.push(query(asked.clone(), path, size, q).await?);
    }
    Ok(Pass {
        seconds: t.elapsed().as_secs_f64(),
        answers,
        asked: asked.asked().1,
    })
}

/// [`pass`] run [`WARM_PASSES`] times: the first, its time the median of
/// all (each pass's answers checked against the first's, its bytes asked
/// the same each pass).
async fn warm_passes(
    store: Arc<dyn ObjectStore>,
    path: &Path,
    size: u64,
    parts: &[Query],
) -> Result<Pass> {
    let mut first = pass(store.clone(), path, size, parts).await?;
    let mut times = vec![first.seconds];
    for _ in 1..WARM_PASSES {
        let p = pass(store.clone(), path, size, parts).await?;
        ensure!(
            p.answers == first.answers,
            "objectstore parquet: a warm pass's answer changed"
        );
        times.push(p.seconds);
    }
    times.sort_by(f64::total_cmp);
    first.seconds = times[times.len() / 2];
    Ok(first)
}

/// One cache's figures for one query.
struct Cached {
    cold: Pass,
    warm: Pass,
    remote_cold: u64,
    remote_warm: u64,
    /// A warm pass's reads (the mean of [`WARM_PASSES`]): the store's
    /// (hits, misses, GETs, HEADs).
    warm_reads: [u64; 4],
}

/// `s`'s reads: (hits, misses, GETs, HEADs).
fn reads(s: &CachedStoreStats) -> [u64; 4] {
    [s.hits, s.misses, s.remote_gets, s.remote_heads]
}

/// A fresh [`CachedStore`] over the remote in `dir`, of `memory` bytes
/// (and a disk tier in `tier`, if given, of `tier_bytes`).
fn cached(
    dir: &FsPath,
    memory: u64,
    tier: Option<(&FsPath, u64)>,
) -> Result<CachedStore<Throttled>> {
    let remote = Throttled::new(LocalFileSystem::new_with_prefix(dir)?, LATENCY, BANDWIDTH);
    let cache = foliocache::Cache::builder()
        .capacity(memory as usize)
        .build()?;
    let mut b = CachedStore::builder(remote, cache);
    if let Some((file, bytes)) = tier {
        let _ = std::fs::remove_file(file);
        b = b.disk_tier(Arc::new(DiskTier::open(file, bytes)?));
    }
    Ok(b.build())
}

/// Runs `parts` cold then warm ([`WARM_PASSES`] passes) through a fresh
/// cache.
async fn through_cache(
    store: CachedStore<Throttled>,
    path: &Path,
    size: u64,
    parts: &[Query],
) -> Result<Cached> {
    let store = Arc::new(store);
    let cold = pass(store.clone(), path, size, parts).await?;
    let before = store.stats();
    let warm = warm_passes(store.clone(), path, size, parts).await?;
    let after = store.stats();
    let (b, a) = (reads(&before), reads(&after));
    let n = WARM_PASSES as u64;
    Ok(Cached {
        cold,
        warm,
        remote_cold: before.remote_get_bytes,
        remote_warm: (after.remote_get_bytes - before.remote_get_bytes) / n,
        warm_reads: std::array::from_fn(|i| (a[i] - b[i]) / n),
    })
}

/// Runs the job over a file of about `file` bytes written under `root`:
/// its record (the memory cache's warm scan, every comparison in its
/// notes).
///
/// # Errors
/// The file could not be written, a store failed, or an answer differed
/// from the local file's.
pub fn run(file: u64, root: &FsPath, rt: &tokio::runtime::Runtime) -> Result<RunRecord> {
    let dir = root.join("parquet");
    std::fs::create_dir_all(&dir)?;
    let t = Table::of_size(file, GROUPS);
    let size = t.write(&dir.join("table.parquet"))?;
    let path = Path::from("table.parquet");
    let local: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&dir)?);
    let bare: Arc<dyn ObjectStore> = Arc::new(Throttled::new(
        LocalFileSystem::new_with_prefix(&dir)?,
        LATENCY,
        BANDWIDTH,
    ));
    let tier = root.join("parquet-tier");
    let mut r = record(size);
    for (name, parts) in queries(&t) {
        let (warm_local, cold_bare, mem, disk) = rt.block_on(async {
            // The kernel's cache warmed by a first pass.
            pass(local.clone(), &path, size, &parts).await?;
            let warm_local = warm_passes(local.clone(), &path, size, &parts).await?;
            let cold_bare = pass(bare.clone(), &path, size, &parts).await?;
            let mem = through_cache(cached(&dir, size / 4, None)?, &path, size, &parts).await?;
            let disk = cached(&dir, size / 4, Some((&tier, size)))?;
            let disk = through_cache(disk, &path, size, &parts).await?;
            anyhow::Ok((warm_local, cold_bare, mem, disk))
        })?;
        for p in [&cold_bare, &mem.cold, &mem.warm, &disk.cold, &disk.warm] {
            ensure!(
                p.answers == warm_local.answers,
                "objectstore parquet: {name}: an answer differs from the local file's"
            );
        }
        for (label, c) in [(super::FOLIO, &mem), (super::FOLIO_DISK, &disk)] {
            let line = format!(
                "parquet {name} ({} MiB file, {} row groups, cache {} MiB, {} ms and {} MB/s): \
                 {label} warm {:.3} s = {:.2}x local {:.3} s (target 1.05x); cold {:.3} s = \
                 {:.2}x bare {:.3} s (target 1.05x); remote bytes / bytes asked: cold {:.2}x, \
                 warm {:.2}x (target 1.05x; asked {} cold, {} warm); warm reads: {} hits, \
                 {} misses, {} GETs, {} HEADs",
                size >> 20,
                t.groups(),
                size >> 22,
                LATENCY.as_millis(),
                BANDWIDTH / 1_000_000,
                c.warm.seconds,
                c.warm.seconds / warm_local.seconds,
                warm_local.seconds,
                c.cold.seconds,
                c.cold.seconds / cold_bare.seconds,
                cold_bare.seconds,
                c.remote_cold as f64 / c.cold.asked.max(1) as f64,
                c.remote_warm as f64 / c.warm.asked.max(1) as f64,
                c.cold.asked,
                c.warm.asked,
                c.warm_reads[0],
                c.warm_reads[1],
                c.warm_reads[2],
                c.warm_reads[3],
            );
            r.notes.push(line);
            if name == "scan" && label == super::FOLIO {
                r.perf.seconds = c.warm.seconds;
                r.perf.bytes = c.warm.asked;
                r.perf.bw_bytes = c.warm.asked as f64 / c.warm.seconds.max(1e-9);
                r.cache.read_amplification =
                    Some(c.remote_warm as f64 / c.warm.asked.max(1) as f64);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&tier);
    Ok(r)
}

/// The job's record, before its figures.
fn record(size: u64) -> RunRecord {
    let mut r = RunRecord {
        engine: super::FOLIO.to_string(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: PARQUET,
        bs: size,
        numjobs: 1,
        dist: Some("parquet scan and lookups".into()),
        ..RunJob::default()
    };
    r.perf.ops = 1;
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r
}
