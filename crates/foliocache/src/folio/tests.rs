use super::memory::PageBits;
use super::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

#[test]
fn page_bits_set_clear_and_take_runs_across_words() {
    let b = PageBits::new(300);
    b.set(3, 2);
    b.set(60, 10); // crosses a word
    b.set(128, 64); // a whole word
    b.set(299, 1);
    assert_eq!(b.take_runs(0, 8), vec![(3, 2)]);
    assert_eq!(b.take_runs(0, 8), vec![], "taken means cleared");
    assert_eq!(b.take_runs(50, 250), vec![(10, 10), (78, 64), (249, 1)]);
    assert_eq!(b.set(0, 300), 300);
    assert_eq!(b.set(10, 5), 0, "already set");
    assert_eq!(b.clear(1, 298), 298);
    assert_eq!(b.clear(1, 298), 0);
    assert_eq!(b.take_runs(0, 300), vec![(0, 1), (299, 1)]);
}

#[test]
fn descriptor_fits_the_kernel_budget_per_page() {
    assert!(
        FolioTable::bytes_per_page() <= 64,
        "{}",
        FolioTable::bytes_per_page()
    );
}

/// A waker counting its wakes.
struct CountWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn wakes(c: &CountWakes) -> usize {
    c.0.load(std::sync::atomic::Ordering::SeqCst)
}

/// The async wait's state machine on one folio (Miri runs it:
/// `scripts/miri.sh`): ready at once when unlocked, with no waker kept;
/// queued once however often it is polled; woken once by the unlock,
/// every task of the folio together; a dropped wait takes its waker
/// back; no `ASYNC_WAITERS` left behind, no waker clone leaked.
#[test]
fn async_waits_queue_once_wake_at_the_unlock_and_leave_nothing() {
    let f = Folio::default();
    f.init(0, 0);
    let (a, b) = (
        Arc::new(CountWakes(Default::default())),
        Arc::new(CountWakes(Default::default())),
    );
    let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
    let mut ready = f.wait_unlocked_async();
    assert!(Pin::new(&mut ready)
        .poll(&mut Context::from_waker(&wa))
        .is_ready());
    drop(ready);
    assert_eq!(Arc::strong_count(&a), 2, "a ready wait keeps no waker");

    assert!(f.trylock());
    let mut w1 = f.wait_unlocked_async();
    let mut w2 = f.wait_unlocked_async();
    for _ in 0..3 {
        assert!(Pin::new(&mut w1)
            .poll(&mut Context::from_waker(&wa))
            .is_pending());
    }
    assert!(Pin::new(&mut w2)
        .poll(&mut Context::from_waker(&wb))
        .is_pending());
    assert!(f.test(FolioFlags::ASYNC_WAITERS));
    // One queued clone each (and `w1`'s, `w2`'s own).
    assert_eq!(Arc::strong_count(&a), 4);
    f.unlock();
    assert_eq!((wakes(&a), wakes(&b)), (1, 1), "each woken once");
    assert!(!f.test(FolioFlags::ASYNC_WAITERS));
    assert!(Pin::new(&mut w1)
        .poll(&mut Context::from_waker(&wa))
        .is_ready());
    assert!(Pin::new(&mut w2)
        .poll(&mut Context::from_waker(&wb))
        .is_ready());
    drop((w1, w2));

    // Dropped while it waits: taken back, not woken by the unlock.
    assert!(f.trylock());
    let mut w3 = f.wait_unlocked_async();
    assert!(Pin::new(&mut w3)
        .poll(&mut Context::from_waker(&wa))
        .is_pending());
    drop(w3);
    f.unlock();
    assert_eq!(wakes(&a), 1, "a dropped wait was woken");
    assert_eq!(Arc::strong_count(&a), 2, "a waker clone left queued");

    // Woken from another thread's unlock.
    assert!(f.trylock());
    let mut w4 = f.wait_unlocked_async();
    assert!(Pin::new(&mut w4)
        .poll(&mut Context::from_waker(&wb))
        .is_pending());
    std::thread::scope(|s| {
        s.spawn(|| f.unlock());
    });
    assert_eq!(wakes(&b), 2);
    assert!(Pin::new(&mut w4)
        .poll(&mut Context::from_waker(&wb))
        .is_ready());
    assert!(!f
        .flags()
        .intersects(FolioFlags::LOCKED | FolioFlags::ASYNC_WAITERS));
}

#[test]
fn try_get_never_revives_a_free_folio() {
    let f = Folio::default();
    assert!(!f.try_get());
    assert_eq!(f.refcount(), 0);
    f.init(2, 8);
    assert!(f.try_get());
    assert_eq!(f.refcount(), 2);
}

#[test]
fn freeze_succeeds_only_at_the_expected_count() {
    let f = Folio::default();
    f.init(0, 0);
    f.get_many(1);
    assert!(!f.freeze(1), "an extra reference must block the freeze");
    assert!(f.freeze(2));
    assert!(!f.try_get(), "a frozen folio cannot be looked up");
    f.unfreeze(2);
    assert!(f.try_get());
}

#[test]
fn put_reports_the_last_reference() {
    let f = Folio::default();
    f.init(0, 0);
    f.get_many(3);
    assert!(!f.put_many(3));
    assert!(f.put());
    assert_eq!(f.refcount(), 0);
}

#[test]
fn contains_covers_exactly_the_folio_pages() {
    let f = Folio::default();
    f.init(3, 16);
    assert!(!f.contains(15));
    assert!((16..24).all(|i| f.contains(i)));
    assert!(!f.contains(24));
    assert!(f.put(), "the allocator's reference was the only one");
    f.init(0, u64::MAX);
    assert!(f.contains(u64::MAX));
}

#[test]
fn set_if_clear_writes_once() {
    let f = Folio::default();
    f.init(0, 0);
    f.set_if_clear(FolioFlags::REFERENCED);
    f.set_if_clear(FolioFlags::REFERENCED);
    assert!(f.test(FolioFlags::REFERENCED));
    assert!(f.test_and_clear(FolioFlags::REFERENCED));
    assert!(!f.test(FolioFlags::REFERENCED));
}

#[test]
fn flags_debug_names_the_bits() {
    let s = format!("{:?}", FolioFlags::UPTODATE | FolioFlags::DIRTY);
    assert_eq!(s, "{uptodate, dirty}");
}

#[test]
fn table_maps_descriptors_back_to_pages() {
    let t = FolioTable::new(16).unwrap();
    assert_eq!(t.page_of(t.get(5).unwrap()), Some(5));
    let stray = Folio::default();
    assert_eq!(t.page_of(&stray), None);
    assert!(t.get(16).is_none());
}

#[test]
fn lock_excludes_and_wakes_sleepers() {
    let f = Arc::new(Folio::default());
    f.init(0, 0);
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (f, inside, counter) = (f.clone(), inside.clone(), counter.clone());
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    f.lock();
                    assert!(!inside.swap(true, Ordering::AcqRel), "two holders at once");
                    counter.fetch_add(1, Ordering::Relaxed);
                    inside.store(false, Ordering::Release);
                    f.unlock();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counter.load(Ordering::Relaxed), 8000);
    assert!(!f.is_locked());
    assert!(!f.test(FolioFlags::WAITERS));
}

#[test]
fn wait_unlocked_returns_after_the_holder_unlocks() {
    let f = Arc::new(Folio::default());
    f.init(0, 0);
    f.lock();
    let waiter = {
        let f = f.clone();
        std::thread::spawn(move || {
            f.wait_unlocked();
            f.test(FolioFlags::UPTODATE)
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    f.mark_uptodate();
    f.unlock();
    assert!(
        waiter.join().unwrap(),
        "the waiter sees what the holder did before unlocking"
    );
}

#[test]
fn trylock_fails_while_held() {
    let f = Folio::default();
    f.init(0, 0);
    assert!(f.trylock());
    assert!(!f.trylock());
    f.unlock();
    assert!(f.trylock());
    f.unlock();
}
