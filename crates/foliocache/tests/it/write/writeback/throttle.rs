//! What a writer over the dirty limit waits for: it writes back about
//! what it is about to dirty (at least `THROTTLE_MIN_PAGES`), not the
//! whole file, however much another writer dirties the file meanwhile.
//! Counted, not timed: the bytes each throttled write wrote back itself.

// The test's own counters are std atomics: the loom shim is the crate's.
#![allow(clippy::disallowed_types)]

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use backing::{Backing, BackingInfo, IoBuf, IoBufMut, MemBacking};
use foliocache::internals::THROTTLE_MIN_PAGES;

use crate::common::write::{nonzero_bytes, read_all, PAGE};
use test_support::cache::TestCache;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// A memory backing that counts the bytes written by one thread (the
/// flusher's and other writers' writebacks are not that thread's).
struct ThreadWrites {
    inner: MemBacking,
    thread: ThreadId,
    bytes: AtomicU64,
}

impl Backing for ThreadWrites {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        self.inner.read_blocks(bufs, offset)
    }
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let n = self.inner.write_blocks(bufs, offset)?;
        if std::thread::current().id() == self.thread {
            self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)
    }
    fn info(&self) -> BackingInfo {
        self.inner.info()
    }
}

#[test]
fn a_throttled_writer_writes_back_about_what_it_dirties_not_the_whole_file() {
    let limit = 2 * MIB;
    let c = TestCache::bytes(16 * MIB)
        .max_folio(PAGE)
        .dirty_limit(limit)
        .dirty_background(limit)
        .build();
    let b = Arc::new(ThreadWrites {
        inner: MemBacking::new(),
        thread: std::thread::current().id(),
        bytes: AtomicU64::new(0),
    });
    let f = c.open_backing(b.clone()).unwrap();
    let page = nonzero_bytes(PAGE, 7);
    let pages = (8 * MIB / PAGE) as u64;
    // The other writer dirties the second half of the file over and over
    // while this one fills the first half, page by page, past the limit.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (f, stop, page) = (f.clone(), stop.clone(), page.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            // At least one whole pass over the second half, so that the
            // file ends up 8 MiB of written pages whenever it is stopped.
            while i < pages / 2 || !stop.load(Ordering::Relaxed) {
                f.write_all_at(&page, (pages / 2 + i % (pages / 2)) * PAGE as u64)
                    .unwrap();
                i += 1;
            }
        })
    };
    let bound = THROTTLE_MIN_PAGES * PAGE as u64;
    let mut worst = 0;
    for i in 0..pages / 2 {
        let before = b.bytes.load(Ordering::Relaxed);
        f.write_all_at(&page, i * PAGE as u64).unwrap();
        worst = worst.max(b.bytes.load(Ordering::Relaxed) - before);
    }
    stop.store(true, Ordering::Relaxed);
    other.join().unwrap();
    let s = c.stats();
    assert!(s.throttled > 0, "8 MiB through a 2 MiB dirty limit: {s:?}");
    assert_eq!(
        s.throttle_latency.count, s.throttled,
        "each throttled write's wait is in the histogram"
    );
    assert!(
        worst <= bound,
        "a 4 KiB write over the dirty limit wrote back {worst} bytes itself, more than \
         {bound} (its own page, at least THROTTLE_MIN_PAGES)"
    );
    f.sync_data().unwrap();
    let data = read_all(&f);
    assert_eq!(data.len(), 8 * MIB);
    assert!(data.chunks(PAGE).all(|p| p == page), "every page written");
}
