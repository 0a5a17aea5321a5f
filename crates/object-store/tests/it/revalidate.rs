//! Revalidation by GETs (docs/object-store.md, "Coherence"): a GET that
//! names the cached version and is answered by it says, as a HEAD would,
//! that the version is current, so a stream's GETs keep its object valid
//! and no HEAD is sent while they flow; a GET that finds the version
//! replaced drops what is cached of it, as a HEAD that found another
//! version would; a caller naming a version by `If-Match` gets what it got
//! before: the cached bytes until the change is seen, `Precondition`
//! after.

use std::sync::atomic::Ordering;
use std::time::Duration;

use foliocache_object_store::{CacheHint, CachedStore};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;
use crate::restart::until;

/// `range` of `p` through `s`, naming `e_tag` by `If-Match` if given,
/// marked `hint` if given.
async fn read(
    s: &CachedStore<Counting>,
    p: &Path,
    range: std::ops::Range<u64>,
    e_tag: Option<&str>,
    hint: Option<CacheHint>,
) -> object_store::Result<bytes::Bytes> {
    let mut o = GetOptions {
        range: Some(GetRange::Bounded(range)),
        if_match: e_tag.map(str::to_string),
        ..GetOptions::default()
    };
    if let Some(h) = hint {
        o.extensions.insert(h);
    }
    s.get_opts(p, o).await?.bytes().await
}

/// `r` is the store's `Precondition` (the version named is not the
/// current one).
fn expect_precondition(r: object_store::Result<bytes::Bytes>) {
    assert!(
        matches!(r, Err(object_store::Error::Precondition { .. })),
        "{:?}",
        r.map(|b| b.len())
    );
}

/// Writes `bytes` at `p` in `s`'s inner store (a writer that does not go
/// through the cache); the new version's e_tag.
async fn put_outside(s: &CachedStore<Counting>, p: &Path, bytes: Vec<u8>) -> String {
    let put = s.inner().inner.put(p, PutPayload::from(bytes)).await;
    put.unwrap().e_tag.unwrap()
}

/// With a time-to-live of 1 s: the object looked up (a HEAD), then a GET
/// held at the store's gate until more than the time-to-live has passed
/// since that HEAD. The GET's answer names the cached version, so a read
/// of the bytes cached before it is served from memory with no HEAD;
/// without the GET's revalidation it would wait for one. Counted, not
/// timed: the only wait the counts depend on is the read that follows
/// the GET's answer, which has the whole time-to-live to come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_answered_by_the_cached_version_revalidates_it() {
    let ttl = Duration::from_secs(1);
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let s = CachedStore::builder(inner, TestCache::bytes(16 << 20).build())
        .revalidate_after(ttl)
        .build();
    let (p, d) = (Path::from("ttl"), data(1 << 20, 1));
    put_outside(&s, &p, d.clone()).await;
    let first = read(&s, &p, 0..4096, None, None).await.unwrap();
    assert_eq!(&first[..], &d[..4096]);
    // Found by the first read's GET, not a HEAD.
    assert_eq!((seen.heads(), seen.gets()), (0, 1));

    seen.gated.store(true, Ordering::SeqCst);
    let s = std::sync::Arc::new(s);
    let held = {
        let (s, p) = (s.clone(), p.clone());
        tokio::spawn(async move { read(&s, &p, 512 << 10..516 << 10, None, None).await })
    };
    until("the GET at the gate", || seen.gets() >= 2).await;
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    seen.gated.store(false, Ordering::SeqCst);
    seen.gate.add_permits(1 << 16);
    let got = held.await.unwrap().unwrap();
    assert_eq!(&got[..], &d[512 << 10..516 << 10]);

    let again = read(&s, &p, 0..4096, None, None).await.unwrap();
    assert_eq!(&again[..], &d[..4096]);
    assert_eq!(seen.heads(), 0, "{:?}", s.stats());
    assert_eq!(s.stats().stale_versions, 0);
}

/// No time-to-live: the object's prefetch (a first read marked
/// sequential) holds its GETs at the gate while another writer replaces
/// the object. Let through, they find the version gone: what was cached
/// of it goes, as a HEAD that found the new version would drop it. A
/// caller naming the old version by `If-Match` gets `Precondition`, where
/// it got the old bytes from memory while nothing had seen the change; a
/// plain read gets the new version's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_finds_the_version_replaced_drops_it() {
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let cache = foliocache::Cache::builder()
        .capacity(64 << 20)
        .build()
        .unwrap();
    let s = CachedStore::builder(inner, cache).build();
    let (p, old, new) = (Path::from("gone"), data(16 << 20, 2), data(16 << 20, 3));
    let e1 = put_outside(&s, &p, old.clone()).await;
    seen.gated.store(true, Ordering::SeqCst);
    seen.gate.add_permits(1);
    let first = 0..16u64 << 10;
    let got = read(
        &s,
        &p,
        first.clone(),
        Some(&e1),
        Some(CacheHint::Sequential),
    )
    .await;
    assert_eq!(&got.unwrap()[..], &old[..16 << 10]);
    until("the prefetch's GETs at the gate", || seen.gets() >= 2).await;
    // Before any GET sees the change, the cached bytes are the old
    // version's, as they were.
    let cached = read(&s, &p, first.clone(), Some(&e1), None).await;
    assert_eq!(&cached.unwrap()[..], &old[..16 << 10]);

    put_outside(&s, &p, new.clone()).await;
    seen.gated.store(false, Ordering::SeqCst);
    seen.gate.add_permits(1 << 16);
    until("a prefetch GET failed", || s.stats().remote_get_errors >= 1).await;
    let named = read(&s, &p, first.clone(), Some(&e1), None).await;
    expect_precondition(named);
    let plain = read(&s, &p, first.clone(), None, None).await.unwrap();
    assert_eq!(&plain[..], &new[..16 << 10]);
    // The first read found the old version by its GET; the named read,
    // its version gone, the new one by a HEAD.
    assert_eq!(seen.heads(), 1, "{:?}", s.stats());
    assert!(s.stats().stale_versions >= 1, "{:?}", s.stats());
}

/// A caller naming a version by `If-Match`, the object replaced by
/// another writer, a time-to-live that does not run out in the test: the
/// bytes cached are still served (nothing has seen the change); the first
/// GET (a range not cached) finds the version gone, and from then on the
/// caller gets `Precondition` for every range, cached or not, and a plain
/// read the new version. The same as with revalidation by HEADs alone.
#[tokio::test]
async fn a_caller_naming_the_old_version_gets_precondition_once_a_get_sees_the_change() {
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let s = CachedStore::builder(inner, TestCache::bytes(16 << 20).build())
        .revalidate_after(Duration::from_secs(3600))
        .build();
    let (p, old, new) = (Path::from("named"), data(1 << 20, 4), data(1 << 20, 5));
    let e1 = put_outside(&s, &p, old.clone()).await;
    let cached = 0..64u64 << 10;
    let got = read(&s, &p, cached.clone(), Some(&e1), None).await;
    assert_eq!(&got.unwrap()[..], &old[..64 << 10]);
    put_outside(&s, &p, new.clone()).await;

    let got = read(&s, &p, cached.clone(), Some(&e1), None).await;
    assert_eq!(&got.unwrap()[..], &old[..64 << 10], "served from memory");
    let gets = seen.gets();
    let far = read(&s, &p, 900 << 10..904 << 10, Some(&e1), None).await;
    expect_precondition(far);
    assert!(seen.gets() > gets, "a GET saw the change");
    let near = read(&s, &p, cached.clone(), Some(&e1), None).await;
    expect_precondition(near);
    let plain = read(&s, &p, cached.clone(), None, None).await.unwrap();
    assert_eq!(&plain[..], &new[..64 << 10]);
}
