//! The `slatedb` job: a SlateDB database of [`VALUE`]-byte values, keys
//! in order ([`key`], [`value`]), written once to a local directory, then
//! read through [`Throttled`] (the remote at [`LATENCY`] a request and
//! [`BANDWIDTH`] a GET) by two contenders, interleaved round by round:
//!
//! - `CachedObjectStore`: SlateDB's own object-store cache, its 4 MiB
//!   parts in files on local disk, at most [`Job::disk`] bytes of them
//!   (its evictor's limit);
//! - `foliocache+disk`: [`CachedStore`] with [`Job::memory`] bytes in
//!   memory and a [`DiskTier`] of [`Job::disk`] bytes.
//!
//! Each reads through a `DbReader` (following the latest manifest, no WAL
//! replay: the database is all in its SSTs) with SlateDB's block cache
//! (moka's) of [`Job::memory`] bytes, a tenth of the data by default, as
//! SlateDB's own benchmark sizes it. Each round opens both afresh over
//! empty caches and runs, for each: [`Job::gets`] random gets by
//! [`TASKS`] tasks to warm it (not counted), as many again measured (the
//! same keys for both contenders, new keys each round), then a scan of a
//! tenth of the keys. Every value is checked against [`value`].
//!
//! The figures: the measured gets' p50 and p99, the remote GETs and bytes
//! they made, the scan's time and remote bytes. The targets:
//! `foliocache+disk`'s p99 at most 0.3x `CachedObjectStore`'s, its remote
//! GET bytes at most 0.25x.
//!
//! Memory: both hold the block cache; `CachedStore` holds its own memory
//! tier of the same size on top, where `CachedObjectStore` reads its part
//! files through the kernel's page cache (bounded only by the host).

#![allow(deprecated)] // SlateDB 0.18 marks `CachedObjectStore` deprecated; it is the contender.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use foliocache_object_store::{CachedStore, DiskTier, Throttled};
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;
use slatedb::cached_object_store::CachedObjectStore;
use slatedb::config::{DbReaderOptions, FlushOptions, FlushType, Settings};
use slatedb::db_cache::moka::{MokaCache, MokaCacheOptions};
use slatedb::{Db, DbReader, DbReaderMode, WriteBatch};

use crate::Asked;

/// The job's error: SlateDB's, a store's, the cache's, a wrong value.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// The job's result.
pub type Result<T> = std::result::Result<T, Error>;

/// The remote's first-byte latency a request (the scenario's default).
pub const LATENCY: Duration = Duration::from_millis(20);
/// The remote's bandwidth a GET (S3's per request, the scenario's).
pub const BANDWIDTH: u64 = 90_000_000;
/// A value's size.
pub const VALUE: usize = 1024;
/// Tasks doing gets at once.
pub const TASKS: u64 = 8;
/// The puts in one write batch while loading.
const BATCH: u64 = 1024;
/// The database's path in the store.
const DB: &str = "db";

/// The key of entry `i`: `k` and `i` in 15 digits, so that keys sort as
/// their indexes.
pub fn key(i: u64) -> Vec<u8> {
    format!("k{i:015}").into_bytes()
}

/// The value of entry `i`: [`VALUE`] bytes, every 8 of them a mix of `i`
/// and their place, so that no two entries' values are alike.
pub fn value(i: u64) -> Vec<u8> {
    (0..(VALUE / 8) as u64)
        .flat_map(|j| {
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(j)
                .to_le_bytes()
        })
        .collect()
}

/// The two caches in front of the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// SlateDB's `CachedObjectStore` (4 MiB parts on disk).
    Parts,
    /// [`CachedStore`] with its disk tier.
    Foliocache,
}

impl Contender {
    /// Its name in the figures.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Parts => "CachedObjectStore",
            Contender::Foliocache => "foliocache+disk",
        }
    }
}

/// What the job runs.
#[derive(Debug, Clone)]
pub struct Job {
    /// The values' bytes in the database (its keys: this over [`VALUE`]).
    pub data: u64,
    /// The directory the database and the caches' files go in.
    pub dir: PathBuf,
    /// The block cache's bytes, and `CachedStore`'s memory.
    pub memory: u64,
    /// Each cache's disk.
    pub disk: u64,
    /// The remote's latency a request.
    pub latency: Duration,
    /// The remote's bandwidth a GET.
    pub bandwidth: u64,
    /// Rounds of both contenders.
    pub rounds: usize,
    /// Gets a round to warm each contender, and as many measured.
    pub gets: u64,
    /// `CachedStore`'s point-miss window
    /// ([`read_around`](foliocache_object_store::CachedStoreBuilder::read_around));
    /// `None`: its default, measured from the remote.
    pub read_around: Option<u64>,
}

impl Job {
    /// The job over `data` bytes of values under `dir`: memory a tenth of
    /// them, disk half, at [`LATENCY`] and [`BANDWIDTH`], 3 rounds of
    /// 2,000 gets.
    pub fn new(data: u64, dir: PathBuf) -> Job {
        Job {
            data,
            dir,
            memory: data / 10,
            disk: data / 2,
            latency: LATENCY,
            bandwidth: BANDWIDTH,
            rounds: 3,
            gets: 2000,
            read_around: None,
        }
    }

    /// The database's entries.
    pub fn keys(&self) -> u64 {
        (self.data / VALUE as u64).max(1)
    }

    /// The directory the remote's objects are in.
    fn remote_dir(&self) -> PathBuf {
        self.dir.join("remote")
    }

    /// The directory of the contender's cache files.
    fn cache_dir(&self) -> PathBuf {
        self.dir.join("cache")
    }
}

/// One contender's figures over the rounds.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Every measured get's seconds.
    pub gets: Vec<f64>,
    /// The measured gets' wall seconds, in all.
    pub gets_seconds: f64,
    /// Remote GETs of the measured gets, in all.
    pub remote_gets: u64,
    /// Remote bytes of the measured gets, in all.
    pub remote_bytes: u64,
    /// Each round's scan, seconds.
    pub scans: Vec<f64>,
    /// Remote bytes of the scans, in all.
    pub scan_bytes: u64,
}

impl Figures {
    /// The `p`-quantile (0 to 1) of the measured gets, in seconds (NaN if
    /// none).
    pub fn quantile(&self, p: f64) -> f64 {
        quantile(&self.gets, p)
    }
}

/// The job's figures.
#[derive(Debug)]
pub struct Report {
    /// The database's SSTs' bytes in the store.
    pub size: u64,
    /// Its entries.
    pub keys: u64,
    /// `CachedObjectStore`'s figures.
    pub parts: Figures,
    /// `foliocache+disk`'s figures.
    pub folio: Figures,
}

/// A store opened for a round: the reader and the counter of the
/// remote's GETs under its cache.
struct Opened {
    reader: Arc<DbReader>,
    remote: Arc<Asked>,
}

/// A small random generator (xorshift64*), seeded.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// The bytes of the files under `dir`, recursively.
fn bytes_under(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() {
            bytes_under(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(n)
}

impl Job {
    /// Writes the database to the remote's directory (unpaced), keys in
    /// order, no compactor (the SSTs' key ranges do not overlap): the
    /// bytes of its SSTs (not its WAL's, which the readers skip).
    async fn load(&self) -> Result<u64> {
        let dir = self.remote_dir();
        std::fs::create_dir_all(&dir)?;
        let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&dir)?);
        let settings = Settings {
            compactor_options: None,
            garbage_collector_options: None,
            l0_sst_size_bytes: 16 << 20,
            l0_max_ssts: 4096,
            ..Settings::default()
        };
        let db = Db::builder(DB, store)
            .with_settings(settings)
            .build()
            .await?;
        let keys = self.keys();
        let mut i = 0;
        while i < keys {
            let mut batch = WriteBatch::new();
            for k in i..keys.min(i + BATCH) {
                batch.put(key(k), value(k));
            }
            db.write(batch).await?;
            i += BATCH;
        }
        db.flush_with_options(FlushOptions {
            flush_type: FlushType::MemTable,
        })
        .await?;
        db.close().await?;
        Ok(bytes_under(&dir.join(DB).join("compacted"))?)
    }

    /// `c` over the remote with empty caches: a reader with its block
    /// cache.
    async fn open(&self, c: Contender) -> Result<Opened> {
        let cache_dir = self.cache_dir();
        let _ = std::fs::remove_dir_all(&cache_dir);
        std::fs::create_dir_all(&cache_dir)?;
        let paced = Throttled::new(
            LocalFileSystem::new_with_prefix(self.remote_dir())?,
            self.latency,
            self.bandwidth,
        );
        let remote = Arc::new(Asked::new(Arc::new(paced)));
        let store: Arc<dyn ObjectStore> = match c {
            Contender::Parts => {
                CachedObjectStore::builder(&cache_dir, remote.clone())
                    .with_max_cache_size_bytes(Some(self.disk as usize))
                    .with_scan_interval(None)
                    .build()
                    .await?
            }
            Contender::Foliocache => {
                let memory = foliocache::Cache::builder()
                    .capacity(self.memory as usize)
                    .build()?;
                let tier = DiskTier::open(cache_dir.join("tier"), self.disk)?;
                let mut b = CachedStore::builder(remote.clone(), memory).disk_tier(Arc::new(tier));
                if let Some(bytes) = self.read_around {
                    b = b.read_around(bytes);
                }
                Arc::new(b.build())
            }
        };
        let block_cache = MokaCache::new_with_opts(MokaCacheOptions {
            max_capacity: self.memory,
            time_to_live: None,
            time_to_idle: None,
        });
        let reader = DbReader::builder(DB, store)
            .with_reader_mode(DbReaderMode::FollowLatest)
            .with_options(DbReaderOptions {
                skip_wal_replay: true,
                ..DbReaderOptions::default()
            })
            .with_db_cache(Arc::new(block_cache), 0)
            .build()
            .await?;
        Ok(Opened {
            reader: Arc::new(reader),
            remote,
        })
    }
}

/// `n` gets of random keys (of `keys`) by [`TASKS`] tasks, seeded by
/// `seed`, each value checked: their seconds.
async fn gets(reader: &Arc<DbReader>, keys: u64, n: u64, seed: u64) -> Result<Vec<f64>> {
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let reader = reader.clone();
        let per = n / TASKS + u64::from(t < n % TASKS);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed ^ (t + 1).wrapping_mul(0x9E37_79B9));
            let mut seconds = Vec::with_capacity(per as usize);
            for _ in 0..per {
                let i = rng.below(keys);
                let start = Instant::now();
                let got = reader.get(key(i)).await?;
                seconds.push(start.elapsed().as_secs_f64());
                if got.as_deref() != Some(&value(i)[..]) {
                    return Err(Error::from(format!("get of entry {i}: a wrong value")));
                }
            }
            Ok::<_, Error>(seconds)
        }));
    }
    let mut all = Vec::with_capacity(n as usize);
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// A scan of entries `from..to` in order, each checked.
async fn scan(reader: &DbReader, from: u64, to: u64) -> Result<()> {
    let mut it = reader
        .scan(Bytes::from(key(from))..Bytes::from(key(to)))
        .await?;
    let mut i = from;
    while let Some(kv) = it.next().await? {
        if i >= to || kv.key[..] != key(i)[..] || kv.value[..] != value(i)[..] {
            return Err(Error::from(format!("scan at entry {i}: a wrong entry")));
        }
        i += 1;
    }
    if i != to {
        return Err(Error::from(format!("scan of {from}..{to} ended at {i}")));
    }
    Ok(())
}

impl Job {
    /// One round of `c`: warm gets, measured gets, a scan, into `f`.
    async fn round(&self, c: Contender, seed: u64, f: &mut Figures) -> Result<()> {
        let o = self.open(c).await?;
        let keys = self.keys();
        gets(&o.reader, keys, self.gets, seed).await?;
        let before = o.remote.asked();
        let start = Instant::now();
        f.gets
            .extend(gets(&o.reader, keys, self.gets, seed ^ 0x5EED).await?);
        f.gets_seconds += start.elapsed().as_secs_f64();
        let after = o.remote.asked();
        f.remote_gets += after.0 - before.0;
        f.remote_bytes += after.1 - before.1;
        let from = Rng::new(seed).below(keys - keys / 10);
        let start = Instant::now();
        scan(&o.reader, from, from + (keys / 10).max(1)).await?;
        f.scans.push(start.elapsed().as_secs_f64());
        f.scan_bytes += o.remote.asked().1 - after.1;
        o.reader.close().await?;
        Ok(())
    }

    /// Writes the database and runs the contenders' rounds, `say` told of
    /// each: the figures. The database and the caches' files are removed
    /// at the end.
    ///
    /// # Errors
    /// The database could not be written or read, a store failed, or a
    /// value read differed from the one written.
    pub async fn run(&self, say: &dyn Fn(&str)) -> Result<Report> {
        let r = self.rounds(say).await;
        let _ = std::fs::remove_dir_all(self.remote_dir());
        let _ = std::fs::remove_dir_all(self.cache_dir());
        r
    }

    /// [`run`](Job::run)'s load and rounds.
    async fn rounds(&self, say: &dyn Fn(&str)) -> Result<Report> {
        let start = Instant::now();
        let size = self.load().await?;
        say(&format!(
            "slatedb: {} entries ({} MiB of SSTs) written in {:.1} s",
            self.keys(),
            size >> 20,
            start.elapsed().as_secs_f64()
        ));
        let mut r = Report {
            size,
            keys: self.keys(),
            parts: Figures::default(),
            folio: Figures::default(),
        };
        for round in 0..self.rounds {
            let seed = 0xD1CE ^ (round as u64 + 1).wrapping_mul(0x1000_0001);
            // Alternate which goes first, so that neither always follows
            // the other's writes to the host's page cache.
            let order = if round % 2 == 0 {
                [Contender::Parts, Contender::Foliocache]
            } else {
                [Contender::Foliocache, Contender::Parts]
            };
            for c in order {
                let f = match c {
                    Contender::Parts => &mut r.parts,
                    Contender::Foliocache => &mut r.folio,
                };
                self.round(c, seed, f).await?;
            }
            say(&format!(
                "slatedb: round {} of {} done",
                round + 1,
                self.rounds
            ));
        }
        Ok(r)
    }
}

/// The `p`-quantile (0 to 1) of `v`, the smallest value at or above that
/// share of them (NaN if `v` is empty).
pub fn quantile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((p * v.len() as f64).ceil() as usize).saturating_sub(1);
    v.get(i).copied().unwrap_or(f64::NAN)
}

impl Report {
    /// Each contender's figures, a line each, then `foliocache+disk`'s
    /// against `CachedObjectStore`'s (the targets beside them).
    pub fn lines(&self, job: &Job) -> Vec<String> {
        let rounds = job.rounds.max(1) as u64;
        let setting = format!(
            "slatedb ({} entries of {} B, {} MiB of SSTs, block cache {} MiB, disk {} MiB, \
             {} ms and {} MB/s, {} rounds of {} gets by {} tasks)",
            self.keys,
            VALUE,
            self.size >> 20,
            job.memory >> 20,
            job.disk >> 20,
            job.latency.as_millis(),
            job.bandwidth / 1_000_000,
            job.rounds,
            job.gets,
            TASKS
        );
        let mut lines: Vec<String> = [
            (Contender::Parts, &self.parts),
            (Contender::Foliocache, &self.folio),
        ]
        .into_iter()
        .map(|(c, f)| {
            format!(
                "{setting}: {} get p50 {:.2} ms, p99 {:.2} ms; a round's measured gets: {} remote \
                 GETs, {:.1} MiB; scan of a tenth {:.3} s, {:.1} MiB remote",
                c.label(),
                f.quantile(0.5) * 1e3,
                f.quantile(0.99) * 1e3,
                f.remote_gets / rounds,
                (f.remote_bytes / rounds) as f64 / (1 << 20) as f64,
                quantile(&f.scans, 0.5),
                (f.scan_bytes / rounds) as f64 / (1 << 20) as f64,
            )
        })
        .collect();
        let ratio = |a: f64, b: f64| a / b.max(1e-12);
        let (p, f) = (&self.parts, &self.folio);
        lines.push(format!(
            "{setting}: foliocache+disk / CachedObjectStore: p99 get {:.2}x (target 0.3x), p50 \
             {:.2}x, remote GET bytes {:.2}x (target 0.25x), remote GETs {:.2}x, scan time {:.2}x, \
             scan remote bytes {:.2}x",
            ratio(f.quantile(0.99), p.quantile(0.99)),
            ratio(f.quantile(0.5), p.quantile(0.5)),
            ratio(f.remote_bytes as f64, p.remote_bytes as f64),
            ratio(f.remote_gets as f64, p.remote_gets as f64),
            ratio(quantile(&f.scans, 0.5), quantile(&p.scans, 0.5)),
            ratio(f.scan_bytes as f64, p.scan_bytes as f64),
        ));
        lines
    }
}
