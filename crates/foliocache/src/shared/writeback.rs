//! Writeback of the group's dirty pages: a file's through its handle's
//! descriptor (a sync, a writer past half the cache dirty, a load that
//! found every page dirty), every file's by path for files whose writers
//! have gone (docs/design.md, section 13).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use super::crash::point;
use super::index::{self, Key};
use super::seg::{Slot, F_DIRTY, PAGE, SLOT_USED};
use super::slots::wrote_back;
use super::{listing, SharedCache, SharedFile};
use backing::AlignedBuf;
use std::sync::atomic::Ordering;

impl SharedCache {
    /// Writes back every dirty page of every file, opening each by the
    /// path it was opened with and checking it is still the same file
    /// (device and inode; a file renamed over is skipped and counted in
    /// the error; one at no path, unlinked, is skipped while a process of
    /// the group holds it open, and its pages dropped once none does, as
    /// the kernel drops an unlinked file's): what the group's last process
    /// (or its guardian) does for files whose writers have gone. Returns
    /// the pages written.
    pub fn write_back_all(&self) -> io::Result<u64> {
        let seg = &self.inner.seg;
        let mut written = 0;
        let mut failed = Vec::new();
        // The slots in use only: a large cache's thousands never used are
        // not faulted in (`Seg::slots_in_use`).
        for i in seg.slots_in_use() {
            let Some(slot) = seg.slot(i) else { break };
            if slot.state.load(Ordering::Acquire) != SLOT_USED {
                continue;
            }
            if slot.dirty_lo.load(Ordering::Acquire) > slot.dirty_hi.load(Ordering::Acquire) {
                continue;
            }
            match self.write_back_slot(i, slot) {
                Ok(n) => written += n,
                // Unlinked: its pages go once no process holds it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => self.drop_unlinked(i, slot),
                Err(e) => failed.push(format!("slot {i}: {e}")),
            }
        }
        if failed.is_empty() {
            Ok(written)
        } else {
            Err(io::Error::other(format!(
                "shared cache: {written} pages written back; not: {}",
                failed.join("; ")
            )))
        }
    }

    fn write_back_slot(&self, i: u32, slot: &Slot) -> io::Result<u64> {
        let path = listing::slot_path(&self.inner.seg, i, slot)?;
        let file = open_direct(&path, false)?;
        let meta = file.metadata()?;
        let version = crate::guardian::persist::file_version(file.as_fd());
        if meta.dev() != slot.dev.load(Ordering::Relaxed)
            || meta.ino() != slot.ino.load(Ordering::Relaxed)
            || !crate::guardian::persist::same_version(
                slot.file_version.load(Ordering::Relaxed),
                version,
            )
        {
            return Err(io::Error::other(format!(
                "{} is another file now",
                path.to_string_lossy()
            )));
        }
        let f = self.open(file)?;
        let n = f.write_back()?;
        f.file.sync_data()?;
        Ok(n)
    }
}

impl SharedFile {
    /// Writes back this file's dirty pages and waits for the device
    /// (`fdatasync`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.write_back()?;
        self.file.sync_data()
    }

    /// As [`sync_data`](Self::sync_data), with the metadata (`fsync`).
    pub fn sync_all(&self) -> io::Result<()> {
        self.write_back()?;
        self.file.sync_all()
    }

    /// Writes back this file's dirty pages (whoever wrote them), without
    /// waiting for the device: the pages written.
    pub fn write_back(&self) -> io::Result<u64> {
        let (_inode, slot, i, generation) = self.inode_lock()?;
        self.write_back_locked(slot, i, generation)
    }

    /// Writes back the dirty pages of (slot `i`, `generation`) through
    /// this process's descriptor, in runs of consecutive file pages. A
    /// page is marked clean only if no one changed it since its bytes
    /// were copied out, so a write racing the writeback stays dirty. The
    /// inode lock is held.
    pub(super) fn write_back_locked(
        &self,
        slot: &Slot,
        i: u32,
        generation: u32,
    ) -> io::Result<u64> {
        const RUN: usize = 64;
        let seg = self.seg();
        let me = self.me()?;
        let dirty = self.dirty_pages(slot, i, generation)?;
        if dirty.is_empty() {
            // (The range held none dirty: it is empty now.)
            slot.dirty_lo.store(u64::MAX, Ordering::Release);
            slot.dirty_hi.store(0, Ordering::Release);
            return Ok(0);
        }
        // Only as large as the run needs: a commit's sync writes a page
        // or two, and a bounce of a whole run would be mapped and
        // unmapped (fresh pages faulted in) at every sync.
        let mut bounce = AlignedBuf::zeroed(dirty.len().min(RUN) * PAGE as usize)?;
        let mut written = 0;
        let mut cleaned = 0;
        let mut past_size = false;
        for run in dirty.chunk_by(|a, b| b.0 == a.0 + 1) {
            for run in run.chunks(RUN) {
                let mut copied = Vec::with_capacity(run.len());
                for (n, &(index, _)) in run.iter().enumerate() {
                    let key = Key {
                        slot: i,
                        generation,
                        index,
                    };
                    let Some(hold) = index::hold_key(seg, key, me)? else {
                        break;
                    };
                    let to = &mut bounce[n * PAGE as usize..][..PAGE as usize];
                    hold.page(seg)?.copy_out(0, to)?;
                    copied.push((key, hold.p, hold.next_version()));
                }
                let Some(&(first, ..)) = copied.first() else {
                    continue;
                };
                let bytes = &bounce[..copied.len() * PAGE as usize];
                point();
                FileExt::write_all_at(&self.file, bytes, first.index * PAGE)?;
                point();
                past_size |=
                    (first.index + copied.len() as u64) * PAGE > slot.size.load(Ordering::Relaxed);
                for (key, p, version) in copied {
                    cleaned += usize::from(self.mark_clean(key, p, version, me)?);
                    written += 1;
                }
            }
        }
        let size = slot.size.load(Ordering::Acquire);
        if past_size && self.file.metadata()?.len() > size {
            self.file.set_len(size)?;
        }
        if written > 0 {
            wrote_back(slot);
        }
        if cleaned == dirty.len() {
            // Every page the range held dirty is clean, and no write ran
            // meanwhile (the inode lock is held).
            slot.dirty_lo.store(u64::MAX, Ordering::Release);
            slot.dirty_hi.store(0, Ordering::Release);
        }
        Ok(written)
    }

    /// Marks page `p` of `key` clean if its version is still `version`;
    /// whether it is clean now.
    fn mark_clean(&self, key: Key, p: u64, version: u64, me: u32) -> io::Result<bool> {
        let seg = self.seg();
        let Some(hold) = index::hold_key(seg, key, me)? else {
            return Ok(false);
        };
        if hold.p != p || hold.d.state.load(Ordering::Relaxed) >> 32 != version {
            return Ok(false);
        }
        if hold.d.flags.fetch_and(!F_DIRTY, Ordering::Relaxed) & F_DIRTY != 0 {
            point();
            index::dec_dirty(seg);
        }
        Ok(true)
    }

    /// The file's dirty pages, `(index, page)` in file order: those in its
    /// slot's dirty range, looked up one by one under the index lock, or,
    /// for a range of more than a quarter of the cache, every descriptor
    /// walked. The inode lock is held.
    pub(super) fn dirty_pages(
        &self,
        slot: &Slot,
        i: u32,
        generation: u32,
    ) -> io::Result<Vec<(u64, u64)>> {
        let (lo, hi) = (
            slot.dirty_lo.load(Ordering::Acquire),
            slot.dirty_hi.load(Ordering::Acquire),
        );
        if lo > hi {
            return Ok(Vec::new());
        }
        let seg = self.seg();
        if hi - lo >= seg.pages / 4 {
            return Ok(index::pages_of(seg, i, generation, true));
        }
        let _index = index::index_lock(seg, self.me()?)?;
        Ok(index::dirty_in(seg, i, generation, lo, hi))
    }
}

/// Opens `path` for writing (`read`: for reading instead), `O_DIRECT`
/// where the filesystem takes it, as the group's own descriptors are (the
/// cache's IO then leaves no second copy in the kernel's cache).
pub(crate) fn open_direct(path: &std::path::Path, read: bool) -> io::Result<File> {
    let open = |direct: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.read(read).write(!read);
        if direct {
            std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_DIRECT);
        }
        o.open(path)
    };
    open(true).or_else(|_| open(false))
}
