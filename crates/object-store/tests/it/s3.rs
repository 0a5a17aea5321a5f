//! Through a real S3-protocol server on loopback: object_store's S3
//! client, its HTTP path, ranged GETs and e_tags, against `s3s-fs` (whose
//! GetObject ignores `If-Match`, so a changed object is found by its
//! answer's e_tag). Needs the `e2e-s3` feature and `S3S_FS`, the path of
//! an `s3s-fs` binary (`cargo install s3s-fs@0.14.1 --locked --features
//! binary`).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use foliocache_object_store::CachedStore;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use test_support::cache::TestCache;

use crate::data;

/// The server, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `bin` on a free loopback port over `root` (holding the
/// directory of the bucket `bucket`); the port once it accepts.
fn start(bin: &std::ffi::OsStr, root: &std::path::Path) -> (Server, u16) {
    std::fs::create_dir_all(root.join("bucket")).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", "AK", "--secret-key", "SK"])
        .arg(root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting s3s-fs");
    let server = Server(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "s3s-fs did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_s3_on_loopback() {
    let Some(bin) = std::env::var_os("S3S_FS") else {
        test_support::skip_or_fail(
            "reads_through_s3_on_loopback",
            "S3S_FS does not name an s3s-fs binary",
        );
        return;
    };
    let root = test_support::target_tmpdir().join(format!("objstore-s3-{}", std::process::id()));
    let (_server, port) = start(&bin, &root);
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

    // Replaced behind the cache's back: found by the answer's e_tag.
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
