//! Taking folios out of a mapping (the kernel's `__filemap_remove_folio`,
//! `delete_from_page_cache_batch` and `__remove_mapping`'s index part):
//! one folio its caller holds locked (a failed read, truncation), an
//! uncached folio at the end of its use (`folio_end_dropbehind`),
//! invalidation (`invalidate_mapping_pages`, `POSIX_FADV_DONTNEED`),
//! reclaim's batch of frozen folios replaced by their shadows, and every
//! folio when a mapping goes. Which folios go is decided above: by
//! `truncate.rs`, `vmscan.rs`, the read path.

use xarray::{Cursor, Entry, EntryKey, EntryRef, Item};

use super::{FolioPtr, FolioRef, LockedFolio, Mapping, MappingEntry};
use crate::folio::{Folio, FolioFlags, FrozenFolio};
use crate::mm::CacheInner;
use crate::sync::Ordering;
use crate::workingset::Shadow;

impl Mapping {
    /// Drops the clean, unlocked, unused folios that lie wholly in pages
    /// `start..end`, and the eviction shadows there, leaving no shadows
    /// (invalidation, as `POSIX_FADV_DONTNEED`: the kernel's
    /// `invalidate_mapping_pages` clears shadow entries too). Folios in use
    /// are left alone. Returns the pages of folios dropped.
    pub fn invalidate(&self, start: u64, end: u64) -> u64 {
        if self.memfile {
            // Its folios are its only copy of the data.
            return 0;
        }
        let mut dropped = 0;
        let mut index = start;
        while index < end {
            // The next folio at or after `index`; shadows on the way go.
            let mut shadows = Vec::new();
            let next = {
                let guard = self.xa.pin();
                self.xa.iter_ref(index..end, &guard).ok().and_then(|it| {
                    for (i, e) in it {
                        match e {
                            EntryRef::Item(_) => return Some(i),
                            EntryRef::Value(v) => shadows.push((i, v)),
                        }
                    }
                    None
                })
            };
            for (i, v) in shadows {
                let span = 1u64 << self.xa.get_order(i);
                let first = i & !(span - 1);
                if first >= start && first + span <= end {
                    let _ = self.xa.compare_exchange(i, Some(EntryKey::Value(v)), None);
                }
            }
            let Some(i) = next else { break };
            let Some(MappingEntry::Folio(f)) = self.get_entry(i) else {
                index = i + 1;
                continue;
            };
            let (first, n) = (f.index(), f.nr_pages());
            index = (first + n).max(i + 1);
            if first < start || first + n > end {
                continue;
            }
            let Ok(f) = f.try_lock() else {
                continue;
            };
            // Clean, and referenced only by the cache and by us.
            let clean = !f.test(FolioFlags::DIRTY) && !f.test(FolioFlags::WRITEBACK);
            if clean && f.mapping() == self.id() && f.refcount() == n as u32 + 1 {
                self.remove_locked(&f);
                dropped += n;
            }
        }
        dropped
    }

    /// The end of an uncached read's use of `f` (`folio_end_dropbehind`): if it is
    /// still dropbehind, clean, not under writeback, and its lock can be
    /// had without waiting, it leaves the cache, leaving no shadow. Other
    /// readers' references keep the detached folio's memory until they
    /// drop them. Returns whether it was removed.
    pub(crate) fn drop_behind(&self, f: &FolioRef<'_>) -> bool {
        let busy = FolioFlags::DIRTY.union(FolioFlags::WRITEBACK);
        if !f.test(FolioFlags::DROPBEHIND) || f.flags().intersects(busy) {
            return false;
        }
        let Ok(f) = f.clone().try_lock() else {
            return false;
        };
        // Again under the lock: a writer dirties a folio under it, and a
        // cached reader may have claimed it meanwhile.
        let mut dropped = false;
        if f.mapping() == self.id()
            && !f.flags().intersects(busy)
            && f.test_and_clear(FolioFlags::DROPBEHIND)
        {
            dropped = self.remove_locked(&f);
        }
        drop(f);
        if dropped {
            self.inner()
                .stats
                .dropbehind_drops
                .fetch_add(1, Ordering::Relaxed);
        }
        dropped
    }

    /// Removes a folio the caller holds locked (a failed read), dropping the
    /// cache's references. The caller keeps its own; readers that found the
    /// folio wait on its lock and then see it left the mapping.
    pub(crate) fn remove_locked(&self, f: &LockedFolio<'_>) -> bool {
        let cache = self.inner();
        let key = Entry::Item(FolioPtr::new(f)).key();
        let removed = self.xa.compare_exchange(f.index(), Some(key), None).is_ok();
        if removed {
            self.detach(f);
            // (The index mark went with the entry.)
            self.forget_dirty(f);
            self.folios.fetch_sub(1, Ordering::Relaxed);
            cache.stats.folios.sub(1);
            cache.stats.pages.sub(f.nr_pages());
            let last = f.put_many(f.nr_pages() as u32);
            debug_assert!(!last, "the caller's reference keeps the folio");
        }
        removed
    }

    /// Clears the mapping of a folio this mapping's index no longer holds,
    /// if it is still this mapping's, taking it off the LRU lists in the
    /// same hold of their lock (`Lruv::detach`). A memory file's
    /// folios are on no list and reclaim never reaches them: no lock.
    /// Returns whether it was this mapping's.
    pub(crate) fn detach(&self, f: &Folio) -> bool {
        if !self.memfile {
            return self.inner().lru().detach(f, self.id());
        }
        let ours = f.mapping() == self.id();
        if ours {
            f.set_mapping(0, f.index());
        }
        ours
    }

    /// Removes every folio (the mapping is being dropped: nobody else can
    /// look them up). Each folio is taken off the LRU and out of the mapping
    /// under the LRU lock, so reclaim never reaches a mapping that is going
    /// away; one that reclaim already took was evicted by it, and its
    /// descriptor may since hold another mapping's folio, which `detach`
    /// leaves alone.
    ///
    /// The index itself is left as it is: it goes with the mapping, and
    /// once every folio is off the LRU nothing else can reach it, so its
    /// drop frees its nodes at once. (Erasing entry by entry, shadows
    /// included, handed every node to the epoch collector instead, whose
    /// backlog kept megabytes resident after a large file closed: the
    /// memory audit, tests/memory_audit.rs.)
    ///
    /// The walk frees as it goes and collects nothing: a list of a large
    /// file's entries (8 bytes a folio, 512 KiB for 256 MiB of 4 KiB
    /// folios) was the one large allocation of a close, and glibc, once
    /// such a block is freed, raises its threshold for serving blocks with
    /// their own mappings, after which every thread's heap keeps up to
    /// twice that much free memory resident (the memory audit again).
    pub(crate) fn remove_all(&self) {
        let cache = self.inner();
        let Ok(entries) = self.xa.iter(..) else {
            return;
        };
        for (_, e) in entries {
            let Entry::Item(p) = e else {
                continue;
            };
            let addr = p.as_ptr().as_ptr() as usize;
            let Some(f) = cache
                .mem
                .table
                .page_of_addr(addr)
                .and_then(|pg| cache.mem.table.get(pg))
            else {
                continue;
            };
            // One that is not this mapping's any more was evicted (and
            // its descriptor perhaps reused): reclaim held this mapping
            // alive until it had cleared the mapping of all it evicted.
            if !self.detach(f) {
                continue;
            }
            self.forget_dirty(f);
            self.folios.fetch_sub(1, Ordering::Relaxed);
            cache.stats.folios.sub(1);
            cache.stats.pages.sub(f.nr_pages());
            if f.put_many(f.nr_pages() as u32) {
                cache.mem.free_folio(f);
            }
        }
    }
}

impl Mapping {
    /// Evicts folios of this mapping that reclaim holds locked, in one hold
    /// of the index lock: each is frozen (its count taken from the cache's
    /// references and the caller's to 0; one a reader holds is left) and
    /// replaced by its eviction shadow, aged by the eviction clock in this
    /// order. (The kernel's `__remove_mapping` takes the lock once per
    /// folio; a batch of reclaim here takes it once per mapping, so that
    /// readers inserting their misses meet it once a batch.) Frozen only
    /// inside the hold: a reader that finds a frozen folio spins until its
    /// shadow replaces it, and never while this waits for the lock. The
    /// frozen folios, out of the index, are appended to `frozen`; those a
    /// reader holds go to `busy`, still locked, for the caller to unlock
    /// once the index lock is dropped.
    pub(crate) fn evict_locked<'m>(
        &self,
        cache: &CacheInner,
        folios: impl IntoIterator<Item = LockedFolio<'m>>,
        frozen: &mut Vec<FrozenFolio<'m>>,
        busy: &mut Vec<LockedFolio<'m>>,
    ) {
        let first = frozen.len();
        let mut g = self.xa.lock();
        for f in folios {
            // The cache's references and the caller's.
            let refs = f.nr_pages() as u32 + 1;
            match f.freeze(refs) {
                Ok(f) => frozen.push(f),
                Err(f) => busy.push(f),
            }
        }
        let ours = &frozen[first..];
        let pages = ours.iter().map(|f| f.nr_pages()).sum();
        let mut age = cache.lru().advance_age(pages);
        let mut removed = 0;
        for f in ours {
            let shadow = Shadow {
                age,
                workingset: f.test(FolioFlags::WORKINGSET),
            }
            .pack();
            age += f.nr_pages();
            // (A cursor of its own: the batch's indices are scattered, and
            // a path kept from the last one is only walked back up.)
            let mut cur = Cursor::new(&self.xa, f.index());
            let key = Some(Entry::Item(FolioPtr::new(f)).key());
            // The value replaces the whole entry and keeps its order: a
            // large folio leaves a large shadow. Replacing in place needs
            // no node; if the index still refuses, the folio goes without
            // a shadow.
            let gone = match cur.compare_exchange(&mut g, key, Entry::Value(shadow)) {
                Ok(stored) => stored.is_ok(),
                Err(_) => cur.key(&g).ok().flatten() == key && cur.erase(&mut g).is_ok(),
            };
            removed += u64::from(gone);
        }
        drop(g);
        self.folios.fetch_sub(removed, Ordering::Relaxed);
        debug_assert_eq!(
            removed,
            ours.len() as u64,
            "a folio reclaim held locked was not in its mapping"
        );
    }

    /// Removes the shadows of up to `nodes` of this index's nodes that hold
    /// only shadows, the oldest first (those whose last folio left first).
    /// Returns the nodes removed.
    pub(crate) fn trim_shadow_nodes(&self, nodes: usize) -> usize {
        self.xa.shrink_value_nodes(nodes)
    }
}
