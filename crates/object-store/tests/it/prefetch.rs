//! A stream's prefetch: a sequential reader of a large object has several
//! window GETs in flight ahead of it at once, not one window after
//! another (one GET at a time cannot fill a link whose latency times its
//! bandwidth is more than a window).

use std::sync::atomic::Ordering;
use std::time::Duration;

use backing::aio::IoEngineConfig;
use foliocache_object_store::CachedStore;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::counting::Counting;
use crate::data;

/// 16 MiB of an object read in 256 KiB pieces, from the start, while its
/// GETs wait at a gate that lets one through every 10 ms: the GETs that
/// wait there together are the GETs in flight. The prefetch's windows
/// (8 MiB first: four of 2 MiB, on a cache whose IO engine has 8 threads)
/// wait together; readahead alone sends one window at a time beside the
/// reader's own miss (two at most). Every read has its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_reader_keeps_several_gets_in_flight() {
    let inner = Counting::new();
    let (p, d) = (Path::from("big"), data(32 << 20, 5));
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let mut io = IoEngineConfig::new();
    io.threads = 8;
    let cache = foliocache::Cache::builder()
        .capacity(128 << 20)
        .io_engine(io)
        .build()
        .unwrap();
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
        inner.seen.gate.add_permits(1);
    }
    reader.await.unwrap();
    // What the prefetch still has in flight goes through.
    inner.seen.gate.add_permits(1 << 16);
    let most = inner.seen.max_active.load(Ordering::SeqCst);
    assert!(most >= 4, "GETs in flight at once: {most}");
}
