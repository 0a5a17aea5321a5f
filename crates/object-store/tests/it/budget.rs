//! The budget of GET bytes in flight: reads more than it holds all
//! complete with their bytes, a GET larger than it goes alone, and a GET
//! that fails mid-stream gives its bytes back and leaves nothing cached.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use backing::MemBacking;
use foliocache_object_store::disk::SLOT;
use foliocache_object_store::{CachedStore, DiskTier};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;

const BUDGET: u64 = 64 << 10;

/// Objects `b/0`.. of `len` bytes each in `inner`, and their bytes.
async fn objects(inner: &Counting, n: u64, len: usize) -> Vec<(Path, Vec<u8>)> {
    let mut v = Vec::new();
    for i in 0..n {
        let (p, d) = (Path::from(format!("b/{i}")), data(len, 70 + i));
        inner.inner.put(&p, d.clone().into()).await.unwrap();
        v.push((p, d));
    }
    v
}

/// 16 reads of 32 KiB (four objects) and one of 512 KiB (a fifth) at once, through a budget of
/// 64 KiB: every read has its bytes, at most two GETs were sent at once
/// (each takes at least 32 KiB), and the budget is whole at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_smaller_than_the_reads_in_flight_completes_every_read() {
    let inner = Counting::new();
    let objs = objects(&inner, 5, 1 << 20).await;
    inner.seen.piece.store(5000, Ordering::SeqCst);
    inner.seen.delay_ms.store(5, Ordering::SeqCst);
    let s = CachedStore::builder(inner.clone(), TestCache::bytes(16 << 20).build())
        .get_budget(BUDGET)
        .build();
    assert_eq!(s.get_budget(), BUDGET);
    let s = Arc::new(s);
    let mut reads = Vec::new();
    for i in 0..16u64 {
        let (p, d) = objs[(i % 4) as usize].clone();
        // Far apart: each GET is a whole read's, at least 32 KiB.
        let at = (i / 4) * (256 << 10) + 123;
        reads.push((p, d, at..at + (32 << 10)));
    }
    let (p, d) = objs[4].clone();
    reads.push((p, d, 500_000..500_000 + (512 << 10)));
    let tasks: Vec<_> = reads
        .into_iter()
        .map(|(p, d, r)| {
            let s = s.clone();
            tokio::spawn(async move {
                let got = s.get_range(&p, r.clone()).await.unwrap();
                assert_eq!(&got[..], &d[r.start as usize..r.end as usize], "{p} {r:?}");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let most = inner.seen.max_active.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "GETs at once: {most}");
    assert!(
        s.stats().remote_get_bytes >= 512 << 10,
        "the oversize read's GET went"
    );
    // Readahead the reads started may still be in flight.
    let mut waited = 0;
    while s.get_budget_available() != BUDGET && waited < 5000 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 10;
    }
    assert_eq!(s.get_budget_available(), BUDGET, "the budget is given back");
}

/// The default budget is an eighth of the cache, at least 8 MiB.
#[test]
fn the_default_budget_is_an_eighth_of_the_cache() {
    let s = CachedStore::new(Counting::new(), TestCache::bytes(16 << 20).build());
    assert_eq!(s.get_budget(), 8 << 20);
    let s = CachedStore::new(Counting::new(), TestCache::bytes(128 << 20).build());
    assert_eq!(s.get_budget(), 16 << 20);
}

/// A GET that fails after its first piece: the store's error, nothing
/// cached (the next read sends a GET and has the right bytes), the budget
/// whole again; with a disk tier and read-around, nothing written to it.
#[tokio::test]
async fn a_get_failing_mid_stream_gives_its_budget_back_and_caches_nothing() {
    for tiered in [false, true] {
        let inner = Counting::new();
        let objs = objects(&inner, 1, 1 << 20).await;
        let (p, d) = objs[0].clone();
        inner.seen.piece.store(4096, Ordering::SeqCst);
        let tier = Arc::new(DiskTier::with_backing(MemBacking::new(), 64 * SLOT as u64).unwrap());
        let mut b = CachedStore::builder(inner.clone(), TestCache::bytes(4 << 20).build())
            .get_budget(BUDGET);
        if tiered {
            b = b.disk_tier(tier.clone()).read_around(256 << 10);
        }
        let s = b.build();
        inner.seen.fail_mid_stream.store(true, Ordering::SeqCst);
        match s.get_range(&p, 300_000..340_000).await {
            Err(object_store::Error::Generic { store, source }) => {
                assert_eq!(store, "Counting");
                assert_eq!(source.to_string(), "injected failure mid-stream");
            }
            other => panic!("tiered {tiered}: {other:?}"),
        }
        assert_eq!(s.get_budget_available(), BUDGET, "tiered {tiered}");
        assert_eq!(tier.stats().writes, 0, "tiered {tiered}: nothing on disk");
        inner.seen.fail_mid_stream.store(false, Ordering::SeqCst);
        let before = inner.seen.gets();
        let got = s.get_range(&p, 300_000..340_000).await.unwrap();
        assert_eq!(&got[..], &d[300_000..340_000], "tiered {tiered}");
        assert!(
            inner.seen.gets() > before,
            "tiered {tiered}: the failure was not cached"
        );
    }
}
