//! Inserting folios into the index (the kernel's `filemap_add_folio`
//! and `__filemap_add_folio`): one folio, or a window's range in one hold
//! of the index lock, with the index nodes reserved beforehand and the
//! eviction shadow each replaces handed to the refault test.

use xarray::{Cursor, Entry, EntryRef, Error as XaError, XaGuard};

use super::{AddError, Folio, FolioPtr, LockedFolio, Mapping};
use crate::sync::Ordering;

impl Mapping {
    /// Adds a locked folio that is in no mapping at `index` (a multiple of
    /// its size), taking the cache's `2^order` references and putting it on
    /// the LRU. One walk under the index lock finds conflicts and the first
    /// shadow (with its order); a shadow larger than the folio is split in
    /// the same hold, from nodes allocated beforehand (the lock is dropped
    /// to allocate only when the pool is short, and everything is checked
    /// again after). Returns the shadow the folio replaced, if any.
    ///
    /// # Errors
    /// [`AddError::Exists`] if a folio covers part of the range (nothing
    /// changed); [`AddError::Invalid`] for a folio already mapped,
    /// misaligned, or of another cache.
    pub fn add_folio(&self, f: &LockedFolio<'_>, index: u64) -> Result<Option<u64>, AddError> {
        let mut cur = Cursor::new(&self.xa, index);
        let shadow = self.add_one(&mut cur, f, index)?;
        self.account_added(f, shadow);
        Ok(shadow)
    }

    fn check_new(&self, f: &Folio, index: u64) -> Result<(), AddError> {
        if self.inner().mem.table.page_of(f).is_none() {
            return Err(AddError::Invalid("the folio is another cache's"));
        }
        if f.mapping() != 0 {
            return Err(AddError::Invalid("the folio is already in a mapping"));
        }
        if !index.is_multiple_of(f.nr_pages()) {
            return Err(AddError::Invalid(
                "the index is not a multiple of the folio's size",
            ));
        }
        Ok(())
    }

    /// The add itself, under the index lock, retrying node allocation
    /// outside it. The caller accounts and LRU-adds on success.
    pub(super) fn add_one(
        &self,
        cur: &mut Cursor<'_, FolioPtr>,
        f: &Folio,
        index: u64,
    ) -> Result<Option<u64>, AddError> {
        self.check_new(f, index)?;
        loop {
            let mut g = self.xa.lock();
            let r = self.add_in_hold(&mut g, cur, f, index);
            drop(g);
            match r {
                Ok(done) => return done,
                Err(XaError::NeedNodes { nodes }) => {
                    cur.reserve_nodes(nodes).map_err(AddError::Index)?;
                }
                Err(e) => return Err(AddError::Index(e)),
            }
        }
    }

    /// One add inside a lock hold: one walk over the range finds any
    /// conflicting folio and the first shadow with its order; a larger
    /// shadow is split here; then the store. `Err(NeedNodes)` changes
    /// nothing: allocate outside the lock and call again.
    fn add_in_hold(
        &self,
        g: &mut XaGuard<'_, FolioPtr>,
        cur: &mut Cursor<'_, FolioPtr>,
        f: &Folio,
        index: u64,
    ) -> Result<Result<Option<u64>, AddError>, XaError> {
        let order = f.order();
        let last = index + f.nr_pages() - 1;
        cur.set_order(order)?;
        cur.set_index(index);
        let mut shadow = None;
        while let Some((_, e)) = cur.find(g, last)? {
            match e {
                EntryRef::Item(_) => return Ok(Err(AddError::Exists)),
                EntryRef::Value(v) => {
                    if shadow.is_none() {
                        shadow = Some((v, cur.get_order(g)?));
                    }
                }
            }
        }
        if let Some((_, sorder)) = shadow {
            if sorder > order {
                cur.set_index(index);
                cur.split(g, order)?;
            }
        }
        self.store_in_hold(g, cur, f, index)?;
        Ok(Ok(shadow.map(|s| s.0)))
    }

    /// The store of [`add_in_hold`](Self::add_in_hold), into a range the
    /// caller found empty under this hold of the lock: the folio takes the
    /// cache's references for its pages and its identity, and goes in.
    /// `Err(NeedNodes)` changes nothing.
    fn store_in_hold(
        &self,
        g: &mut XaGuard<'_, FolioPtr>,
        cur: &mut Cursor<'_, FolioPtr>,
        f: &Folio,
        index: u64,
    ) -> Result<(), XaError> {
        cur.set_order(f.order())?;
        f.get_many(f.nr_pages() as u32);
        f.set_mapping(self.id(), index);
        cur.set_index(index);
        if let Err(e) = cur.store(g, Some(Entry::Item(FolioPtr::new(f)))) {
            f.set_mapping(0, index);
            f.put_many(f.nr_pages() as u32);
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn account_added(&self, f: &Folio, shadow: Option<u64>) {
        let cache = self.inner();
        self.folios.fetch_add(1, Ordering::Relaxed);
        cache.stats.folios.add(1);
        cache.stats.pages.add(f.nr_pages());
        if !self.memfile {
            cache.lru().add_all([(f, shadow)], self.curve_counts());
        }
    }

    /// Adds an array of locked folios over the contiguous range from
    /// `start`, each after the previous one, in one hold of the index lock
    /// (one lock round trip for a whole readahead window, as the kernel's
    /// batched readahead insertion; index nodes for the run are allocated
    /// before it is taken, and it is dropped only if those were not enough). Stops at the first folio that
    /// conflicts with one already cached, and returns how many folios, a
    /// prefix of `folios`, were inserted. The caller keeps its reference on
    /// every folio: the inserted ones are now in the cache (read them in
    /// and unlock them), the others are not (drop them).
    ///
    /// # Errors
    /// The first folio's error, when none was inserted.
    pub fn add_folio_range(
        &self,
        folios: &[LockedFolio<'_>],
        start: u64,
    ) -> Result<usize, AddError> {
        self.add_range(folios, start, true)
    }

    /// [`add_folio_range`](Self::add_folio_range); `refault`: whether the
    /// shadows replaced go through the refault test (not for folios a
    /// write creates: a write over a shadow never activates, as the kernel
    /// skips `workingset_refault` for `__GFP_WRITE` adds).
    pub(super) fn add_range(
        &self,
        folios: &[LockedFolio<'_>],
        start: u64,
        refault: bool,
    ) -> Result<usize, AddError> {
        let mut cur = Cursor::new(&self.xa, start);
        let pages: u64 = folios.iter().map(|f| f.nr_pages()).sum();
        let order = folios.iter().map(|f| f.order()).min().unwrap_or(0);
        cur.reserve_nodes(range_nodes(order, start, start + pages))
            .map_err(AddError::Index)?;
        let mut done = 0usize;
        let mut index = start;
        let mut stop = None;
        let mut shadows = Vec::with_capacity(folios.len());
        let end = start + pages;
        'hold: while done < folios.len() {
            let mut g = self.xa.lock();
            // One walk over the rest of the range: when it holds nothing
            // (no folio, no shadow: a file being written for the first
            // time), each folio goes in with its store alone, without a
            // walk of its own for conflicts and shadows.
            // (At order 0: the cursor keeps the last store's order, whose
            // alignment would start the walk before `index`.)
            let empty = match cur
                .set_order(0)
                .and_then(|()| {
                    cur.set_index(index);
                    cur.find(&g, end - 1)
                })
                .map(|found| found.is_none())
            {
                Ok(empty) => empty,
                Err(e) => {
                    stop = Some(AddError::Index(e));
                    break 'hold;
                }
            };
            while done < folios.len() {
                let f = &folios[done];
                if let Err(e) = self.check_new(f, index) {
                    stop = Some(e);
                    break 'hold;
                }
                let added = if empty {
                    self.store_in_hold(&mut g, &mut cur, f, index)
                        .map(|()| Ok(None))
                } else {
                    self.add_in_hold(&mut g, &mut cur, f, index)
                };
                match added {
                    Ok(Ok(shadow)) => {
                        shadows.push(shadow);
                        index += f.nr_pages();
                        done += 1;
                    }
                    Ok(Err(e)) => {
                        stop = Some(e);
                        break 'hold;
                    }
                    Err(XaError::NeedNodes { nodes }) => {
                        drop(g);
                        if let Err(e) = cur.reserve_nodes(nodes) {
                            stop = Some(AddError::Index(e));
                            break 'hold;
                        }
                        continue 'hold;
                    }
                    Err(e) => {
                        stop = Some(AddError::Index(e));
                        break 'hold;
                    }
                }
            }
        }
        // LRU insertion happens outside the index lock (lock order), in
        // one hold of the LRU lock.
        let cache = self.inner();
        let pages: u64 = folios[..done].iter().map(|f| f.nr_pages()).sum();
        self.folios.fetch_add(done as u64, Ordering::Relaxed);
        cache.stats.folios.add(done as u64);
        cache.stats.pages.add(pages);
        if !refault {
            shadows.iter_mut().for_each(|s| *s = None);
        }
        if !self.memfile {
            cache.lru().add_all(
                folios[..done].iter().map(|f| f.folio()).zip(shadows),
                self.curve_counts(),
            );
        }
        match stop {
            Some(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }
}

/// Index nodes a store of folios, contiguous over `start..end`, the smallest
/// of order `order`, may need,
/// reserved before the lock is taken: at the lowest level the folios are
/// stored at (a folio of order `k` takes `2^(k % 6)` slots of a node at
/// level `k / 6`, as the kernel's `xas_set_order` places it), one node per
/// 64 slots the range touches, and one per span at each of the three levels
/// above (room for the tree to grow). Exact for windows of one-page folios
/// (their leaves), a few nodes over for 2 MiB folios; an estimate sized by
/// pages alone reserved (and freed unused) some sixty nodes for a window of
/// four 2 MiB folios, which made batched insertion slower than one folio at
/// a time (the note "Batched insertion with 2 MiB folios" in
/// `docs/measurements/`). A short estimate is met by the store's
/// `NeedNodes` and a retry.
fn range_nodes(order: u32, start: u64, end: u64) -> usize {
    const SHIFT: u32 = 6;
    if end <= start {
        return 0;
    }
    let level = order / SHIFT;
    (level..level + 4)
        .map(|l| {
            let s = (SHIFT * (l + 1)).min(63);
            (((end - 1) >> s) - (start >> s) + 1) as usize
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::range_nodes;

    #[test]
    fn a_window_reserves_the_nodes_of_its_folios_level() {
        // Four 2 MiB folios (an 8 MiB window at 32 MiB): 32 slots of one
        // node at level 1, and one node at each of the three levels above.
        // (Sized by pages, the reservation was 68 nodes.)
        assert_eq!(range_nodes(9, 8192, 8192 + 2048), 4);
        // 512 one-page folios: their 8 leaves, and one node a level above,
        // twice more above that.
        assert_eq!(range_nodes(0, 0, 512), 8 + 1 + 1 + 1);
        // Unaligned: the two leaves the range touches.
        assert_eq!(range_nodes(0, 60, 68), 2 + 1 + 1 + 1);
        // 64 KiB folios live in leaves too.
        assert_eq!(range_nodes(4, 0, 256), 4 + 1 + 1 + 1);
        assert_eq!(range_nodes(0, 5, 5), 0);
    }
}
