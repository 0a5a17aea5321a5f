//! A mapping's place in the guardian's segment (docs/design.md, section
//! 12): its file slot, taken at its first dirty page, and the unsaved
//! state of its pages, kept as they are made dirty, written back, or
//! dropped.

use std::os::fd::{AsFd, AsRawFd};
// (`guard_slot` is a plain atomic even under loom: a cache under loom has
// no guardian, and it is never touched there.)
#[allow(clippy::disallowed_types)]
use std::sync::atomic::{AtomicU32, Ordering};

use super::{Folio, Mapping};
use crate::guardian::segment::Segment;
use crate::guardian::Guard;

/// A mapping's slot: 0 none taken yet, [`NO_SLOT`] none to be had.
#[allow(clippy::disallowed_types)]
pub(crate) type GuardSlot = AtomicU32;

/// The file cannot be guarded (no slot free, a path too long, a file
/// opened other than by path): its dirty pages are not marked.
const NO_SLOT: u32 = u32::MAX;

impl Mapping {
    /// The guardian's state, if the cache has a guardian and this is a file
    /// it can guard.
    fn guard(&self) -> Option<&Guard> {
        if self.memfile {
            return None;
        }
        self.inner().mem.guard.as_ref()
    }

    /// This file's slot in the guardian's segment, taken now if none was:
    /// its identity, size and path (from `/proc/self/fd`, so it names the
    /// file the backing holds, wherever it was renamed).
    fn guard_slot(&self, g: &Guard) -> Option<u32> {
        match self.guard_slot.load(Ordering::Acquire) {
            0 => {}
            NO_SLOT => return None,
            slot => return Some(slot),
        }
        let taken = (|| {
            let (dev, ino) = self.inode.key?;
            let file = self.backing().raw_file()?;
            let path = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
            let version = crate::guardian::persist::file_version(file.as_fd());
            g.take_slot(
                (dev, ino, version),
                self.size(),
                path.as_os_str().as_encoded_bytes(),
            )
        })();
        let want = taken.unwrap_or(NO_SLOT);
        match self
            .guard_slot
            .compare_exchange(0, want, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => taken,
            Err(other) => {
                // Another thread took one first: ours goes back.
                if let Some(s) = taken {
                    g.free_slot(s);
                }
                (other != NO_SLOT).then_some(other)
            }
        }
    }

    /// Where this file's dirty pages are recorded for the guardian: the
    /// segment and the file's slot (taken now if none was), or `None` when
    /// nothing guards it. Looked up once per batch of pages made dirty.
    pub(crate) fn unsaved_marker(&self) -> Option<(&Segment, u32)> {
        let g = self.guard()?;
        Some((g.segment(), self.guard_slot(g)?))
    }

    /// Every page of folio `f` is saved (written back), or belongs to no
    /// file any more (dropped without writeback).
    pub(crate) fn guard_clear(&self, f: &Folio) {
        let Some(g) = self.guard() else { return };
        if let Some(page) = self.inner().mem.table.page_of(f) {
            g.segment().clear_unsaved(page as u64, f.nr_pages());
        }
    }

    /// The file's size changed to `size`.
    #[inline]
    pub(crate) fn guard_size(&self, size: u64) {
        let slot = self.guard_slot.load(Ordering::Relaxed);
        if slot != 0 && slot != NO_SLOT {
            if let Some(g) = self.guard() {
                g.segment().set_slot_size(slot, size);
            }
        }
    }

    /// The mapping goes with nothing unsaved (its folios removed): its slot
    /// is free for another file.
    pub(crate) fn guard_release(&self) {
        let slot = self.guard_slot.swap(0, Ordering::AcqRel);
        if slot != 0 && slot != NO_SLOT {
            if let Some(g) = self.guard() {
                g.free_slot(slot);
            }
        }
    }
}
