//! The tree itself: nodes, the lockless walk, the scan behind every search,
//! and the writer's operations. This is the crate's unsafe core; the public
//! types in `xarray.rs` and `cursor.rs` are safe wrappers over it. One
//! mechanism per file: `node` (layout, allocation, the pool), `walk` (the
//! lockless walk and the cursor's path), `scan` (searches), `count` (slot
//! counts and the value-only list), `store`, `erase`, `marks` and `split`.
//!
//! ```text
//!  head ──> node shift 12 ─┬─ slot 0 ──> node shift 6 ─┬─ slot 0 ──> node shift 0: 64 slots
//!                          │                           └─ slot 5 ──> ...
//!                          └─ slots 4..=7: one order-14 entry (14 = shift 12 + log2 4):
//!                             canonical word in slot 4, sibling copies in 5, 6, 7
//! ```
//!
//! Invariants (kept under the lock, relied on by readers):
//! - A node is fully initialised before the word that points to it is
//!   published with `Release`; readers load slots with `Acquire`.
//! - Every slot goes from one valid content to another in one store: a
//!   reader of one index sees the old or the new entry, never a gap.
//! - A node or item leaves the tree before it is retired, and is retired
//!   through the epoch, so a pinned reader can still dereference it.
//! - A node that has left the tree is never written again, so a reader on a
//!   detached node sees the state it had when it was detached: a value the
//!   index really held during the reader's call.
//! - A writer changing several slots of a node (or slots and their mark
//!   bits) at once does it inside the node's sequence count; a reader that
//!   needs an entry's span or marks takes a [`Snapshot`](scan::Snapshot)
//!   between two even reads of it, and reads the slot again after the
//!   marks (a store and a later mark of one slot are single-slot updates,
//!   outside the count).
//! - Outside such a section, mark bit `i` of a node is set iff slot `i`
//!   holds a canonical entry with that mark, or a node with any bit of that
//!   mark set; empty slots, reservations and sibling copies carry none.
//! - `count` counts non-empty slots (siblings and reservations included),
//!   `nr_values` the slots holding value entries or their siblings. Both
//!   change only through [`Tree::set_counts`], which also keeps
//!   `Tree::value_nodes` equal to the number of nodes in the tree that hold
//!   only value entries (`count > 0 && count == nr_values`); a node leaving
//!   the tree is counted out in [`Tree::retire_node`].
//! - The same two places keep the nodes that hold only value entries on a
//!   list, in the order they came to (the kernel's `workingset_update_node`
//!   putting shadow nodes on a `list_lru`): [`Tree::shrink_oldest_value_node`]
//!   takes the oldest without walking the tree.
#![allow(unsafe_code)]

mod count;
mod erase;
mod marks;
mod node;
mod scan;
mod split;
mod store;
mod walk;

use std::marker::PhantomData;

use crate::entry::{
    is_entry, is_node, is_sibling, node_addr, word_clone, word_drop, word_ref, Entry, EntryRef,
    Item,
};
use crate::sync::{AtomicUsize, Guard, Ordering};
use node::{free_node, node, Node};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

pub(crate) use node::Pool;
pub use node::NODE_SIZE;
pub(crate) use scan::Filter;
pub(crate) use store::{Mode, Outcome};
pub(crate) use walk::Path;

/// log2 of the slots in a node.
pub(crate) const SHIFT: u32 = 6;
/// Slots in a node.
pub(crate) const SLOTS: usize = 1 << SHIFT;
/// The tallest tree: shifts 0, 6, ..., 60.
pub(crate) const MAX_HEIGHT: usize = 11;
/// Marks per entry.
pub const NR_MARKS: usize = 3;
/// The largest order an entry can have: it covers `2^63` indices.
pub const MAX_ORDER: u32 = 63;
/// The most nodes one split may build (about 9 MiB); split in steps beyond.
pub const MAX_SPLIT_NODES: usize = 1 << 14;

const ACQ: Ordering = Ordering::Acquire;
const REL: Ordering = Ordering::Release;
const RLX: Ordering = Ordering::Relaxed;

/// Writer-side state, behind the array's lock.
#[derive(Default)]
pub(crate) struct State {
    /// Bumped whenever a node leaves the tree, and at every lock acquisition:
    /// a cursor path recorded under another generation is walked again.
    pub(crate) gen: u64,
    /// Canonical entries present (reservations excluded).
    pub(crate) len: u64,
    /// How many of those are value entries.
    pub(crate) values: u64,
    /// Reserved slots.
    pub(crate) reserved: u64,
}

/// The tree: a head word and the node accounting. Readers use it through a
/// pinned [`Guard`]; writers through the array's lock, passing its [`State`].
pub(crate) struct Tree<P: Item> {
    head: AtomicUsize,
    nodes: AtomicUsize,
    /// Nodes in the tree that hold only value entries; see [`Tree::set_counts`].
    value_nodes: AtomicUsize,
    /// Those nodes as a list, oldest (first to hold only values) at
    /// `[OLDER]`'s end: the addresses of the list's ends, 0 when empty.
    /// Writers only, under the lock.
    value_list: [StdAtomicUsize; 2],
    _items: PhantomData<P>,
}

impl<P: Item> Tree<P> {
    pub(crate) fn new() -> Self {
        Tree {
            head: AtomicUsize::new(0),
            nodes: AtomicUsize::new(0),
            value_nodes: AtomicUsize::new(0),
            value_list: [StdAtomicUsize::new(0), StdAtomicUsize::new(0)],
            _items: PhantomData,
        }
    }

    /// Nodes in the tree.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.load(RLX)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(ACQ) == 0
    }

    /// Is any entry marked with `m`? O(1): the root's summary bits.
    pub(crate) fn any_marked(&self, m: usize, _g: &Guard) -> bool {
        let w = self.head.load(ACQ);
        // SAFETY: node word from the head while pinned.
        w != 0 && unsafe { node(w) }.marks[m].load(ACQ) != 0
    }

    /// An owned copy of the entry in canonical word `w`.
    ///
    /// `w` must have been read from this tree while `g` was pinned (or under
    /// the lock, with `g` pinned before anything was retired); the borrow of
    /// `g` keeps that pin alive for the duration of the clone.
    pub(crate) fn clone_word(&self, w: usize, _g: &Guard) -> Option<Entry<P>> {
        // SAFETY: per the contract above, the array's reference (or a retired
        // one whose drop waits for `g`) is alive.
        is_entry(w).then(|| unsafe { word_clone::<P>(w) })
    }

    /// A borrow of the entry in canonical word `w`, for as long as `g`.
    ///
    /// Same contract as [`Tree::clone_word`]; the tree must also outlive `'g`.
    pub(crate) fn ref_word<'g>(
        &'g self,
        w: usize,
        _g: &'g Guard,
    ) -> Option<EntryRef<'g, P::Target>> {
        // SAFETY: as for clone_word; `'g` is bounded by both the guard and
        // the tree, whose drop frees items without waiting for the epoch.
        is_entry(w).then(|| unsafe { word_ref::<P>(w) })
    }

    /// Takes back ownership of a word that was never published.
    pub(crate) fn unpublished(&self, w: usize) -> Option<Entry<P>> {
        if !is_entry(w) {
            return None;
        }
        // SAFETY: the caller made `w` with `Entry::into_word` and no reader
        // ever saw it: we own its reference. word_clone + word_drop is a move.
        let e = unsafe { word_clone::<P>(w) };
        // SAFETY: as above.
        unsafe { word_drop::<P>(w) };
        Some(e)
    }
}

impl<P: Item> Drop for Tree<P> {
    fn drop(&mut self) {
        fn free<P: Item>(w: usize) {
            // SAFETY: `&mut Tree` in drop: no reader or writer can reach the
            // tree any more; each node and owned item is released once.
            let n = unsafe { node(w) };
            for off in 0..SLOTS {
                let x = n.slots[off].load(RLX);
                if is_node(x) {
                    free::<P>(x);
                } else if is_entry(x) && !is_sibling(x) {
                    // SAFETY: as above; P is the array's item type.
                    unsafe { word_drop::<P>(x) };
                }
            }
            // SAFETY: as above.
            unsafe { free_node(node_addr(w) as *mut Node) };
        }
        let head = self.head.load(RLX);
        if head != 0 {
            free::<P>(head);
        }
    }
}
