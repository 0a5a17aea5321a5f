//! foyer 0.22's `HybridCache` (memory and disk) as a range cache in front
//! of the remote: the `objectstore` scenario's `foyer` engine, built with
//! the bench's `foyer` feature (foyer and its compression libraries are
//! minutes of build, so the quick start does not build them).
//!
//! The object's bytes in aligned blocks of [`BLOCK`], keyed by object and
//! block, each fetched whole by one GET on a miss through foyer's
//! `get_or_fetch` (its single flight: concurrent misses of a block make
//! one GET), the blocks of a read together. foyer's defaults
//! (`HybridCacheBuilder`, `BlockEngineConfig::new`: LRU in memory,
//! `WriteOnEviction`, every entry admitted, blocks of the device evicted
//! FIFO, recovery `Quiet`), but for what an equal budget needs:
//! - a weigher of the value's bytes (foyer's default weighs an entry 1,
//!   so its memory capacity would count entries);
//! - **its buffers counted in M**: the block engine writes the device
//!   through a buffer pool (`buffer_pool_size`, 16 MiB by default) beside
//!   the memory cache, so the memory cache gets M less the pool. Below
//!   M = 64 MiB the pool and the device's block size are [`region_for`]`(M)`
//!   (foyer's 16 MiB at M >= 64 MiB). Entries waiting for the flusher
//!   (at most twice the pool, foyer's `submit_queue_size_threshold`) are
//!   values memory already evicted, beside M for that while;
//! - the device a file of D (`FileDeviceBuilder`, buffered IO, foyer's
//!   default).
//!
//! foyer's background tasks (flushers, reclaimers, disk reads) run on a
//! runtime of their own, two workers.

use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use bytes::Bytes;
use foyer::{
    BlockEngineConfig, DeviceBuilder, FileDeviceBuilder, HybridCache, HybridCacheBuilder, Source,
};
use object_store::ObjectStoreExt;

use super::lru::assemble;
use super::remote::{Objects, Remote};

/// foyer's default device block size and buffer pool.
pub const REGION: u64 = 16 << 20;
/// The range cache's block.
const BLOCK: u64 = 64 << 10;

/// The device block size and buffer pool foyer gets at memory `m`: the
/// largest power of two within a quarter of `m`, at most [`REGION`]
/// (foyer's defaults), at least 1 MiB.
pub fn region_for(m: u64) -> u64 {
    let quarter = (m / 4).max(1 << 20);
    (1u64 << (63 - quarter.leading_zeros())).min(REGION)
}

/// The engine: foyer's cache over the remote.
pub struct Foyer {
    remote: Remote,
    objects: Objects,
    cache: HybridCache<u64, Bytes>,
    /// Blocks foyer served from its disk.
    disk_hits: AtomicU64,
    /// Its memory cache's capacity and its buffer pool, in bytes.
    memory: u64,
    pool: u64,
}

impl Foyer {
    /// foyer at memory `m` (its buffers included) over a device file at
    /// `disk` of `d` bytes, recovered if the file holds a previous run's.
    ///
    /// # Errors
    /// foyer's, building its device or its cache.
    pub fn open(remote: Remote, objects: Objects, m: u64, disk: &FsPath, d: u64) -> Result<Foyer> {
        let region = region_for(m);
        anyhow::ensure!(m > region, "foyer: memory {m} within its buffers {region}");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("foyer")
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let device = FileDeviceBuilder::new(disk)
            .with_capacity(d as usize)
            .build()?;
        let mut engine = BlockEngineConfig::new(device);
        if region < REGION {
            engine = engine
                .with_block_size(region as usize)
                .with_buffer_pool_size(region as usize);
        }
        let cache: HybridCache<u64, Bytes> = handle.block_on(
            HybridCacheBuilder::new()
                .memory((m - region) as usize)
                .with_weighter(|_: &u64, v: &Bytes| v.len())
                .storage()
                .with_engine_config(engine)
                .with_spawner(rt.into())
                .build(),
        )?;
        Ok(Foyer {
            remote,
            objects,
            cache,
            disk_hits: AtomicU64::new(0),
            memory: m - region,
            pool: region,
        })
    }

    /// The remote.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// `range` of `obj`, its blocks together.
    pub async fn read(&self, obj: u32, range: Range<u64>) -> Result<Bytes> {
        let (first, last) = (range.start / BLOCK, (range.end - 1) / BLOCK);
        let blocks = (first..=last).map(|b| self.block(obj, b));
        let parts = futures_util::future::try_join_all(blocks).await?;
        Ok(assemble(&range, BLOCK, first, &parts))
    }

    /// Block `b` of `obj`: foyer's, or fetched whole.
    async fn block(&self, obj: u32, b: u64) -> Result<Bytes> {
        let (path, size) = self.objects.list[obj as usize].clone();
        let start = b * BLOCK;
        let end = (start + BLOCK).min(size);
        let store = self.remote.store.clone();
        let key = (u64::from(obj) << 40) | b;
        let e = self
            .cache
            .get_or_fetch(&key, move || async move {
                store.get_range(&path, start..end).await
            })
            .await?;
        if matches!(e.source(), Source::Disk) {
            self.disk_hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(e.value().clone())
    }

    /// Blocks served from disk so far.
    pub fn disk_hits(&self) -> u64 {
        self.disk_hits.load(Ordering::Relaxed)
    }

    /// Writes foyer made to its device so far.
    pub fn disk_writes(&self) -> u64 {
        self.cache.statistics().disk_write_ios() as u64
    }

    /// What foyer says, for a note.
    pub fn note(&self) -> String {
        let s = self.cache.statistics();
        format!(
            "disk tier: {} block hits; device: {} writes ({} MiB), {} reads ({} MiB); memory \
             cache {} MiB and buffer pool {} MiB",
            self.disk_hits(),
            s.disk_write_ios(),
            s.disk_write_bytes() >> 20,
            s.disk_read_ios(),
            s.disk_read_bytes() >> 20,
            self.memory >> 20,
            self.pool >> 20,
        )
    }
}
