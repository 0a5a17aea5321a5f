//! Regression: a folio removed from its file was left on an LRU list, and
//! freed there; the next reclaim scan followed its cleared mapping and the
//! process died of SIGSEGV (`isolate_lru_folios`).
//!
//! Found by the chaos stress test (write/visible/stress.rs), 1 run in 3 under gdb.
//!
//! Why: reclaim isolates folios off the inactive list (a reference each),
//! then tries to lock them; one it cannot lock goes back on the list if it
//! is still its mapping's, judged under the LRU lock. A removal (truncation,
//! a failed read, an unshared pin) holds the folio locked, takes it out of
//! the index, calls the LRU removal (which finds it off the lists, isolated,
//! and does nothing), and cleared the folio's mapping only after that, with
//! the LRU lock dropped. A putback in between saw the folio still in its
//! mapping and put it back on the list, where it stayed after its mapping
//! was cleared and its last reference freed it.
//!
//! The fix: `lru_detach` clears the mapping in the same hold of the LRU
//! lock that takes the folio off its list, so a putback comes either
//! before (and the removal takes the folio off again) or after (and finds
//! it in no mapping). The loom model
//! `h_truncate_to_zero_races_reclaim_putting_the_folio_back` explores the
//! interleavings; this runs the race with real threads and checks the
//! lists (`Cache::check_lru`) as it goes.

// Threads counted with std atomics (the shim rule is for the crate's own
// protocols).
#![allow(clippy::disallowed_types)]

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backing::MemBacking;

use test_support::cache::TestCache;

const PAGE: usize = 4096;
const PAGES: usize = 8;

#[test]
fn truncation_racing_reclaim_never_leaves_a_removed_folio_on_a_list() {
    // Twice the cache in data, so the readers' misses reclaim too.
    let cache = Arc::new(
        TestCache::pages(2 * PAGES)
            .max_folio(PAGE)
            .no_readahead()
            .build(),
    );
    let cut = cache
        .open_backing(MemBacking::with_data(vec![7; PAGES * PAGE]))
        .unwrap();
    let other = cache
        .open_backing(MemBacking::with_data(vec![9; 3 * PAGES * PAGE]))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    // Writes pages in, then cuts the file to nothing: each cut removes
    // folios that reclaim may hold isolated.
    threads.push({
        let (f, stop) = (cut.clone(), stop.clone());
        thread::spawn(move || {
            let page = vec![5u8; PAGE];
            while !stop.load(SeqCst) {
                for p in 0..PAGES {
                    f.write_at(&page, (p * PAGE) as u64).unwrap();
                }
                f.sync_data().unwrap();
                f.set_len(0).unwrap();
            }
        })
    });
    // Reclaim, by hand and through another file's misses.
    threads.push({
        let (c, stop) = (cache.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(SeqCst) {
                c.shrink(PAGE as u64);
            }
        })
    });
    threads.push({
        let (f, stop) = (other.clone(), stop.clone());
        thread::spawn(move || {
            let mut buf = vec![0u8; PAGE];
            let mut p = 0;
            while !stop.load(SeqCst) {
                let n = f.read_at(&mut buf, (p * PAGE) as u64).unwrap();
                assert_eq!(n, PAGE);
                assert!(buf.iter().all(|&b| b == 9), "another file's bytes");
                p = (p + 5) % (3 * PAGES);
            }
        })
    });
    let end = Instant::now() + Duration::from_secs(2);
    let mut checks = 0u64;
    while Instant::now() < end {
        if let Err(e) = cache.check_lru() {
            stop.store(true, SeqCst);
            panic!("after {checks} checks: {e}");
        }
        checks += 1;
        thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    cache.check_lru().unwrap();
    cache.shrink(u64::MAX);
    cache.check_lru().unwrap();
    drop((cut, other));
    let s = cache.stats();
    assert_eq!(s.free_bytes, s.capacity_bytes, "{s:?}");
}
