//! arrow-rs `parquet`'s `ParquetObjectReader` over `CachedStore`: a file
//! of many row groups, a projection of two columns with a filter and
//! point lookups by row group, each answer the same as the local file's
//! (and the row count the table's definition gives), with the cache at a
//! quarter of the file, with its disk tier, and large enough to hold it.

use std::sync::Arc;
use std::time::Duration;

use foliocache_object_store::{CachedStore, DiskTier, Throttled};
use foliocache_object_store_clients::table::{rows, run, Query};
use foliocache_object_store_clients::{Asked, Table};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStore;
use test_support::cache::TestCache;

/// About 8 MiB in 32 row groups.
const FILE: u64 = 8 << 20;
const GROUPS: u64 = 32;

/// The queries: two filters, then lookups in row groups spread over the
/// file (the first, one in the middle, the last), two of them again.
fn queries(t: &Table) -> Vec<Query> {
    let last = (t.groups() - 1) as usize;
    let mut q = vec![Query::Filter { below: 100 }, Query::Filter { below: 7 }];
    for group in [0, last / 2, last, 3, last / 2] {
        q.push(Query::Lookup {
            group,
            skip: 1000,
            take: 16,
        });
    }
    q
}

/// A directory of its own under the target directory.
fn dir(name: &str) -> std::path::PathBuf {
    let d = test_support::target_tmpdir().join(format!("clients-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs every query through `store` and through the local file: the same
/// batches, of the rows the table defines. Returns what the reader asked
/// the store for (bytes).
async fn same_as_local(
    store: Arc<dyn ObjectStore>,
    local: &Arc<dyn ObjectStore>,
    t: &Table,
    size: u64,
) -> u64 {
    let path = Path::from("table.parquet");
    let asked = Arc::new(Asked::new(store));
    for q in queries(t) {
        let want = run(local.clone(), &path, size, q).await.unwrap();
        let got = run(asked.clone(), &path, size, q).await.unwrap();
        assert_eq!(rows(&want), t.rows_of(q), "{q:?}: the local file's rows");
        assert!(got == want, "{q:?}: not the local file's answer");
    }
    asked.asked().1
}

/// The store a test reads: the file's directory behind a store of 5 ms a
/// request and 90 MB/s a GET, cached in `memory` bytes (and a disk tier
/// of `tier` bytes, 0 for none).
fn cached(d: &std::path::Path, memory: usize, tier: u64) -> Arc<CachedStore<Throttled>> {
    let remote = Throttled::new(
        LocalFileSystem::new_with_prefix(d).unwrap(),
        Duration::from_millis(5),
        90_000_000,
    );
    let mut b = CachedStore::builder(remote, TestCache::bytes(memory).build());
    if tier > 0 {
        let t = DiskTier::open(d.join("tier"), tier).unwrap();
        b = b.disk_tier(Arc::new(t));
    }
    Arc::new(b.build())
}

/// With the cache at a quarter of the file, in memory alone and with a
/// disk tier of the file's size, every answer is the local file's, twice
/// over (the second pass from what the first left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_queries_through_a_quarter_cache_are_the_local_files() {
    let d = dir("parquet-quarter");
    let t = Table::of_size(FILE, GROUPS);
    let size = t.write(&d.join("table.parquet")).unwrap();
    assert_eq!(t.groups(), GROUPS);
    let local: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&d).unwrap());
    for tier in [0, size.next_power_of_two()] {
        let s = cached(&d, (size / 4) as usize, tier);
        for _ in 0..2 {
            same_as_local(s.clone(), &local, &t, size).await;
        }
        assert!(s.stats().remote_gets > 0);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// With room for the whole file, the second pass of every query is read
/// from memory: not one GET, nor one HEAD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_pass_of_parquet_queries_sends_no_request() {
    let d = dir("parquet-warm");
    let t = Table::of_size(FILE, GROUPS);
    let size = t.write(&d.join("table.parquet")).unwrap();
    let local: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&d).unwrap());
    let s = cached(&d, (4 * size) as usize, 0);
    let asked = same_as_local(s.clone(), &local, &t, size).await;
    let first = s.stats();
    assert!(first.remote_gets > 0 && asked > 0);
    same_as_local(s.clone(), &local, &t, size).await;
    let second = s.stats();
    assert_eq!(
        second.remote_gets, first.remote_gets,
        "GETs of the second pass"
    );
    assert_eq!(
        second.remote_heads, first.remote_heads,
        "HEADs of the second pass"
    );
    assert_eq!(second.misses, first.misses, "misses of the second pass");
    std::fs::remove_dir_all(&d).unwrap();
}
