//! Regression (found by the `file_ops` fuzzer, crates/fuzz): closing a file
//! left the backing longer than the file after an earlier failed size cut.
//!
//! Input, minimized by hand: an empty file over a fault-injecting memory
//! backing; a write of 5000 bytes (not a whole block); the backing's
//! `set_len` failing (EIO) while a sync writes it back; faults cleared;
//! the last handle dropped; the backing opened again.
//!
//! What went wrong: the reopened file was 8192 bytes long, its last 3192
//! bytes zeros that were never written. Writeback writes whole blocks, so
//! the write of the last block made the backing 8192 bytes long, and the
//! `set_len(5000)` that cuts it back failed. The data itself was then clean,
//! so closing the file (`Mapping::close_handle`) found nothing dirty and
//! never cut the size again: only `sync_*` put the backing's size right.
//! A close whose writeback succeeds, with no error logged, left the file at
//! a size it never had.
//!
//! The fix: `close_handle` makes the backing's size the file's after its
//! writeback, as `sync` does (`Mapping::fix_backing_size`, for a writable
//! backed file); if that fails, the close fails as a failed writeback does
//! (the cache keeps the file and tries again).

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking, Op};
use test_support::cache::TestCache;

#[test]
fn close_after_a_failed_size_cut_leaves_the_backing_at_the_file_size() {
    let cache = TestCache::bytes(1 << 20).build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = cache.open_backing(b.clone()).unwrap();
    let data = vec![0x5Au8; 5000];
    f.write_all_at(&data, 0).unwrap();
    b.fail_from_nth(Op::SetLen, 1, libc::EIO);
    assert!(
        f.sync_data().is_err(),
        "the size cut failed: sync reports it"
    );
    b.clear();
    drop(f);
    cache.wait_io_idle();
    let on_backing = b.inner().contents().unwrap();
    assert_eq!(
        on_backing.len(),
        data.len(),
        "after the close, the backing is as long as the file (cut back to 5000 bytes)"
    );
    assert!(
        on_backing == data,
        "after the close, the backing holds the file's bytes"
    );
    let f = cache.open_backing(b.clone()).unwrap();
    assert_eq!(f.len(), 5000, "the file opened again has the size it had");
}
