//! Regression: the dirty data of a file whose writeback failed as its last
//! handle closed was dropped, silently.
//!
//! Found while building the fault matrix (tests/it/faults/matrix.rs): a write,
//! then the last handle dropped while the backing failed writes. The
//! close's writeback failed, its error was logged ("its dirty data stays
//! cached until the cache drops the file"), and the mapping went at once
//! with its dirty folios: the bytes never reached the backing, though the
//! backing came back a moment later, and nobody could be told (the file's
//! error sequence went with the mapping). The log line promised what the
//! code did not do.
//!
//! The fix: a file whose close-time writeback fails is kept by the cache
//! (`CacheInner::closed_dirty`): its dirty folios stay cached and its
//! mapping registered, so a reopen shares it and `Cache::sync_all` reaches
//! it; the flusher retries it every full round (5 s), and it goes once
//! written, or after `CLOSED_DIRTY_KEEP` (60 s) of failures, logged. The
//! kernel keeps a closed file's dirty pages too, with its inode.

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking, Op};
use foliocache::{Cache, File};

use crate::common::write::{all_written, wait_until};
use test_support::cache::TestCache;

/// A 2 MiB cache with no background writeback below its capacity (so the
/// close writes back), and a file on a memory backing that can fail.
fn cache_and_file() -> (Cache, Arc<FaultyBacking<MemBacking>>, File) {
    let c = TestCache::bytes(2 << 20)
        .max_folio(64 << 10)
        .quiet()
        .build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    (c, b, f)
}

#[test]
fn a_failed_writeback_at_close_keeps_the_data_and_the_flusher_writes_it_later() {
    let (c, b, f) = cache_and_file();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8 + 1).collect();
    f.write_all_at(&data, 0).unwrap();
    b.fail_from_nth(Op::Write, 1, libc::EIO);
    drop(f);
    assert!(b.stats().injected_errors > 0, "the close tried a writeback");
    assert!(
        c.stats().dirty_bytes > 0,
        "the dirty data stays cached after the failed close"
    );
    b.clear();
    // The flusher's next full round (every 5 s) writes it.
    wait_until("the flusher writes the closed file", || {
        all_written(&c) && b.inner().contents().unwrap() == data
    });
}

#[test]
fn a_kept_closed_file_is_reached_by_cache_sync_all_which_reports_its_error() {
    let (c, b, f) = cache_and_file();
    let data = vec![0x5au8; 100_000];
    f.write_all_at(&data, 4096).unwrap();
    b.fail_from_nth(Op::Write, 1, libc::ENOSPC);
    drop(f);
    let e = c
        .sync_all()
        .expect_err("the kept file's writeback fails again");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    b.clear();
    c.sync_all().expect("written once the backing takes writes");
    let disk = b.inner().contents().unwrap();
    assert_eq!(disk.len(), 4096 + data.len());
    assert!(disk[4096..] == data[..]);
    assert_eq!(c.stats().dirty_bytes, 0);
}
