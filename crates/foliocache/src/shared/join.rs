//! A group its processes join only once one of them makes another
//! (`foliocache run`'s processes at their first `fork`): the cache made
//! deferred, nothing faulted in until its creator starts it, and the
//! header's mark that the group was joined, from when every process that
//! attaches serves its files from the cache at once (docs/design.md,
//! section 13).

use std::sync::atomic::Ordering;

use super::SharedCache;

impl SharedCache {
    /// A new shared cache of `capacity` bytes, as [`new`](SharedCache::new),
    /// for a group its processes join only once one of them makes another
    /// ([`join`](Self::join): `foliocache run`'s processes at their first
    /// `fork`): nothing is faulted in and no 2 MiB page made until the
    /// creator calls [`start_huge_pages`](Self::start_huge_pages), and
    /// then only as the pages are used, so a group no process joins costs
    /// only its metadata's first touch.
    pub fn new_deferred(capacity: u64) -> std::io::Result<SharedCache> {
        Ok(SharedCache::made(super::seg::Seg::create(
            capacity / super::seg::PAGE,
        )?))
    }

    /// In the process that made the cache with
    /// [`new_deferred`](Self::new_deferred): starts making its pages 2
    /// MiB pages, on a thread of this process, as the group's use reaches
    /// them: the metadata at once, each 2 MiB of pages once the pages
    /// given out come within 16 MiB of it (where [`new`](SharedCache::new)
    /// faults in and collapses all of it at once). Once only; a second
    /// call does nothing.
    pub fn start_huge_pages(&self) {
        if self.inner.collapser.load(Ordering::Relaxed) == 0 {
            self.collapse_as_filled();
        }
    }

    /// Marks the group joined: every process that attaches from now on
    /// ([`joined`](Self::joined)) serves its files from this cache at
    /// once. Never undone.
    pub fn join(&self) {
        self.inner.seg.header().joined.store(1, Ordering::Release);
    }

    /// Whether a process joined the group ([`join`](Self::join)).
    pub fn joined(&self) -> bool {
        self.inner.seg.header().joined.load(Ordering::Acquire) != 0
    }
}
