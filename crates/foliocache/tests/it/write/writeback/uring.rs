//! Writeback through the cache's io_uring (`IoEngine::write_all`): the
//! scattered dirty pages of a file with a descriptor go out together from
//! the writing thread, every byte lands, and a write the kernel fails
//! reaches the sync with its pages dirty again, as on the writeback pool
//! (`pool.rs`, for backings without a descriptor).

// The wrapper flips with a std atomic (the shim rule is for the crate).
#![allow(clippy::disallowed_types)]

use std::fs::File as StdFile;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use backing::aio::EngineStats;
use backing::{Backing, FileBacking, FileOptions};
use foliocache::Cache;
use test_support::skip_or_fail;

use crate::common::forward_backing;
use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{all_written, assert_same, disk, errno, open_rw, write_scattered, P, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// `c`, or `None` (skipped) where its engine is not io_uring.
fn with_uring(c: Cache, test: &str) -> Option<Cache> {
    if !c.io_engine_name().starts_with("io_uring") {
        skip_or_fail(test, format_args!("the cache runs {}", c.io_engine_name()));
        return None;
    }
    Some(c)
}

fn engine(c: &Cache) -> EngineStats {
    c.io_engine_stats()
        .expect("a cache built here has an engine")
}

#[test]
fn scattered_dirty_pages_go_out_together_through_the_ring() {
    // Small folios (a run each) and large ones (scattered dirty pages
    // inside them).
    for max_folio in [PAGE, 64 * KIB] {
        let Some(c) = with_uring(
            // Writes back only when asked.
            TestCache::bytes(8 * MIB)
                .max_folio(max_folio)
                .quiet()
                .build(),
            "scattered_dirty_pages_go_out_together_through_the_ring",
        ) else {
            return;
        };
        let path = TempPath::new("uring-scattered");
        let f = open_rw(&c, &path.path);
        let model = write_scattered(&f, 64, 1);
        let before = engine(&c);
        f.sync_data().unwrap();
        let after = engine(&c);
        assert_eq!(
            after.writes - before.writes,
            64,
            "{max_folio}: one write per page"
        );
        assert_eq!(
            after.uring_ops - before.uring_ops,
            64,
            "{max_folio}: all through the ring"
        );
        assert_eq!(after.pool_ops, before.pool_ops, "{max_folio}");
        assert_eq!(after.errors, before.errors, "{max_folio}");
        assert!(all_written(&c));
        assert_same("the file on disk", &disk(&path.path), &model.data);
        // Rewritten and written back again, through a second handle's sync.
        let model = write_scattered(&f, 64, 1000);
        drop(f);
        c.sync_all().unwrap();
        assert_same("after a second round", &disk(&path.path), &model.data);
    }
}

/// A file whose ring descriptor can be switched to a read-only one, so the
/// kernel fails the writes that go through the ring (`EBADF`) while every
/// other call works.
struct ReadOnlyRing {
    inner: FileBacking,
    read_only: Arc<StdFile>,
    broken: AtomicBool,
}

impl Backing for ReadOnlyRing {
    forward_backing!(
        inner: len, read_blocks, write_blocks, set_len, sync_data, sync_all, punch_hole,
        check_size, info
    );
    fn raw_file(&self) -> Option<Arc<StdFile>> {
        if self.broken.load(Ordering::SeqCst) {
            Some(self.read_only.clone())
        } else {
            self.inner.raw_file()
        }
    }
}

#[test]
fn a_write_the_kernel_fails_in_the_ring_reaches_the_sync_and_its_pages_stay_dirty() {
    let Some(c) = with_uring(
        // Writes back only when asked.
        TestCache::bytes(8 * MIB).max_folio(PAGE).quiet().build(),
        "a_write_the_kernel_fails_in_the_ring",
    ) else {
        return;
    };
    let path = TempPath::new("uring-fails");
    let inner = FileBacking::open(
        &path.path,
        &FileOptions::new().read(true).write(true).create(true),
    )
    .unwrap();
    let b = Arc::new(ReadOnlyRing {
        inner,
        read_only: Arc::new(StdFile::open(&path.path).unwrap()),
        broken: AtomicBool::new(true),
    });
    let f = c.open_backing(b.clone()).unwrap();
    let model = write_scattered(&f, 32, 2);
    assert_eq!(
        errno("sync through a read-only ring", f.sync_data()),
        libc::EBADF
    );
    assert_eq!(
        c.stats().dirty_bytes,
        32 * P,
        "every page failed and stays dirty"
    );
    assert_eq!(c.stats().writeback_errors, 1);
    // Reported once; still failing, the next sync fails again.
    assert_eq!(errno("retried", f.sync_data()), libc::EBADF);
    b.broken.store(false, Ordering::SeqCst);
    f.sync_data().unwrap();
    assert!(all_written(&c));
    assert_same("the file once healed", &disk(&path.path), &model.data);
    assert!(engine(&c).errors >= 64, "{:?}", engine(&c));
}

#[test]
fn writers_and_syncs_of_many_files_at_once_all_land() {
    let Some(c) = with_uring(
        // Writes back only when asked.
        TestCache::bytes(8 * MIB)
            .max_folio(16 * KIB)
            .quiet()
            .build(),
        "writers_and_syncs_of_many_files_at_once_all_land",
    ) else {
        return;
    };
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let c = &c;
            s.spawn(move || {
                let path = TempPath::new("uring-many");
                let f = open_rw(c, &path.path);
                for round in 0..4 {
                    let model = write_scattered(&f, 48, 100 * k + 10 * round);
                    f.sync_data().unwrap();
                    assert_same(
                        &format!("file {k} round {round}"),
                        &disk(&path.path),
                        &model.data,
                    );
                }
            });
        }
    });
    assert!(all_written(&c));
    assert_eq!(engine(&c).errors, 0);
}
