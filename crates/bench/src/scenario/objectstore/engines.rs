//! The engines of the `objectstore` scenario, each an object reader over
//! the same [`Remote`] at the same budgets (memory M, disk D):
//!
//! - `none`: every read a GET;
//! - `parts[4MiB]`: SlateDB's `CachedObjectStore` policy (slatedb 0.18,
//!   `cached_object_store/object_store.rs`): a read is split into aligned
//!   parts of 4 MiB (`part_size_bytes`'s default), each served from the
//!   cache or fetched **whole** by one ranged GET, concurrent misses of a
//!   part making one (its `part_flights`), the parts read one after
//!   another (its `stream::iter(..).then`); kept in a memory LRU of M
//!   (SlateDB keeps them in files evicted by a pick-of-two LRU
//!   approximation);
//! - `foyer[model]`: a range cache on foyer's `HybridCache` with foyer's
//!   defaults, modelled ([`super::foyer`]): aligned 64 KiB blocks fetched
//!   whole on a miss, a memory LRU (foyer's default eviction), blocks it
//!   evicts written to the disk tier of D (`WriteOnEviction`, foyer's
//!   default) through a block buffer in memory, a disk hit inserted in
//!   memory again; the LRU and the buffer are M together
//!   ([`region_for`]);
//! - `foliocache`: [`CachedStore`] over a cache of M;
//! - `foliocache+disk`: the same with a [`DiskTier`] of D.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;

use anyhow::Result;
use bytes::{Bytes, BytesMut};
use foliocache_object_store::{CachedStore, DiskTier};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use parking_lot::Mutex;

use super::foyer::{region_for, FoyerDisk};
use super::lru::{BlockKey, BlockLru};
use super::remote::{Remote, Throttled};

/// The engines, by label, in the order they run.
pub const ENGINES: [&str; 5] = [NONE, PARTS, FOLIO, FOLIO_DISK, FOYER];
/// No cache.
pub const NONE: &str = "none";
/// SlateDB's policy.
pub const PARTS: &str = "parts[4MiB]";
/// foyer's policy.
pub const FOYER: &str = "foyer[model]";
/// foliocache in memory.
pub const FOLIO: &str = "foliocache";
/// foliocache in memory and on disk.
pub const FOLIO_DISK: &str = "foliocache+disk";

/// SlateDB's part.
const PART: u64 = 4 << 20;
/// The range cache's block on foyer.
const BLOCK: u64 = 64 << 10;

/// The objects: their names and sizes, by index.
#[derive(Debug, Clone)]
pub struct Objects {
    /// Each object's path and size.
    pub list: Vec<(Path, u64)>,
}

/// A block cache: SlateDB's parts, or the range cache on foyer.
pub struct Blocks {
    remote: Remote,
    objects: Objects,
    block: u64,
    memory: Mutex<BlockLru>,
    disk: Option<Arc<FoyerDisk>>,
    /// Gates of blocks being fetched (single flight).
    flights: Mutex<HashMap<BlockKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Parts one after another (SlateDB) or together (the range cache).
    sequential: bool,
}

/// An engine.
pub enum Engine {
    /// The remote itself.
    None(Remote, Objects),
    /// A block cache.
    Blocks(Blocks),
    /// foliocache.
    Folio(CachedStore<Arc<Throttled>>, Remote, Objects),
}

impl Engine {
    /// The engine `label` over `remote`, with memory `m` and, for those
    /// with a disk tier, a file at `disk` of `d` bytes.
    ///
    /// # Errors
    /// The cache or the tier could not be made.
    pub fn new(
        label: &str,
        remote: Remote,
        objects: Objects,
        m: u64,
        disk: &FsPath,
        d: u64,
    ) -> Result<Engine> {
        let blocks = |block, memory, disk, sequential| {
            Engine::Blocks(Blocks {
                remote: remote.clone(),
                objects: objects.clone(),
                block,
                memory: Mutex::new(BlockLru::new(memory)),
                disk,
                flights: Mutex::default(),
                sequential,
            })
        };
        Ok(match label {
            NONE => Engine::None(remote, objects),
            PARTS => blocks(PART, m, None, true),
            FOYER => {
                // The block buffer is memory too: M in all (region_for).
                let region = region_for(m);
                let tier = FoyerDisk::open(disk, d, region)?;
                blocks(BLOCK, m - region, Some(Arc::new(tier)), false)
            }
            FOLIO | FOLIO_DISK => {
                let cache = foliocache::Cache::builder()
                    .capacity(m as usize)
                    .io_engine(backing::aio::IoEngineConfig::new().threads(16))
                    .build()?;
                let mut b = CachedStore::builder(remote.store.clone(), cache);
                if label == FOLIO_DISK {
                    b = b.disk_tier(Arc::new(DiskTier::open(disk, d)?));
                }
                Engine::Folio(b.build(), remote, objects)
            }
            other => anyhow::bail!("objectstore: no engine {other}"),
        })
    }

    /// The remote it reads from.
    pub fn remote(&self) -> &Remote {
        match self {
            Engine::None(r, _) => r,
            Engine::Blocks(b) => &b.remote,
            Engine::Folio(_, r, _) => r,
        }
    }

    /// `range` of object `obj`.
    ///
    /// # Errors
    /// The remote's.
    pub async fn read(&self, obj: u32, range: Range<u64>) -> Result<Bytes> {
        match self {
            Engine::None(r, o) => Ok(r.store.get_range(&o.list[obj as usize].0, range).await?),
            Engine::Folio(s, _, o) => Ok(s.get_range(&o.list[obj as usize].0, range).await?),
            Engine::Blocks(b) => b.read(obj, range).await,
        }
    }

    /// Hits of its disk tier so far (0 without one).
    pub fn disk_hits(&self) -> u64 {
        match self {
            Engine::Blocks(b) => b.disk.as_ref().map_or(0, |d| d.counts().0),
            Engine::Folio(s, ..) => s.disk_tier().map_or(0, |t| t.stats().hits),
            Engine::None(..) => 0,
        }
    }

    /// Entries its disk tier has written or holds (0 without one).
    pub fn disk_writes(&self) -> u64 {
        match self {
            Engine::Blocks(b) => b.disk.as_ref().map_or(0, |d| d.entries() as u64),
            Engine::Folio(s, ..) => s.disk_tier().map_or(0, |t| t.stats().writes),
            Engine::None(..) => 0,
        }
    }

    /// What its caches say, for a note.
    pub fn note(&self) -> String {
        match self {
            Engine::None(..) => String::new(),
            Engine::Blocks(b) => match &b.disk {
                Some(d) => {
                    let (h, m) = d.counts();
                    format!("disk tier: {h} hits, {m} misses, {} entries", d.entries())
                }
                None => String::new(),
            },
            Engine::Folio(s, ..) => {
                let st = s.stats();
                let mut n = format!(
                    "memory: {} hits, {} misses; read-around window {} KiB, {} misses coalesced",
                    st.hits,
                    st.misses,
                    st.read_around >> 10,
                    st.coalesced
                );
                if let Some(t) = s.disk_tier() {
                    let t = t.stats();
                    n += &format!(
                        "; disk tier: {} hits, {} misses, {} chunks written; HEADs: {}, versions \
                         from the tier's records: {}",
                        t.hits, t.misses, t.writes, st.remote_heads, st.recorded_versions
                    );
                }
                n
            }
        }
    }
}

impl Blocks {
    /// `range` of `obj`, block by block.
    async fn read(&self, obj: u32, range: Range<u64>) -> Result<Bytes> {
        let first = range.start / self.block;
        let last = (range.end - 1) / self.block;
        let mut parts = Vec::new();
        if self.sequential {
            for b in first..=last {
                parts.push(self.block_of((obj, b)).await?);
            }
        } else {
            let all = (first..=last).map(|b| self.block_of((obj, b)));
            parts = futures_util::future::try_join_all(all).await?;
        }
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        for (b, data) in (first..=last).zip(parts) {
            let base = b * self.block;
            let from = range.start.max(base) - base;
            let to = range.end.min(base + data.len() as u64) - base;
            out.extend_from_slice(&data[from as usize..to as usize]);
        }
        Ok(out.freeze())
    }

    /// A block: from memory, from disk, or fetched whole (one GET per
    /// block however many readers miss it).
    async fn block_of(&self, key: BlockKey) -> Result<Bytes> {
        if let Some(d) = self.cached(key) {
            return Ok(d);
        }
        let gate = self.flights.lock().entry(key).or_default().clone();
        let held = gate.lock().await;
        let got = match self.cached(key) {
            Some(d) => Ok(d),
            None => self.fetch(key).await,
        };
        drop(held);
        self.flights.lock().remove(&key);
        got
    }

    /// From memory, or from disk into memory.
    fn cached(&self, key: BlockKey) -> Option<Bytes> {
        if let Some(d) = self.memory.lock().get(key) {
            return Some(d);
        }
        let d = self.disk.as_ref()?.get(key)?;
        self.keep(key, d.clone());
        Some(d)
    }

    /// Fetches the block and keeps it.
    async fn fetch(&self, key: BlockKey) -> Result<Bytes> {
        let (path, size) = &self.objects.list[key.0 as usize];
        let start = key.1 * self.block;
        let end = (start + self.block).min(*size);
        let d = self.remote.store.get_range(path, start..end).await?;
        self.keep(key, d.clone());
        Ok(d)
    }

    /// Inserts in memory; what memory evicts goes to disk (foyer's
    /// `WriteOnEviction`).
    fn keep(&self, key: BlockKey, d: Bytes) {
        let evicted = self.memory.lock().insert(key, d);
        if let Some(disk) = &self.disk {
            for (k, d) in evicted {
                // A failed write is a block not kept.
                let _ = disk.insert(k, &d);
            }
        }
    }
}
