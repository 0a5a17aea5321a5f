//! Writeback through the cache's writeback pool (`wbpool.rs`): scattered
//! dirty pages are written side by side on the pool's threads, a write that
//! fails there reaches the sync or the close as any writeback error does
//! (its pages dirty again, the others written), and many files writing back
//! at once all finish. (The pool's own tests, `wbpool.rs`, check that
//! dropping it joins its threads.)

// The wrapper counts with std atomics (the shim rule is for the crate).
#![allow(clippy::disallowed_types)]

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backing::{Backing, FaultyBacking, IoBuf, MemBacking};
use foliocache::Cache;

use crate::common::forward_backing;
use crate::common::write as wcommon;
use test_support::cache::TestCache;
use wcommon::{all_written, assert_same, errno, write_scattered, P, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// A faulty memory backing that counts its writes in flight at once and
/// those made on the writeback pool's threads.
struct InFlight {
    inner: FaultyBacking<MemBacking>,
    now: AtomicUsize,
    most: AtomicUsize,
    on_pool: AtomicUsize,
}

impl Backing for InFlight {
    forward_backing!(
        inner: len, read_blocks, set_len, sync_data, sync_all, punch_hole, check_size, info
    );
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        let pool = std::thread::current()
            .name()
            .is_some_and(|t| t.starts_with("foliocache-wb"));
        if pool {
            self.on_pool.fetch_add(1, Ordering::SeqCst);
        }
        let r = self.inner.write_blocks(bufs, offset);
        self.now.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

/// An 8 MiB cache with folios up to `max_folio` bytes and no background
/// writeback below its capacity: the tests' syncs and closes write back.
fn quiet_cache(max_folio: usize) -> Cache {
    TestCache::bytes(8 * MIB)
        .max_folio(max_folio)
        .quiet()
        .build()
}

impl InFlight {
    fn new() -> Arc<InFlight> {
        Arc::new(InFlight {
            inner: FaultyBacking::new(MemBacking::new()),
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            on_pool: AtomicUsize::new(0),
        })
    }

    fn contents(&self) -> Vec<u8> {
        self.inner.inner().contents().unwrap()
    }
}

#[test]
fn scattered_dirty_pages_are_written_side_by_side_on_the_pool() {
    // Small folios (one run each, batched) and large ones (one run with
    // scattered dirty pages).
    for max_folio in [PAGE, 64 * KIB] {
        let c = quiet_cache(max_folio);
        let b = InFlight::new();
        b.inner.set_write_latency(Duration::from_millis(2));
        let f = c.open_backing(b.clone()).unwrap();
        let model = write_scattered(&f, 64, 1);
        f.sync_data().unwrap();
        assert_eq!(b.inner.stats().writes, 64, "one write per scattered page");
        assert!(
            b.most.load(Ordering::SeqCst) > 1,
            "{max_folio}: several writes in flight at once"
        );
        assert!(
            b.on_pool.load(Ordering::SeqCst) > 0,
            "{max_folio}: the pool's threads wrote"
        );
        assert_same("backing", &b.contents(), &model.data);
        assert!(all_written(&c));
    }
}

#[test]
fn a_failed_write_on_the_pool_reaches_the_sync_and_only_its_pages_stay_dirty() {
    for max_folio in [PAGE, 64 * KIB] {
        let c = quiet_cache(max_folio);
        let b = InFlight::new();
        let f = c.open_backing(b.clone()).unwrap();
        let model = write_scattered(&f, 64, 2);
        // Page 40 (written) and page 100 fail; the other 62 writes pass.
        b.inner.fail_writes_in(40 * P, P, libc::EIO);
        b.inner.fail_writes_in(100 * P, P, libc::EIO);
        assert_eq!(errno("sync with two bad pages", f.sync_data()), libc::EIO);
        for page in [40, 100] {
            assert_eq!(f.cachestat(page * P, P).unwrap().dirty, 1, "page {page}");
        }
        assert_eq!(c.stats().dirty_bytes, 2 * P, "only the failed pages");
        let got = b.contents();
        for page in (0..128u64).step_by(2).filter(|p| ![40, 100].contains(p)) {
            let r = (page * P) as usize..((page + 1) * P) as usize;
            assert!(got[r.clone()] == model.data[r], "page {page} written");
        }
        // The error is reported once; still failing, the next sync fails.
        assert_eq!(errno("retried", f.sync_data()), libc::EIO);
        b.inner.clear_write_ranges();
        f.sync_data().unwrap();
        assert_same("backing once healed", &b.contents(), &model.data);
    }
}

#[test]
fn a_failed_write_on_the_pool_at_close_keeps_the_data_for_cache_sync_all() {
    let c = quiet_cache(PAGE);
    let b = InFlight::new();
    let f = c.open_backing(b.clone()).unwrap();
    let model = write_scattered(&f, 32, 3);
    b.inner.fail_writes_in(10 * P, P, libc::ENOSPC);
    drop(f);
    assert_eq!(c.stats().dirty_bytes, P, "the failed page stays dirty");
    let e = c.sync_all().expect_err("the kept file's page fails again");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    b.inner.clear_write_ranges();
    c.sync_all().unwrap();
    assert_same("backing", &b.contents(), &model.data);
    assert!(all_written(&c));
}

#[test]
fn many_files_writing_back_at_once_all_finish_and_keep_their_errors_apart() {
    let c = quiet_cache(16 * KIB);
    std::thread::scope(|s| {
        for k in 0..6u64 {
            let c = &c;
            s.spawn(move || {
                let b = InFlight::new();
                b.inner.set_write_latency(Duration::from_micros(500));
                let f = c.open_backing(b.clone()).unwrap();
                for round in 0..3 {
                    let model = write_scattered(&f, 40, 100 * k + 10 * round);
                    if k == 0 && round == 1 {
                        // One file's failure is its own.
                        b.inner.fail_writes_in(6 * P, P, libc::EIO);
                        assert_eq!(errno("file 0", f.sync_data()), libc::EIO);
                        b.inner.clear_write_ranges();
                    }
                    f.sync_data().unwrap();
                    assert_same(
                        &format!("file {k} round {round}"),
                        &b.contents(),
                        &model.data,
                    );
                }
            });
        }
    });
    assert!(all_written(&c));
}
