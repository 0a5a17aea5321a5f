//! What holds a folio: a counted reference ([`FolioRef`]), a lock
//! ([`LockedFolio`]), a folio frozen at its last reference on its way back
//! to the arena ([`FrozenFolio`]), and a batch of freed folios given back
//! at once ([`FreeBatch`]).

use std::fmt;

use crate::arena::PageId;
use crate::sync::{fence, Ordering};

use super::{page_of, Folio, Memory};

/// A counted reference on a folio of a [`Mapping`](crate::filemap::Mapping),
/// dropped with this value. Dereferences to the [`Folio`], whose state it
/// can read; [`lock`](Self::lock) turns it into a [`LockedFolio`].
///
/// The folio may leave its mapping while the reference is held (truncated,
/// or evicted once nothing else holds it): its memory is not reused until
/// the last reference goes, but check [`Folio::mapping`] under the lock
/// before relying on where it is.
pub struct FolioRef<'m> {
    pub(super) mem: &'m Memory,
    pub(super) folio: &'m Folio,
}

impl<'m> FolioRef<'m> {
    /// Wraps a reference the caller already took on `folio`.
    pub(crate) fn adopt(mem: &'m Memory, folio: &'m Folio) -> Self {
        FolioRef { mem, folio }
    }

    /// Takes another reference on `folio`, which the caller holds one on.
    fn another(mem: &'m Memory, folio: &'m Folio) -> Self {
        folio.get_many(1);
        FolioRef { mem, folio }
    }

    /// The descriptor, for as long as the mapping lives.
    pub fn folio(&self) -> &'m Folio {
        self.folio
    }

    /// The folio's arena page (its first).
    pub(crate) fn page(&self) -> PageId {
        page_of(self.mem, self.folio)
    }

    /// Takes the folio lock, sleeping while another thread holds it (the
    /// kernel's `folio_lock`). The folio may have left its mapping while
    /// this thread slept: check [`Folio::mapping`] on the guard.
    ///
    /// # Locking
    /// Sleeps. Never call it holding a lock the lock order puts after the
    /// folio lock, or another folio's lock of the same file at a higher
    /// index (see the crate documentation).
    pub fn lock(self) -> LockedFolio<'m> {
        self.folio.lock();
        self.into_locked()
    }

    /// Takes the folio lock if it is free, never sleeping
    /// (`folio_trylock`).
    ///
    /// # Errors
    /// The reference itself, when another thread holds the lock.
    pub fn try_lock(self) -> Result<LockedFolio<'m>, FolioRef<'m>> {
        if self.folio.trylock() {
            Ok(self.into_locked())
        } else {
            Err(self)
        }
    }

    /// This reference, now owned by a guard of the lock the caller took.
    fn into_locked(self) -> LockedFolio<'m> {
        let (mem, folio) = (self.mem, self.folio);
        // (The reference moves to the guard: `FolioRef` holds nothing else.)
        std::mem::forget(self);
        LockedFolio { mem, folio }
    }
}

impl Clone for FolioRef<'_> {
    /// Another reference on the same folio.
    fn clone(&self) -> Self {
        FolioRef::another(self.mem, self.folio)
    }
}

impl std::ops::Deref for FolioRef<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Drop for FolioRef<'_> {
    fn drop(&mut self) {
        self.mem.put(self.folio);
    }
}

impl fmt::Debug for FolioRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.folio.fmt(f)
    }
}

/// A folio locked by this thread, with a reference: the lock is released
/// when the guard goes ([`unlock`](Self::unlock), or drop), so an early
/// return cannot leave a folio locked.
///
/// The lock is what lets its holder change the folio: fill it while it is
/// not uptodate (no reader copies out of it then), write or zero its bytes,
/// take it out of its mapping. The functions of [`filemap`](crate::filemap)
/// that need a locked folio take this guard, and the lookups that lock
/// return it. A read started on locked folios hands their guards to the
/// IO's completion, which unlocks them.
#[must_use = "dropping the guard unlocks the folio at once"]
pub struct LockedFolio<'m> {
    pub(super) mem: &'m Memory,
    pub(super) folio: &'m Folio,
}

impl<'m> LockedFolio<'m> {
    /// Releases the lock, waking its waiters, and keeps the reference.
    pub fn unlock(self) -> FolioRef<'m> {
        let (mem, folio) = (self.mem, self.folio);
        // (The unlock is done here and the reference handed on.)
        std::mem::forget(self);
        folio.unlock();
        FolioRef { mem, folio }
    }

    /// Another reference on the folio (the lock stays with this guard).
    pub fn to_ref(&self) -> FolioRef<'m> {
        FolioRef::another(self.mem, self.folio)
    }

    /// The descriptor, for as long as the mapping lives.
    pub fn folio(&self) -> &'m Folio {
        self.folio
    }

    /// The folio's arena page (its first).
    pub(crate) fn page(&self) -> PageId {
        page_of(self.mem, self.folio)
    }

    /// Whether the folio's bytes are pinned ([`crate::Pinned`]): a writer
    /// holding the lock asks before it writes them, and a folio that is
    /// pinned gets a copy to write instead (`Mapping::unshare`). With the
    /// lock held no new pin can start (a pin backs off a locked folio), so
    /// a `false` stays true until this guard goes. The locker's side of the
    /// protocol of [`Folio::try_pin`].
    pub(crate) fn is_pinned(&self) -> bool {
        fence(Ordering::SeqCst);
        self.folio.pins.load(Ordering::Acquire) != 0
    }

    /// Marks the folio uptodate without filling it: its bytes are whatever
    /// its memory held (zeros when fresh, else a previous folio's). For the
    /// population benchmark, which measures the grab alone.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn mark_uptodate_unfilled(&self) {
        self.folio.mark_uptodate();
    }

    /// A fresh folio from the allocator (one reference, the caller's; in no
    /// mapping), locked: nobody else can know of it, so the lock is free.
    pub(crate) fn new_fresh(mem: &'m Memory, folio: &'m Folio) -> Self {
        let locked = folio.trylock();
        debug_assert!(locked, "a fresh folio is unlocked");
        LockedFolio { mem, folio }
    }

    /// Reclaim's freeze (`folio_ref_freeze`): sets the count from `refs`
    /// (the cache's and this guard's) to zero if nobody else holds a
    /// reference, so no lookup can take one.
    ///
    /// # Errors
    /// The guard itself, when others hold references.
    pub(crate) fn freeze(self, refs: u32) -> Result<FrozenFolio<'m>, LockedFolio<'m>> {
        if !self.folio.freeze(refs) {
            return Err(self);
        }
        let (mem, folio) = (self.mem, self.folio);
        // (The references, this guard's among them, are frozen away.)
        std::mem::forget(self);
        Ok(FrozenFolio {
            mem,
            folio,
            refs: refs - 1,
        })
    }
}

/// A locked folio whose count reclaim froze to zero: no lookup can take a
/// reference, so once it is out of its mapping its pages can go back to
/// the arena ([`free_into`](Self::free_into)). Dropped instead, it is unfrozen (the
/// cache's references restored) and unlocked.
pub(crate) struct FrozenFolio<'m> {
    mem: &'m Memory,
    folio: &'m Folio,
    /// The cache's references, restored if the folio stays.
    refs: u32,
}

impl<'m> FrozenFolio<'m> {
    /// Unlocks the folio, now in no mapping, and adds it to `batch`, which
    /// frees it with the others of the batch.
    pub(crate) fn free_into(self, batch: &mut FreeBatch<'m>) {
        let folio = self.folio;
        debug_assert!(std::ptr::eq(self.mem, batch.mem));
        std::mem::forget(self);
        debug_assert_eq!(folio.mapping(), 0, "freeing a folio still in a mapping");
        folio.unlock();
        batch.folios.push(folio);
    }
}

/// Folios of one cache, unreferenced and in no mapping, to be freed
/// together ([`Memory::free_folios`]: one hold of the arena's lock)
/// when the batch drops. Only [`FrozenFolio::free_into`] adds to it, so
/// every folio in it is one nobody else can reach.
pub(crate) struct FreeBatch<'c> {
    mem: &'c Memory,
    folios: Vec<&'c Folio>,
}

impl<'c> FreeBatch<'c> {
    /// An empty batch with room for `n` folios.
    pub(crate) fn with_capacity(mem: &'c Memory, n: usize) -> Self {
        FreeBatch {
            mem,
            folios: Vec::with_capacity(n),
        }
    }
}

impl Drop for FreeBatch<'_> {
    fn drop(&mut self) {
        if !self.folios.is_empty() {
            self.mem.free_folios(&self.folios);
        }
    }
}

impl std::ops::Deref for FrozenFolio<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Drop for FrozenFolio<'_> {
    fn drop(&mut self) {
        self.folio.unfreeze(self.refs);
        self.folio.unlock();
    }
}
