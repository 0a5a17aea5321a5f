//! The array and its simple API: every call locks (writers) or pins
//! (readers) for you, and retries node allocation outside the lock.

use std::fmt;
use std::ops::{Bound, RangeBounds};

use crate::cursor::XaGuard;
use crate::entry::{word_key, BadEntry, Entry, EntryKey, EntryRef, Item, ZERO};
use crate::error::{Error, Result};
use crate::mark::Mark;
use crate::sync::{Guard, Mutex};
use crate::tree::{Filter, Mode, Outcome, Path, Pool, State, Tree, MAX_ORDER, NODE_SIZE};

/// A concurrent radix tree mapping `u64` indices to entries: items of type
/// `P` (an [`Arc`](std::sync::Arc) or a `&'static T`) or 62-bit value entries.
///
/// Readers never block: they run under an epoch pin and see, for every index,
/// either the entry before or after any concurrent write. Writers serialize on
/// one lock. See the [crate documentation](crate) for the model, the locking
/// table and the cursor API for batches.
pub struct XArray<P: Item> {
    pub(crate) tree: Tree<P>,
    pub(crate) lock: Mutex<State>,
}

/// A pinned epoch for lockless reads that borrow entries
/// ([`XArray::load_ref`], [`XArray::iter_ref`]).
///
/// While it lives, nothing removed from any array is freed, so keep it short:
/// drop it between batches of work, not across sleeps.
pub struct ReadGuard {
    pub(crate) g: Guard,
}

impl ReadGuard {
    /// Pins the current thread.
    pub fn new() -> Self {
        ReadGuard { g: Guard::pin() }
    }

    /// Lets memory retired so far be freed, and pins again. Borrows taken
    /// under the old pin end here (the borrow checker enforces it).
    pub fn repin(&mut self) {
        self.g.repin();
    }
}

impl Default for ReadGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// A failed [`XArray::compare_exchange`].
#[derive(Debug)]
pub enum CompareExchangeError<P> {
    /// The entry at the index was not the expected one; nothing was stored.
    Mismatch {
        /// What was there.
        current: Option<Entry<P>>,
        /// The entry you tried to store, given back.
        new: Option<Entry<P>>,
    },
    /// The store itself failed (bad order, bad entry, allocation).
    Failed(Error),
}

impl<P: fmt::Debug> fmt::Display for CompareExchangeError<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompareExchangeError::Mismatch { current, .. } => {
                write!(
                    f,
                    "compare_exchange found {current:?} instead of the expected entry"
                )
            }
            CompareExchangeError::Failed(e) => e.fmt(f),
        }
    }
}

pub(crate) fn check_order(index: u64, order: u32) -> Result<()> {
    if order > MAX_ORDER {
        return Err(Error::OrderTooLarge { order });
    }
    if index & ((1u64 << order) - 1) != 0 {
        return Err(Error::Misaligned { index, order });
    }
    Ok(())
}

pub(crate) fn bad_entry(b: BadEntry) -> Error {
    match b {
        BadEntry::ValueTooLarge(value) => Error::ValueTooLarge { value },
        BadEntry::Misaligned(addr) => Error::MisalignedItem { addr },
    }
}

/// An inclusive index range from any `RangeBounds<u64>`; `None` when empty.
pub(crate) fn index_range(r: impl RangeBounds<u64>) -> Result<Option<(u64, u64)>> {
    let start = match r.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => match s.checked_add(1) {
            Some(s) => s,
            None => return Err(Error::InvalidRange { start: s, last: s }),
        },
        Bound::Unbounded => 0,
    };
    let last = match r.end_bound() {
        Bound::Included(&e) => e,
        Bound::Excluded(&e) => match e.checked_sub(1) {
            Some(l) => l,
            None if start == 0 => return Ok(None),
            None => return Err(Error::InvalidRange { start, last: e }),
        },
        Bound::Unbounded => u64::MAX,
    };
    if last.checked_add(1) == Some(start) {
        return Ok(None);
    }
    if start > last {
        return Err(Error::InvalidRange { start, last });
    }
    Ok(Some((start, last)))
}

impl<P: Item> Default for XArray<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Item> XArray<P> {
    /// An empty array. Allocates nothing until the first store.
    pub fn new() -> Self {
        XArray {
            tree: Tree::new(),
            lock: Mutex::new(State::default()),
        }
    }

    /// Pins the current thread for borrowing reads; same as [`ReadGuard::new`].
    pub fn pin(&self) -> ReadGuard {
        ReadGuard::new()
    }

    /// Takes the writers' lock, for the [`Cursor`](crate::Cursor) API.
    ///
    /// # Locking
    /// Blocks while another writer holds the lock. Lockless readers are not
    /// affected. Do no IO and no long computation while holding it.
    pub fn lock(&self) -> XaGuard<'_, P> {
        XaGuard::new(self)
    }

    /// Runs one locked tree operation, allocating nodes outside the lock and
    /// retrying when it runs short (the kernel's `xas_nomem` loop).
    fn locked<R>(
        &self,
        mut op: impl FnMut(&Tree<P>, &mut State, &Guard, &mut Path, &mut Pool) -> Result<R>,
    ) -> Result<R> {
        let mut pool = Pool::default();
        let mut path = Path::default();
        loop {
            let g = Guard::pin();
            let mut st = self.lock.lock();
            path.reset();
            match op(&self.tree, &mut st, &g, &mut path, &mut pool) {
                Err(Error::NeedNodes { nodes }) => {
                    drop(st);
                    drop(g);
                    pool.reserve(nodes)?;
                }
                r => return r,
            }
        }
    }

    /// The entry at `index` (an owned copy: an item's reference count goes up).
    ///
    /// # Locking
    /// Lockless; never blocks. For a read that takes no reference, see
    /// [`load_ref`](Self::load_ref).
    pub fn load(&self, index: u64) -> Option<Entry<P>> {
        let g = Guard::pin();
        let w = self.tree.load(index, &g);
        self.tree.clone_word(w, &g)
    }

    /// The entry at `index`, borrowed for as long as `guard` (and the array) live.
    ///
    /// # Locking
    /// Lockless; never blocks, writes nothing shared.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let xa = foliocache_xarray::XArray::new();
    /// xa.store(7, foliocache_xarray::Entry::Item(Arc::new("seven"))).unwrap();
    /// let guard = xa.pin();
    /// assert_eq!(xa.load_ref(7, &guard).and_then(|e| e.item()), Some(&"seven"));
    /// ```
    pub fn load_ref<'g>(
        &'g self,
        index: u64,
        guard: &'g ReadGuard,
    ) -> Option<EntryRef<'g, P::Target>> {
        let w = self.tree.load(index, &guard.g);
        self.tree.ref_word(crate::entry::canonical(w), &guard.g)
    }

    /// [`load_ref`](Self::load_ref), and the first index of the entry
    /// found, taken from where its slot sits in the tree rather than from
    /// the item: a caller can compute with it (say, prefetch the item's
    /// data) before it touches the item's memory. Exact when no store
    /// races the load; a hint otherwise, to check against the item.
    #[inline]
    pub fn load_ref_with_start<'g>(
        &'g self,
        index: u64,
        guard: &'g ReadGuard,
    ) -> Option<(EntryRef<'g, P::Target>, u64)> {
        let (w, start) = self.tree.load_with_start(index, &guard.g);
        let e = self.tree.ref_word(crate::entry::canonical(w), &guard.g)?;
        Some((e, start))
    }

    /// Is there an entry (not a reservation) at `index`?
    pub fn contains(&self, index: u64) -> bool {
        let g = Guard::pin();
        crate::entry::is_entry(self.tree.load(index, &g))
    }

    /// The order of the entry covering `index`; 0 where there is none.
    pub fn get_order(&self, index: u64) -> u32 {
        let g = Guard::pin();
        self.tree.order_at(index, &g)
    }

    /// Stores `entry` at `index` (order 0) and returns the entry that was
    /// there. See [`store_order`](Self::store_order).
    pub fn store(&self, index: u64, entry: Entry<P>) -> Result<Option<Entry<P>>> {
        self.store_order(index, 0, entry)
    }

    /// Stores `entry` over the `2^order` indices from `index`, which must be
    /// a multiple of `2^order`. Returns the entry `load(index)` gave before.
    ///
    /// - Over smaller entries: they are all replaced and the new entry gets
    ///   the union of their marks.
    /// - Into part of a larger entry (any index of it, any smaller order):
    ///   the larger entry is replaced *whole* and keeps its order and marks,
    ///   as in the kernel. To change only part of it, [`split`](Self::split)
    ///   it first.
    /// - Over the same range: the entry is replaced and its marks kept.
    ///
    /// # Errors
    /// [`Error::OrderTooLarge`], [`Error::Misaligned`], [`Error::ValueTooLarge`],
    /// [`Error::MisalignedItem`], [`Error::AllocFailed`]. On error the array is
    /// unchanged and `entry` is dropped.
    ///
    /// # Locking
    /// Takes the lock; allocates nodes outside it.
    pub fn store_order(&self, index: u64, order: u32, entry: Entry<P>) -> Result<Option<Entry<P>>> {
        self.store_mode(index, order, entry, Mode::Store)
            .map_err(StoreFail::into_error)
    }

    fn store_mode(
        &self,
        index: u64,
        order: u32,
        entry: Entry<P>,
        mode: Mode,
    ) -> std::result::Result<Option<Entry<P>>, StoreFail<P>> {
        check_order(index, order).map_err(StoreFail::Error)?;
        let w = entry
            .into_word()
            .map_err(|(_, b)| StoreFail::Error(bad_entry(b)))?;
        let r = self.locked(|tree, st, g, path, pool| {
            Ok(
                match tree.store(st, g, path, pool, index, order, w, mode)? {
                    Outcome::Stored { old } => Ok(tree.clone_word(old, g)),
                    Outcome::Occupied { index } => Err(StoreFail::Occupied(index)),
                    Outcome::Mismatch { current } => Err(StoreFail::Mismatch {
                        index,
                        current: tree.clone_word(current, g),
                        new: None,
                    }),
                },
            )
        });
        match r {
            Ok(Ok(old)) => Ok(old),
            Ok(Err(mut fail)) => {
                // `w` was never published: it is still ours to give back or drop.
                let back = self.tree.unpublished(w);
                if let StoreFail::Mismatch { new, .. } = &mut fail {
                    *new = back;
                }
                Err(fail)
            }
            Err(e) => {
                drop(self.tree.unpublished(w));
                Err(StoreFail::Error(e))
            }
        }
    }

    /// Stores `entry` at `index` only if nothing is there (no entry and no
    /// reservation).
    ///
    /// # Errors
    /// [`Error::Occupied`] if the index is in use, else as [`store`](Self::store).
    pub fn insert(&self, index: u64, entry: Entry<P>) -> Result<()> {
        self.insert_order(index, 0, entry)
    }

    /// Stores an order-`order` entry only if no index of its range is in use.
    ///
    /// # Errors
    /// [`Error::Occupied`] with the first index in use, else as
    /// [`store_order`](Self::store_order).
    pub fn insert_order(&self, index: u64, order: u32, entry: Entry<P>) -> Result<()> {
        self.store_mode(index, order, entry, Mode::Insert)
            .map(|_| ())
            .map_err(StoreFail::into_error)
    }

    /// Stores `new` at `index` only if the entry there is `current` (by
    /// identity: an item's address or a value; `None` matches an empty or
    /// reserved index). `new == None` erases. Returns the entry replaced.
    ///
    /// # Errors
    /// [`CompareExchangeError::Mismatch`] with what is there and `new` given
    /// back; [`CompareExchangeError::Failed`] as for [`store`](Self::store).
    pub fn compare_exchange(
        &self,
        index: u64,
        current: Option<EntryKey>,
        new: Option<Entry<P>>,
    ) -> std::result::Result<Option<Entry<P>>, CompareExchangeError<P>> {
        match new {
            Some(entry) => match self.store_mode(index, 0, entry, Mode::Exchange(current)) {
                Ok(old) => Ok(old),
                Err(StoreFail::Mismatch { current, new, .. }) => {
                    Err(CompareExchangeError::Mismatch { current, new })
                }
                Err(fail) => Err(CompareExchangeError::Failed(fail.into_error())),
            },
            None => {
                let g = Guard::pin();
                let mut st = self.lock.lock();
                let mut path = Path::default();
                let cur = self.tree.current(&mut path, index);
                let key = if cur == ZERO { None } else { word_key(cur) };
                if key != current {
                    return Err(CompareExchangeError::Mismatch {
                        current: self.tree.clone_word(cur, &g),
                        new: None,
                    });
                }
                let old = self.tree.erase(&mut st, &g, &mut path, index);
                Ok(self.tree.clone_word(old, &g))
            }
        }
    }

    /// Removes the entry covering `index` (all of a multi-order entry) or the
    /// reservation there, and returns the entry.
    ///
    /// # Locking
    /// Takes the lock; never allocates. Emptied nodes are freed once readers
    /// that might see them are done.
    pub fn erase(&self, index: u64) -> Option<Entry<P>> {
        let g = Guard::pin();
        let mut st = self.lock.lock();
        let mut path = Path::default();
        let old = self.tree.erase(&mut st, &g, &mut path, index);
        self.tree.clone_word(old, &g)
    }

    /// Reserves an empty `index`: it loads as `None` and is skipped by
    /// searches, but `insert` fails on it and the array is not empty (the
    /// kernel's `xa_reserve`, for a slot whose entry is being prepared). A
    /// `store` or `compare_exchange` from `None` fills it; `erase` or
    /// `release` frees it.
    ///
    /// # Errors
    /// [`Error::Occupied`] if an entry is there (an existing reservation is fine).
    pub fn reserve(&self, index: u64) -> Result<()> {
        let r = self.locked(|tree, st, g, path, pool| {
            tree.store(st, g, path, pool, index, 0, ZERO, Mode::Exchange(None))
        })?;
        match r {
            Outcome::Stored { .. } => Ok(()),
            _ => Err(Error::Occupied { index }),
        }
    }

    /// Frees a reservation at `index`; does nothing if an entry is there.
    pub fn release(&self, index: u64) {
        let g = Guard::pin();
        let mut st = self.lock.lock();
        let mut path = Path::default();
        if self.tree.current(&mut path, index) == ZERO {
            self.tree.erase(&mut st, &g, &mut path, index);
        }
    }

    /// Sets `mark` on the entry covering `index`. Returns false (and does
    /// nothing) if there is no entry.
    pub fn set_mark(&self, index: u64, mark: Mark) -> bool {
        let st = self.lock.lock();
        self.tree
            .mark(&st, &mut Path::default(), index, mark.index(), true)
    }

    /// Clears `mark` on the entry covering `index`. Returns false if there is
    /// no entry.
    pub fn clear_mark(&self, index: u64, mark: Mark) -> bool {
        let st = self.lock.lock();
        self.tree
            .mark(&st, &mut Path::default(), index, mark.index(), false)
    }

    /// Does the entry covering `index` carry `mark`? Lockless.
    pub fn get_mark(&self, index: u64, mark: Mark) -> bool {
        let g = Guard::pin();
        let m = Filter::Marked(mark.index());
        self.tree
            .scan(&mut Path::default(), index, index, m, &g)
            .is_some()
    }

    /// Does any entry carry `mark`? O(1), lockless.
    pub fn marked(&self, mark: Mark) -> bool {
        let g = Guard::pin();
        self.tree.any_marked(mark.index(), &g)
    }

    fn find_filter(&self, start: u64, max: u64, filter: Filter) -> Option<(u64, Entry<P>)> {
        let g = Guard::pin();
        let f = self
            .tree
            .scan(&mut Path::default(), start, max, filter, &g)?;
        Some((f.index, self.tree.clone_word(f.word, &g)?))
    }

    /// The first entry at an index in `start..=max`, with that index. An
    /// entry that contains `start` is returned at `start`; others at their
    /// first index. Lockless.
    pub fn find(&self, start: u64, max: u64) -> Option<(u64, Entry<P>)> {
        self.find_filter(start, max, Filter::Present)
    }

    /// The first entry after the one containing `index` (or after `index`
    /// if it is empty), up to `max`.
    pub fn find_after(&self, index: u64, max: u64) -> Option<(u64, Entry<P>)> {
        let g = Guard::pin();
        let next = match self
            .tree
            .scan(&mut Path::default(), index, index, Filter::Present, &g)
        {
            Some(f) => f.next()?,
            None => index.checked_add(1)?,
        };
        drop(g);
        self.find(next, max)
    }

    /// The first entry carrying `mark` in `start..=max`; marked subtrees
    /// are found through the nodes' summary bits. Lockless.
    pub fn find_marked(&self, start: u64, max: u64, mark: Mark) -> Option<(u64, Entry<P>)> {
        self.find_filter(start, max, Filter::Marked(mark.index()))
    }

    /// The first index in `start..=max` that holds nothing (a reservation
    /// counts as something). Lockless.
    pub fn find_empty(&self, start: u64, max: u64) -> Option<u64> {
        let g = Guard::pin();
        self.tree
            .scan(&mut Path::default(), start, max, Filter::Empty, &g)
            .map(|f| f.index)
    }

    /// Iterates the entries in `range` in index order, each once (owned copies).
    ///
    /// Not a snapshot: entries stored or erased during the iteration may or
    /// may not be seen; entries present throughout are seen exactly once.
    /// The iterator pins the thread, and lets go every 64 entries.
    ///
    /// # Errors
    /// [`Error::InvalidRange`] when the range is inverted or overflows.
    pub fn iter(&self, range: impl RangeBounds<u64>) -> Result<Iter<'_, P>> {
        Iter::new(self, range, Filter::Present)
    }

    /// Iterates the entries carrying `mark` in `range`.
    ///
    /// # Errors
    /// As [`iter`](Self::iter).
    pub fn iter_marked(&self, range: impl RangeBounds<u64>, mark: Mark) -> Result<Iter<'_, P>> {
        Iter::new(self, range, Filter::Marked(mark.index()))
    }

    /// Iterates borrowed entries in `range` under `guard`, taking no references.
    ///
    /// # Errors
    /// As [`iter`](Self::iter).
    pub fn iter_ref<'g>(
        &'g self,
        range: impl RangeBounds<u64>,
        guard: &'g ReadGuard,
    ) -> Result<IterRef<'g, P>> {
        let r = index_range(range)?;
        Ok(IterRef {
            xa: self,
            g: &guard.g,
            path: Path::default(),
            next: r.map(|r| r.0),
            last: r.map_or(0, |r| r.1),
            span: (0, 0),
        })
    }

    /// Counts the entries in `range` (a multi-order entry once).
    ///
    /// # Errors
    /// As [`iter`](Self::iter).
    pub fn count(&self, range: impl RangeBounds<u64>) -> Result<u64> {
        let g = self.pin();
        Ok(self.iter_ref(range, &g)?.count() as u64)
    }

    /// Entries in the array (a multi-order entry once; reservations not counted).
    pub fn len(&self) -> u64 {
        self.lock.lock().len
    }

    /// True when the array holds no entry and no reservation (and no node).
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Splits the entry covering `index` into entries of `new_order`, each
    /// holding the same item (one reference each) or value and the same
    /// marks, in one lock hold; nodes are allocated before the lock is taken
    /// (on a retry if the first attempt finds the pool short).
    ///
    /// # Errors
    /// [`Error::NotPresent`], [`Error::SplitOrder`] if `new_order` is not
    /// smaller than the entry's order, [`Error::SplitTooLarge`],
    /// [`Error::AllocFailed`].
    pub fn split(&self, index: u64, new_order: u32) -> Result<()> {
        self.locked(|tree, st, g, path, pool| tree.split(st, g, path, pool, index, new_order))
    }

    /// Bytes the array uses: its nodes plus the array itself (not the items).
    /// Nodes removed are counted out at once, though their memory waits for
    /// readers to finish before it is freed.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.tree.node_count() * NODE_SIZE
    }

    /// Nodes currently in the tree.
    pub fn node_count(&self) -> usize {
        self.tree.node_count()
    }

    /// Nodes currently in the tree that hold only value entries: every
    /// non-empty slot holds a value entry or a sibling of one (the kernel's
    /// workingset "shadow nodes", `count == nr_values`, which go on a
    /// shrinker list). A page cache that keeps eviction shadows as value
    /// entries uses it to bound the memory they pin. A node whose slots
    /// hold other nodes, items or reservations is not counted, nor is an
    /// empty array.
    ///
    /// Kept up to date by the writers as they change nodes, so this is one
    /// atomic load. Under a concurrent writer it is a value the counter held
    /// at some moment during the call; with no writer running it is exact.
    ///
    /// # Locking
    /// Lockless; never blocks, never allocates.
    ///
    /// ```
    /// use foliocache_xarray::{Entry, XArray};
    ///
    /// let xa: XArray<&'static u64> = XArray::new();
    /// xa.store(1, Entry::Value(7)).unwrap();
    /// xa.store(2, Entry::Value(8)).unwrap();
    /// assert_eq!(xa.value_nodes(), 1, "one leaf, only values in it");
    /// static PAGE: u64 = 0;
    /// xa.store(3, Entry::Item(&PAGE)).unwrap();
    /// assert_eq!(xa.value_nodes(), 0, "the leaf now holds an item too");
    /// xa.erase(3);
    /// assert_eq!(xa.value_nodes(), 1);
    /// ```
    pub fn value_nodes(&self) -> usize {
        self.tree.value_node_count()
    }

    /// Bytes of the nodes counted by [`value_nodes`](Self::value_nodes):
    /// `value_nodes() * ` the size of a node. Like
    /// [`memory_bytes`](Self::memory_bytes), a node is counted out when it
    /// leaves the tree, before its memory is freed.
    ///
    /// # Locking
    /// Lockless; never blocks, never allocates.
    ///
    /// ```
    /// use foliocache_xarray::{Entry, XArray};
    ///
    /// let xa: XArray<&'static u64> = XArray::new();
    /// let empty = xa.memory_bytes();
    /// xa.store(5, Entry::Value(1)).unwrap();
    /// // One node, holding only a value.
    /// assert_eq!(xa.value_node_bytes(), xa.memory_bytes() - empty);
    /// ```
    pub fn value_node_bytes(&self) -> usize {
        self.value_nodes() * NODE_SIZE
    }

    /// Recounts [`value_nodes`](Self::value_nodes) by walking the whole tree
    /// and classifying every slot, without using the counters the writers
    /// keep: for tests that check the counter. O(nodes); not for production
    /// use (read `value_nodes` instead). Debug builds also assert that every
    /// node's slot counts match its slots.
    ///
    /// # Locking
    /// Takes the lock for the walk: calling it while holding an
    /// [`XaGuard`] of this array deadlocks.
    #[doc(hidden)]
    pub fn debug_recount_value_nodes(&self) -> usize {
        let st = self.lock.lock();
        self.tree.recount_value_nodes(&st)
    }

    /// Erases the value entries of up to `max` of the nodes that hold only
    /// value entries (those [`value_nodes`](Self::value_nodes) counts),
    /// oldest first: in the order they came to hold only values, which for
    /// a page cache's eviction shadows is the order of their newest
    /// shadow's eviction (the kernel's shadow-node shrinker,
    /// `shadow_lru_isolate`, taking nodes from the head of its `list_lru`).
    /// Each node goes from the tree with its entries, and so does any
    /// ancestor it leaves empty. Returns the nodes removed: fewer than
    /// `max` only when none holding only values is left.
    ///
    /// The nodes are kept on a list as writers change them, so this walks
    /// nothing: its cost is the entries it erases.
    ///
    /// # Locking
    /// Takes the array's lock once per node (writers to other indices go
    /// on between nodes); never allocates.
    ///
    /// ```
    /// use foliocache_xarray::{Entry, XArray};
    ///
    /// let xa: XArray<&'static u64> = XArray::new();
    /// static PAGE: u64 = 0;
    /// xa.store(0, Entry::Value(1)).unwrap(); // leaf 0..64: values only
    /// xa.store(64, Entry::Value(2)).unwrap(); // leaf 64..128: values only
    /// xa.store(130, Entry::Value(3)).unwrap();
    /// xa.store(131, Entry::Item(&PAGE)).unwrap(); // leaf 128..192: not
    /// assert_eq!(xa.value_nodes(), 2);
    /// assert_eq!(xa.shrink_value_nodes(1), 1);
    /// assert!(xa.load(0).is_none(), "the oldest went first");
    /// assert!(xa.load(64).is_some());
    /// assert_eq!(xa.shrink_value_nodes(8), 1);
    /// assert!(xa.load(64).is_none());
    /// assert!(xa.load(130).is_some(), "a node with an item in it stays");
    /// ```
    pub fn shrink_value_nodes(&self, max: usize) -> usize {
        let mut done = 0;
        while done < max {
            let g = Guard::pin();
            let mut st = self.lock.lock();
            if self.tree.shrink_oldest_value_node(&mut st, &g).is_none() {
                break;
            }
            done += 1;
        }
        done
    }
}

/// Why a store did not happen.
enum StoreFail<P> {
    Error(Error),
    Occupied(u64),
    Mismatch {
        index: u64,
        current: Option<Entry<P>>,
        new: Option<Entry<P>>,
    },
}

impl<P> StoreFail<P> {
    fn into_error(self) -> Error {
        match self {
            StoreFail::Error(e) => e,
            StoreFail::Occupied(index) => Error::Occupied { index },
            // Only compare_exchange asks for a match, and it reports this
            // case itself; as a plain error it means "something else is there".
            StoreFail::Mismatch { index, .. } => Error::Occupied { index },
        }
    }
}

impl<P: Item> fmt::Debug for XArray<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XArray")
            .field("nodes", &self.tree.node_count())
            .field("empty", &self.tree.is_empty())
            .finish()
    }
}

/// Iterator over owned entries; see [`XArray::iter`].
pub struct Iter<'a, P: Item> {
    xa: &'a XArray<P>,
    g: Guard,
    path: Path,
    next: Option<u64>,
    last: u64,
    filter: Filter,
    since_repin: u32,
}

impl<'a, P: Item> Iter<'a, P> {
    fn new(xa: &'a XArray<P>, range: impl RangeBounds<u64>, filter: Filter) -> Result<Self> {
        let r = index_range(range)?;
        Ok(Iter {
            xa,
            g: Guard::pin(),
            path: Path::default(),
            next: r.map(|r| r.0),
            last: r.map_or(0, |r| r.1),
            filter,
            since_repin: 0,
        })
    }
}

impl<P: Item> Iterator for Iter<'_, P> {
    type Item = (u64, Entry<P>);

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next?;
        self.since_repin += 1;
        if self.since_repin >= 64 {
            self.since_repin = 0;
            self.g.repin();
            self.path.reset();
        }
        let tree = &self.xa.tree;
        match tree.scan(&mut self.path, start, self.last, self.filter, &self.g) {
            Some(f) => {
                self.next = f.next();
                tree.clone_word(f.word, &self.g).map(|e| (f.index, e))
            }
            None => {
                self.next = None;
                None
            }
        }
    }
}

/// Iterator over borrowed entries; see [`XArray::iter_ref`].
pub struct IterRef<'g, P: Item> {
    xa: &'g XArray<P>,
    g: &'g Guard,
    path: Path,
    next: Option<u64>,
    last: u64,
    span: (u64, u32),
}

impl<P: Item> IterRef<'_, P> {
    /// The first index and the order of the entry returned last (a
    /// multi-order entry may begin before the range; the index the
    /// iterator returned is then the range's start). `(0, 0)` before the
    /// first entry.
    pub fn span(&self) -> (u64, u32) {
        self.span
    }
}

impl<'g, P: Item> Iterator for IterRef<'g, P> {
    type Item = (u64, EntryRef<'g, P::Target>);

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next?;
        let tree = &self.xa.tree;
        match tree.scan(&mut self.path, start, self.last, Filter::Present, self.g) {
            Some(f) => {
                self.next = f.next();
                self.span = (f.base, f.order);
                tree.ref_word(f.word, self.g).map(|e| (f.index, e))
            }
            None => {
                self.next = None;
                None
            }
        }
    }
}
