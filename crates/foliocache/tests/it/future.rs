//! The async API (`foliocache::future`): read futures on tokio's runtimes
//! and on minimal executors, many tasks on one folio, and cancellation.
//!
//! What must hold (`docs/async.md`):
//! - a hit completes on the first poll, without registering a waker;
//! - a miss returns `Pending` with its waker queued on the folio being
//!   read, and the unlock that ends the read wakes every task waiting on
//!   that folio;
//! - the futures return what the blocking reads return, on any executor;
//! - dropped at any await point, under failing reads, a read leaves the
//!   cache consistent: nothing locked, the LRU and the folio counts sound,
//!   and later reads get the file's bytes.

// The test's own wakers count with std's atomics and wait on std's
// condition variable: test code outside the crate's loom models.
#![allow(clippy::disallowed_types)]

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use foliocache::filemap::{FgpFlags, FolioFlags};
use foliocache::{Cache, File, PressureConfig, ReadFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{nonzero_bytes, settled};
use backing::aio::{EngineKind as IoKind, IoEngineConfig};
use test_support::cache::{faulty_file, mem_file, TestCache};

/// tokio's IO traits: the borrowed `Cursor` and the owned `AsyncFile`.
mod handles;
/// The async reads' misses in the miss latency histogram.
mod latency;
/// Reads and writes when memory is short.
mod reclaim;
/// The writes, syncs and `set_len`.
mod write;

const P: u64 = 4096;

/// A test cache of `pages` pages; under Miri (which runs the futures'
/// state machines here: `scripts/miri.sh`) its IO engine is the thread
/// pool and it watches no memory pressure, Miri having neither io_uring
/// nor `poll`.
fn test_cache(pages: usize) -> TestCache {
    let t = TestCache::pages(pages);
    if cfg!(miri) {
        t.io_engine(IoEngineConfig::new().kind(IoKind::Threads))
            .pressure(PressureConfig::off())
    } else {
        t
    }
}

/// A waker that counts its clones and wakes, and lets a thread wait for a
/// wake.
#[derive(Default)]
struct Counting {
    clones: AtomicUsize,
    wakes: Mutex<usize>,
    woken: Condvar,
}

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        *self.wakes.lock().unwrap() += 1;
        self.woken.notify_all();
    }
}

impl Counting {
    fn wakes(&self) -> usize {
        *self.wakes.lock().unwrap()
    }

    /// Waits until the count of wakes passes `seen`.
    fn wait_past(&self, seen: usize) {
        let mut w = self.wakes.lock().unwrap();
        while *w <= seen {
            w = self.woken.wait(w).unwrap();
        }
    }
}

/// A waker over `c` that counts its clones (a registration clones it).
fn counting_waker(c: &Arc<Counting>) -> Waker {
    use std::task::{RawWaker, RawWakerVTable};
    fn clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` came from `Arc::into_raw` of an `Arc<Counting>` whose
        // count this waker holds.
        let a = unsafe { Arc::from_raw(p as *const Counting) };
        a.clones.fetch_add(1, Ordering::Relaxed);
        let b = a.clone();
        std::mem::forget(a);
        RawWaker::new(Arc::into_raw(b) as *const (), &VTABLE)
    }
    fn wake(p: *const ()) {
        // SAFETY: as in `clone`; this consumes the waker's count.
        let a = unsafe { Arc::from_raw(p as *const Counting) };
        a.wake();
    }
    fn wake_by_ref(p: *const ()) {
        // SAFETY: as in `clone`; the count stays with the waker.
        let a = unsafe { Arc::from_raw(p as *const Counting) };
        a.wake_by_ref();
        std::mem::forget(a);
    }
    fn drop(p: *const ()) {
        // SAFETY: as in `clone`; this drops the waker's count.
        unsafe { Arc::from_raw(p as *const Counting) };
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);
    let raw = RawWaker::new(Arc::into_raw(c.clone()) as *const (), &VTABLE);
    // SAFETY: the vtable's functions keep `Arc`'s counts as `RawWaker`'s
    // contract asks.
    unsafe { Waker::from_raw(raw) }
}

/// Polls `fut` to completion on this thread, waiting for wakes between
/// polls; returns the output and how many polls returned `Pending`.
fn drive<F: Future>(fut: F) -> (F::Output, usize) {
    let c = Arc::new(Counting::default());
    let waker = counting_waker(&c);
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let mut pending = 0;
    loop {
        let seen = c.wakes();
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return (out, pending),
            Poll::Pending => {
                pending += 1;
                c.wait_past(seen);
            }
        }
    }
}

/// Polls `fut` until it returned `Pending` `k` times (waiting for a wake
/// between polls, not after the last) or completed, then drops it.
fn drop_after<F: Future>(fut: F, k: usize) {
    let counting = Arc::new(Counting::default());
    let waker = counting_waker(&counting);
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let mut seen = 0;
    while seen < k {
        let w = counting.wakes();
        if fut.as_mut().poll(&mut cx).is_ready() {
            break;
        }
        seen += 1;
        if seen < k {
            counting.wait_past(w);
        }
    }
}

/// What a read of `len` bytes at `off` of `data` gives.
fn expect(data: &[u8], off: u64, len: usize) -> &[u8] {
    let from = (off as usize).min(data.len());
    let to = off.saturating_add(len as u64).min(data.len() as u64) as usize;
    &data[from..to]
}

/// Checks the cache once every folio of `f` (of `pages` pages) is settled:
/// none locked, none with waiters, the LRU sound.
fn check_cache(c: &Cache, f: &File, pages: u64) {
    settled(f.mapping(), 0, pages.saturating_sub(1));
    c.check_lru().unwrap();
    for i in 0..pages {
        if let Ok(folio) = f.mapping().get_folio(i, FgpFlags::empty()) {
            assert!(
                !folio.flags().intersects(FolioFlags::ASYNC_WAITERS),
                "{folio:?}"
            );
        }
    }
}

#[test]
fn a_hit_completes_on_the_first_poll_without_a_waker() {
    let c = test_cache(16).build();
    let data = nonzero_bytes(4 * P as usize, 1);
    let f = mem_file(&c, &data);
    let mut buf = vec![0u8; 100];
    f.read_at(&mut buf, 0).unwrap();
    let counting = Arc::new(Counting::default());
    let waker = counting_waker(&counting);
    let mut cx = Context::from_waker(&waker);
    {
        let mut fut = pin!(f.read_at_async(&mut buf, 10));
        let r = fut.as_mut().poll(&mut cx);
        assert!(matches!(r, Poll::Ready(Ok(100))), "{r:?}");
    }
    assert_eq!(counting.clones.load(Ordering::Relaxed), 0);
    assert_eq!(buf, &data[10..110]);
}

#[test]
fn a_miss_waits_on_the_folio_and_every_waiter_wakes_at_its_unlock() {
    let c = test_cache(16).no_readahead().build();
    let data = nonzero_bytes(4 * P as usize, 2);
    let f = mem_file(&c, &data);
    // The folio of page 1, locked and not uptodate: a read in flight.
    let locked = f.mapping().lock_folio(1, FgpFlags::CREAT).unwrap();
    let tasks: usize = if cfg!(miri) { 6 } else { 50 };
    let mut bufs = vec![vec![0u8; 64]; tasks];
    let counters: Vec<_> = (0..tasks).map(|_| Arc::new(Counting::default())).collect();
    let mut futs: Vec<_> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| Box::pin(f.read_at_async(b, P + i as u64 * 8)))
        .collect();
    for (fut, cnt) in futs.iter_mut().zip(&counters) {
        let waker = counting_waker(cnt);
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    assert!(locked.flags().contains(FolioFlags::ASYNC_WAITERS));
    assert!(counters.iter().all(|c| c.wakes() == 0));
    // The read completes: the unlock wakes every task, each once.
    f.mapping().read_folio(locked).unwrap();
    assert!(counters.iter().all(|c| c.wakes() == 1));
    for (i, (fut, cnt)) in futs.iter_mut().zip(&counters).enumerate() {
        let waker = counting_waker(cnt);
        let r = fut.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(matches!(r, Poll::Ready(Ok(64))), "task {i}: {r:?}");
    }
    drop(futs);
    for (i, b) in bufs.iter().enumerate() {
        let off = P as usize + i * 8;
        assert_eq!(&b[..], &data[off..off + 64], "task {i}");
    }
    check_cache(&c, &f, 4);
}

#[test]
fn a_future_dropped_while_it_waits_takes_its_waker_back() {
    let c = test_cache(16).no_readahead().build();
    let data = nonzero_bytes(2 * P as usize, 3);
    let f = mem_file(&c, &data);
    let locked = f.mapping().lock_folio(0, FgpFlags::CREAT).unwrap();
    let counting = Arc::new(Counting::default());
    let mut buf = vec![0u8; 10];
    {
        let waker = counting_waker(&counting);
        let mut fut = pin!(f.read_at_async(&mut buf, 0));
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    f.mapping().read_folio(locked).unwrap();
    assert_eq!(counting.wakes(), 0, "a dropped future's waker was woken");
    assert_eq!(buf, vec![0u8; 10], "the buffer was written after the drop");
    check_cache(&c, &f, 2);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "200 reads: the other tests run the state machine under Miri"
)]
fn reads_on_minimal_executors_return_the_blocking_reads_bytes() {
    let c = test_cache(8).build();
    let data = nonzero_bytes(64 * P as usize + 100, 4);
    let (f, _b) = faulty_file(&c, &data);
    let mut rng = StdRng::seed_from_u64(4);
    for i in 0..200 {
        let off = rng.gen_range(0..data.len() as u64 + 10);
        let len = rng.gen_range(1..3 * P as usize);
        let mut buf = vec![0u8; len];
        let n = if i % 2 == 0 {
            pollster::block_on(f.read_at_async(&mut buf, off)).unwrap()
        } else {
            futures_executor::block_on(f.read_at_async(&mut buf, off)).unwrap()
        };
        assert_eq!(&buf[..n], expect(&data, off, len), "read {i} at {off}");
    }
    let mut buf = vec![0u8; 200];
    let eof = pollster::block_on(f.read_exact_at_async(&mut buf, data.len() as u64 - 100));
    assert_eq!(eof.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    pollster::block_on(f.read_exact_at_async(&mut buf, 5000)).unwrap();
    assert_eq!(&buf[..], &data[5000..5200]);
    check_cache(&c, &f, 65);
}

#[test]
fn a_miss_reads_the_files_bytes_and_counts_a_miss() {
    let c = test_cache(16).no_readahead().build();
    let data = nonzero_bytes(4 * P as usize, 5);
    let (f, b) = faulty_file(&c, &data);
    let mut buf = vec![0u8; 3 * P as usize];
    let (r, _) = drive(f.read_at_async(&mut buf, 100));
    assert_eq!(r.unwrap(), buf.len());
    assert_eq!(&buf[..], &data[100..100 + buf.len()]);
    assert!(b.stats().reads >= 1);
    let s = c.stats();
    assert!(s.misses >= 1, "{s:?}");
    check_cache(&c, &f, 4);
}

#[test]
fn nowait_reads_fail_with_would_block_and_start_nothing() {
    let c = test_cache(16).build();
    let data = nonzero_bytes(4 * P as usize, 6);
    let (f, b) = faulty_file(&c, &data);
    let mut buf = vec![0u8; 10];
    let r = pollster::block_on(f.read_at_flags_async(&mut buf, 0, ReadFlags::NOWAIT));
    assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    assert_eq!(b.stats().reads, 0);
}

#[test]
fn a_failed_read_is_the_futures_error_and_leaves_the_cache_sound() {
    let c = test_cache(16).build();
    let data = nonzero_bytes(8 * P as usize, 7);
    let (f, b) = faulty_file(&c, &data);
    b.fail_reads_in(2 * P, P, libc::EIO);
    let mut buf = vec![0u8; 100];
    let r = pollster::block_on(f.read_at_async(&mut buf, 2 * P + 5));
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
    check_cache(&c, &f, 8);
    b.clear_read_ranges();
    let n = pollster::block_on(f.read_at_async(&mut buf, 2 * P + 5)).unwrap();
    assert_eq!(&buf[..n], &data[2 * P as usize + 5..][..100]);
}

/// Drops a read after its `k`-th `Pending`, for every `k` the read reaches,
/// with reads failing at random: the cache stays sound, and the bytes are
/// the file's once the faults are gone.
#[test]
#[cfg_attr(miri, ignore = "hundreds of reads under faults: too slow for Miri")]
fn reads_dropped_at_every_await_point_under_faults_leave_the_cache_sound() {
    let c = test_cache(12).build();
    let pages = 40u64;
    let data = nonzero_bytes((pages * P) as usize, 8);
    let (f, b) = faulty_file(&c, &data);
    let mut rng = StdRng::seed_from_u64(8);
    for round in 0..60 {
        f.discard().unwrap();
        if round % 3 != 0 {
            let at = rng.gen_range(0..pages) * P;
            b.fail_reads_in(at, P * rng.gen_range(1..4), libc::EIO);
        }
        let off = rng.gen_range(0..pages * P);
        let len = rng.gen_range(1..6 * P as usize);
        let mut buf = vec![0u8; len];
        // How many Pendings the whole read goes through.
        let (_, total) = drive(f.read_at_async(&mut buf, off));
        for k in 0..=total {
            f.discard().unwrap();
            drop_after(f.read_at_async(&mut buf, off), k);
            check_cache(&c, &f, pages);
        }
        b.clear_read_ranges();
        let n = pollster::block_on(f.read_at_async(&mut buf, off)).unwrap();
        assert_eq!(&buf[..n], expect(&data, off, len), "round {round}");
    }
    check_cache(&c, &f, pages);
}

/// Many tasks reading one file at random on a runtime: every read returns
/// the file's bytes.
async fn many_tasks(f: Arc<File>, data: Arc<Vec<u8>>, tasks: usize) {
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let (f, data) = (f.clone(), data.clone());
        set.spawn(async move {
            let mut rng = StdRng::seed_from_u64(t as u64);
            let mut buf = vec![0u8; 2 * P as usize];
            for _ in 0..20 {
                let off = rng.gen_range(0..data.len() as u64);
                let len = rng.gen_range(1..buf.len());
                let n = f.read_at_async(&mut buf[..len], off).await.unwrap();
                assert_eq!(&buf[..n], expect(&data, off, len));
                // Tasks of one folio: many read the first page.
                let n = f.read_at_async(&mut buf[..64], 0).await.unwrap();
                assert_eq!(&buf[..n], &data[..64]);
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

fn runtime_case(rt: tokio::runtime::Runtime) {
    let c = test_cache(32).build();
    let data = Arc::new(nonzero_bytes(256 * P as usize, 9));
    let (f, _b) = faulty_file(&c, &data);
    let f = Arc::new(f);
    rt.block_on(many_tasks(f.clone(), data, 64));
    check_cache(&c, &f, 256);
}

#[test]
#[cfg_attr(miri, ignore = "tokio's runtime and 1280 reads: too slow for Miri")]
fn many_tasks_on_tokios_current_thread_runtime() {
    runtime_case(
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap(),
    );
}

#[test]
#[cfg_attr(miri, ignore = "tokio's runtime and 1280 reads: too slow for Miri")]
fn many_tasks_on_tokios_multi_thread_runtime() {
    runtime_case(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap(),
    );
}

#[test]
fn pin_async_pins_a_hit_on_the_first_poll_and_reads_a_miss_without_a_thread() {
    let c = test_cache(16).no_readahead().build();
    let data = nonzero_bytes(8 * P as usize, 10);
    let (f, _b) = faulty_file(&c, &data);
    // A miss: read by the IO engine, then pinned in place.
    let (p, _) = drive(f.pin_async(P + 10, 100));
    let p = p.unwrap();
    assert_eq!(&p[..], &data[P as usize + 10..][..100]);
    drop(p);
    // A hit: the first poll, no waker.
    let counting = Arc::new(Counting::default());
    let waker = counting_waker(&counting);
    let mut fut = pin!(f.pin_async(P + 200, 50));
    match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(Ok(p)) => assert_eq!(&p[..], &data[P as usize + 200..][..50]),
        other => panic!("{other:?}"),
    }
    assert_eq!(counting.clones.load(Ordering::Relaxed), 0);
    // Across folios, and at end of file.
    let p = pollster::block_on(f.pin_async(3 * P - 10, 30)).unwrap();
    assert_eq!(&p[..], &data[3 * P as usize - 10..][..30]);
    let p = pollster::block_on(f.pin_async(8 * P - 5, 30)).unwrap();
    assert_eq!(&p[..], &data[8 * P as usize - 5..]);
    assert!(pollster::block_on(f.pin_async(8 * P, 30))
        .unwrap()
        .is_empty());
    drop(p);
    // Dropped after its first poll (waiting, most likely, or done): nothing
    // stays pinned (a write goes in place, with no copy of the folio).
    f.discard().unwrap();
    {
        let waker = counting_waker(&counting);
        let mut fut = pin!(f.pin_async(5 * P, 10));
        let _ = fut.as_mut().poll(&mut Context::from_waker(&waker));
    }
    check_cache(&c, &f, 8);
    let copies = c.stats().pin_copies;
    f.write_at(b"x", 5 * P).unwrap();
    assert_eq!(c.stats().pin_copies, copies, "a pin outlived its future");
}

#[test]
fn a_cursor_reads_and_seeks_through_tokios_traits() {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let c = test_cache(8).build();
    let data = nonzero_bytes(40 * P as usize + 123, 11);
    let (f, _b) = faulty_file(&c, &data);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cur = f.cursor(0);
        let mut all = Vec::new();
        cur.read_to_end(&mut all).await.unwrap();
        assert!(all == data, "read_to_end");
        assert_eq!(cur.position(), data.len() as u64);
        f.discard().unwrap();
        let mut buf = vec![0u8; 100];
        assert_eq!(
            cur.seek(io::SeekFrom::End(-100)).await.unwrap(),
            data.len() as u64 - 100
        );
        cur.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf[..], &data[data.len() - 100..]);
        let at = cur
            .seek(io::SeekFrom::Current(-(3 * P as i64)))
            .await
            .unwrap();
        cur.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf[..], &data[at as usize..][..100]);
        cur.seek(io::SeekFrom::Start(7 * P - 1)).await.unwrap();
        cur.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf[..], &data[7 * P as usize - 1..][..100]);
        let err = cur
            .seek(io::SeekFrom::Current(-(1 << 40)))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        cur.seek(io::SeekFrom::Start(data.len() as u64 + 5))
            .await
            .unwrap();
        assert_eq!(cur.read(&mut buf).await.unwrap(), 0, "past the end");
    });
    check_cache(&c, &f, 41);
}
