//! Folios: the unit the cache manages.
//!
//! A folio is `2^order` contiguous pages of the arena, at a file index that
//! is a multiple of `2^order`, with one reference count, one lock and one set
//! of flags (the kernel's `struct folio`). Its descriptor is a [`Folio`]; the cache
//! keeps one descriptor per arena page in a [`FolioTable`], and a folio of
//! order `n` uses the descriptor of its first page. Descriptors live as long
//! as the cache, like the kernel's `struct page`, so a lockless reader may
//! increment the count of a descriptor that was freed and reused under it:
//! [`Folio::try_get`] never revives a count of zero, and the caller re-checks
//! the index slot afterwards (as `filemap_get_entry` does).
//!
//! ```text
//!  refcount: 0 = free (in the arena); the cache holds 2^order while the
//!            folio is in a mapping; every lookup adds 1, dropped by the caller.
//!  flags:    LOCKED WAITERS UPTODATE DIRTY WRITEBACK READAHEAD REFERENCED
//!            ACTIVE WORKINGSET DROPBEHIND ERROR LRU ACTIVATE ASYNC_WAITERS
//! ```
//!
//! # Locking
//! The folio lock is a bit in `flags` with waiters parked in
//! `parking_lot_core`'s hashed wait table, keyed by the descriptor's address
//! (the kernel's hashed folio wait queues). It is held while a folio's
//! contents are being read in, and by truncation and invalidation. After
//! locking a folio found by lookup, re-check [`Folio::mapping`]: it may have
//! been removed while the locker slept.
//!
//! A task waits for the lock without a thread
//! ([`Folio::wait_unlocked_async`], the kernel's `folio_wait_bit` with a
//! wake function): its waker goes into a hashed table of waker lists
//! keyed by the descriptor's address, announced by `ASYNC_WAITERS`, and
//! the unlock that sees that bit wakes every waker of the folio at once.

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use backing::aio::{IoEngine, ReadOp};
use backing::{Backing, IoBuf, IoBufMut, RawBuf};

#[cfg(not(loom))]
use parking_lot_core::{DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::arena::{Arena, PageId};
use crate::sync::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

bitflags::bitflags! {
    /// Folio flags, as bits of one atomic word.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct FolioFlags: u32 {
        /// Locked: exclusive, sleeping (see [`Folio::lock`]).
        const LOCKED = 1 << 0;
        /// Someone sleeps waiting for the lock bit to clear.
        const WAITERS = 1 << 1;
        /// Every byte of the folio is valid.
        const UPTODATE = 1 << 2;
        /// Contents newer than the backing store.
        const DIRTY = 1 << 3;
        /// Write IO in flight.
        const WRITEBACK = 1 << 4;
        /// Readahead marker: the first folio of a window's async tail.
        const READAHEAD = 1 << 5;
        /// Accessed since the last aging pass.
        const REFERENCED = 1 << 6;
        /// On the active list.
        const ACTIVE = 1 << 7;
        /// Proved part of the working set (restored on refault).
        const WORKINGSET = 1 << 8;
        /// Created by uncached IO: drop when done.
        const DROPBEHIND = 1 << 9;
        /// The last IO on this folio failed.
        const ERROR = 1 << 10;
        /// On an LRU list.
        const LRU = 1 << 11;
        /// Accessed again while inactive and referenced, and the LRU lock was
        /// busy: the next LRU pass moves it to the active list (the kernel's
        /// per-CPU activation batch, reduced to a bit).
        const ACTIVATE = 1 << 12;
        /// A task waits for the lock bit to clear: its waker is queued in
        /// the folio's bucket of the async wait table (see
        /// [`Folio::wait_unlocked_async`]). Apart from `WAITERS` so that an
        /// unlock with only sleeping threads to wake never takes a bucket
        /// lock, and one with none pays nothing.
        const ASYNC_WAITERS = 1 << 13;
    }
}

impl fmt::Debug for FolioFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::flags::fmt_names(self, true, f)
    }
}

/// A folio descriptor. See the module documentation (`folio.rs`).
///
/// 40 bytes per arena page (the kernel's `struct page` is 64). Not padded
/// to a cache line: that took 1.6 % of the capacity, against the
/// project's bound of 2 % for all the cache's bookkeeping. Two folios'
/// descriptors share a line only when they are neighbouring pages'
/// (small folios side by side); a large folio's neighbours' descriptors
/// lie its size in pages times 40 bytes away.
pub struct Folio {
    refcount: AtomicU32,
    flags: AtomicU32,
    /// First page index of the folio in its file.
    index: AtomicU64,
    /// Identity of the mapping that holds the folio; 0 when it is in none.
    mapping: AtomicUsize,
    /// LRU neighbours (arena page numbers), owned by the LRU lock.
    lru_prev: AtomicU32,
    lru_next: AtomicU32,
    order: AtomicU8,
    /// Pins of its bytes ([`crate::Pinned`]): while it is not zero, no
    /// writer writes them in place (the protocol: `filemap/pin.rs`).
    pins: AtomicU32,
    /// Under loom, this folio's queue in the parking lot: a count of
    /// wake-ups (`unpark_all`; see `sleep_while_locked`).
    #[cfg(loom)]
    wakeups: AtomicU32,
    /// Under loom, this folio's bucket of the async wait table (a static
    /// table cannot hold loom's locks).
    #[cfg(loom)]
    async_waiters: WaiterList,
}

/// One bucket of the async wait table: the wakers of the tasks waiting for
/// a folio's lock, each with its folio's key.
type WaiterList = crate::sync::Mutex<Vec<(usize, Waker)>>;

/// log2 of the buckets in the async wait table.
#[cfg(not(loom))]
const ASYNC_WAIT_BITS: u32 = 8;

/// The async wait table: buckets of wakers hashed by folio (shared by every
/// cache, as the parking lot's table is). A bucket is locked only by a task
/// that registers or takes back its waker and by an unlock that saw
/// `ASYNC_WAITERS`.
#[cfg(not(loom))]
static ASYNC_WAIT_TABLE: [WaiterList; 1 << ASYNC_WAIT_BITS] =
    [const { WaiterList::new(Vec::new()) }; 1 << ASYNC_WAIT_BITS];

/// The future of [`Folio::wait_unlocked_async`]: ready once the folio's
/// lock is free.
#[must_use = "futures do nothing unless polled"]
pub struct WaitUnlocked<'a> {
    folio: &'a Folio,
    /// The waker this future queued, while it may still be queued.
    queued: Option<Waker>,
}

impl Future for WaitUnlocked<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let folio = self.folio;
        // A task polled from another waker than the one it queued takes the
        // old one back (the unlock would wake it for nothing).
        if let Some(old) = self.queued.take() {
            if !old.will_wake(cx.waker()) {
                folio.unregister_waker(&old);
            }
        }
        if !folio.is_locked() || !folio.register_waker(cx.waker()) {
            return Poll::Ready(());
        }
        self.queued = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for WaitUnlocked<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.queued.take() {
            self.folio.unregister_waker(&w);
        }
    }
}

impl fmt::Debug for WaitUnlocked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitUnlocked")
            .field("flags", &self.folio.flags())
            .field("queued", &self.queued.is_some())
            .finish()
    }
}

impl Default for Folio {
    fn default() -> Self {
        Folio {
            refcount: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            index: AtomicU64::new(0),
            mapping: AtomicUsize::new(0),
            lru_prev: AtomicU32::new(u32::MAX),
            lru_next: AtomicU32::new(u32::MAX),
            order: AtomicU8::new(0),
            pins: AtomicU32::new(0),
            #[cfg(loom)]
            wakeups: AtomicU32::new(0),
            #[cfg(loom)]
            async_waiters: WaiterList::new(Vec::new()),
        }
    }
}

impl Folio {
    // ---- reference count -------------------------------------------------

    /// The current reference count (0: free).
    pub fn refcount(&self) -> u32 {
        self.refcount.load(Ordering::Acquire)
    }

    /// Takes a reference only if the count is not zero: the speculative
    /// get of a lockless lookup. After it succeeds, re-check that the index
    /// still holds this folio; if not, [`put`](Self::put) and retry.
    pub(crate) fn try_get(&self) -> bool {
        let mut c = self.refcount.load(Ordering::Relaxed);
        loop {
            if c == 0 {
                return false;
            }
            match self.refcount.compare_exchange_weak(
                c,
                c + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
    }

    /// Adds `n` references to a folio the caller already holds one on (or
    /// owns outright, when the count is 0 at allocation).
    pub(crate) fn get_many(&self, n: u32) {
        self.refcount.fetch_add(n, Ordering::Relaxed);
    }

    /// Drops `n` references. Returns true when that made the count zero:
    /// the caller then owns the folio and must give its pages back.
    ///
    /// Dropping more references than are held is a bug in the caller; it
    /// is caught in debug builds.
    pub(crate) fn put_many(&self, n: u32) -> bool {
        let old = self.refcount.fetch_sub(n, Ordering::Release);
        debug_assert!(old >= n, "folio refcount underflow ({old} - {n})");
        if old == n {
            fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// Drops one reference; see [`put_many`](Self::put_many).
    pub(crate) fn put(&self) -> bool {
        self.put_many(1)
    }

    /// Sets the count from `expected` to 0 if nobody else holds a
    /// reference: reclaim's freeze. A lockless `try_get` cannot succeed on
    /// a frozen folio.
    pub(crate) fn freeze(&self, expected: u32) -> bool {
        self.refcount
            .compare_exchange(expected, 0, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Undoes a [`freeze`](Self::freeze) that turned out not to be wanted.
    pub(crate) fn unfreeze(&self, count: u32) {
        self.refcount.store(count, Ordering::Release);
    }

    // ---- identity ----------------------------------------------------------

    /// The folio's order (it covers `2^order` pages).
    pub fn order(&self) -> u32 {
        u32::from(self.order.load(Ordering::Relaxed))
    }

    /// Pages in the folio.
    pub fn nr_pages(&self) -> u64 {
        1 << self.order()
    }

    /// The first file page index the folio covers.
    pub fn index(&self) -> u64 {
        self.index.load(Ordering::Acquire)
    }

    /// Does the folio cover file page `index`?
    pub fn contains(&self, index: u64) -> bool {
        let first = self.index();
        index >= first && index - first < self.nr_pages()
    }

    /// Identity of the owning mapping, 0 if none.
    pub fn mapping(&self) -> usize {
        self.mapping.load(Ordering::Acquire)
    }

    /// Prepares a free descriptor for a new folio: order, index, flags
    /// cleared, not in any mapping, one reference (the allocator's, passed
    /// to the caller). Only the owner of a folio with count 0 may call it.
    pub(crate) fn init(&self, order: u32, index: u64) {
        debug_assert_eq!(self.refcount.load(Ordering::Relaxed), 0);
        self.order.store(order as u8, Ordering::Relaxed);
        self.index.store(index, Ordering::Relaxed);
        self.mapping.store(0, Ordering::Relaxed);
        self.flags.store(0, Ordering::Relaxed);
        self.refcount.store(1, Ordering::Release);
    }

    /// Records (or clears, with 0) the owning mapping and the index.
    pub(crate) fn set_mapping(&self, mapping: usize, index: u64) {
        self.index.store(index, Ordering::Release);
        self.mapping.store(mapping, Ordering::Release);
    }

    // ---- flags -----------------------------------------------------------

    /// All flags now.
    pub fn flags(&self) -> FolioFlags {
        FolioFlags::from_bits_retain(self.flags.load(Ordering::Acquire))
    }

    /// Is `flag` set?
    pub fn test(&self, flag: FolioFlags) -> bool {
        self.flags().intersects(flag)
    }

    /// Sets `flag`; returns whether it was already set.
    pub(crate) fn test_and_set(&self, flag: FolioFlags) -> bool {
        self.flags.fetch_or(flag.bits(), Ordering::AcqRel) & flag.bits() != 0
    }

    /// Clears `flag`; returns whether it was set.
    pub(crate) fn test_and_clear(&self, flag: FolioFlags) -> bool {
        self.fetch_clear(flag).intersects(flag)
    }

    /// Clears `flag`; returns all the flags as they were before.
    pub(crate) fn fetch_clear(&self, flag: FolioFlags) -> FolioFlags {
        FolioFlags::from_bits_retain(self.flags.fetch_and(!flag.bits(), Ordering::AcqRel))
    }

    /// Sets `flag` only if it is clear: a hit that finds it set writes
    /// nothing shared (a hit writes nothing other threads read).
    pub(crate) fn set_if_clear(&self, flag: FolioFlags) {
        if !self.test(flag) {
            self.flags.fetch_or(flag.bits(), Ordering::AcqRel);
        }
    }

    /// Marks the folio's contents valid. Its bytes (all written before this
    /// call) are visible to any thread that then sees the flag.
    pub(crate) fn mark_uptodate(&self) {
        self.flags
            .fetch_or(FolioFlags::UPTODATE.bits(), Ordering::Release);
    }

    // ---- the lock ----------------------------------------------------------

    #[cfg(not(loom))]
    fn key(&self) -> usize {
        self as *const Folio as usize
    }

    /// Takes the lock if it is free; never sleeps.
    fn trylock(&self) -> bool {
        self.flags
            .fetch_or(FolioFlags::LOCKED.bits(), Ordering::Acquire)
            & FolioFlags::LOCKED.bits()
            == 0
    }

    /// Is the folio locked (by anyone)?
    pub fn is_locked(&self) -> bool {
        self.test(FolioFlags::LOCKED)
    }

    /// Takes the lock, sleeping while another thread holds it.
    ///
    /// # Locking
    /// May sleep. Never call it holding an index lock or another folio's
    /// lock out of file order.
    fn lock(&self) {
        while !self.trylock() {
            self.sleep_while_locked();
        }
    }

    /// Sleeps until the lock is free, without taking it (a reader waiting
    /// for a read in progress to finish).
    pub fn wait_unlocked(&self) {
        while self.is_locked() {
            self.sleep_while_locked();
        }
    }

    fn sleep_while_locked(&self) {
        let locked_waiting = FolioFlags::LOCKED.bits() | FolioFlags::WAITERS.bits();
        // Announce a waiter, then sleep only if the lock is still held with
        // the announcement in place: an unlock between the two clears
        // WAITERS, the validation fails and we retry instead of sleeping
        // through the wake-up.
        self.flags
            .fetch_or(FolioFlags::WAITERS.bits(), Ordering::AcqRel);
        let validate = || self.flags.load(Ordering::Acquire) & locked_waiting == locked_waiting;
        // SAFETY: the key is this descriptor's address, which stays valid
        // for the cache's lifetime; `validate` and `before_sleep` neither
        // panic nor call into the parking lot.
        #[cfg(not(loom))]
        unsafe {
            parking_lot_core::park(
                self.key(),
                validate,
                || {},
                |_, _| {},
                DEFAULT_PARK_TOKEN,
                None,
            );
        }
        // Under loom, the same protocol with the parking lot modelled: the
        // sleeper samples the wake-up count, then validates, then waits
        // (yielding) for a wake-up counted after the sample, which only
        // `unlock` gives. `park` validates and enqueues under its bucket's
        // lock, which `unpark_all` takes too; sampling before validating
        // gives the same guarantee (an unlock that clears the flags after
        // the validation counts its wake-up after the sample). A wake-up
        // lost (an unlock that does not see WAITERS, or a lock released
        // without `unlock`) leaves the sleeper waiting forever, and the
        // model fails instead of passing because the sleeper happened to
        // re-check the flag.
        #[cfg(loom)]
        {
            let enqueued = self.wakeups.load(Ordering::SeqCst);
            if !validate() {
                return;
            }
            while self.wakeups.load(Ordering::SeqCst) == enqueued {
                loom::thread::yield_now();
            }
        }
    }

    /// Releases the lock and wakes every waiter (they race for it again;
    /// the losers go back to sleep).
    ///
    /// Unlocking a folio the caller did not lock is a bug, caught in debug
    /// builds.
    fn unlock(&self) {
        let mask = !(FolioFlags::LOCKED.bits()
            | FolioFlags::WAITERS.bits()
            | FolioFlags::ASYNC_WAITERS.bits());
        let old = self.flags.fetch_and(mask, Ordering::Release);
        debug_assert!(
            old & FolioFlags::LOCKED.bits() != 0,
            "unlock of an unlocked folio"
        );
        // Under loom, `unpark_all` is a wake-up counted on the queue.
        #[cfg(loom)]
        if old & FolioFlags::WAITERS.bits() != 0 {
            self.wakeups.fetch_add(1, Ordering::SeqCst);
        }
        #[cfg(not(loom))]
        if old & FolioFlags::WAITERS.bits() != 0 {
            // SAFETY: unpark_all with this descriptor's address as the key,
            // as parked above.
            unsafe {
                parking_lot_core::unpark_all(self.key(), DEFAULT_UNPARK_TOKEN);
            }
        }
        if old & FolioFlags::ASYNC_WAITERS.bits() != 0 {
            self.wake_async();
        }
    }

    // ---- waiting without a thread ------------------------------------------

    /// This folio's list in the async wait table: a static table of
    /// buckets hashed by the descriptor's address (as the parking lot's),
    /// or under loom the folio's own.
    fn waiters(&self) -> &WaiterList {
        #[cfg(not(loom))]
        {
            let k = (self as *const Folio as usize as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            &ASYNC_WAIT_TABLE[(k >> (64 - ASYNC_WAIT_BITS)) as usize]
        }
        #[cfg(loom)]
        {
            &self.async_waiters
        }
    }

    /// The key of this folio's entries in its bucket.
    fn wait_key(&self) -> usize {
        self as *const Folio as usize
    }

    /// Queues `waker` to be woken when the lock bit clears, if it is set.
    /// Returns `false` when the folio is unlocked (nothing queued: look
    /// again). A waker already queued for this folio (`will_wake`) is
    /// replaced, so a task polled again while it waits stays queued once.
    ///
    /// Under the bucket's lock: announce `ASYNC_WAITERS`, and queue only if
    /// the lock bit was still set then. An unlock clears both bits in one
    /// step, so either it comes after the announcement and sees it (and
    /// takes the bucket's lock, after this queued, to wake), or it came
    /// before and this sees the folio unlocked and takes its announcement
    /// back (no other registration can be running: they hold the bucket's
    /// lock), leaving no stale bit.
    pub(crate) fn register_waker(&self, waker: &Waker) -> bool {
        let mut list = self.waiters().lock();
        let old = self
            .flags
            .fetch_or(FolioFlags::ASYNC_WAITERS.bits(), Ordering::AcqRel);
        if old & FolioFlags::LOCKED.bits() == 0 {
            self.flags
                .fetch_and(!FolioFlags::ASYNC_WAITERS.bits(), Ordering::Relaxed);
            return false;
        }
        let key = self.wait_key();
        match list
            .iter_mut()
            .find(|(k, w)| *k == key && w.will_wake(waker))
        {
            Some((_, w)) => w.clone_from(waker),
            None => list.push((key, waker.clone())),
        }
        true
    }

    /// Takes back a waker queued by [`register_waker`](Self::register_waker)
    /// for this folio, if it is still queued (a future dropped while it
    /// waited).
    pub(crate) fn unregister_waker(&self, waker: &Waker) {
        let key = self.wait_key();
        let mut list = self.waiters().lock();
        if let Some(i) = list
            .iter()
            .position(|(k, w)| *k == key && w.will_wake(waker))
        {
            list.swap_remove(i);
        }
    }

    /// Wakes every waker queued for this folio (an unlock that saw
    /// `ASYNC_WAITERS`), after letting go of the bucket's lock: a waker
    /// may run code that polls again.
    #[cold]
    fn wake_async(&self) {
        let key = self.wait_key();
        let mut woken = Vec::new();
        {
            let mut list = self.waiters().lock();
            let mut i = 0;
            while i < list.len() {
                if list[i].0 == key {
                    woken.push(list.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
        }
        for w in woken {
            w.wake();
        }
    }

    /// Waits for the lock to be free without a thread: the async form of
    /// [`wait_unlocked`](Self::wait_unlocked). The future is ready at once
    /// when the folio is unlocked (no waker registered); otherwise its
    /// task's waker is queued and woken by the unlock, together with every
    /// other task waiting on this folio. Dropped while it waits, it takes
    /// its waker back.
    pub fn wait_unlocked_async(&self) -> WaitUnlocked<'_> {
        WaitUnlocked {
            folio: self,
            queued: None,
        }
    }

    // ---- pins ------------------------------------------------------------------

    /// Pins the folio's bytes unless it is locked (the reader's side of the
    /// protocol in `filemap/pin.rs`): counts a pin, then looks at the lock bit
    /// across a sequentially consistent fence. A locker fences between
    /// taking the lock and reading the count ([`LockedFolio::is_pinned`]),
    /// so of the two, at least one sees the other: either this sees the
    /// lock (and takes its pin back), or the locker sees the pin. Reading
    /// an unlocked folio here, acquire, also orders this thread's reads of
    /// the bytes after the last locker's writes. Returns whether it pinned.
    /// The caller holds a reference.
    pub(crate) fn try_pin(&self) -> bool {
        self.pins.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.flags.load(Ordering::Acquire) & FolioFlags::LOCKED.bits() != 0 {
            self.unpin();
            return false;
        }
        true
    }

    /// Drops a pin taken by [`try_pin`](Self::try_pin): release, so the
    /// pinner's reads of the bytes come before the writes of a locker that
    /// sees the count without it.
    pub(crate) fn unpin(&self) {
        let old = self.pins.fetch_sub(1, Ordering::Release);
        debug_assert!(old > 0, "unpin of an unpinned folio");
    }

    // ---- LRU links -----------------------------------------------------------

    /// LRU neighbours (arena page numbers; `u32::MAX` for none). Only the
    /// holder of the LRU lock may rely on them.
    pub(crate) fn lru_links(&self) -> (u32, u32) {
        (
            self.lru_prev.load(Ordering::Relaxed),
            self.lru_next.load(Ordering::Relaxed),
        )
    }

    /// Sets the LRU neighbours; LRU lock held.
    pub(crate) fn set_lru_links(&self, prev: u32, next: u32) {
        self.lru_prev.store(prev, Ordering::Relaxed);
        self.lru_next.store(next, Ordering::Relaxed);
    }
}

/// A counted reference on a folio of a [`Mapping`](crate::filemap::Mapping),
/// dropped with this value. Dereferences to the [`Folio`], whose state it
/// can read; [`lock`](Self::lock) turns it into a [`LockedFolio`].
///
/// The folio may leave its mapping while the reference is held (truncated,
/// or evicted once nothing else holds it): its memory is not reused until
/// the last reference goes, but check [`Folio::mapping`] under the lock
/// before relying on where it is.
pub struct FolioRef<'m> {
    mem: &'m Memory,
    folio: &'m Folio,
}

impl<'m> FolioRef<'m> {
    /// Wraps a reference the caller already took on `folio`.
    pub(crate) fn adopt(mem: &'m Memory, folio: &'m Folio) -> Self {
        FolioRef { mem, folio }
    }

    /// Takes another reference on `folio`, which the caller holds one on.
    fn another(mem: &'m Memory, folio: &'m Folio) -> Self {
        folio.get_many(1);
        FolioRef { mem, folio }
    }

    /// The descriptor, for as long as the mapping lives.
    pub fn folio(&self) -> &'m Folio {
        self.folio
    }

    /// The folio's arena page (its first).
    pub(crate) fn page(&self) -> PageId {
        page_of(self.mem, self.folio)
    }

    /// Takes the folio lock, sleeping while another thread holds it (the
    /// kernel's `folio_lock`). The folio may have left its mapping while
    /// this thread slept: check [`Folio::mapping`] on the guard.
    ///
    /// # Locking
    /// Sleeps. Never call it holding a lock the lock order puts after the
    /// folio lock, or another folio's lock of the same file at a higher
    /// index (see the crate documentation).
    pub fn lock(self) -> LockedFolio<'m> {
        self.folio.lock();
        self.into_locked()
    }

    /// Takes the folio lock if it is free, never sleeping
    /// (`folio_trylock`).
    ///
    /// # Errors
    /// The reference itself, when another thread holds the lock.
    pub fn try_lock(self) -> Result<LockedFolio<'m>, FolioRef<'m>> {
        if self.folio.trylock() {
            Ok(self.into_locked())
        } else {
            Err(self)
        }
    }

    /// This reference, now owned by a guard of the lock the caller took.
    fn into_locked(self) -> LockedFolio<'m> {
        let (mem, folio) = (self.mem, self.folio);
        // (The reference moves to the guard: `FolioRef` holds nothing else.)
        std::mem::forget(self);
        LockedFolio { mem, folio }
    }
}

impl Clone for FolioRef<'_> {
    /// Another reference on the same folio.
    fn clone(&self) -> Self {
        FolioRef::another(self.mem, self.folio)
    }
}

impl std::ops::Deref for FolioRef<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Drop for FolioRef<'_> {
    fn drop(&mut self) {
        self.mem.put(self.folio);
    }
}

impl fmt::Debug for FolioRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.folio.fmt(f)
    }
}

/// A folio locked by this thread, with a reference: the lock is released
/// when the guard goes ([`unlock`](Self::unlock), or drop), so an early
/// return cannot leave a folio locked.
///
/// The lock is what lets its holder change the folio: fill it while it is
/// not uptodate (no reader copies out of it then), write or zero its bytes,
/// take it out of its mapping. The functions of [`filemap`](crate::filemap)
/// that need a locked folio take this guard, and the lookups that lock
/// return it. A read started on locked folios hands their guards to the
/// IO's completion, which unlocks them.
#[must_use = "dropping the guard unlocks the folio at once"]
pub struct LockedFolio<'m> {
    mem: &'m Memory,
    folio: &'m Folio,
}

impl<'m> LockedFolio<'m> {
    /// Releases the lock, waking its waiters, and keeps the reference.
    pub fn unlock(self) -> FolioRef<'m> {
        let (mem, folio) = (self.mem, self.folio);
        // (The unlock is done here and the reference handed on.)
        std::mem::forget(self);
        folio.unlock();
        FolioRef { mem, folio }
    }

    /// Another reference on the folio (the lock stays with this guard).
    pub fn to_ref(&self) -> FolioRef<'m> {
        FolioRef::another(self.mem, self.folio)
    }

    /// The descriptor, for as long as the mapping lives.
    pub fn folio(&self) -> &'m Folio {
        self.folio
    }

    /// The folio's arena page (its first).
    pub(crate) fn page(&self) -> PageId {
        page_of(self.mem, self.folio)
    }

    /// Whether the folio's bytes are pinned ([`crate::Pinned`]): a writer
    /// holding the lock asks before it writes them, and a folio that is
    /// pinned gets a copy to write instead (`Mapping::unshare`). With the
    /// lock held no new pin can start (a pin backs off a locked folio), so
    /// a `false` stays true until this guard goes. The locker's side of the
    /// protocol of [`Folio::try_pin`].
    pub(crate) fn is_pinned(&self) -> bool {
        fence(Ordering::SeqCst);
        self.folio.pins.load(Ordering::Acquire) != 0
    }

    /// Marks the folio uptodate without filling it: its bytes are whatever
    /// its memory held (zeros when fresh, else a previous folio's). For the
    /// population benchmark, which measures the grab alone.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn mark_uptodate_unfilled(&self) {
        self.folio.mark_uptodate();
    }

    /// A fresh folio from the allocator (one reference, the caller's; in no
    /// mapping), locked: nobody else can know of it, so the lock is free.
    pub(crate) fn new_fresh(mem: &'m Memory, folio: &'m Folio) -> Self {
        let locked = folio.trylock();
        debug_assert!(locked, "a fresh folio is unlocked");
        LockedFolio { mem, folio }
    }

    /// Reclaim's freeze (`folio_ref_freeze`): sets the count from `refs`
    /// (the cache's and this guard's) to zero if nobody else holds a
    /// reference, so no lookup can take one.
    ///
    /// # Errors
    /// The guard itself, when others hold references.
    pub(crate) fn freeze(self, refs: u32) -> Result<FrozenFolio<'m>, LockedFolio<'m>> {
        if !self.folio.freeze(refs) {
            return Err(self);
        }
        let (mem, folio) = (self.mem, self.folio);
        // (The references, this guard's among them, are frozen away.)
        std::mem::forget(self);
        Ok(FrozenFolio {
            mem,
            folio,
            refs: refs - 1,
        })
    }
}

/// A locked folio's memory, handed to IO: a read fills a folio that is not
/// uptodate, a write sends one's bytes.
///
/// The lock and the `UPTODATE` flag make this safe. Readers copy out of a
/// folio only once it is uptodate (`Mapping::copy_out`, a pin), which only
/// its lock holder marks it; every writer of its bytes holds its lock (this
/// guard, or the `WritableFolio` that owns it). So while the guard is
/// borrowed mutably, nothing else writes the folio's memory, and a folio
/// that is not uptodate is not read either. The reference keeps the folio
/// from being freed, and the arena's memory stays mapped (initialised:
/// zero pages, or a heap block allocated zeroed under Miri) while the
/// cache lives, which outlives `'m`.
impl<'m> LockedFolio<'m> {
    /// The folio's memory, for a read to fill (`read_folio`, `read_pages`).
    /// Its bytes are whatever the memory held: zeros when fresh, else a
    /// previous folio's.
    ///
    /// # Panics
    /// If the folio is uptodate: readers may be copying out of it.
    pub(crate) fn fill_buf(&mut self) -> IoBufMut<'_> {
        assert!(
            !self.folio.test(FolioFlags::UPTODATE),
            "fill_buf: the folio is uptodate, readers may copy out of it"
        );
        let len = (self.folio.nr_pages() * crate::arena::PAGE) as usize;
        let ptr = self.mem.arena.page_ptr(self.page()).as_ptr();
        // SAFETY: the folio is locked by this guard and not uptodate (see
        // the `impl`'s comment): no other thread reads or writes its
        // memory, and the `&mut` borrow of the guard keeps this thread from
        // writing it otherwise while the buffer lives. The arena gives the
        // folio `len` bytes at `ptr`, 4 KiB aligned, initialised and mapped
        // for longer than the borrow.
        unsafe { IoBufMut::from_raw_parts(ptr, len) }.expect("arena folios are block aligned")
    }

    /// The folio's bytes, for a write to send (writeback).
    pub(crate) fn bytes_buf(&mut self) -> IoBuf<'_> {
        let len = (self.folio.nr_pages() * crate::arena::PAGE) as usize;
        let ptr = self.mem.arena.page_ptr(self.page()).as_ptr();
        // SAFETY: the folio is locked by this guard (see the `impl`'s
        // comment): no other thread writes its memory (readers only read
        // it), and the `&mut` borrow of the guard keeps this thread from
        // writing it while the bytes are borrowed. The arena gives the
        // folio `len` bytes at `ptr`, 4 KiB aligned, initialised and mapped
        // for longer than the borrow.
        unsafe { IoBuf::from_raw_parts(ptr, len) }.expect("arena folios are block aligned")
    }
}

/// Runs of locked folios read through the cache's IO engine, gathered to go
/// as one submission (the kernel's `read_pages`, for many runs at once).
/// Each run's guards go with its read: the engine fills the folios' memory
/// on its own thread, and the run's completion gets the guards back after
/// the engine dropped the buffers (the contract of
/// [`ReadOp`](backing::aio::ReadOp)), to finish the folios as a bio's
/// end_io does. The ops never leave this type but to the engine: that is
/// what lets the buffers' contract be kept here.
pub(crate) struct EngineReads {
    ops: Vec<ReadOp>,
}

/// A run's guards while its read is in flight: the folios' pages, each
/// still locked and referenced by the guard given up for it, and the cache
/// (with the arena's memory) kept alive until the completion.
struct InFlight<O> {
    owner: Arc<O>,
    pages: Vec<PageId>,
}

impl EngineReads {
    /// An empty batch with room for `n` runs.
    pub(crate) fn with_capacity(n: usize) -> Self {
        EngineReads {
            ops: Vec::with_capacity(n),
        }
    }

    /// The runs gathered.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Adds the read of `run`, locked folios of `cache` that are not
    /// uptodate and cover contiguous pages, from byte `offset` of
    /// `backing`. `done` runs on the engine's thread with the guards given
    /// back and the read's result (as [`Backing::read_blocks`] gives it),
    /// after the engine dropped the buffers.
    ///
    /// # Panics
    /// If a folio is another cache's, or uptodate.
    pub(crate) fn push<O: MemoryOwner, F>(
        &mut self,
        owner: &Arc<O>,
        backing: Arc<dyn Backing>,
        offset: u64,
        run: Vec<LockedFolio<'_>>,
        done: F,
    ) where
        F: for<'c> FnOnce(&'c O, Vec<LockedFolio<'c>>, io::Result<usize>) + Send + 'static,
    {
        let mem = owner.memory();
        let mut bufs = Vec::with_capacity(run.len());
        let mut pages = Vec::with_capacity(run.len());
        for f in &run {
            assert!(
                std::ptr::eq(f.mem, mem),
                "EngineReads: a folio of another cache"
            );
            assert!(
                !f.folio.test(FolioFlags::UPTODATE),
                "EngineReads: the folio is uptodate, readers may copy out of it"
            );
            let page = f.page();
            let len = (f.folio.nr_pages() * crate::arena::PAGE) as usize;
            let ptr = mem.arena.page_ptr(page).as_ptr();
            // SAFETY: the folio is locked and not uptodate, so no other
            // thread reads or writes its memory (see `LockedFolio::fill_buf`)
            // until the completion below gets its guard back, which is after
            // the engine dropped this buffer (`ReadOp`'s contract; the op
            // goes nowhere but to the engine); the guard's reference, held
            // by `InFlight` meanwhile, keeps it from being freed; the
            // arena's memory stays mapped while the cache lives, which the
            // `Arc` in the completion guarantees (dropped after the
            // buffers). Arena pages are 4 KiB aligned.
            bufs.push(unsafe { RawBuf::new(ptr, len) }.expect("arena folios are block aligned"));
            pages.push(page);
        }
        for f in run {
            // (The lock and the reference go with the read.)
            std::mem::forget(f);
        }
        let held = InFlight {
            owner: owner.clone(),
            pages,
        };
        self.ops.push(ReadOp::new(backing, offset, bufs, move |r| {
            let owner = &*held.owner;
            let mem = owner.memory();
            let run = held
                .pages
                .iter()
                .map(|&page| LockedFolio {
                    mem,
                    folio: mem.folio(page.index()),
                })
                .collect();
            done(owner, run, r);
        }));
    }

    /// Submits the runs to `engine`, without waiting.
    pub(crate) fn submit(self, engine: &IoEngine) {
        engine.submit(self.ops);
    }
}

impl std::ops::Deref for LockedFolio<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Drop for LockedFolio<'_> {
    fn drop(&mut self) {
        self.folio.unlock();
        self.mem.put(self.folio);
    }
}

impl fmt::Debug for LockedFolio<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.folio.fmt(f)
    }
}

/// A locked folio whose count reclaim froze to zero: no lookup can take a
/// reference, so once it is out of its mapping its pages can go back to
/// the arena ([`free_into`](Self::free_into)). Dropped instead, it is unfrozen (the
/// cache's references restored) and unlocked.
pub(crate) struct FrozenFolio<'m> {
    mem: &'m Memory,
    folio: &'m Folio,
    /// The cache's references, restored if the folio stays.
    refs: u32,
}

impl<'m> FrozenFolio<'m> {
    /// Unlocks the folio, now in no mapping, and adds it to `batch`, which
    /// frees it with the others of the batch.
    pub(crate) fn free_into(self, batch: &mut FreeBatch<'m>) {
        let folio = self.folio;
        debug_assert!(std::ptr::eq(self.mem, batch.mem));
        std::mem::forget(self);
        debug_assert_eq!(folio.mapping(), 0, "freeing a folio still in a mapping");
        folio.unlock();
        batch.folios.push(folio);
    }
}

/// Folios of one cache, unreferenced and in no mapping, to be freed
/// together ([`Memory::free_folios`]: one hold of the arena's lock)
/// when the batch drops. Only [`FrozenFolio::free_into`] adds to it, so
/// every folio in it is one nobody else can reach.
pub(crate) struct FreeBatch<'c> {
    mem: &'c Memory,
    folios: Vec<&'c Folio>,
}

impl<'c> FreeBatch<'c> {
    /// An empty batch with room for `n` folios.
    pub(crate) fn with_capacity(mem: &'c Memory, n: usize) -> Self {
        FreeBatch {
            mem,
            folios: Vec::with_capacity(n),
        }
    }
}

impl Drop for FreeBatch<'_> {
    fn drop(&mut self) {
        if !self.folios.is_empty() {
            self.mem.free_folios(&self.folios);
        }
    }
}

impl std::ops::Deref for FrozenFolio<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Drop for FrozenFolio<'_> {
    fn drop(&mut self) {
        self.folio.unfreeze(self.refs);
        self.folio.unlock();
    }
}

/// A cache's memory: the arena, the descriptor table over its pages, and
/// the pages' dirty bits. Folio references and locks ([`FolioRef`],
/// [`LockedFolio`]) point here, to give their folio back when the last
/// reference goes. Allocation that reclaims when the arena is empty is the
/// cache's (`CacheInner::alloc_folio`): this takes only what is free.
pub(crate) struct Memory {
    pub(crate) arena: Arena,
    pub(crate) table: FolioTable,
    /// One bit per arena page: dirty (written since its folio was last
    /// written back). A large folio written in a few places writes back
    /// only those pages (the kernel's per-block dirty state of iomap). A
    /// folio's bits change only under its lock (or while it is free);
    /// neighbouring small folios share words, hence atomic bit operations.
    pub(crate) dirty_bits: PageBits,
    /// The guardian's state, when the cache has one: the arena is then in
    /// its segment, where each page's unsaved bit and owner are kept
    /// (docs/design.md, section 12).
    pub(crate) guard: Option<crate::guardian::Guard>,
}

impl Memory {
    /// The memory of an arena, with a descriptor table over its pages, and
    /// the guardian's state if the cache has one.
    pub(crate) fn new(
        arena: Arena,
        table: FolioTable,
        guard: Option<crate::guardian::Guard>,
    ) -> Self {
        let pages = arena.capacity_pages();
        Memory {
            arena,
            table,
            dirty_bits: PageBits::new(pages),
            guard,
        }
    }

    /// The folio of arena page `page`.
    pub(crate) fn folio(&self, page: u32) -> &Folio {
        self.table
            .get(page as usize)
            .expect("a page of this cache's arena")
    }

    /// The arena page of `f`, a folio of this cache.
    pub(crate) fn page(&self, f: &Folio) -> u32 {
        self.table
            .page_of(f)
            .expect("folio from this cache's table") as u32
    }

    /// A free folio of exactly `order`, with one reference (the caller's)
    /// and in no mapping; `None` when the arena has no free block of that
    /// order.
    pub(crate) fn alloc(&self, order: u32) -> Option<&Folio> {
        let p = self.arena.alloc(order)?;
        let f = self.folio(p.index());
        f.init(order, 0);
        Some(f)
    }

    /// Up to `n` free folios of exactly `order`, in one hold of the
    /// arena's lock: each with one reference, in no mapping. Returns how
    /// many were added to `out`.
    pub(crate) fn alloc_bulk<'c>(
        &'c self,
        order: u32,
        n: usize,
        out: &mut Vec<&'c Folio>,
    ) -> usize {
        let mut pages = Vec::with_capacity(n);
        let got = self.arena.alloc_bulk(order, n, &mut pages);
        for p in pages {
            let f = self.folio(p.index());
            f.init(order, 0);
            out.push(f);
        }
        got
    }

    /// Gives a folio whose last reference was dropped back to the arena.
    pub(crate) fn free_folio(&self, f: &Folio) {
        let (page, order) = self.released(f);
        if let Err(e) = self.arena.free(page, order) {
            // The descriptor and the arena disagree: a bug, never user input.
            log::error!("foliocache: freeing folio {f:?}: {e}");
            debug_assert!(false, "freeing folio {f:?}: {e}");
        }
    }

    /// Frees folios as [`free_folio`](Self::free_folio) does, giving
    /// their pages back to the arena in one hold of its lock.
    pub(crate) fn free_folios(&self, folios: &[&Folio]) {
        let blocks: Vec<_> = folios.iter().map(|f| self.released(f)).collect();
        if let Err((i, e)) = self.arena.free_bulk(&blocks) {
            // As in `free_folio`: a bug, never user input.
            let f = folios[i];
            log::error!("foliocache: freeing folio {f:?}: {e}");
            debug_assert!(false, "freeing folio {f:?}: {e}");
        }
    }

    /// The block of `f`, unreferenced, in no mapping and on no list, on its
    /// way back to the arena: its pages' dirty bits cleared (already, unless
    /// a dirty folio was dropped: a new owner of these pages starts clean).
    fn released(&self, f: &Folio) -> (PageId, u32) {
        debug_assert_eq!(f.refcount(), 0);
        debug_assert_eq!(f.mapping(), 0);
        debug_assert!(!f.test(FolioFlags::LRU), "freeing a folio on a list: {f:?}");
        let page = PageId::new(self.page(f));
        self.dirty_bits
            .clear(page.index() as usize, f.nr_pages() as usize);
        (page, f.order())
    }

    /// Drops one reference; frees the folio if it was the last.
    pub(crate) fn put(&self, f: &Folio) {
        if f.put() {
            self.free_folio(f);
        }
    }
}

/// What owns a cache's [`Memory`] and keeps it alive: an IO in flight
/// holds it (`EngineReads`) so the arena stays mapped until the read
/// completes.
pub(crate) trait MemoryOwner: Send + Sync + 'static {
    /// The memory owned.
    fn memory(&self) -> &Memory;
}

/// A bitmap with one bit per arena page (see [`Memory::dirty_bits`]).
/// Its words are std atomics even under loom: a folio's bits change only
/// under its folio lock, which the models do see; the atomics only keep
/// neighbouring folios' bits in one word apart.
#[allow(clippy::disallowed_types)]
pub(crate) struct PageBits(Box<[std::sync::atomic::AtomicU64]>);

impl PageBits {
    #[allow(clippy::disallowed_types)]
    pub(crate) fn new(pages: usize) -> PageBits {
        PageBits(
            (0..pages.div_ceil(64))
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
        )
    }

    /// Bytes of the bitmap.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.0)
    }

    /// The words and masks covering bits `start..start + n`.
    fn spans(start: usize, n: usize) -> impl Iterator<Item = (usize, u64)> {
        let end = start + n;
        let mut at = start;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let word = at / 64;
            let lo = at % 64;
            let hi = (end - word * 64).min(64);
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            at = word * 64 + hi;
            Some((word, mask))
        })
    }

    /// Sets bits `start..start + n`; returns how many were clear.
    pub(crate) fn set(&self, start: usize, n: usize) -> u64 {
        let mut newly = 0;
        for (w, m) in Self::spans(start, n) {
            let old = self.0[w].fetch_or(m, std::sync::atomic::Ordering::Relaxed);
            newly += u64::from((m & !old).count_ones());
        }
        newly
    }

    /// Clears bits `start..start + n`; returns how many were set.
    pub(crate) fn clear(&self, start: usize, n: usize) -> u64 {
        let mut was = 0;
        for (w, m) in Self::spans(start, n) {
            let old = self.0[w].fetch_and(!m, std::sync::atomic::Ordering::Relaxed);
            was += u64::from((m & old).count_ones());
        }
        was
    }

    /// Clears bits `start..start + n` and returns the runs that were set,
    /// as (first bit relative to `start`, count), in order.
    pub(crate) fn take_runs(&self, start: usize, n: usize) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (w, m) in Self::spans(start, n) {
            let old = self.0[w].fetch_and(!m, std::sync::atomic::Ordering::Relaxed) & m;
            let mut bits = old;
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let at = w * 64 + b - start;
                match runs.last_mut() {
                    Some((first, count)) if *first + *count == at => *count += 1,
                    _ => runs.push((at, 1)),
                }
            }
        }
        runs
    }
}

/// The arena page of one of `mem`'s descriptors.
fn page_of(mem: &Memory, folio: &Folio) -> PageId {
    PageId::new(mem.page(folio))
}

impl fmt::Debug for Folio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Folio")
            .field("index", &self.index())
            .field("order", &self.order())
            .field("refcount", &self.refcount())
            .field("mapping", &self.mapping())
            .field("flags", &self.flags())
            .finish()
    }
}

/// One descriptor per arena page; a folio of order `n` starting at arena
/// page `p` is described by entry `p`.
pub(crate) struct FolioTable {
    folios: NonNull<Folio>,
    len: usize,
    /// The descriptors' memory: zero pages mapped on demand (all-zero bytes
    /// are a free descriptor), so a table is faulted in as its pages are
    /// used, not at build. Under loom, whose atomics are not plain bytes, a
    /// heap block of written descriptors.
    #[cfg(not(loom))]
    _memory: crate::arena::Region,
    #[cfg(loom)]
    layout: std::alloc::Layout,
}

// SAFETY: the table owns its descriptors (as a `Box<[Folio]>` would), and
// `Folio` is `Send + Sync` (its state is atomics).
unsafe impl Send for FolioTable {}
// SAFETY: as above; shared access hands out `&Folio` only.
unsafe impl Sync for FolioTable {}

/// Tables this large are 2 MiB aligned and advised for huge pages.
#[cfg_attr(loom, allow(dead_code))]
const HUGE: usize = 2 << 20;

impl FolioTable {
    /// A table for `pages` arena pages, every descriptor free.
    ///
    /// A cache hit reads the descriptor of a folio picked by the file offset:
    /// on a large cache (40 bytes per 4 KiB page: 12.5 MiB of descriptors
    /// for 1.25 GiB) random hits would miss the TLB on the table as well as on
    /// the data, so a table of 2 MiB or more is mapped 2 MiB aligned and
    /// advised for transparent huge pages, as the arena is. Nothing is
    /// written at build: a free descriptor is all zeros (its LRU links are
    /// set when it goes on a list), so the table's memory is faulted in as
    /// the arena's is: with use, or all at build with [`Populate::Eager`].
    ///
    /// [`Populate::Eager`]: crate::arena::Populate::Eager
    #[cfg(test)]
    pub(crate) fn new(pages: usize) -> io::Result<Self> {
        Self::with_huge_pages(pages, true, crate::arena::Populate::Lazy)
    }

    /// [`new`](Self::new), asking for huge pages only if `huge` (a cache
    /// built without them for its arena does without them here too), and
    /// faulted in at once with [`Populate::Eager`], as the arena is (else
    /// each of a cache's first allocations that reaches a new page of
    /// descriptors traps into the kernel: a populated cache's first writes
    /// would pay a fault for about every hundred 4 KiB folios).
    ///
    /// [`Populate::Eager`]: crate::arena::Populate::Eager
    ///
    /// # Errors
    /// The OS refusing the mapping (`ENOMEM`), or the populate failing.
    pub(crate) fn with_huge_pages(
        pages: usize,
        huge: bool,
        populate: crate::arena::Populate,
    ) -> io::Result<Self> {
        let size =
            (std::mem::size_of::<Folio>() * pages.max(1)).next_multiple_of(crate::arena::PAGE_SIZE);
        #[cfg(not(loom))]
        {
            let align = if huge && size >= HUGE {
                HUGE
            } else {
                crate::arena::PAGE_SIZE
            };
            let memory = crate::arena::Region::map_aligned(size, align)?;
            if align == HUGE {
                memory.advise_huge_pages();
            }
            if populate == crate::arena::Populate::Eager {
                memory.populate("folio descriptor table", false)?;
            }
            // A `Folio` is integer atomics (outside loom): the mapping's
            // zero bytes are valid descriptors, free ones.
            Ok(FolioTable {
                folios: memory.ptr.cast(),
                len: pages,
                _memory: memory,
            })
        }
        #[cfg(loom)]
        {
            let _ = (huge, populate);
            let layout = std::alloc::Layout::from_size_align(size, std::mem::align_of::<Folio>())
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { std::alloc::alloc(layout) };
            let Some(folios) = NonNull::new(raw.cast::<Folio>()) else {
                std::alloc::handle_alloc_error(layout)
            };
            for i in 0..pages {
                // SAFETY: `i < pages`, inside the allocation; each slot is
                // written once before any read.
                unsafe { folios.as_ptr().add(i).write(Folio::default()) };
            }
            Ok(FolioTable {
                folios,
                len: pages,
                layout,
            })
        }
    }

    fn as_slice(&self) -> &[Folio] {
        // SAFETY: `len` descriptors were initialised in `new` and live until
        // drop; shared references only.
        unsafe { std::slice::from_raw_parts(self.folios.as_ptr(), self.len) }
    }

    /// How many descriptors: the arena's pages.
    #[cfg(feature = "internals")]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The descriptor of arena page `page`, if in range.
    pub(crate) fn get(&self, page: usize) -> Option<&Folio> {
        self.as_slice().get(page)
    }

    /// The arena page a descriptor of this table describes.
    pub(crate) fn page_of(&self, folio: &Folio) -> Option<usize> {
        self.page_of_addr(folio as *const Folio as usize)
    }

    /// The arena page whose descriptor sits at `addr`, if one of this table's.
    pub(crate) fn page_of_addr(&self, addr: usize) -> Option<usize> {
        let base = self.folios.as_ptr() as usize;
        let size = std::mem::size_of::<Folio>();
        let off = addr.checked_sub(base)?;
        (off % size == 0 && off / size < self.len).then_some(off / size)
    }

    /// Bytes of descriptors per arena page.
    pub(crate) const fn bytes_per_page() -> usize {
        std::mem::size_of::<Folio>()
    }
}

impl Drop for FolioTable {
    fn drop(&mut self) {
        // SAFETY: the `len` descriptors are initialised (zero bytes are a
        // free descriptor; under loom each was written) and nothing borrows
        // the table any more. The memory goes with `_memory` (under loom,
        // the block allocated with `layout`).
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.folios.as_ptr(),
                self.len,
            ));
            #[cfg(loom)]
            std::alloc::dealloc(self.folios.as_ptr().cast(), self.layout);
        }
    }
}

#[cfg(test)]
// (The tests coordinate their threads with std atomics.)
#[allow(clippy::disallowed_types)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
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
}
