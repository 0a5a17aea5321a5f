//! A miss's own IO on the thread that waits for it: a synchronous window
//! of several runs (the cached pages between its holes split it) reads its
//! first run, the request's, on the reading thread, and hands the others
//! to the IO engine. The reader's read never queues behind other streams'
//! readahead in the engine, and no engine thread has to run to wake it
//! (docs/measurements/2026-11-30-scans-hot-misses.md).

// A test backing's log: the shim rule (clippy.toml) is for the crate's
// protocols.
#![allow(clippy::disallowed_types)]

use std::io;
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};

use backing::{Backing, IoBufMut, MemBacking};
use foliocache::{Advice, ReadaheadConfig};
use test_support::cache::TestCache;

use crate::common::{forward_backing, nonzero_bytes, settled};

const PAGE: usize = 4096;
const P: u64 = PAGE as u64;

/// Forwards to memory and logs which thread read each offset.
struct ThreadLog {
    mem: MemBacking,
    log: Mutex<Vec<(u64, ThreadId)>>,
}

impl Backing for ThreadLog {
    forward_backing!(mem: len, write_blocks, set_len, sync_data, sync_all, punch_hole, info);

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        let r = self.mem.read_blocks(bufs, offset);
        let me = thread::current().id();
        self.log.lock().unwrap().push((offset, me));
        r
    }
    // No raw_file: the engine's reads come through read_blocks, on its
    // pool's threads.
}

/// Pages 0..16 and every odd page of 17..48 cached (read one by one under
/// `Advice::Random`), then a read of page 16 under the default readahead:
/// the look-back (the kernel's `page_cache_sync_ra`, sixteen cached pages
/// before the miss) plans a window from page 16 whose holes are the even
/// pages, one run each. Page 16 is read on this thread; the window's other
/// runs on the engine's; every byte is right.
#[test]
fn a_sync_window_reads_its_first_run_on_the_waiting_thread() {
    let c = TestCache::bytes(8 << 20)
        .max_folio(PAGE)
        .readahead(ReadaheadConfig::kernel())
        .build();
    let data = nonzero_bytes(64 * PAGE, 86);
    let b = Arc::new(ThreadLog {
        mem: MemBacking::with_data(data.clone()),
        log: Mutex::new(Vec::new()),
    });
    let f = c.open_backing(b.clone()).unwrap();
    let mut buf = vec![0u8; PAGE];
    f.advise(0, 0, Advice::Random).unwrap();
    for p in (0..16).chain((17..48).step_by(2)) {
        f.read_exact_at(&mut buf, p * P).unwrap();
    }
    f.advise(0, 0, Advice::Normal).unwrap();
    let me = thread::current().id();
    {
        let mut log = b.log.lock().unwrap();
        assert!(log.iter().all(|&(_, t)| t == me), "one page reads: {log:?}");
        log.clear();
    }

    f.read_exact_at(&mut buf, 16 * P).unwrap();
    assert_eq!(buf, data[16 * PAGE..17 * PAGE]);
    settled(f.mapping(), 0, 63);
    let log = b.log.lock().unwrap().clone();
    let on_me: Vec<u64> = log.iter().filter(|&&(_, t)| t == me).map(|&(o, _)| o / P).collect();
    let elsewhere: Vec<u64> = log.iter().filter(|&&(_, t)| t != me).map(|&(o, _)| o / P).collect();
    assert_eq!(on_me, [16], "the request's run, on the reader: {log:?}");
    assert!(
        !elsewhere.is_empty() && elsewhere.iter().all(|&p| p > 16 && p % 2 == 0),
        "the window's other runs, its holes, on the engine: {log:?}"
    );
    for p in 0..64u64 {
        f.read_exact_at(&mut buf, p * P).unwrap();
        assert_eq!(buf, data[p as usize * PAGE..][..PAGE], "page {p}");
    }
}
