//! `CachedStore` against `InMemory` behind a counting store: the bytes of
//! every read, the requests that reach the inner store, coherence with
//! writes, errors and the memory bound.

// The trait version under test: `object_store` names 0.14 (the
// dev-dependency), or 0.13 when the crate is built with
// `--no-default-features --features object-store-013`.
#[cfg(not(feature = "object-store-014"))]
extern crate object_store_013 as object_store;

mod around;
mod budget;
mod counting;
mod curves;
mod depth;
mod disk;
mod hints;
mod lent;
mod local;
#[cfg(feature = "prometheus")]
mod metrics;
mod prefetch;
mod restart;
mod revalidate;
#[cfg(feature = "e2e-s3")]
mod s3;
mod scans;
mod shift;
mod warm_loop;

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use counting::{Counting, Seen};
use foliocache_object_store::CachedStore;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};
use proptest::prelude::*;
use test_support::cache::TestCache;

/// `len` bytes that differ with their offset and with `seed`, so a byte
/// from the wrong place or the wrong version shows.
fn data(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i.wrapping_add(seed << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect()
}

/// A store over a counted `InMemory`, cached in a cache of `capacity`
/// bytes.
fn store(capacity: usize) -> (CachedStore<Counting>, Arc<Seen>) {
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let cache = TestCache::bytes(capacity).build();
    (CachedStore::new(inner, cache), seen)
}

async fn put(s: &CachedStore<Counting>, path: &Path, bytes: Vec<u8>) {
    s.put(path, PutPayload::from(bytes)).await.expect("put");
}

/// Writes to the inner store directly: a writer that does not go through
/// the cache.
async fn put_outside(s: &CachedStore<Counting>, path: &Path, bytes: Vec<u8>) {
    s.inner().inner.put(path, bytes.into()).await.expect("put");
}

/// Reads `range` of `path` through `s` and checks it is `want`.
async fn expect(s: &CachedStore<Counting>, path: &Path, range: Range<u64>, want: &[u8]) {
    let got = s.get_range(path, range.clone()).await.unwrap();
    assert_eq!(&got[..], want, "{path} {range:?}");
}

#[tokio::test]
async fn a_range_read_returns_the_inner_stores_bytes() {
    let (s, _) = store(4 << 20);
    let p = Path::from("a");
    let d = data(100_000, 1);
    put(&s, &p, d.clone()).await;
    let got = s.get_range(&p, 5000..70_001).await.unwrap();
    assert_eq!(&got[..], &d[5000..70_001]);
    let all = s.get(&p).await.unwrap().bytes().await.unwrap();
    assert_eq!(&all[..], &d[..]);
}

/// One runtime and one store for every case of the property test (each
/// case reads an object of its own), in a cache small enough that the
/// cases evict one another's folios.
fn shared() -> &'static (tokio::runtime::Runtime, CachedStore<Counting>) {
    static SHARED: OnceLock<(tokio::runtime::Runtime, CachedStore<Counting>)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let s = CachedStore::builder(Counting::new(), TestCache::bytes(1 << 20).build())
            .max_objects(16)
            .build();
        (rt, s)
    })
}

fn get_range() -> impl Strategy<Value = (usize, GetRange)> {
    (0usize..200_000).prop_flat_map(|size| {
        let size1 = size.max(1) as u64;
        let bounded =
            (0..size1, 1u64..80_000).prop_map(|(start, len)| GetRange::Bounded(start..start + len));
        let offset = (0..size1).prop_map(GetRange::Offset);
        let suffix = (1..size1 + 10).prop_map(GetRange::Suffix);
        (Just(size), prop_oneof![bounded, offset, suffix])
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the object's size and the range, a GET through the cache
    /// returns what the inner store returns: the same bytes, range and
    /// metadata, twice (the second time from memory).
    #[test]
    fn ranged_reads_match_the_inner_store((size, range) in get_range(), seed in any::<u64>()) {
        let (rt, s) = shared();
        rt.block_on(async {
            let p = Path::from(format!("prop/{seed}/{size}"));
            put(s, &p, data(size, seed)).await;
            let opts = GetOptions::new().with_range(Some(range.clone()));
            let want = s.inner().inner.get_opts(&p, opts.clone()).await;
            for _ in 0..2 {
                let got = s.get_opts(&p, opts.clone()).await;
                match (&want, got) {
                    (Ok(w), Ok(g)) => {
                        assert_eq!(w.range, g.range);
                        assert_eq!(w.meta, g.meta);
                        let g = g.bytes().await.unwrap();
                        let w = s.inner().inner.get_opts(&p, opts.clone()).await.unwrap();
                        assert_eq!(w.bytes().await.unwrap(), g);
                    }
                    (Err(w), Err(g)) => assert_eq!(w.to_string(), g.to_string()),
                    (w, g) => panic!("inner {w:?}, cached {g:?}"),
                }
            }
        });
    }

    /// `get_ranges` returns the bytes of every range, whichever are
    /// cached, merged or not.
    #[test]
    fn get_ranges_match_the_object(
        size in 1usize..300_000,
        starts in proptest::collection::vec((any::<prop::sample::Index>(), 1u64..20_000), 1..12),
        seed in any::<u64>(),
    ) {
        let (rt, s) = shared();
        rt.block_on(async {
            let p = Path::from(format!("ranges/{seed}/{size}"));
            let d = data(size, seed);
            put(s, &p, d.clone()).await;
            let ranges: Vec<Range<u64>> = starts
                .iter()
                .map(|(i, len)| {
                    let start = i.index(size) as u64;
                    start..(start + len).min(size as u64)
                })
                .collect();
            for _ in 0..2 {
                let got = s.get_ranges(&p, &ranges).await.unwrap();
                for (r, g) in ranges.iter().zip(&got) {
                    assert_eq!(&g[..], &d[r.start as usize..r.end as usize]);
                }
            }
        });
    }
}

#[tokio::test]
async fn a_second_read_makes_no_remote_request() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("b");
    put(&s, &p, data(300_000, 2)).await;
    let first = s.get_range(&p, 10_000..20_000).await.unwrap();
    let (gets, heads) = (seen.gets(), seen.heads());
    // The first read's GET found the object: no HEAD before it.
    assert_eq!((gets, heads), (1, 0));
    let second = s.get_range(&p, 10_000..20_000).await.unwrap();
    assert_eq!(first, second);
    let head = s.head(&p).await.unwrap();
    assert_eq!(head.size, 300_000);
    assert_eq!((seen.gets(), seen.heads()), (gets, heads));
    let st = s.stats();
    assert_eq!((st.hits, st.misses, st.remote_gets), (1, 1, 1));
}

/// Eight tasks read `range` of `path` at once; each gets `d`'s bytes.
async fn read_together(s: &Arc<CachedStore<Counting>>, path: &Path, range: Range<u64>, d: &[u8]) {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (s, p, r) = (s.clone(), path.clone(), range.clone());
            tokio::spawn(async move { s.get_range(&p, r).await })
        })
        .collect();
    for t in tasks {
        let got = t.await.unwrap().unwrap();
        assert_eq!(&got[..], &d[range.start as usize..range.end as usize]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_of_one_range_make_one_request() {
    let (s, seen) = store(4 << 20);
    let s = Arc::new(s);
    let p = Path::from("c");
    let d = data(200_000, 3);
    put(&s, &p, d.clone()).await;
    seen.delay_ms.store(200, Ordering::SeqCst);
    read_together(&s, &p, 40_960..81_920, &d).await;
    // One lookup of the object, by the GET of the range itself.
    assert_eq!(seen.heads(), 0, "no HEAD");
    assert_eq!(seen.gets(), 1, "one GET of the range");
    // The object tracked: readers missing another range together wait on
    // the folios the first inserted.
    read_together(&s, &p, 122_880..163_840, &d).await;
    assert_eq!((seen.heads(), seen.gets()), (0, 2));
}

#[tokio::test]
async fn neighbouring_misses_go_as_one_get() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("d");
    let d = data(1 << 20, 4);
    put(&s, &p, d.clone()).await;
    let ranges = [0..4096, 4096..12_288, 12_288..16_384, 20_000..30_000];
    let got = s.get_ranges(&p, &ranges).await.unwrap();
    for (r, g) in ranges.iter().zip(&got) {
        assert_eq!(&g[..], &d[r.start as usize..r.end as usize]);
    }
    assert_eq!(seen.gets(), 1);
    // A stream through a whole object reads ahead: far fewer GETs than
    // its 4 KiB pages.
    let all = s.get(&p).await.unwrap().bytes().await.unwrap();
    assert_eq!(&all[..], &d[..]);
    assert!(seen.gets() <= 16, "{} GETs", seen.gets());
}

#[tokio::test]
async fn a_version_change_serves_only_new_bytes() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("e");
    put(&s, &p, data(100_000, 5)).await;
    expect(&s, &p, 0..4096, &data(4096, 5)).await;
    // Another writer replaces the object; a read of a range not cached
    // finds its version gone and reads the new one.
    let new = data(100_000, 6);
    put_outside(&s, &p, new.clone()).await;
    let got = s.get_range(&p, 50_000..60_000).await.unwrap();
    assert_eq!(&got[..], &new[50_000..60_000]);
    assert_eq!(s.stats().stale_versions, 1);
    // What was cached of the old version is gone with it.
    expect(&s, &p, 0..4096, &new[..4096]).await;
    // Each version found by its first read's GET, not a HEAD.
    assert_eq!(seen.heads(), 0);
}

/// A store that ignores `If-Match` on GET answers a pinned GET with the
/// new version's bytes: its e_tag gives it away.
#[tokio::test]
async fn a_version_change_is_found_where_the_store_ignores_if_match() {
    let (s, seen) = store(4 << 20);
    seen.ignore_if_match.store(true, Ordering::SeqCst);
    let p = Path::from("e2");
    put(&s, &p, data(100_000, 50)).await;
    expect(&s, &p, 0..4096, &data(4096, 50)).await;
    let new = data(100_000, 51);
    put_outside(&s, &p, new.clone()).await;
    expect(&s, &p, 50_000..60_000, &new[50_000..60_000]).await;
    assert_eq!(s.stats().stale_versions, 1);
    expect(&s, &p, 0..4096, &new[..4096]).await;
}

#[tokio::test]
async fn a_get_naming_a_newer_e_tag_reads_the_new_version() {
    let (s, _) = store(4 << 20);
    let p = Path::from("f");
    put(&s, &p, data(10_000, 7)).await;
    s.get_range(&p, 0..100).await.unwrap();
    let new = data(10_000, 8);
    let e_tag = s
        .inner()
        .inner
        .put(&p, new.clone().into())
        .await
        .unwrap()
        .e_tag;
    let opts = GetOptions::new()
        .with_if_match(e_tag)
        .with_range(Some(0..100));
    let got = s.get_opts(&p, opts).await.unwrap().bytes().await.unwrap();
    assert_eq!(&got[..], &new[..100]);
}

#[tokio::test]
async fn revalidation_sees_an_outside_write() {
    let inner = Counting::new();
    let cache = TestCache::bytes(4 << 20).build();
    let s = CachedStore::builder(inner, cache)
        .revalidate_after(Duration::ZERO)
        .build();
    let p = Path::from("g");
    put(&s, &p, data(8192, 9)).await;
    s.get_range(&p, 0..100).await.unwrap();
    put_outside(&s, &p, data(8192, 10)).await;
    expect(&s, &p, 0..100, &data(100, 10)).await;
}

#[tokio::test]
async fn a_revalidation_that_finds_the_same_version_keeps_its_cached_bytes() {
    let inner = Counting::new();
    let cache = TestCache::bytes(4 << 20).build();
    let s = CachedStore::builder(inner, cache)
        .revalidate_after(Duration::ZERO)
        .build();
    let p = Path::from("same");
    put(&s, &p, data(200_000, 15)).await;
    s.get_range(&p, 0..200_000).await.unwrap();
    let before = s.stats();
    for _ in 0..3 {
        expect(&s, &p, 0..200_000, &data(200_000, 15)).await;
    }
    let after = s.stats();
    // A HEAD each (due at once), never a GET: the bytes are the ones cached.
    assert_eq!(after.remote_heads, before.remote_heads + 3, "{after:?}");
    assert_eq!(after.remote_gets, before.remote_gets, "{after:?}");
    assert!(after.hits >= before.hits + 3, "{after:?}");
}

#[tokio::test]
async fn writes_through_the_store_invalidate() {
    let (s, _) = store(4 << 20);
    let (a, b, c) = (Path::from("w/a"), Path::from("w/b"), Path::from("w/c"));
    put(&s, &a, data(5000, 11)).await;
    put(&s, &b, data(5000, 12)).await;
    s.get_range(&a, 0..5000).await.unwrap();
    s.get_range(&b, 0..5000).await.unwrap();

    // put
    put(&s, &a, data(5000, 13)).await;
    expect(&s, &a, 0..5000, &data(5000, 13)).await;
    // copy onto a cached target
    s.copy(&b, &a).await.unwrap();
    expect(&s, &a, 0..5000, &data(5000, 12)).await;
    // rename: the source is gone, the target new
    put(&s, &c, data(5000, 14)).await;
    s.get_range(&c, 0..10).await.unwrap();
    s.rename(&c, &b).await.unwrap();
    expect(&s, &b, 0..5000, &data(5000, 14)).await;
    assert!(matches!(
        s.get_range(&c, 0..10).await,
        Err(object_store::Error::NotFound { .. })
    ));
    // delete
    s.delete(&a).await.unwrap();
    assert!(matches!(
        s.get_range(&a, 0..10).await,
        Err(object_store::Error::NotFound { .. })
    ));
    // a multipart upload, when it completes
    s.get_range(&b, 0..10).await.unwrap();
    let mut up = s.put_multipart(&b).await.unwrap();
    up.put_part(data(3000, 15).into()).await.unwrap();
    up.complete().await.unwrap();
    assert_eq!(
        &s.get(&b).await.unwrap().bytes().await.unwrap()[..],
        &data(3000, 15)[..]
    );
    assert!(s.stats().invalidations >= 5);
}

#[tokio::test]
async fn an_inner_error_passes_through_and_is_not_cached() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("h");
    put(&s, &p, data(50_000, 16)).await;
    seen.fail_gets.store(true, Ordering::SeqCst);
    match s.get_range(&p, 0..1000).await {
        Err(object_store::Error::Generic { store, source }) => {
            assert_eq!(store, "Counting");
            assert_eq!(source.to_string(), "injected GET failure");
        }
        other => panic!("{other:?}"),
    }
    seen.fail_gets.store(false, Ordering::SeqCst);
    let before = seen.gets();
    expect(&s, &p, 0..1000, &data(1000, 16)).await;
    assert!(seen.gets() > before, "the failure was not cached");
    assert!(s.stats().remote_get_errors >= 1);
}

#[tokio::test]
async fn not_found_passes_through_and_is_not_cached() {
    let (s, _) = store(4 << 20);
    let p = Path::from("nothing/here");
    assert!(matches!(
        s.get_range(&p, 0..10).await,
        Err(object_store::Error::NotFound { .. })
    ));
    put_outside(&s, &p, data(100, 17)).await;
    expect(&s, &p, 0..10, &data(10, 17)).await;
}

#[tokio::test]
async fn preconditions_answer_as_the_inner_store_does() {
    let (s, _) = store(4 << 20);
    let p = Path::from("i");
    put(&s, &p, data(100, 18)).await;
    let meta = s.head(&p).await.unwrap();
    let opts = GetOptions::new().with_if_none_match(meta.e_tag.clone());
    assert!(matches!(
        s.get_opts(&p, opts).await,
        Err(object_store::Error::NotModified { .. })
    ));
    let opts = GetOptions::new().with_if_match(Some("\"no-such-tag\""));
    assert!(matches!(
        s.get_opts(&p, opts).await,
        Err(object_store::Error::Precondition { .. })
    ));
}

#[tokio::test]
async fn memory_stays_within_capacity_over_a_large_scan() {
    let capacity = 4 << 20;
    let inner = Counting::new();
    let cache = TestCache::bytes(capacity).build();
    let s = CachedStore::builder(inner, cache).max_objects(4).build();
    for i in 0..24u64 {
        let p = Path::from(format!("scan/{i}"));
        put_outside(&s, &p, data(1 << 20, 100 + i)).await;
    }
    for round in 0..2 {
        for i in 0..24u64 {
            let p = Path::from(format!("scan/{i}"));
            let got: Vec<_> = s
                .get(&p)
                .await
                .unwrap()
                .into_stream()
                .try_collect()
                .await
                .unwrap();
            let got: Vec<u8> = got.concat();
            assert_eq!(got, data(1 << 20, 100 + i), "object {i}, round {round}");
            let st = s.cache().stats();
            assert!(
                st.bytes_cached <= capacity as u64,
                "{} cached",
                st.bytes_cached
            );
            assert!(s.stats().objects <= 4);
            assert!(
                s.cache().memory().files <= 4 + 1,
                "{:?}",
                s.cache().memory()
            );
        }
    }
    // 48 MiB read through 4 MiB: every object's bytes came over the wire.
    assert!(s.stats().remote_get_bytes >= 48 << 20);
}

#[tokio::test]
async fn listing_passes_through() {
    let (s, _) = store(1 << 20);
    put(&s, &Path::from("l/x"), data(10, 19)).await;
    put(&s, &Path::from("l/y"), data(10, 20)).await;
    let mut names: Vec<String> = s
        .list(Some(&Path::from("l")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    assert_eq!(names, ["l/x", "l/y"]);
    let r = s.list_with_delimiter(None).await.unwrap();
    assert_eq!(r.common_prefixes, [Path::from("l")]);
}

/// Under another executor than tokio's, misses block the executor's
/// thread but work: the GET runs on that thread too.
#[test]
fn reads_work_outside_tokio() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("no-tokio");
    let d = data(200_000, 21);
    futures_executor::block_on(async {
        put(&s, &p, d.clone()).await;
        for _ in 0..2 {
            let got = s.get_range(&p, 1000..150_000).await.unwrap();
            assert_eq!(&got[..], &d[1000..150_000]);
        }
        let all = s.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&all[..], &d[..]);
    });
    assert!(seen.gets() >= 1);
}

/// Past `max_objects`, an object read again since it was tracked gets a
/// second chance; one read once goes first.
#[tokio::test]
async fn the_object_read_again_stays_tracked() {
    let (a, b, c) = (Path::from("o/a"), Path::from("o/b"), Path::from("o/c"));
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let s = CachedStore::builder(inner, TestCache::bytes(1 << 20).build())
        .max_objects(2)
        .build();
    for p in [&a, &b, &c] {
        put(&s, p, data(100, 60)).await;
    }
    expect(&s, &a, 0..10, &data(10, 60)).await;
    expect(&s, &a, 0..10, &data(10, 60)).await;
    expect(&s, &b, 0..10, &data(10, 60)).await;
    expect(&s, &c, 0..10, &data(10, 60)).await;
    // An object's lookup is its first read's GET.
    assert_eq!(seen.gets(), 3);
    expect(&s, &a, 0..10, &data(10, 60)).await;
    assert_eq!(seen.gets(), 3, "a stayed");
    expect(&s, &b, 0..10, &data(10, 60)).await;
    assert_eq!(seen.gets(), 4, "b went");
    assert_eq!(s.stats().objects, 2);
}

/// The first read of an object not tracked is one request, as the
/// uncached store's: the GET of its blocks, whose answer names the
/// version (no HEAD first). Its bytes are the version's, at every offset
/// (a range on no block boundary), and are cached: read again, in part
/// or whole, they are hits, with no request.
#[tokio::test]
async fn a_first_read_is_one_get_and_its_bytes_are_cached() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("first");
    let d = data(100_000, 70);
    put_outside(&s, &p, d.clone()).await;
    expect(&s, &p, 5000..13_001, &d[5000..13_001]).await;
    assert_eq!((seen.heads(), seen.gets()), (0, 1));
    let st = s.stats();
    // The blocks around the range: 4096..16_384.
    assert_eq!((st.remote_gets, st.remote_get_bytes), (1, 12_288), "{st:?}");
    expect(&s, &p, 4096..16_384, &d[4096..16_384]).await;
    expect(&s, &p, 6000..7000, &d[6000..7000]).await;
    assert_eq!((seen.heads(), seen.gets()), (0, 1));
    // The object's end: the GET's blocks past it are not asked for.
    let (q, e) = (Path::from("first-end"), data(10_000, 71));
    put_outside(&s, &q, e.clone()).await;
    expect(&s, &q, 9000..10_000, &e[9000..10_000]).await;
    expect(&s, &q, 8192..10_000, &e[8192..10_000]).await;
    assert_eq!((seen.heads(), seen.gets()), (0, 2));
    assert_eq!(s.stats().remote_get_bytes, 12_288 + 1808);
}

/// A first read the GET of its blocks cannot stand for (the whole
/// object, a suffix, a range past the end) is looked up by a HEAD, and
/// answers as before.
#[tokio::test]
async fn a_first_read_of_no_bounded_range_looks_the_object_up() {
    let (s, seen) = store(4 << 20);
    let d = data(50_000, 72);
    let (a, b, c) = (
        Path::from("whole"),
        Path::from("suffix"),
        Path::from("past"),
    );
    for p in [&a, &b, &c] {
        put_outside(&s, p, d.clone()).await;
    }
    let all = s.get(&a).await.unwrap().bytes().await.unwrap();
    assert_eq!(&all[..], &d[..]);
    let opts = GetOptions::new().with_range(Some(GetRange::Suffix(100)));
    let tail = s.get_opts(&b, opts).await.unwrap().bytes().await.unwrap();
    assert_eq!(&tail[..], &d[50_000 - 100..]);
    assert_eq!(seen.heads(), 2);
    assert!(s.get_range(&c, 60_000..60_010).await.is_err());
    assert!(s.get_range(&Path::from("none"), 0..10).await.is_err());
    // And a range of a tracked object, read again, is read as ever.
    expect(&s, &a, 100..200, &d[100..200]).await;
}

/// A first read whose precondition fails is answered `Precondition`, and
/// its GET's bytes are not kept beside the cache for a miss that does
/// not come: the next read of the range sends its own GET.
#[tokio::test]
async fn a_first_read_that_fails_its_precondition_keeps_no_bytes() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("first-cond");
    let d = data(50_000, 73);
    put_outside(&s, &p, d.clone()).await;
    let opts = GetOptions {
        if_match: Some("\"not-the-e-tag\"".into()),
        range: Some(GetRange::Bounded(1000..2000)),
        ..GetOptions::default()
    };
    let Err(e) = s.get_opts(&p, opts).await else {
        panic!("the precondition held");
    };
    assert!(matches!(e, object_store::Error::Precondition { .. }), "{e}");
    assert_eq!((seen.heads(), seen.gets()), (0, 1));
    expect(&s, &p, 1000..2000, &d[1000..2000]).await;
    assert_eq!((seen.heads(), seen.gets()), (0, 2));
}
