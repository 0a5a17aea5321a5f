//! Fault injection under the cache: failing, short and slow backing reads
//! (through `backing::FaultyBacking`), and what `File::read_at` and the
//! cache's figures make of them.
//!
//! What must hold (`docs/design.md` on backing IO and errors):
//! - a failed read fails exactly the `read_at` that needed those bytes, with
//!   the backing's OS error;
//! - it leaves no uptodate folio behind: once the fault is gone the bytes are
//!   read again from the backing and are right;
//! - nothing stays locked: readers waiting for the failed folio get an error
//!   or retry, they never hang;
//! - the free and cached byte counts add up to the capacity again;
//! - a short read in the middle of a file (which breaks the `Backing`
//!   contract) never turns into wrong bytes or zeros for the caller;
//! - a slow read is issued once, however many readers want that folio.

use std::io::{self};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use backing::{FaultyBacking, FileBacking, FileOptions, MemBacking, Op};
use foliocache::{Cache, File};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common;
// Readahead off: these tests place faults on the IO of one miss and count
// IOs; readahead's own error handling is tested in tests/it/readahead.rs.
use common::assert_at_rest;
use common::write::{wait_until, within};
use test_support::cache::{faulty_file, TestCache};
use test_support::{nonzero_bytes, TempPath};

const PAGE: usize = 4096;
const P: u64 = PAGE as u64;

/// How long any single test step may take before we call it a hang.
const HANG: Duration = Duration::from_secs(20);

/// A cache of `pages` pages, folios up to `max_folio` bytes, no readahead
/// (see above).
fn cache(pages: usize, max_folio: usize) -> Cache {
    TestCache::pages(pages)
        .max_folio(max_folio)
        .no_readahead()
        .build()
}

/// `len` random nonzero bytes (`seed`: zeros in a result are never data)
/// on a fault-injecting memory backing, opened through
/// `cache(pages, max_folio)`: the bytes, the cache, the file, the backing.
fn faulty(
    len: usize,
    seed: u64,
    pages: usize,
    max_folio: usize,
) -> (Vec<u8>, Cache, File, Arc<FaultyBacking<MemBacking>>) {
    let data = nonzero_bytes(len, seed);
    let c = cache(pages, max_folio);
    let (f, b) = faulty_file(&c, &data);
    (data, c, f, b)
}

type FaultyFile = Arc<FaultyBacking<FileBacking>>;

/// `len` random nonzero bytes (`seed`) in a new file `name`, opened
/// O_DIRECT under fault injection through `cache(pages, max_folio)`: the
/// bytes, the file's path, the cache, the file, the backing.
fn faulty_on_disk(
    name: &str,
    len: usize,
    seed: u64,
    pages: usize,
    max_folio: usize,
) -> (Vec<u8>, TempPath, Cache, File, FaultyFile) {
    let data = nonzero_bytes(len, seed);
    let tmp = TempPath::with_data(name, &data);
    let c = cache(pages, max_folio);
    let inner = FileBacking::open(&tmp.path, &FileOptions::new().read(true)).unwrap();
    let b = Arc::new(FaultyBacking::new(inner));
    let f = c.open_backing(b.clone()).unwrap();
    (data, tmp, c, f, b)
}

fn read_vec(f: &File, off: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, off)?;
    buf.truncate(n);
    Ok(buf)
}

fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an injected error, got Ok({v:?})"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("expected an OS error, got {e:?}")),
    }
}

// ---- failing reads ---------------------------------------------------------

#[test]
fn a_failed_read_fails_exactly_the_read_that_needed_the_bytes_over_an_o_direct_file() {
    let (data, _tmp, c, f, b) = faulty_on_disk("eio", 16 * PAGE, 1, 64, PAGE);
    assert!(f.info().is_direct(), "ext4 takes O_DIRECT: {}", f.info());
    b.fail_reads_in(5 * P, P, libc::EIO);

    // The page that needs the bad sector fails, with the injected errno.
    assert_eq!(errno(read_vec(&f, 5 * P, PAGE)), libc::EIO);
    assert_eq!(errno(read_vec(&f, 5 * P + 100, 10)), libc::EIO);
    let mut exact = vec![0u8; PAGE];
    assert_eq!(errno(f.read_exact_at(&mut exact, 5 * P)), libc::EIO);

    // Its neighbours do not.
    assert_eq!(
        read_vec(&f, 4 * P, PAGE).unwrap(),
        &data[4 * PAGE..5 * PAGE]
    );
    assert_eq!(
        read_vec(&f, 6 * P, PAGE).unwrap(),
        &data[6 * PAGE..7 * PAGE]
    );

    // A read that reaches the bad page after good bytes returns the good
    // bytes (documented partial progress) and the next call gets the error.
    let got = read_vec(&f, 4 * P + 10, 3 * PAGE).unwrap();
    assert_eq!(got, &data[4 * PAGE + 10..5 * PAGE]);
    assert_eq!(errno(read_vec(&f, 5 * P, 3 * PAGE)), libc::EIO);
    assert_eq!(
        errno(f.read_exact_at(&mut vec![0u8; 3 * PAGE], 4 * P)),
        libc::EIO
    );

    let s = assert_at_rest(&c);
    assert_eq!(s.folios, 2, "only pages 4 and 6 are cached: {s:?}");
    assert_eq!(s.bytes_cached, 2 * P, "{s:?}");
    drop(f);
    c.wait_io_idle();
    assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes);
}

#[test]
fn every_injected_errno_reaches_the_caller_unchanged() {
    let (data, c, f, b) = faulty(8 * PAGE, 2, 32, 4 * PAGE);
    for (i, e) in [
        libc::EIO,
        libc::ENXIO,
        libc::EBADMSG,
        libc::ENOMEM,
        libc::ENODATA,
    ]
    .into_iter()
    .enumerate()
    {
        b.fail_nth(Op::Read, 1, e);
        let off = (i as u64 % 2) * 4 * P;
        assert_eq!(errno(read_vec(&f, off, 4 * PAGE)), e, "errno {e}");
        assert_at_rest(&c);
        assert_eq!(c.stats().folios, 0, "nothing cached after errno {e}");
    }
    assert_eq!(b.stats().injected_errors, 5);
    assert_eq!(c.stats().read_errors, 5, "each failed backing read counted");
    // One-shot rules are spent: the same reads now succeed.
    assert_eq!(read_vec(&f, 0, 8 * PAGE).unwrap(), data);
    assert_at_rest(&c);
    assert_eq!(c.stats().read_errors, 5);
}

#[test]
fn a_failed_read_leaves_no_uptodate_folio_and_is_read_again_once_the_fault_clears() {
    for max_folio in [PAGE, 16 * PAGE] {
        let (data, _tmp, c, f, b) = faulty_on_disk("reread", 64 * PAGE, 3, 256, max_folio);
        // A bad sector in the middle of the folio the read will create.
        b.fail_reads_in(16 * P + max_folio as u64 / 2, 1, libc::EIO);
        let before = c.stats();
        assert_eq!(errno(read_vec(&f, 16 * P, max_folio)), libc::EIO);
        let failed = assert_at_rest(&c);
        assert_eq!(failed.folios, before.folios, "{failed:?}");
        assert_eq!(failed.free_bytes, failed.capacity_bytes, "{failed:?}");
        assert_eq!(b.stats().reads, 1);

        // Retrying while the fault is active fails again, and goes to the
        // backing again (nothing cached answers in its place).
        assert_eq!(errno(read_vec(&f, 16 * P, max_folio)), libc::EIO);
        assert_eq!(b.stats().reads, 2);

        b.clear_read_ranges();
        let s0 = c.stats();
        let r0 = b.stats().reads;
        let got = read_vec(&f, 16 * P, max_folio).unwrap();
        assert!(
            got == data[16 * PAGE..16 * PAGE + max_folio],
            "re-read bytes (max folio {max_folio})"
        );
        let s1 = assert_at_rest(&c);
        assert_eq!(
            b.stats().reads,
            r0 + 1,
            "the folio was read again from the backing"
        );
        assert_eq!(s1.io_reads, s0.io_reads + 1, "{s0:?} -> {s1:?}");
        assert_eq!(s1.misses, s0.misses + 1, "{s0:?} -> {s1:?}");
        assert_eq!(s1.folios, 1, "{s1:?}");
        assert_eq!(s1.bytes_cached, max_folio as u64, "{s1:?}");

        // And now it is a hit.
        let got = read_vec(&f, 16 * P + 5, 100).unwrap();
        assert_eq!(got, &data[16 * PAGE + 5..16 * PAGE + 105]);
        assert_eq!(b.stats().reads, r0 + 1, "a cached read issues no IO");
        drop(f);
        c.wait_io_idle();
        assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes);
    }
}

#[test]
fn io_reads_counts_every_read_issued_to_the_backing_including_failed_ones() {
    // `CacheStats::io_reads` is documented as "Reads issued to backings".
    // A read that the backing failed was issued all the same.
    let (_, c, f, b) = faulty(8 * PAGE, 4, 32, PAGE);
    read_vec(&f, 0, PAGE).unwrap();
    b.fail_nth_read(1, libc::EIO);
    assert_eq!(errno(read_vec(&f, P, PAGE)), libc::EIO);
    read_vec(&f, P, PAGE).unwrap();
    let s = c.stats();
    assert_eq!(
        s.io_reads,
        b.stats().reads,
        "io_reads must count the failed read too: cache {s:?}, backing {:?}",
        b.stats()
    );
}

#[test]
fn other_ranges_keep_working_while_a_fault_is_active() {
    let len = 40 * PAGE + 777;
    let (data, c, f, b) = faulty(len, 5, 16, PAGE);
    // Pages 8..12 are a bad region for the whole test.
    let (bad_lo, bad_hi) = (8 * P, 12 * P);
    b.fail_reads_in(bad_lo, bad_hi - bad_lo, libc::EIO);
    let f = Arc::new(f);
    let data = Arc::new(data);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (f, data) = (f.clone(), data.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(50 + t);
                let (mut ok, mut failed) = (0, 0);
                for _ in 0..1500 {
                    let off = rng.gen_range(0..len as u64 + 100);
                    let n = rng.gen_range(1..3 * PAGE);
                    let end = (off + n as u64).min(len as u64);
                    let r = read_vec(&f, off, n);
                    if off >= len as u64 {
                        assert!(r.unwrap().is_empty());
                        continue;
                    }
                    if (bad_lo..bad_hi).contains(&off) {
                        // The first byte needed is bad: the error, nothing else.
                        assert_eq!(errno(r), libc::EIO, "read at {off}+{n}");
                        failed += 1;
                        continue;
                    }
                    let got = r
                        .unwrap_or_else(|e| panic!("read at {off}+{n} outside the bad pages: {e}"));
                    // With one-page folios, a read running into the bad
                    // region stops exactly at it.
                    let want_end = if off < bad_lo && end > bad_lo {
                        bad_lo
                    } else {
                        end
                    };
                    assert_eq!(got.len() as u64, want_end - off, "length at {off}+{n}");
                    assert!(
                        got == data[off as usize..want_end as usize],
                        "bytes at {off}+{n}"
                    );
                    ok += 1;
                }
                (ok, failed)
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for t in threads {
        let (o, fl) = t.join().unwrap();
        ok += o;
        failed += fl;
    }
    assert!(
        ok > 1000 && failed > 50,
        "both kinds of reads ran: ok {ok}, failed {failed}"
    );
    let s = assert_at_rest(&c);
    assert!(s.evictions > 0, "reclaim ran alongside the errors: {s:?}");
    b.clear();
    assert_eq!(
        read_vec(&f, bad_lo, 4 * PAGE).unwrap(),
        &data[8 * PAGE..12 * PAGE]
    );
    assert_at_rest(&c);
}

/// Runs `read` on `readers` threads at once (they start together, behind a
/// barrier), each with its own clone of `handle`; their results, in thread
/// order.
fn at_once<H, T>(
    handle: H,
    readers: usize,
    read: impl Fn(&H) -> T + Send + Sync + 'static,
) -> Vec<T>
where
    H: Clone + Send + 'static,
    T: Send + 'static,
{
    let read = Arc::new(read);
    let barrier = Arc::new(Barrier::new(readers));
    let threads: Vec<_> = (0..readers)
        .map(|_| {
            let (h, barrier, read) = (handle.clone(), barrier.clone(), read.clone());
            std::thread::spawn(move || {
                barrier.wait();
                read(&h)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

// ---- nothing stays locked -------------------------------------------------------

#[test]
fn concurrent_readers_of_a_failing_folio_all_get_the_error_and_none_hangs() {
    let (_, c, f, b) = faulty(16 * PAGE, 6, 64, 4 * PAGE);
    b.fail_reads_in(4 * P, 4 * P, libc::EIO);
    b.set_read_latency(Duration::from_millis(100));
    let readers = 8;
    let results = within(HANG, "readers of a failing folio", move || {
        at_once(Arc::new(f), readers, |f| {
            read_vec(f, 4 * P, 4 * PAGE).map_err(|e| e.raw_os_error())
        })
    });
    for r in &results {
        assert_eq!(*r, Err(Some(libc::EIO)), "{results:?}");
    }
    let s = assert_at_rest(&c);
    assert_eq!(s.folios, 0, "{s:?}");
    assert_eq!(s.free_bytes, s.capacity_bytes, "{s:?}");
}

#[test]
fn waiters_on_a_folio_whose_read_failed_retry_and_get_the_right_bytes() {
    // Only the first IO fails; readers that slept on its lock must retry
    // (one new IO), not inherit the error or a half-read folio.
    let (data, c, f, b) = faulty(16 * PAGE, 7, 64, 4 * PAGE);
    b.fail_nth_read(1, libc::EIO);
    b.set_read_latency(Duration::from_millis(150));
    let readers = 8;
    let f2 = f.clone();
    let results = within(HANG, "waiters on a failed folio", move || {
        at_once(Arc::new(f2), readers, |f| read_vec(f, 8 * P, 4 * PAGE))
    });
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(
        errors.len(),
        1,
        "only the reader whose IO failed sees it: {errors:?}"
    );
    assert_eq!(errors[0].raw_os_error(), Some(libc::EIO));
    for r in results.iter().filter_map(|r| r.as_ref().ok()) {
        assert!(*r == data[8 * PAGE..12 * PAGE], "a waiter got wrong bytes");
    }
    assert_eq!(
        b.stats().reads,
        2,
        "the failed IO and one retry: {:?}",
        b.stats()
    );
    let s = assert_at_rest(&c);
    assert_eq!(s.folios, 1, "{s:?}");
    assert_eq!(
        read_vec(&f, 8 * P, 4 * PAGE).unwrap(),
        &data[8 * PAGE..12 * PAGE]
    );
}

#[test]
fn a_dead_device_fails_every_miss_but_hits_still_work_and_nothing_leaks() {
    let len = 32 * PAGE + 1;
    // Room for the 4 cached pages plus a 2-page folio per reader, so the
    // failing misses never need to evict the cached pages.
    let (data, c, f, b) = faulty(len, 8, 16, 2 * PAGE);
    // Cache pages 0..4, then the device dies.
    assert_eq!(read_vec(&f, 0, 4 * PAGE).unwrap(), &data[..4 * PAGE]);
    b.fail_from_nth(Op::Read, 1, libc::EIO);
    let f = Arc::new(f);
    let data = Arc::new(data);
    within(HANG, "readers of a dead device", {
        let (f, data) = (f.clone(), data.clone());
        move || {
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let (f, data) = (f.clone(), data.clone());
                    std::thread::spawn(move || {
                        let mut rng = StdRng::seed_from_u64(80 + t);
                        for _ in 0..500 {
                            let off = rng.gen_range(0..len as u64);
                            let n = rng.gen_range(1..2 * PAGE);
                            match read_vec(&f, off, n) {
                                Ok(got) => {
                                    // Only cached bytes can come back.
                                    assert!(
                                        off < 4 * P,
                                        "a miss at {off} succeeded on a dead device"
                                    );
                                    assert!(!got.is_empty());
                                    assert!(got == data[off as usize..off as usize + got.len()]);
                                }
                                Err(e) => {
                                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                                    assert!(off >= 4 * P, "a hit at {off} failed: {e}");
                                }
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
    });
    let s = assert_at_rest(&c);
    assert_eq!(s.bytes_cached, 4 * P, "failed misses cached nothing: {s:?}");
    // The device comes back.
    b.clear();
    let mut all = vec![0u8; len];
    f.read_exact_at(&mut all, 0).unwrap();
    assert!(all == *data);
    assert_at_rest(&c);
    drop(f);
    c.wait_io_idle();
    assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes);
    assert_eq!(c.stats().folios, 0);
}

#[test]
fn errors_under_memory_pressure_keep_the_byte_counts_consistent() {
    let len = 200 * PAGE + 99;
    let (data, c, f, b) = faulty(len, 9, 12, 4 * PAGE);
    let mut rng = StdRng::seed_from_u64(9);
    let (mut ok, mut failed) = (0, 0);
    for i in 0..3000u64 {
        if i % 7 == 0 {
            b.fail_nth_read(rng.gen_range(1..3), libc::EIO);
        }
        let off = rng.gen_range(0..len as u64);
        let n = rng.gen_range(1..6 * PAGE);
        match read_vec(&f, off, n) {
            Ok(got) => {
                assert!(!got.is_empty());
                assert!(
                    got == data[off as usize..off as usize + got.len()],
                    "bytes at {off}+{n}"
                );
                ok += 1;
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO));
                failed += 1;
            }
        }
        assert_at_rest(&c);
    }
    assert!(ok > 1000 && failed > 100, "ok {ok}, failed {failed}");
    assert!(c.stats().evictions > 0);
    drop(f);
    common::assert_empty(&c);
}

// ---- short reads in the middle of a file ---------------------------------------

/// A mid-file short read must not reach the caller as wrong bytes: the read
/// either fails or returns the file's bytes, and no bad folio stays cached.
fn check_short_read(f: &File, b: &dyn ShortRead, data: &[u8], off: u64, len: usize, max: usize) {
    b.arm(max);
    let first = read_vec(f, off, len);
    let shortened = b.short_reads();
    if let Ok(got) = &first {
        let want = &data[off as usize..(off as usize + len).min(data.len())];
        assert_eq!(
            got.len(),
            want.len(),
            "read_at({off}, {len}) after a short backing read of {max} bytes returned a short \
             count before EOF"
        );
        let bad = got.iter().zip(want).position(|(g, w)| g != w);
        assert!(
            bad.is_none(),
            "read_at({off}, {len}) after a short backing read of {max} bytes returned wrong \
             bytes from offset {} on (got {:#04x}, file has {:#04x}); short reads injected: {shortened}",
            off + bad.unwrap() as u64,
            got[bad.unwrap()],
            want[bad.unwrap()],
        );
    }
    // Whatever happened, the cache must not keep the short folio.
    let again = read_vec(f, off, len).expect("the short read was one-shot");
    let want = &data[off as usize..(off as usize + len).min(data.len())];
    let bad = again.iter().zip(want).position(|(g, w)| g != w);
    assert!(
        again.len() == want.len() && bad.is_none(),
        "after a short backing read of {max} bytes, a later read_at({off}, {len}) still returns \
         wrong bytes (len {} vs {}; first wrong at {:?}): the short folio stayed cached as uptodate",
        again.len(),
        want.len(),
        bad.map(|i| off + i as u64),
    );
}

trait ShortRead {
    fn arm(&self, max: usize);
    fn short_reads(&self) -> u64;
}

impl<B: backing::Backing> ShortRead for FaultyBacking<B> {
    fn arm(&self, max: usize) {
        self.short_read_nth(1, max);
    }
    fn short_reads(&self) -> u64 {
        self.stats().short_reads
    }
}

#[test]
fn a_short_read_inside_a_page_mid_file_never_returns_zeros_or_wrong_bytes() {
    // Minimal: one-page folio, the backing returns 100 of its 4096 bytes.
    let (data, _c, f, b) = faulty(8 * PAGE, 10, 32, PAGE);
    check_short_read(&f, &*b, &data, 2 * P, PAGE, 100);
}

#[test]
fn a_spurious_eof_mid_file_never_returns_zeros_or_a_short_count() {
    // The backing returns 0 bytes in the middle of the file.
    let (data, _c, f, b) = faulty(8 * PAGE, 11, 32, PAGE);
    check_short_read(&f, &*b, &data, 3 * P, PAGE, 0);
}

#[test]
fn a_short_read_at_a_block_boundary_of_a_large_folio_never_returns_zeros() {
    // A 16 KiB folio of which the backing returns only the first 4 KiB.
    let (data, _tmp, _c, f, b) = faulty_on_disk("short", 32 * PAGE, 12, 64, 4 * PAGE);
    check_short_read(&f, &*b, &data, 4 * P, 4 * PAGE, PAGE);
}

#[test]
fn a_short_read_that_ends_at_the_real_eof_is_not_a_short_read() {
    // The rule caps at 4096 but the file ends 2000 bytes into the folio:
    // the backing's count is the EOF count and the read is exact.
    let len = 2 * PAGE + 2000;
    let (data, c, f, b) = faulty(len, 13, 32, 4 * PAGE);
    b.short_read_nth(1, PAGE);
    let got = read_vec(&f, 2 * P, 3 * PAGE).unwrap();
    assert_eq!(got, &data[2 * PAGE..]);
    assert_eq!(b.stats().short_reads, 0, "the real read was within the cap");
    assert_at_rest(&c);
}

// ---- slow reads -------------------------------------------------------------------

#[test]
fn concurrent_readers_of_a_slow_folio_share_one_io_and_all_get_the_right_bytes() {
    for max_folio in [PAGE, 16 * PAGE] {
        let (data, _tmp, c, f, b) = faulty_on_disk("slow", 64 * PAGE, 14, 256, max_folio);
        b.set_read_latency(Duration::from_millis(200));
        let readers = 8;
        let off = 16 * P;
        let before = c.stats();
        let results = within(HANG, "readers of a slow folio", {
            let f = f.clone();
            move || at_once(f, readers, move |f| read_vec(f, off, max_folio).unwrap())
        });
        for r in &results {
            assert!(
                *r == data[16 * PAGE..16 * PAGE + max_folio],
                "max folio {max_folio}"
            );
        }
        let s = assert_at_rest(&c);
        assert_eq!(
            s.io_reads,
            before.io_reads + 1,
            "one IO for {readers} readers: {s:?}"
        );
        assert_eq!(b.stats().reads, 1, "{:?}", b.stats());
        assert_eq!(s.folios, 1, "{s:?}");
        assert_eq!(s.misses, before.misses + 1, "{s:?}");
    }
}

#[test]
fn readers_of_parts_of_a_folio_being_read_wait_for_it_instead_of_reading_again() {
    // The first reader creates a 64 KiB folio and its IO is slow; readers
    // that then ask for any part of it sleep on its lock.
    let (data, c, f, b) = faulty(64 * PAGE, 15, 128, 16 * PAGE);
    b.set_read_latency(Duration::from_millis(300));
    let data = Arc::new(data);
    let (f2, data2) = (f.clone(), data.clone());
    let results = within(HANG, "readers of parts of a slow folio", move || {
        let first = {
            let f = f2.clone();
            std::thread::spawn(move || read_vec(&f, 16 * P, 16 * PAGE).unwrap())
        };
        wait_until("the first IO to start", || b.stats().reads == 1);
        let parts: Vec<(u64, usize)> = vec![
            (16 * P, 1),
            (16 * P + 4095, 2),
            (20 * P + 17, 3 * PAGE),
            (31 * P, PAGE),
            (32 * P - 1, 1),
            (16 * P + 1000, 15 * PAGE),
        ];
        let threads: Vec<_> = parts
            .into_iter()
            .map(|(off, n)| {
                let f = f2.clone();
                std::thread::spawn(move || (off, read_vec(&f, off, n).unwrap()))
            })
            .collect();
        let mut out = vec![(16 * P, first.join().unwrap())];
        out.extend(threads.into_iter().map(|t| t.join().unwrap()));
        (out, b.stats().reads)
    });
    let (results, reads) = results;
    for (off, got) in &results {
        assert!(!got.is_empty());
        assert!(
            *got == data2[*off as usize..*off as usize + got.len()],
            "bytes at {off}"
        );
    }
    assert_eq!(reads, 1, "one IO for every reader of the folio");
    let s = assert_at_rest(&c);
    assert_eq!(s.io_reads, 1, "{s:?}");
    assert_eq!(s.folios, 1, "{s:?}");
    drop(f);
    c.wait_io_idle();
    assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes);
}
