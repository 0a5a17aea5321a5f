//! The tree itself: nodes, the lockless walk, the scan behind every search,
//! and the writer's operations. This is the crate's unsafe core; the public
//! types in `xarray.rs` and `cursor.rs` are safe wrappers over it.
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
//!   needs an entry's span or marks takes a [`Snapshot`] between two even
//!   reads of it, and reads the slot again after the marks (a store and a
//!   later mark of one slot are single-slot updates, outside the count).
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

use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::entry::{
    canonical, is_entry, is_node, is_sibling, is_value, node_addr, node_word, sibling_of,
    word_clone, word_drop, word_dup, word_key, word_ref, Entry, EntryKey, EntryRef, Item, ZERO,
};
use crate::error::{Error, Result};
use crate::sync::{fence, spin_hint, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Guard, Ordering};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

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

/// A node of 64 slots. Aligned to 64 bytes so node words have free low bits
/// and a node starts on a cache line.
#[repr(C, align(64))]
pub(crate) struct Node {
    slots: [AtomicUsize; SLOTS],
    marks: [AtomicU64; NR_MARKS],
    /// Address of the parent node, 0 for the root. Writers only.
    parent: AtomicUsize,
    /// Level: the low index bit this node's offsets start at. Set before publication.
    shift: AtomicU8,
    /// Offset in the parent. Writers only.
    offset: AtomicU8,
    count: AtomicU8,
    nr_values: AtomicU8,
    /// Sequence count: odd while a writer updates several slots of this
    /// node at once (see [`Snapshot`]).
    seq: AtomicU32,
    /// The value-only list's neighbours (older, newer), 0 at either end or
    /// off the list. Writers only, under the lock: plain `std` atomics (no
    /// reader touches them, so loom has no interleaving to explore here).
    lru: [StdAtomicUsize; 2],
}

/// Bytes one node occupies.
pub const NODE_SIZE: usize = std::mem::size_of::<Node>();

/// A node with `count` non-empty slots of which `values` hold value entries
/// (or their siblings) holds only value entries.
#[inline]
fn value_only(count: u8, values: u8) -> bool {
    count != 0 && count == values
}

impl Node {
    #[cfg(loom)]
    fn new() -> Self {
        Node {
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            parent: AtomicUsize::new(0),
            shift: AtomicU8::new(0),
            offset: AtomicU8::new(0),
            count: AtomicU8::new(0),
            nr_values: AtomicU8::new(0),
            seq: AtomicU32::new(0),
            lru: [StdAtomicUsize::new(0), StdAtomicUsize::new(0)],
        }
    }

    #[inline]
    fn shift(&self) -> u32 {
        u32::from(self.shift.load(RLX))
    }

    #[inline]
    fn slot(&self, off: usize) -> usize {
        self.slots[off].load(ACQ)
    }

    #[inline]
    fn parent(&self) -> Option<&Node> {
        let p = self.parent.load(RLX);
        // SAFETY: parent addresses are only followed by writers under the
        // lock, and a node's parent is attached (hence alive) while the node is.
        (p != 0).then(|| unsafe { &*(p as *const Node) })
    }

    fn count(&self) -> usize {
        usize::from(self.count.load(RLX))
    }

    /// Does the node hold only value entries (the kernel's shadow nodes:
    /// `count == nr_values`, not empty)? Writers only.
    #[inline]
    fn value_only(&self) -> bool {
        value_only(self.count.load(RLX), self.nr_values.load(RLX))
    }

    #[inline]
    fn marked(&self, m: usize, off: usize) -> bool {
        self.marks[m].load(ACQ) & (1 << off) != 0
    }

    /// Writer: enters a multi-slot update (the count goes odd).
    fn write_begin(&self) {
        let s = self.seq.load(RLX);
        self.seq.store(s.wrapping_add(1), RLX);
        fence(REL);
    }

    /// Writer: leaves a multi-slot update (the count goes even again).
    fn write_end(&self) {
        let s = self.seq.load(RLX);
        self.seq.store(s.wrapping_add(1), REL);
    }

    /// Reader: an even sequence count to validate against.
    fn read_begin(&self) -> u32 {
        loop {
            let s = self.seq.load(ACQ);
            if s & 1 == 0 {
                return s;
            }
            spin_hint();
        }
    }

    /// Reader: did no writer touch the node since `read_begin` returned `s`?
    fn read_valid(&self, s: u32) -> bool {
        fence(ACQ);
        self.seq.load(RLX) == s
    }

    fn addr(&self) -> usize {
        self as *const Node as usize
    }
}

/// Borrows the node a node word points to.
///
/// # Safety
/// `w` must be a node word read from the tree while pinned (or under the
/// lock), and the borrow must not outlive that pin.
#[inline]
unsafe fn node<'g>(w: usize) -> &'g Node {
    // SAFETY: forwarded to the caller.
    unsafe { &*(node_addr(w) as *const Node) }
}

/// Allocates a zeroed node outside the lock: one this thread freed
/// earlier if it kept one ([`spare`]), else a new one.
fn alloc_node() -> Result<NonNull<Node>> {
    #[cfg(not(any(loom, miri)))]
    if let Some(p) = spare::take() {
        return Ok(p);
    }
    #[cfg(not(loom))]
    {
        let layout = std::alloc::Layout::new::<Node>();
        // SAFETY: Node has a non-zero size. All-zero bytes are a valid Node:
        // every field is an atomic integer.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Node>();
        NonNull::new(p).ok_or(Error::AllocFailed)
    }
    #[cfg(loom)]
    {
        Ok(NonNull::from(Box::leak(Box::new(Node::new()))))
    }
}

/// Frees a node that no reader can reach: kept for this thread's next
/// allocation while it keeps fewer than [`spare::KEEP`], else given back.
///
/// # Safety
/// `p` came from `alloc_node`, is not in any tree (or every reader that saw
/// it has unpinned), and is freed once.
unsafe fn free_node(p: *mut Node) {
    #[cfg(not(any(loom, miri)))]
    let Err(p) = spare::keep(p) else {
        return;
    };
    // SAFETY: forwarded to the caller.
    unsafe { dealloc_node(p) };
}

/// Gives a node's memory back to the allocator.
///
/// # Safety
/// As for [`free_node`].
unsafe fn dealloc_node(p: *mut Node) {
    // SAFETY: alloc_zeroed with Layout::new::<Node>() is the allocation Box
    // uses for a Node, so Box may free it; the caller guarantees exclusivity.
    drop(unsafe { Box::from_raw(p) });
}

/// Freed nodes a thread keeps for its next allocations (the kernel keeps
/// `radix_tree_node`s in a slab cache). An aligned allocation misses
/// glibc's per-thread cache and takes its slow path, and a reader at random
/// over a file many times its cache allocates and frees about one leaf per
/// miss; a kept node costs a 576-byte clear instead. At most [`KEEP`] per
/// thread (36 KiB), given back when the thread exits. Not under loom or
/// Miri, which check every node's allocation and free.
#[cfg(not(any(loom, miri)))]
mod spare {
    use std::cell::RefCell;
    use std::ptr::NonNull;

    use super::Node;

    /// Nodes kept per thread at most.
    pub(super) const KEEP: usize = 64;

    struct Spare(Vec<NonNull<Node>>);

    impl Drop for Spare {
        fn drop(&mut self) {
            for p in self.0.drain(..) {
                // SAFETY: a kept node was freed (no reader can reach it)
                // and is owned by this list alone.
                unsafe { super::dealloc_node(p.as_ptr()) };
            }
        }
    }

    thread_local! {
        static SPARE: RefCell<Spare> = const { RefCell::new(Spare(Vec::new())) };
    }

    /// A kept node, zeroed, if this thread has one.
    pub(super) fn take() -> Option<NonNull<Node>> {
        let p = SPARE.try_with(|s| s.borrow_mut().0.pop()).ok().flatten()?;
        // SAFETY: the node is owned by nobody else (it left the list), and
        // all-zero bytes are a valid Node: every field is an atomic integer.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, 1) };
        Some(p)
    }

    /// Keeps the freed node `p` if this thread has room (and is not
    /// exiting); hands it back otherwise.
    pub(super) fn keep(p: *mut Node) -> Result<(), *mut Node> {
        let Some(nn) = NonNull::new(p) else {
            return Err(p);
        };
        let kept = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.0.len() >= KEEP {
                return false;
            }
            if s.0.capacity() == 0 {
                s.0.reserve_exact(KEEP);
            }
            s.0.push(nn);
            true
        });
        if kept == Ok(true) {
            Ok(())
        } else {
            Err(p)
        }
    }
}

/// Nodes allocated ahead of a locked operation (the kernel's `xas_nomem`
/// preallocation). Unused nodes are freed on drop.
#[derive(Default)]
pub(crate) struct Pool {
    nodes: Vec<NonNull<Node>>,
}

// SAFETY: the pool owns its nodes exclusively; nobody else refers to them.
unsafe impl Send for Pool {}
// SAFETY: a shared Pool gives no access to its nodes.
unsafe impl Sync for Pool {}

impl Pool {
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Tops the pool up to `n` nodes. Never called under the lock by this crate.
    pub(crate) fn reserve(&mut self, n: usize) -> Result<()> {
        self.nodes
            .try_reserve(n.saturating_sub(self.nodes.len()))
            .map_err(|_| Error::AllocFailed)?;
        while self.nodes.len() < n {
            self.nodes.push(alloc_node()?);
        }
        Ok(())
    }

    fn take(&mut self, shift: u32, parent: usize, offset: usize) -> &'static Node {
        let p = self.nodes.pop().expect("node pool checked before use");
        // The tree keeps nodes as addresses (`Node::addr`, taken from the
        // shared reference below) and frees them through pointers made from
        // those addresses (`retire_node`, `Tree::drop`). A pointer derived
        // from a shared reference may not free memory, so expose the
        // allocation's own pointer here: the address then carries its
        // provenance back (Miri found the free through the reference; see
        // tests/it/regress_node_free_provenance.rs).
        let _ = p.as_ptr().expose_provenance();
        // SAFETY: the node is owned by the pool and unpublished; from here it
        // belongs to the tree, which keeps it alive until it is retired.
        let n: &'static Node = unsafe { p.as_ref() };
        n.shift.store(shift as u8, RLX);
        n.parent.store(parent, RLX);
        n.offset.store(offset as u8, RLX);
        n
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for p in self.nodes.drain(..) {
            // SAFETY: pool nodes were never published.
            unsafe { free_node(p.as_ptr()) };
        }
    }
}

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

/// A position: the nodes from the root down to the deepest one reached for
/// `index`. Every node in it covers `index`.
#[derive(Clone, Copy)]
pub(crate) struct Path {
    nodes: [usize; MAX_HEIGHT],
    len: usize,
    index: u64,
    gen: u64,
}

impl Default for Path {
    fn default() -> Self {
        Path {
            nodes: [0; MAX_HEIGHT],
            len: 0,
            index: 0,
            gen: u64::MAX,
        }
    }
}

impl Path {
    pub(crate) fn reset(&mut self) {
        self.len = 0;
    }

    fn top(&self) -> usize {
        self.nodes[self.len - 1]
    }

    fn push(&mut self, n: &Node) {
        self.nodes[self.len] = n.addr();
        self.len += 1;
    }
}

/// Does a node of `shift` that covers `a` also cover `b`?
#[inline]
fn covers(shift: u32, a: u64, b: u64) -> bool {
    shift + SHIFT >= 64 || (a >> (shift + SHIFT)) == (b >> (shift + SHIFT))
}

/// Slots a node of `shift` can use: all 64, except at shift 60 where
/// `16 << 60` already passes `u64::MAX`.
#[inline]
fn slot_limit(shift: u32) -> usize {
    if shift + SHIFT > 64 {
        1 << (64 - shift)
    } else {
        SLOTS
    }
}

/// First index of slot `off` in the node of `shift` that covers `index`.
#[inline]
fn slot_base(index: u64, shift: u32, off: usize) -> u64 {
    let high = if shift + SHIFT >= 64 {
        0
    } else {
        index & !((1u64 << (shift + SHIFT)) - 1)
    };
    high | ((off as u64) << shift)
}

/// The index after the node of `shift` that covers `index`, if any.
#[inline]
fn after_node(index: u64, shift: u32) -> Option<u64> {
    if shift + SHIFT >= 64 {
        return None;
    }
    (index | ((1u64 << (shift + SHIFT)) - 1)).checked_add(1)
}

/// Smallest node shift whose node covers `index` from index 0.
fn shift_for(index: u64) -> u32 {
    let bits = 64 - index.leading_zeros();
    if bits <= SHIFT {
        0
    } else {
        (bits - SHIFT).div_ceil(SHIFT) * SHIFT
    }
}

/// The node level an entry of `order` lives at.
#[inline]
pub(crate) fn level_of(order: u32) -> u32 {
    order - order % SHIFT
}

/// What a search looks for.
#[derive(Clone, Copy)]
pub(crate) enum Filter {
    /// Entries (items and values), not reservations.
    Present,
    /// Entries with this mark.
    Marked(usize),
    /// Indices holding nothing (a reservation counts as something).
    Empty,
    /// Entries and reservations.
    Occupied,
}

/// An entry found by a search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    /// Where the search found it: the entry's first index, or the start of
    /// the search when that lay inside the entry.
    pub(crate) index: u64,
    /// The entry's first index.
    pub(crate) base: u64,
    pub(crate) order: u32,
    /// The canonical entry word (0 for an `Empty` search).
    pub(crate) word: usize,
}

impl Found {
    /// The answer at an index the tree does not reach: empty, so only an
    /// `Empty` search finds it.
    fn beyond_tree(index: u64, filter: Filter) -> Option<Found> {
        match filter {
            Filter::Empty => Some(Found {
                index,
                base: index,
                order: 0,
                word: 0,
            }),
            _ => None,
        }
    }

    /// The index after the entry, if any. Never at or before `index`, even
    /// when a lockless reader raced a writer and saw a torn span.
    pub(crate) fn next(&self) -> Option<u64> {
        if self.order >= 64 {
            return None;
        }
        let end = self.base.checked_add(1u64 << self.order)?;
        Some(end.max(self.index.checked_add(1)?))
    }
}

/// Canonical slot and slot count of the entry whose copy sits at `off`.
///
/// Every entry starts with its canonical slot, so a run of sibling slots
/// belongs to the canonical slot before it, whichever word they copy: a
/// lockless reader racing an in-place replacement (which rewrites the
/// copies one by one) still gets the right span. Exact under the lock; a
/// best effort for a reader racing a store of another shape.
fn entry_span(n: &Node, off: usize, w: usize) -> (usize, usize) {
    let mut c = off;
    if is_sibling(w) {
        while c > 0 {
            let x = n.slot(c - 1);
            if !is_sibling(x) {
                if is_entry(x) {
                    c -= 1;
                }
                break;
            }
            c -= 1;
        }
    }
    let mut end = off + 1;
    while end < SLOTS && is_sibling(n.slot(end)) {
        end += 1;
    }
    (c, end - c)
}

/// A consistent view of one entry: its word, span and marks, taken between
/// two even reads of the node's sequence count, so never a mix of two states
/// of a multi-slot update (replace, overwrite, erase, split).
struct Snapshot {
    word: usize,
    c: usize,
    slots: usize,
    marks: [bool; NR_MARKS],
}

impl Snapshot {
    /// Takes the snapshot of the entry whose copy is at `off`; `None` if the
    /// slot no longer holds an entry. Waits only while a writer is inside a
    /// multi-slot update of this node (a few dozen stores).
    fn take(n: &Node, off: usize, filter: Filter) -> Option<Snapshot> {
        loop {
            let s = n.read_begin();
            let w = n.slot(off);
            if !is_entry(w) {
                if n.read_valid(s) {
                    return None;
                }
                continue;
            }
            let (c, slots) = entry_span(n, off, w);
            let marks = match filter {
                Filter::Marked(_) => {
                    let marks = std::array::from_fn(|m| n.marked(m, c));
                    // A single-slot store and a mark change are two updates
                    // outside any sequence section: the marks just loaded
                    // may be those of an entry stored after `w` (replaced,
                    // then marked). The slot still holding `w` after the
                    // marks' (acquire) loads pairs them: the marks are
                    // `w`'s. (Value words can repeat; an equal word is an
                    // equal entry, as every caller compares entries.)
                    if n.slot(off) != w {
                        continue;
                    }
                    marks
                }
                _ => [false; NR_MARKS],
            };
            if n.read_valid(s) {
                return Some(Snapshot {
                    word: canonical(w),
                    c,
                    slots,
                    marks,
                });
            }
        }
    }

    fn hit(&self, filter: Filter) -> bool {
        match filter {
            Filter::Present | Filter::Occupied => true,
            Filter::Marked(m) => self.marks[m],
            Filter::Empty => false,
        }
    }

    fn found(&self, index: u64, base: u64, shift: u32) -> Found {
        Found {
            index,
            base,
            order: span_order(shift, self.slots),
            word: self.word,
        }
    }
}

/// Order of an entry spanning `slots` slots of a node at `shift`.
fn span_order(shift: u32, slots: usize) -> u32 {
    shift + slots.trailing_zeros()
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

/// The older end of the value-only list, and a node's link towards it.
const OLDER: usize = 0;
/// The newer end, and a node's link towards it.
const NEWER: usize = 1;

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

    /// Nodes in the tree that hold only value entries.
    pub(crate) fn value_node_count(&self) -> usize {
        self.value_nodes.load(RLX)
    }

    /// Counts the nodes that hold only value entries by walking the tree and
    /// classifying every slot, ignoring the nodes' own counters: the ground
    /// truth that `value_node_count` must equal. Also checks, in debug
    /// builds, that every node's `count` and `nr_values` match its slots.
    /// Writers only (the lock keeps the tree still).
    pub(crate) fn recount_value_nodes(&self, _st: &State) -> usize {
        fn walk(w: usize) -> usize {
            // SAFETY: a node word read from the tree under the lock, which
            // keeps every node of the tree alive and unchanged.
            let n = unsafe { node(w) };
            let (mut count, mut values, mut below) = (0u8, 0u8, 0);
            for off in 0..SLOTS {
                let x = n.slot(off);
                if x == 0 {
                    continue;
                }
                count += 1;
                values += u8::from(is_value(x));
                if is_node(x) {
                    below += walk(x);
                }
            }
            debug_assert_eq!(count, n.count.load(RLX), "a node's count");
            debug_assert_eq!(values, n.nr_values.load(RLX), "a node's nr_values");
            below + usize::from(value_only(count, values))
        }
        let head = self.head.load(RLX);
        let walked = if head == 0 { 0 } else { walk(head) };
        // The list holds exactly those nodes, linked both ways.
        let (mut listed, mut prev, mut w) = (0, 0, self.value_list[OLDER].load(RLX));
        while w != 0 {
            // SAFETY: locked; listed nodes are in the tree, alive.
            let n = unsafe { node(w) };
            assert!(n.value_only(), "a listed node holds only values");
            assert_eq!(n.lru[OLDER].load(RLX), prev, "a listed node's back link");
            listed += 1;
            prev = w;
            w = n.lru[NEWER].load(RLX);
        }
        assert_eq!(
            prev,
            self.value_list[NEWER].load(RLX),
            "the list's newer end"
        );
        assert_eq!(listed, walked, "the value-only list holds every such node");
        walked
    }

    /// Erases every entry of the oldest node on the value-only list (the
    /// first of them to come to hold only values), so that the node, and
    /// any ancestor it leaves empty, goes from the tree. Returns the entries
    /// erased, or `None` if no node holds only values. Locked.
    pub(crate) fn shrink_oldest_value_node(&self, st: &mut State, g: &Guard) -> Option<usize> {
        let w = self.value_list[OLDER].load(RLX);
        if w == 0 {
            return None;
        }
        // SAFETY: locked; listed nodes are in the tree, alive.
        let n = unsafe { node(w) };
        // The node's first index: its offset in each ancestor.
        let mut base = 0u64;
        let mut cur = n;
        while let Some(p) = cur.parent() {
            base |= u64::from(cur.offset.load(RLX)) << p.shift();
            cur = p;
        }
        let mut firsts = [0u64; SLOTS];
        let mut k = 0;
        for off in 0..SLOTS {
            let x = n.slot(off);
            if x != 0 && !is_sibling(x) {
                firsts[k] = base | ((off as u64) << n.shift());
                k += 1;
            }
        }
        let mut path = Path::default();
        for &index in &firsts[..k] {
            self.erase(st, g, &mut path, index);
        }
        Some(k)
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

    // ---------------------------------------------------------------------
    // Lockless reads.

    /// The slot word covering `index` (an entry copy, ZERO, or 0), with one
    /// load per level.
    #[inline]
    pub(crate) fn load(&self, index: u64, g: &Guard) -> usize {
        self.walk(index, g).map_or(0, |(_, _, _, w)| w)
    }

    /// [`load`](Self::load), and the first index of the entry the word
    /// belongs to, read from its slot's place in its node (the canonical
    /// slot before a run of sibling copies), never from the entry: for a
    /// reader that wants to compute with it before it touches the entry's
    /// own memory. `index` itself where the word is no entry. A reader
    /// racing a store of another shape may get a wrong start: a hint, to
    /// be checked against the entry.
    #[inline]
    pub(crate) fn load_with_start(&self, index: u64, g: &Guard) -> (usize, u64) {
        let (n, shift, off, w) = match self.walk(index, g) {
            Some(t) if is_entry(t.3) => t,
            other => return (other.map_or(0, |t| t.3), index),
        };
        // Sibling copies follow their canonical slot, in the same node
        // (usually the same cache line).
        let mut c = off;
        if is_sibling(w) {
            while c > 0 && is_sibling(n.slot(c - 1)) {
                c -= 1;
            }
            c = c.saturating_sub(1);
        }
        let node_base = if shift + SHIFT >= 64 {
            0
        } else {
            index & !((1u64 << (shift + SHIFT)) - 1)
        };
        (w, node_base | ((c as u64) << shift))
    }

    /// The lockless walk to `index`: the node holding its slot, that
    /// node's shift, the slot's offset and the word in it (not a node);
    /// `None` when the tree is empty or does not reach `index`. One load
    /// per level.
    #[inline]
    fn walk<'g>(&self, index: u64, _g: &'g Guard) -> Option<(&'g Node, u32, usize, usize)> {
        let w = self.head.load(ACQ);
        if w == 0 {
            return None;
        }
        // SAFETY: a node word loaded from the head while pinned.
        let root = unsafe { node(w) };
        let shift = root.shift();
        if shift + SHIFT < 64 && index >> (shift + SHIFT) != 0 {
            return None;
        }
        // A child's shift is its parent's minus SHIFT: computing it saves
        // touching the header cache line of every node on the way down.
        let (mut n, mut shift) = (root, shift);
        loop {
            let off = ((index >> shift) & 63) as usize;
            let w = n.slot(off);
            if !is_node(w) {
                return Some((n, shift, off, w));
            }
            // SAFETY: a node word loaded from a live (or retired but not yet
            // freed, since we are pinned) node.
            n = unsafe { node(w) };
            shift -= SHIFT;
        }
    }

    /// Order of the entry covering `index` (0 if none).
    pub(crate) fn order_at(&self, index: u64, g: &Guard) -> u32 {
        self.scan(&mut Path::default(), index, index, Filter::Present, g)
            .map_or(0, |f| f.order)
    }

    /// Walks `path` to the deepest node covering `index` whose shift is at
    /// least `stop`, reusing the part of the path that still covers `index`.
    /// Returns false when the tree is empty or does not reach `index`.
    fn position(&self, path: &mut Path, index: u64, stop: u32) -> bool {
        while path.len > 0 {
            // SAFETY: path nodes were reachable when pushed; pinned or locked.
            if unsafe { node(path.top()) }.shift() >= stop {
                break;
            }
            path.len -= 1;
        }
        if !self.reposition(path, index) {
            return false;
        }
        loop {
            // SAFETY: as above.
            let n = unsafe { node(path.top()) };
            if n.shift() <= stop {
                return true;
            }
            let w = n.slot(((index >> n.shift()) & 63) as usize);
            if !is_node(w) {
                return true;
            }
            // SAFETY: node word loaded from a reachable node.
            let child = unsafe { node(w) };
            if child.shift() < stop {
                return true;
            }
            path.push(child);
        }
    }

    /// Keeps the nodes of `path` that cover `index` (or the root when none
    /// do). Returns false when the tree is empty or does not reach `index`.
    fn reposition(&self, path: &mut Path, index: u64) -> bool {
        while path.len > 0 {
            // SAFETY: path nodes were reachable when pushed; the caller is
            // pinned or holds the lock with a matching generation.
            let n = unsafe { node(path.top()) };
            if covers(n.shift(), path.index, index) {
                break;
            }
            path.len -= 1;
        }
        path.index = index;
        if path.len > 0 {
            return true;
        }
        let w = self.head.load(ACQ);
        if w == 0 {
            return false;
        }
        // SAFETY: node word from the head, pinned or locked.
        let root = unsafe { node(w) };
        if !covers(root.shift(), 0, index) {
            return false;
        }
        path.push(root);
        true
    }

    /// Finds the first index in `start..=max` that matches `filter`, walking
    /// forward from `path`. Multi-order entries are reported once; one that
    /// contains `start` is reported at `start`.
    pub(crate) fn scan(
        &self,
        path: &mut Path,
        start: u64,
        max: u64,
        filter: Filter,
        _g: &Guard,
    ) -> Option<Found> {
        if start > max {
            return None;
        }
        let mut index = start;
        if !self.reposition(path, index) {
            // Empty tree, or `start` beyond what the root covers.
            return Found::beyond_tree(index, filter);
        }
        // Descend lazily: `reposition` stopped at the deepest cached node
        // covering `index`; the loop walks down.
        'node: loop {
            // SAFETY: pinned (or locked); path nodes were reachable when pushed.
            let n = unsafe { node(path.top()) };
            let shift = n.shift();
            let limit = slot_limit(shift);
            let mut off = ((index >> shift) & 63) as usize;
            // The slot containing `index` is always examined, never skipped by
            // a summary bitmap: it may hold an entry that began before `index`.
            if is_entry(n.slot(off)) {
                let Some(snap) = Snapshot::take(n, off, filter) else {
                    continue 'node;
                };
                let base = slot_base(index, shift, snap.c);
                if snap.hit(filter) {
                    return Some(snap.found(index.max(base), base, shift));
                }
                off = snap.c + snap.slots;
                if off < limit {
                    index = slot_base(index, shift, off);
                    if index > max {
                        return None;
                    }
                }
            }
            while off < limit {
                if let Filter::Marked(m) = filter {
                    let bits = n.marks[m].load(ACQ) & (!0u64 << off);
                    if bits == 0 {
                        break;
                    }
                    off = bits.trailing_zeros() as usize;
                }
                let base = slot_base(index, shift, off);
                let here = index.max(base);
                if here > max {
                    return None;
                }
                let w = n.slot(off);
                if is_node(w) {
                    let hit = match filter {
                        Filter::Marked(m) => n.marked(m, off),
                        _ => true,
                    };
                    if hit {
                        index = here;
                        // SAFETY: node word loaded while pinned or locked.
                        path.push(unsafe { node(w) });
                        path.index = index;
                        continue 'node;
                    }
                } else if is_entry(w) {
                    // A sibling here belongs to an entry whose canonical slot
                    // the scan has passed: only a marked search, led here by a
                    // bit that was set when it looked, resolves it (as the
                    // kernel's xas_find_marked does); a racing store put it there.
                    let resolve = !is_sibling(w) || matches!(filter, Filter::Marked(_));
                    if resolve {
                        let Some(snap) = Snapshot::take(n, off, filter) else {
                            continue;
                        };
                        if snap.hit(filter) {
                            let base = slot_base(index, shift, snap.c);
                            return Some(snap.found(index.max(base), base, shift));
                        }
                        off = off.max(snap.c + snap.slots - 1);
                    }
                } else if match filter {
                    Filter::Empty => w == 0,
                    Filter::Occupied => w == ZERO,
                    _ => false,
                } {
                    let word = if w == ZERO { ZERO } else { 0 };
                    return Some(Found {
                        index: here,
                        base: here,
                        order: 0,
                        word,
                    });
                }
                off += 1;
            }
            // Nothing left in this node: climb to the next one.
            let prev = index;
            index = after_node(index, shift)?;
            if index > max {
                return None;
            }
            path.len -= 1;
            while path.len > 0 {
                // SAFETY: as above.
                let p = unsafe { node(path.top()) };
                if covers(p.shift(), prev, index) {
                    break;
                }
                path.len -= 1;
            }
            path.index = index;
            if path.len == 0 && !self.reposition(path, index) {
                // Past what the root covers.
                return Found::beyond_tree(index, filter);
            }
        }
    }

    // ---------------------------------------------------------------------
    // Writers: every function below requires the array's lock, proven by
    // the `&mut State` that lives behind it, and a pinned guard to retire
    // what it removes.

    /// Forgets a cursor path recorded under another generation.
    pub(crate) fn revalidate(&self, st: &State, path: &mut Path) {
        if path.gen != st.gen {
            path.reset();
            path.gen = st.gen;
        }
    }

    /// Sets `n`'s slot counts, keeping `value_nodes` exact: the node's
    /// counts are only ever written here, and a node is counted in while
    /// its counts say it holds only values. Costs two compares when the
    /// answer does not change.
    fn set_counts(&self, n: &Node, count: usize, values: usize) {
        debug_assert!(count <= SLOTS && values <= count);
        let (count, values) = (count as u8, values as u8);
        let was = n.value_only();
        n.count.store(count, RLX);
        n.nr_values.store(values, RLX);
        let is = value_only(count, values);
        if is != was {
            if is {
                self.value_nodes.fetch_add(1, RLX);
                self.list_push(n);
            } else {
                self.value_nodes.fetch_sub(1, RLX);
                self.list_unlink(n);
            }
        }
    }

    /// Puts `n` at the newer end of the value-only list. Locked.
    fn list_push(&self, n: &Node) {
        let tail = self.value_list[NEWER].load(RLX);
        n.lru[OLDER].store(tail, RLX);
        n.lru[NEWER].store(0, RLX);
        if tail == 0 {
            self.value_list[OLDER].store(n.addr(), RLX);
        } else {
            // SAFETY: locked; a listed node is in the tree (it leaves the
            // list before it leaves the tree), so it is alive.
            unsafe { node(tail) }.lru[NEWER].store(n.addr(), RLX);
        }
        self.value_list[NEWER].store(n.addr(), RLX);
    }

    /// Takes `n`, which is on the value-only list, off it. Locked.
    fn list_unlink(&self, n: &Node) {
        let older = n.lru[OLDER].load(RLX);
        let newer = n.lru[NEWER].load(RLX);
        for (side, end, other) in [(NEWER, older, newer), (OLDER, newer, older)] {
            if end == 0 {
                self.value_list[1 - side].store(other, RLX);
            } else {
                // SAFETY: locked; listed nodes are in the tree, alive.
                unsafe { node(end) }.lru[side].store(other, RLX);
            }
        }
        n.lru[OLDER].store(0, RLX);
        n.lru[NEWER].store(0, RLX);
    }

    /// Adds `slots` to `n`'s non-empty slots and `values` to its value slots.
    fn add_count(&self, n: &Node, slots: isize, values: isize) {
        let c = n.count.load(RLX) as isize + slots;
        let v = n.nr_values.load(RLX) as isize + values;
        debug_assert!((0..=64).contains(&c) && (0..=64).contains(&v));
        self.set_counts(n, c as usize, v as usize);
    }

    /// Counts a node out of the tree and frees it once readers are done.
    /// Its counts must still describe its slots (a detached subtree is
    /// retired as it was; an emptied node has count 0).
    fn retire_node(&self, st: &mut State, g: &Guard, n: &Node) {
        self.nodes.fetch_sub(1, RLX);
        if n.value_only() {
            self.value_nodes.fetch_sub(1, RLX);
            self.list_unlink(n);
        }
        st.gen = st.gen.wrapping_add(1);
        let p = n.addr() as *mut Node;
        // SAFETY: the node has left the tree; readers pinned now may still
        // read it, and the deferral runs after they unpin. Nothing else
        // frees it.
        unsafe { g.defer(move || free_node(p)) };
    }

    fn retire_word(g: &Guard, w: usize) {
        if is_entry(w) && !is_value(w) && std::mem::needs_drop::<P>() {
            let w = canonical(w);
            // SAFETY: the entry has left the tree and the array owned this
            // reference; it is dropped once readers pinned now are done.
            unsafe { g.defer(move || word_drop::<P>(w)) };
        }
    }

    /// Retires a detached subtree and everything in it; counts what it held.
    fn retire_subtree(&self, st: &mut State, g: &Guard, n: &Node) {
        for off in 0..SLOTS {
            let w = n.slot(off);
            if is_node(w) {
                // SAFETY: a child of a node we are tearing down, under the lock.
                self.retire_subtree(st, g, unsafe { node(w) });
            } else if w == ZERO {
                st.reserved -= 1;
            } else if is_entry(w) && !is_sibling(w) {
                st.len -= 1;
                st.values -= u64::from(is_value(w));
                Self::retire_word(g, w);
            }
        }
        self.retire_node(st, g, n);
    }

    fn set_mark_bit(n: &Node, off: usize, m: usize) {
        let bit = 1u64 << off;
        let old = n.marks[m].fetch_or(bit, REL);
        if old == 0 {
            if let Some(p) = n.parent() {
                Self::set_mark_bit(p, usize::from(n.offset.load(RLX)), m);
            }
        }
    }

    fn clear_mark_bit(n: &Node, off: usize, m: usize) {
        let bit = 1u64 << off;
        let old = n.marks[m].fetch_and(!bit, REL);
        if old == bit {
            if let Some(p) = n.parent() {
                Self::clear_mark_bit(p, usize::from(n.offset.load(RLX)), m);
            }
        }
    }

    /// The current canonical word at `index` (ZERO for a reservation).
    pub(crate) fn current(&self, path: &mut Path, index: u64) -> usize {
        if !self.position(path, index, 0) {
            return 0;
        }
        // SAFETY: locked; the path is current.
        let n = unsafe { node(path.top()) };
        let w = n.slot(((index >> n.shift()) & 63) as usize);
        if is_node(w) {
            0
        } else {
            canonical(w)
        }
    }

    /// Stores the canonical word `w` (an entry, or ZERO) at `index` with
    /// `order`. On `Ok(Stored)` the tree owns `w` and the returned old word
    /// has been retired (valid until the caller unpins); otherwise the
    /// caller still owns `w` and nothing changed.
    ///
    /// Storing into part of a larger entry replaces that entry whole, keeping
    /// its order (the kernel's rule); storing over smaller entries replaces
    /// them all and merges their marks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store(
        &self,
        st: &mut State,
        g: &Guard,
        path: &mut Path,
        pool: &mut Pool,
        index: u64,
        order: u32,
        w: usize,
        mode: Mode,
    ) -> Result<Outcome> {
        debug_assert!(w != 0 && (is_entry(w) || w == ZERO));
        self.revalidate(st, path);
        if let (Mode::Store, 0) = (mode, order) {
            if let Some(old) = self.store_in_cached_leaf(st, g, path, index, w) {
                return Ok(Outcome::Stored { old });
            }
        }
        let last = index + ((1u64 << order) - 1);
        match mode {
            Mode::Store => {}
            Mode::Insert => {
                let mut probe = *path;
                if let Some(f) = self.scan(&mut probe, index, last, Filter::Occupied, g) {
                    return Ok(Outcome::Occupied { index: f.index });
                }
            }
            Mode::Exchange(expected) => {
                let cur = self.current(path, index);
                let key = if cur == ZERO { None } else { word_key(cur) };
                if key != expected {
                    return Ok(Outcome::Mismatch { current: cur });
                }
            }
        }
        let level = level_of(order);
        let need_root = level.max(shift_for(index));
        let head = self.head.load(RLX);
        if head == 0 {
            let needed = (need_root - level) / SHIFT + 1;
            ensure(pool, needed as usize)?;
            let root = pool.take(need_root, 0, 0);
            self.nodes.fetch_add(1, RLX);
            self.head.store(node_word(root.addr()), REL);
            path.reset();
        } else {
            // SAFETY: locked; the head is a live node.
            let mut root = unsafe { node(head) };
            if root.shift() < need_root {
                let grow = (need_root - root.shift()) / SHIFT;
                ensure(pool, (grow + (need_root - level) / SHIFT) as usize)?;
                while root.shift() < need_root {
                    let top = pool.take(root.shift() + SHIFT, 0, 0);
                    top.slots[0].store(node_word(root.addr()), RLX);
                    self.set_counts(top, 1, 0);
                    for m in 0..NR_MARKS {
                        if root.marks[m].load(RLX) != 0 {
                            top.marks[m].store(1, RLX);
                        }
                    }
                    root.parent.store(top.addr(), RLX);
                    root.offset.store(0, RLX);
                    self.nodes.fetch_add(1, RLX);
                    self.head.store(node_word(top.addr()), REL);
                    root = top;
                }
                path.reset();
            }
        }
        let reached = self.position(path, index, level);
        debug_assert!(reached, "the root covers the index after growth");
        // SAFETY: locked; the path is current.
        let mut n = unsafe { node(path.top()) };
        let mut off = ((index >> n.shift()) & 63) as usize;
        let w0 = n.slot(off);
        if n.shift() > level {
            if is_entry(w0) {
                // Inside a larger entry: replace it whole.
                let (c, span) = entry_span(n, off, w0);
                let old = self.replace(st, g, n, c, span, w);
                return Ok(Outcome::Stored { old });
            }
            debug_assert_eq!(w0, 0);
            ensure(pool, ((n.shift() - level) / SHIFT) as usize)?;
            while n.shift() > level {
                let child = pool.take(n.shift() - SHIFT, n.addr(), off);
                self.nodes.fetch_add(1, RLX);
                n.slots[off].store(node_word(child.addr()), REL);
                self.add_count(n, 1, 0);
                path.push(child);
                n = child;
                off = ((index >> n.shift()) & 63) as usize;
            }
        } else if is_entry(w0) {
            let (c, span) = entry_span(n, off, w0);
            if c < off || span >= 1 << (order - level) {
                let old = self.replace(st, g, n, c, span, w);
                return Ok(Outcome::Stored { old });
            }
        }
        let old = self.overwrite(st, g, n, off, 1 << (order - level), w);
        Ok(Outcome::Stored { old })
    }

    /// The cursor's fast path: an order-0 store whose index lies in the leaf
    /// the path already stands on, into an empty slot or over an order-0
    /// entry, needs no walk, no growth check and no sequence count. `None`
    /// sends everything else down the general path.
    fn store_in_cached_leaf(
        &self,
        st: &mut State,
        g: &Guard,
        path: &mut Path,
        index: u64,
        w: usize,
    ) -> Option<usize> {
        if path.len == 0 {
            return None;
        }
        // SAFETY: locked; the path's generation was just validated.
        let n = unsafe { node(path.top()) };
        if n.shift() != 0 || !covers(0, path.index, index) {
            return None;
        }
        let off = (index & 63) as usize;
        let w0 = n.slot(off);
        if is_sibling(w0) || w0 == ZERO || (off + 1 < SLOTS && is_sibling(n.slot(off + 1))) {
            return None;
        }
        path.index = index;
        if w0 == 0 {
            n.slots[off].store(w, REL);
            self.add_count(n, 1, isize::from(is_value(w)));
            st.len += 1;
            st.values += u64::from(is_value(w));
            return Some(0);
        }
        Some(self.replace(st, g, n, off, 1, w))
    }

    /// Replaces the entry at canonical slot `c` spanning `span` slots with
    /// `w`, keeping its order and marks.
    fn replace(
        &self,
        st: &mut State,
        g: &Guard,
        n: &Node,
        c: usize,
        span: usize,
        w: usize,
    ) -> usize {
        let old = canonical(n.slot(c));
        // One slot is one atomic word, and span and marks do not change:
        // only a multi-slot entry needs the sequence count.
        if span > 1 {
            n.write_begin();
        }
        n.slots[c].store(w, REL);
        for i in 1..span {
            n.slots[c + i].store(sibling_of(w), REL);
        }
        if span > 1 {
            n.write_end();
        }
        let dv = isize::from(is_value(w)) - isize::from(is_value(old));
        self.add_count(n, 0, dv * span as isize);
        st.values = (st.values as i64 + dv as i64) as u64;
        Self::retire_word(g, old);
        old
    }

    /// Writes `w` over slots `off..off + k` of `n`, which hold nothing larger
    /// than the range: retires what was there and merges its marks.
    fn overwrite(
        &self,
        st: &mut State,
        g: &Guard,
        n: &Node,
        off: usize,
        k: usize,
        w: usize,
    ) -> usize {
        let first = n.slot(off);
        let old = if is_node(first) {
            // The old entry at `index` is the first one of the subtree.
            // SAFETY: locked.
            let mut x = unsafe { node(first) };
            loop {
                let y = x.slot(0);
                if is_node(y) {
                    // SAFETY: locked.
                    x = unsafe { node(y) };
                } else {
                    break canonical(y);
                }
            }
        } else {
            canonical(first)
        };
        let range = if k == SLOTS {
            !0u64
        } else {
            ((1u64 << k) - 1) << off
        };
        let mut union = [false; NR_MARKS];
        for (m, u) in union.iter_mut().enumerate() {
            *u = w != ZERO && n.marks[m].load(RLX) & range != 0;
        }
        let (mut slots, mut values) = (0isize, 0isize);
        let mut subtrees = [0usize; SLOTS];
        let mut nsub = 0;
        for i in off..off + k {
            let x = n.slot(i);
            if x == 0 {
                continue;
            }
            slots += 1;
            values += isize::from(is_value(x));
            if is_node(x) {
                subtrees[nsub] = x;
                nsub += 1;
            } else if x == ZERO {
                st.reserved -= 1;
            } else if !is_sibling(x) {
                st.len -= 1;
                st.values -= u64::from(is_value(x));
                Self::retire_word(g, x);
            }
        }
        // A single slot changes atomically and keeps its own mark bits.
        let multi = k > 1;
        if multi {
            n.write_begin();
        }
        // Order matters to lockless readers: (1) the canonical slot, (2) the
        // marks it inherits, (3) the siblings, (4) the stale bits. A reader
        // of an old slot then sees the old entry with its own bit, or a new
        // sibling whose canonical bit is already set; each slot goes straight
        // from old to new, never through empty.
        n.slots[off].store(w, REL);
        for (m, &u) in union.iter().enumerate() {
            if u {
                Self::set_mark_bit(n, off, m);
            }
        }
        for i in off + 1..off + k {
            n.slots[i].store(sibling_of(w), REL);
        }
        for &x in &subtrees[..nsub] {
            // SAFETY: locked; the subtree was detached by the stores above.
            self.retire_subtree(st, g, unsafe { node(x) });
        }
        let wv = if is_value(w) { k as isize } else { 0 };
        self.add_count(n, k as isize - slots, wv - values);
        if w == ZERO {
            st.reserved += 1;
        } else {
            st.len += 1;
            st.values += u64::from(is_value(w));
        }
        // Then drop the bits of slots that are now siblings (or reserved).
        let mut emptied = [false; NR_MARKS];
        for (m, &u) in union.iter().enumerate() {
            let bits = n.marks[m].load(RLX);
            let want = (bits & !range) | if u { 1u64 << off } else { 0 };
            if want != bits {
                n.marks[m].store(want, REL);
                emptied[m] = want == 0;
            }
        }
        if multi {
            n.write_end();
        }
        for (m, &e) in emptied.iter().enumerate() {
            if let (true, Some(p)) = (e, n.parent()) {
                Self::clear_mark_bit(p, usize::from(n.offset.load(RLX)), m);
            }
        }
        old
    }

    /// Erases the entry covering `index` (or the reservation there); returns
    /// the old canonical word (retired; 0 if there was none or a reservation).
    pub(crate) fn erase(&self, st: &mut State, g: &Guard, path: &mut Path, index: u64) -> usize {
        self.revalidate(st, path);
        if !self.position(path, index, 0) {
            return 0;
        }
        // SAFETY: locked; the path is current.
        let n = unsafe { node(path.top()) };
        let off = ((index >> n.shift()) & 63) as usize;
        let w = n.slot(off);
        let old = if w == ZERO {
            n.slots[off].store(0, REL);
            self.add_count(n, -1, 0);
            st.reserved -= 1;
            0
        } else if is_entry(w) {
            let (c, span) = entry_span(n, off, w);
            n.write_begin();
            for i in c..c + span {
                n.slots[i].store(0, REL);
            }
            n.write_end();
            let v = if is_value(w) { span as isize } else { 0 };
            self.add_count(n, -(span as isize), -v);
            for m in 0..NR_MARKS {
                Self::clear_mark_bit(n, c, m);
            }
            st.len -= 1;
            st.values -= u64::from(is_value(w));
            Self::retire_word(g, canonical(w));
            canonical(w)
        } else {
            return 0;
        };
        self.delete_empty(st, g, n);
        old
    }

    /// Removes `n` and its ancestors while they are empty, then lowers the
    /// tree while its root uses only slot 0 for a node.
    fn delete_empty(&self, st: &mut State, g: &Guard, mut n: &Node) {
        while n.count() == 0 {
            match n.parent() {
                None => {
                    self.head.store(0, REL);
                    self.retire_node(st, g, n);
                    return;
                }
                Some(p) => {
                    let off = usize::from(n.offset.load(RLX));
                    p.slots[off].store(0, REL);
                    self.add_count(p, -1, 0);
                    for m in 0..NR_MARKS {
                        if p.marked(m, off) {
                            Self::clear_mark_bit(p, off, m);
                        }
                    }
                    self.retire_node(st, g, n);
                    n = p;
                }
            }
        }
        loop {
            let head = self.head.load(RLX);
            if head == 0 {
                return;
            }
            // SAFETY: locked; the head is live.
            let root = unsafe { node(head) };
            let w = root.slot(0);
            if root.count() != 1 || !is_node(w) {
                return;
            }
            // SAFETY: locked; a child of the root.
            let child = unsafe { node(w) };
            child.parent.store(0, RLX);
            child.offset.store(0, RLX);
            self.head.store(w, REL);
            self.retire_node(st, g, root);
        }
    }

    /// Sets (or clears) mark `m` on the entry covering `index`. Returns
    /// whether an entry was there.
    pub(crate) fn mark(
        &self,
        st: &State,
        path: &mut Path,
        index: u64,
        m: usize,
        set: bool,
    ) -> bool {
        self.revalidate(st, path);
        if !self.position(path, index, 0) {
            return false;
        }
        // SAFETY: locked; the path is current.
        let n = unsafe { node(path.top()) };
        let off = ((index >> n.shift()) & 63) as usize;
        let w = n.slot(off);
        if !is_entry(w) {
            return false;
        }
        let (c, _) = entry_span(n, off, w);
        if set {
            Self::set_mark_bit(n, c, m);
        } else {
            Self::clear_mark_bit(n, c, m);
        }
        true
    }

    /// Splits the entry covering `index` into entries of `new_order`, each
    /// holding the same entry (an item gets one reference per piece) and the
    /// same marks.
    pub(crate) fn split(
        &self,
        st: &mut State,
        _g: &Guard,
        path: &mut Path,
        pool: &mut Pool,
        index: u64,
        new_order: u32,
    ) -> Result<()> {
        self.revalidate(st, path);
        if !self.position(path, index, 0) {
            return Err(Error::NotPresent { index });
        }
        // SAFETY: locked; the path is current.
        let n = unsafe { node(path.top()) };
        let off = ((index >> n.shift()) & 63) as usize;
        let w = n.slot(off);
        if !is_entry(w) {
            return Err(Error::NotPresent { index });
        }
        let (c, span) = entry_span(n, off, w);
        let shift = n.shift();
        let order = span_order(shift, span);
        if new_order >= order {
            return Err(Error::SplitOrder {
                entry_order: order,
                new_order,
            });
        }
        let e = canonical(w);
        let marks: [bool; NR_MARKS] = std::array::from_fn(|m| n.marked(m, c));
        let pieces = 1u64 << (order - new_order);
        let lm = level_of(new_order);
        if lm == shift {
            let p = 1usize << (new_order - shift);
            n.write_begin();
            for j in (p..span).step_by(p) {
                // Mark first, so the piece is never seen unmarked.
                for (m, &on) in marks.iter().enumerate() {
                    if on {
                        Self::set_mark_bit(n, c + j, m);
                    }
                }
                // SAFETY: the array's reference to `e` is alive (locked).
                let piece = unsafe { word_dup::<P>(e) };
                n.slots[c + j].store(piece, REL);
            }
            n.write_end();
        } else {
            let levels = (shift - lm) / SHIFT;
            let mut per_slot = 0usize;
            for l in 0..levels {
                per_slot = 64usize
                    .checked_pow(l)
                    .and_then(|x| per_slot.checked_add(x))
                    .ok_or(Error::SplitTooLarge { nodes: usize::MAX })?;
            }
            let total = per_slot
                .checked_mul(span)
                .ok_or(Error::SplitTooLarge { nodes: usize::MAX })?;
            if total > MAX_SPLIT_NODES {
                return Err(Error::SplitTooLarge { nodes: total });
            }
            ensure(pool, total)?;
            let mut first = true;
            let subs: Vec<usize> = (0..span)
                .map(|i| {
                    let b = Builder {
                        lm,
                        new_order,
                        e,
                        marks,
                        value: is_value(e),
                    };
                    b.build(self, pool, shift - SHIFT, n.addr(), c + i, &mut first)
                })
                .collect();
            // Summary bits first, so a marked search never skips a piece.
            n.write_begin();
            for (m, &on) in marks.iter().enumerate() {
                if on {
                    for i in 1..span {
                        Self::set_mark_bit(n, c + i, m);
                    }
                }
            }
            for (i, sub) in subs.into_iter().enumerate() {
                n.slots[c + i].store(node_word(sub), REL);
            }
            n.write_end();
            if is_value(e) {
                self.add_count(n, 0, -(span as isize));
            }
        }
        st.len += pieces - 1;
        if is_value(e) {
            st.values += pieces - 1;
        }
        st.gen = st.gen.wrapping_add(1);
        Ok(())
    }
}

/// Builds the fully populated subtrees of a split, off-tree.
struct Builder {
    lm: u32,
    new_order: u32,
    e: usize,
    marks: [bool; NR_MARKS],
    value: bool,
}

impl Builder {
    fn build<P: Item>(
        &self,
        tree: &Tree<P>,
        pool: &mut Pool,
        shift: u32,
        parent: usize,
        poff: usize,
        first: &mut bool,
    ) -> usize {
        let n = pool.take(shift, parent, poff);
        tree.nodes.fetch_add(1, RLX);
        if shift == self.lm {
            let p = 1usize << (self.new_order - shift);
            let mut bits = 0u64;
            for j in (0..SLOTS).step_by(p) {
                let piece = if std::mem::take(first) {
                    self.e
                } else {
                    // SAFETY: the array's reference to `e` is alive (locked).
                    unsafe { word_dup::<P>(self.e) }
                };
                n.slots[j].store(piece, RLX);
                for i in j + 1..j + p {
                    n.slots[i].store(sibling_of(piece), RLX);
                }
                bits |= 1 << j;
            }
            for (m, &on) in self.marks.iter().enumerate() {
                if on {
                    n.marks[m].store(bits, RLX);
                }
            }
            tree.set_counts(n, SLOTS, if self.value { SLOTS } else { 0 });
        } else {
            for j in 0..SLOTS {
                let child = self.build(tree, pool, shift - SHIFT, n.addr(), j, first);
                n.slots[j].store(node_word(child), RLX);
            }
            for (m, &on) in self.marks.iter().enumerate() {
                if on {
                    n.marks[m].store(!0, RLX);
                }
            }
            tree.set_counts(n, SLOTS, 0);
        }
        n.addr()
    }
}

/// How a store treats what is already there.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// Replace whatever is there.
    Store,
    /// Only if nothing (no entry, no reservation) overlaps the range.
    Insert,
    /// Only if the entry at the index has this identity (None: empty or reserved).
    Exchange(Option<EntryKey>),
}

/// What a store did.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    /// Stored; the old canonical word at the index (0 if none; ZERO if reserved).
    Stored { old: usize },
    /// Insert found this index occupied.
    Occupied { index: u64 },
    /// Exchange found this canonical word instead.
    Mismatch { current: usize },
}

fn ensure(pool: &Pool, nodes: usize) -> Result<()> {
    if pool.len() < nodes {
        Err(Error::NeedNodes { nodes })
    } else {
        Ok(())
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
