//! A cache that knows the call: `CacheHint`s in requests' extensions,
//! write-through to the disk tier, and chunks kept until their read.
//!
//! The story: engines on object storage meet the same failures again and
//! again. A compaction's inputs, written minutes before, are evicted by
//! the queries' hot set before the compaction reads them once, and every
//! block is a GET (GreptimeDB's import made 12,898); a write-through cache
//! whose queue is full drops the write. These tests replay both.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use backing::{Backing, BackingInfo, IoBuf, IoBufMut, MemBacking};
use foliocache_object_store::disk::SLOT;
use foliocache_object_store::{CacheHint, CachedStore, DiskTier};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt, PutOptions, PutPayload};
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;

/// The bytes of one SST of the trace: 16 tier chunks.
const FILE: usize = 1 << 20;
/// The tier's slots: 16 MiB of chunks, in 16 sets.
const TIER_SLOTS: u64 = 256;

/// A store over `inner` with `memory` bytes of memory and `tier`, its
/// point misses fetching only what they miss (no read-around window).
fn tiered(inner: Counting, memory: usize, tier: Arc<DiskTier>) -> CachedStore<Counting> {
    CachedStore::builder(inner, TestCache::bytes(memory).build())
        .disk_tier(tier)
        .read_around(0)
        .build()
}

/// Options of a GET with `hint`.
fn get_opts(hint: CacheHint) -> GetOptions {
    let mut o = GetOptions::default();
    o.extensions.insert(hint);
    o
}

/// Options of a put with `hint`.
fn put_opts(hint: CacheHint) -> PutOptions {
    let mut o = PutOptions::default();
    o.extensions.insert(hint);
    o
}

/// What [`lsm_trace`] saw: the GETs the compactions made and the bytes
/// they read; the query's reads of its hot set and their GETs.
#[derive(Debug, Clone, Copy)]
struct Trace {
    compaction_gets: u64,
    compaction_bytes: u64,
    hot_reads: u64,
    hot_gets: u64,
}

impl Trace {
    /// The query's reads answered without a GET.
    fn hot_hit_ratio(&self) -> f64 {
        1.0 - self.hot_gets as f64 / self.hot_reads as f64
    }
}

/// Replays an LSM engine's trace: SSTs written at three times the tier
/// (`write`: their puts' hint), each read once, whole, by a compaction
/// (`read`: its gets' hint) `LAG` files later, while a query re-reads a
/// hot object as large as the tier (a quarter of it between two writes:
/// its chunks, missed twice, are admitted to the tier and compete for it).
async fn lsm_trace(write: CacheHint, read: CacheHint) -> Trace {
    const LAG: usize = 4;
    let files = (3 * TIER_SLOTS as usize * SLOT).div_ceil(FILE);
    let inner = Counting::new();
    let tier =
        Arc::new(DiskTier::with_backing(MemBacking::new(), TIER_SLOTS * SLOT as u64).unwrap());
    let s = tiered(inner.clone(), 1 << 20, tier.clone());
    let hot = Path::from("hot/table");
    let hot_data = data((TIER_SLOTS as usize) << 16, 70);
    inner
        .inner
        .put(&hot, hot_data.clone().into())
        .await
        .unwrap();
    let mut t = Trace {
        compaction_gets: 0,
        compaction_bytes: 0,
        hot_reads: 0,
        hot_gets: 0,
    };
    let sst = |i: usize| Path::from(format!("sst/{i:05}.sst"));
    for i in 0..files {
        let d = data(FILE, 100 + i as u64);
        let payload = PutPayload::from(d);
        s.put_opts(&sst(i), payload, put_opts(write)).await.unwrap();
        // The query's hot set: 64 KiB blocks, a stride that visits them
        // all every four files.
        let before = inner.seen.gets();
        for k in 0..TIER_SLOTS / 4 {
            let b = (k * 37 * 4 + i as u64 * 37) % TIER_SLOTS;
            let r = b << 16..(b + 1) << 16;
            let got = s.get_range(&hot, r.clone()).await.unwrap();
            assert_eq!(&got[..], &hot_data[r.start as usize..r.end as usize]);
            t.hot_reads += 1;
        }
        t.hot_gets += inner.seen.gets() - before;
        if i >= LAG {
            let input = i - LAG;
            let before = inner.seen.gets();
            let got = s.get_opts(&sst(input), get_opts(read)).await;
            let body = got.unwrap().bytes().await.unwrap();
            assert_eq!(
                &body[..],
                &data(FILE, 100 + input as u64)[..],
                "sst {input}"
            );
            t.compaction_gets += inner.seen.gets() - before;
            t.compaction_bytes += body.len() as u64;
            // The compaction deletes its input.
            s.delete(&sst(input)).await.unwrap();
        }
    }
    t
}

/// Files kept until read survive the hot set's churn: the compaction of
/// every one of them is served by the tier, with no GET (the lag's bytes,
/// four files, fit the tier), where plain write-through LRU makes GETs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_inputs_kept_until_read_make_no_get() {
    let kept = lsm_trace(CacheHint::KeepUntilRead, CacheHint::ReadOnce).await;
    assert!(
        kept.compaction_bytes > 3 * TIER_SLOTS * SLOT as u64 / 2,
        "{kept:?}"
    );
    assert_eq!(
        kept.compaction_gets, 0,
        "compaction GETs with KeepUntilRead"
    );
    let plain = lsm_trace(CacheHint::Normal, CacheHint::Normal).await;
    assert!(
        plain.compaction_gets > 0,
        "plain write-through LRU: {plain:?}"
    );
}

/// The query's hot set keeps more of its hits when the compaction's
/// reads are marked `ReadOnce` (their tier chunks made first to go, their
/// misses not kept in memory) than when they are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_once_compactions_leave_the_hot_set_its_hits() {
    let once = lsm_trace(CacheHint::KeepUntilRead, CacheHint::ReadOnce).await;
    let normal = lsm_trace(CacheHint::KeepUntilRead, CacheHint::Normal).await;
    eprintln!(
        "hot hit ratio: ReadOnce {:.3}, Normal {:.3} ({once:?}, {normal:?})",
        once.hot_hit_ratio(),
        normal.hot_hit_ratio()
    );
    assert!(
        once.hot_gets < normal.hot_gets,
        "ReadOnce {once:?}, Normal {normal:?}"
    );
}

/// A disk tier whose writes take `per_slot` each: a disk slower than the
/// writers.
#[derive(Debug)]
struct Throttled {
    inner: Arc<MemBacking>,
    per_slot: Duration,
}

impl Backing for Throttled {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        self.inner.read_blocks(bufs, offset)
    }
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        std::thread::sleep(self.per_slot);
        self.inner.write_blocks(bufs, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)
    }
    fn info(&self) -> BackingInfo {
        self.inner.info()
    }
}

/// Writers putting faster than the tier writes (all at once: more than
/// twice its bandwidth) wait for the queue; not one chunk is dropped, and
/// every file is read back from the tier without a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_write_queue_makes_writers_wait_and_drops_nothing() {
    const FILES: usize = 16;
    const SIZE: usize = 512 << 10;
    let inner = Counting::new();
    let disk = Throttled {
        inner: Arc::new(MemBacking::new()),
        per_slot: Duration::from_millis(1),
    };
    let chunks = (FILES * SIZE / (64 << 10)) as u64;
    // Four times the chunks: the tier is set-associative, and a set that
    // the keys' hashes fill with kept chunks gives up its oldest (counted
    // as `kept_evicted`, read again from the store).
    let tier = Arc::new(DiskTier::with_backing(disk, 4 * chunks * SLOT as u64).unwrap());
    let s = Arc::new(
        CachedStore::builder(inner.clone(), TestCache::bytes(1 << 20).build())
            .disk_tier(tier.clone())
            .read_around(0)
            .write_queue(1 << 20)
            .build(),
    );
    let path = |i: usize| Path::from(format!("wal/{i:05}"));
    let writers: Vec<_> = (0..FILES)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let payload = PutPayload::from(data(SIZE, 200 + i as u64));
                let opts = put_opts(CacheHint::KeepUntilRead);
                s.put_opts(&path(i), payload, opts).await.unwrap();
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let st = s.stats();
    assert_eq!(st.written_through, chunks, "chunks handed to the tier");
    assert_eq!(
        tier.stats().writes,
        chunks,
        "chunks the tier wrote: none dropped"
    );
    assert!(st.write_waits > 0, "writers waited for the queue: {st:?}");
    for i in 0..FILES {
        let got = s.get(&path(i)).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], &data(SIZE, 200 + i as u64)[..]);
    }
    assert!(
        inner.seen.gets() <= tier.stats().kept_evicted,
        "every file read from the tier but a chunk a full set gave up: {:?} {:?}",
        tier.stats(),
        s.stats()
    );
}

/// `DontCache`: a read not cached is the inner store's own GET (no HEAD,
/// nothing tracked), and a put is not written through.
#[tokio::test]
async fn dont_cache_passes_through() {
    let inner = Counting::new();
    let tier = Arc::new(DiskTier::with_backing(MemBacking::new(), 16 * SLOT as u64).unwrap());
    let s = tiered(inner.clone(), 1 << 20, tier.clone());
    let p = Path::from("gc/manifest");
    let d = data(100_000, 80);
    s.put_opts(&p, d.clone().into(), put_opts(CacheHint::DontCache))
        .await
        .unwrap();
    assert_eq!(s.stats().written_through, 0);
    let mut o = get_opts(CacheHint::DontCache);
    o.range = Some((1000..5000).into());
    let got = s.get_opts(&p, o).await.unwrap().bytes().await.unwrap();
    assert_eq!(&got[..], &d[1000..5000]);
    let st = s.stats();
    assert_eq!((st.passed_through, st.objects, st.remote_heads), (1, 0, 0));
    assert_eq!(inner.seen.gets(), 1);
}

/// `ReadOnce`: a miss's bytes are returned, not kept in memory: the same
/// range read again is a miss again.
#[tokio::test]
async fn read_once_keeps_nothing_in_memory() {
    let inner = Counting::new();
    let s = CachedStore::new(inner.clone(), TestCache::bytes(4 << 20).build());
    let p = Path::from("compaction/input");
    let d = data(200_000, 81);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    for _ in 0..2 {
        let mut o = get_opts(CacheHint::ReadOnce);
        o.range = Some((4096..20_480).into());
        let got = s.get_opts(&p, o).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], &d[4096..20_480]);
    }
    assert_eq!(s.stats().misses, 2, "{:?}", s.stats());
    assert_eq!(s.stats().hits, 0);
    // A normal read of it is kept.
    for _ in 0..2 {
        assert_eq!(
            &s.get_range(&p, 4096..20_480).await.unwrap()[..],
            &d[4096..20_480]
        );
    }
    assert_eq!(s.stats().hits, 1);
}
