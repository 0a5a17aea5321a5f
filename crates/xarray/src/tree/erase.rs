//! Removal under the lock (`xas_store` of NULL, `xas_delete_node`): erasing
//! an entry, removing the nodes it leaves empty, and retiring what left the
//! tree through the epoch.

use super::node::{free_node, node, Node};
use super::scan::entry_span;
use super::walk::Path;
use super::{State, Tree, NR_MARKS, REL, RLX, SLOTS};
use crate::entry::{canonical, is_entry, is_node, is_sibling, is_value, word_drop, Item, ZERO};
use crate::sync::Guard;

impl<P: Item> Tree<P> {
    /// Counts a node out of the tree and frees it once readers are done.
    /// Its counts must still describe its slots (a detached subtree is
    /// retired as it was; an emptied node has count 0).
    pub(super) fn retire_node(&self, st: &mut State, g: &Guard, n: &Node) {
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

    pub(super) fn retire_word(g: &Guard, w: usize) {
        if is_entry(w) && !is_value(w) && std::mem::needs_drop::<P>() {
            let w = canonical(w);
            // SAFETY: the entry has left the tree and the array owned this
            // reference; it is dropped once readers pinned now are done.
            unsafe { g.defer(move || word_drop::<P>(w)) };
        }
    }

    /// Retires a detached subtree and everything in it; counts what it held.
    pub(super) fn retire_subtree(&self, st: &mut State, g: &Guard, n: &Node) {
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
}
