//! Random reads and readahead (`page_cache_sync_ra`'s look-back,
//! `page_cache_async_ra`'s marker, `page_cache_ra_unbounded`'s
//! insertion): a random reader whose neighbours are cached reads at most
//! the kernel's default window, whatever a stream's may be, and a window
//! takes memory only for the pages it reads. Together: random 64 KiB
//! reads over a file of exactly the cache's size leave it whole, each
//! byte read from the backing once (the advisor's pool at 2x, which held
//! only part of the file before).

use foliocache::{Cache, File, ReadaheadConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::cache::{mem_file, TestCache};

const P: u64 = 4096;

/// The kernel's default window (`VM_READAHEAD_PAGES`), in pages.
const KERNEL_WINDOW: u64 = ReadaheadConfig::kernel().max_pages;

/// A file of `pages` whose every byte says where it is (page and byte).
fn data(pages: u64) -> Vec<u8> {
    (0..pages * P)
        .map(|i| ((i / P) as u8) ^ (i as u8) | 1)
        .collect()
}

/// Reads 16 pages at page `at` ([`read`]).
fn read16(file: &File, want: &[u8], at: u64) -> u64 {
    read(file, want, at, 16)
}

/// Reads `pages` at page `at`, checks them against `want`, and returns
/// the pages the file holds cached after it.
fn read(file: &File, want: &[u8], at: u64, pages: u64) -> u64 {
    let mut buf = vec![0u8; (pages * P) as usize];
    let n = file.read_at(&mut buf, at * P).expect("read");
    assert_eq!(n, buf.len());
    let from = (at * P) as usize;
    assert!(
        buf == want[from..from + buf.len()],
        "wrong bytes at page {at}"
    );
    let len = want.len() as u64;
    file.cachestat(0, len).expect("cachestat").cached
}

/// A random 64 KiB read whose pages before it are cached (the kernel's
/// traces of a stream, which a random reader's own reads leave too)
/// reads at most the kernel's window, not the cache's largest; and the
/// marker of that window, met by the next random read there, starts at
/// most the kernel's window too, however far readahead may go for a
/// stream (2,048 pages here).
#[test]
fn a_random_read_beside_cached_pages_reads_at_most_the_kernels_window() {
    // 64 MiB: windows of up to 2,048 pages (an eighth of the cache).
    let cache: Cache = TestCache::bytes(64 << 20).build();
    let pages = 4096;
    let want = data(pages);
    let file = mem_file(&cache, &want);
    // Random reads (none where the last ended, none at page 0) that leave
    // pages 984..1016 cached, each read as is.
    let mut cached = 0;
    for at in [984, 3000, 1000, 2000] {
        cached = read16(&file, &want, at);
    }
    assert_eq!(cached, 64, "four reads of 16 pages, nothing read ahead");
    // A miss at 1016 after a read elsewhere, 32 pages cached before it: a
    // window (more cached than asked), of the kernel's size at most.
    read16(&file, &want, 3500);
    let before = cached + 16;
    let after = read16(&file, &want, 1016);
    assert!(
        after - before > 16 && after - before <= KERNEL_WINDOW,
        "the look-back window read {} pages (the kernel's: {KERNEL_WINDOW} at most)",
        after - before
    );
    // Its marker (on its last page), met by a random read of the 32
    // pages after the request (a read elsewhere between): the window it
    // starts is again no more than the kernel's, and so is the one that
    // window's own marker starts, which the read reaches too (as the
    // kernel's would).
    read16(&file, &want, 2500);
    let before = after + 16;
    let after = read(&file, &want, 1032, 32);
    assert!(
        after - before <= 2 * KERNEL_WINDOW,
        "the markers' windows read {} pages (the kernel's: {KERNEL_WINDOW} each at most)",
        after - before
    );
}

/// Random 64 KiB reads over a file of exactly the cache's size, until
/// every range was read, then as many again: the file stays whole (no
/// eviction), the second half is read from memory only, and every byte
/// came from the backing once.
#[test]
fn random_reads_over_a_file_of_the_caches_size_leave_it_whole() {
    let pages = 2048;
    let cache = TestCache::bytes((pages * P) as usize).build();
    let want = data(pages);
    let file = mem_file(&cache, &want);
    let ranges = pages / 16;
    let mut seen = vec![false; ranges as usize];
    let mut left = ranges;
    let mut rng = StdRng::seed_from_u64(85);
    let mut reads = 0u64;
    while left > 0 {
        let r = rng.gen_range(0..ranges);
        read16(&file, &want, r * 16);
        reads += 1;
        if !std::mem::replace(&mut seen[r as usize], true) {
            left -= 1;
        }
        assert!(reads < 100 * ranges, "every range read by now");
    }
    let s = cache.stats();
    assert_eq!(s.evictions, 0, "the file fits: nothing evicted");
    assert_eq!(
        s.io_bytes,
        pages * P,
        "each byte read from the backing once"
    );
    for _ in 0..reads {
        read16(&file, &want, rng.gen_range(0..ranges) * 16);
    }
    let t = cache.stats();
    assert_eq!(t.evictions, 0, "nothing evicted");
    assert_eq!(t.io_bytes, s.io_bytes, "nothing read again");
    assert_eq!(
        t.memory_bytes() - s.memory_bytes(),
        t.read_bytes - s.read_bytes,
        "the second half all from memory"
    );
}
