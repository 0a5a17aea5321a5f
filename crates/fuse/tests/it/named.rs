//! The mount on a named shared cache (`MountOptions::cache_name`): the
//! cache hosted in this process (`SharedCache::host`), the mount's server
//! attached to it by its socket, and the test's own `SharedFile`s beside
//! the mount as another program of the group: one copy of each page, each
//! side's writes and sizes seen by the other's next read, before any
//! writeback; the unmount writes back.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;

use foliocache::SharedCache;
use foliocache_fuse::MountOptions;

use super::mount::{fuse_ok, Mounted};

/// A host of a new shared cache of `pages` pages at a socket in `dir`.
fn host(dir: &std::path::Path, pages: u64) -> (SharedCache, foliocache::SharedHost, String) {
    let sock = dir.join("c.sock").to_str().expect("utf-8").to_owned();
    let cache = SharedCache::new(pages * 4096).expect("shared cache");
    let host = cache.host(&sock, None).expect("host");
    (cache, host, sock)
}

/// The group's handle of a backing file, opened as another program
/// attached to the cache would.
fn group_file(cache: &SharedCache, path: &std::path::Path) -> foliocache::SharedFile {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open the backing file");
    cache.open(f).expect("serve it through the shared cache")
}

#[test]
fn the_mount_and_the_group_share_one_cache() {
    if !fuse_ok("the_mount_and_the_group_share_one_cache") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (cache, _host, sock) = host(dir.path(), 1024);
    let mut opts = MountOptions::new(16 << 20);
    opts.cache_name = Some(sock.clone());
    let mut m = Mounted::with(opts);
    let backing = m.backing.join("f");

    // Written through the mount: in the group's pages, not on disk.
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.p("f"), &data).expect("write through the mount");
    assert_eq!(fs::metadata(&backing).expect("backing").len(), 0);
    let g = group_file(&cache, &backing);
    assert_eq!(g.len().expect("len"), 10_000);
    let mut buf = vec![0; 20_000];
    assert_eq!(g.read_at(&mut buf, 0).expect("group read"), 10_000);
    assert_eq!(&buf[..10_000], &data[..]);
    let s = cache.stats();
    assert_eq!((s.cached, s.dirty), (3, 3), "one copy: {s:?}");

    // The group's write and growth, seen through the mount at once (the
    // kernel keeps no attributes).
    g.write_at(&[b'x'; 5000], 10_000).expect("group write");
    g.write_at(b"HEAD", 0).expect("group write");
    assert_eq!(fs::metadata(m.p("f")).expect("stat").len(), 15_000);
    let through = fs::read(m.p("f")).expect("read through the mount");
    assert_eq!(through.len(), 15_000);
    assert_eq!(&through[..4], b"HEAD");
    assert_eq!(&through[4..10_000], &data[4..]);
    assert!(through[10_000..].iter().all(|&b| b == b'x'));
    // A cut by the group, and a stat of a file the mount has no handle
    // of (the group's unsaved size).
    g.set_len(4000).expect("group truncate");
    assert_eq!(fs::metadata(m.p("f")).expect("stat").len(), 4000);
    assert_eq!(fs::read(m.p("f")).expect("read").len(), 4000);
    fs::File::create(m.backing.join("g")).expect("create g");
    let h = group_file(&cache, &m.backing.join("g"));
    h.write_at(b"made by the group", 0).expect("group write");
    assert_eq!(fs::read(m.p("g")).expect("read g"), b"made by the group");
    assert_eq!(fs::metadata(m.p("g")).expect("stat g").len(), 17);

    // An append through the mount lands after the group's bytes, and a
    // hole punched through it reads as zeros for the group.
    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(m.p("f"))
        .expect("open for append");
    g.write_at(b"tail", 4000).expect("group write");
    a.write_all(b"appended").expect("append");
    assert_eq!(g.len().expect("len"), 4012);
    assert_eq!(g.read_at(&mut buf[..8], 4004).expect("read"), 8);
    assert_eq!(&buf[..8], b"appended");
    let punched = {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.p("f"))
            .expect("open");
        // SAFETY: fallocate on a descriptor we own.
        unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                4096,
            )
        }
    };
    assert_eq!(punched, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(g.read_at(&mut buf[..5000], 0).expect("read"), 4012);
    assert!(buf[..4012].iter().all(|&b| b == 0));

    // The control file says which cache.
    let v = m.figures();
    assert_eq!(v["shared"]["name"], sock.as_str(), "{v}");
    assert_eq!(v["cache"]["capacity_bytes"], 1024 * 4096, "{v}");

    // Unmounting writes back what the group's pages hold of the files.
    let want = fs::read(m.p("f")).expect("read");
    assert_eq!(want.len(), 4012);
    drop(a);
    m.unmount();
    assert_eq!(fs::read(&backing).expect("backing"), want);
    assert_eq!(
        fs::read(m.backing.join("g")).expect("backing g"),
        b"made by the group"
    );
    assert_eq!(cache.stats().dirty, 0);
    cache.verify().expect("the segment is consistent");
}

#[test]
fn a_named_cache_refuses_the_own_caches_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = MountOptions::new(16 << 20);
    opts.cache_name = Some(dir.path().join("none.sock").to_str().expect("utf-8").into());
    opts.dontcache = true;
    let e = opts.build_fs(dir.path()).err().expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("dontcache"), "{e}");
    // With none of them, the missing host is the error, and says so.
    opts.dontcache = false;
    let e = opts.build_fs(dir.path()).err().expect("no host");
    assert!(e.to_string().contains("attaching to the cache"), "{e}");
}
