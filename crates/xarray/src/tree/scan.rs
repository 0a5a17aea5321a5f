//! The scan behind every search (`xas_find`, `xas_find_marked`): the first
//! index at or after a start that holds what a [`Filter`] asks for, with
//! consistent snapshots of multi-slot entries for lockless readers.

use super::node::{node, Node};
use super::walk::{after_node, covers, slot_base, slot_limit, Path};
use super::{Tree, ACQ, NR_MARKS, SLOTS};
use crate::entry::{canonical, is_entry, is_node, is_sibling, Item, ZERO};
use crate::sync::Guard;

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
    pub(super) fn beyond_tree(index: u64, filter: Filter) -> Option<Found> {
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
pub(super) fn entry_span(n: &Node, off: usize, w: usize) -> (usize, usize) {
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
    pub(super) word: usize,
    pub(super) c: usize,
    pub(super) slots: usize,
    pub(super) marks: [bool; NR_MARKS],
}

impl Snapshot {
    /// Takes the snapshot of the entry whose copy is at `off`; `None` if the
    /// slot no longer holds an entry. Waits only while a writer is inside a
    /// multi-slot update of this node (a few dozen stores).
    pub(super) fn take(n: &Node, off: usize, filter: Filter) -> Option<Snapshot> {
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

    pub(super) fn hit(&self, filter: Filter) -> bool {
        match filter {
            Filter::Present | Filter::Occupied => true,
            Filter::Marked(m) => self.marks[m],
            Filter::Empty => false,
        }
    }

    pub(super) fn found(&self, index: u64, base: u64, shift: u32) -> Found {
        Found {
            index,
            base,
            order: span_order(shift, self.slots),
            word: self.word,
        }
    }
}

/// Order of an entry spanning `slots` slots of a node at `shift`.
pub(super) fn span_order(shift: u32, slots: usize) -> u32 {
    shift + slots.trailing_zeros()
}

/// Where [`Tree::scan_slots`] left a node's scan.
enum Step {
    /// The search is over: this answer (`None`: nothing up to `max`).
    Done(Option<Found>),
    /// The path now ends at a child to scan from this index.
    Descend(u64),
    /// Nothing left in this node: climb to the next one.
    Climb,
}

impl<P: Item> Tree<P> {
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
            match Self::scan_slots(path, n, index, off, max, filter) {
                Step::Done(found) => return found,
                Step::Descend(at) => {
                    index = at;
                    continue 'node;
                }
                Step::Climb => {}
            }
            let prev = index;
            index = after_node(index, shift)?;
            if index > max {
                return None;
            }
            if !self.climb(path, prev, index) {
                // Past what the root covers.
                return Found::beyond_tree(index, filter);
            }
        }
    }

    /// Scans the slots of `n` (the path's last node) from `off` on, `index`
    /// lying in slot `off`'s range: an answer, a child to descend into
    /// (pushed on the path), or the end of the node.
    #[inline]
    fn scan_slots(
        path: &mut Path,
        n: &Node,
        index: u64,
        mut off: usize,
        max: u64,
        filter: Filter,
    ) -> Step {
        let shift = n.shift();
        let limit = slot_limit(shift);
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
                return Step::Done(None);
            }
            let w = n.slot(off);
            if is_node(w) {
                let hit = match filter {
                    Filter::Marked(m) => n.marked(m, off),
                    _ => true,
                };
                if hit {
                    // SAFETY: node word loaded while pinned or locked.
                    path.push(unsafe { node(w) });
                    path.index = here;
                    return Step::Descend(here);
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
                        return Step::Done(Some(snap.found(index.max(base), base, shift)));
                    }
                    off = off.max(snap.c + snap.slots - 1);
                }
            } else if let Some(word) = empty_hit(filter, w) {
                return Step::Done(Some(Found {
                    index: here,
                    base: here,
                    order: 0,
                    word,
                }));
            }
            off += 1;
        }
        Step::Climb
    }

    /// Climbs `path` from a node whose last index was `prev` to the nodes
    /// that cover `index`, the index after it. Returns false when `index`
    /// lies past what the root covers.
    #[inline]
    fn climb(&self, path: &mut Path, prev: u64, index: u64) -> bool {
        path.len -= 1;
        while path.len > 0 {
            // SAFETY: pinned or locked; path nodes were reachable when pushed.
            let p = unsafe { node(path.top()) };
            if covers(p.shift(), prev, index) {
                break;
            }
            path.len -= 1;
        }
        path.index = index;
        path.len > 0 || self.reposition(path, index)
    }
}

/// Does the non-entry word `w` answer an `Empty` or `Occupied` search? The
/// word to report if so (ZERO for a reservation, else 0).
#[inline]
fn empty_hit(filter: Filter, w: usize) -> Option<usize> {
    let hit = match filter {
        Filter::Empty => w == 0,
        Filter::Occupied => w == ZERO,
        _ => false,
    };
    hit.then_some(if w == ZERO { ZERO } else { 0 })
}
