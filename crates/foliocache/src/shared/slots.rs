//! Which slot of the segment is a file's: found by hashing its (dev,
//! ino), given one if it has none, taken back from a file with nothing
//! unsaved when every slot is in use; and what the group last saw of the
//! file in the kernel (docs/design.md, section 13).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;

use super::crash::point;
use super::handover::kernel_free;
use super::seg::{self, Slot, F_DIRTY, SLOT_FREE, SLOT_GONE, SLOT_PATH, SLOT_USED};
use super::SharedFile;
use super::{index, lock, SharedCache};

/// The file's change time (nanoseconds) and size, as the kernel has them.
pub(super) fn kernel_view(meta: &std::fs::Metadata) -> (u64, u64) {
    let ns = (meta.ctime() as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(meta.ctime_nsec() as u64);
    (ns, meta.len())
}

/// What the group last saw of the slot's file in the kernel.
pub(super) fn seen(slot: &Slot) -> (u64, u64) {
    (
        slot.seen_ctime.load(Ordering::Acquire),
        slot.seen_size.load(Ordering::Acquire),
    )
}

/// The high bit of the change time recorded after the group's own
/// writeback, whose low bits are the wall-clock time (nanoseconds) once
/// its writes were done: the group changed the file then and did not
/// look at the change time it left. A writeback does not look: on a
/// filesystem with fine-grained change times (Linux 6.13's multigrain
/// timestamps), a look marks the time queried, and the next write must
/// stamp a new one and dirty the inode, so looking after every sync
/// made every commit of a database (a WAL write, then `fdatasync`) dirty
/// its inode again (docs/preload.md, "Processes"). An open that then finds
/// the file at the size the writeback left and a change time no later
/// than that moment takes the change as the group's own ([`known`]).
const WROTE_BACK: u64 = 1 << 63;

/// The change time recorded for a file a process of the group handed to
/// the kernel: no file has it, so the next open follows the file.
pub(super) const HANDED: u64 = u64::MAX;

/// Records that the group's writeback changed the slot's file in the
/// kernel, at the size the group has ([`WROTE_BACK`]; the inode lock
/// held). A hand-over's mark stays: the kernel may hold a change of the
/// file the group has not seen.
pub(super) fn wrote_back(slot: &Slot) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mark = WROTE_BACK | (now & !WROTE_BACK);
    let _ = slot
        .seen_ctime
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            (c != HANDED).then_some(mark)
        });
    slot.seen_size
        .store(slot.size.load(Ordering::Acquire), Ordering::Release);
}

/// Whether the kernel's view `kernel` of a file is what the group last
/// saw of it, `seen`, or can be the change of the group's own last
/// writeback: the size it left, a change time no later than its end. A
/// change from outside the group within the same clock tick as the
/// group's writeback, leaving the size as it was, can pass for the
/// group's (docs/preload.md, "Processes").
fn known(seen: (u64, u64), kernel: (u64, u64)) -> bool {
    let (ctime, size) = seen;
    seen == kernel
        || (ctime != HANDED
            && ctime & WROTE_BACK != 0
            && size == kernel.1
            && kernel.0 <= ctime & !WROTE_BACK)
}

/// Records the kernel's view of the slot's file (the inode lock held, or
/// the slot new).
pub(super) fn saw(slot: &Slot, meta: &std::fs::Metadata) {
    let (ctime, size) = kernel_view(meta);
    slot.seen_ctime.store(ctime, Ordering::Release);
    slot.seen_size.store(size, Ordering::Release);
}

/// The error of a call on a file the group's cache cannot serve now,
/// for want of a slot ([`SharedCache::out_of_slots`]).
#[derive(Debug)]
struct OutOfSlots(String);

impl std::fmt::Display for OutOfSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OutOfSlots {}

/// An [`OutOfSlots`] error saying `msg`.
fn out_of_slots(msg: String) -> io::Error {
    io::Error::other(OutOfSlots(msg))
}

/// The error of a handle whose file's slot went to another file each time
/// it looked (every slot in use, taken back again and again).
pub(super) fn moving() -> io::Error {
    out_of_slots("shared cache: the file's slot keeps moving".to_owned())
}

impl SharedCache {
    /// Slot `i`'s file, found at no path by [`write_back_all`]
    /// (`NotFound`): unlinked, as a rule. While a live process of the
    /// group holds it open (a descriptor in `/proc/PID/fd`), it stays, for
    /// that process to read and write back through its own descriptor;
    /// else its pages go, dirty ones too, with nothing said, as the kernel
    /// drops an unlinked file's pages once its last user is gone
    /// (`evict`, `truncate_inode_pages_final`). A file renamed away whose
    /// users are all gone goes too: the group has no way to it.
    ///
    /// [`write_back_all`]: SharedCache::write_back_all
    pub(super) fn drop_unlinked(&self, i: u32, slot: &Slot) {
        let seg = &self.inner.seg;
        let (dev, ino) = (
            slot.dev.load(Ordering::Relaxed),
            slot.ino.load(Ordering::Relaxed),
        );
        if self.held_open(dev, ino) {
            return;
        }
        let Ok(me) = self.inner.me.id(seg) else {
            return;
        };
        let generation = slot.generation.load(Ordering::Acquire);
        let Ok(_inode) = lock::lock(seg, &slot.lock, &slot.waiters, me) else {
            return;
        };
        if slot.generation.load(Ordering::Acquire) != generation
            || slot.state.load(Ordering::Acquire) != SLOT_USED
        {
            return;
        }
        for (index, _) in index::pages_of(seg, i, generation, false) {
            let key = index::Key {
                slot: i,
                generation,
                index,
            };
            if let Ok(Some(hold)) = index::hold_key(seg, key, me) {
                if let Ok(_index) = index::index_lock(seg, me) {
                    index::forget(seg, &hold);
                    point();
                }
            }
        }
        slot.dirty_lo.store(u64::MAX, Ordering::Release);
        slot.dirty_hi.store(0, Ordering::Release);
    }

    /// Whether a live process of the group has a descriptor of the file
    /// (`dev`, `ino`) open, or may have (its `/proc/PID/fd` unreadable).
    fn held_open(&self, dev: u64, ino: u64) -> bool {
        let seg = &self.inner.seg;
        (0..seg::PARTS)
            .filter_map(|k| seg.part(k))
            .filter(|p| lock::lives(p))
            .any(|p| {
                let pid = p.pid.load(Ordering::Relaxed);
                let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                    return true;
                };
                fds.flatten().any(|fd| {
                    std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
                })
            })
    }

    /// Whether `e`, an error of a [`SharedFile`] call, says the cache
    /// cannot serve the file now for want of a slot: every slot of its
    /// table holds a file with unsaved data or one a live process holds in
    /// the kernel, or the file's slot went to another file each time the
    /// call looked. The call changed nothing. The file is then to be served
    /// through the kernel (the interposer hands it over whole), once
    /// nothing of it is left unsaved in the group
    /// ([`unsaved_len`](Self::unsaved_len) is `None`): a file the table
    /// has no slot for has nothing unsaved in it.
    pub fn out_of_slots(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|e| e.is::<OutOfSlots>())
    }
}

impl SharedFile {
    /// Finds (or gives) this file its slot, under the index lock.
    pub(super) fn resolve(&self, meta: &std::fs::Metadata) -> io::Result<()> {
        let seg = self.seg();
        let me = self.me()?;
        let _index = index::index_lock(seg, me)?;
        let mut free = None;
        for i in seg.slot_probe(self.dev, self.ino) {
            let Some(slot) = seg.slot(i) else { break };
            match slot.state.load(Ordering::Acquire) {
                SLOT_USED
                    if slot.dev.load(Ordering::Relaxed) == self.dev
                        && slot.ino.load(Ordering::Relaxed) == self.ino =>
                {
                    let generation = slot.generation.load(Ordering::Acquire);
                    self.key.store(
                        u64::from(i) << 32 | u64::from(generation),
                        Ordering::Release,
                    );
                    return Ok(());
                }
                SLOT_USED => {}
                // The end of the probe: no slot past it holds the file.
                SLOT_FREE => {
                    free = free.or(Some(i));
                    break;
                }
                _ => free = free.or(Some(i)),
            }
        }
        let i = match free {
            Some(i) => i,
            None => self.recycle_slot(me)?,
        };
        let slot = seg.slot(i).ok_or_else(|| io::Error::other("no slot"))?;
        let generation = slot
            .generation
            .load(Ordering::Relaxed)
            .wrapping_add(1)
            .max(1);
        slot.generation.store(generation, Ordering::Release);
        point();
        slot.dev.store(self.dev, Ordering::Relaxed);
        slot.ino.store(self.ino, Ordering::Relaxed);
        let version = crate::guardian::persist::file_version(std::os::fd::AsFd::as_fd(&self.file));
        slot.file_version.store(version, Ordering::Relaxed);
        slot.size.store(meta.len(), Ordering::Relaxed);
        slot.dirty_lo.store(u64::MAX, Ordering::Relaxed);
        slot.dirty_hi.store(0, Ordering::Relaxed);
        slot.kernel.store(0, Ordering::Relaxed);
        saw(slot, meta);
        let len = self.path.len().min(SLOT_PATH);
        if !seg.write_slot_path(i, &self.path[..len]) {
            return Err(io::Error::other("no slot"));
        }
        slot.path_len.store(len as u32, Ordering::Relaxed);
        slot.state.store(SLOT_USED, Ordering::Release);
        self.key.store(
            u64::from(i) << 32 | u64::from(generation),
            Ordering::Release,
        );
        Ok(())
    }

    /// Follows a change made to the file behind the group (by a process
    /// outside it, or one of its own through the kernel: a stdio stream,
    /// a mapping), seen at an open as a change time or size other than
    /// the group last saw: when the group holds nothing unsaved of the
    /// file, its pages go and its size is the file's; else the group's
    /// unsaved data stays, to be written over the change.
    pub(super) fn follow_kernel(&self, meta: &std::fs::Metadata) -> io::Result<()> {
        let (slot, ..) = self.current()?;
        if known(seen(slot), kernel_view(meta)) {
            return Ok(());
        }
        let (_inode, slot, i, generation) = self.inode_lock()?;
        let meta = self.file.metadata()?;
        if known(seen(slot), kernel_view(&meta)) {
            return Ok(());
        }
        if self.dirty_pages(slot, i, generation)?.is_empty() {
            self.cut_cache(i, generation, 0)?;
            slot.size.store(meta.len(), Ordering::Release);
        }
        saw(slot, &meta);
        Ok(())
    }

    /// A slot taken from its file (whose handles find the generation
    /// moved on and look again): one no page names and no one holds, or,
    /// when every slot names pages, one whose pages are all clean and
    /// unheld, which leave the cache (the file's next read loads them
    /// again); never one whose file was handed to the kernel
    /// (`Slot::kernel`). The index lock is held.
    pub(super) fn recycle_slot(&self, me: u32) -> io::Result<u32> {
        let seg = self.seg();
        let mut named: Vec<Vec<u64>> = vec![Vec::new(); seg.slots as usize];
        for p in 0..seg.pages {
            let Some(d) = seg.desc(p) else { break };
            if d.flags.load(Ordering::Relaxed) & seg::F_USED != 0 {
                if let Some(n) = named.get_mut(d.slot.load(Ordering::Relaxed) as usize) {
                    n.push(p);
                }
            }
        }
        let mut order: Vec<u32> = (1..seg.slots as u32).collect();
        order.sort_by_key(|&i| named[i as usize].len());
        for i in order {
            let Some(slot) = seg.slot(i) else { break };
            // A file a live process holds in the kernel keeps its mark
            // (and so its slot).
            if !kernel_free(seg, slot.kernel.load(Ordering::Acquire), None)
                || slot
                    .lock
                    .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            let mut holds = Vec::new();
            let clean = named[i as usize]
                .iter()
                .all(|&p| match index::try_hold(seg, p, me) {
                    Ok(Some(h)) => {
                        let f = h.d.flags.load(Ordering::Relaxed);
                        let ours = f & seg::F_USED == 0 || h.d.slot.load(Ordering::Relaxed) == i;
                        let ok = ours && f & F_DIRTY == 0;
                        holds.push(h);
                        ok
                    }
                    _ => false,
                });
            if clean {
                for h in &holds {
                    if h.d.flags.load(Ordering::Relaxed) & seg::F_USED != 0 {
                        index::forget(seg, h);
                        point();
                    }
                }
                drop(holds);
                slot.state.store(SLOT_GONE, Ordering::Relaxed);
                slot.generation.fetch_add(1, Ordering::Release);
                slot.lock.store(0, Ordering::Release);
                return Ok(i);
            }
            drop(holds);
            slot.lock.store(0, Ordering::Release);
        }
        Err(out_of_slots(format!(
            "shared cache: more than {} files with unsaved data or handed to the kernel",
            seg.slots - 1
        )))
    }

    /// This file's slot and generation, looked up again if its slot went
    /// to another file.
    #[inline]
    pub(super) fn current(&self) -> io::Result<(&Slot, u32, u32)> {
        for _ in 0..4 {
            let (i, generation) = self.slot_key();
            if let Some(slot) = self.seg().slot(i) {
                if slot.generation.load(Ordering::Acquire) == generation
                    && slot.state.load(Ordering::Acquire) == SLOT_USED
                {
                    return Ok((slot, i, generation));
                }
            }
            self.resolve(&self.file.metadata()?)?;
        }
        Err(moving())
    }

    /// [`current`](Self::current) and the size, read while the slot held
    /// this file (a slot given to another file meanwhile has another's).
    pub(super) fn sized(&self) -> io::Result<(&Slot, u32, u32, u64)> {
        for _ in 0..4 {
            let (slot, i, generation) = self.current()?;
            let size = slot.size.load(Ordering::Acquire);
            if slot.generation.load(Ordering::Acquire) == generation {
                return Ok((slot, i, generation, size));
            }
        }
        Err(moving())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writeback_is_known_by_its_size_and_time_and_a_hand_over_never() {
        let t = 1_700_000_000_000_000_000u64;
        let wrote = (WROTE_BACK | t, 4096);
        // The write's stamp, no later than the writeback's end.
        assert!(known(wrote, (t - 5, 4096)));
        assert!(known(wrote, (t, 4096)));
        // Changed after it, or to another size.
        assert!(!known(wrote, (t + 1, 4096)));
        assert!(!known(wrote, (t - 5, 8192)));
        assert!(!known((HANDED, 4096), (t, 4096)));
        assert!(!known(
            (HANDED, u64::MAX >> 1),
            (u64::MAX >> 1, u64::MAX >> 1)
        ));
        // Seen at an open: only the same time and size.
        assert!(known((t, 4096), (t, 4096)));
        assert!(!known((t, 4096), (t - 1, 4096)));
    }
}
