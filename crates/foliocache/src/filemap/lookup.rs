//! Looking folios up (the kernel's `filemap_get_entry`,
//! `__filemap_get_folio` without `FGP_CREAT`, `filemap_get_read_batch`,
//! `filemap_cachestat`): the lockless protocol of the module
//! documentation, the read path's hit, the batches of contiguous folios.

use std::io;

use xarray::EntryRef;

use super::{
    AddError, FgpFlags, Folio, FolioFlags, FolioRef, LockedFolio, Mapping, MappingEntry, BATCH,
};
use crate::arena::{PageId, MAX_ORDER, PAGE};
use crate::sync::spin_hint;

/// Bytes of a random hit's data prefetched ahead of its lookup's atomics.
const PREFETCH_BYTES: usize = 1024;
/// Bytes of a sequential hit's data prefetched ahead of its lookup's
/// atomics: the request's own bytes, up to a page. The hardware's stream
/// prefetcher alone left sequential 4 KiB hits at 0.86-0.91x `memcpy`;
/// with the page prefetched, 0.91-0.98x from 1 to 16 threads (the note
/// "Sixteen CPUs" in `docs/measurements/`). Not beyond the request: a
/// prefetch of the next bytes cost more than it saved (the note
/// "Sequential 4 KiB hits: prefetching ahead").
const SEQ_PREFETCH_BYTES: usize = PAGE as usize;

impl Mapping {
    /// Turns a folio seen under a pin into a counted reference, if it is
    /// still the one at `index`.
    ///
    /// With the reference taken, the folio cannot be freed, so its
    /// identity is the check instead of a second walk of the index (the
    /// kernel's `xas_reload`): a folio in this mapping that covers `index`
    /// is the entry there, as a mapping holds one folio per index, and
    /// every removal clears the folio's mapping under the index lock before
    /// it drops the cache's references. (A folio being added has its
    /// mapping set just before it is stored: found so, it is new, locked
    /// and not yet uptodate, which a hit checks; or the uptodate copy a
    /// writer swaps in for a pinned folio, whose bytes are the old one's.)
    /// The descriptor may have been freed and reused since the walk found
    /// it, or since a walk left it in the hints a hit read instead
    /// (`huge_hints.rs`): the check then refuses it, or finds it back in
    /// this mapping at `index`, which is as good.
    fn try_ref<'m>(&'m self, f: &Folio, index: u64) -> Option<FolioRef<'m>> {
        let cache = self.inner();
        let page = cache.mem.table.page_of(f)?;
        let folio = cache.mem.table.get(page)?;
        if !folio.try_get() {
            return None;
        }
        if folio.mapping() == self.id() && folio.contains(index) {
            Some(FolioRef::adopt(&cache.mem, folio))
        } else {
            cache.mem.put(folio);
            None
        }
    }

    /// Whatever sits at `index`: a folio (with a reference), a shadow, or
    /// nothing. Never locks; the folio may be truncated right after.
    pub fn get_entry(&self, index: u64) -> Option<MappingEntry<'_>> {
        let guard = self.xa.pin();
        loop {
            match self.xa.load_ref(index, &guard) {
                None => return None,
                Some(EntryRef::Value(v)) => return Some(MappingEntry::Shadow(v)),
                Some(EntryRef::Item(f)) => {
                    if let Some(r) = self.try_ref(f, index) {
                        return Some(MappingEntry::Folio(r));
                    }
                    spin_hint();
                }
            }
        }
    }

    /// The folio holding byte `offset`, with a reference, for a read of
    /// `len` bytes from there: [`get_entry`](Self::get_entry) for the read
    /// path's hit (`filemap_read`'s first lookup) and a pin's (`pin.rs` here).
    /// `None` for a hole or a shadow. Also says whether the read continues
    /// this thread's previous read of this mapping (the read path then does
    /// not count a second access to the folio where that one ended).
    ///
    /// Unless the read continues this thread's previous read, the first
    /// bytes of the read are prefetched as soon as the index walk ends,
    /// before the folio's descriptor is read ([`prefetch`](Self::prefetch)),
    /// so a random hit's miss on its data overlaps the rest of the lookup
    /// instead of following it.
    /// A sequential reader is left to the hardware prefetcher: prefetching
    /// its next page cost it throughput. A lend (`prefetch` false: an owned
    /// pin, whose bytes the library does not read) prefetches nothing: its
    /// caller reads the bytes when it likes, if at all, and a prefetch
    /// it never reads is a lookup's cost for nothing (measured in
    /// docs/measurements/, the object store's floor).
    pub(crate) fn get_for_read(
        &self,
        offset: u64,
        len: usize,
        prefetch: bool,
    ) -> (Option<FolioRef<'_>>, bool) {
        thread_local! {
            /// The mapping and the byte where this thread's last read ended.
            static NEXT: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, u64::MAX)) };
        }
        let id = self.id();
        let sequential =
            NEXT.with(|n| n.replace((id, offset.saturating_add(len as u64))) == (id, offset));
        // (Bytes to prefetch: none for a lend.)
        let len = if prefetch { len } else { 0 };
        let index = offset / PAGE;
        let cache = self.inner();
        // A 2 MiB folio where a walk last found one: checked as a walk's
        // find is, so a stale hint only costs the walk that follows. Its
        // data is prefetched first, before anything orders this thread's
        // loads (the hint names a page whatever it holds now). A hit on a
        // hint needs no epoch pin (the hints and the descriptors live as
        // long as the cache, and the reference is the check): only the
        // walk takes one.
        if let Some(f) = self.huge.get(index).and_then(|p| cache.mem.table.get(p)) {
            let first = index & !((1u64 << MAX_ORDER) - 1);
            self.prefetch(f, first, offset, len, sequential);
            if let Some(r) = self.try_ref(f, index) {
                return (Some(r), sequential);
            }
        }
        let guard = self.xa.pin();
        loop {
            match self.xa.load_ref_with_start(index, &guard) {
                None | Some((EntryRef::Value(_), _)) => {
                    self.huge.note(index, None, || self.size());
                    return (None, sequential);
                }
                Some((EntryRef::Item(f), first)) => {
                    let found = cache.mem.table.page_of(f).map(|page| (f.order(), page));
                    self.huge.note(index, found, || self.size());
                    self.prefetch(f, first, offset, len, sequential);
                    if let Some(r) = self.try_ref(f, index) {
                        return (Some(r), sequential);
                    }
                    spin_hint();
                }
            }
        }
    }

    /// Prefetches up to [`PREFETCH_BYTES`] ([`SEQ_PREFETCH_BYTES`] for a
    /// read that continues this thread's last) from file byte `offset`, in
    /// `f`, whose first index the index walk reported as `first`
    /// (`XArray::load_ref_with_start`). The address comes from `f`'s place
    /// in the descriptor table and from the walk, without reading `f`: the
    /// data's miss overlaps the miss on the descriptor instead of
    /// following it. Nothing is checked: `f` is not referenced and may be
    /// freed or reused meanwhile, and `first` may be stale. A wrong address
    /// only wastes the prefetch (it stays inside the arena, which stays
    /// mapped, and a prefetch never faults or changes memory).
    #[inline]
    fn prefetch(&self, f: &Folio, first: u64, offset: u64, len: usize, sequential: bool) {
        if len == 0 {
            return;
        }
        let cache = self.inner();
        let Some(head) = cache.mem.table.page_of(f) else {
            return;
        };
        let Some(page) = (offset / PAGE)
            .checked_sub(first)
            .and_then(|d| usize::try_from(d).ok())
            .and_then(|d| d.checked_add(head))
            .filter(|&p| p < cache.mem.arena.capacity_pages())
        else {
            return;
        };
        let within = (offset % PAGE) as usize;
        let start = cache.mem.arena.page_ptr(PageId::new(page as u32)).as_ptr();
        let start = start.wrapping_add(within);
        let left = cache.mem.arena.capacity_bytes() - page * PAGE as usize - within;
        let most = if sequential {
            SEQ_PREFETCH_BYTES
        } else {
            PREFETCH_BYTES
        };
        let bytes = len.min(most).min(left);
        let mut line = 0;
        while line < bytes {
            crate::copy::prefetch(start.wrapping_add(line));
            line += 64;
        }
    }

    /// The folio covering `index`, with a reference (`filemap_get_folio`):
    /// [`FgpFlags::ACCESSED`] and [`FgpFlags::DONTCACHE`] apply. Never
    /// locks and never sleeps; the folio may be truncated right after.
    ///
    /// # Errors
    /// `NotFound` when absent; `InvalidInput` with `LOCK` or `CREAT` (a
    /// locked folio: see [`lock_folio`](Self::lock_folio)).
    pub fn get_folio(&self, index: u64, flags: FgpFlags) -> io::Result<FolioRef<'_>> {
        if flags.contains(FgpFlags::LOCK) || flags.contains(FgpFlags::CREAT) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "get_folio: LOCK and CREAT return a locked folio: use lock_folio",
            ));
        }
        match self.get_entry(index) {
            Some(MappingEntry::Folio(f)) => {
                self.found(&f, flags);
                Ok(f)
            }
            _ => Err(not_found()),
        }
    }

    /// The folio covering `index`, locked and still in this mapping, with a
    /// reference (`__filemap_get_folio` with `FGP_LOCK`; `LOCK` is implied):
    /// found, or with [`FgpFlags::CREAT`] created in its place (locked and
    /// not uptodate: fill it with [`read_folio`](Self::read_folio)).
    ///
    /// # Locking
    /// Sleeps on the folio lock unless [`FgpFlags::NOWAIT`]; may reclaim
    /// to create. Takes no other lock of the caller's (see the crate's lock
    /// order: no folio lock of this file at a higher index may be held).
    ///
    /// # Errors
    /// `NotFound` when absent and not `CREAT`; `WouldBlock` with `NOWAIT`
    /// when the lock is held; `OutOfMemory` when a folio cannot be created.
    pub fn lock_folio(&self, index: u64, flags: FgpFlags) -> io::Result<LockedFolio<'_>> {
        loop {
            if let Some(MappingEntry::Folio(f)) = self.get_entry(index) {
                let f = if flags.contains(FgpFlags::NOWAIT) {
                    f.try_lock()
                        .map_err(|_| io::Error::from(io::ErrorKind::WouldBlock))?
                } else {
                    f.lock()
                };
                if f.mapping() != self.id() || !f.contains(index) {
                    // Removed (or replaced) while we slept: look again.
                    continue;
                }
                self.found(&f, flags);
                return Ok(f);
            }
            if !flags.contains(FgpFlags::CREAT) {
                return Err(not_found());
            }
            let mut order = flags.get_order().min(self.inner().io.max_order);
            while order > 0 && !index.is_multiple_of(1 << order) {
                order -= 1;
            }
            let f = self.new_folio(order)?;
            if flags.contains(FgpFlags::DONTCACHE) {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            let at = index & !((1u64 << f.order()) - 1);
            match self.add_folio(&f, at) {
                Ok(_) => {
                    if flags.contains(FgpFlags::ACCESSED) {
                        self.inner().lru().mark_accessed(&f, f.flags());
                    }
                    return Ok(f);
                }
                Err(AddError::Exists) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A lookup's effect on the folio it found: a cached lookup claims a
    /// dropbehind folio for the cache; `ACCESSED` marks it accessed.
    fn found(&self, f: &Folio, flags: FgpFlags) {
        if !flags.contains(FgpFlags::DONTCACHE) {
            f.test_and_clear(FolioFlags::DROPBEHIND);
        }
        if flags.contains(FgpFlags::ACCESSED) {
            self.inner().lru().mark_accessed(f, f.flags());
        }
    }

    /// Fills `batch` (up to [`BATCH`] folios) with referenced folios that
    /// cover one contiguous run of pages from the folio containing `index`
    /// up to `max`, in one lockless walk. Stops at a hole, a shadow, a full
    /// batch, or after a folio that is not uptodate or carries the readahead
    /// marker (so only the last folio can be either); tests "past `max`"
    /// before stepping, so no walk is wasted (`filemap_get_read_batch`).
    pub fn get_read_batch<'m>(&'m self, index: u64, max: u64, batch: &mut Vec<FolioRef<'m>>) {
        self.contig(index, max, batch, true);
    }

    /// Like [`get_read_batch`](Self::get_read_batch) without the uptodate
    /// and marker stops; advances `*start` past the last folio returned
    /// (unchanged if none). The first folio may begin before `*start`.
    pub fn get_folios_contig<'m>(
        &'m self,
        start: &mut u64,
        end: u64,
        batch: &mut Vec<FolioRef<'m>>,
    ) {
        let before = batch.len();
        self.contig(*start, end, batch, false);
        if let Some(last) = batch[before..].last() {
            *start = last.index() + last.nr_pages();
        }
    }

    fn contig<'m>(&'m self, index: u64, max: u64, batch: &mut Vec<FolioRef<'m>>, read: bool) {
        if index > max {
            return;
        }
        let guard = self.xa.pin();
        let Ok(iter) = self.xa.iter_ref(index..=max, &guard) else {
            return;
        };
        let mut next = index;
        for (i, e) in iter {
            if i != next || batch.len() >= BATCH {
                break;
            }
            let EntryRef::Item(f) = e else { break };
            let Some(r) = self.try_ref(f, i) else {
                break;
            };
            let end = r.index() + r.nr_pages();
            let stop = read && (!r.test(FolioFlags::UPTODATE) || r.test(FolioFlags::READAHEAD));
            batch.push(r);
            if stop || batch.len() >= BATCH || end > max || end == 0 {
                break;
            }
            next = end;
        }
    }

    /// The pages the folio at `index` covers (`first`, `count`), if one is
    /// there. Takes no reference, so the answer may be stale by the time it
    /// is used: for heuristics (readahead's look-back) only.
    pub(crate) fn span_at(&self, index: u64) -> Option<(u64, u64)> {
        let guard = self.xa.pin();
        match self.xa.load_ref(index, &guard)? {
            EntryRef::Value(_) => None,
            EntryRef::Item(f) => {
                let (first, n) = (f.index(), f.nr_pages());
                // A folio being reused under us may show anything.
                if first <= index && index - first < n {
                    Some((first, n))
                } else {
                    Some((index, 1))
                }
            }
        }
    }

    /// The folios in pages `first..=last`, as (first page, pages) in index
    /// order (one that begins before `first` included). Takes no
    /// reference, as [`span_at`](Self::span_at): a plan's answer, which
    /// the insertion that follows checks again.
    pub(crate) fn cached_spans(&self, first: u64, last: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = self.span_at(first).into_iter().collect();
        let guard = self.xa.pin();
        let Ok(iter) = self.xa.iter_ref(first..=last, &guard) else {
            return out;
        };
        for (i, e) in iter {
            let EntryRef::Item(f) = e else { continue };
            if out.last().is_some_and(|&(a, n)| i < a + n) {
                continue;
            }
            // A folio being reused under us may show anything.
            let n = if f.index() == i { f.nr_pages() } else { 1 };
            out.push((i, n));
        }
        out
    }

    /// The cache state of pages `first..=last` (see
    /// [`File::cachestat`](crate::File::cachestat)): one lockless walk,
    /// no references taken; a folio's flags are read as they are at that
    /// moment (a folio freed and reused under the walk can only skew the
    /// figures, never fault: descriptors live as long as the cache).
    pub fn cachestat(&self, first: u64, last: u64) -> crate::CacheStat {
        let mut cs = crate::CacheStat::default();
        if first > last {
            return cs;
        }
        let cache = self.inner();
        let (now, active) = crate::workingset::now(&cache.lru());
        let guard = self.xa.pin();
        let Ok(mut it) = self.xa.iter_ref(first..=last, &guard) else {
            return cs;
        };
        while let Some((_, e)) = it.next() {
            let (base, order) = it.span();
            let span_last = base.saturating_add((1u64 << order.min(63)) - 1);
            let pages = span_last.min(last) - base.max(first) + 1;
            match e {
                EntryRef::Item(f) => {
                    cs.cached += pages;
                    let flags = f.flags();
                    if flags.contains(FolioFlags::DIRTY) {
                        cs.dirty += pages;
                    }
                    if flags.contains(FolioFlags::WRITEBACK) {
                        cs.writeback += pages;
                    }
                }
                EntryRef::Value(v) => {
                    cs.evicted += pages;
                    if crate::workingset::Shadow::unpack(v).distance(now) <= active {
                        cs.recently_evicted += pages;
                    }
                }
            }
        }
        cs
    }
}

/// A lookup found no folio.
fn not_found() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "no folio at this index")
}
