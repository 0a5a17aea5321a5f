//! The group's misses (docs/design.md section 13, "Misses"): a read that
//! misses loads its run of missing pages in one IO, a sequential reader's
//! misses read ahead a growing window, and what the IOs bring in is the
//! file's bytes.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use foliocache::{SharedCache, SharedFile};
use test_support::TempPath;

/// Read system calls of this thread (`/proc/thread-self/io`'s `syscr`:
/// the cache's loads run on the reading thread; other tests' threads do
/// not count here) since a look.
struct Reads(u64);

impl Reads {
    /// `syscr` now, in one `read` of the file (counted after it reports).
    fn syscr() -> u64 {
        let mut buf = [0u8; 4096];
        let n = std::fs::File::open("/proc/thread-self/io")
            .and_then(|mut f| f.read(&mut buf))
            .expect("IO accounting");
        std::str::from_utf8(&buf[..n])
            .expect("text")
            .lines()
            .find_map(|l| l.strip_prefix("syscr: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("syscr")
    }

    fn look() -> Reads {
        Reads(Reads::syscr())
    }

    /// The reads since the look, less the look's own.
    fn since(&self) -> u64 {
        Reads::syscr() - self.0 - 1
    }
}

/// A file of 1 MiB of a pattern, served by a cache of as much through
/// `O_DIRECT`; its bytes.
fn served(t: &TempPath, cache: &SharedCache) -> (SharedFile, Vec<u8>) {
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&t.path, &data).expect("write");
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&t.path)
        .expect("open");
    (cache.open(f).expect("serve"), data)
}

#[test]
fn a_miss_reads_its_run_of_pages_in_one_io() {
    let t = TempPath::new("shared-reads-run");
    let cache = SharedCache::new(1 << 20).expect("cache");
    let (f, data) = served(&t, &cache);
    let mut buf = vec![0u8; 64 << 10];
    // This process's first miss registers it (a read of /proc).
    f.read_at(&mut buf[..10], 900 << 10).expect("read");
    let m0 = cache.stats().misses;
    // A random 64 KiB read (pages 64 to 79): one IO, 16 pages loaded.
    let r = Reads::look();
    assert_eq!(f.read_at(&mut buf, 256 << 10).expect("read"), 64 << 10);
    assert_eq!(r.since(), 1, "one IO for the read's 16 pages");
    assert_eq!(buf, data[256 << 10..320 << 10]);
    assert_eq!(cache.stats().misses - m0, 16);
    // Read again: hits.
    buf.fill(0);
    let r = Reads::look();
    f.read_at(&mut buf, 256 << 10).expect("read");
    assert_eq!(r.since(), 0, "no IO for hits");
    assert_eq!(buf, data[256 << 10..320 << 10]);
    // Across the cached run: the pages missing before it, then after it,
    // one IO each, the bytes the file's.
    let at = (256 << 10) - 10_000;
    let mut wide = vec![0u8; 100_000];
    let r = Reads::look();
    assert_eq!(f.read_at(&mut wide, at as u64).expect("read"), wide.len());
    assert_eq!(r.since(), 2, "a run before the cached pages, one after");
    assert_eq!(wide, data[at..at + wide.len()]);
    cache.verify().expect("consistent");
}

#[test]
fn a_sequential_readers_misses_read_ahead_a_growing_window() {
    let t = TempPath::new("shared-reads-ahead");
    let cache = SharedCache::new(1 << 20).expect("cache");
    let (f, data) = served(&t, &cache);
    let mut page = vec![0u8; 4096];
    f.read_at(&mut page[..10], 900 << 10).expect("read");
    // Page 0 loads pages 0 to 4 (a window of 4); page 5, where the next
    // miss was expected, pages 5 to 13 (a window of 8): 2 IOs for 14 pages.
    let r = Reads::look();
    let mut got = Vec::new();
    for p in 0..14 {
        f.read_at(&mut page, p * 4096).expect("read");
        got.extend_from_slice(&page);
    }
    assert_eq!(r.since(), 2, "two IOs, the second twice the first");
    assert_eq!(got, data[..14 * 4096]);
    // The next page was read ahead by neither: a third IO.
    let r = Reads::look();
    f.read_at(&mut page, 14 * 4096).expect("read");
    assert_eq!(r.since(), 1);
    cache.verify().expect("consistent");
}
