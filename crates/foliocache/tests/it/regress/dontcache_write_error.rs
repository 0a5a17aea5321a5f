//! Regression: an uncached write whose writeback failed returned the error,
//! yet its bytes were in the cache and reached the backing later.
//!
//! Found by the fault matrix (tests/it/faults/matrix.rs, "uncached write x
//! Eio"): after the faults were cleared, the file read back the bytes of a
//! `write_at_flags(.., WriteFlags::DONTCACHE)` that had returned `EIO`.
//!
//! Why: an uncached write copies each piece into the cache, marks it
//! dirty, then writes the piece back before going on. It returned the
//! writeback's error; but the piece was already written into the cache,
//! dirty, and the next writeback wrote it. The caller was told "not
//! written" about bytes that were. (A `sync_data` then also reported the
//! error a second time, from the file's error sequence.)
//!
//! The fix, the kernel's behaviour: an `RWF_DONTCACHE` write only kicks
//! its writeback and returns the count it copied; the writeback's error
//! goes to the file's error sequence, reported once by the next sync, and
//! the pages stay dirty and cached, retried by the next writeback.

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking, Op};
use foliocache::WriteFlags;
use test_support::cache::TestCache;

#[test]
fn an_uncached_write_whose_writeback_fails_succeeds_and_the_next_sync_reports_it() {
    let cache = TestCache::bytes(1 << 20).max_folio(64 << 10).build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = cache.open_backing(b.clone()).unwrap();
    b.fail_from_nth(Op::Write, 1, libc::EIO);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8 + 1).collect();
    let n = f
        .write_at_flags(&data, 4096, WriteFlags::DONTCACHE)
        .expect("the write copied its bytes: it succeeds");
    assert_eq!(n, data.len());
    // (The write only started its writeback: wait for it to fail.)
    let start = std::time::Instant::now();
    while b.stats().injected_errors == 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the writeback was tried and failed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(&mut back, 4096).unwrap(), data.len());
    assert!(back == data, "the cache holds the written bytes");
    let e = f
        .sync_data()
        .expect_err("the sync reports the writeback error");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    b.clear();
    f.sync_data().expect("reported once; the retry succeeds");
    let disk = b.inner().contents().unwrap();
    assert_eq!(disk.len(), 4096 + data.len());
    assert!(disk[..4096].iter().all(|&x| x == 0));
    assert!(disk[4096..] == data[..], "the backing holds the write");
}
