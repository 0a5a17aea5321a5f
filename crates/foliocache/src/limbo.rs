//! Freed folios whose pages wait out a grace period before the arena hands
//! them out again: what lets a cache hit copy a folio's bytes with no
//! reference on it (`Mapping::read_hit`, `docs/design.md`, "A hit without
//! a reference").
//!
//! The kernel's lockless readers take a speculative reference
//! (`folio_try_get`) because a page freed under them may be reused at once.
//! A hit here announces the folio it reads instead, in its thread's
//! *reader slot* of this cache, and writes nothing shared. What makes that
//! sound is this module: every folio the cache frees after it was uptodate
//! is *retired* here, and its pages go back to the arena only once no hit
//! that announced it when it was retired is still in flight. So the pages
//! a hit copies cannot be allocated again, filled through a `&mut [u8]` by
//! a backing, or given back to the OS while it copies.
//!
//! The protocol (the store-buffering pattern, with a `SeqCst` fence on
//! each side):
//! - A hit ([`Limbo::reader`], [`Reader::move_to`]) stores in its slot an
//!   odd value naming the folio's first arena page, then a `SeqCst` fence,
//!   and only then checks the descriptor it copies from; it makes the slot
//!   even again (release) when the copy is done. The copy checks that the
//!   hit announced that folio, of this cache ([`Reader::covers`]).
//! - A folio is removed from its index and its mapping cleared before it
//!   is freed; [`Limbo::retire`] then issues a `SeqCst` fence and records
//!   the slots it sees odd and naming a page of the retired blocks. With
//!   none, the blocks go back to the arena at once; else once each of
//!   those slots has moved on (an acquire load sees another value: the
//!   hit's copy happened before).
//! - Between the two fences, one comes first. If the hit's, the retire sees
//!   the hit's announcement and waits for it. If the retire's, the hit sees
//!   the folio gone (its mapping cleared: the check refuses it) or, if the
//!   descriptor was allocated again since, whatever its new owner set,
//!   which it checks the same way.
//! - A folio's pages are one arena block from its allocation to its free
//!   (folios are never split), so the first page names all of them.
//!
//! A slot belongs to a thread: the one that owns the statistics shard of
//! the same number (`cache.rs`, `shard`), so each cache has one slot per
//! shard and a hit's announcement is a store to a line only its thread
//! writes, and the fence. A thread with no shard of its own (more than
//! there are, or its thread-locals torn down), or already inside a hit,
//! gets no slot: its hit takes a reference instead. A thread preempted in
//! the middle of a hit holds back only the folio it reads, which its hit
//! found in use.
//!
//! The arena takes the blocks that had to wait back lazily: at an
//! allocation the arena cannot serve ([`Limbo::settle`], which waits
//! briefly when pages are still waiting) and when the cache's figures are
//! read. Pages in limbo count as free in those figures: they hold no data
//! and will be allocatable in microseconds (a hit lasts one copy).
//!
//! Under loom (`--cfg loom`) the same protocol runs, with the slot of each
//! of the model's threads handed out in the order they first hit (a loom
//! thread-local), so the models check it as it is: what a hit validates,
//! in what order, and that a folio it copies from is never reused under it.

use std::marker::PhantomData;

use crate::arena::{Arena, PageId};
use crate::sync::{fence, AtomicU64, AtomicUsize, Mutex, Ordering};

/// The cache's reader slots and retired folios (one per cache; see the
/// module docs).
pub(crate) struct Limbo {
    /// One per shard a thread can own: odd while its thread's hit is in
    /// flight. Only that thread writes it.
    slots: Box<[Slot]>,
    /// Blocks retired, each batch with the slots (number, value) it waits
    /// to see move on.
    waiting: Mutex<Vec<Retired>>,
    /// Pages retired and not yet given back to the arena.
    pages: AtomicUsize,
}

/// A reader slot, on a line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// Blocks (first page, order) retired together, and the hits in flight
/// then: (slot, odd value seen).
struct Retired {
    blocks: Vec<(PageId, u32)>,
    readers: Vec<(usize, u64)>,
}

/// Gives `blocks` (first page, order), whose grace period has ended, back
/// to `arena` in one hold of its lock.
fn free_to(arena: &Arena, blocks: &[(PageId, u32)]) {
    if let Err((i, e)) = arena.free_bulk(blocks) {
        // The retired blocks and the arena disagree: a bug, never user
        // input (as `CacheInner::free_folio`'s).
        log::error!("foliocache: freeing block {:?}: {e}", blocks[i]);
        debug_assert!(false, "freeing block {:?}: {e}", blocks[i]);
    }
}

/// Pages in `blocks` (first page, order).
fn pages_in(blocks: &[(PageId, u32)]) -> usize {
    blocks.iter().map(|&(_, o)| 1usize << o).sum()
}

/// A hit in flight ([`Limbo::reader`]): its slot stays odd, naming the
/// folio it reads and holding back that folio's pages if they are retired
/// meanwhile, until it is dropped. Tied to its thread (the slot is the
/// thread's) and to the cache.
pub(crate) struct Reader<'a> {
    slot: &'a AtomicU64,
    /// The slot's value: [`announcing`] the folio's first page.
    entered: u64,
    _thread: PhantomData<*const ()>,
}

/// A slot's value while a hit is in flight: odd, with the first arena page
/// of the folio the hit reads, and a count of the thread's announcements
/// in the bits above (so that every announcement, and every end, writes a
/// value the slot did not hold just before: a retire that saw one value
/// knows the hit it saw has ended when it reads another).
fn announcing(count: u64, page: u32) -> u64 {
    count << COUNT_SHIFT | u64::from(page) << 1 | 1
}

/// Where a slot's count of announcements starts.
const COUNT_SHIFT: u32 = 33;

/// The first page of the folio a slot's odd value names.
fn announced_page(v: u64) -> u64 {
    (v >> 1) & u64::from(u32::MAX)
}

impl Reader<'_> {
    /// Whether this hit, of `limbo`'s cache, announced the folio whose
    /// first arena page is `page` (a hit of another cache, or of another
    /// folio, holds back nothing of this one).
    #[inline]
    pub(crate) fn covers(&self, limbo: &Limbo, page: u32) -> bool {
        announced_page(self.entered) == u64::from(page)
            && limbo
                .slots
                .as_ptr_range()
                .contains(&std::ptr::from_ref(self.slot).cast())
    }

    /// Announces the folio whose first arena page is `page` instead, for
    /// the rest of the hit: a folio checked after this keeps its pages
    /// until the hit ends.
    #[inline]
    pub(crate) fn move_to(&mut self, page: u32) {
        self.entered = announcing((self.entered >> COUNT_SHIFT) + 1, page);
        announce(self.slot, self.entered);
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        // Release: a retire that sees the slot move on (acquire) sees the
        // hit's copy done.
        self.slot.store(
            self.entered >> COUNT_SHIFT << COUNT_SHIFT,
            Ordering::Release,
        );
    }
}

/// This thread's slot number, if it has one (the shard it owns).
#[cfg(not(loom))]
fn this_thread() -> Option<usize> {
    crate::stats::owned_shard()
}

/// Stores `value` (odd, [`announcing`] a folio) in a hit's `slot`, then
/// issues the hit's side of the protocol's fence: the descriptor checks
/// and the copy that follow come after it.
#[inline]
fn announce(slot: &AtomicU64, value: u64) {
    // Release as well: a retire that reads a later value of the slot than
    // the last end's sees that end's copy done.
    slot.store(value, Ordering::Release);
    fence(Ordering::SeqCst);
}

/// How many slots (the first ones) a retire reads: all of them (a slot no
/// thread has used is a line no thread writes, and stays in the retiring
/// CPU's cache).
#[cfg(not(loom))]
fn slots_read() -> usize {
    crate::stats::SLOTS
}

#[cfg(loom)]
loom::lazy_static! {
    /// Under loom: slots handed out so far in this execution.
    static ref NEXT_SLOT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
}

#[cfg(loom)]
loom::thread_local! {
    /// Under loom: this model thread's slot.
    static SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
}

/// Under loom: the slots a model's threads may have, as many as the
/// threads a model runs (each slot a retire reads is one more scheduling
/// point of every model; a thread past them takes a reference).
#[cfg(loom)]
const LOOM_SLOTS: usize = 3;

#[cfg(loom)]
fn this_thread() -> Option<usize> {
    Some(SLOT.with(|s| *s)).filter(|&s| s < LOOM_SLOTS)
}

#[cfg(loom)]
fn slots_read() -> usize {
    LOOM_SLOTS
}

impl Limbo {
    pub(crate) fn new() -> Self {
        Limbo {
            slots: (0..crate::stats::SLOTS).map(|_| Slot::default()).collect(),
            waiting: Mutex::new(Vec::new()),
            pages: AtomicUsize::new(0),
        }
    }

    /// Announces a hit in flight on the folio whose first arena page is
    /// `page`, for the rest of its lookup and its copy (the module docs'
    /// protocol): `None` if this thread has no slot, or is inside a hit of
    /// this cache already.
    #[inline]
    pub(crate) fn reader(&self, page: u32) -> Option<Reader<'_>> {
        self.reader_on(this_thread()?, page)
    }

    /// [`reader`](Self::reader) on slot `i` (tests stand for a thread's
    /// hit with it).
    #[inline]
    pub(crate) fn reader_on(&self, i: usize, page: u32) -> Option<Reader<'_>> {
        let slot = &self.slots.get(i)?.0;
        let now = slot.load(Ordering::Relaxed);
        if now & 1 == 1 {
            return None;
        }
        let entered = announcing((now >> COUNT_SHIFT) + 1, page);
        announce(slot, entered);
        Some(Reader {
            slot,
            entered,
            _thread: PhantomData,
        })
    }

    /// Retires freed blocks (first page, order): each was removed from
    /// every index, and its folio's mapping cleared, before this call, and
    /// holds no reference. The arena gets them back once every hit in
    /// flight now on one of them has ended (a hit on another folio holds
    /// back nothing: a thread preempted mid-hit keeps one folio's pages,
    /// which its hit found in use, not every page freed meanwhile).
    pub(crate) fn retire(&self, arena: &Arena, blocks: &[(PageId, u32)]) {
        if blocks.is_empty() {
            return;
        }
        fence(Ordering::SeqCst);
        let mut readers = Vec::new();
        for (i, slot) in self.slots.iter().take(slots_read()).enumerate() {
            // (`SeqCst`, which costs a relaxed load's instruction on x86,
            // as loom models the pattern only so.)
            let v = slot.0.load(Ordering::SeqCst);
            let page = announced_page(v);
            let on = |&(first, order): &(PageId, u32)| {
                let first = u64::from(first.index());
                (first..first + (1u64 << order)).contains(&page)
            };
            if v & 1 == 1 && blocks.iter().any(on) {
                readers.push((i, v));
            }
        }
        if readers.is_empty() {
            // No hit on them in flight: back at once.
            free_to(arena, blocks);
            return;
        }
        self.pages.fetch_add(pages_in(blocks), Ordering::Relaxed);
        self.waiting.lock().push(Retired {
            blocks: blocks.to_vec(),
            readers,
        });
    }

    /// Whether this thread is inside a hit of this cache.
    #[cfg(not(loom))]
    fn in_hit(&self) -> bool {
        this_thread()
            .and_then(|i| self.slots.get(i))
            .is_some_and(|s| s.0.load(Ordering::Relaxed) & 1 == 1)
    }

    /// Pages retired and not yet back in the arena.
    pub(crate) fn pages(&self) -> usize {
        self.pages.load(Ordering::Relaxed)
    }

    /// Gives the blocks whose grace period has ended back to `arena`, in
    /// one hold of its lock; returns how many pages. Never waits.
    pub(crate) fn drain(&self, arena: &Arena) -> usize {
        if self.pages() == 0 {
            return 0;
        }
        let mut blocks = Vec::new();
        self.waiting.lock().retain_mut(|r| {
            r.readers
                .retain(|&(i, v)| self.slots[i].0.load(Ordering::Acquire) == v);
            if r.readers.is_empty() {
                blocks.append(&mut r.blocks);
            }
            !r.readers.is_empty()
        });
        if blocks.is_empty() {
            return 0;
        }
        let n = pages_in(&blocks);
        free_to(arena, &blocks);
        self.pages.fetch_sub(n, Ordering::Relaxed);
        n
    }

    /// [`drain`](Self::drain), and while pages are still waiting and none
    /// came back, drains again for at most `wait`: for an allocation the
    /// arena could not serve, which would rather wait for a hit to end
    /// (a copy's time, unless its thread lost its CPU mid-copy) than evict
    /// a folio. Returns how many pages went back.
    pub(crate) fn settle(&self, arena: &Arena, wait: std::time::Duration) -> usize {
        // (Under loom the drain is the whole of it: waiting cannot hurry
        // the model's hits.)
        #[cfg(loom)]
        let _ = wait;
        let got = self.drain(arena);
        // (A thread inside a hit of this cache holds back what was
        // retired since: it would wait for itself.)
        #[cfg(not(loom))]
        if got == 0 && self.pages() > 0 && !self.in_hit() {
            let start = std::time::Instant::now();
            let mut tries = 0u32;
            while self.pages() > 0 && start.elapsed() < wait {
                tries += 1;
                if tries >= 64 {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                } else if tries >= 4 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                let got = self.drain(arena);
                if got > 0 {
                    return got;
                }
            }
        }
        got
    }
}

/// How long an allocation that may not wait lets [`Limbo::settle`] wait
/// for the hits in flight: long beside a hit (one copy, microseconds).
pub(crate) const SETTLE_BRIEF: std::time::Duration = std::time::Duration::from_millis(1);

/// How long an allocation that may wait (a reader's own folio) waits for
/// retired pages before it reclaims: a reader preempted mid-copy holds its
/// slot for its time slice, and evicting a folio the cache could keep
/// costs a later miss.
pub(crate) const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::arena::Populate;

    #[test]
    fn retired_blocks_come_back_once_the_hits_of_their_time_end() {
        let arena = Arena::new(64 * 4096, Populate::Lazy).unwrap();
        let limbo = Limbo::new();
        let a = arena.alloc(2).unwrap();
        let b = arena.alloc(0).unwrap();
        assert_eq!(arena.free_pages(), 64 - 5);
        // Nothing in flight: back at once.
        limbo.retire(&arena, &[(a, 2)]);
        assert_eq!(limbo.pages(), 0);
        assert_eq!(arena.free_pages(), 64 - 1);
        // A hit in flight on another slot holds back the folio it reads
        // if that is retired while it lasts, however long a settle waits;
        // a hit on another folio does not, nor a hit that begins after
        // the retire.
        let hit = limbo.reader_on(3, b.index()).unwrap();
        let elsewhere = limbo.reader_on(4, b.index() + 1).unwrap();
        limbo.retire(&arena, &[(b, 0)]);
        let later = limbo.reader_on(5, b.index()).unwrap();
        assert_eq!(limbo.settle(&arena, SETTLE_BRIEF), 0);
        assert_eq!(limbo.pages(), 1);
        assert_eq!(arena.free_pages(), 64 - 1);
        drop(hit);
        assert_eq!(limbo.settle(&arena, SETTLE_BRIEF), 1);
        drop((elsewhere, later));
        assert_eq!(limbo.pages(), 0);
        assert_eq!(arena.free_pages(), 64);
        arena.check_consistency().unwrap();
    }

    #[test]
    fn a_slot_announces_one_hit_at_a_time() {
        let limbo = Limbo::new();
        let mut hit = limbo.reader_on(0, 7).unwrap();
        assert!(hit.covers(&limbo, 7) && !hit.covers(&limbo, 8));
        // Inside a hit already: no second announcement (whose end would
        // make the slot even while the first still copies).
        assert!(limbo.reader_on(0, 7).is_none());
        assert!(
            limbo.reader_on(crate::stats::SLOTS, 7).is_none(),
            "no such slot"
        );
        // The hit moves to another folio (its walk found another).
        hit.move_to(8);
        assert!(hit.covers(&limbo, 8) && !hit.covers(&limbo, 7));
        // Not this cache's hit.
        assert!(!hit.covers(&Limbo::new(), 8));
        drop(hit);
        assert!(limbo.reader_on(0, 7).is_some());
    }

    #[test]
    fn a_hit_on_another_thread_holds_retired_pages_until_it_ends() {
        let arena = Arena::new(16 * 4096, Populate::Lazy).unwrap();
        let limbo = Limbo::new();
        let p = arena.alloc(0).unwrap();
        let (to_reader, reader_rx) = std::sync::mpsc::channel::<()>();
        let (to_main, main_rx) = std::sync::mpsc::channel::<bool>();
        let limbo = &limbo;
        std::thread::scope(|s| {
            s.spawn(move || {
                // This thread's own slot, if it owns a shard (other tests'
                // threads may hold them all).
                let hit = limbo.reader(p.index());
                to_main.send(hit.is_some()).unwrap();
                reader_rx.recv().unwrap();
                drop(hit);
                to_main.send(true).unwrap();
            });
            let announced = main_rx.recv().unwrap();
            limbo.retire(&arena, &[(p, 0)]);
            if announced {
                // The hit began before the retire: nothing comes back,
                // however long the settles wait.
                for _ in 0..4 {
                    assert_eq!(limbo.settle(&arena, SETTLE_BRIEF), 0);
                }
                assert_eq!(arena.free_pages(), 15);
            }
            to_reader.send(()).unwrap();
            main_rx.recv().unwrap();
            assert_eq!(limbo.settle(&arena, SETTLE_BRIEF), usize::from(announced));
            assert_eq!(arena.free_pages(), 16);
        });
    }
}
