//! SlateDB 0.18 over `CachedStore` and over its own `CachedObjectStore`:
//! every get and every scanned entry through both is the value written
//! (the job checks each and fails on a wrong one), and both read from
//! the remote through their caches.

use std::time::Duration;

use foliocache_slatedb_client::job::Job;

/// About 4 MiB of values, at 1 ms a request: seconds, not minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gets_and_a_scan_through_both_caches_read_what_was_written() {
    let dir = std::env::temp_dir().join(format!("slatedb-client-{}", std::process::id()));
    let mut j = Job::new(4 << 20, dir.clone());
    j.memory = 1 << 20;
    j.latency = Duration::from_millis(1);
    j.rounds = 2;
    j.gets = 400;
    let r = j.run(&|_| {}).await;
    let _ = std::fs::remove_dir_all(&dir);
    let r = r.unwrap();
    assert_eq!(r.keys, 4096);
    assert!(r.size >= 4 << 20, "the SSTs hold the values: {}", r.size);
    for f in [&r.parts, &r.folio] {
        assert_eq!(f.gets.len(), 800, "measured gets");
        assert_eq!(f.scans.len(), 2, "a scan a round");
        assert!(f.quantile(0.99) >= f.quantile(0.5));
    }
    // The block cache (1 MiB) holds a quarter of the data: the measured
    // gets of either cache missed it and read through the cache's store.
    assert!(r.parts.remote_bytes + r.folio.remote_bytes > 0);
}
