//! The group's pages in 2 MiB pages (`SharedCache::new` collapses them,
//! docs/design.md "Huge pages of shared memory"), and the guardian's
//! arena likewise: mapped by 2 MiB entries in the creator and in a
//! process that attaches, and every byte as written, while reads and
//! writes ran during the collapse.

use foliocache::{Guardian, SharedCache};
use test_support::cache::TestCache;
use test_support::{skip_or_fail, TempPath};

use super::open;

/// Each mapping in this process of the cache's memory file (by its inode:
/// other tests' groups in this process map memory files of the same name):
/// its bytes mapped by 2 MiB entries (`ShmemPmdMapped` in
/// `/proc/self/smaps`).
fn pmd_mapped(cache: &SharedCache) -> Vec<u64> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let fd = cache.memory_file().as_raw_fd();
    let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .expect("the memory file")
        .ino()
        .to_string();
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut out = Vec::new();
    let mut ours = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // address, permissions, offset, device, inode, path
            ours = line.split_whitespace().nth(4) == Some(ino.as_str());
        } else if ours && first == "ShmemPmdMapped:" {
            let kb: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            out.push(kb << 10);
        }
    }
    out
}

/// The file's first `len` bytes through `f`.
fn read_all(f: &foliocache::SharedFile, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    let mut at = 0;
    while at < buf.len() {
        let n = f.read_at(&mut buf[at..], at as u64).expect("read");
        assert!(n > 0, "end of file at {at}");
        at += n;
    }
    buf
}

fn byte(off: u64) -> u8 {
    (off / 4096 * 31 + off % 251) as u8
}

/// A file of `len` bytes of [`byte`], and those bytes.
fn data_file(tag: &str, len: u64) -> (TempPath, Vec<u8>) {
    let want: Vec<u8> = (0..len).map(byte).collect();
    (TempPath::with_data(tag, &want), want)
}

#[test]
fn the_groups_pages_are_2_mib_pages_in_every_process() {
    let test = "shared::huge: the group's pages";
    const LEN: u64 = 12 << 20;
    let (file, want) = data_file("shared-huge", LEN);
    let path = &file.path;
    let cache = SharedCache::new(16 << 20).expect("cache");
    // Reads (misses: O_DIRECT reads into the pages) and writes while the
    // pages are being collapsed.
    let f = open(&cache, path, true);
    assert!(
        read_all(&f, LEN) == want,
        "the bytes read during the collapse"
    );
    for off in (0..LEN).step_by(1 << 20) {
        f.write_at(&[byte(off)], off).expect("write");
    }
    let huge = cache.wait_huge_pages();
    if huge == 0 {
        skip_or_fail(
            test,
            "the kernel collapsed no shared memory (MADV_COLLAPSE: Linux 6.1)",
        );
        return;
    }
    assert_eq!(huge, 16 << 20, "every 2 MiB block of the pages");
    assert_eq!(cache.stats().huge_bytes, huge);
    // Another process's view: a second mapping of the memory file, as a
    // process that attaches makes it.
    let fd = cache.memory_file().try_clone_to_owned().expect("dup");
    let other = SharedCache::attach(fd).expect("attach");
    // Not the collapser: it does not wait (its creator may be gone), and
    // reads the same figure.
    assert_eq!(other.wait_huge_pages(), huge);
    let g = open(&other, path, true);
    assert!(
        read_all(&g, LEN) == want,
        "the bytes through the other mapping"
    );
    // Each mapping maps by 2 MiB entries the pages it read (all 12 MiB)
    // and the segment's metadata (the descriptors and index a hit reads
    // first: one block at this size).
    let maps = pmd_mapped(&cache);
    assert_eq!(
        maps.iter().filter(|&&b| b >= LEN + (2 << 20)).count(),
        2,
        "the creator's and the attacher's pages and metadata by 2 MiB entries: {maps:?}"
    );
}

#[test]
fn a_guardians_arena_is_faulted_in_by_2_mib_pages() {
    let test = "shared::huge: the guardian's arena";
    const LEN: u64 = 8 << 20;
    let (file, want) = data_file("guardian-huge", LEN);
    let path = &file.path;
    let cache = TestCache::bytes(16 << 20).guardian(Guardian::Child).build();
    let f = cache.open(path).expect("open");
    let mut got = vec![0u8; LEN as usize];
    f.read_exact_at(&mut got, 0).expect("read");
    assert!(got == want, "the bytes");
    let s = cache.stats();
    if s.shared_huge_bytes == 0 {
        skip_or_fail(
            test,
            "the kernel collapsed no shared memory (MADV_COLLAPSE: Linux 6.1)",
        );
        return;
    }
    // At least the first chunk, which the reader's own first allocation
    // faulted in before any IO into it; a chunk faulted in ahead of
    // allocation while a read already went into it is left in small pages
    // (the kernel does not copy under IO), so not every one.
    assert!(
        s.shared_huge_bytes >= 2 << 20
            && s.shared_huge_bytes.is_multiple_of(2 << 20)
            && s.shared_huge_bytes <= s.populated_bytes,
        "{s:?}"
    );
}

/// Waits up to 10 s for `cache`'s 2 MiB pages to map `bytes`, then a
/// moment more (a block past them must stay small); returns what they map.
fn huge_bytes_settled(cache: &SharedCache, bytes: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cache.stats().huge_bytes < bytes && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    cache.stats().huge_bytes
}

/// A cache made deferred (`SharedCache::new_deferred`, what `foliocache
/// run` makes for a program that has not forked yet) is not joined and
/// makes no 2 MiB page; once started (`start_huge_pages`), each 2 MiB of
/// pages is made one only when the pages the group has given out come
/// within 16 MiB of it, so the memory faulted in follows the group's use.
#[test]
fn a_deferred_groups_pages_are_made_2_mib_pages_as_its_use_reaches_them() {
    let test = "shared::huge: a deferred group's pages";
    const LEN: u64 = 12 << 20;
    let (file, want) = data_file("shared-huge-deferred", LEN);
    let cache = SharedCache::new_deferred(40 << 20).expect("cache");
    assert!(!cache.joined());
    cache.join();
    let other = SharedCache::attach(cache.memory_file().try_clone_to_owned().expect("dup"))
        .expect("attach");
    assert!(other.joined(), "the mark is the segment's");
    cache.start_huge_pages();
    cache.start_huge_pages();
    let f = open(&cache, &file.path, true);
    // 5 MiB read: the pages of two blocks given out, a third begun: it
    // and the 8 blocks after it are made 2 MiB pages too, 11 of 20.
    assert!(read_all(&f, 5 << 20) == want[..5 << 20], "the first bytes");
    let huge = huge_bytes_settled(&cache, 22 << 20);
    if huge == 0 {
        skip_or_fail(
            test,
            "the kernel collapsed no shared memory (MADV_COLLAPSE: Linux 6.1)",
        );
        return;
    }
    assert_eq!(
        huge,
        22 << 20,
        "the blocks within 16 MiB of the pages given out"
    );
    assert!(read_all(&f, LEN) == want, "every byte, read on");
    assert_eq!(
        huge_bytes_settled(&cache, 30 << 20),
        30 << 20,
        "the six blocks read and the eight after them, 15 of 20"
    );
}

/// The file slots are not made 2 MiB pages: a 256 MiB cache's 4,096
/// slots (16 MiB, seven whole blocks at least) stay holes of the memory
/// file once the collapse of everything else has ended, where zeroing
/// them cost every launch of a group of a few files. In a child process,
/// so that its 2 MiB mappings are not in this one's for the other tests
/// to count.
#[test]
fn the_slots_are_not_collapsed() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let child = super::fork(|| {
        let cache = SharedCache::new(256 << 20).expect("cache");
        if cache.wait_huge_pages() == 0 {
            // SAFETY: ends the child at once, its status saying "skipped".
            unsafe { libc::_exit(2) };
        }
        let fd = cache.memory_file().as_raw_fd();
        let Ok(st) = std::fs::metadata(format!("/proc/self/fd/{fd}")) else {
            return false;
        };
        let (held, size) = (st.blocks() * 512, st.len());
        eprintln!("{held} bytes of {size} held");
        held + (14 << 20) <= size
    });
    match super::wait(child) {
        2 => skip_or_fail(
            "shared::huge: the slots",
            "the kernel collapsed no shared memory (MADV_COLLAPSE: Linux 6.1)",
        ),
        status => assert_eq!(
            status, 0,
            "the slots were faulted in (its stderr says how much)"
        ),
    }
}
