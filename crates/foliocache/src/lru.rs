//! The LRU lists (`mm/swap.c`): an active and an inactive list per cache,
//! threaded through the folio descriptors, under one lock. Folios enter at
//! the inactive head (or the active head when a shadow says they were
//! evicted too soon), are activated by a second access (`folio_mark_accessed`),
//! and leave through reclaim ([`crate::vmscan`]) or removal (`lru_del`).

use crate::cache::CacheInner;
use crate::folio::{Folio, FolioFlags};
use crate::sync::Ordering;

/// Sentinel for "no page" in the LRU links.
pub(crate) const NIL: u32 = u32::MAX;

/// An intrusive list of folios threaded through the descriptors' links.
#[derive(Clone, Copy)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) pages: u64,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
            pages: 0,
        }
    }
}

#[derive(Default)]
pub(crate) struct Lru {
    pub(crate) inactive: List,
    pub(crate) active: List,
}

impl CacheInner {
    pub(crate) fn list_push_head(&self, list: &mut List, page: u32) {
        let f = self.folio(page);
        f.set_lru_links(NIL, list.head);
        if list.head != NIL {
            let h = self.folio(list.head);
            h.set_lru_links(page, h.lru_links().1);
        } else {
            list.tail = page;
        }
        list.head = page;
        list.pages += f.nr_pages();
    }

    pub(crate) fn list_remove(&self, list: &mut List, page: u32) {
        let f = self.folio(page);
        let (prev, next) = f.lru_links();
        if prev != NIL {
            let p = self.folio(prev);
            p.set_lru_links(p.lru_links().0, next);
        } else {
            list.head = next;
        }
        if next != NIL {
            let n = self.folio(next);
            n.set_lru_links(prev, n.lru_links().1);
        } else {
            list.tail = prev;
        }
        f.set_lru_links(NIL, NIL);
        list.pages -= f.nr_pages();
    }

    /// Puts folios just added to a mapping on an LRU list, in one hold of
    /// the LRU lock, each with the shadow it replaced (if any): the refault
    /// test (`workingset_refault`) decides between the active and the inactive
    /// list. Pass no shadow for a folio a write created (a write over a
    /// shadow never activates).
    pub(crate) fn lru_add_all<'f>(
        &self,
        folios: impl IntoIterator<Item = (&'f Folio, Option<u64>)>,
    ) {
        let mut lru = self.lru.lock();
        let lru = &mut *lru;
        for (f, shadow) in folios {
            if f.test_and_set(FolioFlags::LRU) {
                continue;
            }
            let page = self.page(f);
            if let Some(v) = shadow {
                if self.refault(lru, f, v) {
                    self.list_push_head(&mut lru.active, page);
                    continue;
                }
            }
            self.list_push_head(&mut lru.inactive, page);
        }
    }

    /// Marks a folio accessed by a read (the kernel's `folio_mark_accessed`;
    /// see the module documentation), given its flags as the caller just
    /// read them. Costs a test of bits the caller has when there is nothing
    /// to do, which is the common case.
    #[inline]
    pub(crate) fn mark_accessed(&self, f: &Folio, flags: FolioFlags) {
        if flags.intersects(FolioFlags::DROPBEHIND) {
            return;
        }
        if !flags.contains(FolioFlags::REFERENCED) {
            f.set_if_clear(FolioFlags::REFERENCED);
        } else if !flags.intersects(FolioFlags::ACTIVE.union(FolioFlags::ACTIVATE)) {
            self.activate(f);
        }
    }

    /// A second access to an inactive folio: flag it, and move it now if
    /// the LRU lock is free (a reader never waits for reclaim's lock; the
    /// next LRU pass moves a flagged folio).
    #[cold]
    fn activate(&self, f: &Folio) {
        if f.test_and_set(FolioFlags::ACTIVATE) {
            return;
        }
        let Some(mut lru) = self.lru.try_lock() else {
            return;
        };
        // Still on the inactive list (the flags that say so change only
        // under this lock) and still asking.
        if f.test(FolioFlags::LRU) && !f.test(FolioFlags::ACTIVE) {
            let page = self.page(f);
            self.list_remove(&mut lru.inactive, page);
            self.activate_on(&mut lru, f, page);
        }
    }

    /// Moves an inactive folio, already off its list, to the active list.
    pub(crate) fn activate_on(&self, lru: &mut Lru, f: &Folio, page: u32) {
        f.test_and_clear(FolioFlags::ACTIVATE);
        f.test_and_clear(FolioFlags::REFERENCED);
        f.test_and_set(FolioFlags::ACTIVE);
        self.list_push_head(&mut lru.active, page);
        self.nonresident_age
            .fetch_add(f.nr_pages(), Ordering::Relaxed);
        self.stats.activations.add(1);
    }

    /// Takes a folio of `mapping` off whichever list holds it (a removal
    /// that is not reclaim: an IO error, a truncation, a file closing).
    /// Returns whether it was on one: not when reclaim has it isolated
    /// (reclaim then finds it gone from `mapping` and lets it go). A folio
    /// that is no longer `mapping`'s is left alone: its descriptor may have
    /// been evicted and reused by another mapping since the caller found it
    /// (the check is under the LRU lock, which a reused folio takes to go
    /// back on a list after its new mapping is set).
    pub(crate) fn lru_del(&self, f: &Folio, mapping: usize) -> bool {
        let page = self.page(f);
        let mut lru = self.lru.lock();
        if f.mapping() != mapping || !f.test_and_clear(FolioFlags::LRU) {
            return false;
        }
        let lru = &mut *lru;
        let list = if f.test_and_clear(FolioFlags::ACTIVE) {
            &mut lru.active
        } else {
            &mut lru.inactive
        };
        self.list_remove(list, page);
        true
    }
}
