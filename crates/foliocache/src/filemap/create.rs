//! Making folios for a range of a file (the kernel's
//! `__filemap_get_folio` with `FGP_CREAT`, `filemap_create_folio`):
//! `grab_folios` finds or creates a write's folios, locked, the largest
//! that fit each gap, and new folios come from the cache's memory.

use std::io;

use xarray::{Cursor, EntryRef};

use super::{fit_order, AddError, FolioFlags, LockedFolio, Mapping};
use crate::readahead::Insert;
use crate::sync::spin_hint;

impl Mapping {
    /// Finds or creates, and locks, the folios covering pages
    /// `index..index + count` (`filemap_grab_folios`, with large folios
    /// and shadows): one lockless walk finds the
    /// folios present; every gap gets the largest aligned folios that fit
    /// it (up to the cache's largest), allocated first and inserted with
    /// one lock hold per gap; then the present ones are locked, in index
    /// order, and checked against removal. Appends the folios, in index
    /// order, to `out`, each locked and referenced: a created folio is not
    /// uptodate (fill it, mark it uptodate, unlock it); a present one keeps
    /// its state. Returns the pages covered from `index` on (the last folio
    /// may reach past `index + count`, and the first begin before
    /// `index`): all of them, or fewer when memory ran out after some were
    /// had. Created folios are for writing: a shadow they replace goes
    /// without the refault test (as the kernel skips it for `__GFP_WRITE`
    /// adds): not counted, never activating.
    ///
    /// # Errors
    /// `InvalidInput` for a range past the largest index; `OutOfMemory`
    /// when not even the first folio could be had.
    pub fn grab_folios<'m>(
        &'m self,
        index: u64,
        count: u64,
        out: &mut Vec<LockedFolio<'m>>,
    ) -> io::Result<u64> {
        self.grab(index, count, out, Insert::Batched, false)
    }

    /// [`grab_folios`](Self::grab_folios); `dontcache`: created folios are
    /// dropbehind, and present ones keep their flag (else a present
    /// dropbehind folio is claimed, as by any cached lookup).
    pub(crate) fn grab<'m>(
        &'m self,
        index: u64,
        count: u64,
        out: &mut Vec<LockedFolio<'m>>,
        insert: Insert,
        dontcache: bool,
    ) -> io::Result<u64> {
        let end = index.checked_add(count).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("grab_folios: index {index} + count {count} overflows"),
            )
        })?;
        let start_len = out.len();
        let mut next = index;
        while next < end {
            // The folios present from `next` on, as far as they run on.
            let mut present = Vec::new();
            let mut from = next;
            self.get_folios_contig(&mut from, end - 1, &mut present);
            let gap_start = match present.first() {
                Some(f) if f.index() <= next => None,
                _ => Some(next),
            };
            if let Some(gap) = gap_start {
                // Create the gap up to the next present folio (or `end`).
                let gap_end = self.next_present(gap, end);
                drop(present);
                // Only the first folio of the call may wait for memory:
                // waiting while holding folios locked could hold up the
                // writeback that would free some.
                let may_wait = out.len() == start_len;
                match self.create_range(gap, gap_end, out, insert, dontcache, may_wait) {
                    // Another thread added a folio there first (or one is
                    // being evicted: present but not to be had): look again.
                    Ok(None) => spin_hint(),
                    Ok(Some(pages)) => next = gap + pages,
                    Err(e) => {
                        if out.len() == start_len {
                            return Err(e);
                        }
                        break;
                    }
                }
                continue;
            }
            // Lock the present run in order; one removed meanwhile ends it.
            let mut stop = false;
            for f in present {
                if stop {
                    break;
                }
                let f = f.lock();
                if f.mapping() != self.id() || !f.contains(next) {
                    stop = true;
                    continue;
                }
                if !dontcache {
                    f.test_and_clear(FolioFlags::DROPBEHIND);
                }
                self.inner().lru().mark_accessed(&f, f.flags());
                next = f.index() + f.nr_pages();
                out.push(f);
            }
        }
        Ok(next - index)
    }

    /// [`grab_folios`](Self::grab_folios) one folio at a time: the same
    /// lookup and the same folios, but each created folio allocated and
    /// inserted on its own, with its own hold of the index lock (the kernel
    /// before `filemap_grab_folios`). For comparison.
    ///
    /// # Errors
    /// As [`grab_folios`](Self::grab_folios).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn grab_folios_single<'m>(
        &'m self,
        index: u64,
        count: u64,
        out: &mut Vec<LockedFolio<'m>>,
    ) -> io::Result<u64> {
        self.grab(index, count, out, Insert::Single, false)
    }

    /// The first page in `from..end` holding a folio, or `end`.
    pub(crate) fn next_present(&self, from: u64, end: u64) -> u64 {
        let guard = self.xa.pin();
        let Ok(it) = self.xa.iter_ref(from..end, &guard) else {
            return end;
        };
        for (i, e) in it {
            if let EntryRef::Item(_) = e {
                return i.max(from);
            }
        }
        end
    }

    /// Creates locked folios over the gap `start..end`: the largest
    /// aligned order that fits at each step, all allocated first (never
    /// waiting, except for the first folio), then inserted in one lock
    /// hold. Returns the pages inserted from `start` (at least one folio's),
    /// or `None` when another thread added a folio at `start` first (look
    /// again).
    ///
    /// # Errors
    /// `OutOfMemory` when not even one folio could be had.
    fn create_range<'m>(
        &'m self,
        start: u64,
        end: u64,
        out: &mut Vec<LockedFolio<'m>>,
        insert: Insert,
        dontcache: bool,
        may_wait: bool,
    ) -> io::Result<Option<u64>> {
        if start >= end {
            // A folio appeared at the gap's start since the caller looked.
            return Ok(None);
        }
        if insert == Insert::Single {
            return self.create_one(start, end, out, dontcache, may_wait);
        }
        let max = self.inner().io.max_order;
        let mut folios = self.alloc_plan(start, end, max);
        let mut at = start + folios.iter().map(|f| f.nr_pages()).sum::<u64>();
        while at < end {
            let order = fit_order(at, end, max);
            let f = if folios.is_empty() && may_wait {
                // The first one may wait for memory; the rest may not.
                Some(self.new_folio(order)?)
            } else {
                self.new_folio_nowait(order)
                    .or_else(|| (order > 0).then(|| self.new_folio_nowait(0)).flatten())
            };
            let Some(f) = f else { break };
            at += f.nr_pages();
            folios.push(f);
        }
        if dontcache {
            for f in &folios {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
        }
        // A folio smaller than planned may leave the next misaligned:
        // keep the aligned prefix.
        let mut index = start;
        let mut keep = 0;
        for f in &folios {
            if !index.is_multiple_of(f.nr_pages()) {
                break;
            }
            index += f.nr_pages();
            keep += 1;
        }
        let rest = folios.split_off(keep);
        for f in rest {
            f.test_and_clear(FolioFlags::DROPBEHIND);
        }
        if folios.is_empty() {
            // (Only when not allowed to wait: the caller holds folios.)
            return Err(no_free_folio());
        }
        let done = match self.add_range(&folios, start, false) {
            Ok(n) => n,
            Err(AddError::Exists) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut pages = 0;
        for (i, f) in folios.into_iter().enumerate() {
            if i < done {
                pages += f.nr_pages();
                out.push(f);
            }
        }
        Ok(Some(pages))
    }

    /// The folios of a gap's plan (the largest aligned order that fits at
    /// each step), taken from the arena in one bulk allocation per order:
    /// all of them, or none (when the arena is short, the caller goes one
    /// folio at a time, reclaiming and waiting as needed). In plan order.
    fn alloc_plan<'m>(&'m self, start: u64, end: u64, max: u32) -> Vec<LockedFolio<'m>> {
        let mut plan = Vec::new();
        let mut at = start;
        while at < end {
            let order = fit_order(at, end, max);
            plan.push(order);
            at += 1 << order;
        }
        // Straight from the arena: no reclaim here.
        self.new_folios_planned(&plan, false).unwrap_or_default()
    }

    /// New locked folios of the orders in `plan`, in that order, taken
    /// with one bulk allocation per distinct order (one hold of the
    /// arena's lock each): all of them, or `None` (what was had goes
    /// back). `reclaim`: reclaim once when an order is short (a readahead
    /// window), else the arena's free memory only (a write's gap).
    pub(crate) fn new_folios_planned<'m>(
        &'m self,
        plan: &[u32],
        reclaim: bool,
    ) -> Option<Vec<LockedFolio<'m>>> {
        let mut orders = plan.to_vec();
        orders.sort_unstable();
        orders.dedup();
        let cache = self.inner();
        let mut pools: Vec<Vec<LockedFolio<'m>>> = Vec::with_capacity(orders.len());
        for &order in &orders {
            let want = plan.iter().filter(|&&o| o == order).count();
            let mut raw = Vec::with_capacity(want);
            let got = if reclaim {
                cache.try_alloc_folios(order.min(cache.io.max_order), want, &mut raw)
            } else {
                cache.mem.alloc_bulk(order, want, &mut raw)
            };
            // (Dropped, never inserted, if the plan fails.) Reversed, so
            // that the pops below hand out the arena's lowest pages first:
            // a range's folios then ascend in memory as its indices do,
            // as one at a time would have them. Descending, a write's copy
            // into a range of 4 KiB folios runs slower (the hardware
            // prefetches ascending streams;
            // the note "A write's new folios in ascending order" in `docs/measurements/`).
            pools.push(
                raw.into_iter()
                    .rev()
                    .map(|f| LockedFolio::new_fresh(&cache.mem, f))
                    .collect(),
            );
            if got < want {
                return None;
            }
        }
        let mut out = Vec::with_capacity(plan.len());
        for &order in plan {
            let i = orders.binary_search(&order).expect("planned order");
            out.push(pools[i].pop().expect("one folio per step"));
        }
        Some(out)
    }

    /// [`create_range`](Self::create_range) one folio at a time: each
    /// allocated, then inserted with its own lock hold, until the gap is
    /// full or memory runs out.
    fn create_one<'m>(
        &'m self,
        start: u64,
        end: u64,
        out: &mut Vec<LockedFolio<'m>>,
        dontcache: bool,
        may_wait: bool,
    ) -> io::Result<Option<u64>> {
        let max = self.inner().io.max_order;
        let mut at = start;
        while at < end {
            let order = fit_order(at, end, max);
            let f = if at == start && may_wait {
                self.new_folio(order)?
            } else {
                match self.new_folio_nowait(order) {
                    Some(f) => f,
                    None if at == start => return Err(no_free_folio()),
                    None => break,
                }
            };
            if dontcache {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            let mut cur = Cursor::new(&self.xa, at);
            match self.add_one(&mut cur, &f, at) {
                Ok(_) => {
                    // A write's add: no refault test.
                    self.account_added(&f, None);
                    at += f.nr_pages();
                    out.push(f);
                }
                Err(AddError::Exists) if at == start => return Ok(None),
                Err(AddError::Exists) => break,
                Err(e) => {
                    if at == start {
                        return Err(e.into());
                    }
                    break;
                }
            }
        }
        Ok(Some(at - start))
    }

    /// A new locked folio of up to `order` (smaller when the arena has no
    /// block that large), in no mapping, reclaiming if the cache is full.
    ///
    /// # Errors
    /// `OutOfMemory` when every cached folio is in use.
    pub fn new_folio(&self, order: u32) -> io::Result<LockedFolio<'_>> {
        let cache = self.inner();
        let f = cache.alloc_folio(order.min(cache.io.max_order))?;
        Ok(LockedFolio::new_fresh(&cache.mem, f))
    }

    /// A locked folio of exactly `order`, in no mapping, without waiting for
    /// memory: `None` when the arena has no block of that order even after
    /// one reclaim pass (readahead then shrinks or falls back).
    pub(crate) fn new_folio_nowait(&self, order: u32) -> Option<LockedFolio<'_>> {
        let cache = self.inner();
        let f = cache.try_alloc_folio(order.min(cache.io.max_order))?;
        Some(LockedFolio::new_fresh(&cache.mem, f))
    }

    /// Up to `n` new locked folios of exactly `order`, in no mapping,
    /// appended to `out`, taken from the arena in one go (a readahead
    /// window's allocation: one hold of the allocator's lock, not one per
    /// folio), reclaiming once if it is short, never waiting. Returns how
    /// many were added.
    pub fn new_folios<'m>(&'m self, order: u32, n: usize, out: &mut Vec<LockedFolio<'m>>) -> usize {
        let cache = self.inner();
        let mut raw = Vec::with_capacity(n);
        let got = cache.try_alloc_folios(order.min(cache.io.max_order), n, &mut raw);
        out.extend(
            raw.into_iter()
                .map(|f| LockedFolio::new_fresh(&cache.mem, f)),
        );
        got
    }
}

/// A grab that may not wait found no free folio.
fn no_free_folio() -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        "foliocache: no free folio without waiting",
    )
}
