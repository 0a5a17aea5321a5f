//! Truncation and hole punching (`truncate_inode_pages_range`,
//! `truncate_setsize`), `fallocate`'s growth and `discard`: the file's
//! size and backing change, and the folios of the range go. Taking a
//! folio out of the page cache is the filemap's (`filemap/remove.rs`,
//! as `mm/filemap.c` keeps `__filemap_remove_folio` and
//! `delete_from_page_cache_batch`); this module decides which go.

use xarray::{Entry, EntryKey};

use crate::arena::PAGE;
use crate::filemap::{Mapping, MappingEntry};
use crate::folio::FolioFlags;
use std::io;

/// `set_len`'s work (also an `O_TRUNC` open's of a file already
/// open): see [`File::set_len`].
pub(crate) fn truncate_to(m: &Mapping, size: u64) -> io::Result<()> {
    let _i = m.inode.lock.write();
    truncate_to_locked(m, size)
}

/// [`File::allocate`]'s work: the backing reserves the range (a memory
/// file has nothing to reserve: its folios are made as it is written),
/// then, unless `keep_size`, the file grows to the range's end if it is
/// shorter, the size checked and set in one hold of `inode_lock` (a
/// write that extends the file meanwhile is not cut back).
///
/// [`File::allocate`]: crate::File::allocate
pub(crate) fn allocate(m: &Mapping, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
    let _i = m.inode.lock.write();
    if !m.memfile {
        m.backing().allocate(offset, len)?;
    }
    let end = offset + len;
    if !keep_size && end > m.size() {
        truncate_to_locked(m, end)?;
    }
    Ok(())
}

/// [`truncate_to`] for a caller holding
/// `inode_lock` exclusively.
fn truncate_to_locked(m: &Mapping, size: u64) -> io::Result<()> {
    let inv = InvalidateLocked::new(m);
    let old = m.size();
    if size == old {
        return Ok(());
    }
    // Writeback is held off until the folios past the end are gone, so
    // none is written back past it.
    let _wb = m.wb.lock();
    if size > old {
        // Growing: the backing first (if it refuses, nothing has
        // changed), then readers see the gap, which reads as zeros (past
        // the old end, bytes in the cache are zero already).
        if !m.memfile {
            m.backing().set_len(size)?;
            m.wb.set_to(size);
        }
        m.set_size(size);
        return Ok(());
    }
    // Shrinking: readers stop at the new size before the backing is cut,
    // as `truncate_setsize` sets `i_size` before `truncate_pagecache` and
    // the filesystem's truncate. A read in flight past the new end (a
    // readahead folio, locked, its IO on the engine) that ends after the
    // cut fills its folio with zeros; a reader that loaded the old size
    // reads the size again once the folio is uptodate (`filemap/read.rs`,
    // as `filemap_read` does) and stops at the new one. Cut first, the
    // old size still showed and the reader copied the zeros. A backing
    // that refuses: the old size again, nothing else changed (a reader
    // meanwhile may have seen the file end early, as beside a truncate
    // that succeeds). Then the folios past the end go, waiting for reads
    // in flight.
    m.set_size(size);
    if !m.memfile {
        if let Err(e) = m.backing().set_len(size) {
            m.set_size(old);
            return Err(e);
        }
        m.wb.set_to(size);
    }
    inv.truncate_bytes(size, u64::MAX);
    Ok(())
}

/// [`File::discard`]'s work.
///
/// [`File::discard`]: crate::File::discard
pub(crate) fn discard(m: &Mapping) -> io::Result<()> {
    if m.memfile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "discard: a memory file's folios are its only copy of its data",
        ));
    }
    let _i = m.inode.lock.write();
    let inv = InvalidateLocked::new(m);
    // No writeback runs meanwhile: none writes back a folio about to go,
    // and none starts on one after its removal was decided.
    let _wb = m.wb.lock();
    // The size first: if the backing cannot say, nothing has changed.
    let size = m.backing().len()?;
    inv.truncate_bytes(0, u64::MAX);
    // No folio is left and none can come until the guard goes: readers
    // from now on read the backing, to its size.
    m.set_size(size);
    Ok(())
}

/// A file's `invalidate_lock` held exclusively (the kernel's
/// `filemap_invalidate_lock`): the proof that removing a range's folios
/// races no reader adding one.
pub(crate) struct InvalidateLocked<'m> {
    mapping: &'m Mapping,
    _guard: crate::sync::RwLockWriteGuard<'m, ()>,
}

impl<'m> InvalidateLocked<'m> {
    /// Takes `m`'s `invalidate_lock` exclusively: no reader creates a
    /// folio of the file until the guard goes, so the folios of a range
    /// can be taken out for good ([`truncate_bytes`](Self::truncate_bytes)).
    pub(crate) fn new(m: &'m Mapping) -> InvalidateLocked<'m> {
        InvalidateLocked {
            mapping: m,
            _guard: m.invalidate_lock.write(),
        }
    }

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
