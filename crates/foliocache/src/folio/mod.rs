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
//!            FRESH STREAMED
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
//!
//! # Files
//! `mod.rs` the descriptor: its count, identity, flags, pins and LRU links;
//! `lock.rs` the folio lock and the waits for it, with and without a
//! thread; `refs.rs` what holds a folio (a reference, a lock, a frozen
//! folio, a batch of freed ones); `iobuf.rs` a locked folio's memory handed to
//! IO; `memory.rs` a cache's memory (arena, table, dirty bits); `table.rs`
//! the descriptor table.

mod iobuf;
mod lock;
mod memory;
mod refs;
mod table;
#[cfg(test)]
// (The tests coordinate their threads with std atomics.)
#[allow(clippy::disallowed_types)]
mod tests;

use std::fmt;

use crate::sync::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering, StatU16};

pub(crate) use iobuf::EngineReads;
pub use lock::WaitUnlocked;
#[cfg(loom)]
use lock::WaiterList;
use memory::page_of;
pub(crate) use memory::{Memory, MemoryOwner};
pub use refs::{FolioRef, LockedFolio};
pub(crate) use refs::{FreeBatch, FrozenFolio};
pub(crate) use table::FolioTable;

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
        /// Filled by a read from the backing (a miss's or readahead's) and
        /// not yet read by a read: its first read counts its bytes as read
        /// from below, not from memory (`Mapping::first_read`), and clears it.
        const FRESH = 1 << 14;
        /// On the streamed list: brought in by a sequential stream's
        /// readahead window, so reclaim takes it, once read, before the
        /// inactive list's folios, and no access activates it (`lru.rs`).
        const STREAMED = 1 << 15;
    }
}

impl fmt::Debug for FolioFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::flags::fmt_names(self, true, f)
    }
}

/// A folio descriptor. See the module documentation (`folio/mod.rs`).
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
    /// The clock's tick at its last read (`Mrc::now`): a hit's age, for
    /// the miss-ratio curve. In the descriptor's padding.
    stamp: StatU16,
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
            stamp: StatU16::new(0),
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

    /// A read at tick `now` of the miss-ratio curve's clock: the ticks
    /// since the last one (`mrc::touch`).
    #[inline]
    pub(crate) fn touch(&self, now: u16) -> u16 {
        crate::mrc::touch(&self.stamp, now)
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

    // ---- pins ------------------------------------------------------------------

    /// Pins the folio's bytes unless it is locked (the reader's side of the
    /// protocol in `filemap/pin.rs`): counts a pin, then looks at the lock
    /// bit, both sequentially consistent. A locker fences (`SeqCst`)
    /// between taking the lock and reading the count
    /// ([`LockedFolio::is_pinned`]), so of the two, at least one sees the
    /// other: either this sees the lock (and takes its pin back), or the
    /// locker sees the pin. (If neither did, the single order of
    /// sequentially consistent operations and fences would hold the
    /// locker's fence before this count, since its read of the count
    /// missed it, this count before this load, and this load before the
    /// fence, since it missed the lock the fence follows: a cycle. These
    /// are C++20's rules, section atomics.order, 4.2 and 4.3, which
    /// Rust's atomics follow.) On x86 the count is one locked add, where a count
    /// and a fence were two. Reading an unlocked folio here (at least
    /// acquire) also orders this thread's reads of the bytes after the
    /// last locker's writes. Returns whether it pinned. The caller holds
    /// a reference.
    pub(crate) fn try_pin(&self) -> bool {
        self.pins.fetch_add(1, Ordering::SeqCst);
        // Loom checks `SeqCst` accesses as acquire/release only (a limit
        // its documentation states), under which both sides could miss:
        // its models keep the fence, which gives what the two accesses
        // give under the rules above.
        #[cfg(loom)]
        fence(Ordering::SeqCst);
        if self.flags.load(Ordering::SeqCst) & FolioFlags::LOCKED.bits() != 0 {
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
