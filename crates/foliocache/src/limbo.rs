//! Freed folios whose pages wait out a grace period before the arena hands
//! them out again: what lets a cache hit copy a folio's bytes with no
//! reference on it (`Mapping::read_hit`, `docs/design.md`, "A hit without
//! a reference").
//!
//! The kernel's lockless readers take a speculative reference
//! (`folio_try_get`) because a page freed under them may be reused at once.
//! A hit here holds an epoch pin instead (the one its index walk takes
//! anyway, held over the copy) and writes nothing shared. What makes that
//! sound is this module: every folio the cache frees is *retired* here, and
//! its pages go back to the arena only once every epoch pin that was held
//! when it was retired has been dropped. A hit found the folio in the index
//! under its pin, or found it named by the mapping's hints with its
//! mapping still set (`huge_hints.rs`); the folio was removed from the
//! index, and its mapping cleared, before it was freed (and the retire
//! pushes a bag, behind a `SeqCst` fence, after both);
//! so the pages it copies cannot be allocated again, filled through a
//! `&mut [u8]` by a backing, or given back to the OS while it copies. The
//! grace period is crossbeam-epoch's global one, which every index pin
//! (`xarray`'s, crossbeam's default collector) is part of: retiring defers
//! a closure that moves the blocks to a ready list, and flushes it so that
//! it does not wait in this thread's local bag.
//!
//! The arena takes the ready blocks back lazily: at an allocation the arena
//! cannot serve ([`Limbo::settle`], which also pushes the epoch on, briefly,
//! when pages are still waiting) and when the cache's figures are read.
//! Pages in limbo count as free in those figures: they hold no data and
//! will be allocatable in microseconds (a pin lasts one copy).
//!
//! Under loom (`--cfg loom`) crossbeam is not modelled (the index's nodes
//! leak instead, `xarray::sync`); the grace period is modelled as a count
//! of hits in flight: [`Limbo::reader`] raises it for a hit's whole walk
//! and copy, and [`Limbo::settle`] gives retired blocks back only when it
//! reads zero after a `SeqCst` fence (the store-buffering pattern: a hit
//! that the fence orders after the settle walks an index without the
//! folio). That checks the hit's side of the protocol: what it validates,
//! in what order, and that a folio it copies from is never reused under it.

use std::sync::Arc;

use crate::arena::{Arena, PageId};
use crate::sync::{AtomicUsize, Mutex, Ordering};

/// The cache's retired folios (one per cache; see the module docs).
pub(crate) struct Limbo {
    shared: Arc<Shared>,
}

/// What the deferred closures reach: kept by them past the cache's drop,
/// so a closure that runs after it touches only this.
struct Shared {
    /// Blocks (first page, order) whose grace period has ended.
    ready: Mutex<Vec<(PageId, u32)>>,
    /// Pages in `ready`.
    ready_pages: AtomicUsize,
    /// Pages retired and not yet given back to the arena (ready or not).
    pages: AtomicUsize,
    /// Under loom: blocks retired, waiting for no hit to be in flight.
    #[cfg(loom)]
    waiting: Mutex<Vec<(PageId, u32)>>,
    /// Under loom: hits in flight.
    #[cfg(loom)]
    readers: AtomicUsize,
}

impl Shared {
    /// Moves `blocks`, whose grace period has ended, to the ready list.
    fn make_ready(&self, blocks: Vec<(PageId, u32)>) {
        let n = pages_in(&blocks);
        self.ready.lock().extend(blocks);
        self.ready_pages.fetch_add(n, Ordering::Release);
    }
}

/// Pages in `blocks` (first page, order).
fn pages_in(blocks: &[(PageId, u32)]) -> usize {
    blocks.iter().map(|&(_, o)| 1usize << o).sum()
}

/// A hit in flight, for loom's model of the grace period (nothing outside
/// loom: there the hit's index pin is the witness).
pub(crate) struct Reader<'a> {
    #[cfg(loom)]
    limbo: &'a Limbo,
    #[cfg(not(loom))]
    _limbo: std::marker::PhantomData<&'a Limbo>,
}

#[cfg(loom)]
impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.limbo.shared.readers.fetch_sub(1, Ordering::Release);
    }
}

impl Limbo {
    pub(crate) fn new() -> Self {
        Limbo {
            shared: Arc::new(Shared {
                ready: Mutex::new(Vec::new()),
                ready_pages: AtomicUsize::new(0),
                pages: AtomicUsize::new(0),
                #[cfg(loom)]
                waiting: Mutex::new(Vec::new()),
                #[cfg(loom)]
                readers: AtomicUsize::new(0),
            }),
        }
    }

    /// Marks a hit in flight, for the whole of its walk and copy: a no-op
    /// outside loom, where the hit's index pin is what a retire waits for.
    #[inline]
    pub(crate) fn reader(&self) -> Reader<'_> {
        #[cfg(loom)]
        {
            self.shared.readers.fetch_add(1, Ordering::SeqCst);
            crate::sync::fence(Ordering::SeqCst);
            Reader { limbo: self }
        }
        #[cfg(not(loom))]
        Reader {
            _limbo: std::marker::PhantomData,
        }
    }

    /// Retires freed blocks (first page, order): each was removed from
    /// every index before this call, and holds no reference. The arena
    /// gets them back once no epoch pin held now remains.
    pub(crate) fn retire(&self, blocks: Vec<(PageId, u32)>) {
        if blocks.is_empty() {
            return;
        }
        let n = pages_in(&blocks);
        self.shared.pages.fetch_add(n, Ordering::Relaxed);
        #[cfg(not(loom))]
        {
            let shared = self.shared.clone();
            let guard = crossbeam_epoch::pin();
            guard.defer(move || shared.make_ready(blocks));
            // Out of this thread's bag, so that another thread's collection
            // (or a settle) can run it: a thread that frees and then idles
            // would otherwise keep the pages until it pins 64 more times.
            guard.flush();
        }
        #[cfg(loom)]
        self.shared.waiting.lock().extend(blocks);
    }

    /// Pages retired and not yet back in the arena.
    pub(crate) fn pages(&self) -> usize {
        self.shared.pages.load(Ordering::Relaxed)
    }

    /// Gives the blocks whose grace period has ended back to `arena`, in
    /// one hold of its lock; returns how many pages. Never waits.
    pub(crate) fn drain(&self, arena: &Arena) -> usize {
        #[cfg(loom)]
        {
            crate::sync::fence(Ordering::SeqCst);
            if self.shared.readers.load(Ordering::SeqCst) == 0 {
                let waiting = std::mem::take(&mut *self.shared.waiting.lock());
                if !waiting.is_empty() {
                    self.shared.make_ready(waiting);
                }
            }
        }
        if self.shared.ready_pages.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let blocks = std::mem::take(&mut *self.shared.ready.lock());
        let n = pages_in(&blocks);
        self.shared.ready_pages.fetch_sub(n, Ordering::Relaxed);
        if let Err((i, e)) = arena.free_bulk(&blocks) {
            // The retired blocks and the arena disagree: a bug, never
            // user input (as `CacheInner::free_folio`'s).
            log::error!("foliocache: freeing block {:?}: {e}", blocks[i]);
            debug_assert!(false, "freeing block {:?}: {e}", blocks[i]);
        }
        self.shared.pages.fetch_sub(n, Ordering::Relaxed);
        n
    }

    /// [`drain`](Self::drain), and while pages are still waiting and none
    /// came back, pushes the epoch on and drains again, for at most
    /// `wait`: for an allocation the arena could not serve, which would
    /// rather wait for a hit to end (microseconds, unless its thread lost
    /// its CPU mid-copy) than evict a folio. Returns how many pages went
    /// back. A thread that holds an epoch pin itself holds back what was
    /// retired in its epoch, so it stops after the pushes that can free
    /// older retirements.
    pub(crate) fn settle(&self, arena: &Arena, wait: std::time::Duration) -> usize {
        // (Under loom the drain is the whole of it: the model's grace
        // period ends when no hit is in flight, which waiting cannot hurry.)
        #[cfg(loom)]
        let _ = wait;
        if self.pages() == 0 {
            return 0;
        }
        let got = self.drain(arena);
        #[cfg(not(loom))]
        if got == 0 {
            let pinned = crossbeam_epoch::is_pinned();
            let start = std::time::Instant::now();
            let mut pushes = 0;
            while self.pages() > 0 {
                crossbeam_epoch::pin().flush();
                pushes += 1;
                let got = self.drain(arena);
                if got > 0 {
                    return got;
                }
                if (pinned && pushes >= 3) || start.elapsed() >= wait {
                    break;
                }
                if pushes >= 64 {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                } else if pushes >= 4 {
                    std::thread::yield_now();
                }
            }
        }
        got
    }
}

/// How long an allocation that may not wait lets [`Limbo::settle`] push
/// the epoch on: long beside a hit's pin (one copy, microseconds).
pub(crate) const SETTLE_BRIEF: std::time::Duration = std::time::Duration::from_millis(1);

/// How long an allocation that may wait (a reader's own folio) waits for
/// retired pages before it reclaims: a reader preempted mid-copy holds the
/// epoch for its time slice, and evicting a folio the cache could keep
/// costs a later miss.
pub(crate) const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::arena::Populate;

    /// Settles until nothing waits: other tests' threads pin the same
    /// global epoch for moments at a time, so one settle may not do.
    fn settle_all(limbo: &Limbo, arena: &Arena) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while limbo.pages() > 0 {
            limbo.settle(arena, SETTLE_BRIEF);
            assert!(
                std::time::Instant::now() < deadline,
                "retired pages never came back"
            );
        }
    }

    #[test]
    fn retired_blocks_come_back_once_the_pins_of_their_time_end() {
        let arena = Arena::new(64 * 4096, Populate::Lazy).unwrap();
        let limbo = Limbo::new();
        let a = arena.alloc(2).unwrap();
        let b = arena.alloc(0).unwrap();
        assert_eq!(arena.free_pages(), 64 - 5);
        let guard = crossbeam_epoch::pin();
        limbo.retire(vec![(a, 2), (b, 0)]);
        assert_eq!(limbo.pages(), 5);
        // This thread's own pin keeps them: settle only drains.
        assert_eq!(limbo.settle(&arena, SETTLE_BRIEF), 0);
        assert_eq!(arena.free_pages(), 64 - 5);
        drop(guard);
        settle_all(&limbo, &arena);
        assert_eq!(arena.free_pages(), 64);
        arena.check_consistency().unwrap();
    }

    #[test]
    fn a_pin_on_another_thread_holds_retired_pages_until_it_ends() {
        let arena = Arena::new(16 * 4096, Populate::Lazy).unwrap();
        let limbo = Limbo::new();
        let p = arena.alloc(0).unwrap();
        let (to_reader, reader_rx) = std::sync::mpsc::channel::<()>();
        let (to_main, main_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let guard = crossbeam_epoch::pin();
                to_main.send(()).unwrap();
                reader_rx.recv().unwrap();
                drop(guard);
                to_main.send(()).unwrap();
            });
            main_rx.recv().unwrap();
            limbo.retire(vec![(p, 0)]);
            // The reader pinned before the retire: nothing comes back,
            // however often the epoch is pushed.
            for _ in 0..4 {
                assert_eq!(limbo.settle(&arena, SETTLE_BRIEF), 0);
            }
            assert_eq!(arena.free_pages(), 15);
            to_reader.send(()).unwrap();
            main_rx.recv().unwrap();
            settle_all(&limbo, &arena);
            assert_eq!(arena.free_pages(), 16);
        });
    }
}
