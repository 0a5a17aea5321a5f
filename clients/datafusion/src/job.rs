//! The `datafusion` job: one SQL query ([`sql`]: `SELECT key, COUNT(*),
//! SUM(value) ... WHERE key < 100 GROUP BY key`) over the table of
//! [`rows`](crate::rows) written as a Parquet file of [`GROUPS`] row
//! groups, through four contenders, interleaved round by round:
//!
//! - `local`: the file on the local file system (`LocalFileSystem`), the
//!   kernel's page cache warm (one session that ran the query once
//!   before its timed passes);
//! - `bare`: the file behind [`Throttled`] at [`LATENCY`] a request and
//!   [`BANDWIDTH`] a GET, uncached: a fresh session each round, cold;
//! - `foliocache`: [`CachedStore`] over the same, its memory a quarter of
//!   the file; a fresh store and session each round, cold (the table's
//!   registration, which reads the footer, and the query), then warm
//!   passes in the same session;
//! - `foliocache+disk`: the same with a [`DiskTier`] of the file's size.
//!
//! Each contender is a DataFusion `SessionContext` with the store
//! registered as the table's object store, as a user's server keeps one:
//! DataFusion's own caches (the Parquet footers, the folder's listing)
//! serve the warm passes of every contender alike, so what differs is
//! the column chunks' reads. Every answer is checked against the local
//! file's. The figures: each cache's warm time (median of its warm
//! passes) against `local`'s (target 1.05x), its cold time against
//! `bare`'s (1.05x), and the bytes it fetched from the remote against the
//! bytes DataFusion asked for ([`Asked`]), cold and warm (1.05x).

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use foliocache_object_store::{CachedStore, CachedStoreStats, DiskTier, Throttled};
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;
use url::Url;

use crate::{Asked, Table};

/// The remote's first-byte latency a request (the Parquet job's).
pub const LATENCY: Duration = Duration::from_millis(50);
/// The remote's bandwidth a GET (S3's per request).
pub const BANDWIDTH: u64 = 90_000_000;
/// The file's row groups (the Parquet job's).
pub const GROUPS: u64 = 32;
/// The query's filter: `key < BELOW`.
pub const BELOW: i64 = 100;
/// The store's URL, as DataFusion names it.
const STORE_URL: &str = "s3://remote/";
/// The table's folder in the store.
const TABLE_URL: &str = "s3://remote/table/";
/// The file, under the job's directory (the store's root).
const FILE: &str = "table/data.parquet";

/// The query.
pub fn sql() -> String {
    format!(
        "SELECT key, COUNT(*) AS n, SUM(value) AS total FROM t WHERE key < {BELOW} \
         GROUP BY key ORDER BY key"
    )
}

/// What the job runs.
#[derive(Debug, Clone)]
pub struct Job {
    /// The file's size, about.
    pub file: u64,
    /// Its row groups.
    pub groups: u64,
    /// The directory the file (and the disk tier) is written in.
    pub dir: PathBuf,
    /// The remote's latency a request.
    pub latency: Duration,
    /// The remote's bandwidth a GET.
    pub bandwidth: u64,
    /// Rounds of the four contenders.
    pub rounds: usize,
    /// Warm passes of `local` and each cache a round.
    pub warm_passes: usize,
}

impl Job {
    /// The job over a file of about `file` bytes under `dir`, at
    /// [`LATENCY`] and [`BANDWIDTH`], 3 rounds of 5 warm passes.
    pub fn new(file: u64, dir: PathBuf) -> Job {
        Job {
            file,
            groups: GROUPS,
            dir,
            latency: LATENCY,
            bandwidth: BANDWIDTH,
            rounds: 3,
            warm_passes: 5,
        }
    }
}

/// A DataFusion session over one store, the table registered in it at
/// its first pass.
pub struct Session {
    ctx: SessionContext,
    asked: Arc<Asked>,
    registered: bool,
}

/// One run of the query: its time, its answer, the bytes DataFusion
/// asked its store for.
#[derive(Debug, Clone)]
pub struct Pass {
    /// Seconds it took.
    pub seconds: f64,
    /// Its answer, in one batch.
    pub answer: RecordBatch,
    /// Bytes asked of the store.
    pub asked: u64,
}

impl Session {
    /// A session reading the table from `store`.
    ///
    /// # Errors
    /// DataFusion's.
    pub fn new(store: Arc<dyn ObjectStore>) -> Result<Session> {
        let asked = Arc::new(Asked::new(store));
        let ctx = SessionContext::new();
        let url = Url::parse(STORE_URL).map_err(|e| DataFusionError::External(Box::new(e)))?;
        ctx.register_object_store(&url, asked.clone());
        Ok(Session {
            ctx,
            asked,
            registered: false,
        })
    }

    /// Runs the query (the first pass registers the table first, reading
    /// its folder's listing and the file's footer, and counts it).
    ///
    /// # Errors
    /// DataFusion's or the store's.
    pub async fn pass(&mut self) -> Result<Pass> {
        let before = self.asked.asked().1;
        let t = Instant::now();
        if !self.registered {
            self.ctx
                .register_parquet("t", TABLE_URL, ParquetReadOptions::default())
                .await?;
            self.registered = true;
        }
        let batches = self.ctx.sql(&sql()).await?.collect().await?;
        let seconds = t.elapsed().as_secs_f64();
        let schema = match batches.first() {
            Some(b) => b.schema(),
            None => {
                return Err(DataFusionError::Execution(
                    "the query returned nothing".into(),
                ))
            }
        };
        Ok(Pass {
            seconds,
            answer: concat_batches(&schema, &batches)?,
            asked: self.asked.asked().1 - before,
        })
    }
}

/// The answer the query must give, from the rows' definition (not the
/// file): `(key, count, sum of values)` for each key below [`BELOW`].
pub fn expected(t: &Table) -> Vec<(i64, i64, f64)> {
    let mut by_key = vec![(0i64, 0f64); BELOW as usize];
    for id in 0..t.rows {
        let k = crate::rows::key(id);
        if k < BELOW {
            by_key[k as usize].0 += 1;
            by_key[k as usize].1 += crate::rows::value(id);
        }
    }
    (0..BELOW)
        .zip(by_key)
        .filter(|(_, (n, _))| *n > 0)
        .map(|(k, (n, s))| (k, n, s))
        .collect()
}

/// One cache's figures over the rounds.
#[derive(Debug, Default)]
pub struct CacheFigures {
    /// Cold passes' seconds, a round each.
    pub cold: Vec<f64>,
    /// Warm passes' seconds.
    pub warm: Vec<f64>,
    /// Bytes asked by the cold passes, in all.
    pub asked_cold: u64,
    /// Bytes asked by the warm passes, in all.
    pub asked_warm: u64,
    /// Bytes fetched from the remote by the cold passes, in all.
    pub remote_cold: u64,
    /// Bytes fetched from the remote by the warm passes, in all.
    pub remote_warm: u64,
    /// The warm passes' reads, in all: (hits, misses, GETs, HEADs).
    pub warm_reads: [u64; 4],
}

/// The job's figures.
#[derive(Debug)]
pub struct Report {
    /// The table's shape.
    pub table: Table,
    /// The file's size.
    pub size: u64,
    /// The local file's answer (every contender's was the same).
    pub answer: RecordBatch,
    /// `local`'s warm passes' seconds.
    pub local: Vec<f64>,
    /// Bytes asked by one of `local`'s warm passes.
    pub local_asked: u64,
    /// `bare`'s passes' seconds, a round each.
    pub bare: Vec<f64>,
    /// Bytes asked by `bare`'s passes, in all.
    pub bare_asked: u64,
    /// `foliocache`'s figures.
    pub memory: CacheFigures,
    /// `foliocache+disk`'s figures.
    pub disk: CacheFigures,
}

/// `s`'s reads: (hits, misses, GETs, HEADs).
fn reads(s: &CachedStoreStats) -> [u64; 4] {
    [s.hits, s.misses, s.remote_gets, s.remote_heads]
}

/// An error unless `p`'s answer is `want`.
fn same(p: &Pass, want: &RecordBatch, who: &str) -> Result<()> {
    if p.answer == *want {
        Ok(())
    } else {
        Err(DataFusionError::Execution(format!(
            "{who}: the answer differs from the local file's"
        )))
    }
}

impl Job {
    /// The remote: the job's directory behind [`Throttled`].
    fn remote(&self) -> Result<Throttled> {
        Ok(Throttled::new(
            LocalFileSystem::new_with_prefix(&self.dir)?,
            self.latency,
            self.bandwidth,
        ))
    }

    /// A fresh [`CachedStore`] over the remote, of a quarter of `size` in
    /// memory (and a disk tier of `size` in `tier`, if given).
    fn cached(&self, size: u64, tier: Option<&FsPath>) -> Result<Arc<CachedStore<Throttled>>> {
        let cache = foliocache::Cache::builder()
            .capacity((size / 4) as usize)
            .build()?;
        let mut b = CachedStore::builder(self.remote()?, cache);
        if let Some(file) = tier {
            let _ = std::fs::remove_file(file);
            b = b.disk_tier(Arc::new(DiskTier::open(file, size)?));
        }
        Ok(Arc::new(b.build()))
    }

    /// One round of a cache: cold, then [`warm_passes`](Job::warm_passes)
    /// in the same session, into `f`.
    async fn cache_round(
        &self,
        store: Arc<CachedStore<Throttled>>,
        want: &RecordBatch,
        who: &str,
        f: &mut CacheFigures,
    ) -> Result<()> {
        let mut s = Session::new(store.clone())?;
        let cold = s.pass().await?;
        same(&cold, want, who)?;
        let before = store.stats();
        f.cold.push(cold.seconds);
        f.asked_cold += cold.asked;
        f.remote_cold += before.remote_get_bytes;
        for _ in 0..self.warm_passes {
            let p = s.pass().await?;
            same(&p, want, who)?;
            f.warm.push(p.seconds);
            f.asked_warm += p.asked;
        }
        let after = store.stats();
        f.remote_warm += after.remote_get_bytes - before.remote_get_bytes;
        let (b, a) = (reads(&before), reads(&after));
        for (i, r) in f.warm_reads.iter_mut().enumerate() {
            *r += a[i] - b[i];
        }
        Ok(())
    }

    /// Writes the file and runs the contenders, `say` told of each round:
    /// the figures. The file and the tier are removed at the end.
    ///
    /// # Errors
    /// The file could not be written, a store or DataFusion failed, or an
    /// answer differed from the local file's.
    pub async fn run(&self, say: &dyn Fn(&str)) -> Result<Report> {
        let table = Table::of_size(self.file, self.groups);
        std::fs::create_dir_all(self.dir.join("table"))?;
        let size = table.write(&self.dir.join(FILE))?;
        let r = self.contenders(table, size, say).await;
        let _ = std::fs::remove_dir_all(self.dir.join("table"));
        let _ = std::fs::remove_file(self.dir.join("tier"));
        r
    }

    /// [`run`](Job::run)'s rounds over the written file.
    async fn contenders(&self, table: Table, size: u64, say: &dyn Fn(&str)) -> Result<Report> {
        let tier = self.dir.join("tier");
        // The kernel's cache and the local session warmed by a first pass.
        let mut local = Session::new(Arc::new(LocalFileSystem::new_with_prefix(&self.dir)?))?;
        let answer = local.pass().await?.answer;
        let mut r = Report {
            table,
            size,
            answer,
            local: Vec::new(),
            local_asked: 0,
            bare: Vec::new(),
            bare_asked: 0,
            memory: CacheFigures::default(),
            disk: CacheFigures::default(),
        };
        for round in 0..self.rounds {
            for _ in 0..self.warm_passes {
                let p = local.pass().await?;
                same(&p, &r.answer, "local")?;
                r.local.push(p.seconds);
                r.local_asked = p.asked;
            }
            let p = Session::new(Arc::new(self.remote()?))?.pass().await?;
            same(&p, &r.answer, "bare")?;
            r.bare.push(p.seconds);
            r.bare_asked += p.asked;
            let want = r.answer.clone();
            self.cache_round(self.cached(size, None)?, &want, "foliocache", &mut r.memory)
                .await?;
            let disk = self.cached(size, Some(&tier))?;
            self.cache_round(disk, &want, "foliocache+disk", &mut r.disk)
                .await?;
            let _ = std::fs::remove_file(&tier);
            say(&format!(
                "datafusion: round {} of {} done",
                round + 1,
                self.rounds
            ));
        }
        Ok(r)
    }
}

/// The median of `v` (NaN if empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

impl Report {
    /// Each cache's figures against the contenders', a line each (the
    /// issue's targets beside them).
    pub fn lines(&self, job: &Job) -> Vec<String> {
        let (local, bare) = (median(&self.local), median(&self.bare));
        [
            ("foliocache", &self.memory),
            ("foliocache+disk", &self.disk),
        ]
        .into_iter()
        .map(|(label, c)| {
            let passes = c.warm.len().max(1) as u64;
            format!(
                "datafusion group-by ({} MiB file, {} row groups, cache {} MiB, {} ms and {} \
                     MB/s, {} rounds): {label} warm {:.3} s = {:.2}x local {:.3} s (target 1.05x); \
                     cold {:.3} s = {:.2}x bare {:.3} s (target 1.05x); remote bytes / bytes \
                     asked: cold {:.2}x, warm {:.2}x (target 1.05x; asked {} cold, {} warm a \
                     pass); warm reads a pass: {} hits, {} misses, {} GETs, {} HEADs",
                self.size >> 20,
                self.table.groups(),
                self.size >> 22,
                job.latency.as_millis(),
                job.bandwidth / 1_000_000,
                job.rounds,
                median(&c.warm),
                median(&c.warm) / local,
                local,
                median(&c.cold),
                median(&c.cold) / bare,
                bare,
                c.remote_cold as f64 / c.asked_cold.max(1) as f64,
                c.remote_warm as f64 / c.asked_warm.max(1) as f64,
                c.asked_cold / c.cold.len().max(1) as u64,
                c.asked_warm / passes,
                c.warm_reads[0] / passes,
                c.warm_reads[1] / passes,
                c.warm_reads[2] / passes,
                c.warm_reads[3] / passes,
            )
        })
        .collect()
    }
}
