//! The `lsm` job of the `objectstore` scenario: issue 87's LSM-like trace,
//! a cache that knows a compaction from a query.
//!
//! Over the scenario's remote (its latency, 90 MB/s a GET), a store with
//! a disk tier of T = M bytes of chunks and memory of T/8:
//!
//! - **The trace**: files of T/16 written through the store one after
//!   another, three times the tier in all; each read once, whole, by a
//!   "compaction" [`LAG`] files after it was written, then deleted; between
//!   two writes a query reads a quarter of a hot object of T (64 KiB
//!   blocks, a stride that visits it all every four files, from
//!   [`TASKS`] tasks). Run three times: with the hints (puts
//!   [`CacheHint::KeepUntilRead`], the compaction's gets
//!   [`CacheHint::ReadOnce`]), with the puts' hint alone (the
//!   compaction's gets plain), and without (plain write-through LRU). The
//!   figures: the compaction's GETs (target 0 with the hints, the lag's
//!   bytes fitting the tier) and the query's hit ratio (reads that made
//!   no GET) each way.
//! - **The burst**: the tier's write bandwidth B measured first (chunks
//!   written straight to a tier file of its own), then T/2 of files put
//!   `KeepUntilRead` at 2 B (a put started every file / 2 B, concurrent),
//!   through a write-through queue of two files: the chunks handed to the
//!   tier against those it wrote (none dropped: a put waits for the
//!   queue, counted), then every file read back `ReadOnce` and its GETs
//!   counted (none but chunks a full set gave up, `kept_evicted`).
//!
//! Every byte read is checked.

use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use foliocache_object_store::disk::{CHUNK, SLOT};
use foliocache_object_store::{CacheHint, CachedStore, DiskTier};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt, PutOptions, PutPayload};

use super::remote::{Remote, Throttled};
use super::{object_bytes, LSM};
use crate::report::{RunJob, RunRecord};

/// Files between a file's write and its compaction.
const LAG: u64 = 4;
/// Tasks reading the query's hot set.
const TASKS: u64 = 8;
/// The query's block.
const BLOCK: u64 = 64 << 10;
/// The object index of the hot object for [`object_bytes`]; files are
/// `FILES + i`.
const HOT: u32 = 0x4000_0000;
const FILES: u32 = 0x4000_0001;

/// The job's sizes.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// The tier's bytes of chunks.
    tier: u64,
    /// A file's bytes.
    file: u64,
    /// Memory.
    memory: u64,
}

/// What one run of the trace saw.
#[derive(Debug, Default, Clone, Copy)]
struct Trace {
    compaction_gets: u64,
    compaction_reads: u64,
    hot_reads: u64,
    hot_gets: u64,
    kept_evicted: u64,
    /// The run's wall time.
    seconds: f64,
}

impl Trace {
    fn hot_hit_ratio(&self) -> f64 {
        1.0 - self.hot_gets as f64 / self.hot_reads.max(1) as f64
    }
}

/// What the burst saw.
struct Burst {
    /// The tier's write bandwidth, bytes a second.
    tier_bw: f64,
    /// The rate the puts were offered at.
    offered: f64,
    /// The rate they were written at (their bytes over the time from the
    /// first put's start to the last one's end).
    achieved: f64,
    handed: u64,
    written: u64,
    waits: u64,
    read_gets: u64,
    kept_evicted: u64,
}

/// Runs the job at M = `m` over a remote of `latency` in `dir`: its
/// record (the hints' trace; the comparisons and the burst in its notes).
///
/// # Errors
/// A file could not be written or read, or a read was wrong.
pub fn run(
    m: u64,
    latency: Duration,
    dir: &FsPath,
    rt: &tokio::runtime::Runtime,
) -> Result<RunRecord> {
    let tier = (m / CHUNK as u64).max(64) * CHUNK as u64;
    let s = Sizes {
        tier,
        file: tier / 16,
        memory: (tier / 8).max(1 << 20),
    };
    let remote_dir = dir.join("lsm-remote");
    std::fs::create_dir_all(remote_dir.join("hot"))?;
    std::fs::write(remote_dir.join("hot/table"), object_bytes(HOT, 0..s.tier))?;
    let tier_file = dir.join("lsm-tier");
    let keep = Some(CacheHint::KeepUntilRead);
    let run = |hints| trace(s, &remote_dir, &tier_file, latency, hints, rt);
    let runs = [
        run((keep, Some(CacheHint::ReadOnce)))?,
        run((keep, None))?,
        run((None, None))?,
    ];
    let burst = burst(s, &remote_dir, &tier_file, latency, rt)?;
    let _ = std::fs::remove_file(&tier_file);
    let _ = std::fs::remove_dir_all(&remote_dir);
    Ok(record(s, &runs, &burst))
}

/// A store over a new remote of `latency` on `dir`, memory `s.memory`, a
/// new tier of `s.tier` at `tier_file`, a write-through queue of `queue`.
fn store(
    s: Sizes,
    dir: &FsPath,
    tier_file: &FsPath,
    latency: Duration,
    queue: u64,
) -> Result<(CachedStore<Arc<Throttled>>, Arc<DiskTier>, Remote)> {
    let _ = std::fs::remove_file(tier_file);
    let remote = Remote::new(dir, latency)?;
    let tier = Arc::new(DiskTier::open(
        tier_file,
        s.tier / CHUNK as u64 * SLOT as u64,
    )?);
    let cache = foliocache::Cache::builder()
        .capacity(s.memory as usize)
        .build()?;
    let store = CachedStore::builder(remote.store.clone(), cache)
        .disk_tier(tier.clone())
        .write_queue(queue)
        .build();
    Ok((store, tier, remote))
}

/// A file's path.
fn file(i: u64) -> Path {
    Path::from(format!("lsm/{i:05}.sst"))
}

/// A put's options carrying `hint`, if any.
fn put_opts(hint: Option<CacheHint>) -> PutOptions {
    let mut o = PutOptions::default();
    if let Some(h) = hint {
        o.extensions.insert(h);
    }
    o
}

/// A get's options carrying `hint`, if any.
fn get_opts(hint: Option<CacheHint>) -> GetOptions {
    let mut o = GetOptions::default();
    if let Some(h) = hint {
        o.extensions.insert(h);
    }
    o
}

/// One run of the trace (see the module documentation), `hints` the
/// puts' and the compaction's gets'.
fn trace(
    s: Sizes,
    dir: &FsPath,
    tier_file: &FsPath,
    latency: Duration,
    hints: (Option<CacheHint>, Option<CacheHint>),
    rt: &tokio::runtime::Runtime,
) -> Result<Trace> {
    let (store, tier, remote) = store(s, dir, tier_file, latency, 4 * s.file)?;
    let store = Arc::new(store);
    let hot = Path::from("hot/table");
    let blocks = s.tier / BLOCK;
    let files = 3 * s.tier / s.file;
    let mut t = Trace::default();
    let start = Instant::now();
    rt.block_on(async {
        for i in 0..files {
            let payload = PutPayload::from(object_bytes(FILES + i as u32, 0..s.file));
            store.put_opts(&file(i), payload, put_opts(hints.0)).await?;
            let before = remote.seen.now().0;
            let readers: Vec<_> = (0..TASKS)
                .map(|task| {
                    let store = store.clone();
                    let hot = hot.clone();
                    tokio::spawn(async move {
                        for k in (task..blocks / 4).step_by(TASKS as usize) {
                            let b = (k * 37 * 4 + i * 37) % blocks;
                            let r = b * BLOCK..(b + 1) * BLOCK;
                            let got = store.get_range(&hot, r.clone()).await?;
                            ensure!(got == object_bytes(HOT, r.clone()), "lsm: hot {r:?}");
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            for r in readers {
                r.await??;
            }
            t.hot_reads += blocks / 4;
            t.hot_gets += remote.seen.now().0 - before;
            if i >= LAG {
                let input = i - LAG;
                let before = remote.seen.now().0;
                let opts = get_opts(hints.1);
                let body = store.get_opts(&file(input), opts).await?.bytes().await?;
                ensure!(
                    body == object_bytes(FILES + input as u32, 0..s.file),
                    "lsm: file {input}"
                );
                t.compaction_gets += remote.seen.now().0 - before;
                t.compaction_reads += 1;
                store.delete(&file(input)).await?;
            }
        }
        for input in files.saturating_sub(LAG)..files {
            store.delete(&file(input)).await?;
        }
        anyhow::Ok(())
    })?;
    t.kept_evicted = tier.stats().kept_evicted;
    t.seconds = start.elapsed().as_secs_f64();
    Ok(t)
}

/// The tier's write bandwidth: 4 MiB of chunks written to a tier file of
/// their own at `path`, in bytes a second.
fn tier_bandwidth(path: &FsPath) -> Result<f64> {
    let chunks = 256u64;
    let _ = std::fs::remove_file(path);
    let tier = DiskTier::open(path, chunks * 4 * SLOT as u64)?;
    let data = vec![0x5a; CHUNK];
    let t = Instant::now();
    for c in 0..chunks {
        tier.put(u128::from(c) << 70 | 1, &data);
    }
    let secs = t.elapsed().as_secs_f64();
    ensure!(
        tier.stats().writes == chunks,
        "lsm: the tier wrote {:?}",
        tier.stats()
    );
    drop(tier);
    std::fs::remove_file(path)?;
    Ok((chunks * CHUNK as u64) as f64 / secs.max(1e-9))
}

/// The burst (see the module documentation).
fn burst(
    s: Sizes,
    dir: &FsPath,
    tier_file: &FsPath,
    latency: Duration,
    rt: &tokio::runtime::Runtime,
) -> Result<Burst> {
    let tier_bw = tier_bandwidth(tier_file).context("lsm: the tier's bandwidth")?;
    let (store, tier, remote) = store(s, dir, tier_file, latency, 2 * s.file)?;
    let store = Arc::new(store);
    let files = s.tier / 2 / s.file;
    let every = Duration::from_secs_f64(s.file as f64 / (2.0 * tier_bw));
    let (handed0, waits0) = (store.stats().written_through, store.stats().write_waits);
    let (read_gets, achieved) = rt.block_on(async {
        let start = tokio::time::Instant::now();
        let writers: Vec<_> = (0..files)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + every * i as u32).await;
                    let payload = PutPayload::from(object_bytes(FILES + i as u32, 0..s.file));
                    let opts = put_opts(Some(CacheHint::KeepUntilRead));
                    store.put_opts(&file(i), payload, opts).await?;
                    anyhow::Ok(())
                })
            })
            .collect();
        for w in writers {
            w.await??;
        }
        let achieved = (files * s.file) as f64 / start.elapsed().as_secs_f64().max(1e-9);
        let before = remote.seen.now().0;
        for i in 0..files {
            let opts = get_opts(Some(CacheHint::ReadOnce));
            let body = store.get_opts(&file(i), opts).await?.bytes().await?;
            ensure!(
                body == object_bytes(FILES + i as u32, 0..s.file),
                "lsm: burst file {i}"
            );
            store.delete(&file(i)).await?;
        }
        anyhow::Ok((remote.seen.now().0 - before, achieved))
    })?;
    let st = store.stats();
    let b = Burst {
        tier_bw,
        offered: s.file as f64 / every.as_secs_f64().max(1e-9),
        achieved,
        handed: st.written_through - handed0,
        written: tier.stats().writes,
        waits: st.write_waits - waits0,
        read_gets,
        kept_evicted: tier.stats().kept_evicted,
    };
    Ok(b)
}

/// The job's record: the trace with the hints; every run and the burst
/// in its notes.
fn record(s: Sizes, [hints, kept, plain]: &[Trace; 3], b: &Burst) -> RunRecord {
    let mut r = RunRecord {
        engine: super::FOLIO_DISK.to_string(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: LSM,
        bs: BLOCK,
        numjobs: TASKS as usize,
        dist: Some("stride".into()),
        ..RunJob::default()
    };
    r.perf.ops = hints.hot_reads;
    r.perf.bytes = hints.hot_reads * BLOCK;
    r.perf.seconds = hints.seconds;
    r.perf.iops = hints.hot_reads as f64 / hints.seconds.max(1e-9);
    r.perf.bw_bytes = r.perf.iops * BLOCK as f64;
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.cache.hit_ratio = Some(hints.hot_hit_ratio());
    r.cache.hit_ratio_from = Some("the query's reads that made no GET");
    let mb = |x: f64| x / 1e6;
    r.notes.push(format!(
        "lsm: tier {} MiB, memory {} MiB, {} files of {} KiB (3x the tier), each read once {LAG} \
         files later: compaction GETs with the hints {} of {} reads (target 0), the puts' hint \
         alone {}, without {}; the query's hit ratio with the hints {:.3}, the puts' hint alone \
         {:.3}, without {:.3}; kept chunks a full set gave up {}",
        s.tier >> 20,
        s.memory >> 20,
        3 * s.tier / s.file,
        s.file >> 10,
        hints.compaction_gets,
        hints.compaction_reads,
        kept.compaction_gets,
        plain.compaction_gets,
        hints.hot_hit_ratio(),
        kept.hot_hit_ratio(),
        plain.hot_hit_ratio(),
        hints.kept_evicted,
    ));
    r.notes.push(format!(
        "lsm burst: {} MiB of puts offered at {:.1} MB/s, {:.2}x the tier's write bandwidth \
         ({:.1} MB/s), written at {:.1} MB/s: {} chunks handed to the tier, {} written, {} dropped (target 0), {} puts \
         waited for the queue; read back ReadOnce: {} GETs ({} kept chunks a full set gave up)",
        (s.tier / 2) >> 20,
        mb(b.offered),
        b.offered / b.tier_bw,
        mb(b.tier_bw),
        mb(b.achieved),
        b.handed,
        b.written,
        b.handed.saturating_sub(b.written),
        b.waits,
        b.read_gets,
        b.kept_evicted,
    ));
    r
}
