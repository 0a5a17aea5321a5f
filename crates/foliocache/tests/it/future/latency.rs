//! The async reads' misses in the cache's `miss_latency` histogram
//! (`CacheStats::miss_latency`, the metric
//! `foliocache_miss_latency_seconds`), as the blocking reads' are: one
//! wait recorded per read that started IO, none for a hit.

use super::{drive, test_cache, P};
use crate::common::nonzero_bytes;
use test_support::cache::faulty_file;

#[test]
fn async_misses_count_in_the_miss_latency_histogram() {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let c = test_cache(64).no_readahead().build();
    let data = nonzero_bytes(32 * P as usize, 31);
    let (f, b) = faulty_file(&c, &data);
    // Long enough that every read below waits for its IO.
    b.set_read_latency(std::time::Duration::from_millis(2));
    let before = c.stats();
    let mut buf = vec![0u8; 100];
    // Reads at pages apart (no readahead: each reads its own page).
    for (i, page) in [0u64, 3, 6].into_iter().enumerate() {
        let (r, pending) = drive(f.read_at_async(&mut buf, page * P + 7));
        assert_eq!(r.unwrap(), 100);
        assert!(pending > 0, "read {i} missed and waited");
        assert_eq!(&buf[..], &data[(page * P) as usize + 7..][..100]);
    }
    let (r, _) = drive(f.read_exact_at_async(&mut buf, 9 * P));
    r.unwrap();
    let (p, _) = drive(f.pin_async(12 * P + 1, 50));
    assert_eq!(&p.unwrap()[..], &data[12 * P as usize + 1..][..50]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cur = f.cursor(15 * P);
        cur.read_exact(&mut buf).await.unwrap();
        let mut owned = f.clone().into_async();
        owned.seek(std::io::SeekFrom::Start(18 * P)).await.unwrap();
        owned.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf[..], &data[18 * P as usize..][..100]);
    });
    let missed = c.stats();
    assert_eq!(missed.misses - before.misses, 7, "{missed:?}");
    assert_eq!(
        missed.miss_latency.count - before.miss_latency.count,
        7,
        "one wait a read that missed: {:?}",
        missed.miss_latency
    );
    // At least the backing's latency, each.
    assert!(
        missed.miss_latency.sum - before.miss_latency.sum >= std::time::Duration::from_millis(14)
    );
    // Hits record nothing.
    let (r, pending) = drive(f.read_at_async(&mut buf, 7));
    assert_eq!((r.unwrap(), pending), (100, 0));
    rt.block_on(f.cursor(3 * P).read_exact(&mut buf)).unwrap();
    let hit = c.stats();
    assert_eq!(hit.misses, missed.misses);
    assert_eq!(hit.miss_latency.count, missed.miss_latency.count);
}
