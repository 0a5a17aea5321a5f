//! Slot counts and the nodes that hold only value entries: counted, and
//! kept on a list oldest first (the kernel's `workingset_update_node` and
//! its `list_lru` of shadow nodes), so the oldest can be shrunk.

use super::node::{node, value_only, Node};
use super::walk::Path;
use super::{State, Tree, RLX, SLOTS};
use crate::entry::{is_node, is_sibling, is_value, Item};
use crate::sync::Guard;

/// The older end of the value-only list, and a node's link towards it.
const OLDER: usize = 0;
/// The newer end, and a node's link towards it.
const NEWER: usize = 1;

impl<P: Item> Tree<P> {
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

    /// Sets `n`'s slot counts, keeping `value_nodes` exact: the node's
    /// counts are only ever written here, and a node is counted in while
    /// its counts say it holds only values. Costs two compares when the
    /// answer does not change.
    pub(super) fn set_counts(&self, n: &Node, count: usize, values: usize) {
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
    pub(super) fn list_push(&self, n: &Node) {
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
    pub(super) fn list_unlink(&self, n: &Node) {
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
    pub(super) fn add_count(&self, n: &Node, slots: isize, values: isize) {
        let c = n.count.load(RLX) as isize + slots;
        let v = n.nr_values.load(RLX) as isize + values;
        debug_assert!((0..=64).contains(&c) && (0..=64).contains(&v));
        self.set_counts(n, c as usize, v as usize);
    }
}
