//! Regression: a small cache failed a read with `OutOfMemory` while a few
//! dirty pages, spread over large folios, pinned all of its memory.
//!
//! Found while building the crash harness (a cache of 12 pages with
//! 16 KiB folios and a dirty limit of 2 pages).
//!
//! Why: reclaim never drops a dirty folio; it rotates it and wakes the
//! flusher to write it back. But the flusher wrote back only over the
//! dirty background threshold, and three dirty pages (one in each 16 KiB
//! folio) were under it: woken, it did nothing, reclaim found every folio
//! dirty, and the read's allocation gave up after its wait (about 2 s).
//! The kernel's reclaim wakes the flusher to write back whatever the
//! thresholds say (`wakeup_flusher_threads(WB_REASON_VMSCAN)`).
//!
//! The fix: reclaim that meets a dirty folio asks the flusher for it
//! (`Bdi::kick_for_reclaim`), and the flusher's next round then writes
//! back everything dirty, below the threshold too.

use test_support::cache::{mem_file, TestCache};

#[test]
fn a_read_gets_memory_held_by_dirty_pages_under_the_background_threshold() {
    let c = TestCache::pages(12)
        .max_folio(16 << 10)
        .dirty_limit(6 << 12)
        .dirty_background(6 << 12)
        .build();
    let f = mem_file(&c, &vec![5u8; 128 << 10]);
    let mut buf = vec![0u8; 48 << 10];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 48 << 10);
    for off in [0, 16 << 10, 32 << 10] {
        f.write_at(&[1], off).unwrap();
    }
    let mut tail = vec![0u8; 16 << 10];
    let n = f
        .read_at(&mut tail, 48 << 10)
        .expect("the read gets memory back from the dirty folios");
    assert_eq!(n, 16 << 10);
    assert!(tail.iter().all(|&b| b == 5));
}
