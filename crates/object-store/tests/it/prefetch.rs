//! A stream's prefetch: a sequential reader of a large object has several
//! window GETs in flight ahead of it at once, not one window after
//! another (one GET at a time cannot fill a link whose latency times its
//! bandwidth is more than a window); a first read marked sequential
//! starts it at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use backing::aio::IoEngineConfig;
use foliocache_object_store::{CacheHint, CachedStore};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::counting::Counting;
use crate::data;

/// 16 MiB of an object read in 256 KiB pieces, from the start, while its
/// GETs wait at a gate that lets one through every 10 ms (a permit is
/// never banked for a GET not yet there): the GETs that
/// wait there together are the GETs in flight. The prefetch's windows
/// (8 MiB first: four of 2 MiB, on a cache whose IO engine has 8 threads)
/// wait together; readahead alone sends one window at a time beside the
/// reader's own miss (two at most). Every read has its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_reader_keeps_several_gets_in_flight() {
    let inner = Counting::new();
    let (p, d) = (Path::from("big"), data(32 << 20, 5));
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let cache = threaded_cache(128 << 20, 8);
    let s = std::sync::Arc::new(CachedStore::builder(inner.clone(), cache).build());
    inner.seen.gated.store(true, Ordering::SeqCst);
    let reader = {
        let s = s.clone();
        tokio::spawn(async move {
            for at in (0..16usize << 20).step_by(256 << 10) {
                let r = at as u64..(at + (256 << 10)) as u64;
                let got = s.get_range(&p, r).await.unwrap();
                assert_eq!(&got[..], &d[at..at + (256 << 10)], "at {at}");
            }
        })
    };
    while !reader.is_finished() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        // One GET through at a time, the permits never banked: on a
        // loaded host GETs that come late would otherwise find permits
        // waiting and go through one by one, never together.
        if inner.seen.gate.available_permits() == 0 {
            inner.seen.gate.add_permits(1);
        }
    }
    reader.await.unwrap();
    // What the prefetch still has in flight goes through.
    inner.seen.gate.add_permits(1 << 16);
    let most = inner.seen.max_active.load(Ordering::SeqCst);
    assert!(most >= 4, "GETs in flight at once: {most}");
}

/// A cache of `capacity` bytes whose IO engine has `threads` threads
/// (the GETs a stream's prefetch can have in flight).
pub(crate) fn threaded_cache(capacity: usize, threads: usize) -> foliocache::Cache {
    let mut io = IoEngineConfig::new();
    io.threads = threads;
    foliocache::Cache::builder()
        .capacity(capacity)
        .io_engine(io)
        .build()
        .unwrap()
}

/// Waits (bounded: 30 s) until `s` has fetched at least `bytes`; its
/// bytes fetched then.
async fn fetched_at_least(s: &CachedStore<Counting>, bytes: u64) -> u64 {
    for _ in 0..3000 {
        let got = s.stats().remote_get_bytes;
        if got >= bytes {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.stats().remote_get_bytes
}

/// A first read marked `CacheHint::Sequential` (a file read from its
/// start) starts the object's prefetch once its bytes are in: the next
/// 8 MiB are fetched without another read. The same first read unmarked
/// fetches what it asked for and no more (a reader's first read is not
/// yet a stream's). Counted in bytes fetched, not timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_read_marked_sequential_starts_the_prefetch() {
    let mut stores = Vec::new();
    for _ in 0..2 {
        let inner = Counting::new();
        let p = Path::from("big");
        inner.inner.put(&p, data(32 << 20, 7).into()).await.unwrap();
        let cache = foliocache::Cache::builder()
            .capacity(128 << 20)
            .build()
            .unwrap();
        stores.push(CachedStore::builder(inner, cache).build());
    }
    let (plain, marked) = (&stores[0], &stores[1]);
    let first = 0..16u64 << 10;
    let get = |hint: Option<CacheHint>| {
        let mut o = GetOptions {
            range: Some(GetRange::Bounded(first.clone())),
            ..GetOptions::default()
        };
        if let Some(h) = hint {
            o.extensions.insert(h);
        }
        o
    };
    let p = Path::from("big");
    let a = plain
        .get_opts(&p, get(None))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let b = marked
        .get_opts(&p, get(Some(CacheHint::Sequential)))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let want = data(32 << 20, 7);
    assert_eq!((&a[..], &b[..]), (&want[..16 << 10], &want[..16 << 10]));
    let ahead = 16 << 10 | 8 << 20;
    let got = fetched_at_least(marked, ahead).await;
    assert!(got >= ahead, "marked: {got} bytes fetched, not {ahead}");
    assert_eq!(
        plain.stats().remote_get_bytes,
        16 << 10,
        "{:?}",
        plain.stats()
    );
    assert_eq!(plain.stats().remote_gets, 1);
}
