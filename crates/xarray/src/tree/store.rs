//! Stores under the lock (`xas_store`): growing the tree, descending to
//! the entry's level, replacing an entry in place and overwriting a range
//! of smaller ones.

use super::node::{ensure, node, Node, Pool};
use super::scan::{entry_span, Filter};
use super::walk::{covers, level_of, shift_for, Path};
use super::{State, Tree, NR_MARKS, REL, RLX, SHIFT, SLOTS};
use crate::entry::{
    canonical, is_entry, is_node, is_sibling, is_value, node_word, sibling_of, word_key, EntryKey,
    Item, ZERO,
};
use crate::error::Result;
use crate::sync::Guard;

impl<P: Item> Tree<P> {
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
        if let Some(refused) = self.refuses(g, path, index, order, mode) {
            return Ok(refused);
        }
        let level = level_of(order);
        self.grow(path, pool, level.max(shift_for(index)), level)?;
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

    /// What an `Insert` or `Exchange` store finds in its way, if anything:
    /// an occupied index in the range, or another entry at `index`.
    fn refuses(
        &self,
        g: &Guard,
        path: &mut Path,
        index: u64,
        order: u32,
        mode: Mode,
    ) -> Option<Outcome> {
        let last = index + ((1u64 << order) - 1);
        match mode {
            Mode::Store => None,
            Mode::Insert => {
                let mut probe = *path;
                self.scan(&mut probe, index, last, Filter::Occupied, g)
                    .map(|f| Outcome::Occupied { index: f.index })
            }
            Mode::Exchange(expected) => {
                let cur = self.current(path, index);
                let key = if cur == ZERO { None } else { word_key(cur) };
                (key != expected).then_some(Outcome::Mismatch { current: cur })
            }
        }
    }

    /// Makes the root at least `need_root` high (the kernel's `xas_expand`),
    /// checking first that the pool holds the new roots and the nodes down
    /// to `level`; a new root starts a new path.
    fn grow(&self, path: &mut Path, pool: &mut Pool, need_root: u32, level: u32) -> Result<()> {
        let head = self.head.load(RLX);
        if head == 0 {
            let needed = (need_root - level) / SHIFT + 1;
            ensure(pool, needed as usize)?;
            let root = pool.take(need_root, 0, 0);
            self.nodes.fetch_add(1, RLX);
            self.head.store(node_word(root.addr()), REL);
            path.reset();
            return Ok(());
        }
        // SAFETY: locked; the head is a live node.
        let mut root = unsafe { node(head) };
        if root.shift() >= need_root {
            return Ok(());
        }
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
        Ok(())
    }

    /// The cursor's fast path: an order-0 store whose index lies in the leaf
    /// the path already stands on, into an empty slot or over an order-0
    /// entry, needs no walk, no growth check and no sequence count. `None`
    /// sends everything else down the general path.
    pub(super) fn store_in_cached_leaf(
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
    pub(super) fn replace(
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
    pub(super) fn overwrite(
        &self,
        st: &mut State,
        g: &Guard,
        n: &Node,
        off: usize,
        k: usize,
        w: usize,
    ) -> usize {
        let old = first_entry(n.slot(off));
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
        let emptied = trim_marks(n, off, range, &union);
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
}

/// The canonical word of the first entry at or under the slot word `w`: for
/// a node, the first entry of its subtree. Locked.
fn first_entry(w: usize) -> usize {
    if !is_node(w) {
        return canonical(w);
    }
    // SAFETY: locked.
    let mut x = unsafe { node(w) };
    loop {
        let y = x.slot(0);
        if !is_node(y) {
            return canonical(y);
        }
        // SAFETY: locked.
        x = unsafe { node(y) };
    }
}

/// Clears the mark bits of `n`'s slots in `range` (a bitmap) except slot
/// `off`'s, which keeps mark `m` where `union[m]`. Returns, per mark,
/// whether `n` was left with no bit of it (its parent's bit then goes).
fn trim_marks(n: &Node, off: usize, range: u64, union: &[bool; NR_MARKS]) -> [bool; NR_MARKS] {
    let mut emptied = [false; NR_MARKS];
    for (m, &u) in union.iter().enumerate() {
        let bits = n.marks[m].load(RLX);
        let want = (bits & !range) | if u { 1u64 << off } else { 0 };
        if want != bits {
            n.marks[m].store(want, REL);
            emptied[m] = want == 0;
        }
    }
    emptied
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
