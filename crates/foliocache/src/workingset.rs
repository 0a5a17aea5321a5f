//! Eviction shadows (`mm/workingset.c`): what an evicted folio leaves in
//! its index slot. Reclaim replaces the folio's entry with a value entry of
//! the same order that records the cache's eviction clock at that moment
//! and whether the folio was part of the working set (`ACTIVE`). A later
//! add over the slot gets the shadow back ([`Mapping::add_folio`] returns
//! it), which is what refault detection reads.
//!
//! The clock (`nonresident_age`) counts pages evicted from the cache, as
//! the kernel's `lruvec->nonresident_age` does; it is truncated to the bits
//! a value entry holds, and distances are taken modulo that width.
//!
//! [`Mapping::add_folio`]: crate::filemap::Mapping::add_folio

use crate::folio::{Folio, FolioFlags};
use crate::lru::{Lists, Lruv};
use crate::stats::FileCounts;

use xarray::MAX_VALUE;

/// Bits of the eviction clock a shadow keeps (one bit is the workingset flag).
pub(crate) const SHADOW_AGE_BITS: u32 = MAX_VALUE.count_ones() - 1;
const AGE_MASK: u64 = (1 << SHADOW_AGE_BITS) - 1;

/// A decoded eviction shadow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shadow {
    /// The cache's eviction clock (pages evicted so far, truncated to
    /// `SHADOW_AGE_BITS`) when the folio left.
    pub age: u64,
    /// The folio was on the active list (part of the working set) when it
    /// was evicted.
    pub workingset: bool,
}

impl Shadow {
    /// The value entry stored in the index.
    pub fn pack(self) -> u64 {
        ((self.age & AGE_MASK) << 1) | self.workingset as u64
    }

    /// Decodes a value entry found in a mapping's index.
    pub fn unpack(v: u64) -> Shadow {
        Shadow {
            age: (v >> 1) & AGE_MASK,
            workingset: v & 1 != 0,
        }
    }

    /// Pages evicted between this shadow's eviction and clock `now`
    /// (modulo the clock's width).
    pub fn distance(self, now: u64) -> u64 {
        now.wrapping_sub(self.age) & AGE_MASK
    }
}

/// What [`File::cachestat`](crate::File::cachestat) found in a range, in
/// pages (the kernel's `struct cachestat`, same fields and rules: a large
/// folio or shadow straddling an edge counts only its pages inside; the
/// walk takes no lock and no reference, so the figures may be stale).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages held by a folio in the cache.
    pub cached: u64,
    /// ... whose folio is dirty.
    pub dirty: u64,
    /// ... whose folio is under writeback.
    pub writeback: u64,
    /// Pages holding an eviction shadow (evicted by reclaim, not dropped by
    /// invalidation, truncation or drop-behind, which leave none).
    pub evicted: u64,
    /// ... whose shadow passes the refault test now: read again, they would
    /// come back active (`workingset_refault`'s test).
    pub recently_evicted: u64,
}

/// The refault test for a folio added over shadow `v`, under the LRU
/// lock (`lists` is the guard's): counts the refault (for its file's
/// curve too, `file`, if kept), and activates the
/// folio (returns true) when the pages evicted or activated since its
/// eviction are no more than the active list holds: had the active list
/// been that much smaller, it would have stayed. A dropbehind folio is
/// never activated (an uncached read changes no folio's LRU state).
/// (`workingset_refault`.)
pub(crate) fn refault(
    lru: &Lruv<'_>,
    lists: &Lists,
    f: &Folio,
    v: u64,
    file: Option<&FileCounts>,
) -> bool {
    lru.stats().refaults.add(1);
    let shadow = Shadow::unpack(v);
    // What a larger cache would have made of it, for the miss-ratio curve
    // (`mrc.rs`), whether or not the folio activates.
    lru.stats()
        .refault_distance(shadow.distance(lru.age()), f.nr_pages(), file);
    if !lru.refault_detection() || f.test(FolioFlags::DROPBEHIND) {
        return false;
    }
    if shadow.distance(lru.age()) > lists.active.pages {
        return false;
    }
    f.test_and_set(FolioFlags::ACTIVE);
    if shadow.workingset {
        // It was in the working set before: say so again (the kernel's
        // "restore").
        f.test_and_set(FolioFlags::WORKINGSET);
    }
    lru.advance_age(f.nr_pages());
    lru.stats().activations.add(1);
    true
}

/// The eviction clock now and the active list's pages: what the refault
/// test compares a shadow's distance with (`workingset_refault`).
pub(crate) fn now(lru: &Lruv<'_>) -> (u64, u64) {
    let active = lru.lock().active.pages;
    (lru.age(), active)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_and_fits_a_value_entry() {
        for (age, ws) in [(0, false), (1, true), (AGE_MASK, true), (12345, false)] {
            let s = Shadow {
                age,
                workingset: ws,
            };
            let v = s.pack();
            assert!(v <= MAX_VALUE);
            assert_eq!(Shadow::unpack(v), s);
        }
        // The clock wraps: a distance across the wrap is still right.
        let s = Shadow {
            age: AGE_MASK - 1,
            workingset: false,
        };
        assert_eq!(s.distance(3), 5);
        let big = Shadow {
            age: u64::MAX,
            workingset: false,
        };
        assert_eq!(big.age & !AGE_MASK, !AGE_MASK, "age is truncated on pack");
        assert_eq!(Shadow::unpack(big.pack()).age, AGE_MASK);
    }
}
