//! Scan resistance: a long stream through a small cache does not push out
//! a hot set read again and again beside it (issue 87).

use foliocache_object_store::CachedStore;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;

/// The hot set: objects read whole, again and again.
const HOT: usize = 16;
const HOT_SIZE: usize = 128 << 10;
/// The stream: one object read from its start in pieces.
const SCAN: usize = 64 << 20;
const PIECE: usize = 1 << 20;
/// The stream's bytes between two reads of the hot set.
const EVERY: usize = 8 << 20;

/// A hot set of 2 MiB read once every 8 MiB of a 64 MiB stream through
/// an 8 MiB cache (with the stream's prefetch, 4 MiB ahead): the hot set
/// and the prefetch fit, so the hot set stays, and the stream's pages,
/// each read once, go behind the reader. Without that each of the
/// stream's windows is one more page on the inactive list, and the hot
/// set's pages, touched once a round, reach the list's tail before their
/// second touch: every object is fetched again every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_set_keeps_its_pages_beside_a_long_stream() {
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let hot: Vec<(Path, Vec<u8>)> = (0..HOT)
        .map(|i| (Path::from(format!("hot/{i}")), data(HOT_SIZE, i as u64)))
        .collect();
    for (p, d) in &hot {
        inner.inner.put(p, d.clone().into()).await.unwrap();
    }
    let big = Path::from("scan/big");
    let d = data(SCAN, 99);
    inner.inner.put(&big, d.clone().into()).await.unwrap();
    let cache = TestCache::bytes(8 << 20).build();
    let s = CachedStore::new(inner, cache.clone());
    let read_hot = || async {
        for (p, want) in &hot {
            let got = s.get_range(p, 0..HOT_SIZE as u64).await.unwrap();
            assert_eq!(&got[..], &want[..]);
        }
    };
    read_hot().await;
    let warm = seen.gets_under("hot/");
    for at in (0..SCAN).step_by(PIECE) {
        let r = at as u64..(at + PIECE) as u64;
        let got = s.get_range(&big, r).await.unwrap();
        assert_eq!(&got[..], &d[at..at + PIECE], "at {at}");
        if (at + PIECE) % EVERY == 0 {
            read_hot().await;
        }
    }
    let again = seen.gets_under("hot/") - warm;
    eprintln!(
        "hot GETs: warm {warm}, beside the stream {again}; scan GETs {}; {:?}",
        seen.gets_under("scan/"),
        cache.stats()
    );
    assert!(
        again <= HOT as u64,
        "the hot set's GETs beside the stream: {again} (warm-up {warm})"
    );
}

/// A scan read again soon keeps its pages: through an 8 MiB cache that
/// other reads filled, a 3 MiB object read from its start in 256 KiB
/// pieces, three times. Its first pass finds no free memory, so its
/// pages go behind it; its second began less than half the cache's bytes
/// of streams after the first, so it keeps them; the third is read from
/// memory, no GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_read_again_soon_stays_cached() {
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let fill: Vec<Path> = (0..8).map(|i| Path::from(format!("fill/{i}"))).collect();
    for p in &fill {
        inner.inner.put(p, data(1 << 20, 7).into()).await.unwrap();
    }
    let scan = Path::from("scan/small");
    let size = 3usize << 20;
    let d = data(size, 42);
    inner.inner.put(&scan, d.clone().into()).await.unwrap();
    let cache = TestCache::bytes(8 << 20).build();
    let s = CachedStore::new(inner, cache.clone());
    for p in &fill {
        s.get_range(p, 0..1 << 20).await.unwrap();
    }
    let mut gets = Vec::new();
    for _ in 0..3 {
        let before = seen.gets_under("scan/");
        for at in (0..size).step_by(256 << 10) {
            let r = at as u64..(at + (256 << 10)) as u64;
            let got = s.get_range(&scan, r).await.unwrap();
            assert_eq!(&got[..], &d[at..at + (256 << 10)], "at {at}");
        }
        // The prefetch's GETs still in flight counted with their pass.
        cache.wait_io_idle();
        gets.push(seen.gets_under("scan/") - before);
    }
    assert!(gets[0] > 0, "the first pass fetches the object: {gets:?}");
    assert_eq!(gets[2], 0, "GETs of each pass: {gets:?}");
}
