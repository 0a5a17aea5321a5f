//! A mapping's table of where its 2 MiB folios sit, so that a random hit
//! can skip the index walk (`docs/design.md`, "A hit without a walk").
//!
//! A cache hit is a lookup and a copy, and at random offsets the lookup's
//! instructions stand between one copy's last misses and the next copy's
//! first: even a walk of index lines the CPU cache holds delays the next
//! copy's misses, and costs a random 4 KiB hit a measurable share of its
//! rate (the note "What a random hit costs beyond its copy" in `docs/measurements/`). A folio of the arena's largest order (2 MiB)
//! starts at a multiple of its size in the file, so the arena page where it
//! starts is the one fact a hit needs from the index, and a table keyed by
//! `index >> MAX_ORDER` holds it in one load.
//!
//! The table is a hint, never the truth. A slot is written (relaxed) when
//! a walk finds a 2 MiB folio there, cleared when a walk finds anything
//! else, and never kept up to date by removal, splits or reuse: a hit that
//! reads a slot takes a reference on the descriptor it names and checks it
//! exactly as it checks one a walk found (its mapping, that it covers the
//! index; then that it is uptodate and covers the read), and walks when a
//! check fails. What makes a descriptor that passes those checks as good as
//! the walk's is the same as for a descriptor the walk found and that was
//! reused since: a folio's mapping is set just before it is stored in the
//! index and cleared, under the index lock, when it is removed, before the
//! folio is freed, and the reference keeps it from being freed; so a folio
//! found with this mapping at this index is in the index, or is being
//! removed by a call the read races. A slot names a descriptor of the
//! cache's own table only (checked), so a slot from any time names some
//! descriptor.
//!
//! The table has one slot per 2 MiB of the file's size when it is made (on
//! the first 2 MiB folio a walk finds), rounded up to a power of two and
//! kept within [`MIN_SLOTS`] and [`MAX_SLOTS`]: files larger than that
//! share slots, by the low bits of the key; a file that grows past its
//! table's reach shares them too. Mappings that never hold a 2 MiB folio
//! never have one. Under loom there is no table (its interleavings would
//! be the walk's, which the models check).

use std::sync::OnceLock;

use crate::arena::MAX_ORDER;
use crate::sync::{AtomicU32, Ordering};

/// The fewest slots of a table.
const MIN_SLOTS: usize = 16;
/// The most slots of a table (4 KiB of them): 2 GiB of a file without sharing.
const MAX_SLOTS: usize = 1024;

/// A mapping's hints (see the module docs): made on first use.
#[derive(Default)]
pub(crate) struct HugeHints {
    slots: OnceLock<Box<[AtomicU32]>>,
}

impl HugeHints {
    /// The arena page where the 2 MiB folio covering `index` started when
    /// a walk last found one there, if a slot says so. Unchecked: see the
    /// module docs.
    #[inline]
    pub(crate) fn get(&self, index: u64) -> Option<usize> {
        if cfg!(loom) {
            return None;
        }
        let slots = self.slots.get()?;
        let slot = &slots[slot_of(index, slots.len())];
        match slot.load(Ordering::Relaxed) {
            0 => None,
            page_plus_one => Some(page_plus_one as usize - 1),
        }
    }

    /// Records what a walk found at `index`: `found`, a folio's order and
    /// first arena page, or nothing. A 2 MiB folio fills the slot (making
    /// the table on the first one, sized for a file of `file_size()`
    /// bytes); anything else empties it, if it named a folio.
    #[inline]
    pub(crate) fn note(
        &self,
        index: u64,
        found: Option<(u32, usize)>,
        file_size: impl FnOnce() -> u64,
    ) {
        if cfg!(loom) {
            return;
        }
        if let Some((MAX_ORDER, page)) = found {
            let Ok(word) = u32::try_from(page + 1) else {
                return;
            };
            let slots = self.slots.get_or_init(|| table_for(file_size()));
            let slot = &slots[slot_of(index, slots.len())];
            if slot.load(Ordering::Relaxed) != word {
                slot.store(word, Ordering::Relaxed);
            }
        } else if let Some(slots) = self.slots.get() {
            let slot = &slots[slot_of(index, slots.len())];
            if slot.load(Ordering::Relaxed) != 0 {
                slot.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Bytes the table takes (0 before it is made).
    pub(crate) fn bytes(&self) -> usize {
        self.slots
            .get()
            .map_or(0, |s| s.len() * std::mem::size_of::<AtomicU32>())
    }
}

/// The slot of `index` in a table of `len` slots (a power of two).
#[inline]
fn slot_of(index: u64, len: usize) -> usize {
    ((index >> MAX_ORDER) as usize) & (len - 1)
}

/// Empty slots for a file of `size` bytes (see the module docs).
fn table_for(size: u64) -> Box<[AtomicU32]> {
    let huge = 1u64 << (MAX_ORDER + 12);
    let want = usize::try_from(size.div_ceil(huge)).unwrap_or(MAX_SLOTS);
    let len = want.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two();
    (0..len).map(|_| AtomicU32::new(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUGE_PAGES: u64 = 1 << MAX_ORDER;

    #[test]
    fn a_table_is_made_by_the_first_huge_folio_and_sized_by_the_file() {
        let h = HugeHints::default();
        // Smaller folios make no table, nor does nothing.
        h.note(0, Some((0, 7)), || 1 << 30);
        h.note(0, None, || 1 << 30);
        assert_eq!(h.bytes(), 0);
        assert_eq!(h.get(0), None);
        h.note(3 * HUGE_PAGES + 5, Some((MAX_ORDER, 1024)), || 1 << 30);
        // 1 GiB: 512 slots.
        assert_eq!(h.bytes(), 512 * 4);
        assert_eq!(h.get(3 * HUGE_PAGES), Some(1024));
        assert_eq!(h.get(3 * HUGE_PAGES + HUGE_PAGES - 1), Some(1024));
        assert_eq!(h.get(4 * HUGE_PAGES), None);
        // 512 slots: the key wraps.
        assert_eq!(h.get((512 + 3) * HUGE_PAGES), Some(1024));
        assert_eq!(table_for(0).len(), MIN_SLOTS);
        assert_eq!(table_for(u64::MAX).len(), MAX_SLOTS);
        assert_eq!(table_for(3 << 21).len(), MIN_SLOTS);
        assert_eq!(table_for(100 << 21).len(), 128);
    }

    #[test]
    fn anything_but_a_huge_folio_empties_its_slot() {
        let h = HugeHints::default();
        h.note(0, Some((MAX_ORDER, 0)), || 4 << 21);
        assert_eq!(h.get(1), Some(0));
        h.note(1, Some((4, 16)), || 4 << 21);
        assert_eq!(h.get(0), None);
        h.note(0, Some((MAX_ORDER, 0)), || 4 << 21);
        h.note(5, None, || 4 << 21);
        assert_eq!(h.get(0), None);
        // A page past what a slot can hold is not noted.
        h.note(0, Some((MAX_ORDER, u32::MAX as usize)), || 4 << 21);
        assert_eq!(h.get(0), None);
    }
}
