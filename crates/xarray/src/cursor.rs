//! The cursor API (the kernel's `xa_state`): for a caller that holds the
//! lock and does many loads, stores, erases and marks in one hold, walking
//! forward from where the last operation left off instead of from the root.
//!
//! ```
//! use std::sync::Arc;
//! use foliocache_xarray::{Cursor, Entry, Error, XArray};
//!
//! let xa = XArray::new();
//! let mut cur = Cursor::new(&xa, 0);
//! loop {
//!     let mut lock = xa.lock();
//!     let mut res = Ok(());
//!     for i in cur.index()..512 {
//!         cur.set_index(i);
//!         if let Err(e) = cur.store(&mut lock, Some(Entry::Item(Arc::new(i)))) {
//!             res = Err(e);
//!             break;
//!         }
//!     }
//!     drop(lock);
//!     match res {
//!         // Out of preallocated nodes: allocate outside the lock, retry.
//!         Err(Error::NeedNodes { nodes }) => cur.reserve_nodes(nodes).unwrap(),
//!         other => break other.unwrap(),
//!     }
//! }
//! assert_eq!(xa.len(), 512);
//! ```

use crate::entry::{canonical, is_entry, word_key, Entry, EntryKey, EntryRef, Item, ZERO};
use crate::error::{Error, Result};
use crate::mark::Mark;
use crate::sync::{Guard, MutexGuard};
use crate::tree::{Filter, Mode, Outcome, Path, Pool, State};
use crate::xarray::{bad_entry, check_order, XArray};

/// The array's lock, held. Pass it to [`Cursor`] operations.
///
/// While it lives the thread is also pinned, so entries borrowed through it
/// stay valid. Dropping it unlocks.
pub struct XaGuard<'a, P: Item> {
    xa: &'a XArray<P>,
    st: MutexGuard<'a, State>,
    g: Guard,
}

impl<'a, P: Item> XaGuard<'a, P> {
    pub(crate) fn new(xa: &'a XArray<P>) -> Self {
        let g = Guard::pin();
        let mut st = xa.lock.lock();
        // Cursor paths recorded under an earlier hold are walked again.
        st.gen = st.gen.wrapping_add(1);
        XaGuard { xa, st, g }
    }

    /// The array this guard locks.
    pub fn array(&self) -> &'a XArray<P> {
        self.xa
    }

    /// Entries in the array (O(1) under the lock).
    pub fn len(&self) -> u64 {
        self.st.len
    }

    /// True when the array holds no entry and no reservation.
    pub fn is_empty(&self) -> bool {
        self.xa.tree.is_empty()
    }
}

/// A position in an array plus a pool of preallocated nodes.
///
/// Created without the lock; every operation takes the lock guard as an
/// argument. A store that needs more nodes than the pool holds fails with
/// [`Error::NeedNodes`] and changes nothing: drop the guard, call
/// [`reserve_nodes`](Self::reserve_nodes), lock again and retry. Unused nodes
/// are freed with the cursor.
pub struct Cursor<'a, P: Item> {
    xa: &'a XArray<P>,
    path: Path,
    pool: Pool,
    index: u64,
    order: u32,
    /// After a find: where the next find starts.
    after: Option<Option<u64>>,
}

impl<'a, P: Item> Cursor<'a, P> {
    /// A cursor at `index`, order 0, with an empty node pool.
    pub fn new(xa: &'a XArray<P>, index: u64) -> Self {
        Cursor {
            xa,
            path: Path::default(),
            pool: Pool::default(),
            index,
            order: 0,
            after: None,
        }
    }

    /// The cursor's index.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Moves the cursor to `index`. Walks nothing: the next operation walks
    /// from the deepest remembered node that covers `index`.
    pub fn set_index(&mut self, index: u64) {
        self.index = index;
        self.after = None;
    }

    /// The order of the entries this cursor stores (0 by default).
    pub fn order(&self) -> u32 {
        self.order
    }

    /// Sets the order of later stores and inserts.
    ///
    /// # Errors
    /// [`Error::OrderTooLarge`] above [`MAX_ORDER`](crate::MAX_ORDER).
    pub fn set_order(&mut self, order: u32) -> Result<()> {
        check_order(0, order)?;
        self.order = order;
        Ok(())
    }

    /// Tops the node pool up to `nodes`. Call it without the lock held.
    ///
    /// # Errors
    /// [`Error::AllocFailed`] if the allocator refuses.
    pub fn reserve_nodes(&mut self, nodes: usize) -> Result<()> {
        self.pool.reserve(nodes)
    }

    /// Nodes waiting in the pool.
    pub fn pooled_nodes(&self) -> usize {
        self.pool.len()
    }

    fn check(&mut self, g: &XaGuard<'_, P>) -> Result<()> {
        if !std::ptr::eq(self.xa, g.xa) {
            return Err(Error::WrongArray);
        }
        self.xa.tree.revalidate(&g.st, &mut self.path);
        Ok(())
    }

    /// The entry at the cursor's index, borrowed while the guard lives.
    ///
    /// # Errors
    /// [`Error::WrongArray`] if `g` locks another array.
    pub fn load<'g>(&mut self, g: &'g XaGuard<'_, P>) -> Result<Option<EntryRef<'g, P::Target>>> {
        self.check(g)?;
        let w = self.xa.tree.current(&mut self.path, self.index);
        Ok(g.xa.tree.ref_word(canonical(w), &g.g))
    }

    /// An owned copy of the entry at the cursor's index.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn load_owned(&mut self, g: &XaGuard<'_, P>) -> Result<Option<Entry<P>>> {
        self.check(g)?;
        let w = self.xa.tree.current(&mut self.path, self.index);
        Ok(self.xa.tree.clone_word(w, &g.g))
    }

    /// The order of the entry covering the cursor's index (0 if none).
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn get_order(&mut self, g: &XaGuard<'_, P>) -> Result<u32> {
        self.check(g)?;
        let f = self.xa.tree.scan(
            &mut self.path,
            self.index,
            self.index,
            Filter::Present,
            &g.g,
        );
        Ok(f.map_or(0, |f| f.order))
    }

    #[allow(clippy::type_complexity)]
    fn store_mode(
        &mut self,
        g: &mut XaGuard<'_, P>,
        entry: Entry<P>,
        mode: Mode,
    ) -> Result<std::result::Result<Option<Entry<P>>, (Outcome, Option<Entry<P>>)>> {
        self.check(g)?;
        check_order(self.index, self.order)?;
        let w = entry.into_word().map_err(|(_, b)| bad_entry(b))?;
        let XaGuard { st, g: pin, .. } = g;
        let tree = &self.xa.tree;
        let r = tree.store(
            st,
            pin,
            &mut self.path,
            &mut self.pool,
            self.index,
            self.order,
            w,
            mode,
        );
        match r {
            Ok(Outcome::Stored { old }) => Ok(Ok(tree.clone_word(old, pin))),
            Ok(o) => Ok(Err((o, tree.unpublished(w)))),
            Err(e) => {
                drop(tree.unpublished(w));
                Err(e)
            }
        }
    }

    /// Stores `entry` (erases for `None`) over the cursor's index and order;
    /// returns the entry that was at the index. Semantics as
    /// [`XArray::store_order`].
    ///
    /// # Errors
    /// [`Error::NeedNodes`] when the pool is short (nothing changed),
    /// [`Error::Misaligned`], [`Error::ValueTooLarge`],
    /// [`Error::MisalignedItem`], [`Error::WrongArray`].
    ///
    /// # Locking
    /// Needs the lock (the guard); never allocates.
    pub fn store(
        &mut self,
        g: &mut XaGuard<'_, P>,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<P>>> {
        match entry {
            None => self.erase(g),
            Some(e) => match self.store_mode(g, e, Mode::Store)? {
                Ok(old) => Ok(old),
                Err((_, _)) => Err(Error::Occupied { index: self.index }),
            },
        }
    }

    /// Stores `entry` only if no index of the cursor's range is in use.
    ///
    /// # Errors
    /// [`Error::Occupied`] with the first index in use; else as [`store`](Self::store).
    pub fn insert(&mut self, g: &mut XaGuard<'_, P>, entry: Entry<P>) -> Result<()> {
        match self.store_mode(g, entry, Mode::Insert)? {
            Ok(_) => Ok(()),
            Err((Outcome::Occupied { index }, _)) => Err(Error::Occupied { index }),
            Err(_) => Err(Error::Occupied { index: self.index }),
        }
    }

    /// Stores `new` only if the entry at the index has identity `current`
    /// (`None`: empty or reserved). Returns `Ok(Ok(old))` when stored, and
    /// `Ok(Err((what is there, new given back)))` on a mismatch.
    ///
    /// # Errors
    /// As [`store`](Self::store).
    #[allow(clippy::type_complexity)]
    pub fn compare_exchange(
        &mut self,
        g: &mut XaGuard<'_, P>,
        current: Option<EntryKey>,
        new: Entry<P>,
    ) -> Result<std::result::Result<Option<Entry<P>>, (Option<Entry<P>>, Entry<P>)>> {
        match self.store_mode(g, new, Mode::Exchange(current))? {
            Ok(old) => Ok(Ok(old)),
            Err((Outcome::Mismatch { current }, Some(back))) => {
                Ok(Err((self.xa.tree.clone_word(current, &g.g), back)))
            }
            Err(_) => Err(Error::Occupied { index: self.index }),
        }
    }

    /// Erases the entry covering the cursor's index (or the reservation).
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn erase(&mut self, g: &mut XaGuard<'_, P>) -> Result<Option<Entry<P>>> {
        self.check(g)?;
        let XaGuard { st, g: pin, .. } = g;
        let old = self.xa.tree.erase(st, pin, &mut self.path, self.index);
        Ok(self.xa.tree.clone_word(old, pin))
    }

    /// Sets `mark` on the entry covering the index; false if there is none.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn set_mark(&mut self, g: &mut XaGuard<'_, P>, mark: Mark) -> Result<bool> {
        self.check(g)?;
        Ok(self
            .xa
            .tree
            .mark(&g.st, &mut self.path, self.index, mark.index(), true))
    }

    /// Clears `mark` on the entry covering the index; false if there is none.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn clear_mark(&mut self, g: &mut XaGuard<'_, P>, mark: Mark) -> Result<bool> {
        self.check(g)?;
        Ok(self
            .xa
            .tree
            .mark(&g.st, &mut self.path, self.index, mark.index(), false))
    }

    /// Clears every mark of the entry covering the index (the kernel's
    /// `xas_init_marks`, used when a shadow replaces a folio).
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn clear_marks(&mut self, g: &mut XaGuard<'_, P>) -> Result<bool> {
        let mut present = false;
        for m in Mark::all() {
            present = self.clear_mark(g, m)?;
        }
        Ok(present)
    }

    /// Does the entry covering the index carry `mark`?
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn get_mark(&mut self, g: &XaGuard<'_, P>, mark: Mark) -> Result<bool> {
        self.check(g)?;
        let m = mark.index();
        Ok(self
            .xa
            .tree
            .scan(
                &mut self.path,
                self.index,
                self.index,
                Filter::Marked(m),
                &g.g,
            )
            .is_some())
    }

    /// Splits the entry covering the index into entries of `new_order` (see
    /// [`XArray::split`]) using the pool's nodes.
    ///
    /// # Errors
    /// [`Error::NeedNodes`] when the pool is short (nothing changed), and as
    /// [`XArray::split`].
    pub fn split(&mut self, g: &mut XaGuard<'_, P>, new_order: u32) -> Result<()> {
        self.check(g)?;
        let XaGuard { st, g: pin, .. } = g;
        self.xa.tree.split(
            st,
            pin,
            &mut self.path,
            &mut self.pool,
            self.index,
            new_order,
        )
    }

    /// Moves to the next index and loads it. Returns `None` (without moving)
    /// at `u64::MAX`. Steps one index at a time, so inside a multi-order
    /// entry it returns that entry again; use [`find`](Self::find) to go
    /// entry by entry.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn next<'g>(&mut self, g: &'g XaGuard<'_, P>) -> Result<Option<EntryRef<'g, P::Target>>> {
        self.check(g)?;
        match self.index.checked_add(1) {
            Some(i) => {
                self.set_index(i);
                self.load(g)
            }
            None => Ok(None),
        }
    }

    fn find_filter<'g>(
        &mut self,
        g: &'g XaGuard<'_, P>,
        max: u64,
        filter: Filter,
    ) -> Result<Option<(u64, EntryRef<'g, P::Target>)>> {
        self.check(g)?;
        let start = match self.after {
            Some(Some(next)) => next,
            Some(None) => return Ok(None),
            None => self.index,
        };
        match self.xa.tree.scan(&mut self.path, start, max, filter, &g.g) {
            Some(f) => {
                self.index = f.index;
                self.after = Some(f.next());
                Ok(g.xa.tree.ref_word(f.word, &g.g).map(|e| (f.index, e)))
            }
            None => Ok(None),
        }
    }

    /// Finds the next entry up to `max` and moves the cursor to it. The first
    /// call after [`set_index`](Self::set_index) (or [`new`](Self::new))
    /// returns the entry at or after the index; each later call returns the
    /// entry after the previous one. Stores through the cursor then act on
    /// the found index.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn find<'g>(
        &mut self,
        g: &'g XaGuard<'_, P>,
        max: u64,
    ) -> Result<Option<(u64, EntryRef<'g, P::Target>)>> {
        self.find_filter(g, max, Filter::Present)
    }

    /// Like [`find`](Self::find), for entries carrying `mark`.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn find_marked<'g>(
        &mut self,
        g: &'g XaGuard<'_, P>,
        max: u64,
        mark: Mark,
    ) -> Result<Option<(u64, EntryRef<'g, P::Target>)>> {
        self.find_filter(g, max, Filter::Marked(mark.index()))
    }

    /// The first index at or after the cursor's that holds nothing, up to
    /// `max`; moves the cursor there.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn find_empty(&mut self, g: &XaGuard<'_, P>, max: u64) -> Result<Option<u64>> {
        self.check(g)?;
        let f = self
            .xa
            .tree
            .scan(&mut self.path, self.index, max, Filter::Empty, &g.g);
        Ok(f.map(|f| {
            self.set_index(f.index);
            f.index
        }))
    }

    /// The identity of what is at the index, for building a
    /// compare-exchange: `None` for empty or reserved.
    ///
    /// # Errors
    /// [`Error::WrongArray`].
    pub fn key(&mut self, g: &XaGuard<'_, P>) -> Result<Option<EntryKey>> {
        self.check(g)?;
        let w = self.xa.tree.current(&mut self.path, self.index);
        Ok(if w == ZERO || !is_entry(w) {
            None
        } else {
            word_key(w)
        })
    }
}
