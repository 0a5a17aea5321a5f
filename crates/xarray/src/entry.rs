//! Entries and how they are packed into one machine word.
//!
//! Every slot of the tree is one `usize`. The two low bits say what it holds:
//!
//! ```text
//!   ...............................00   item pointer (8-byte aligned), bit 2 = sibling copy
//!   ...............................x1   value entry: value << 2 | sibling << 1 | 1
//!   ...............................10   internal: node pointer (>= 64), or ZERO (reserved)
//!   0                                    empty
//! ```
//!
//! A multi-order entry occupies one canonical slot and `2^k - 1` sibling
//! slots after it. Unlike the kernel, whose sibling slots hold the offset of
//! the canonical slot, ours hold a *copy* of the canonical word with the
//! sibling bit set, so a lockless reader resolves any index with a single
//! load and can never combine a sibling with a canonical slot that changed in
//! between. Only the canonical copy owns the item's reference.
#![allow(unsafe_code)]

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

/// The largest integer a value entry can hold (62 bits).
pub const MAX_VALUE: u64 = (1 << 62) - 1;

/// Alignment every item pointer must have, so its low three bits are free.
pub(crate) const ITEM_ALIGN: usize = 8;

const VALUE_TAG: usize = 1;
const VALUE_SIBLING: usize = 2;
const ITEM_SIBLING: usize = 4;
const INTERNAL_TAG: usize = 2;
/// A reserved slot: reads as empty, but occupies the index.
pub(crate) const ZERO: usize = 6;

/// A pointer-like type whose values can be stored as items in an
/// [`XArray`](crate::XArray).
///
/// The array keeps the raw pointer in a slot and owns one "copy" of the item
/// (one strong count for an [`Arc`]). Items that leave the array are dropped
/// only after every lockless reader that could still see them has finished,
/// so a reader may hold `&Target` for as long as its guard lives.
///
/// # Safety
/// - `as_ptr` must return the pointer `into_raw` would.
/// - `into_raw` must return a pointer aligned to at least 8 bytes that stays
///   valid, and points to the same `Target`, until the value is rebuilt with
///   `from_raw` and dropped.
/// - `from_raw` must accept exactly the pointers `into_raw` returned, each once.
/// - Cloning and dropping must be safe from any thread (`Send + Sync`), and
///   the `Target` must be shareable between threads.
pub unsafe trait Item: Clone + Send + Sync + 'static {
    /// What the pointer points to; readers borrow it.
    type Target: Send + Sync + 'static;

    /// Gives up ownership and returns the raw pointer.
    fn into_raw(self) -> NonNull<Self::Target>;

    /// The pointer `into_raw` would return, without giving up ownership.
    fn as_ptr(&self) -> NonNull<Self::Target>;

    /// Rebuilds the owning value from a pointer returned by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` of this type and be rebuilt only once.
    unsafe fn from_raw(ptr: NonNull<Self::Target>) -> Self;
}

// SAFETY: Arc's data pointer is aligned to max(8, align_of::<T>()) because it
// sits after two usize counters in an allocation aligned to at least 8; it
// stays valid while the strong count taken by `into_raw` is held; `from_raw`
// reclaims exactly that count.
unsafe impl<T: Send + Sync + 'static> Item for Arc<T> {
    type Target = T;

    fn into_raw(self) -> NonNull<T> {
        let ptr = Arc::into_raw(self).cast_mut();
        // SAFETY: Arc::into_raw never returns null.
        unsafe { NonNull::new_unchecked(ptr) }
    }

    fn as_ptr(&self) -> NonNull<T> {
        // SAFETY: Arc::as_ptr never returns null.
        unsafe { NonNull::new_unchecked(Arc::as_ptr(self).cast_mut()) }
    }

    unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: the caller passes a pointer from `into_raw`, once.
        unsafe { Arc::from_raw(ptr.as_ptr()) }
    }
}

// SAFETY: a 'static reference is valid forever and dropping it does nothing;
// alignment is checked when the item is stored (see `Entry::into_word`).
unsafe impl<T: Sync + Send + 'static> Item for &'static T {
    type Target = T;

    fn into_raw(self) -> NonNull<T> {
        NonNull::from(self)
    }

    fn as_ptr(&self) -> NonNull<T> {
        NonNull::from(*self)
    }

    unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: the pointer came from a &'static T.
        unsafe { &*ptr.as_ptr() }
    }
}

/// An owned entry: what you store into, and get back from, an array.
#[derive(Clone, PartialEq, Eq)]
pub enum Entry<P> {
    /// A pointer-like item (the page cache stores folios here).
    Item(P),
    /// A value entry: an integer in `0..=MAX_VALUE` (the page cache stores
    /// eviction shadows here). Values and items never collide.
    Value(u64),
}

/// A borrowed entry, valid while the guard it was loaded under lives.
#[derive(PartialEq, Eq)]
pub enum EntryRef<'g, T> {
    /// A borrowed item.
    Item(&'g T),
    /// A value entry.
    Value(u64),
}

impl<T> Clone for EntryRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for EntryRef<'_, T> {}

/// The identity of an entry, for [`compare_exchange`](crate::XArray::compare_exchange):
/// an item's address or a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKey {
    /// An item, by address.
    Item(usize),
    /// A value entry.
    Value(u64),
}

impl<P: Item> Entry<P> {
    /// Returns true for a value entry.
    pub fn is_value(&self) -> bool {
        matches!(self, Entry::Value(_))
    }

    /// The value, if this is a value entry.
    pub fn value(&self) -> Option<u64> {
        match self {
            Entry::Value(v) => Some(*v),
            Entry::Item(_) => None,
        }
    }

    /// The item, if this is an item.
    pub fn item(&self) -> Option<&P> {
        match self {
            Entry::Item(p) => Some(p),
            Entry::Value(_) => None,
        }
    }

    /// Consumes the entry and returns the item, if it is one.
    pub fn into_item(self) -> Option<P> {
        match self {
            Entry::Item(p) => Some(p),
            Entry::Value(_) => None,
        }
    }

    /// The entry's identity (an item's address or the value).
    pub fn key(&self) -> EntryKey {
        match self {
            Entry::Item(p) => EntryKey::Item(item_addr(p)),
            Entry::Value(v) => EntryKey::Value(*v),
        }
    }

    /// Packs the entry into a slot word, transferring ownership of an item to
    /// the word. Gives the entry back if it cannot be stored.
    pub(crate) fn into_word(self) -> Result<usize, (Self, BadEntry)> {
        match self {
            Entry::Value(v) if v > MAX_VALUE => Err((self, BadEntry::ValueTooLarge(v))),
            Entry::Value(v) => Ok(((v as usize) << 2) | VALUE_TAG),
            Entry::Item(p) => {
                let addr = item_addr(&p);
                if addr % ITEM_ALIGN != 0 {
                    return Err((Entry::Item(p), BadEntry::Misaligned(addr)));
                }
                Ok(p.into_raw().as_ptr() as usize)
            }
        }
    }
}

impl<'g, T> EntryRef<'g, T> {
    /// Returns true for a value entry.
    pub fn is_value(&self) -> bool {
        matches!(self, EntryRef::Value(_))
    }

    /// The value, if this is a value entry.
    pub fn value(&self) -> Option<u64> {
        match self {
            EntryRef::Value(v) => Some(*v),
            EntryRef::Item(_) => None,
        }
    }

    /// The borrowed item, if this is an item.
    pub fn item(&self) -> Option<&'g T> {
        match self {
            EntryRef::Item(t) => Some(t),
            EntryRef::Value(_) => None,
        }
    }

    /// The entry's identity (an item's address or the value).
    pub fn key(&self) -> EntryKey {
        match self {
            EntryRef::Item(t) => EntryKey::Item(*t as *const T as usize),
            EntryRef::Value(v) => EntryKey::Value(*v),
        }
    }
}

impl<P: fmt::Debug> fmt::Debug for Entry<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Item(p) => f.debug_tuple("Item").field(p).finish(),
            Entry::Value(v) => f.debug_tuple("Value").field(v).finish(),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for EntryRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryRef::Item(t) => f.debug_tuple("Item").field(t).finish(),
            EntryRef::Value(v) => f.debug_tuple("Value").field(v).finish(),
        }
    }
}

/// Why an entry could not be packed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BadEntry {
    ValueTooLarge(u64),
    Misaligned(usize),
}

/// The address an item points to, without giving up ownership.
fn item_addr<P: Item>(p: &P) -> usize {
    p.as_ptr().as_ptr() as usize
}

// ---- word classification (safe, pure bit tests) ----

#[inline]
pub(crate) fn is_value(w: usize) -> bool {
    w & VALUE_TAG != 0
}

#[inline]
pub(crate) fn is_internal(w: usize) -> bool {
    w & 3 == INTERNAL_TAG
}

#[inline]
pub(crate) fn is_node(w: usize) -> bool {
    is_internal(w) && w >= 64
}

#[inline]
pub(crate) fn is_item(w: usize) -> bool {
    w != 0 && w & 3 == 0
}

/// A slot that holds (a copy of) an entry: item or value, canonical or sibling.
#[inline]
pub(crate) fn is_entry(w: usize) -> bool {
    w != 0 && !is_internal(w)
}

#[inline]
pub(crate) fn is_sibling(w: usize) -> bool {
    if is_value(w) {
        w & VALUE_SIBLING != 0
    } else {
        is_item(w) && w & ITEM_SIBLING != 0
    }
}

/// The canonical form of an entry word (sibling bit cleared).
#[inline]
pub(crate) fn canonical(w: usize) -> usize {
    if is_value(w) {
        w & !VALUE_SIBLING
    } else if is_item(w) {
        w & !ITEM_SIBLING
    } else {
        w
    }
}

/// The sibling copy of a canonical entry word.
#[inline]
pub(crate) fn sibling_of(w: usize) -> usize {
    if is_value(w) {
        w | VALUE_SIBLING
    } else {
        w | ITEM_SIBLING
    }
}

#[inline]
pub(crate) fn word_value(w: usize) -> u64 {
    (w >> 2) as u64
}

#[inline]
pub(crate) fn node_word(ptr: usize) -> usize {
    ptr | INTERNAL_TAG
}

#[inline]
pub(crate) fn node_addr(w: usize) -> usize {
    w & !3
}

/// Identity of a canonical entry word, matching [`Entry::key`].
pub(crate) fn word_key(w: usize) -> Option<EntryKey> {
    if is_value(w) {
        Some(EntryKey::Value(word_value(w)))
    } else if is_item(w) {
        Some(EntryKey::Item(canonical(w)))
    } else {
        None
    }
}

/// Borrows the entry held in a canonical word.
///
/// # Safety
/// `w` must be an entry word read from the array while the item is kept
/// alive for `'g` (an epoch guard or the lock that outlives `'g`).
pub(crate) unsafe fn word_ref<'g, P: Item>(w: usize) -> EntryRef<'g, P::Target> {
    if is_value(w) {
        EntryRef::Value(word_value(w))
    } else {
        let ptr = canonical(w) as *const P::Target;
        // SAFETY: the caller guarantees the item is alive for 'g.
        EntryRef::Item(unsafe { &*ptr })
    }
}

/// Makes an owned entry (a new reference) from a canonical word.
///
/// # Safety
/// Same as [`word_ref`]: the array's own reference must be alive now.
pub(crate) unsafe fn word_clone<P: Item>(w: usize) -> Entry<P> {
    if is_value(w) {
        Entry::Value(word_value(w))
    } else {
        let ptr = canonical(w) as *mut P::Target;
        // SAFETY: the pointer came from into_raw and the array's reference is
        // alive; ManuallyDrop keeps that reference, and clone makes a new one.
        let owned = ManuallyDrop::new(unsafe { P::from_raw(NonNull::new_unchecked(ptr)) });
        Entry::Item((*owned).clone())
    }
}

/// Releases the array's reference held by a canonical word.
///
/// # Safety
/// `w` must be a canonical word whose reference the array owned, removed from
/// the tree, and no reader may still be using it (call it from an epoch
/// deferral or when nobody else can reach the array).
pub(crate) unsafe fn word_drop<P: Item>(w: usize) {
    if is_item(w) {
        let ptr = canonical(w) as *mut P::Target;
        // SAFETY: see the function's contract.
        drop(unsafe { P::from_raw(NonNull::new_unchecked(ptr)) });
    }
}

/// Makes one more owning copy of an item word (for the pieces of a split).
///
/// # Safety
/// The array's reference held by `w` must be alive.
pub(crate) unsafe fn word_dup<P: Item>(w: usize) -> usize {
    if is_item(w) {
        let ptr = canonical(w) as *mut P::Target;
        // SAFETY: the pointer came from into_raw and the array's reference is
        // alive; ManuallyDrop keeps that reference, and the clone is a new one
        // that the returned word owns.
        let owned = ManuallyDrop::new(unsafe { P::from_raw(NonNull::new_unchecked(ptr)) });
        (*owned).clone().into_raw().as_ptr() as usize
    } else {
        canonical(w)
    }
}
