//! The lockless walk from the head to an index (`xa_load`), and the cursor's
//! path: the nodes from the root down to an index, reused by the next
//! operation while they still cover it (the kernel's `xa_state`).

use super::node::{node, Node};
use super::scan::Filter;
use super::{Tree, ACQ, MAX_HEIGHT, SHIFT, SLOTS};
use crate::entry::{canonical, is_entry, is_node, is_sibling, Item};
use crate::sync::Guard;

/// A position: the nodes from the root down to the deepest one reached for
/// `index`. Every node in it covers `index`.
#[derive(Clone, Copy)]
pub(crate) struct Path {
    pub(super) nodes: [usize; MAX_HEIGHT],
    pub(super) len: usize,
    pub(super) index: u64,
    pub(super) gen: u64,
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

    pub(super) fn top(&self) -> usize {
        self.nodes[self.len - 1]
    }

    pub(super) fn push(&mut self, n: &Node) {
        self.nodes[self.len] = n.addr();
        self.len += 1;
    }
}

/// Does a node of `shift` that covers `a` also cover `b`?
#[inline]
pub(super) fn covers(shift: u32, a: u64, b: u64) -> bool {
    shift + SHIFT >= 64 || (a >> (shift + SHIFT)) == (b >> (shift + SHIFT))
}

/// Slots a node of `shift` can use: all 64, except at shift 60 where
/// `16 << 60` already passes `u64::MAX`.
#[inline]
pub(super) fn slot_limit(shift: u32) -> usize {
    if shift + SHIFT > 64 {
        1 << (64 - shift)
    } else {
        SLOTS
    }
}

/// First index of slot `off` in the node of `shift` that covers `index`.
#[inline]
pub(super) fn slot_base(index: u64, shift: u32, off: usize) -> u64 {
    let high = if shift + SHIFT >= 64 {
        0
    } else {
        index & !((1u64 << (shift + SHIFT)) - 1)
    };
    high | ((off as u64) << shift)
}

/// The index after the node of `shift` that covers `index`, if any.
#[inline]
pub(super) fn after_node(index: u64, shift: u32) -> Option<u64> {
    if shift + SHIFT >= 64 {
        return None;
    }
    (index | ((1u64 << (shift + SHIFT)) - 1)).checked_add(1)
}

/// Smallest node shift whose node covers `index` from index 0.
pub(super) fn shift_for(index: u64) -> u32 {
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

impl<P: Item> Tree<P> {
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
    pub(super) fn walk<'g>(
        &self,
        index: u64,
        _g: &'g Guard,
    ) -> Option<(&'g Node, u32, usize, usize)> {
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
    pub(super) fn position(&self, path: &mut Path, index: u64, stop: u32) -> bool {
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
    pub(super) fn reposition(&self, path: &mut Path, index: u64) -> bool {
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
}
