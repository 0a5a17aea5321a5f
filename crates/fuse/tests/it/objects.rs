//! The mount of an object store (`ObjectFs`): a local directory through
//! object_store's `LocalFileSystem` (`file://` URLs), mounted read-only in
//! this process and read through the kernel with `std::fs`: its tree, its
//! bytes from the cache, writes refused, a replaced object seen after the
//! time-to-live and an open file of the old version going stale.

use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use foliocache_fuse::{spawn_objects, MountOptions, ObjectFs, ObjectOptions};
use foliocache_object_store::CachedStore;
use fuser::BackgroundSession;
use object_store::ObjectStore;

use crate::mount::fuse_ok;

/// An `ObjectFs` mounted at a fresh directory.
pub(crate) struct Mounted {
    _tmp: tempfile::TempDir,
    /// The objects' directory (a `file://` store's).
    objects: PathBuf,
    mnt: PathBuf,
    store: Arc<CachedStore<Arc<dyn ObjectStore>>>,
    session: Option<BackgroundSession>,
}

impl Mounted {
    /// `files` (relative path, bytes) written under a fresh directory,
    /// which is then mounted with a time-to-live of `ttl`.
    fn new(files: &[(&str, Vec<u8>)], ttl: Duration) -> Mounted {
        Mounted::with(files, &options(ttl))
    }

    /// [`new`](Self::new) with `opts`.
    fn with(files: &[(&str, Vec<u8>)], opts: &ObjectOptions) -> Mounted {
        let tmp = tempfile::tempdir().expect("tempdir");
        let objects = tmp.path().join("objects");
        for (rel, data) in files {
            let p = objects.join(rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, data).expect("write object");
        }
        let url = format!("file://{}", objects.display());
        let fs = ObjectFs::for_url(&url, [], cache(), opts).expect("the tree");
        Mounted::serve(tmp, objects, fs, &url)
    }

    /// `fs` mounted at a directory under `tmp`.
    pub(crate) fn serve(
        tmp: tempfile::TempDir,
        objects: PathBuf,
        fs: ObjectFs,
        url: &str,
    ) -> Mounted {
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let store = fs.store().clone();
        let session = spawn_objects(fs, url, &mnt, &MountOptions::new(32 << 20)).expect("mount");
        Mounted {
            _tmp: tmp,
            objects,
            mnt,
            store,
            session: Some(session),
        }
    }

    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The control file's answer (`foliocache stat`'s JSON).
    fn control(&self) -> serde_json::Value {
        let answer = fs::read_to_string(self.p(foliocache_fuse::CONTROL_NAME)).expect("control");
        serde_json::from_str(&answer).expect("json")
    }

    /// The read requests the server has had for objects' bytes.
    fn read_requests(&self) -> u64 {
        self.requests("read_requests")
    }

    /// The server's count `name` of the control file's `object_store`.
    fn requests(&self, name: &str) -> u64 {
        let v = self.control();
        v["object_store"][name].as_u64().expect(name)
    }
}

/// The mount's cache.
pub(crate) fn cache() -> foliocache::Cache {
    foliocache::Cache::builder()
        .capacity(32 << 20)
        .build()
        .expect("cache")
}

/// The default options with a time-to-live of `ttl`.
pub(crate) fn options(ttl: Duration) -> ObjectOptions {
    let mut opts = ObjectOptions::default();
    opts.ttl = ttl;
    opts
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// The bytes of a test object: its name's tag, then a counter.
fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| tag ^ (i as u8) ^ ((i >> 8) as u8))
        .collect()
}

/// The sorted names in directory `p`.
fn names(p: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(p)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", p.display()))
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    n.sort();
    n
}

#[test]
fn an_object_store_is_a_read_only_tree_served_from_the_cache() {
    if !fuse_ok("an_object_store_is_a_read_only_tree_served_from_the_cache") {
        return;
    }
    let big = pattern(1, (3 << 20) + 123);
    let m = Mounted::new(
        &[
            ("big.bin", big.clone()),
            ("dir/b.txt", b"hello".to_vec()),
            ("dir/sub/c", pattern(2, 70_000)),
            (foliocache_fuse::CONTROL_NAME, b"hidden".to_vec()),
        ],
        Duration::from_secs(60),
    );
    // The control file hides an object of its name at the root.
    assert_eq!(names(&m.mnt), ["big.bin", "dir"]);
    assert_eq!(names(&m.p("dir")), ["b.txt", "sub"]);
    assert!(m.p("dir").is_dir() && m.p("dir/sub").is_dir());
    assert_eq!(
        fs::metadata(m.p("big.bin")).expect("stat").len(),
        big.len() as u64
    );
    assert_eq!(fs::read(m.p("dir/b.txt")).expect("read"), b"hello");
    assert_eq!(
        fs::read(m.p("dir/sub/c")).expect("read"),
        pattern(2, 70_000)
    );
    let e = fs::metadata(m.p("dir/missing")).expect_err("no such object");
    assert_eq!(e.kind(), ErrorKind::NotFound);

    // Whole, then at odd offsets: every byte the object's.
    assert!(
        fs::read(m.p("big.bin")).expect("read") == big,
        "big.bin's bytes"
    );
    let f = fs::File::open(m.p("big.bin")).expect("open");
    for (off, len) in [(0, 1), (4095, 2), (1 << 20, 70_000), (big.len() - 10, 100)] {
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, off as u64).expect("pread");
        let want = &big[off..(off + len).min(big.len())];
        assert_eq!(&buf[..n], want, "{len} bytes at {off}");
    }

    // A second pass is the caches': no GET more (the kernel's pages, or
    // the cache's where the kernel let some go).
    let before = m.store.stats();
    let mut again = Vec::new();
    fs::File::open(m.p("big.bin"))
        .expect("open")
        .read_to_end(&mut again)
        .expect("read");
    assert!(again == big);
    let after = m.store.stats();
    assert_eq!(
        after.remote_gets, before.remote_gets,
        "{before:?} -> {after:?}"
    );

    // The control file (`foliocache stat`): the cache's figures and the
    // store's, read without a request.
    let answer = fs::read_to_string(m.p(foliocache_fuse::CONTROL_NAME)).expect("control");
    let v: serde_json::Value = serde_json::from_str(&answer).expect("json");
    let o = &v["object_store"];
    assert!(
        o["url"].as_str().is_some_and(|u| u.starts_with("file://")),
        "{v}"
    );
    assert_eq!(o["remote_gets"].as_u64(), Some(after.remote_gets), "{v}");
    // (Its hits depend on what the kernel kept of the first read: a
    // second read the kernel's pages serve never reaches the mount.)
    assert!(
        v["cache"]["read_bytes"].as_u64() >= Some(big.len() as u64),
        "{v}"
    );

    // Read-only, every way.
    let refused = [
        fs::OpenOptions::new()
            .write(true)
            .open(m.p("big.bin"))
            .map(drop),
        fs::write(m.p("new"), b"x"),
        fs::create_dir(m.p("newdir")),
        fs::remove_file(m.p("dir/b.txt")),
        fs::rename(m.p("dir/b.txt"), m.p("dir/b2.txt")),
    ];
    for r in refused {
        let e = r.expect_err("a write on a read-only mount");
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    }
    assert_eq!(
        fs::read(m.objects.join("dir/b.txt")).expect("object"),
        b"hello"
    );
}

#[test]
fn a_replaced_object_is_seen_after_the_ttl_and_an_open_file_of_the_old_one_goes_stale() {
    if !fuse_ok(
        "a_replaced_object_is_seen_after_the_ttl_and_an_open_file_of_the_old_one_goes_stale",
    ) {
        return;
    }
    let ttl = Duration::from_millis(300);
    // Every read a request (no kernel cache): the old file's next read
    // reaches the store.
    let mut opts = options(ttl);
    opts.kernel_cache = false;
    let m = Mounted::with(&[("obj", pattern(3, 100_000))], &opts);
    let old = fs::File::open(m.p("obj")).expect("open");
    let mut buf = vec![0u8; 4096];
    old.read_at(&mut buf, 0).expect("read");
    assert_eq!(buf, pattern(3, 4096));

    // Replaced behind the mount (a new inode: a new e_tag), and a new
    // object beside it.
    let tmp = m.objects.join(".obj.new");
    fs::write(&tmp, pattern(4, 50_000)).expect("write");
    fs::rename(&tmp, m.objects.join("obj")).expect("rename");
    fs::write(m.objects.join("added"), b"new").expect("write");

    std::thread::sleep(ttl + Duration::from_millis(200));
    assert_eq!(names(&m.mnt), ["added", "obj"]);
    assert_eq!(
        fs::read(m.p("obj")).expect("read the new version"),
        pattern(4, 50_000)
    );
    assert_eq!(fs::read(m.p("added")).expect("read"), b"new");
    // The open file was the old version: it never reads the new bytes.
    let e = old
        .read_at(&mut buf, 8192)
        .expect_err("the old version is gone");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
}

#[test]
fn a_directory_of_many_objects_is_listed_whole_across_replies() {
    if !fuse_ok("a_directory_of_many_objects_is_listed_whole_across_replies") {
        return;
    }
    let files: Vec<(String, Vec<u8>)> = (0..600)
        .map(|i| (format!("many/object-{i:04}"), vec![i as u8; 1 + i % 9]))
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    let m = Mounted::new(&refs, Duration::from_secs(60));
    // Looked up first: some entries the kernel knows, the rest not.
    assert_eq!(
        fs::read(m.p("many/object-0007")).expect("read"),
        vec![7u8; 8]
    );
    let listed = names(&m.p("many"));
    let want: Vec<String> = (0..600).map(|i| format!("object-{i:04}")).collect();
    assert_eq!(listed, want);
}

#[test]
fn a_url_that_names_no_store_is_refused() {
    let cache = || {
        foliocache::Cache::builder()
            .capacity(4 << 20)
            .build()
            .expect("cache")
    };
    let opts = ObjectOptions::default();
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("f");
    fs::write(&file, b"x").expect("write");
    for (url, says) in [
        ("not a url".to_string(), "not a URL"),
        (
            format!("file://{}", tmp.path().join("missing").display()),
            "not a directory",
        ),
        (format!("file://{}", file.display()), "not a directory"),
        ("gopher://x/y".to_string(), "gopher"),
        ("memory:///".to_string(), "nothing to mount"),
    ] {
        let e = ObjectFs::for_url(&url, [], cache(), &opts)
            .err()
            .expect("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}: {e}");
        assert!(e.to_string().contains(says), "{url}: {e}");
    }
}

#[test]
fn a_warm_reread_is_the_kernels_until_the_object_changes() {
    if !fuse_ok("a_warm_reread_is_the_kernels_until_the_object_changes") {
        return;
    }
    let ttl = Duration::from_millis(300);
    let first = pattern(7, (2 << 20) + 4321);
    let m = Mounted::new(&[("obj", first.clone())], ttl);
    assert!(fs::read(m.p("obj")).expect("read") == first);
    let before = m.read_requests();
    assert!(before > 0);
    // Closed, opened again, read whole and at odd offsets: the kernel's
    // pages, not one request to the server.
    for _ in 0..2 {
        let f = fs::File::open(m.p("obj")).expect("open");
        let mut again = Vec::new();
        (&f).read_to_end(&mut again).expect("read");
        assert!(again == first);
        let mut buf = vec![0u8; 5000];
        f.read_exact_at(&mut buf, 1_000_003).expect("pread");
        assert_eq!(buf, first[1_000_003..1_005_003]);
    }
    assert_eq!(m.read_requests(), before);
    let v = m.control();
    assert_eq!(v["object_store"]["kernel_cache"], true, "{v}");

    // Replaced in the store: once the time-to-live has passed, a new open
    // reads the new bytes (a new node, no page of the old); a file open
    // on the old version reads the old bytes or fails, never the new.
    let old = fs::File::open(m.p("obj")).expect("open");
    let second = pattern(8, 3 << 20);
    let tmp = m.objects.join(".obj.new");
    fs::write(&tmp, &second).expect("write");
    fs::rename(&tmp, m.objects.join("obj")).expect("rename");
    std::thread::sleep(ttl + Duration::from_millis(200));
    assert!(
        fs::read(m.p("obj")).expect("read the new version") == second,
        "the new version's bytes"
    );
    assert!(m.read_requests() > before);
    let mut buf = vec![0u8; 4096];
    match old.read_at(&mut buf, 8192) {
        Ok(n) => assert_eq!(&buf[..n], &first[8192..8192 + n]),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}"),
    }
}

#[test]
fn a_nodes_attributes_cost_no_request_while_its_name_is_looked_up_again() {
    if !fuse_ok("a_nodes_attributes_cost_no_request_while_its_name_is_looked_up_again") {
        return;
    }
    // No time-to-live: every lookup of a name asks the store.
    let data = pattern(3, 10_000);
    let m = Mounted::new(&[("obj", data.clone())], Duration::ZERO);
    let f = fs::File::open(m.p("obj")).expect("open");
    assert_eq!(f.metadata().expect("fstat").len(), 10_000);
    let (getattrs, lookups) = (
        m.requests("getattr_requests"),
        m.requests("lookup_requests"),
    );
    // The open file's attributes are its node's, one version's: kept by
    // the kernel, not asked again.
    for _ in 0..5 {
        assert_eq!(f.metadata().expect("fstat").len(), 10_000);
        let mut buf = vec![0u8; 100];
        f.read_exact_at(&mut buf, 9_900).expect("pread at the end");
        assert_eq!(buf, data[9_900..]);
    }
    assert_eq!(m.requests("getattr_requests"), getattrs);
    // The name is looked up again each time (a new version would be a
    // new node).
    for _ in 0..3 {
        assert_eq!(fs::metadata(m.p("obj")).expect("stat").len(), 10_000);
    }
    assert!(m.requests("lookup_requests") >= lookups + 3);
    assert_eq!(m.requests("getattr_requests"), getattrs);
}

/// A name found by a listing (`ls`, then `stat`: no request of its own),
/// then opened and read: the read sends its GET at once, no HEAD first
/// (the mount tells the cache the version its node is), so the first byte
/// costs one round trip to the store, not two; the bytes are the
/// object's.
#[test]
fn the_first_read_of_a_listed_object_sends_a_get_and_no_head() {
    if !fuse_ok("the_first_read_of_a_listed_object_sends_a_get_and_no_head") {
        return;
    }
    let data = pattern(9, 100_000);
    let m = Mounted::new(&[("listed", data.clone())], Duration::from_secs(60));
    assert_eq!(names(&m.mnt), ["listed"]);
    assert_eq!(fs::metadata(m.p("listed")).expect("stat").len(), 100_000);
    let before = m.store.stats();
    let f = fs::File::open(m.p("listed")).expect("open");
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, 0).expect("pread");
    assert_eq!(buf, data[..4096]);
    let after = m.store.stats();
    assert_eq!(after.remote_heads, before.remote_heads, "{after:?}");
    assert!(after.remote_gets > before.remote_gets, "{after:?}");
}

/// A file read from its start is a stream's from its first read: after
/// one 4 KiB read at offset 0 the mount's store fetches the next 8 MiB on
/// its own (the prefetch), where a first read elsewhere in a file fetches
/// what the kernel asked for. Counted in bytes fetched (a bounded wait
/// for the prefetch), not timed.
#[test]
fn a_read_from_a_files_start_starts_its_prefetch() {
    if !fuse_ok("a_read_from_a_files_start_starts_its_prefetch") {
        return;
    }
    let (a, b) = (pattern(3, 16 << 20), pattern(4, 16 << 20));
    let m = Mounted::new(
        &[("a", a.clone()), ("b", b.clone())],
        Duration::from_secs(60),
    );
    let mut buf = vec![0u8; 4096];
    let at = 8u64 << 20;
    fs::File::open(m.p("b"))
        .and_then(|f| f.read_exact_at(&mut buf, at))
        .expect("pread of b");
    assert_eq!(buf, b[at as usize..at as usize + 4096]);
    let elsewhere = m.store.stats().remote_get_bytes;
    assert!(
        elsewhere <= 1 << 20,
        "a first read mid-file fetched {elsewhere} bytes"
    );
    fs::File::open(m.p("a"))
        .and_then(|f| f.read_exact_at(&mut buf, 0))
        .expect("pread of a");
    assert_eq!(buf, a[..4096]);
    let ahead = elsewhere + (8 << 20);
    let mut got = 0;
    for _ in 0..3000 {
        got = m.store.stats().remote_get_bytes;
        if got >= ahead {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(got >= ahead, "{got} bytes fetched, not {ahead}");
}

#[test]
fn names_that_are_not_file_names_are_skipped_not_the_directory() {
    if !fuse_ok("names_that_are_not_file_names_are_skipped_not_the_directory") {
        return;
    }
    let m = Mounted::new(
        &[
            ("d/good", b"g".to_vec()),
            ("d/bad\u{1}name", b"b".to_vec()),
            ("d/sub/x", b"x".to_vec()),
            // LocalFileSystem's own upload in progress: not an object.
            ("d/a#1", b"h".to_vec()),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(names(&m.p("d")), ["good", "sub"]);
    assert_eq!(fs::read(m.p("d/good")).expect("read"), b"g");
    assert_eq!(fs::read(m.p("d/sub/x")).expect("read"), b"x");
    let v = m.control();
    assert_eq!(v["object_store"]["names_skipped"].as_u64(), Some(1), "{v}");
}

/// The mount of a bucket through object_store's S3 client, against an
/// S3-protocol server on loopback (`test_support::s3`).
mod s3 {
    use super::*;
    use foliocache_fuse::store_for_url;
    use object_store::path::Path as Key;
    use object_store::ObjectStoreExt;
    use test_support::s3::{server_named, start};

    #[test]
    fn a_bucket_mounted_through_s3_on_loopback() {
        let test = "a_bucket_mounted_through_s3_on_loopback";
        if !fuse_ok(test) {
            return;
        }
        let Some((kind, bin)) = server_named() else {
            test_support::skip_or_fail(test, "neither MOTO_SERVER nor S3S_FS names an S3 server");
            return;
        };
        let tmp = tempfile::tempdir().expect("tempdir");
        let (_server, port) = start(kind, &bin, tmp.path());
        let config = move || {
            [
                ("aws_endpoint", format!("http://127.0.0.1:{port}")),
                ("aws_allow_http", "true".into()),
                ("aws_region", "us-east-1".into()),
                ("aws_access_key_id", "AK".into()),
                ("aws_secret_access_key", "SK".into()),
            ]
            .map(|(k, v)| (k.to_string(), v))
        };
        let (client, _) = store_for_url("s3://bucket", config()).expect("the client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let put = |key: &str, data: Vec<u8>| {
            runtime
                .block_on(client.put(&Key::parse(key).expect("a key"), data.into()))
                .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        };
        let big = pattern(5, (2 << 20) + 77);
        put("pre/a.bin", big.clone());
        put("pre/d/b", b"bee".to_vec());
        put("other/x", b"not under the prefix".to_vec());
        put("pre/d/a#1", b"hash".to_vec());
        // An object the directory `d` shadows, in the page before it.
        put("pre/d", b"shadowed".to_vec());

        let ttl = Duration::from_millis(300);
        // Every read a request (no kernel cache): the old file's read
        // below reaches the store. Listings in pages of 2 keys.
        let mut opts = options(ttl);
        opts.kernel_cache = false;
        opts.listing_page = 2;
        let fs = ObjectFs::for_url("s3://bucket/pre", config(), cache(), &opts).expect("the tree");
        let m = Mounted::serve(tmp, PathBuf::new(), fs, "s3://bucket/pre");
        assert_eq!(names(&m.mnt), ["a.bin", "d"]);
        assert!(m.p("d").is_dir());
        // S3 serves a key with `#` (only file:// hides NAME#DIGITS).
        assert_eq!(names(&m.p("d")), ["a#1", "b"]);
        assert_eq!(fs::read(m.p("d/a#1")).expect("read"), b"hash");
        assert!(
            fs::read(m.p("a.bin")).expect("read") == big,
            "a.bin's bytes"
        );
        assert_eq!(fs::read(m.p("d/b")).expect("read"), b"bee");
        let gets = m.store.stats().remote_gets;
        assert!(fs::read(m.p("a.bin")).expect("read again") == big);
        assert_eq!(m.store.stats().remote_gets, gets, "{:?}", m.store.stats());

        // Replaced: a new open reads the new version after the
        // time-to-live; the file opened before never mixes the two.
        let old = fs::File::open(m.p("a.bin")).expect("open");
        let new = pattern(6, 1 << 20);
        put("pre/a.bin", new.clone());
        std::thread::sleep(ttl + Duration::from_millis(200));
        assert!(fs::read(m.p("a.bin")).expect("read the new version") == new);
        let mut buf = vec![0u8; 4096];
        let e = old
            .read_at(&mut buf, 1 << 20)
            .expect_err("the old version is gone");
        assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    }
}
