//! How deep a stream's prefetch reaches: no deeper than the cache can
//! hold (what it fetches is read before it is evicted) and than the link
//! needs (twice its latency times the rate of all GETs together).

use std::sync::atomic::Ordering;

use foliocache_object_store::CachedStore;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;
use crate::prefetch::threaded_cache;

const PAGE: u64 = 4096;

/// A counting store holding `name`, `size` bytes of `data` (`seed`).
async fn stored(name: &str, size: usize, seed: u64) -> (Counting, Path, bytes::Bytes) {
    let inner = Counting::new();
    let p = Path::from(name);
    let d = bytes::Bytes::from(data(size, seed));
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    (inner, p, d)
}

/// Reads `r` of `p` through `s` and checks it is `r` of `d`.
async fn read_checked(s: &CachedStore<Counting>, p: &Path, d: &[u8], r: std::ops::Range<usize>) {
    let got = s.get_range(p, r.start as u64..r.end as u64).await.unwrap();
    assert_eq!(&got[..], &d[r.clone()], "at {}", r.start);
}

/// An object of `pages` pages read once from its start in 4 KiB reads
/// through a memory-only cache of `capacity` bytes: the bytes fetched.
async fn one_pass(pages: u64, capacity: usize) -> u64 {
    let inner = Counting::new();
    let p = Path::from("stream");
    let d = bytes::Bytes::from(data((pages * PAGE) as usize, 88));
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let s = CachedStore::new(inner, TestCache::bytes(capacity).build());
    for pg in 0..pages {
        let r = pg * PAGE..(pg + 1) * PAGE;
        let got = s.get_range(&p, r.clone()).await.unwrap();
        assert_eq!(&got[..], &d[r.start as usize..r.end as usize], "page {pg}");
    }
    s.stats().remote_get_bytes
}

/// The advisor's store loop at its full size (an object of 4,505 pages,
/// 17.6 MiB) read once through caches of 4 and 8 MiB: at most 1.05x
/// the object is fetched. A prefetch deeper than the cache (8 MiB ahead
/// at first, then the GET budget) had its far end evicted before the
/// reader came to it, and fetched again: 1.32x and 1.33x.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_through_a_small_cache_fetches_what_it_reads() {
    for capacity in [4usize << 20, 8 << 20] {
        let pages = 4505;
        let fetched = one_pass(pages, capacity).await;
        let read = pages * PAGE;
        assert!(
            fetched * 100 <= read * 105,
            "cache of {capacity}: {fetched} bytes fetched for {read} read ({:.3}x)",
            fetched as f64 / read as f64
        );
    }
}

/// A stream over a link of 10 ms and about 65 MB/s that every GET
/// shares (64 KiB pieces, each 1 ms of the link), through a cache, a
/// GET budget and an IO engine (16 threads) large enough to reach 64 MiB
/// ahead: once the link is
/// measured (the first 16 MiB), the GETs asked for never reach further
/// ahead of the reader than the link needs (twice 10 ms x 65 MB/s is
/// under the least depth, so 8 MiB) plus the readahead windows of the
/// reader's own misses (two of at most 1 MiB at this link). The depth that doubled up
/// to the budget reached 32 MiB ahead and more. Every read has its bytes.
/// The link's pace is a sleep; nothing is timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_prefetch_reaches_what_the_link_needs() {
    let size = 48usize << 20;
    let (inner, p, d) = stored("linked", size, 89).await;
    let seen = inner.seen.clone();
    seen.delay_ms.store(10, Ordering::SeqCst);
    seen.piece.store(64 << 10, Ordering::SeqCst);
    seen.link_us.store(1000, Ordering::SeqCst);
    let cache = threaded_cache(256 << 20, 16);
    let s = CachedStore::builder(inner, cache)
        .get_budget(64 << 20)
        .build();
    let piece = 256usize << 10;
    let mut lead = 0u64;
    for at in (0..size).step_by(piece) {
        read_checked(&s, &p, &d, at..at + piece).await;
        if at >= 16 << 20 {
            let end = (at + piece) as u64;
            lead = lead.max(seen.max_end.load(Ordering::SeqCst).saturating_sub(end));
        }
    }
    assert!(
        lead <= 12 << 20,
        "the GETs reached {lead} bytes ahead of the reader"
    );
}

/// A stream of 48 MiB read in 128 KiB pieces (a mount's reads) through a
/// cache of 64 MiB: its prefetch's spans are whole readahead windows of
/// 2 MiB from where each starts, so the object comes in about one GET a
/// window (24, and the first reads' own). Spans cut at the reader's end
/// plus the depth (about 4 MiB and a piece each) ended in a piece of a
/// window, and the next span began with the rest: three GETs for every
/// two windows (36-37). The reader waits for the store's GETs in flight
/// to end before each read (a bounded wait), so that it rarely overtakes
/// the prefetch and misses on its own: on a loaded host it still may, so
/// the bound is below the three-for-two of cut spans, not at the 24.
/// Every read has its bytes; counted, not timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_gets_are_whole_windows() {
    let size = 48usize << 20;
    let (inner, p, d) = stored("windows", size, 90).await;
    let seen = inner.seen.clone();
    seen.delay_ms.store(2, Ordering::SeqCst);
    let s = CachedStore::new(inner, threaded_cache(64 << 20, 16));
    let piece = 128usize << 10;
    for at in (0..size).step_by(piece) {
        for _ in 0..1000 {
            if seen.active.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        read_checked(&s, &p, &d, at..at + piece).await;
    }
    let (gets, windows) = (seen.gets(), (size >> 21) as u64);
    assert!(
        gets < windows * 3 / 2,
        "{gets} GETs for {windows} windows of 2 MiB"
    );
}
