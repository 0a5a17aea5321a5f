//! Scan resistance: a long stream through a small cache does not push out
//! a hot set read again and again beside it (issue 87).

use foliocache_object_store::CachedStore;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;

/// The cache.
const CACHE: usize = 16 << 20;
/// The hot set: objects read whole, again and again (half the cache).
const HOT: usize = 64;
const HOT_SIZE: usize = 128 << 10;
/// The stream: one object read from its start in pieces.
const SCAN: usize = 64 << 20;
const PIECE: usize = 1 << 20;
/// The stream's bytes between two reads of the hot set.
const EVERY: usize = 4 << 20;

/// A hot set of 8 MiB read twice, then once every 4 MiB of a 64 MiB
/// stream, through a 16 MiB cache: the hot set and the stream's prefetch
/// (a quarter of the cache ahead, the cache being full) fit, so the hot
/// set keeps its pages (at most one GET in sixteen of its reads beside
/// the stream) and the stream fetches each 2 MiB window about once (32
/// windows, and the first reads' own GETs). A prefetch reaching half the
/// cache ahead left the hot set too little: it lost its pages every round
/// (204-219 GETs of its 1,024 reads), and the stream's far end was
/// evicted before the reader came to it and fetched again (305-334
/// GETs).
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
    let s = CachedStore::new(inner, TestCache::bytes(CACHE).build());
    let read_hot = || async {
        for (p, want) in &hot {
            let got = s.get_range(p, 0..HOT_SIZE as u64).await.unwrap();
            assert_eq!(&got[..], &want[..]);
        }
    };
    read_hot().await;
    read_hot().await;
    let warm = seen.gets_under("hot/");
    let mut rounds = 0;
    for at in (0..SCAN).step_by(PIECE) {
        let r = at as u64..(at + PIECE) as u64;
        let got = s.get_range(&big, r).await.unwrap();
        assert_eq!(&got[..], &d[at..at + PIECE], "at {at}");
        if (at + PIECE).is_multiple_of(EVERY) {
            read_hot().await;
            rounds += 1;
        }
    }
    let again = seen.gets_under("hot/") - warm;
    let scanned = seen.gets_under("scan/");
    let reads = (rounds * HOT) as u64;
    assert!(
        again <= reads / 16,
        "the hot set's GETs beside the stream: {again} of {reads} reads (warm-up {warm})"
    );
    let windows = (SCAN / (2 << 20)) as u64;
    assert!(
        scanned <= 2 * windows,
        "the stream's GETs: {scanned} for {windows} windows"
    );
}
