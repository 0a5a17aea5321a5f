//! Marks (`xas_set_mark`, `xas_clear_mark`): a bit per entry and per node,
//! summarised up the tree so a marked search skips unmarked subtrees.

use super::node::{node, Node};
use super::scan::entry_span;
use super::walk::Path;
use super::{State, Tree, REL, RLX};
use crate::entry::{is_entry, Item};

impl<P: Item> Tree<P> {
    pub(super) fn set_mark_bit(n: &Node, off: usize, m: usize) {
        let bit = 1u64 << off;
        let old = n.marks[m].fetch_or(bit, REL);
        if old == 0 {
            if let Some(p) = n.parent() {
                Self::set_mark_bit(p, usize::from(n.offset.load(RLX)), m);
            }
        }
    }

    pub(super) fn clear_mark_bit(n: &Node, off: usize, m: usize) {
        let bit = 1u64 << off;
        let old = n.marks[m].fetch_and(!bit, REL);
        if old == bit {
            if let Some(p) = n.parent() {
                Self::clear_mark_bit(p, usize::from(n.offset.load(RLX)), m);
            }
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
}
