//! One cache for many processes (`SharedCache`, docs/design.md section
//! 13): against a model in one process; forked processes on one file
//! against a model in shared memory; a writer and a reader process, every
//! read seeing the last completed write; writers killed at random moments
//! (holding any lock), the cache consistent afterwards and no accepted
//! byte lost; a segment scribbled on.

// Std atomics in memory several processes share: never in a loom model.
#![allow(clippy::disallowed_types)]

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use foliocache::{SharedCache, SharedFile};

mod adopt;
mod curve;
mod huge;
mod member;
mod named;
mod reads;
mod slots;
mod warm;
use rand::{Rng, SeedableRng};
use test_support::TempPath;

fn open(cache: &SharedCache, path: &std::path::Path, direct: bool) -> SharedFile {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let f = o.open(path).expect("open");
    cache.open(f).expect("serve")
}

/// Memory every process of a test shares: `n` u64 words.
struct Shared {
    ptr: *mut u8,
    len: usize,
}

impl Shared {
    fn new(len: usize) -> Shared {
        // SAFETY: a fresh anonymous shared mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Shared {
            ptr: ptr.cast(),
            len,
        }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i * 8 + 8 <= self.len);
        // SAFETY: in the mapping, aligned; only ever used as atomics.
        unsafe { &*self.ptr.add(i * 8).cast::<AtomicU64>() }
    }

    fn byte(&self, i: usize) -> &std::sync::atomic::AtomicU8 {
        assert!(i < self.len);
        // SAFETY: in the mapping; only ever used as atomics.
        unsafe { &*self.ptr.add(i).cast::<std::sync::atomic::AtomicU8>() }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Runs `f` in a forked child, which exits with its result (0 for `true`).
fn fork(f: impl FnOnce() -> bool) -> libc::pid_t {
    // SAFETY: the child only runs `f` and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(false);
        // SAFETY: ends the child without running the parent's exit
        // handlers or destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

/// Waits for `pid`: its exit status, or `-signal`.
fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    }
}

/// A lock across processes: a spin lock on a shared word (the tests'
/// own, so that what they check is not the cache's locks).
fn with_lock<T>(word: &AtomicU64, f: impl FnOnce() -> T) -> T {
    while word
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    let r = f();
    word.store(0, Ordering::Release);
    r
}

/// One process, a cache of 16 pages over a file of up to 40: random
/// reads, writes, appends, truncates and syncs against a `Vec` model;
/// then the file on disk is the model.
#[test]
fn one_process_against_a_model() {
    for seed in 0..4u64 {
        let t = TempPath::new("shared-model");
        let cache = SharedCache::new(16 * 4096).unwrap();
        let f = open(&cache, &t.path, seed % 2 == 0);
        let mut model = Vec::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for step in 0..3000 {
            let len = rng.gen_range(1..3 * 4096usize);
            let off = rng.gen_range(0..=(model.len() + 8192).min(40 * 4096) as u64);
            match rng.gen_range(0..10) {
                0..=3 => {
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    f.write_at(&data, off).unwrap();
                    let end = off as usize + len;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                }
                4 => {
                    let n = rng.gen_range(0..=model.len() + 4096) as u64;
                    f.set_len(n).unwrap();
                    model.resize(n as usize, 0);
                }
                5 => f.sync_data().unwrap(),
                6 => {
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    let at = f.append(&data).unwrap();
                    assert_eq!(at, model.len() as u64, "seed {seed} step {step}: append");
                    model.extend_from_slice(&data);
                }
                7 if !model.is_empty() => {
                    // A hole punched in the file itself, behind the cache.
                    let off = rng.gen_range(0..model.len() as u64);
                    let len = rng.gen_range(1..=model.len() as u64 - off);
                    f.change_file(|file| {
                        Ok(rustix::fs::fallocate(
                            file,
                            rustix::fs::FallocateFlags::PUNCH_HOLE
                                | rustix::fs::FallocateFlags::KEEP_SIZE,
                            off,
                            len,
                        )?)
                    })
                    .unwrap();
                    model[off as usize..(off + len) as usize].fill(0);
                }
                _ => {
                    let mut buf = vec![0xee; len];
                    let n = f.read_at(&mut buf, off).unwrap();
                    let want = &model[(off as usize).min(model.len())..]
                        [..n.min(model.len().saturating_sub(off as usize))];
                    assert_eq!(n, want.len(), "seed {seed} step {step}: read length");
                    assert!(
                        buf[..n] == *want,
                        "seed {seed} step {step}: read bytes at {off}"
                    );
                }
            }
            assert_eq!(f.len().unwrap(), model.len() as u64);
        }
        cache.verify().unwrap();
        f.sync_all().unwrap();
        assert_eq!(
            std::fs::read(&t.path).unwrap(),
            model,
            "seed {seed}: the file"
        );
        let s = cache.stats();
        assert!(s.evictions > 0 && s.hits > 0 && s.misses > 0, "{s:?}");
        assert_eq!(s.dirty, 0);
    }
}

/// A file's unsaved size is found by its (dev, ino) while the group holds
/// unsaved data of it, and not after its writeback; more files than the
/// cache has slots reuse slots (their probes still find every file).
#[test]
fn unsaved_sizes_are_found_by_file_and_slots_are_reused() {
    use std::os::unix::fs::MetadataExt;
    let cache = SharedCache::new(64 * 4096).unwrap();
    let files: Vec<TempPath> = (0..200).map(|_| TempPath::new("shared-slots")).collect();
    for (n, t) in files.iter().enumerate() {
        let f = open(&cache, &t.path, n % 2 == 0);
        let meta = std::fs::metadata(&t.path).unwrap();
        assert_eq!(cache.unsaved_len(meta.dev(), meta.ino()), None);
        f.write_at(&[n as u8; 100], 0).unwrap();
        f.write_at(&[n as u8; 10], 100 + n as u64).unwrap();
        let len = 110 + n as u64;
        assert_eq!(
            cache.unsaved_len(meta.dev(), meta.ino()),
            Some(len),
            "file {n}"
        );
        assert_eq!(std::fs::metadata(&t.path).unwrap().len(), 0);
        f.sync_data().unwrap();
        assert_eq!(cache.unsaved_len(meta.dev(), meta.ino()), None, "file {n}");
    }
    for (n, t) in files.iter().enumerate() {
        let f = open(&cache, &t.path, false);
        let mut buf = vec![0; 400];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 110 + n);
        assert!(buf[..100].iter().all(|&b| b == n as u8), "file {n}");
    }
    cache.verify().unwrap();
}

/// A file handed to the kernel is so for every handle of it, open or
/// opened later, for as long as the cache lives: its slot keeps the mark
/// while more files than the cache has slots pass through the others.
#[test]
fn a_hand_over_lasts_for_every_later_open() {
    use std::os::unix::fs::MetadataExt;
    let cache = SharedCache::new(64 * 4096).unwrap();
    let mapped = TempPath::new("shared-handed");
    let streamed = TempPath::new("shared-handed");
    let f = open(&cache, &mapped.path, false);
    f.write_at(b"abc", 0).unwrap();
    assert!(!f.handed_elsewhere());
    let meta = std::fs::metadata(&mapped.path).unwrap();
    assert!(cache.handed_to_kernel(meta.dev(), meta.ino()));
    assert!(f.handed_elsewhere(), "a handle opened before");
    // A file the cache has no slot for: marked through a handle.
    std::fs::write(&streamed.path, b"x").unwrap();
    let meta2 = std::fs::metadata(&streamed.path).unwrap();
    assert!(!cache.handed_to_kernel(meta2.dev(), meta2.ino()));
    open(&cache, &streamed.path, false)
        .hand_to_kernel()
        .unwrap();
    let others: Vec<TempPath> = (0..150).map(|_| TempPath::new("shared-handed")).collect();
    for t in &others {
        let g = open(&cache, &t.path, false);
        g.write_at(b"y", 0).unwrap();
        g.sync_data().unwrap();
        assert!(!g.handed_elsewhere());
    }
    for t in [&mapped, &streamed] {
        assert!(
            open(&cache, &t.path, false).handed_elsewhere(),
            "opened later"
        );
    }
    assert!(cache.handed_to_kernel(meta.dev(), meta.ino()));
    cache.verify().unwrap();
}

/// A file one process holds in the kernel is taken back by an open once
/// that process is gone (what it wrote there read from the file), not
/// while it lives, and never once two processes held it.
#[test]
fn a_file_is_taken_back_from_the_kernel_once_its_one_holder_is_gone() {
    let t = TempPath::new("shared-take-back");
    let cache = SharedCache::new(64 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(b"abc", 0).unwrap();
    f.sync_data().unwrap();
    let meta = std::fs::metadata(&t.path).unwrap();
    let (dev, ino) = (meta.dev(), meta.ino());
    let mark_and_write = |bytes: &'static [u8]| {
        let (cache, path) = (&cache, &t.path);
        move || {
            cache.handed_to_kernel(dev, ino);
            let file = OpenOptions::new().write(true).open(path).unwrap();
            file.write_all_at(bytes, 0).is_ok()
        }
    };
    // Held by a process gone since: taken back, its write read.
    assert_eq!(wait(fork(mark_and_write(b"xyz"))), 0);
    let g = open(&cache, &t.path, false);
    assert!(g.handed_elsewhere());
    assert!(g.take_back_from_kernel().unwrap());
    assert!(!g.handed_elsewhere() && !f.handed_elsewhere());
    let mut buf = [0u8; 3];
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), 3);
    assert_eq!(&buf, b"xyz");
    // Held by a live process: not taken back until it is gone.
    let mut fds = [0; 2];
    // SAFETY: a pipe into a two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let child = fork(|| {
        cache.handed_to_kernel(dev, ino);
        let mut byte = [0u8];
        // SAFETY: reads the pipe's read end, open in the child.
        unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) == 1 }
    });
    let start = Instant::now();
    while !g.handed_elsewhere() {
        assert!(start.elapsed() < Duration::from_secs(10), "never marked");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!open(&cache, &t.path, false)
        .take_back_from_kernel()
        .unwrap());
    // SAFETY: writes the pipe's write end, open here.
    assert_eq!(unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) }, 1);
    assert_eq!(wait(child), 0);
    assert!(open(&cache, &t.path, false)
        .take_back_from_kernel()
        .unwrap());
    // Held by two (this process, and a child while it lived): for good.
    cache.handed_to_kernel(dev, ino);
    assert_eq!(wait(fork(mark_and_write(b"abc"))), 0);
    assert!(!open(&cache, &t.path, false)
        .take_back_from_kernel()
        .unwrap());
    // SAFETY: closes the pipe's ends, opened above.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    cache.verify().unwrap();
}

/// A file changed behind the group (another program, or a process of
/// the group through the kernel) is read from the file by the next
/// process to open it, unless the group holds unsaved data of it.
#[test]
fn a_file_changed_behind_the_group_is_followed_at_the_next_open() {
    let t = TempPath::new("shared-behind");
    let cache = SharedCache::new(16 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(&[b'a'; 10_000], 0).unwrap();
    f.sync_data().unwrap();
    let mut buf = vec![0; 10_000];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 10_000);
    drop(f);
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&t.path, [b'b'; 300]).unwrap();
    let g = open(&cache, &t.path, true);
    assert_eq!(g.len().unwrap(), 300);
    let mut buf = vec![0; 1000];
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), 300);
    assert!(buf[..300].iter().all(|&b| b == b'b'));
    // Unsaved data of the group wins over a change behind it.
    g.write_at(b"group", 0).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&t.path, [b'c'; 50]).unwrap();
    let h = open(&cache, &t.path, false);
    assert_eq!(h.len().unwrap(), 300);
    h.sync_data().unwrap();
    let disk = std::fs::read(&t.path).unwrap();
    assert_eq!(&disk[..5], b"group");
    assert!(disk[5..].iter().all(|&b| b == b'b'), "{}", disk.len());
    cache.verify().unwrap();
}

/// A handle kept across opens follows a change behind the group when
/// asked (`SharedFile::follow`), as a fresh open would; with unsaved
/// data of the group, the group's data stays.
#[test]
fn a_kept_handle_follows_a_change_behind_the_group() {
    let t = TempPath::new("shared-follow");
    let cache = SharedCache::new(16 * 4096).unwrap();
    let f = open(&cache, &t.path, true);
    f.write_at(&[b'a'; 5000], 0).unwrap();
    f.sync_data().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&t.path, [b'b'; 100]).unwrap();
    let mut buf = vec![0; 5000];
    // Not looked at yet: the group's view.
    assert_eq!(f.len().unwrap(), 5000);
    f.follow().unwrap();
    assert_eq!(f.len().unwrap(), 100);
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 100);
    assert!(buf[..100].iter().all(|&b| b == b'b'));
    // Nothing changed since: following keeps the pages (no load).
    let misses = cache.stats().misses;
    f.follow().unwrap();
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 100);
    assert_eq!(cache.stats().misses, misses);
    // Unsaved data of the group wins.
    f.write_at(b"group", 0).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&t.path, [b'c'; 10]).unwrap();
    f.follow().unwrap();
    assert_eq!(f.len().unwrap(), 100);
    assert_eq!(f.read_at(&mut buf[..5], 0).unwrap(), 5);
    assert_eq!(&buf[..5], b"group");
    cache.verify().unwrap();
}

/// The group's own writeback is not taken for a change behind it (an
/// open after a sync keeps the file's pages: hits, no load), while a
/// change from outside after it, at the same size, is followed; and a
/// file a process hands to the kernel is followed at its next open
/// whatever the kernel's change time then.
#[test]
fn an_open_after_the_groups_sync_keeps_its_pages_and_follows_later_changes() {
    let t = TempPath::new("shared-after-sync");
    let cache = SharedCache::new(16 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(&[b'a'; 3 * 4096], 0).unwrap();
    f.sync_data().unwrap();
    let misses = cache.stats().misses;
    let g = open(&cache, &t.path, false);
    let mut buf = vec![0; 3 * 4096];
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), 3 * 4096);
    assert!(buf.iter().all(|&b| b == b'a'));
    assert_eq!(cache.stats().misses, misses, "the pages were dropped");
    drop((f, g));
    // Changed from outside, in place, at the same size, a tick later.
    std::thread::sleep(Duration::from_millis(20));
    OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap()
        .write_all_at(&[b'b'; 4096], 4096)
        .unwrap();
    let h = open(&cache, &t.path, false);
    assert_eq!(h.read_at(&mut buf, 0).unwrap(), 3 * 4096);
    assert!(buf[..4096].iter().all(|&b| b == b'a'));
    assert!(buf[4096..8192].iter().all(|&b| b == b'b'));
    // Handed to the kernel, changed there at once: followed.
    h.write_at(b"cc", 0).unwrap();
    h.sync_data().unwrap();
    let st = std::fs::metadata(&t.path).unwrap();
    cache.handed_to_kernel(st.dev(), st.ino());
    OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap()
        .write_all_at(b"dd", 0)
        .unwrap();
    let k = open(&cache, &t.path, false);
    assert_eq!(k.read_at(&mut buf[..2], 0).unwrap(), 2);
    assert_eq!(&buf[..2], b"dd");
    cache.verify().unwrap();
}

/// The group's flusher writes back what passes a quarter of the cache
/// dirty, with no sync and no writer throttled; below it, nothing, until
/// the expiry; it stops when dropped.
#[test]
fn the_flusher_writes_back_past_a_quarter_of_the_cache_dirty() {
    let t = TempPath::new("shared-flusher");
    let cache = SharedCache::new(32 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(&[b'x'; 4 * 4096], 0).unwrap();
    let flusher = cache.start_flusher().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cache.dirty_pages(), 4, "under a quarter: left dirty");
    f.write_at(&[b'y'; 6 * 4096], 4 * 4096).unwrap();
    assert!(cache.dirty_pages() > cache.pages() / 4);
    let start = Instant::now();
    while cache.dirty_pages() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never written back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(flusher);
    let disk = std::fs::read(&t.path).unwrap();
    assert_eq!(disk.len(), 10 * 4096);
    assert!(disk[..4 * 4096].iter().all(|&b| b == b'x'));
    assert!(disk[4 * 4096..].iter().all(|&b| b == b'y'));
    cache.verify().unwrap();
}

/// Forked processes on one file, each op and its model update under a
/// test lock, the model in shared memory: every read any process makes
/// sees every other's writes, sizes and truncations.
#[test]
fn forked_processes_against_a_shared_model() {
    const PROCS: u64 = 4;
    const MAX: usize = 24 * 4096;
    let t = TempPath::new("shared-forked");
    let cache = SharedCache::new(12 * 4096).unwrap();
    let f = open(&cache, &t.path, true);
    // Word 0: the test lock; 1: the model's length; 2: mismatches; bytes
    // from 64: the model.
    let shm = Shared::new(64 + MAX + 4096);
    let children: Vec<_> = (0..PROCS)
        .map(|c| {
            let (f, shm) = (&f, &shm);
            fork(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(100 + c);
                for _ in 0..1500 {
                    with_lock(shm.word(0), || step(f, shm, &mut rng, MAX));
                }
                true
            })
        })
        .collect();
    for pid in children {
        assert_eq!(wait(pid), 0, "a child failed");
    }
    assert_eq!(shm.word(2).load(Ordering::Relaxed), 0, "mismatches");
    let len = shm.word(1).load(Ordering::Relaxed) as usize;
    let model: Vec<u8> = (0..len)
        .map(|i| shm.byte(64 + i).load(Ordering::Relaxed))
        .collect();
    cache.verify().unwrap();
    assert_eq!(f.len().unwrap(), len as u64);
    let mut got = vec![0; len];
    assert_eq!(f.read_at(&mut got, 0).unwrap(), len);
    assert!(got == model, "the parent's read");
    f.sync_data().unwrap();
    assert!(std::fs::read(&t.path).unwrap() == model, "the file");
}

/// One random operation of the forked checker, the test lock held.
fn step(f: &SharedFile, shm: &Shared, rng: &mut impl Rng, max: usize) {
    let len_now = shm.word(1).load(Ordering::Relaxed) as usize;
    let off = rng.gen_range(0..=len_now.min(max - 8192));
    let len = rng.gen_range(1..8192).min(max - off);
    match rng.gen_range(0..8) {
        0..=2 => {
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            f.write_at(&data, off as u64).unwrap();
            for (i, b) in data.iter().enumerate() {
                shm.byte(64 + off + i).store(*b, Ordering::Relaxed);
            }
            shm.word(1)
                .store(len_now.max(off + len) as u64, Ordering::Relaxed);
        }
        3 => {
            let n = rng.gen_range(0..=len_now);
            f.set_len(n as u64).unwrap();
            for i in n..len_now {
                shm.byte(64 + i).store(0, Ordering::Relaxed);
            }
            shm.word(1).store(n as u64, Ordering::Relaxed);
        }
        _ => {
            let mut buf = vec![0; len];
            let n = f.read_at(&mut buf, off as u64).unwrap();
            let want = len.min(len_now - off);
            let same = n == want
                && (0..n).all(|i| buf[i] == shm.byte(64 + off + i).load(Ordering::Relaxed));
            if !same || f.len().unwrap() != len_now as u64 {
                shm.word(2).fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The checks of the coherence test (`FOLIOCACHE_TEST_CHECKS`; the issue's
/// figure is 1,000,000).
fn checks() -> u64 {
    std::env::var("FOLIOCACHE_TEST_CHECKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

/// A writer process stores increasing counters across a page boundary
/// and says so after each write returns; a reader process reads the
/// count said, then the file: it must see that counter or a later one,
/// and the two halves of one write together.
#[test]
fn a_reader_process_sees_every_completed_write() {
    let t = TempPath::new("shared-coherence");
    let cache = SharedCache::new(64 * 4096).unwrap();
    let f = open(&cache, &t.path, true);
    f.write_at(&[0; 8192], 0).unwrap();
    let shm = Shared::new(4096);
    let n = checks();
    let writer = {
        let (f, shm) = (&f, &shm);
        fork(move || {
            for v in 1..=n {
                let mut rec = [0u8; 16];
                rec[..8].copy_from_slice(&v.to_le_bytes());
                rec[8..].copy_from_slice(&v.to_le_bytes());
                // Across the boundary of pages 0 and 1.
                f.write_at(&rec, 4096 - 8).unwrap();
                shm.word(0).store(v, Ordering::Release);
            }
            true
        })
    };
    let reader = {
        let (f, shm) = (&f, &shm);
        fork(move || {
            let mut checked = 0;
            let mut bad = 0;
            while checked < n {
                let said = shm.word(0).load(Ordering::Acquire);
                let mut rec = [0u8; 16];
                f.read_at(&mut rec, 4096 - 8).unwrap();
                let a = u64::from_le_bytes(rec[..8].try_into().unwrap());
                let b = u64::from_le_bytes(rec[8..].try_into().unwrap());
                bad += u64::from(a < said || b < said);
                checked += 1;
                if said == n {
                    break;
                }
            }
            shm.word(1).store(checked, Ordering::Relaxed);
            bad == 0
        })
    };
    assert_eq!(wait(writer), 0);
    assert_eq!(wait(reader), 0, "a read missed a completed write");
    let mut rec = [0u8; 16];
    f.read_at(&mut rec, 4096 - 8).unwrap();
    assert_eq!(u64::from_le_bytes(rec[..8].try_into().unwrap()), n);
    cache.verify().unwrap();
}

/// The kills of the kill test (`FOLIOCACHE_TEST_KILLS`; the figure
/// is 1,000).
fn kills() -> u32 {
    std::env::var("FOLIOCACHE_TEST_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

/// Byte `o` of writer `w`'s region as its write `g` writes it.
fn pattern(w: u64, o: u64, g: u64) -> u8 {
    (o.wrapping_mul(31) ^ g.wrapping_mul(0x9e37_79b9) ^ w.wrapping_mul(77)) as u8 | 1
}

/// Three writer processes, each rewriting its own region of one file in
/// a cache too small for it (so writes evict, load and write back), are
/// killed with SIGKILL at random moments, one at a time, and replaced;
/// between kills the cache is checked consistent. At the end every
/// writer's last completed write reads back, from the cache and, after
/// `write_back_all`, from the file.
#[test]
fn writers_killed_at_random_lose_no_accepted_byte() {
    const WRITERS: u64 = 3;
    const REGION: u64 = 20 * 4096;
    let t = TempPath::new("shared-kills");
    let cache = SharedCache::new(32 * 4096).unwrap();
    let f = open(&cache, &t.path, true);
    // Per writer: word 8w = its last completed generation (the whole
    // region written with it), 8w+1 = the generation it is writing.
    let shm = Shared::new(4096);
    let start = |w: u64| {
        let (f, shm) = (&f, &shm);
        fork(move || {
            let mut g = shm.word(8 * w as usize).load(Ordering::Relaxed);
            loop {
                g += 1;
                shm.word(8 * w as usize + 1).store(g, Ordering::Relaxed);
                let data: Vec<u8> = (0..REGION).map(|o| pattern(w, o, g)).collect();
                for chunk in 0..REGION / 8192 {
                    let at = (chunk * 8192) as usize;
                    f.write_at(&data[at..at + 8192], w * REGION + at as u64)
                        .unwrap();
                }
                shm.word(8 * w as usize).store(g, Ordering::Release);
                if g % 7 == 0 {
                    f.sync_data().unwrap();
                }
            }
        })
    };
    let mut pids: Vec<_> = (0..WRITERS).map(start).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..kills() {
        std::thread::sleep(Duration::from_micros(rng.gen_range(200..20_000)));
        let w = rng.gen_range(0..WRITERS) as usize;
        // SAFETY: our own child.
        unsafe { libc::kill(pids[w], libc::SIGKILL) };
        assert_eq!(wait(pids[w]), -libc::SIGKILL);
        pids[w] = start(w as u64);
    }
    for pid in &pids {
        // SAFETY: our own children.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
        wait(*pid);
    }
    // The pages a writer was writing when killed hold its last completed
    // generation or the one it was writing; every other page the last.
    let check = |w: u64, data: &[u8]| {
        let done = shm.word(8 * w as usize).load(Ordering::Relaxed);
        let writing = shm.word(8 * w as usize + 1).load(Ordering::Relaxed);
        for page in 0..REGION / 4096 {
            let got = &data[(page * 4096) as usize..][..4096];
            let ok = [done, writing].iter().any(|&g| {
                g > 0
                    && got
                        .iter()
                        .enumerate()
                        .all(|(i, b)| *b == pattern(w, page * 4096 + i as u64, g))
            });
            assert!(
                ok || done == 0,
                "writer {w} page {page}: neither generation {done} nor {writing}"
            );
        }
    };
    cache.verify().unwrap();
    for w in 0..WRITERS {
        let mut buf = vec![0; REGION as usize];
        f.read_at(&mut buf, w * REGION).unwrap();
        check(w, &buf);
    }
    cache.write_back_all().unwrap();
    let disk = std::fs::read(&t.path).unwrap();
    for w in 0..WRITERS {
        check(w, &disk[(w * REGION) as usize..][..REGION as usize]);
    }
    assert!(
        cache.stats().recoveries > 0 || kills() < 20,
        "{:?}",
        cache.stats()
    );
}

/// A second handle attaches by the memory file; a memory file that is
/// not a segment is refused.
#[test]
fn attach_by_memory_file() {
    let t = TempPath::new("shared-attach");
    let cache = SharedCache::new(8 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(b"hello", 0).unwrap();
    let fd = cache.memory_file().try_clone_to_owned().unwrap();
    let other = SharedCache::attach(fd).unwrap();
    let g = open(&other, &t.path, false);
    let mut buf = [0; 5];
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), 5);
    assert_eq!(&buf, b"hello");
    // No one can resize the segment under the others.
    let seg = cache.memory_file();
    let len = rustix::fs::fstat(seg).unwrap().st_size as u64;
    assert!(rustix::fs::ftruncate(seg, len / 2).is_err());
    assert!(rustix::fs::ftruncate(seg, len * 2).is_err());
    let not = rustix::fs::memfd_create("not", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&not, 1 << 20).unwrap();
    assert!(SharedCache::attach(not).is_err());
    let tiny = rustix::fs::memfd_create("tiny", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    assert!(SharedCache::attach(tiny).is_err());
    assert!(SharedCache::new(0).is_err());
    assert!(f.write_at(b"x", u64::MAX - 1).is_err());
}

/// A process scribbles random bytes over the segment's metadata (index,
/// descriptors, slots, locks) while others read and write: none crashes
/// or hangs; each call returns (wrong bytes allowed, an error allowed).
#[test]
fn a_scribbled_segment_crashes_no_one() {
    let t = TempPath::new("shared-scribble");
    let cache = SharedCache::new(16 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(&vec![7; 64 * 4096], 0).unwrap();
    let fd = cache.memory_file();
    let len = rustix::fs::fstat(fd).unwrap().st_size as usize;
    // The metadata: all but the 16 data pages at the end.
    let meta = len - 16 * 4096;
    let shm = Shared::new(4096);
    let scribbler = {
        let shm = &shm;
        fork(move || {
            // SAFETY: maps the segment in this child only.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            }
            .cast::<AtomicU32>();
            let mut rng = rand::rngs::StdRng::seed_from_u64(3);
            while shm.word(0).load(Ordering::Relaxed) == 0 {
                for _ in 0..64 {
                    let at = rng.gen_range(0..meta / 4);
                    // SAFETY: inside the mapping, aligned.
                    unsafe { (*base.add(at)).store(rng.gen(), Ordering::Relaxed) };
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            true
        })
    };
    // The scribbler dies with this test, whatever happens here.
    struct Kill(libc::pid_t);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: our own child (a pid we have not yet waited for).
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let kill = Kill(scribbler);
    let began = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let mut errors = 0;
    while began.elapsed() < Duration::from_secs(2) {
        let off = rng.gen_range(0..64 * 4096u64);
        let mut buf = [0; 512];
        errors += u32::from(f.read_at(&mut buf, off).is_err());
        errors += u32::from(f.write_at(&buf[..100], off).is_err());
    }
    shm.word(0).store(1, Ordering::Relaxed);
    assert_eq!(wait(scribbler), 0);
    std::mem::forget(kill);
    eprintln!("{errors} calls failed over a scribbled segment");
    // The group's curve, its ring and published words scribbled on too:
    // wrong figures at worst, each in range, never a failure.
    if let Some(c) = cache.hit_ratio_curve() {
        for p in c.points {
            assert!((0.0..=1.0).contains(&p.hit_ratio), "{c:?}");
            assert!((0.0..=1.0).contains(&p.bound), "{c:?}");
        }
    }
}

/// The crash-point script's operations, in order: `(offset, length,
/// truncate-to)`; a length of 0 is a truncation to the third field, a
/// length of `usize::MAX` a `sync_data`.
const SCRIPT: &[(u64, usize, u64)] = &[
    (0, 6000, 0),
    (5000, 9000, 0),
    (30_000, 12_000, 0),
    (0, usize::MAX, 0),
    (61_000, 7000, 0),
    (0, 0, 50_000),
    (20_000, 4096, 0),
    (0, usize::MAX, 0),
    (45_000, 30_000, 0),
];

/// Byte `o` as the script's operation `i` writes it.
fn script_byte(o: u64, i: usize) -> u8 {
    (o.wrapping_mul(13) as u8) ^ (i as u8 + 1).wrapping_mul(37)
}

/// The model after the script's first `n` operations, over a file that
/// held `initial`.
fn script_model(initial: &[u8], n: usize) -> Vec<u8> {
    let mut m = initial.to_vec();
    for (i, &(off, len, to)) in SCRIPT.iter().enumerate().take(n) {
        match len {
            0 => m.resize(to as usize, 0),
            usize::MAX => {}
            _ => {
                let end = off as usize + len;
                if m.len() < end {
                    m.resize(end, 0);
                }
                for (o, b) in m.iter_mut().enumerate().take(end).skip(off as usize) {
                    *b = script_byte(o as u64, i);
                }
            }
        }
    }
    m
}

/// Kills a process at every crash point of a script of writes, loads,
/// evictions, write-backs and a truncation through a 6-page cache (the
/// process `_exit`s inside the step: holding whatever it held), then
/// checks: the segment's invariants; every operation that returned reads
/// back (the one cut short may have left each of its pages old or new);
/// and another process can still do everything (no lock stays held).
#[test]
fn a_process_killed_at_every_crash_point() {
    use foliocache::internals::shared_crash;
    let initial: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut n = 1;
    loop {
        let t = TempPath::with_data("shared-points", &initial);
        let cache = SharedCache::new(6 * 4096).unwrap();
        let f = open(&cache, &t.path, true);
        let shm = Shared::new(4096);
        let child = {
            let (f, shm) = (&f, &shm);
            fork(move || {
                shared_crash::die_at(n);
                let mut buf = vec![0; 80_000];
                for (i, &(off, len, to)) in SCRIPT.iter().enumerate() {
                    match len {
                        0 => f.set_len(to).unwrap(),
                        usize::MAX => f.sync_data().unwrap(),
                        _ => {
                            let data: Vec<u8> =
                                (off..off + len as u64).map(|o| script_byte(o, i)).collect();
                            f.write_at(&data, off).unwrap();
                        }
                    }
                    shm.word(0).store(i as u64 + 1, Ordering::Release);
                    // A read of everything: misses, evictions, write-backs.
                    f.read_at(&mut buf, 0).unwrap();
                }
                shared_crash::die_at(0);
                false
            })
        };
        let status = wait(child);
        let done = shm.word(0).load(Ordering::Acquire) as usize;
        cache.verify().unwrap_or_else(|e| panic!("point {n}: {e}"));
        // What the parent reads: the model after `done` operations, but
        // for the pages of the operation cut short.
        let want = script_model(&initial, done);
        let next = script_model(&initial, (done + 1).min(SCRIPT.len()));
        let len = f.len().unwrap() as usize;
        // A write moves the size a page at a time, as its bytes go in.
        let (lo, hi) = (want.len().min(next.len()), want.len().max(next.len()));
        assert!(
            (lo..=hi).contains(&len),
            "point {n} after {done} operations: size {len}, want {} to {}",
            want.len(),
            next.len()
        );
        let mut got = vec![0; len];
        assert_eq!(f.read_at(&mut got, 0).unwrap(), len);
        for page in 0..len.div_ceil(4096) {
            let r = page * 4096..((page + 1) * 4096).min(len);
            let is = |m: &Vec<u8>| m.len() >= r.end && got[r.clone()] == m[r.clone()];
            let zero_tail =
                |m: &Vec<u8>| (r.start..r.end).all(|o| got[o] == m.get(o).copied().unwrap_or(0));
            assert!(
                is(&want) || is(&next) || zero_tail(&want) || zero_tail(&next),
                "point {n} after {done} operations: page {page} is neither before nor after"
            );
        }
        // Everyone else goes on: writes, reads, a write-back, through the
        // locks the child may have died holding.
        f.write_at(&[9; 10_000], 1000).unwrap();
        let mut back = [0; 10_000];
        f.read_at(&mut back, 1000).unwrap();
        assert!(back.iter().all(|&b| b == 9), "point {n}: the write after");
        // Past the size there is nothing, whatever the child left there:
        // an extension reads zeros.
        let end = f.len().unwrap();
        f.set_len(end + 3 * 4096).unwrap();
        let mut past = vec![1; 3 * 4096];
        assert_eq!(f.read_at(&mut past, end).unwrap(), past.len());
        let nz: Vec<usize> = (0..past.len()).filter(|&i| past[i] != 0).collect();
        assert!(nz.is_empty(), "point {n}: bytes past the size {end}: {} nonzero from {:?} to {:?}, done {done}, status {status}", nz.len(), nz.first(), nz.last());
        f.sync_data().unwrap();
        cache
            .verify()
            .unwrap_or_else(|e| panic!("point {n}, after: {e}"));
        if status == 1 {
            // The script ran to its end: every point was tried.
            assert!(n > 100, "only {n} crash points");
            eprintln!("{} crash points, each killed once", n - 1);
            break;
        }
        assert_eq!(status, 0, "point {n}: the child failed");
        n += 1;
    }
}

/// Bytes of this process's mappings of the memory file named `name`
/// (`/memfd:NAME`), from `/proc/PID/smaps`: (resident, proportional).
fn segment_memory(pid: libc::pid_t, name: &str) -> (u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut rss, mut pss, mut inside) = (0, 0, false);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            inside = line.contains(&format!("/memfd:{name}"));
            continue;
        }
        if !inside {
            continue;
        }
        let kb = |l: &str| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024;
        if line.starts_with("Rss:") {
            rss += kb(line);
        } else if line.starts_with("Pss:") {
            pss += kb(line);
        }
    }
    (rss, pss)
}

/// Eight processes read one 16 MiB file through the cache: the group
/// holds one copy. The segment's proportional resident memory summed
/// over the nine processes is at most 1.1x what the one that maps most
/// of it maps (the creator, where the cache's pages are 2 MiB pages it
/// faulted in whole: `SharedCache::new`).
#[test]
fn eight_processes_hold_one_copy() {
    // The file's MiB (`FOLIOCACHE_TEST_COPIES_MIB`; the figure is
    // 1024, run by hand).
    let mib = test_support::env_or("FOLIOCACHE_TEST_COPIES_MIB", 16usize);
    let size = mib << 20;
    let t = TempPath::with_data("shared-copies", &vec![5u8; size]);
    let cache = SharedCache::new((size + (4 << 20)) as u64).unwrap();
    // The pages made 2 MiB pages first: a collapse after a reader's reads
    // would take the small pages out of its page tables, and its Rss with
    // them, though the bytes stay.
    cache.wait_huge_pages();
    let f = open(&cache, &t.path, true);
    let shm = Shared::new(4096);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (f, shm) = (&f, &shm);
            fork(move || {
                let mut buf = vec![0; 1 << 20];
                for off in (0..size).step_by(buf.len()) {
                    f.read_at(&mut buf, off as u64).unwrap();
                }
                shm.word(0).fetch_add(1, Ordering::AcqRel);
                // Stay until the parent has looked.
                while shm.word(1).load(Ordering::Acquire) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                buf.iter().all(|&b| b == 5)
            })
        })
        .collect();
    while shm.word(0).load(Ordering::Acquire) < 8 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (one_rss, _) = segment_memory(readers[0], "foliocache-shared");
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let (most_rss, group_pss) = readers
        .iter()
        .chain(std::iter::once(&me))
        .map(|&pid| segment_memory(pid, "foliocache-shared"))
        .fold((0, 0), |(most, sum), (rss, pss)| (most.max(rss), sum + pss));
    shm.word(1).store(1, Ordering::Release);
    for pid in readers {
        assert_eq!(wait(pid), 0);
    }
    println!(
        "{mib} MiB read by 8 processes: one reader's Rss of the segment {one_rss} bytes, \
         the most one process maps {most_rss}, the group's Pss {group_pss} ({:.3}x)",
        group_pss as f64 / most_rss as f64
    );
    assert!(one_rss >= size as u64, "one reader maps {one_rss} bytes");
    assert!(
        group_pss as f64 <= most_rss as f64 * 1.1,
        "the group holds {group_pss} bytes where one process maps at most {most_rss}"
    );
    assert_eq!(cache.stats().cached, (size / 4096) as u64);
}

/// The group's reads: two forked children read a file the parent wrote
/// (one hit a page each, 3,000 times, then a miss each after a page was
/// dropped) and exit; the parent's `stats` counts every child's hits and
/// misses as they published them (each at least its thousands, the last
/// few of a thread perhaps not), beside its own; a child forked after
/// the parent counted (its counters start as copies of the parent's)
/// adds only its own.
#[test]
fn the_groups_reads_are_counted_across_processes_and_outlive_them() {
    let t = TempPath::new("shared-group-reads");
    let cache = SharedCache::new(64 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(&[7u8; 8192], 0).unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..500 {
        f.read_at(&mut buf, 0).unwrap();
    }
    let before = cache.stats();
    assert_eq!(before.hits, 500, "{before:?}");
    assert!(before.group_hits >= 500, "{before:?}");
    let kids: Vec<_> = (0..2)
        .map(|_| {
            let c = cache.clone();
            let path = t.path.clone();
            fork(move || {
                let f = open(&c, &path, false);
                let mut buf = [0u8; 4096];
                for _ in 0..3000 {
                    if f.read_at(&mut buf, 4096).unwrap() != 4096 || buf[0] != 7 {
                        return false;
                    }
                }
                // Its own count, published at `stats`: the parent's 500
                // copied into it are not its.
                let s = c.stats();
                s.hits == 3500
            })
        })
        .collect();
    for k in kids {
        assert_eq!(wait(k), 0);
    }
    let after = cache.stats();
    assert_eq!(after.hits, 500, "{after:?}");
    assert_eq!(after.group_hits, before.group_hits + 6000, "{after:?}");
    assert_eq!(after.group_misses, before.group_misses, "{after:?}");
}

/// A file served through a descriptor opened read-only takes no change:
/// its writes, appends, size changes and file changes are refused
/// (`PermissionDenied`), and the group (a handle opened for writing)
/// finds the file as it was. What a handle writes into the cache another
/// process writes back with its own descriptor, so the right to write is
/// the handle's descriptor's.
#[test]
fn a_read_only_descriptor_changes_nothing() {
    let t = TempPath::new("shared-read-only");
    let cache = SharedCache::new(64 * 4096).unwrap();
    let rw = open(&cache, &t.path, false);
    rw.write_at(b"the group's", 0).unwrap();
    let ro = cache.open(std::fs::File::open(&t.path).unwrap()).unwrap();
    assert!(rw.is_writable() && !ro.is_writable());
    let denied = |r: std::io::Result<()>| {
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::PermissionDenied);
    };
    denied(ro.write_at(b"THE", 0).map(drop));
    denied(ro.append(b"more").map(drop));
    denied(ro.set_len(3));
    denied(ro.change_file(|_| Ok(())));
    let mut buf = [0u8; 11];
    assert_eq!(rw.read_at(&mut buf, 0).unwrap(), 11);
    assert_eq!(&buf, b"the group's");
    assert_eq!(ro.len().unwrap(), 11);
}
