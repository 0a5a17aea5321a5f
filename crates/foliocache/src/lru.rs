//! The LRU lists (`mm/swap.c`): an active and an inactive list per cache,
//! threaded through the folio descriptors, under one lock. Folios enter at
//! the inactive head (or the active head when a shadow says they were
//! evicted too soon), are activated by a second access (`folio_mark_accessed`),
//! and leave through reclaim ([`crate::vmscan`]) or removal (`lru_detach`).
//!
//! Beside them, a third list of ours: the folios a sequential stream's
//! readahead windows brought in (`STREAMED`) enter the streamed list's
//! head instead of the inactive one's, and reclaim takes that list's tail
//! first once the stream has read it, so one-pass scans go before a hot
//! set that the inactive list would have let them flush. No access
//! activates a streamed folio (`Access::of`); a refault does. Why, and
//! what it was measured against: docs/design.md section 7, "Beyond two
//! lists".

use crate::folio::{Folio, FolioFlags, FolioTable};
use crate::stats::{FileCounts, Stats};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

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
pub(crate) struct Lists {
    pub(crate) inactive: List,
    pub(crate) active: List,
    /// Folios of streams (`STREAMED`), the oldest at the tail.
    pub(crate) streamed: List,
}

impl Lists {
    /// The list a folio on the lists is on, by its flags.
    fn of(&mut self, f: &Folio) -> &mut List {
        if f.test(FolioFlags::ACTIVE) {
            &mut self.active
        } else if f.test(FolioFlags::STREAMED) {
            &mut self.streamed
        } else {
            &mut self.inactive
        }
    }
}

/// What an access to a folio asks of it, from its flags
/// (`folio_mark_accessed`): nothing (a dropbehind folio, or one active or
/// already flagged for activation, or a streamed one already referenced:
/// a stream's reads through its own large folios, or a pass over a file
/// again, never activate it; a streamed folio activates when it refaults),
/// `REFERENCED` set (a first access), or activation (a second access while
/// inactive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Nothing,
    Reference,
    Activate,
}

impl Access {
    #[inline]
    pub(crate) fn of(flags: FolioFlags) -> Access {
        if flags.intersects(FolioFlags::DROPBEHIND) {
            Access::Nothing
        } else if !flags.contains(FolioFlags::REFERENCED) {
            Access::Reference
        } else if !flags.intersects(
            FolioFlags::ACTIVE
                .union(FolioFlags::ACTIVATE)
                .union(FolioFlags::STREAMED),
        ) {
            Access::Activate
        } else {
            Access::Nothing
        }
    }
}

/// The LRU lists of a cache and the workingset's eviction clock beside
/// them (the kernel's `lruvec`, with its `nonresident_age`). Reached
/// through [`Lruv`], which pairs it with what its operations read.
pub(crate) struct LruVec {
    lists: Mutex<Lists>,
    /// The eviction clock: pages evicted or activated so far (the
    /// kernel's `nonresident_age`), recorded in every shadow.
    nonresident_age: AtomicU64,
    /// Whether a refault may activate its folio (`workingset_refault`).
    refault_detection: bool,
}

impl LruVec {
    /// Empty lists; `refault_detection` as the builder said.
    pub(crate) fn new(refault_detection: bool) -> Self {
        LruVec {
            lists: Mutex::new(Lists::default()),
            nonresident_age: AtomicU64::new(0),
            refault_detection,
        }
    }
}

/// The LRU operations: a cache's [`LruVec`] with the descriptor table that
/// turns the lists' page numbers into folios and the counters the
/// operations bump. Made by `CacheInner::lru`, for the length of a call.
#[derive(Clone, Copy)]
pub(crate) struct Lruv<'c> {
    vec: &'c LruVec,
    table: &'c FolioTable,
    stats: &'c Stats,
}

impl<'c> Lruv<'c> {
    #[inline]
    pub(crate) fn new(vec: &'c LruVec, table: &'c FolioTable, stats: &'c Stats) -> Self {
        Lruv { vec, table, stats }
    }

    /// The lists, locked (the LRU lock).
    pub(crate) fn lock(&self) -> MutexGuard<'c, Lists> {
        self.vec.lists.lock()
    }

    /// The folio of arena page `page`, which the lists name.
    fn folio(&self, page: u32) -> &'c Folio {
        self.table
            .get(page as usize)
            .expect("LRU links name arena pages")
    }

    /// The arena page of `f`, a folio of this cache.
    fn page(&self, f: &Folio) -> u32 {
        self.table
            .page_of(f)
            .expect("folio from this cache's table") as u32
    }

    /// Whether a refault may activate its folio.
    pub(crate) fn refault_detection(&self) -> bool {
        self.vec.refault_detection
    }

    /// The eviction clock now.
    pub(crate) fn age(&self) -> u64 {
        self.vec.nonresident_age.load(Ordering::Relaxed)
    }

    /// Moves the eviction clock on by `pages`; returns where it was.
    pub(crate) fn advance_age(&self, pages: u64) -> u64 {
        self.vec.nonresident_age.fetch_add(pages, Ordering::Relaxed)
    }

    /// The cache's counters.
    pub(crate) fn stats(&self) -> &'c Stats {
        self.stats
    }
}

impl Lruv<'_> {
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
    /// shadow never activates). `file`: the folios' file's counts, if its
    /// curve is kept (a refault counts there too).
    pub(crate) fn add_all<'f>(
        &self,
        folios: impl IntoIterator<Item = (&'f Folio, Option<u64>)>,
        file: Option<&FileCounts>,
    ) {
        let now = self.stats.mrc.now();
        let mut lru = self.lock();
        let lru = &mut *lru;
        for (f, shadow) in folios {
            if f.test_and_set(FolioFlags::LRU) {
                continue;
            }
            // Its read (or write) is its first access: its age starts.
            f.touch(now);
            let page = self.page(f);
            if let Some(v) = shadow {
                if crate::workingset::refault(self, lru, f, v, file) {
                    f.test_and_clear(FolioFlags::STREAMED);
                    self.list_push_head(&mut lru.active, page);
                    continue;
                }
            }
            let list = if f.test(FolioFlags::STREAMED) {
                &mut lru.streamed
            } else {
                &mut lru.inactive
            };
            self.list_push_head(list, page);
        }
    }

    /// Marks a folio accessed by a read (the kernel's `folio_mark_accessed`;
    /// see the module documentation), given its flags as the caller just
    /// read them, and [`touch`](Self::touch)es it. Costs a test of bits
    /// the caller has when there is nothing to do, which is the common
    /// case. Returns the read's age.
    #[inline]
    pub(crate) fn mark_accessed(&self, f: &Folio, flags: FolioFlags) -> u16 {
        match Access::of(flags) {
            Access::Nothing => {}
            Access::Reference => f.set_if_clear(FolioFlags::REFERENCED),
            Access::Activate => self.activate(f),
        }
        self.touch(f)
    }

    /// A read of `f`: [`mark_accessed`](Self::mark_accessed), unless it
    /// goes on where this thread's previous read in the folio ended
    /// (`continued`: not a new access), which only ages it. Returns the
    /// read's age.
    #[inline]
    pub(crate) fn read_access(&self, f: &Folio, flags: FolioFlags, continued: bool) -> u16 {
        if continued {
            self.touch(f)
        } else {
            self.mark_accessed(f, flags)
        }
    }

    /// A read of `f` now, for the miss-ratio curve: its age, in ticks of
    /// the curve's clock since its last read (`Folio::touch`).
    #[inline]
    fn touch(&self, f: &Folio) -> u16 {
        f.touch(self.stats.mrc.now())
    }

    /// A second access to an inactive folio: flag it, and move it now if
    /// the LRU lock is free (a reader never waits for reclaim's lock; the
    /// next LRU pass moves a flagged folio).
    #[cold]
    fn activate(&self, f: &Folio) {
        if f.test_and_set(FolioFlags::ACTIVATE) {
            return;
        }
        let Some(mut lru) = self.vec.lists.try_lock() else {
            return;
        };
        // Still on the inactive list (the flags that say so change only
        // under this lock) and still asking.
        if f.test(FolioFlags::LRU) && !f.test(FolioFlags::ACTIVE) {
            let page = self.page(f);
            self.list_remove(lru.of(f), page);
            self.activate_on(&mut lru, f, page);
        }
    }

    /// Moves an inactive (or streamed) folio, already off its list, to the
    /// active list.
    pub(crate) fn activate_on(&self, lru: &mut Lists, f: &Folio, page: u32) {
        f.test_and_clear(FolioFlags::ACTIVATE);
        f.test_and_clear(FolioFlags::STREAMED);
        f.test_and_clear(FolioFlags::REFERENCED);
        f.test_and_set(FolioFlags::ACTIVE);
        self.list_push_head(&mut lru.active, page);
        self.advance_age(f.nr_pages());
        self.stats.activations.add(1);
    }

    /// Takes a folio out of `mapping` as the LRU lists see it: under the
    /// LRU lock, if it is still `mapping`'s, off whichever list holds it
    /// (none when reclaim has it isolated) and its mapping cleared, in one
    /// hold. Returns whether it was `mapping`'s. The caller has already
    /// taken it out of the index (a removal that is not reclaim: an IO
    /// error, a truncation, an unshared pin, a file closing).
    ///
    /// One hold for both, because reclaim puts a folio it isolated and
    /// could not evict back on a list only if it is still its mapping's,
    /// judged under this lock (`shrink_folio_list`'s putback): a putback
    /// either comes first, and this takes the folio off the list again, or
    /// finds it in no mapping. (Clearing the mapping after dropping the
    /// lock let a putback in between leave a folio in no mapping on a list,
    /// freed there once its last reference went, for the next reclaim
    /// scan to follow its cleared mapping.) A folio that is no longer
    /// `mapping`'s is left alone: its descriptor may have been evicted and
    /// reused by another mapping since the caller found it (a reused folio
    /// takes this lock to go on a list after its new mapping is set).
    pub(crate) fn detach(&self, f: &Folio, mapping: usize) -> bool {
        let page = self.page(f);
        let mut lru = self.lock();
        if f.mapping() != mapping {
            return false;
        }
        if f.test_and_clear(FolioFlags::LRU) {
            self.list_remove(lru.of(f), page);
            f.fetch_clear(FolioFlags::ACTIVE.union(FolioFlags::STREAMED));
        }
        f.set_mapping(0, f.index());
        true
    }

    /// Walks both lists under the LRU lock and checks what every holder of
    /// it relies on: each folio on a list is in a mapping, has `LRU` set and
    /// `ACTIVE` set exactly when on the active list, its links agree with
    /// its neighbours', and each list's page count is the sum of its
    /// folios'. Also that no folio off the lists has `LRU` set. For the
    /// tests, through [`Cache::check_lru`](crate::Cache::check_lru).
    #[cfg(feature = "internals")]
    pub(crate) fn check(&self) -> Result<(), String> {
        let lru = self.lock();
        let mut on_lists = std::collections::HashSet::new();
        for (name, list, active, streamed) in [
            ("inactive", &lru.inactive, false, false),
            ("active", &lru.active, true, false),
            ("streamed", &lru.streamed, false, true),
        ] {
            let (mut prev, mut page, mut pages) = (NIL, list.head, 0);
            while page != NIL {
                if !on_lists.insert(page) {
                    return Err(format!("page {page} is on the lists twice ({name})"));
                }
                let f = self.folio(page);
                let flags = f.flags();
                if f.mapping() == 0 {
                    return Err(format!("{name} list holds a folio in no mapping: {f:?}"));
                }
                if !flags.contains(FolioFlags::LRU)
                    || flags.contains(FolioFlags::ACTIVE) != active
                    || flags.contains(FolioFlags::STREAMED) != streamed
                {
                    return Err(format!(
                        "{name} list holds a folio flagged {flags:?}: {f:?}"
                    ));
                }
                let (p, next) = f.lru_links();
                if p != prev {
                    return Err(format!("{name} list: {f:?} links back to {p}, not {prev}"));
                }
                pages += f.nr_pages();
                (prev, page) = (page, next);
            }
            if prev != list.tail || pages != list.pages {
                return Err(format!(
                    "{name} list: tail {} and {} pages recorded, {prev} and {pages} found",
                    list.tail, list.pages
                ));
            }
        }
        for page in 0..self.table.len() as u32 {
            let Some(f) = self.table.get(page as usize) else {
                continue;
            };
            if f.test(FolioFlags::LRU) && !on_lists.contains(&page) {
                return Err(format!("a folio off the lists has LRU set: {f:?}"));
            }
        }
        Ok(())
    }
}
