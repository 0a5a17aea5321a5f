//! A cache's memory: the arena, the descriptor table over its pages, and
//! the pages' dirty bits (the kernel's per-block dirty state of iomap).

use std::fmt;

use crate::arena::{Arena, PageId};

use super::{Folio, FolioFlags, FolioTable};

/// A cache's memory: the arena, the descriptor table over its pages, and
/// the pages' dirty bits. Folio references and locks ([`FolioRef`],
/// [`LockedFolio`]) point here, to give their folio back when the last
/// reference goes. Allocation that reclaims when the arena is empty is the
/// cache's (`CacheInner::alloc_folio`): this takes only what is free.
pub(crate) struct Memory {
    pub(crate) arena: Arena,
    pub(crate) table: FolioTable,
    /// One bit per arena page: dirty (written since its folio was last
    /// written back). A large folio written in a few places writes back
    /// only those pages (the kernel's per-block dirty state of iomap). A
    /// folio's bits change only under its lock (or while it is free);
    /// neighbouring small folios share words, hence atomic bit operations.
    pub(crate) dirty_bits: PageBits,
    /// The guardian's state, when the cache has one: the arena is then in
    /// its segment, where each page's unsaved bit and owner are kept
    /// (docs/design.md, section 12).
    pub(crate) guard: Option<crate::guardian::Guard>,
}

impl Memory {
    /// The memory of an arena, with a descriptor table over its pages, and
    /// the guardian's state if the cache has one.
    pub(crate) fn new(
        arena: Arena,
        table: FolioTable,
        guard: Option<crate::guardian::Guard>,
    ) -> Self {
        let pages = arena.capacity_pages();
        Memory {
            arena,
            table,
            dirty_bits: PageBits::new(pages),
            guard,
        }
    }

    /// The folio of arena page `page`.
    pub(crate) fn folio(&self, page: u32) -> &Folio {
        self.table
            .get(page as usize)
            .expect("a page of this cache's arena")
    }

    /// The arena page of `f`, a folio of this cache.
    pub(crate) fn page(&self, f: &Folio) -> u32 {
        self.table
            .page_of(f)
            .expect("folio from this cache's table") as u32
    }

    /// A free folio of exactly `order`, with one reference (the caller's)
    /// and in no mapping; `None` when the arena has no free block of that
    /// order.
    pub(crate) fn alloc(&self, order: u32) -> Option<&Folio> {
        let p = self.arena.alloc(order)?;
        let f = self.folio(p.index());
        f.init(order, 0);
        Some(f)
    }

    /// Up to `n` free folios of exactly `order`, in one hold of the
    /// arena's lock: each with one reference, in no mapping. Returns how
    /// many were added to `out`.
    pub(crate) fn alloc_bulk<'c>(
        &'c self,
        order: u32,
        n: usize,
        out: &mut Vec<&'c Folio>,
    ) -> usize {
        let mut pages = Vec::with_capacity(n);
        let got = self.arena.alloc_bulk(order, n, &mut pages);
        for p in pages {
            let f = self.folio(p.index());
            f.init(order, 0);
            out.push(f);
        }
        got
    }

    /// Gives a folio whose last reference was dropped back to the arena.
    pub(crate) fn free_folio(&self, f: &Folio) {
        let (page, order) = self.released(f);
        if let Err(e) = self.arena.free(page, order) {
            // The descriptor and the arena disagree: a bug, never user input.
            log::error!("foliocache: freeing folio {f:?}: {e}");
            debug_assert!(false, "freeing folio {f:?}: {e}");
        }
    }

    /// Frees folios as [`free_folio`](Self::free_folio) does, giving
    /// their pages back to the arena in one hold of its lock.
    pub(crate) fn free_folios(&self, folios: &[&Folio]) {
        let blocks: Vec<_> = folios.iter().map(|f| self.released(f)).collect();
        if let Err((i, e)) = self.arena.free_bulk(&blocks) {
            // As in `free_folio`: a bug, never user input.
            let f = folios[i];
            log::error!("foliocache: freeing folio {f:?}: {e}");
            debug_assert!(false, "freeing folio {f:?}: {e}");
        }
    }

    /// The block of `f`, unreferenced, in no mapping and on no list, on its
    /// way back to the arena: its pages' dirty bits cleared (already, unless
    /// a dirty folio was dropped: a new owner of these pages starts clean).
    fn released(&self, f: &Folio) -> (PageId, u32) {
        debug_assert_eq!(f.refcount(), 0);
        debug_assert_eq!(f.mapping(), 0);
        debug_assert!(!f.test(FolioFlags::LRU), "freeing a folio on a list: {f:?}");
        let page = PageId::new(self.page(f));
        self.dirty_bits
            .clear(page.index() as usize, f.nr_pages() as usize);
        (page, f.order())
    }

    /// Drops one reference; frees the folio if it was the last.
    pub(crate) fn put(&self, f: &Folio) {
        if f.put() {
            self.free_folio(f);
        }
    }
}

/// What owns a cache's [`Memory`] and keeps it alive: an IO in flight
/// holds it (`EngineReads`) so the arena stays mapped until the read
/// completes.
pub(crate) trait MemoryOwner: Send + Sync + 'static {
    /// The memory owned.
    fn memory(&self) -> &Memory;
}

/// A bitmap with one bit per arena page (see [`Memory::dirty_bits`]).
/// Its words are std atomics even under loom: a folio's bits change only
/// under its folio lock, which the models do see; the atomics only keep
/// neighbouring folios' bits in one word apart.
#[allow(clippy::disallowed_types)]
pub(crate) struct PageBits(Box<[std::sync::atomic::AtomicU64]>);

impl PageBits {
    #[allow(clippy::disallowed_types)]
    pub(crate) fn new(pages: usize) -> PageBits {
        PageBits(
            (0..pages.div_ceil(64))
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
        )
    }

    /// Bytes of the bitmap.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.0)
    }

    /// The words and masks covering bits `start..start + n`.
    fn spans(start: usize, n: usize) -> impl Iterator<Item = (usize, u64)> {
        let end = start + n;
        let mut at = start;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let word = at / 64;
            let lo = at % 64;
            let hi = (end - word * 64).min(64);
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            at = word * 64 + hi;
            Some((word, mask))
        })
    }

    /// Sets bits `start..start + n`; returns how many were clear.
    pub(crate) fn set(&self, start: usize, n: usize) -> u64 {
        let mut newly = 0;
        for (w, m) in Self::spans(start, n) {
            let old = self.0[w].fetch_or(m, std::sync::atomic::Ordering::Relaxed);
            newly += u64::from((m & !old).count_ones());
        }
        newly
    }

    /// Clears bits `start..start + n`; returns how many were set.
    pub(crate) fn clear(&self, start: usize, n: usize) -> u64 {
        let mut was = 0;
        for (w, m) in Self::spans(start, n) {
            let old = self.0[w].fetch_and(!m, std::sync::atomic::Ordering::Relaxed);
            was += u64::from((m & old).count_ones());
        }
        was
    }

    /// Clears bits `start..start + n` and returns the runs that were set,
    /// as (first bit relative to `start`, count), in order.
    pub(crate) fn take_runs(&self, start: usize, n: usize) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (w, m) in Self::spans(start, n) {
            let old = self.0[w].fetch_and(!m, std::sync::atomic::Ordering::Relaxed) & m;
            let mut bits = old;
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let at = w * 64 + b - start;
                match runs.last_mut() {
                    Some((first, count)) if *first + *count == at => *count += 1,
                    _ => runs.push((at, 1)),
                }
            }
        }
        runs
    }
}

/// The arena page of one of `mem`'s descriptors.
pub(super) fn page_of(mem: &Memory, folio: &Folio) -> PageId {
    PageId::new(mem.page(folio))
}

impl fmt::Debug for Folio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Folio")
            .field("index", &self.index())
            .field("order", &self.order())
            .field("refcount", &self.refcount())
            .field("mapping", &self.mapping())
            .field("flags", &self.flags())
            .finish()
    }
}
