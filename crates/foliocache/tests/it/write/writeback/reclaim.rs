//! A writer that needs memory in a cache full of dirty folios waits for
//! writeback as long as writeback makes progress, however slow the
//! backing, and fails (`OutOfMemory`, never a hang) only when nothing is
//! written back: the kernel's allocator retries while reclaim makes
//! progress (`should_reclaim_retry`) and throttles on writeback
//! (`reclaim_throttle`). Fault injection at the backing: its writes pass
//! one at a time when the test lets them, or all fail.

// The gate is std's: the loom shim is the crate's.
#![allow(clippy::disallowed_types)]

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use backing::{Backing, FaultyBacking, IoBuf, MemBacking, Op};
use foliocache::{Cache, File};

use crate::common::forward_backing;
use crate::common::write::{nonzero_bytes, HANG, PAGE};
use test_support::cache::TestCache;

const KIB: usize = 1024;

/// The cache: 32 pages, two 64 KiB folios, no readahead, no background
/// writeback below the capacity (only reclaim's kick starts one).
fn full_cache(backing: impl Backing) -> (Cache, File) {
    let c = TestCache::pages(32)
        .max_folio(64 * KIB)
        .no_readahead()
        .quiet()
        .build();
    let f = c.open_backing(backing).unwrap();
    let mut buf = vec![0u8; 128 * KIB];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    assert_eq!(c.stats().free_bytes, 0, "two folios fill the cache");
    (c, f)
}

/// Dirties every other page of the first 128 KiB (one byte each), so a
/// writeback of the two folios is 16 separate writes; returns the file's
/// bytes after.
fn dirty_every_other_page(f: &File, mut data: Vec<u8>) -> Vec<u8> {
    for p in (0..32).step_by(2) {
        let at = p * PAGE;
        data[at] ^= 0xff;
        f.write_all_at(&data[at..at + 1], at as u64).unwrap();
    }
    data
}

/// A memory backing whose writes each wait for the test's leave.
struct GatedWrites {
    inner: MemBacking,
    /// Writes arrived, writes let through.
    gate: Mutex<(u64, u64)>,
    moved: Condvar,
}

impl Backing for GatedWrites {
    forward_backing!(inner: len, read_blocks, set_len, sync_data, sync_all, punch_hole, info);
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let mut g = self.gate.lock().unwrap();
        g.0 += 1;
        self.moved.notify_all();
        let mine = g.0;
        while g.1 < mine {
            g = self.moved.wait(g).unwrap();
        }
        drop(g);
        self.inner.write_blocks(bufs, offset)
    }
}

impl GatedWrites {
    /// Waits until `n` writes have arrived.
    fn arrived(&self, n: u64) {
        let g = self.gate.lock().unwrap();
        let (g, t) = self.moved.wait_timeout_while(g, HANG, |g| g.0 < n).unwrap();
        assert!(!t.timed_out(), "{} writes arrived, not {n}", g.0);
    }

    /// Lets one more write through.
    fn let_one(&self) {
        self.gate.lock().unwrap().1 += 1;
        self.moved.notify_all();
    }

    /// Lets every write through from now on.
    fn let_all(&self) {
        self.gate.lock().unwrap().1 = u64::MAX;
        self.moved.notify_all();
    }
}

/// Opens its gate when dropped.
struct OpenAtDrop(Arc<GatedWrites>);

impl Drop for OpenAtDrop {
    fn drop(&mut self) {
        self.0.let_all();
    }
}

/// The writeback reclaim waits for takes 16 writes, let through one every
/// 250 ms: 3.75 s or more from the first, against the 2 s the old bounded
/// wait allowed an allocation whatever the progress (it failed this test
/// with `OutOfMemory`). Each write is progress, so the writer waits it
/// out and its write lands.
#[test]
fn a_writer_waits_for_slow_writeback_while_it_makes_progress() {
    const WRITES: u64 = 16;
    let data = nonzero_bytes(160 * KIB, 7);
    let b = Arc::new(GatedWrites {
        inner: MemBacking::with_data(data.clone()),
        gate: Mutex::new((0, 0)),
        moved: Condvar::new(),
    });
    let (c, f) = full_cache(b.clone());
    // Declared after the file: dropped first, so a failing test's unwind
    // opens the gate before the file's close writes back.
    let _open = OpenAtDrop(b.clone());
    let mut want = dirty_every_other_page(&f, data);
    assert_eq!(b.gate.lock().unwrap().0, 0, "nothing written back yet");

    // A write past the two folios needs a third: reclaim finds both
    // dirty, kicks the flusher, and the writer waits.
    let new = nonzero_bytes(PAGE, 8);
    want[128 * KIB..128 * KIB + PAGE].copy_from_slice(&new);
    let (tx, rx) = mpsc::channel();
    let writer = {
        let f = f.clone();
        std::thread::spawn(move || {
            let _ = tx.send(f.write_all_at(&new, 128 * KIB as u64));
        })
    };
    b.arrived(1);
    for n in 1..=WRITES {
        std::thread::sleep(Duration::from_millis(250));
        if let Ok(r) = rx.try_recv() {
            panic!("the writer returned before the writeback it needs ended ({n} writes let through): {r:?}");
        }
        b.let_one();
    }
    let r = rx
        .recv_timeout(HANG)
        .expect("the writer never finished after its writeback did");
    writer.join().unwrap();
    r.expect("the writer waits while writeback makes progress");
    assert_eq!(
        b.gate.lock().unwrap().0,
        WRITES,
        "the writeback was the 16 gated writes"
    );

    // Every byte lands.
    b.let_all();
    f.sync_data().unwrap();
    let mut got = vec![0u8; want.len()];
    assert_eq!(f.read_at(&mut got, 0).unwrap(), want.len());
    assert!(got == want, "the file's bytes after the wait");
    drop(f);
    drop(c);
}

/// A backing whose every write fails: nothing is ever written back, so
/// the writer's wait ends with `OutOfMemory` (the data it needs the
/// memory of stays dirty, to be retried), not a hang; with the backing
/// back, the same write succeeds.
#[test]
fn a_writer_behind_a_dead_backing_gets_out_of_memory_not_a_hang() {
    let data = nonzero_bytes(160 * KIB, 9);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let (_c, f) = full_cache(b.clone());
    let mut want = dirty_every_other_page(&f, data);
    b.fail_from_nth(Op::Write, 1, libc::EIO);
    let new = nonzero_bytes(PAGE, 10);
    want[128 * KIB..128 * KIB + PAGE].copy_from_slice(&new);
    let r = crate::common::write::within(HANG, "the writer behind a dead backing", {
        let (f, new) = (f.clone(), new.clone());
        move || f.write_all_at(&new, 128 * KIB as u64)
    });
    let e = r.expect_err("nothing could be written back or freed");
    assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}");
    assert!(b.stats().injected_errors > 0, "writeback was tried");

    b.clear();
    f.write_all_at(&new, 128 * KIB as u64)
        .expect("with the backing back, the write gets its memory");
    let _ = f.sync_data();
    let mut got = vec![0u8; want.len()];
    assert_eq!(f.read_at(&mut got, 0).unwrap(), want.len());
    assert!(got == want, "the file's bytes once the backing is back");
}
