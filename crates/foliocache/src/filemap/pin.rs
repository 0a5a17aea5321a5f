//! Pins: reads that borrow the cache's bytes instead of copying them
//! ([`File::pin`](crate::File::pin)), for callers that parse in place (B-tree pages, SSTable
//! blocks, a VM's memory).
//!
//! # The protocol
//! A pin is a count in the folio's descriptor. A reader takes one without
//! any lock ([`Folio::try_pin`](crate::folio::Folio::try_pin)): it counts
//! itself and backs off if the folio is locked (both accesses `SeqCst`). Every writer of an
//! uptodate folio's bytes (a write's copy-in, truncation's zeroing of a cut
//! folio) holds the folio lock, and asks, under it, whether the folio is
//! pinned ([`LockedFolio::is_pinned`], the other side of the fence). So a
//! pin and a writer never both go ahead on one folio's bytes: either the
//! pin sees the lock and takes itself back, or the writer sees the pin.
//! Having the lock, the writer holds off new pins until it unlocks.
//!
//! A writer that finds its folio pinned does not wait for the pin (a pin
//! may be held for as long as its owner likes, by the thread that writes
//! next) when it can help it: it **copies** the folio into a new one, swaps the new one into
//! the file's index in place of the old (same index, order, marks, dirty
//! pages), and writes the copy ([`Mapping::writable`]; the kernel's folio
//! migration, `folio_migrate_mapping`, does the same swap). The old folio
//! leaves the file with its bytes unchanged; the pins keep it (their
//! references) until the last one goes, and then it is freed. So a pin is
//! a snapshot of its bytes as they were when it was taken, whatever
//! happens to the file meanwhile:
//! - a write of the range: the pin keeps the old bytes; reads (and new
//!   pins) see the new ones;
//! - truncation, or a hole punched, over the range: the pin keeps the old
//!   bytes (a folio wholly cut leaves the file as it would unpinned; one
//!   cut in part is copied before its tail is zeroed);
//! - reclaim: a pinned folio is referenced, and reclaim skips referenced
//!   folios, so a pin also keeps its bytes in memory;
//! - the [`Cache`](crate::Cache) handle dropped: the cache lives as long as
//!   any [`File`](crate::File) of it, and a pin borrows its `File`, so the file cannot
//!   go before its pins (the borrow checker refuses it).
//!
//! With no free folio for the copy (after a reclaim pass), a write waits
//! as an allocation does ([`AllocWait`](crate::mm::AllocWait): while the
//! cache frees or writes back something at least once a window), with no
//! folio locked, for memory or for the pins to go, trying again at each
//! step; then it fails with `OutOfMemory`, the folio unchanged. Short pins (a mount's read
//! reply pins its folio until the reply is written, and the woken reader
//! may write the page before that) so never fail a write; a pin held
//! longer than the wait does, as a cache full of them fails allocations.
//!
//! The one case where a writer waits for pins with locks held: truncation or a hole punch
//! that must zero part of a pinned folio that is dirty (or of a memory
//! file), when the cache has no free folio to copy it to even after
//! reclaim. Its data cannot be dropped and cannot be written over, so the
//! truncation waits until the pins go, holding the file's locks: if the
//! pin's holder meanwhile waits for the truncation (a read of the same
//! file that misses, which needs `invalidate_lock`), neither goes on. A
//! cache with room for one more folio never gets there.
//!
//! # What is pinned in place, and what is not
//! A range inside one cached, uptodate folio, whose lock is free, is
//! pinned in place. Anything else (not cached yet, across two folios,
//! locked by IO, a readahead marker, an uncached read) is read as
//! [`File::read_at`](crate::File::read_at) reads it, bringing it into the cache; then the pin is
//! tried in place again (a folio busy with a writer or IO a few times), and
//! if that still cannot be had (the range spans folios, the folio stayed
//! busy), the pin holds a copy of the bytes in its own buffer.
//! [`Pinned::is_borrowed`] says which. A pin in place is never torn: no
//! write was under way when it was taken, and none is while it lives. A
//! copy is what a read returns: a write racing it may show in part (some
//! bytes old, some new), as in a read.
//!
//! # Owned pins
//! An [`OwnedPin`] ([`File::pin_cached_owned`](crate::File::pin_cached_owned))
//! is a pin in place that owns what it borrows: the folio's pin and
//! reference, as a [`Pinned`]'s, and the cache itself (its `Arc`, which
//! keeps the arena mapped and the descriptors alive) instead of a borrow
//! of the file. So it is `'static`, and a buffer type built over an owner
//! (`bytes::Bytes::from_owner`) can hand it out: a hit that is a lookup
//! and a reference count, no copy. The protocol is the pin's, unchanged: a
//! writer copies the folio, reclaim skips it, the file closed or the
//! [`Cache`](crate::Cache) handle dropped leave its bytes as they were
//! (the file's last close takes its folios out of the index; a pinned one
//! stays referenced and is freed when its last pin goes).
//!
//! Owned pins are held for as long as their owner likes (a caller's
//! buffers), where a [`Pinned`] lives for a parse. A cache full of them
//! could neither evict nor copy for a writer, so the cache lends at most
//! a quarter (`LENT_SHARE`) of its memory to owned pins at a time, each folio counted
//! whole (a 4 KiB range of a 2 MiB folio holds 2 MiB): past that,
//! `pin_cached_owned` says `None` and the caller copies, as it would from
//! a [`Pinned`]. The check is made before the pin and the folio added
//! after, so racing threads may pass it by a folio each.

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use xarray::Entry;

use crate::arena::PAGE;
use crate::filemap::{FolioPtr, FolioRef, LockedFolio, Mapping};
use crate::folio::FolioFlags;
use crate::mm::CacheInner;
use crate::sync::Ordering;

/// Bytes of a file, borrowed from the cache where they can be
/// ([`File::pin`](crate::File::pin)). Dereferences to them as `&[u8]`; they do not change
/// while the pin lives (it is a snapshot: see the module documentation of
/// `pin.rs`, and [`File::pin`](crate::File::pin)).
pub struct Pinned<'f> {
    bytes: Bytes<'f>,
}

enum Bytes<'f> {
    /// Borrowed from a pinned folio: `len` bytes at `ptr`, inside it.
    Folio {
        folio: FolioRef<'f>,
        ptr: NonNull<u8>,
        len: usize,
    },
    /// A copy of the bytes in a buffer of the pin's own.
    Owned(Vec<u8>),
}

// SAFETY: a pin is a shared borrow of immutable bytes (the folio's are not
// written while it is pinned, see `Deref`), plus a folio reference, whose
// release (`Memory::put`) is thread-safe; sending it to another thread,
// or sharing it, hands out nothing a `&[u8]` would not.
unsafe impl Send for Pinned<'_> {}
// SAFETY: as for `Send`: `&Pinned` gives only `&[u8]` and the length.
unsafe impl Sync for Pinned<'_> {}

impl Pinned<'_> {
    /// Whether the bytes are borrowed from the cache (zero copy), rather
    /// than copied into a buffer of the pin's own.
    pub fn is_borrowed(&self) -> bool {
        matches!(self.bytes, Bytes::Folio { .. })
    }

    pub(crate) fn owned(v: Vec<u8>) -> Self {
        Pinned {
            bytes: Bytes::Owned(v),
        }
    }
}

impl std::ops::Deref for Pinned<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.bytes {
            // SAFETY: `ptr..ptr + len` lies inside the folio (checked when
            // the pin was made), whose bytes are initialised (it was
            // uptodate, which is never cleared while a folio is in use) and
            // stay allocated while `folio` holds its reference. Nothing
            // writes them while the pin is counted: every writer of an
            // uptodate folio's bytes holds its lock, asks `is_pinned` under
            // it, and writes a copy instead (`Mapping::writable`), and a
            // folio's other writers (its fill) write it before it is
            // uptodate. Racing readers only read. The borrow ends with
            // `self`, before `Drop` takes the pin back.
            Bytes::Folio { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
            Bytes::Owned(v) => v,
        }
    }
}

impl AsRef<[u8]> for Pinned<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        if let Bytes::Folio { folio, .. } = &self.bytes {
            // (Then `folio` drops its reference.)
            folio.unpin();
        }
    }
}

impl std::fmt::Debug for Pinned<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field("len", &self.len())
            .field("borrowed", &self.is_borrowed())
            .finish()
    }
}

/// The share of a cache's memory that owned pins may hold at once, as a
/// divisor: a quarter (see the module documentation of `pin.rs`).
pub(crate) const LENT_SHARE: usize = 4;

/// Bytes of a file borrowed from the cache in place, as a [`Pinned`] in
/// place, that own what they borrow: the folio's pin and reference, and
/// the cache (its reference count) rather than a borrow of the
/// [`File`](crate::File). A `'static` value to keep, send, or hand to an
/// owner-based buffer (`bytes::Bytes::from_owner(pin)`: the folio is
/// unpinned when the last clone goes). Made by
/// [`File::pin_cached_owned`](crate::File::pin_cached_owned).
///
/// A snapshot, as a [`Pinned`]: a write of its range goes to a copy of the
/// folio, reclaim skips the folio, and the file's close or the cache
/// handle's drop leave its bytes; the cache's memory is kept until the
/// last owned pin goes. At most a quarter of the cache is lent to owned
/// pins at a time.
pub struct OwnedPin {
    /// The cache: keeps the arena mapped and the descriptor table alive.
    cache: Arc<CacheInner>,
    /// The pinned folio's first arena page (its descriptor's index).
    page: u32,
    /// `len` bytes at `ptr`, inside the folio.
    ptr: NonNull<u8>,
    len: usize,
    /// The folio's bytes, counted in the cache's `lent_bytes`.
    lent: u64,
}

// SAFETY: as `Pinned`'s: a shared view of bytes nobody writes while the
// pin is counted, plus a pin and a reference whose release (`Folio::unpin`,
// `Memory::put`) and the gauge's are thread-safe, and an `Arc`.
unsafe impl Send for OwnedPin {}
// SAFETY: as for `Send`: `&OwnedPin` gives only `&[u8]` and the length.
unsafe impl Sync for OwnedPin {}

impl std::ops::Deref for OwnedPin {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: as `Pinned`'s `Bytes::Folio` (see its `Deref`): the
        // range lies inside the folio (checked when it was pinned), whose
        // bytes are initialised and not written while it is pinned (every
        // writer of an uptodate folio's bytes holds its lock, asks
        // `is_pinned` under it and writes a copy instead). The folio's
        // reference, taken by the lookup and put by `Drop`, keeps it from
        // being freed; `cache` keeps the arena's memory mapped. The borrow
        // ends with `self`, before `Drop`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for OwnedPin {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for OwnedPin {
    fn drop(&mut self) {
        let mem = &self.cache.mem;
        // The descriptor the pin was taken on: a referenced folio keeps
        // its first page (it is neither freed nor split while held).
        let folio = mem.folio(self.page);
        folio.unpin();
        mem.put(folio);
        self.cache
            .stats
            .lent_bytes
            .fetch_sub(self.lent, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for OwnedPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPin")
            .field("len", &self.len)
            .field("folio_bytes", &self.lent)
            .finish()
    }
}

/// Why a pin in place could not be had: `true` if its folio was busy
/// (locked, or swapped for a copy), which soon passes.
pub(crate) struct Busy(bool);

/// How many times a pin tries a busy folio again (yielding between) before
/// it settles for a copy. (Under loom, twice: each try is a lookup whose
/// every atomic multiplies the interleavings a model explores.)
const BUSY_TRIES: u32 = if cfg!(loom) { 2 } else { 64 };

/// Lets the thread holding a busy folio go on: a yield of the thread (of
/// loom's model thread, under loom).
fn busy_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// A locked folio whose bytes its holder may write: not pinned, and no pin
/// can start while the guard lives (it holds the lock). Made by
/// [`Mapping::writable`]; the functions that write a folio's bytes take it.
pub(crate) struct WritableFolio<'m>(LockedFolio<'m>);

impl<'m> WritableFolio<'m> {
    /// The lock guard, for what follows the writing.
    pub(crate) fn into_locked(self) -> LockedFolio<'m> {
        self.0
    }

    /// Fills the folio from the backing if it is not uptodate (a write's
    /// partial folio): [`Mapping::fill_folio`], which needs the guard
    /// itself (`&mut`), never handed out here: what it holds must stay a
    /// folio no pin borrows.
    pub(crate) fn fill_from(&mut self, m: &Mapping) -> io::Result<()> {
        m.fill_folio(&mut self.0)
    }
}

/// Whether a locked folio may be pinned. A folio not uptodate has no pin:
/// pins are taken on uptodate folios only, and the flag stays until the
/// folio is freed. (A pin backing off counts itself for a moment, which
/// need not make a writer copy.)
fn maybe_pinned(f: &LockedFolio<'_>) -> bool {
    f.test(FolioFlags::UPTODATE) && f.is_pinned()
}

impl<'m> std::ops::Deref for WritableFolio<'m> {
    type Target = LockedFolio<'m>;
    fn deref(&self) -> &LockedFolio<'m> {
        &self.0
    }
}

impl Mapping {
    /// A pin in place of `offset..offset + n` after a read brought it in
    /// (`File::pin`): a folio busy (locked by a writer or by IO, or just
    /// swapped for a copy) is tried again a while, then `None`.
    pub(crate) fn pin_busy(&self, offset: u64, n: usize) -> Option<Pinned<'_>> {
        // (The read counted the access and the hit or miss.) A folio
        // busy (locked by a writer or by IO, or just swapped for a
        // copy) is tried again a while: a pin in place is never torn,
        // where the copy just read may hold part of a racing write.
        for _ in 0..BUSY_TRIES {
            match self.pin_cached(offset, n, false, true) {
                Ok(p) => return Some(p),
                Err(Busy(true)) => busy_wait(),
                Err(Busy(false)) => break,
            }
        }
        None
    }

    /// Pins `offset..offset + n` in place if it lies in one cached,
    /// uptodate, unlocked folio of this mapping (not a readahead marker, not
    /// dropbehind: those take the read path, which deals with them).
    /// `count`: mark the access and count a hit, as a read's hit does.
    /// `prefetch`: prefetch the first bytes during the lookup, as a read's
    /// hit does (for a pin parsed at once; not for a lend, `pin_owned`).
    ///
    /// # Errors
    /// [`Busy`]`(true)` when the folio is there but busy (locked, or
    /// swapped out since the lookup): worth another try soon.
    pub(crate) fn pin_cached(
        &self,
        offset: u64,
        n: usize,
        count: bool,
        prefetch: bool,
    ) -> Result<Pinned<'_>, Busy> {
        let m = self;
        let (f, sequential) = m.get_for_read(offset, n, prefetch);
        let f = f.ok_or(Busy(false))?;
        let start = f.index() * PAGE;
        let ff = f.flags();
        let cache = m.inner();
        let base = cache.mem.arena.page_ptr(f.page()).as_ptr();
        let ptr = NonNull::new(base.wrapping_add((offset - start) as usize)).ok_or(Busy(false))?;
        if !crate::filemap::serves_hit(&f, ff, offset + n as u64) {
            return Err(Busy(false));
        }
        if !f.try_pin() {
            return Err(Busy(true));
        }
        // Still this file's: not swapped out for a copy by a writer, nor
        // truncated, between the lookup and the pin (its bytes would be
        // a moment old; the read path gives the current ones). And the
        // file still reaches the range's end (the caller's `n` came from
        // an earlier size): a folio filled after a truncate or collapse
        // set a smaller size holds zeros past it, as `Mapping::read`'s
        // hit checks.
        if f.mapping() != m.id() {
            f.unpin();
            return Err(Busy(true));
        }
        if m.size() < offset + n as u64 {
            f.unpin();
            return Err(Busy(false));
        }
        if count {
            // Counted as a read's hit is (`Mapping::read`'s hit path): its
            // age, and its pages shown to the curve's sample, so that the
            // curve of a cache read by pins (an object store's lent hits)
            // sees its hits, not only its misses. A folio the backing
            // filled, read for the first time, came from below: a miss to
            // the curve.
            let age = cache
                .lru()
                .read_access(&f, ff, sequential && offset > start);
            m.first_read(&f, ff, m.size());
            let memory = !ff.contains(FolioFlags::FRESH);
            let end = offset + n as u64;
            let file = m.curve_counts();
            // (One lookup of the thread's shard for every count.)
            let read = (n as u64, super::read::covered(offset, end));
            cache.stats.count_hit(memory.then_some(age), read, file);
            if n > 0 {
                let pages = (offset / PAGE, (end - 1) / PAGE);
                cache.stats.observe_read(m.sample_key, pages, memory, file);
            }
        }
        Ok(Pinned {
            bytes: Bytes::Folio {
                folio: f,
                ptr,
                len: n,
            },
        })
    }

    /// [`pin_cached`](Self::pin_cached) (counted as a hit) made an
    /// [`OwnedPin`], unless owned pins hold [`LENT_SHARE`] of the cache
    /// already (then `None`, nothing pinned or counted).
    pub(crate) fn pin_owned(&self, offset: u64, n: usize) -> Option<OwnedPin> {
        let cache = self.inner_arc();
        let share = (cache.mem.arena.capacity_bytes() / LENT_SHARE) as u64;
        if cache.stats.lent_bytes.load(Ordering::Relaxed) >= share {
            return None;
        }
        let pin = self.pin_cached(offset, n, true, false).ok()?;
        let Bytes::Folio { folio, ptr, len } = &pin.bytes else {
            return None;
        };
        let (ptr, len) = (*ptr, *len);
        let page = cache.mem.page(folio.folio());
        let lent = folio.nr_pages() * PAGE;
        cache.stats.lent_bytes.fetch_add(lent, Ordering::Relaxed);
        // The pin and the folio reference move to the owned pin, which
        // gives them back in its `Drop` (`FolioRef` holds nothing else).
        std::mem::forget(pin);
        Some(OwnedPin {
            cache: cache.clone(),
            page,
            ptr,
            len,
            lent,
        })
    }

    /// Makes a locked folio of this mapping writable: itself if it is not
    /// pinned, else a copy swapped in for it (see the module documentation
    /// of `pin.rs`), returned locked; the old folio leaves the mapping and
    /// unlocks, kept by its pins until they go.
    ///
    /// # Errors
    /// `OutOfMemory` when the folio is pinned and no free folio of its size
    /// could be had (after one reclaim pass); the folio is unlocked and
    /// unchanged.
    pub(crate) fn writable<'m>(&'m self, f: LockedFolio<'m>) -> io::Result<WritableFolio<'m>> {
        if !maybe_pinned(&f) {
            return Ok(WritableFolio(f));
        }
        self.unshare(f).map(WritableFolio).map_err(|(_, e)| e)
    }

    /// [`writable`](Self::writable) for truncation or a hole punch, which
    /// zero the cut part of a folio and cannot fail (the backing is cut
    /// already): with no memory for the copy, a clean folio leaves the
    /// mapping instead (`None`: it is read again from the cut backing when
    /// needed), and a dirty one (or a memory file's, whose only copy it is)
    /// is waited for until its pins go.
    pub(crate) fn writable_to_cut<'m>(&'m self, f: LockedFolio<'m>) -> Option<WritableFolio<'m>> {
        if !maybe_pinned(&f) {
            return Some(WritableFolio(f));
        }
        match self.unshare(f) {
            Ok(copy) => Some(WritableFolio(copy)),
            Err((f, _)) if !self.memfile && !f.test(FolioFlags::DIRTY) => {
                self.remove_locked(&f);
                None
            }
            Err((f, _)) => {
                // (The lock holds off new pins: the count only falls.)
                while f.is_pinned() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Some(WritableFolio(f))
            }
        }
    }

    /// Swaps a copy in for a pinned, locked folio of this mapping: the same
    /// index, order, index marks (dirty), dirty pages and aging bits; the
    /// copy is returned locked, the old folio leaves the mapping.
    fn unshare<'m>(
        &'m self,
        old: LockedFolio<'m>,
    ) -> Result<LockedFolio<'m>, (LockedFolio<'m>, io::Error)> {
        debug_assert_eq!(old.mapping(), self.id());
        let cache = self.inner();
        let Some(new) = self.new_folio_nowait(old.order()) else {
            return Err((
                old,
                io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    "foliocache: a write met a pinned folio (File::pin) and the cache has no free \
                     folio to copy it to",
                ),
            ));
        };
        let pages = old.nr_pages();
        copy_folio(cache, &old, &new);
        for bit in [FolioFlags::REFERENCED, FolioFlags::WORKINGSET] {
            if old.test(bit) {
                new.test_and_set(bit);
            }
        }
        if old.test(FolioFlags::ACTIVE) {
            // (The copy starts on the inactive list; its next access
            // activates it.)
            new.test_and_set(FolioFlags::REFERENCED);
        }
        new.mark_uptodate();
        new.get_many(pages as u32);
        new.set_mapping(self.id(), old.index());
        let key = Entry::Item(FolioPtr::new(&old)).key();
        // Replacing an entry in place keeps its order and marks (the dirty
        // mark) and needs no node: it does not fail while the old folio,
        // locked, is there. (If it did, nothing has changed yet.)
        let swapped = self.xa.compare_exchange(
            old.index(),
            Some(key),
            Some(Entry::Item(FolioPtr::new(&new))),
        );
        if let Err(e) = swapped {
            debug_assert!(false, "a locked folio left its mapping: {e:?}");
            new.set_mapping(0, old.index());
            new.put_many(pages as u32);
            return Err((
                old,
                io::Error::other("foliocache: a pinned folio could not be swapped for its copy"),
            ));
        }
        // The dirty pages move with the data (writeback, which would take
        // them, needs the old folio's lock, held here, and now finds the
        // new one, locked too).
        if old.test_and_clear(FolioFlags::DIRTY) {
            let (from, to) = (old.page().index() as usize, new.page().index() as usize);
            let unsaved = self.unsaved_marker();
            for (a, c) in cache.mem.dirty_bits.take_runs(from, pages as usize) {
                // Unsaved in the copy before the original's pages go.
                if let Some((seg, slot)) = unsaved {
                    seg.mark_unsaved((to + a) as u64, c as u64, slot, new.index() + a as u64);
                }
                cache.mem.dirty_bits.set(to + a, c);
            }
            self.guard_clear(&old);
            new.test_and_set(FolioFlags::DIRTY);
        }
        self.detach(&old);
        if !self.memfile {
            cache.lru().add_all([(new.folio(), None)], None);
        }
        let last = old.put_many(pages as u32);
        debug_assert!(!last, "the caller's reference keeps the folio");
        cache.stats.pin_copies.fetch_add(1, Ordering::Relaxed);
        Ok(new)
    }
}

/// Copies a folio's bytes into a fresh one of the same order.
fn copy_folio(cache: &crate::mm::CacheInner, old: &LockedFolio<'_>, new: &LockedFolio<'_>) {
    assert_eq!(old.order(), new.order(), "copy_folio: orders differ");
    let len = (old.nr_pages() * PAGE) as usize;
    let src = cache.mem.arena.page_ptr(old.page()).as_ptr();
    let dst = cache.mem.arena.page_ptr(new.page()).as_ptr();
    // SAFETY: both folios are referenced and locked by the caller, `len`
    // bytes each (same order), distinct folios of the arena. `new` is in
    // no mapping: nobody else can reach its bytes. `old`'s may be read
    // meanwhile (readers copying out, pins), never written: its writers
    // hold its lock. So the source is shared bytes (read through the shared
    // copy) and the destination the caller's own.
    unsafe { crate::copy::copy_from_shared(src, dst, len) };
}
