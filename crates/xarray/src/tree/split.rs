//! Splitting a multi-order entry into smaller ones (`xas_split`): in place
//! when the pieces live in the same node, else through fully populated
//! subtrees built off-tree and published at once.

use super::node::{ensure, node, Node, Pool};
use super::scan::{entry_span, span_order};
use super::walk::{level_of, Path};
use super::{State, Tree, MAX_SPLIT_NODES, NR_MARKS, REL, RLX, SHIFT, SLOTS};
use crate::entry::{canonical, is_entry, is_value, node_word, sibling_of, word_dup, Item};
use crate::error::{Error, Result};
use crate::sync::Guard;

impl<P: Item> Tree<P> {
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
            Self::split_in_node(n, c, span, e, &marks, 1 << (new_order - shift));
        } else {
            let subtrees = Subtrees {
                lm,
                new_order,
                e,
                marks,
                value: is_value(e),
            };
            self.split_below(pool, n, c, span, subtrees)?;
        }
        st.len += pieces - 1;
        if is_value(e) {
            st.values += pieces - 1;
        }
        st.gen = st.gen.wrapping_add(1);
        Ok(())
    }

    /// Splits the entry at canonical slot `c` spanning `span` slots of `n`
    /// into pieces of `p` slots each, in place: every piece after the first
    /// gets its own reference to `e` and the entry's marks.
    fn split_in_node(
        n: &Node,
        c: usize,
        span: usize,
        e: usize,
        marks: &[bool; NR_MARKS],
        p: usize,
    ) {
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
    }

    /// Splits the entry at canonical slot `c` spanning `span` slots of `n`
    /// into pieces that live below `n`: builds one full subtree per slot
    /// off-tree, then publishes them in one sequence section.
    fn split_below(
        &self,
        pool: &mut Pool,
        n: &Node,
        c: usize,
        span: usize,
        b: Subtrees,
    ) -> Result<()> {
        let shift = n.shift();
        let levels = (shift - b.lm) / SHIFT;
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
            .map(|i| b.build(self, pool, shift - SHIFT, n.addr(), c + i, &mut first))
            .collect();
        // Summary bits first, so a marked search never skips a piece.
        n.write_begin();
        for (m, &on) in b.marks.iter().enumerate() {
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
        if b.value {
            self.add_count(n, 0, -(span as isize));
        }
        Ok(())
    }
}

/// Builds the fully populated subtrees of a split, off-tree.
struct Subtrees {
    lm: u32,
    new_order: u32,
    e: usize,
    marks: [bool; NR_MARKS],
    value: bool,
}

impl Subtrees {
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
