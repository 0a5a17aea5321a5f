//! Read-around with a disk tier: a point miss fetches its window (one
//! GET, the whole window kept on disk), concurrent misses of one window
//! share its GET, and a sequential reader's GETs are readahead's windows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use backing::MemBacking;
use foliocache_object_store::disk::SLOT;
use foliocache_object_store::{CachedStore, DiskTier};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::counting::{Counting, Seen};
use crate::data;

const WINDOW: u64 = 256 << 10;

/// A store over `inner` with a 1 MiB memory cache, a tier of 128 slots
/// in memory, and point misses widened to [`WINDOW`].
fn around(inner: Counting) -> (CachedStore<Counting>, Arc<DiskTier>) {
    let tier = Arc::new(DiskTier::with_backing(MemBacking::new(), 128 * SLOT as u64).unwrap());
    let s = CachedStore::builder(inner, TestCache::bytes(1 << 20).build())
        .disk_tier(tier.clone())
        .read_around(WINDOW)
        .build();
    (s, tier)
}

async fn object(inner: &Counting, name: &str, len: usize, seed: u64) -> (Path, Vec<u8>) {
    let p = Path::from(name);
    let d = data(len, seed);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    (p, d)
}

/// Point reads in one window: the first two fetch what they missed (a
/// reader that reads each part once is fetched no more), the third its
/// window (one GET, its four chunks on disk); a fourth in the window is
/// served from disk, and a read in the next window is a GET of its own.
#[tokio::test]
async fn the_third_point_miss_of_a_window_fetches_it_whole() {
    let inner = Counting::new();
    let (p, d) = object(&inner, "a/points", 1 << 20, 40).await;
    let (s, tier) = around(inner.clone());
    assert_eq!(s.stats().read_around, WINDOW);
    for at in [0usize, 100_000, 200_000] {
        let got = s.get_range(&p, at as u64..at as u64 + 4096).await.unwrap();
        assert_eq!(&got[..], &d[at..at + 4096], "at {at}");
    }
    let gets = inner.seen.gets();
    assert_eq!(gets, 3, "two GETs of their pages, one of the window");
    // Written in the background, the window served from memory meanwhile.
    until(&inner.seen, "the window on disk", || {
        tier.stats().writes == WINDOW / (64 << 10)
    })
    .await;
    let got = s.get_range(&p, 150_000..154_096).await.unwrap();
    assert_eq!(&got[..], &d[150_000..154_096]);
    assert_eq!(
        inner.seen.gets(),
        gets,
        "the window's fourth read: from disk"
    );
    let got = s.get_range(&p, 300_000..304_096).await.unwrap();
    assert_eq!(&got[..], &d[300_000..304_096]);
    assert_eq!(inner.seen.gets(), gets + 1, "the next window: its own GET");
}

/// A reader's first read at the object's start, and a large read that
/// is not a stream's, fetch their pages and no more: no readahead
/// window, no read-around, with or without a disk tier.
#[tokio::test]
async fn reads_that_are_not_a_streams_fetch_their_pages_only() {
    for tiered in [false, true] {
        let inner = Counting::new();
        let (p, d) = object(&inner, "a/exact", 8 << 20, 45).await;
        let s = if tiered {
            around(inner.clone()).0
        } else {
            CachedStore::new(inner.clone(), TestCache::bytes(4 << 20).build())
        };
        // Parquet's first data read (from byte 4), then column chunks
        // here and there, one of them right after the first.
        for r in [
            4..70_000u64,
            70_000..90_000,
            3_000_000..3_500_000,
            6_000_000..6_004_096,
        ] {
            let got = s.get_range(&p, r.clone()).await.unwrap();
            assert_eq!(&got[..], &d[r.start as usize..r.end as usize], "{r:?}");
        }
        // Each rounded out to its pages.
        let pages: u64 = [
            0..73_728u64,
            69_632..90_112,
            2_998_272..3_502_080,
            5_999_616..6_004_096,
        ]
        .iter()
        .map(|r| r.end - r.start)
        .sum();
        let fetched = s.stats().remote_get_bytes;
        assert!(
            fetched <= pages,
            "tier {tiered}: fetched {fetched}, pages {pages}"
        );
    }
}

/// Without read-around (a store the GETs measured as fast, or 0), a
/// point miss fetches only what it missed.
#[tokio::test]
async fn no_read_around_fetches_the_miss_only() {
    let inner = Counting::new();
    let (p, _) = object(&inner, "a/off", 1 << 20, 41).await;
    let tier = Arc::new(DiskTier::with_backing(MemBacking::new(), 128 * SLOT as u64).unwrap());
    let s = CachedStore::builder(inner.clone(), TestCache::bytes(1 << 20).build())
        .disk_tier(tier.clone())
        .read_around(0)
        .build();
    for at in [0u64, 100_000, 200_000] {
        s.get_range(&p, at..at + 4096).await.unwrap();
    }
    assert_eq!(inner.seen.gets(), 3);
    assert_eq!(tier.stats().writes, 0, "first misses are not admitted");
}

/// Waits (polling, at most 10 s) until `f` holds; if it never does,
/// opens `seen`'s gate (so that no read is left waiting) and fails.
async fn until(seen: &Seen, what: &str, f: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    seen.gated.store(false, Ordering::SeqCst);
    seen.gate.add_permits(1 << 20);
    panic!("never: {what}");
}

/// Two point reads in one window.
const FIRST: u64 = 65_536;
const SECOND: u64 = 139_264;

/// The bytes of the 4 KiB read at `x`.
fn at(x: u64) -> std::ops::Range<usize> {
    x as usize..x as usize + 4096
}

type Read = tokio::task::JoinHandle<object_store::Result<bytes::Bytes>>;

/// Two misses of one window that two misses came to before, with the
/// store's GETs gated (and failing with `fail`): a read at [`FIRST`],
/// then one at [`SECOND`] once the first's GET is sent; returns once the
/// second waits for the first's GET. Neither read is in the other's
/// folio: two misses of one window, not of one folio.
async fn two_misses(
    name: &str,
    seed: u64,
    fail: bool,
) -> (
    Arc<CachedStore<Counting>>,
    Counting,
    Path,
    Vec<u8>,
    Read,
    Read,
) {
    let inner = Counting::new();
    let (p, d) = object(&inner, name, 1 << 20, seed).await;
    let s = Arc::new(around(inner.clone()).0);
    // Two misses in the window before: the next ones fetch it whole.
    for at in [0, 200_704] {
        s.get_range(&p, at..at + 4096).await.unwrap();
    }
    let before = inner.seen.gets();
    inner.seen.gated.store(true, Ordering::SeqCst);
    inner.seen.fail_gets.store(fail, Ordering::SeqCst);
    let read = |at: u64| {
        let (s, p) = (s.clone(), p.clone());
        tokio::spawn(async move { s.get_range(&p, at..at + 4096).await })
    };
    let first = read(FIRST);
    until(&inner.seen, "the first GET is sent", || {
        inner.seen.gets() == before + 1
    })
    .await;
    let second = read(SECOND);
    until(&inner.seen, "the second waits for it", || {
        s.stats().coalesced == 1
    })
    .await;
    (s, inner, p, d, first, second)
}

/// A miss arriving while a neighbour's GET of the same window is in
/// flight waits for it: one GET for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_of_neighbours_share_one_get() {
    let (_s, inner, _p, d, first, second) = two_misses("a/neighbours", 42, false).await;
    inner.seen.gate.add_permits(1);
    assert_eq!(&first.await.unwrap().unwrap()[..], &d[at(FIRST)]);
    assert_eq!(&second.await.unwrap().unwrap()[..], &d[at(SECOND)]);
    assert_eq!(
        inner.seen.gets(),
        3,
        "one GET for both, after the two before"
    );
}

/// A leader whose GET fails hands its waiter nothing: the waiter sends
/// its own GET and sees the store's answer; nothing failed is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_window_get_is_not_shared() {
    let (s, inner, p, d, first, second) = two_misses("a/failing", 43, true).await;
    inner.seen.gated.store(false, Ordering::SeqCst);
    inner.seen.gate.add_permits(1 << 20);
    assert!(first.await.unwrap().is_err());
    assert!(second.await.unwrap().is_err());
    assert!(inner.seen.gets() >= 4, "the waiter sent its own GET");
    inner.seen.fail_gets.store(false, Ordering::SeqCst);
    let again = s.get_range(&p, SECOND..SECOND + 4096).await.unwrap();
    assert_eq!(&again[..], &d[at(SECOND)]);
}

/// A sequential reader in 16 KiB reads: from its third read on (two
/// reads in a row are not yet a stream: each fetches its pages),
/// readahead's windows (128 KiB, an eighth of the cache), not a GET per
/// read; and the scan does not fill the tier (a window is more than an
/// eighth of the read-around window: never widened; admission may keep a
/// few chunks, so the bound is a quarter of the object's).
#[tokio::test]
async fn a_sequential_reader_makes_readaheads_gets() {
    let inner = Counting::new();
    let len = 4usize << 20;
    let (p, d) = object(&inner, "a/seq", len, 44).await;
    let (s, tier) = around(inner.clone());
    for at in (0..len).step_by(16 << 10) {
        let got = s
            .get_range(&p, at as u64..(at + (16 << 10)) as u64)
            .await
            .unwrap();
        assert_eq!(&got[..], &d[at..at + (16 << 10)], "at {at}");
    }
    let gets = inner.seen.gets();
    assert!(gets <= (len as u64 >> 17) + 4, "{gets} GETs for 32 windows");
    assert!(
        tier.stats().writes <= (len as u64 / (64 << 10)) / 4,
        "a scan does not fill the tier: {:?}",
        tier.stats()
    );
}
