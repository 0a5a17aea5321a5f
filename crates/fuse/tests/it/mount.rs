//! The mount, end to end: a temporary backing directory mounted in this
//! process ([`foliocache_fuse::spawn`]) and used through the kernel with
//! `std::fs`. Skipped (with the reason printed) where FUSE is missing,
//! unless `CI=true`, where that fails.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;

use foliocache_fuse::{MountOptions, CONTROL_NAME};
use fuser::BackgroundSession;
use test_support::skip_or_fail;

/// True if the test may go on; prints why not, or panics under CI.
pub(crate) fn fuse_ok(test: &str) -> bool {
    test_support::available(test, "FUSE", foliocache_fuse::unavailable())
}

/// A temporary backing directory mounted in this process (shared with
/// the other modules' tests).
pub(crate) struct Mounted {
    _tmp: tempfile::TempDir,
    pub(crate) backing: PathBuf,
    pub(crate) mnt: PathBuf,
    session: Option<BackgroundSession>,
    opts: MountOptions,
}

impl Mounted {
    fn new() -> Mounted {
        Self::with(MountOptions::new(64 << 20))
    }

    pub(crate) fn with(opts: MountOptions) -> Mounted {
        let tmp = tempfile::tempdir().expect("tempdir");
        let backing = tmp.path().join("backing");
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&backing).expect("mkdir backing");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let mut m = Mounted {
            _tmp: tmp,
            backing,
            mnt,
            session: None,
            opts,
        };
        m.mount();
        m
    }

    fn mount(&mut self) {
        let s = foliocache_fuse::spawn(&self.backing, &self.mnt, &self.opts).expect("mount");
        self.session = Some(s);
    }

    pub(crate) fn unmount(&mut self) {
        if let Some(s) = self.session.take() {
            s.umount_and_join().expect("unmount");
        }
    }

    /// The mount's figures, read from its control file (no paths asked).
    pub(crate) fn figures(&self) -> serde_json::Value {
        let mut answer = String::new();
        fs::File::open(self.p(CONTROL_NAME))
            .expect("control")
            .read_to_string(&mut answer)
            .expect("answer");
        serde_json::from_str(&answer).expect("json")
    }

    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn written_data_reads_back_and_survives_a_remount() {
    if !fuse_ok("written_data_reads_back_and_survives_a_remount") {
        return;
    }
    let mut m = Mounted::new();
    let data = pattern(3 << 20 | 123, 7);
    fs::write(m.p("a.bin"), &data).expect("write");
    assert_eq!(fs::read(m.p("a.bin")).expect("read"), data);
    assert_eq!(
        fs::metadata(m.p("a.bin")).expect("stat").len(),
        data.len() as u64
    );
    m.unmount();
    assert_eq!(fs::read(m.backing.join("a.bin")).expect("backing"), data);
    m.mount();
    assert_eq!(fs::read(m.p("a.bin")).expect("read after remount"), data);
}

#[test]
fn truncate_shrinks_and_grows_with_zeros() {
    if !fuse_ok("truncate_shrinks_and_grows_with_zeros") {
        return;
    }
    let m = Mounted::new();
    let data = pattern(100_000, 3);
    fs::write(m.p("t"), &data).expect("write");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.p("t"))
        .expect("open");
    f.set_len(5000).expect("shrink");
    f.set_len(9000).expect("grow");
    drop(f);
    let got = fs::read(m.p("t")).expect("read");
    assert_eq!(got.len(), 9000);
    assert_eq!(&got[..5000], &data[..5000]);
    assert!(got[5000..].iter().all(|&b| b == 0));
    // O_TRUNC empties it.
    fs::File::create(m.p("t")).expect("create truncates");
    assert_eq!(fs::metadata(m.p("t")).expect("stat").len(), 0);
}

#[test]
fn rename_and_unlink_follow_the_file() {
    if !fuse_ok("rename_and_unlink_follow_the_file") {
        return;
    }
    let m = Mounted::new();
    fs::create_dir(m.p("d1")).expect("mkdir");
    fs::create_dir(m.p("d2")).expect("mkdir");
    fs::write(m.p("d1/x"), b"hello").expect("write");
    let mut open = fs::File::open(m.p("d1/x")).expect("open");
    fs::rename(m.p("d1/x"), m.p("d2/y")).expect("rename");
    assert_eq!(errno(&fs::metadata(m.p("d1/x")).unwrap_err()), libc::ENOENT);
    assert_eq!(fs::read(m.p("d2/y")).expect("read renamed"), b"hello");
    // A handle open across the rename still reads the file.
    let mut s = String::new();
    open.read_to_string(&mut s).expect("read open handle");
    assert_eq!(s, "hello");
    // Written through a handle after unlink: still readable through it.
    let mut w = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("d2/y"))
        .expect("open rw");
    fs::remove_file(m.p("d2/y")).expect("unlink");
    assert!(!m.backing.join("d2/y").exists());
    w.write_all_at(b"HELLO", 0).expect("write unlinked");
    let mut buf = [0u8; 5];
    w.seek(SeekFrom::Start(0)).expect("seek");
    w.read_exact(&mut buf).expect("read unlinked");
    assert_eq!(&buf, b"HELLO");
    // Rename over a non-empty directory, a file over a directory.
    fs::write(m.p("d1/z"), b"z").expect("write");
    assert_eq!(
        errno(&fs::rename(m.p("d2"), m.p("d1")).unwrap_err()),
        libc::ENOTEMPTY
    );
    fs::write(m.p("f"), b"f").expect("write");
    assert_eq!(
        errno(&fs::rename(m.p("f"), m.p("d2")).unwrap_err()),
        libc::EISDIR
    );
    assert_eq!(
        errno(&fs::rename(m.p("d2"), m.p("f")).unwrap_err()),
        libc::ENOTDIR
    );
}

#[test]
fn an_unlinked_files_data_goes_unwritten_at_its_last_close() {
    if !fuse_ok("an_unlinked_files_data_goes_unwritten_at_its_last_close") {
        return;
    }
    let m = Mounted::new();
    let len = 2 << 20;
    let written = |m: &Mounted| m.figures()["cache"]["io_write_bytes"].as_u64().unwrap();
    // The flusher writes everything dirty every few seconds, and may do so
    // between a try's write and its unlink: then that try proves nothing.
    // Without the discard every try writes the data back.
    for attempt in 0..3 {
        let name = format!("u{attempt}");
        let mut w = fs::File::create(m.p(&name)).expect("create");
        // The backing inode, seen from outside the mount.
        let outside = fs::File::open(m.backing.join(&name)).expect("open backing");
        let before = written(&m);
        w.write_all(&pattern(len, 3)).expect("write");
        fs::remove_file(m.p(&name)).expect("unlink");
        drop(w);
        // The node goes once the kernel forgets it; with it the data.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let c = &m.figures()["cache"];
            if c["dirty_bytes"].as_u64() == Some(0) && c["writeback_bytes"].as_u64() == Some(0) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "still dirty: {c}");
            thread::sleep(std::time::Duration::from_millis(20));
        }
        let size = outside.metadata().expect("fstat").len();
        if written(&m) == before && size == 0 {
            return;
        }
        eprintln!(
            "try {attempt}: {} bytes written back, backing size {size}",
            written(&m) - before
        );
    }
    panic!("an unlinked, closed file's dirty data was written back in every try");
}

#[test]
fn directories_and_their_errors() {
    if !fuse_ok("directories_and_their_errors") {
        return;
    }
    let m = Mounted::new();
    fs::create_dir_all(m.p("a/b/c")).expect("mkdir -p");
    fs::write(m.p("a/b/c/f"), b"x").expect("write");
    let mut names: Vec<String> = fs::read_dir(m.p("a/b/c"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f"]);
    assert_eq!(
        errno(&fs::remove_dir(m.p("a/b/c")).unwrap_err()),
        libc::ENOTEMPTY
    );
    assert_eq!(
        errno(&fs::remove_dir(m.p("a/b/c/f")).unwrap_err()),
        libc::ENOTDIR
    );
    assert_eq!(
        errno(&fs::remove_file(m.p("a/b")).unwrap_err()),
        libc::EISDIR
    );
    assert_eq!(
        errno(&fs::metadata(m.p("a/nope")).unwrap_err()),
        libc::ENOENT
    );
    assert_eq!(
        errno(&fs::metadata(m.p("a/b/c/f/g")).unwrap_err()),
        libc::ENOTDIR
    );
    assert_eq!(
        errno(
            &fs::OpenOptions::new()
                .write(true)
                .open(m.p("a/b"))
                .unwrap_err()
        ),
        libc::EISDIR
    );
    assert_eq!(
        errno(&fs::create_dir(m.p("a/b")).unwrap_err()),
        libc::EEXIST
    );
    fs::remove_file(m.p("a/b/c/f")).expect("unlink");
    fs::remove_dir(m.p("a/b/c")).expect("rmdir");
    assert!(!m.backing.join("a/b/c").exists());
    // The control file is not listed.
    let root: Vec<_> = fs::read_dir(&m.mnt)
        .expect("readdir root")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(!root.iter().any(|n| n == CONTROL_NAME));
}

#[test]
fn bad_offsets_and_modes_get_a_local_filesystems_errno() {
    if !fuse_ok("bad_offsets_and_modes_get_a_local_filesystems_errno") {
        return;
    }
    let m = Mounted::new();
    fs::write(m.p("f"), pattern(10_000, 1)).expect("write");
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("f"))
        .expect("open");
    let mut buf = [0u8; 100];
    assert_eq!(f.read_at(&mut buf, 1 << 40).expect("read far past EOF"), 0);
    // Past the largest offset: EINVAL, as on a local filesystem.
    assert_eq!(
        errno(&f.read_at(&mut buf, i64::MAX as u64 - 10).unwrap_err()),
        libc::EINVAL
    );
    // A write past the backing filesystem's largest file: EFBIG at once,
    // as a local filesystem's, and nothing changes (it was taken, and
    // failed only at writeback and unmount).
    use std::os::unix::fs::FileExt as _;
    assert_eq!(
        errno(&f.write_at(b"z", i64::MAX as u64 - 2).unwrap_err()),
        libc::EFBIG
    );
    assert_eq!(f.metadata().expect("stat").len(), 10_000);
    f.sync_all().expect("nothing owed to the backing");
    // Fallocate: a hole punched reads as zeros; a bad mode unsupported.
    use nix::fcntl::{fallocate, FallocateFlags};
    fallocate(
        &f,
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        4096,
        4096,
    )
    .expect("punch hole");
    let mut hole = [1u8; 4096];
    f.read_exact_at(&mut hole, 4096).expect("read hole");
    assert!(hole.iter().all(|&b| b == 0));
    assert_eq!(f.metadata().expect("stat").len(), 10_000);
    assert_eq!(
        fallocate(&f, FallocateFlags::FALLOC_FL_PUNCH_HOLE, 0, 4096).unwrap_err(),
        nix::errno::Errno::EOPNOTSUPP,
        "a hole punched must keep the size"
    );
    // Reading a directory.
    let mut d = fs::File::open(&m.mnt).expect("open dir");
    let mut s = Vec::new();
    assert_eq!(errno(&d.read_to_end(&mut s).unwrap_err()), libc::EISDIR);
}

#[test]
fn symlinks_read_back_as_text_and_are_never_followed_by_the_server() {
    if !fuse_ok("symlinks_read_back_as_text_and_are_never_followed_by_the_server") {
        return;
    }
    // backing = T/a/backing with T/a/outside/secret beside it; the mount
    // at T/b/mnt, where T/b/outside does not exist. A server that
    // followed the backing's links would serve T/a/outside/secret.
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let backing = a.join("backing");
    let mnt = tmp.path().join("b/mnt");
    fs::create_dir_all(&backing).expect("mkdir");
    fs::create_dir_all(a.join("outside")).expect("mkdir");
    fs::create_dir_all(&mnt).expect("mkdir");
    fs::write(a.join("outside/secret"), b"secret").expect("write");
    std::os::unix::fs::symlink("../outside/secret", backing.join("rel")).expect("symlink");
    std::os::unix::fs::symlink("../outside", backing.join("reldir")).expect("symlink");
    let session =
        foliocache_fuse::spawn(&backing, &mnt, &MountOptions::new(16 << 20)).expect("mount");
    let rel = fs::read_link(mnt.join("rel")).expect("readlink");
    assert_eq!(rel, Path::new("../outside/secret"));
    assert!(fs::symlink_metadata(mnt.join("rel"))
        .expect("lstat")
        .file_type()
        .is_symlink());
    assert_eq!(errno(&fs::read(mnt.join("rel")).unwrap_err()), libc::ENOENT);
    assert_eq!(
        errno(&fs::read(mnt.join("reldir/secret")).unwrap_err()),
        libc::ENOENT
    );
    // A link made through the mount stores its text as given.
    std::os::unix::fs::symlink("/etc/passwd", mnt.join("abs")).expect("symlink via mount");
    assert_eq!(
        fs::read_link(backing.join("abs")).expect("readlink"),
        Path::new("/etc/passwd")
    );
    // The control channel refuses `..` and does not follow links.
    let mut c = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.join(CONTROL_NAME))
        .expect("control");
    c.write_all(b"../outside/secret\nreldir/secret\n")
        .expect("request");
    c.seek(SeekFrom::Start(0)).expect("rewind");
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("answer");
    let v: serde_json::Value = serde_json::from_str(&answer).expect("json");
    for f in v["files"].as_array().expect("files") {
        assert!(f["error"].is_string(), "{f}");
    }
    drop(c);
    session.umount_and_join().expect("unmount");
}

#[test]
fn hard_links_share_one_file() {
    if !fuse_ok("hard_links_share_one_file") {
        return;
    }
    let m = Mounted::new();
    fs::write(m.p("one"), b"first").expect("write");
    fs::hard_link(m.p("one"), m.p("two")).expect("link");
    fs::write(m.p("two"), b"second").expect("write via link");
    assert_eq!(fs::read(m.p("one")).expect("read"), b"second");
    assert_eq!(
        fs::metadata(m.p("one")).expect("stat").ino(),
        fs::metadata(m.p("two")).expect("stat").ino()
    );
    assert_eq!(fs::metadata(m.p("one")).expect("stat").nlink(), 2);
}

#[test]
fn concurrent_readers_and_writers_see_whole_writes() {
    if !fuse_ok("concurrent_readers_and_writers_see_whole_writes") {
        return;
    }
    let m = Arc::new(Mounted::new());
    const CHUNK: usize = 64 << 10;
    const CHUNKS: usize = 16;
    let reference = pattern(4 << 20, 9);
    fs::write(m.p("ro"), &reference).expect("write ro");
    fs::File::create(m.p("rw"))
        .expect("create")
        .set_len((CHUNK * CHUNKS) as u64)
        .expect("size");
    let mut threads = Vec::new();
    for w in 0..4usize {
        let m = m.clone();
        threads.push(thread::spawn(move || {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(m.p("rw"))
                .expect("open");
            for c in (w..CHUNKS).step_by(4) {
                f.write_all_at(&pattern(CHUNK, c as u8), (c * CHUNK) as u64)
                    .expect("write chunk");
            }
        }));
    }
    for r in 0..4usize {
        let m = m.clone();
        let reference = reference.clone();
        threads.push(thread::spawn(move || {
            let f = fs::File::open(m.p("ro")).expect("open");
            let mut buf = vec![0u8; 128 << 10];
            for i in 0..64usize {
                let off = ((i * 7 + r * 13) % 32) * (128 << 10);
                f.read_exact_at(&mut buf, off as u64).expect("read");
                assert_eq!(&buf[..], &reference[off..off + buf.len()]);
            }
        }));
    }
    for t in threads {
        t.join().expect("thread");
    }
    let got = fs::read(m.p("rw")).expect("read rw");
    for c in 0..CHUNKS {
        assert_eq!(
            &got[c * CHUNK..(c + 1) * CHUNK],
            &pattern(CHUNK, c as u8)[..],
            "chunk {c}"
        );
    }
}

#[test]
fn the_control_file_gives_the_cache_figures_and_cachestat() {
    if !fuse_ok("the_control_file_gives_the_cache_figures_and_cachestat") {
        return;
    }
    let m = Mounted::new();
    fs::create_dir(m.p("d")).expect("mkdir");
    fs::write(m.p("d/f"), pattern(1 << 20, 2)).expect("write");
    let mut c = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p(CONTROL_NAME))
        .expect("control");
    c.write_all(b"d/f\nmissing\n").expect("request");
    c.seek(SeekFrom::Start(0)).expect("rewind");
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("answer");
    let v: serde_json::Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(v["cache"]["capacity_bytes"].as_u64(), Some(64 << 20));
    assert_eq!(v["files"][0]["cached"].as_u64(), Some(256), "{v}");
    assert!(v["files"][1]["error"].is_string());
    // The predicted hit ratios (`Cache::hit_ratio_curve`): five points,
    // 1x among them; the descriptors against their budgets.
    let points = v["cache"]["hit_ratio_curve"]["points"]
        .as_array()
        .expect("curve");
    assert_eq!(points.len(), 5, "{v}");
    assert!(points.iter().any(|p| p[0].as_f64() == Some(1.0)), "{v}");
    assert!(v["descriptors"]["paths_budget"].as_u64() >= Some(16), "{v}");
}

#[test]
fn dontcache_mount_leaves_nothing_cached_after_reads() {
    if !fuse_ok("dontcache_mount_leaves_nothing_cached_after_reads") {
        return;
    }
    let mut opts = MountOptions::new(64 << 20);
    opts.dontcache = true;
    let m = Mounted::with(opts);
    let data = pattern(2 << 20, 5);
    fs::write(m.backing.join("f"), &data).expect("write backing");
    assert_eq!(fs::read(m.p("f")).expect("read"), data);
    let v = m.figures();
    assert!(
        v["cache"]["dropbehind_drops"].as_u64().unwrap_or(0) > 0,
        "{v}"
    );
}

/// A mapping of `len` bytes of `f` from offset 0 (`shared`: `MAP_SHARED`,
/// else `MAP_PRIVATE`), unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(f: &fs::File, len: usize, shared: bool) -> std::io::Result<Map> {
        use std::os::fd::AsRawFd;
        let flags = if shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        // SAFETY: a fresh mapping chosen by the kernel (no address given),
        // of a descriptor that is open; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr: p.cast(), len })
    }

    /// Bytes `off..off + len` of the mapping (the caller keeps them inside
    /// the file's size: a page wholly past its end faults with SIGBUS).
    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        let mut v = vec![0u8; len];
        // SAFETY: the range is inside the mapping (checked above), which
        // lives as long as `self`; `v` is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), v.as_mut_ptr(), len) };
        v
    }

    /// Stores `data` at `off` through the mapping (inside the file's size,
    /// as [`Map::read`]).
    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: as in `read`; the mapping is writable.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) };
    }

    /// `msync(MS_SYNC)` of the whole mapping.
    fn sync(&self) -> std::io::Result<()> {
        // SAFETY: the address and length are this live mapping's own.
        if unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no reference
        // into it outlives `self` (`read` copies out).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// True if the mount's control file says the kernel maps its files
/// shared (`FUSE_DIRECT_IO_ALLOW_MMAP`, Linux 6.6); otherwise prints why
/// `test` skips (a failure under CI).
fn shared_mmap_ok(test: &str, m: &Mounted) -> bool {
    let v = m.figures();
    let ok = v["shared_mmap"]
        .as_bool()
        .expect("shared_mmap in the figures");
    if !ok {
        skip_or_fail(
            test,
            "this kernel cannot map direct-IO FUSE files shared (FUSE_DIRECT_IO_ALLOW_MMAP: Linux 6.6)",
        );
    }
    ok
}

/// Shared mappings and read/write agree both ways: stores through a
/// mapping are seen by `read()` (the kernel writes the mapped pages back
/// through the server before a direct read of their range) and reach the
/// backing after msync or munmap; `write()` is seen by a mapping made
/// before it; a private mapping sees the file, keeps its own stores, and
/// a punched or zeroed range reads as zeros through a mapping.
#[test]
fn shared_mappings_and_read_write_agree() {
    if !fuse_ok("shared_mappings_and_read_write_agree") {
        return;
    }
    use nix::fcntl::{fallocate, FallocateFlags};
    let mut m = Mounted::new();
    if !shared_mmap_ok("shared_mappings_and_read_write_agree", &m) {
        return;
    }
    const LEN: usize = 1 << 20;
    let data = pattern(LEN, 11);
    fs::write(m.p("m"), &data).expect("write");
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("m"))
        .expect("open");
    let map = Map::new(&f, LEN, true).expect("shared mmap");
    assert!(map.read(0, LEN) == data, "the mapping sees the file");
    // A store through the mapping, then read(): no msync needed.
    map.write(5000, b"through the map");
    let mut buf = [0u8; 15];
    f.read_exact_at(&mut buf, 5000).expect("pread");
    assert_eq!(&buf, b"through the map");
    // write() after the mapping was made: the mapping sees it.
    f.write_all_at(b"by write", 300_000).expect("pwrite");
    assert_eq!(map.read(300_000, 8), b"by write");
    // Stored, then synced: the backing has it once the cache writes back.
    map.write(700_000, b"synced");
    map.sync().expect("msync");
    f.sync_data().expect("fsync");
    let mut back = [0u8; 6];
    fs::File::open(m.backing.join("m"))
        .expect("open backing")
        .read_exact_at(&mut back, 700_000)
        .expect("read backing");
    assert_eq!(&back, b"synced");
    // Zeroed and punched ranges read as zeros in the mapping.
    fallocate(&f, FallocateFlags::FALLOC_FL_ZERO_RANGE, 300_000, 8).expect("zero range");
    assert_eq!(map.read(300_000, 8), [0u8; 8]);
    fallocate(
        &f,
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        16384,
        8192,
    )
    .expect("punch");
    assert!(map.read(16384, 8192).iter().all(|&b| b == 0));
    // Stored, then unmapped without msync: read() and the backing see it.
    map.write(900_000, b"unmapped");
    drop(map);
    let mut unmapped = [0u8; 8];
    f.read_exact_at(&mut unmapped, 900_000).expect("pread");
    assert_eq!(&unmapped, b"unmapped");
    // A private mapping: the file's bytes; its stores stay its own.
    let private = Map::new(&f, LEN, false).expect("private mmap");
    assert_eq!(private.read(5000, 15), b"through the map");
    private.write(0, b"private");
    f.read_exact_at(&mut back, 0).expect("pread");
    assert_eq!(&back[..], &data[..6]);
    drop(private);
    drop(f);
    m.unmount();
    let back = fs::read(m.backing.join("m")).expect("backing");
    assert_eq!(&back[5000..5015], b"through the map");
    assert_eq!(&back[900_000..900_008], b"unmapped");
    assert!(back[16384..24576].iter().all(|&b| b == 0));
}

/// fallocate through the mount: preallocation grows the file (or not,
/// with `KEEP_SIZE`) and allocates the backing's blocks; `ZERO_RANGE`
/// zeros data the cache holds dirty; collapse and insert are refused as
/// the kernel's FUSE client refuses them.
#[test]
fn fallocate_modes_reach_the_backing_and_the_cache() {
    if !fuse_ok("fallocate_modes_reach_the_backing_and_the_cache") {
        return;
    }
    use nix::fcntl::{fallocate, FallocateFlags as F};
    let m = Mounted::new();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.p("a"))
        .expect("create");
    f.write_all_at(&pattern(10_000, 4), 0).expect("write");
    let blocks = || fs::metadata(m.backing.join("a")).expect("stat").blocks();
    // Preallocation past the end: the size grows, the blocks are there.
    fallocate(&f, F::empty(), 0, 1 << 20).expect("fallocate 0");
    assert_eq!(f.metadata().expect("stat").len(), 1 << 20);
    assert_eq!(
        fs::metadata(m.backing.join("a")).expect("stat").len(),
        1 << 20
    );
    assert!(blocks() >= 2048, "allocated: {} blocks", blocks());
    let got = fs::read(m.p("a")).expect("read");
    assert_eq!(&got[..10_000], &pattern(10_000, 4)[..]);
    assert!(got[10_000..].iter().all(|&b| b == 0));
    // KEEP_SIZE: blocks past the end, the size unchanged.
    fallocate(&f, F::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20).expect("keep size");
    assert_eq!(f.metadata().expect("stat").len(), 1 << 20);
    assert!(blocks() >= 4096, "allocated: {} blocks", blocks());
    // ZERO_RANGE over dirty cached data, unaligned, then growing the file.
    f.write_all_at(&[0xaa; 20_000], 100_000).expect("write");
    fallocate(&f, F::FALLOC_FL_ZERO_RANGE, 101_001, 5000).expect("zero range");
    let mut buf = vec![0u8; 20_000];
    f.read_exact_at(&mut buf, 100_000).expect("read");
    assert!(buf[..1001].iter().all(|&b| b == 0xaa));
    assert!(buf[1001..6001].iter().all(|&b| b == 0));
    assert!(buf[6001..].iter().all(|&b| b == 0xaa));
    fallocate(&f, F::FALLOC_FL_ZERO_RANGE, (1 << 20) - 10, 4000).expect("zero growing");
    assert_eq!(f.metadata().expect("stat").len(), (1 << 20) + 3990);
    for mode in [F::FALLOC_FL_COLLAPSE_RANGE, F::FALLOC_FL_INSERT_RANGE] {
        assert_eq!(
            fallocate(&f, mode, 0, 4096).unwrap_err(),
            nix::errno::Errno::EOPNOTSUPP,
            "{mode:?}"
        );
    }
    f.sync_all().expect("fsync");
    let back = fs::read(m.backing.join("a")).expect("backing");
    assert_eq!(back.len(), (1 << 20) + 3990);
    assert!(back[101_001..106_001].iter().all(|&b| b == 0));
    assert!(back[106_001..120_000].iter().all(|&b| b == 0xaa));
}

/// A small xorshift generator: reproducible runs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// `len` random bytes, eight from each draw.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(len);
        v
    }
}

/// Random writes, reads, mapped reads and writes, truncates, fallocates
/// (hole punch, zero range, preallocation with and without `KEEP_SIZE`,
/// collapse and insert refused), fsyncs, msyncs, remaps and reopens of
/// files through the mount, every read checked against a `Vec<u8>` model,
/// and the backing checked against it after unmount. Two files on one
/// mount with an 8 MiB cache: three quarters of the operations on one
/// within 3 MiB, a quarter on one within 24 MiB (larger than the cache, so
/// reclaim runs under the mapped pages). `FUSE_EXERCISER_OPS` sets the
/// number of operations (default 200 000 under `CI=true`; 4000
/// otherwise, for a quick local run).
#[test]
fn random_operations_match_a_model() {
    if !fuse_ok("random_operations_match_a_model") {
        return;
    }
    let ops: u64 = test_support::env_or(
        "FUSE_EXERCISER_OPS",
        if test_support::under_ci() {
            200_000
        } else {
            4000
        },
    );
    let seed: u64 = test_support::env_or("FUSE_EXERCISER_SEED", 0x9e37_79b9_7f4a_7c15);
    // A small cache, so reclaim and writeback run during the test.
    let mut m = Mounted::with(MountOptions::new(8 << 20));
    if !shared_mmap_ok("random_operations_match_a_model", &m) {
        return;
    }
    let started = std::time::Instant::now();
    let small = exercise(&m, "small", 3 << 20, ops - ops / 4, seed);
    let half = started.elapsed();
    let large = exercise(&m, "large", 24 << 20, ops / 4, seed ^ 0x5555);
    eprintln!(
        "random_operations_match_a_model: {ops} operations in {:.1?} ({:.1?} within 3 MiB)",
        started.elapsed(),
        half
    );
    m.unmount();
    for (name, model) in [("small", small), ("large", large)] {
        assert!(
            fs::read(m.backing.join(name)).expect("backing") == model,
            "{name}: backing after unmount"
        );
    }
}

/// Checks that the kernel and the server both hold `len` bytes of `f`,
/// before the exerciser touches its mapping below `len`. Were either
/// shorter, the access would fault with SIGBUS, killing this process (the
/// server's too) while the mapping may hold dirty pages: its teardown then
/// waits forever for their writeback by the dead server. A size wrong
/// here fails the test instead.
fn sizes_agree(f: &fs::File, len: usize) -> Result<(), String> {
    let kernel = f.metadata().map_err(|e| format!("stat: {e}"))?.len();
    let mut last = [0u8; 1];
    let server = f
        .read_at(&mut last, len as u64 - 1)
        .map_err(|e| format!("read: {e}"))?;
    if kernel != len as u64 || server != 1 {
        return Err(format!(
            "size {len} expected before a mapped access: the kernel has {kernel}, \
             the server {} at the last byte",
            if server == 1 { "it" } else { "nothing" }
        ));
    }
    Ok(())
}

/// `ops` random operations on file `name` within `span` bytes (see
/// `random_operations_match_a_model`); returns the model of the file.
fn exercise(m: &Mounted, name: &str, span: u64, ops: u64, seed: u64) -> Vec<u8> {
    use nix::fcntl::{fallocate, FallocateFlags as F};
    let mut rng = Rng(seed);
    let mut model: Vec<u8> = Vec::new();
    let open = || {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(m.p(name))
            .expect("open")
    };
    let mut f = open();
    // One shared mapping over the whole span, used only below the file's
    // size (a page wholly past its end faults), made again now and then;
    // it outlives reopens of `f`, as a program's mapping outlives close.
    let map_len = span as usize + (1 << 20);
    let remap = |f: &fs::File| Map::new(f, map_len, true).expect("shared mmap");
    let mut map = remap(&f);
    // The mix, in hundredths: writes 28, reads 31, mapped reads 6 and
    // writes 6, truncates 2, fallocates 12, fsyncs and msyncs 1, reopens 5,
    // remaps 2, size checks the rest. Truncates and syncs cost a
    // millisecond or two each (ten times a read): rare, so that CI's
    // 200 000 operations stay within a minute on 2 busy vCPUs.
    for op in 0..ops {
        let what = rng.below(100);
        let ctx = || format!("{name}: seed {seed:#x} op {op}");
        match what {
            0..=27 => {
                let off = rng.below(span);
                let max = if rng.below(4) == 0 { 300_000 } else { 9000 };
                let len = 1 + rng.below(max) as usize;
                let data = rng.bytes(len);
                f.write_all_at(&data, off)
                    .unwrap_or_else(|e| panic!("{}: write: {e}", ctx()));
                let end = off as usize + data.len();
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
            }
            28..=58 => {
                let off = rng.below(span + 100_000);
                let len = 1 + rng.below(200_000);
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    let n = f
                        .read_at(&mut buf[got..], off + got as u64)
                        .unwrap_or_else(|e| panic!("{}: read: {e}", ctx()));
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let start = (off as usize).min(model.len());
                let end = (off as usize + len as usize).min(model.len());
                assert_eq!(got, end - start, "{}: read length", ctx());
                assert!(buf[..got] == model[start..end], "{}: read data", ctx());
            }
            59..=64 if !model.is_empty() => {
                sizes_agree(&f, model.len()).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                let off = rng.below(model.len() as u64) as usize;
                let len = (1 + rng.below(65_536) as usize).min(model.len() - off);
                assert!(
                    map.read(off, len) == model[off..off + len],
                    "{}: mapped read at {off} len {len}",
                    ctx()
                );
            }
            65..=70 if !model.is_empty() => {
                sizes_agree(&f, model.len()).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                let off = rng.below(model.len() as u64) as usize;
                let len = (1 + rng.below(20_000) as usize).min(model.len() - off);
                let data = rng.bytes(len);
                map.write(off, &data);
                model[off..off + len].copy_from_slice(&data);
            }
            71..=72 => {
                let size = rng.below(span);
                f.set_len(size)
                    .unwrap_or_else(|e| panic!("{}: truncate: {e}", ctx()));
                model.resize(size as usize, 0);
            }
            73..=84 => {
                let off = rng.below(span);
                let len = 1 + rng.below(200_000);
                let keep = F::FALLOC_FL_KEEP_SIZE;
                let mode = match what {
                    73..=76 => F::FALLOC_FL_PUNCH_HOLE | keep,
                    77 => F::FALLOC_FL_ZERO_RANGE,
                    78..=79 => F::FALLOC_FL_ZERO_RANGE | keep,
                    80..=81 => F::empty(),
                    82..=83 => keep,
                    _ if rng.below(2) == 0 => F::FALLOC_FL_COLLAPSE_RANGE,
                    _ => F::FALLOC_FL_INSERT_RANGE,
                };
                let r = fallocate(&f, mode, off as i64, len as i64);
                if mode.intersects(F::FALLOC_FL_COLLAPSE_RANGE | F::FALLOC_FL_INSERT_RANGE) {
                    // The kernel's FUSE client passes neither on.
                    assert_eq!(r, Err(nix::errno::Errno::EOPNOTSUPP), "{}", ctx());
                    continue;
                }
                r.unwrap_or_else(|e| panic!("{}: fallocate {mode:?}: {e}", ctx()));
                let end = (off + len) as usize;
                if mode.intersects(F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_ZERO_RANGE) {
                    let start = (off as usize).min(model.len());
                    let stop = end.min(model.len());
                    model[start..stop].fill(0);
                }
                if !mode.contains(keep) && model.len() < end {
                    model.resize(end, 0);
                }
            }
            85 if rng.below(2) == 0 => f
                .sync_data()
                .unwrap_or_else(|e| panic!("{}: fsync: {e}", ctx())),
            85 => map
                .sync()
                .unwrap_or_else(|e| panic!("{}: msync: {e}", ctx())),
            86..=90 => {
                drop(f);
                f = open();
            }
            91..=92 => {
                drop(map);
                map = remap(&f);
            }
            _ => {
                let len = f.metadata().expect("stat").len();
                assert_eq!(len, model.len() as u64, "{}: size", ctx());
            }
        }
    }
    drop(map);
    drop(f);
    assert!(
        fs::read(m.p(name)).expect("read all") == model,
        "{name}: whole file"
    );
    model
}

/// A write through the mount moves the file's mtime at once, as on a local
/// filesystem, though its data is still dirty in the cache (the backing's
/// mtime moves only at writeback); times set explicitly afterwards stick.
#[test]
fn a_write_moves_mtime_at_once_and_set_times_stick() {
    if !fuse_ok("a_write_moves_mtime_at_once_and_set_times_stick") {
        return;
    }
    let m = Mounted::new();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(946_684_800); // 2000-01-01
    let f = fs::File::create(m.backing.join("t")).unwrap();
    f.write_all_at(b"before", 0).unwrap();
    f.set_modified(old).unwrap();
    drop(f);
    let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    assert_eq!(mtime(&m.p("t")), old);
    let start = std::time::SystemTime::now();
    let f = fs::OpenOptions::new().write(true).open(m.p("t")).unwrap();
    f.write_all_at(b"after", 0).unwrap();
    assert!(
        mtime(&m.p("t")) >= start - std::time::Duration::from_secs(1),
        "the write's mtime, not the backing's old one: {:?}",
        mtime(&m.p("t"))
    );
    // Explicit times win (cp -p, touch -d), after the data is written.
    f.set_modified(old).unwrap();
    drop(f);
    assert_eq!(mtime(&m.p("t")), old);
    assert_eq!(fs::read(m.p("t")).unwrap(), b"aftere");
    assert_eq!(mtime(&m.backing.join("t")), old, "the backing has them too");
}

/// The null mount (the crossing's ceiling in the bench): the backing's
/// top-level regular files as read-only zeros of their sizes, listed,
/// read in pieces of any size, short at the end, refused for writing.
#[test]
fn null_mount_serves_the_files_as_zeros_of_their_sizes() {
    if !fuse_ok("null_mount_serves_the_files_as_zeros_of_their_sizes") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (backing, mnt) = (tmp.path().join("backing"), tmp.path().join("mnt"));
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    fs::write(backing.join("a"), vec![0xa5u8; 3 << 20 | 123]).unwrap();
    fs::write(backing.join("b"), b"").unwrap();
    fs::create_dir(backing.join("sub")).unwrap();
    std::os::unix::fs::symlink("a", backing.join("link")).unwrap();
    let s = foliocache_fuse::spawn_null(&backing, &mnt, &MountOptions::new(0)).expect("mount");
    let mut names: Vec<String> = fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b"], "regular files only");
    assert_eq!(fs::metadata(mnt.join("a")).unwrap().len(), 3 << 20 | 123);
    let f = fs::File::open(mnt.join("a")).unwrap();
    let mut buf = vec![1u8; 2 << 20];
    // Across the end: short, zeros.
    let n = f.read_at(&mut buf, 2 << 20).unwrap();
    assert_eq!(n, (1 << 20) + 123);
    assert!(buf[..n].iter().all(|&b| b == 0));
    assert_eq!(f.read_at(&mut buf, 4 << 20).unwrap(), 0, "past the end");
    let all = fs::read(mnt.join("a")).unwrap();
    assert_eq!(all.len(), 3 << 20 | 123);
    assert!(all.iter().all(|&b| b == 0));
    assert_eq!(fs::read(mnt.join("b")).unwrap(), b"");
    let e = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("a"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert_eq!(
        fs::metadata(mnt.join("sub")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    drop(f);
    s.umount_and_join().expect("unmount");
    assert_eq!(
        fs::read(backing.join("a")).unwrap()[0],
        0xa5,
        "backing untouched"
    );
}
