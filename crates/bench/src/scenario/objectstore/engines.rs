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
//! - `foyer`: foyer 0.22's `HybridCache` as a range cache, memory and a
//!   disk of D, its defaults, its buffers counted in M (`super::foyer`;
//!   built with the bench's `foyer` feature): aligned 64 KiB blocks
//!   fetched whole on a miss, the blocks of a read together;
//! - `foliocache`: [`CachedStore`] over a cache of M;
//! - `foliocache+disk`: the same with a [`DiskTier`] of D.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;
use foliocache_object_store::{CachedStore, DiskTier};
use object_store::ObjectStoreExt;
use parking_lot::Mutex;

#[cfg(feature = "foyer")]
use super::foyer::Foyer;
use super::lru::{assemble, BlockKey, BlockLru};
pub use super::remote::Objects;
use super::remote::{Remote, Throttled};

/// The engines, by label, in the order they run (foyer with the bench's
/// `foyer` feature).
#[cfg(feature = "foyer")]
pub const ENGINES: [&str; 5] = [NONE, PARTS, FOLIO, FOLIO_DISK, FOYER];
/// The engines, by label, in the order they run (foyer with the bench's
/// `foyer` feature).
#[cfg(not(feature = "foyer"))]
pub const ENGINES: [&str; 4] = [NONE, PARTS, FOLIO, FOLIO_DISK];
/// No cache.
pub const NONE: &str = "none";
/// SlateDB's policy.
pub const PARTS: &str = "parts[4MiB]";
/// foyer 0.22's `HybridCache`.
pub const FOYER: &str = "foyer";
/// foliocache in memory.
pub const FOLIO: &str = "foliocache";
/// foliocache in memory and on disk.
pub const FOLIO_DISK: &str = "foliocache+disk";

/// SlateDB's part.
const PART: u64 = 4 << 20;

/// SlateDB's parts: a block cache in memory.
pub struct Blocks {
    remote: Remote,
    objects: Objects,
    block: u64,
    memory: Mutex<BlockLru>,
    /// Gates of blocks being fetched (single flight).
    flights: Mutex<HashMap<BlockKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// An engine.
pub enum Engine {
    /// The remote itself.
    None(Remote, Objects),
    /// SlateDB's parts.
    Blocks(Blocks),
    /// foyer.
    #[cfg(feature = "foyer")]
    Foyer(Foyer),
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
        Ok(match label {
            NONE => Engine::None(remote, objects),
            PARTS => Engine::Blocks(Blocks {
                remote,
                objects,
                block: PART,
                memory: Mutex::new(BlockLru::new(m)),
                flights: Mutex::default(),
            }),
            #[cfg(feature = "foyer")]
            FOYER => Engine::Foyer(Foyer::open(remote, objects, m, disk, d)?),
            #[cfg(not(feature = "foyer"))]
            FOYER => anyhow::bail!("objectstore: foyer is not built: {}", super::FOYER_BUILD),
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
            #[cfg(feature = "foyer")]
            Engine::Foyer(f) => f.remote(),
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
            #[cfg(feature = "foyer")]
            Engine::Foyer(f) => f.read(obj, range).await,
        }
    }

    /// Hits of its disk tier so far (0 without one).
    pub fn disk_hits(&self) -> u64 {
        match self {
            #[cfg(feature = "foyer")]
            Engine::Foyer(f) => f.disk_hits(),
            Engine::Folio(s, ..) => s.disk_tier().map_or(0, |t| t.stats().hits),
            Engine::None(..) | Engine::Blocks(_) => 0,
        }
    }

    /// Entries its disk tier has written or holds (0 without one).
    pub fn disk_writes(&self) -> u64 {
        match self {
            #[cfg(feature = "foyer")]
            Engine::Foyer(f) => f.disk_writes(),
            Engine::Folio(s, ..) => s.disk_tier().map_or(0, |t| t.stats().writes),
            Engine::None(..) | Engine::Blocks(_) => 0,
        }
    }

    /// What its caches say, for a note.
    pub fn note(&self) -> String {
        match self {
            Engine::None(..) | Engine::Blocks(_) => String::new(),
            #[cfg(feature = "foyer")]
            Engine::Foyer(f) => f.note(),
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
    /// `range` of `obj`, one part after another (SlateDB's
    /// `stream::iter(..).then`).
    async fn read(&self, obj: u32, range: Range<u64>) -> Result<Bytes> {
        let first = range.start / self.block;
        let last = (range.end - 1) / self.block;
        let mut parts = Vec::new();
        for b in first..=last {
            parts.push(self.block_of((obj, b)).await?);
        }
        Ok(assemble(&range, self.block, first, &parts))
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

    /// From memory.
    fn cached(&self, key: BlockKey) -> Option<Bytes> {
        self.memory.lock().get(key)
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

    /// Inserts in memory (what it evicts is dropped).
    fn keep(&self, key: BlockKey, d: Bytes) {
        self.memory.lock().insert(key, d);
    }
}
