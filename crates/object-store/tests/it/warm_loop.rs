//! A loop of point queries whose fetched bytes are about the cache's
//! size: a query's span reads again from memory once the loop has gone
//! round, as the bench's Parquet lookups (issue 87).

use std::ops::Range;

use foliocache_object_store::CachedStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;

/// The Parquet lookups' geometry (the bench's `parquet` job, divided by
/// [`SCALE`]): a file of 32 row groups; a lookup reads its footer and
/// metadata, then two column chunks of one row group less than
/// `OBJECT_STORE_COALESCE_DEFAULT` apart, which the store fetches as one
/// span with the chunk between. Eight lookups' spans fill the cache of a
/// quarter of the file to within a few pages.
const FILE: u64 = 263_311_912 / SCALE;
const SCALE: u64 = 1;
const IDS: Range<u64> = 4..4 + 674_988 / SCALE;
const PAYLOAD: Range<u64> = 1_442_796 / SCALE..(1_442_796 + 6_783_668) / SCALE;
const METADATA: u64 = 19_985;

/// Eight lookups through a memory-only cache of a quarter of the file:
/// the first pass fetches every span; after one more pass (whose misses
/// settle which pages stay) a pass sends no GET. Each window of a miss
/// once took memory for its uncached slots before it looked again at
/// the cached ones, so the pages its allocation reclaimed there (the
/// oldest: the span's own) were left holes for the next miss, whose
/// window reclaimed the next span's pages in turn: every lookup missed
/// every pass, four GETs each.
#[tokio::test]
async fn a_loop_of_lookups_that_fits_is_read_from_memory() {
    let inner = Counting::new();
    let seen = inner.seen.clone();
    let p = Path::from("t/table.parquet");
    // One copy of the file's bytes, shared with the remote's.
    let d = bytes::Bytes::from(data(FILE as usize, 87));
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let s = CachedStore::new(inner, TestCache::bytes(FILE as usize / 4).build());
    let group = FILE / 32;
    let lookups: Vec<[Range<u64>; 2]> = (0..8u64)
        .map(|i| {
            let at = (i * 7919) % 32 * group;
            [
                at + IDS.start..at + IDS.end,
                at + PAYLOAD.start..at + PAYLOAD.end,
            ]
        })
        .collect();
    let mut gets = Vec::new();
    for _ in 0..5 {
        let before = seen.gets();
        for ranges in &lookups {
            for r in [FILE - 8..FILE, FILE - 8 - METADATA..FILE - 8] {
                let got = s.get_range(&p, r.clone()).await.unwrap();
                assert_eq!(&got[..], &d[r.start as usize..r.end as usize]);
            }
            let got = s.get_ranges(&p, ranges).await.unwrap();
            for (g, r) in got.iter().zip(ranges) {
                assert_eq!(&g[..], &d[r.start as usize..r.end as usize]);
            }
        }
        gets.push(seen.gets() - before);
    }
    assert!(gets[0] >= 8, "the first pass fetches the spans: {gets:?}");
    assert_eq!(gets[2..], [0, 0, 0], "GETs a pass: {gets:?}");
}
