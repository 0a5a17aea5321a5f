//! The store over `LocalFileSystem`: real files, whose e_tags come from
//! their inode, size and modification time, changed behind its back.

use std::time::Duration;

use foliocache_object_store::CachedStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::data;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_file_changed_outside_serves_its_new_bytes() {
    let dir = test_support::target_tmpdir().join(format!("objstore-local-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inner = LocalFileSystem::new_with_prefix(&dir).unwrap();
    let s = CachedStore::new(inner, TestCache::bytes(4 << 20).build());
    let p = Path::from("tables/part-0.parquet");
    let old = data(1 << 20, 40);
    s.put(&p, old.clone().into()).await.unwrap();
    let got = s.get_range(&p, 4096..20_000).await.unwrap();
    assert_eq!(&got[..], &old[4096..20_000]);
    let gets = s.stats().remote_gets;
    let got = s.get_range(&p, 4096..20_000).await.unwrap();
    assert_eq!(&got[..], &old[4096..20_000]);
    assert_eq!(s.stats().remote_gets, gets, "the second read from memory");

    // Rewritten in place, same size, by another program.
    std::thread::sleep(Duration::from_millis(20));
    let new = data(1 << 20, 41);
    std::fs::write(dir.join("tables/part-0.parquet"), &new).unwrap();
    let got = s.get_range(&p, 600_000..700_000).await.unwrap();
    assert_eq!(&got[..], &new[600_000..700_000]);
    assert_eq!(s.stats().stale_versions, 1);
    let all = s.get(&p).await.unwrap().bytes().await.unwrap();
    assert_eq!(&all[..], &new[..]);
    std::fs::remove_dir_all(&dir).unwrap();
}
