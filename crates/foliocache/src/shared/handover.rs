//! Files the group's processes hold in the kernel (a mapping, a stdio
//! stream, a plain descriptor): who holds each (`Slot::kernel`), the
//! handles that then pass through, and the open that takes a file back
//! once its one holder is gone (docs/design.md, section 13).

use std::io;
use std::sync::atomic::Ordering;

use super::lock;
use super::seg::{Seg, Slot};
use super::slots::HANDED;
use super::{SharedCache, SharedFile};

/// `Slot::kernel` of a file more than one process of the group held in
/// the kernel: the kernel's while the slot holds the file.
pub(super) const KERNEL_MANY: u32 = u32::MAX;

/// Records that participant `me` (`None`: a process with no participant
/// number) holds the slot's file in the kernel ([`HANDED`]): no
/// description of it serves from the cache from now on, open or opened
/// later, while that process lives (`Slot::kernel`); a second live
/// holder makes it so for good ([`KERNEL_MANY`]).
pub(super) fn handed(seg: &Seg, slot: &Slot, me: Option<u32>) {
    slot.seen_ctime.store(HANDED, Ordering::Release);
    let _ = slot
        .kernel
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
            Some(match me {
                Some(me) if k == 0 || k == me => me,
                Some(me) if k != KERNEL_MANY && !lock::alive(seg, k) => me,
                _ => KERNEL_MANY,
            })
        });
}

/// Whether no process of the group but `me` (`None`: none) may hold the
/// slot's file in the kernel: never marked, or marked by `me` alone or by
/// a process gone since.
pub(super) fn kernel_free(seg: &Seg, k: u32, me: Option<u32>) -> bool {
    k == 0 || (k != KERNEL_MANY && (Some(k) == me || !lock::alive(seg, k)))
}

impl SharedCache {
    /// Says that a process of the group hands the file (`dev`, `ino`) to
    /// the kernel (a stdio stream or a mapping reads and writes it there,
    /// behind the group): every handle of it, open or opened later while
    /// this process lives (for good once a second process hands it over
    /// too), finds [`SharedFile::handed_elsewhere`] true, and an open
    /// follows the file as the kernel has it, whatever its change time and
    /// size then. A lookup and a few atomics, no lock. Returns
    /// whether the cache had a slot for the file to mark; where it had
    /// none, [`SharedFile::hand_to_kernel`] on a handle opened for the
    /// purpose gives it one, so that a later open in the group knows.
    pub fn handed_to_kernel(&self, dev: u64, ino: u64) -> bool {
        let seg = &self.inner.seg;
        let me = self.inner.me.id(seg).ok();
        self.slot_of(dev, ino)
            .map(|slot| handed(seg, slot, me))
            .is_some()
    }

    /// As [`handed_to_kernel`](Self::handed_to_kernel), for a file more
    /// than one process holds in the kernel: one this process holds there
    /// as it forks (from its prepare handler, before the child exists),
    /// since the child inherits its mappings, streams and descriptors. The
    /// file stays the kernel's while the cache holds it.
    pub fn handed_to_kernel_by_many(&self, dev: u64, ino: u64) -> bool {
        let seg = &self.inner.seg;
        self.slot_of(dev, ino)
            .map(|slot| handed(seg, slot, None))
            .is_some()
    }
}

impl SharedFile {
    /// Whether a process of the group handed the file to the kernel, before
    /// or since this handle's open ([`SharedCache::handed_to_kernel`]: a
    /// mapping, a stdio stream, a change of its inode flags): the kernel
    /// may hold writes the cache does not, now or later (a mapping lives
    /// on after its descriptor's close), so the caller is to serve the
    /// file through the kernel, as the interposer does from its next call
    /// on it. Stays true until an open takes the file back
    /// ([`take_back_from_kernel`](Self::take_back_from_kernel)). One load,
    /// no lock.
    #[inline]
    pub fn handed_elsewhere(&self) -> bool {
        let (i, generation) = self.slot_key();
        self.seg().slot(i).is_some_and(|s| {
            s.kernel.load(Ordering::Acquire) != 0
                && s.generation.load(Ordering::Acquire) == generation
        })
    }

    /// Marks this file handed to the kernel for the group
    /// ([`SharedCache::handed_to_kernel`]), through this handle's slot: for
    /// a file the cache had no slot for, opened to be marked.
    pub fn hand_to_kernel(&self) -> io::Result<()> {
        let (slot, ..) = self.current()?;
        handed(self.seg(), slot, self.me().ok());
        Ok(())
    }

    /// At an open by a process that holds no kernel handle of the file (no
    /// mapping, stream or plain descriptor): whether it may serve the file
    /// from the cache. A file [`handed_elsewhere`](Self::handed_elsewhere)
    /// is taken back from the kernel once no process of the group that
    /// held it there lives (its clean pages dropped and its size read
    /// again, as for a change behind the group: a mapping's writes need not
    /// move the change time); while one lives, or after two did, it stays
    /// the kernel's.
    pub fn take_back_from_kernel(&self) -> io::Result<bool> {
        let seg = self.seg();
        let me = self.me().ok();
        let (slot, ..) = self.current()?;
        loop {
            let k = slot.kernel.load(Ordering::Acquire);
            if k == 0 {
                return Ok(true);
            }
            if !kernel_free(seg, k, me) {
                return Ok(false);
            }
            if slot
                .kernel
                .compare_exchange(k, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break;
            }
        }
        // Followed as a change behind the group: the mark matches no file.
        slot.seen_ctime.store(HANDED, Ordering::Release);
        self.follow_kernel(&self.file.metadata()?)?;
        Ok(true)
    }
}
