//! Taking folios out of a file: truncation and hole punching
//! (`truncate_inode_pages_range`), invalidation (`invalidate_mapping_pages`,
//! `POSIX_FADV_DONTNEED`), the removal of a folio whose read failed, an
//! uncached folio's drop at the end of its use (`folio_end_dropbehind`),
//! and the removal of every folio when a mapping goes.

use xarray::{Entry, EntryKey, EntryRef, Item};

use crate::arena::PAGE;
use crate::filemap::{FolioPtr, FolioRef, LockedFolio, Mapping, MappingEntry};
use crate::folio::{Folio, FolioFlags};
use crate::sync::Ordering;
use std::io;

impl Mapping {
    /// `set_len`'s work (also an `O_TRUNC` open's of a file already
    /// open): see [`File::set_len`].
    pub(crate) fn truncate_to(&self, size: u64) -> io::Result<()> {
        let _i = self.inode_lock.write();
        self.truncate_to_locked(size)
    }

    /// [`File::allocate`]'s work: the backing reserves the range (a memory
    /// file has nothing to reserve: its folios are made as it is written),
    /// then, unless `keep_size`, the file grows to the range's end if it is
    /// shorter, the size checked and set in one hold of `inode_lock` (a
    /// write that extends the file meanwhile is not cut back).
    ///
    /// [`File::allocate`]: crate::File::allocate
    pub(crate) fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        let _i = self.inode_lock.write();
        if !self.memfile {
            self.backing().allocate(offset, len)?;
        }
        let end = offset + len;
        if !keep_size && end > self.size() {
            self.truncate_to_locked(end)?;
        }
        Ok(())
    }

    /// [`truncate_to`](Self::truncate_to) for a caller holding
    /// `inode_lock` exclusively.
    fn truncate_to_locked(&self, size: u64) -> io::Result<()> {
        let inv = self.lock_invalidate();
        let old = self.size();
        if size == old {
            return Ok(());
        }
        // The backing first: if it refuses, nothing has changed. Writeback
        // is held off until the folios past the end are gone, so none is
        // written back past it.
        let _wb = self.wb_lock.lock();
        if !self.memfile {
            self.backing().set_len(size)?;
        }
        // Readers stop at the new size; then the folios past it go. (Past
        // the old end, bytes in the cache are zero already: a grown file's
        // gap reads as zeros.)
        self.set_size(size);
        if size < old {
            inv.truncate_bytes(size, u64::MAX);
        }
        Ok(())
    }

    /// [`File::discard`]'s work.
    ///
    /// [`File::discard`]: crate::File::discard
    pub(crate) fn discard(&self) -> io::Result<()> {
        if self.memfile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "discard: a memory file's folios are its only copy of its data",
            ));
        }
        let _i = self.inode_lock.write();
        let inv = self.lock_invalidate();
        // No writeback runs meanwhile: none writes back a folio about to go,
        // and none starts on one after its removal was decided.
        let _wb = self.wb_lock.lock();
        // The size first: if the backing cannot say, nothing has changed.
        let size = self.backing().len()?;
        inv.truncate_bytes(0, u64::MAX);
        // No folio is left and none can come until the guard goes: readers
        // from now on read the backing, to its size.
        self.set_size(size);
        Ok(())
    }

    /// Takes `invalidate_lock` exclusively: no reader creates a folio of
    /// this file until the guard goes, so the folios of a range can be
    /// taken out for good ([`InvalidateLocked::truncate_bytes`]).
    pub(crate) fn lock_invalidate(&self) -> InvalidateLocked<'_> {
        InvalidateLocked {
            mapping: self,
            _guard: self.invalidate_lock.write(),
        }
    }
}

/// A file's `invalidate_lock` held exclusively (the kernel's
/// `filemap_invalidate_lock`): the proof that removing a range's folios
/// races no reader adding one.
pub(crate) struct InvalidateLocked<'m> {
    mapping: &'m Mapping,
    _guard: crate::sync::RwLockWriteGuard<'m, ()>,
}

impl InvalidateLocked<'_> {
    /// The folios and shadows of bytes `from..to`: folios lying wholly
    /// inside go (dirty or not: their data is being cut), the cut part of
    /// the others is zeroed, shadows inside go (`truncate_inode_pages_range`,
    /// for truncation and hole punching). Waits for folio locks (and so for
    /// IO). No reader adds a folio here meanwhile: this guard holds
    /// `invalidate_lock`.
    pub(crate) fn truncate_bytes(&self, from: u64, to: u64) {
        let m = self.mapping;
        if from >= to {
            return;
        }
        let first = from / PAGE;
        let last = (to - 1) / PAGE;
        let mut index = first;
        // The next entry at or after `index`, each time round.
        while let Some((i, e)) = m.xa.find(index, last) {
            let span = 1u64 << m.xa.get_order(i);
            let base = i & !(span - 1);
            let next = base.saturating_add(span).max(i + 1);
            match e {
                Entry::Value(v) => {
                    if base * PAGE >= from && (base + span) * PAGE <= to {
                        let _ = m.xa.compare_exchange(i, Some(EntryKey::Value(v)), None);
                    }
                }
                Entry::Item(_) => {
                    let Some(MappingEntry::Folio(f)) = m.get_entry(i) else {
                        // Evicted under us: its shadow goes next time round.
                        index = i;
                        continue;
                    };
                    let f = f.lock();
                    if f.mapping() != m.id() || !f.contains(i) {
                        // Removed while we waited: look again.
                        index = i;
                        continue;
                    }
                    let fs = f.index() * PAGE;
                    let fe = fs + f.nr_pages() * PAGE;
                    if fs >= from && fe <= to {
                        f.test_and_clear(FolioFlags::DROPBEHIND);
                        m.remove_locked(&f);
                    } else if f.test(FolioFlags::UPTODATE) {
                        let a = from.max(fs);
                        let b = to.min(fe);
                        // (A folio a pin borrows is copied first, or, with
                        // no memory for the copy, goes if clean: see
                        // `writable_to_cut`.)
                        if let Some(f) = m.writable_to_cut(f) {
                            m.zero_folio(&f, (a - fs) as usize, (b - a) as usize);
                        }
                    }
                }
            }
            if next > last || next == 0 {
                break;
            }
            index = next;
        }
    }
}

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
