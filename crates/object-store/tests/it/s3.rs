//! Through a real S3-protocol server on loopback: object_store's S3
//! client, its HTTP path, ranged GETs and e_tags. Needs the `e2e-s3`
//! feature and a server: `MOTO_SERVER`, the path of moto's `moto_server`
//! (what the test command installs, from PyPI: it honours `If-Match`, so a
//! changed object is refused by the store), or `S3S_FS`, the path of an
//! `s3s-fs` binary (`cargo install s3s-fs@0.14.1 --locked --features
//! binary`; its GetObject ignores `If-Match`, so a changed object is found
//! by its answer's e_tag).

use foliocache_object_store::CachedStore;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;
use test_support::s3::{server_named, start};

use crate::data;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_s3_on_loopback() {
    let Some((kind, bin)) = server_named() else {
        test_support::skip_or_fail(
            "reads_through_s3_on_loopback",
            "neither MOTO_SERVER nor S3S_FS names an S3 server",
        );
        return;
    };
    let root = test_support::target_tmpdir().join(format!("objstore-s3-{}", std::process::id()));
    let (_server, port) = start(kind, &bin, &root);
    let s3 = AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_bucket_name("bucket")
        .with_region("us-east-1")
        .with_access_key_id("AK")
        .with_secret_access_key("SK")
        .build()
        .unwrap();
    let s = CachedStore::new(s3, TestCache::bytes(4 << 20).build());
    let p = Path::from("db/000001.sst");
    let old = data(300_000, 70);
    s.put(&p, old.clone().into()).await.unwrap();

    for _ in 0..2 {
        let got = s.get_range(&p, 70_000..90_000).await.unwrap();
        assert_eq!(&got[..], &old[70_000..90_000]);
    }
    assert_eq!(s.stats().remote_gets, 1, "{:?}", s.stats());
    let all = s.get(&p).await.unwrap().bytes().await.unwrap();
    assert_eq!(&all[..], &old[..]);

    // Replaced behind the cache's back: refused by the store's `If-Match`
    // (moto) or found by the answer's e_tag (s3s-fs).
    let new = data(300_000, 71);
    s.inner().put(&p, new.clone().into()).await.unwrap();
    s.cache().shrink(u64::MAX);
    let got = s.get_range(&p, 200_000..210_000).await.unwrap();
    assert_eq!(&got[..], &new[200_000..210_000]);
    assert_eq!(s.stats().stale_versions, 1);

    s.delete(&p).await.unwrap();
    assert!(matches!(
        s.get_range(&p, 0..10).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let _ = std::fs::remove_dir_all(&root);
}
