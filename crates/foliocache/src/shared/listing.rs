//! What the shared cache holds, as a list of files and runs of their
//! pages: for a state file the next group's cache loads back
//! (`SharedCache::save_state`, in the `warm` module), as the in-process
//! cache lists its LRU.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::seg::{Seg, Slot, F_REFERENCED, F_UPTODATE, F_USED, SLOT_PATH, SLOT_USED};
use super::SharedCache;

/// A file the cache holds pages of, by the path its slot recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedFile {
    pub(crate) path: PathBuf,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// A run of cached pages: the file's number in the list, its first page,
/// its length in pages.
pub(crate) type Run = (u32, u64, u32);

/// The path slot `i` recorded (the first process's `/proc/self/fd`
/// link at the file's open), as another process may be writing it: a
/// copy of its bytes.
pub(super) fn slot_path(seg: &Seg, i: u32, slot: &Slot) -> io::Result<PathBuf> {
    let len = (slot.path_len.load(Ordering::Relaxed) as usize).min(SLOT_PATH);
    let mut path = vec![0u8; len];
    if !seg.read_slot_path(i, &mut path) {
        return Err(io::Error::other("no slot"));
    }
    Ok(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(path).into())
}

impl SharedCache {
    /// The files the cache holds uptodate pages of and their runs of
    /// pages, the runs holding a page read since the clock last passed
    /// first (the hot ones), then the rest; files handed to the kernel
    /// are left out. A walk of every page's descriptor in use
    /// (`Seg::descs_in_use`) with no lock: a
    /// snapshot, which a process changing the cache meanwhile may make
    /// stale (the state file is a hint; its loader checks each file).
    pub(crate) fn cached_runs(&self) -> (Vec<ListedFile>, Vec<Run>) {
        let seg = &self.inner.seg;
        // Slot -> its pages, each with whether it was referenced.
        let mut by_slot: BTreeMap<u32, Vec<(u64, bool)>> = BTreeMap::new();
        for p in seg.descs_in_use() {
            let Some(d) = seg.desc(p) else { break };
            let flags = d.flags.load(Ordering::Acquire);
            if flags & (F_USED | F_UPTODATE) != F_USED | F_UPTODATE {
                continue;
            }
            let i = d.slot.load(Ordering::Relaxed);
            let generation = d.generation.load(Ordering::Relaxed);
            let Some(slot) = seg.slot(i) else { continue };
            if slot.state.load(Ordering::Acquire) != SLOT_USED
                || slot.generation.load(Ordering::Acquire) != generation
                || slot.kernel.load(Ordering::Acquire) != 0
            {
                continue;
            }
            let index = d.index.load(Ordering::Relaxed);
            by_slot
                .entry(i)
                .or_default()
                .push((index, flags & F_REFERENCED != 0));
        }
        let mut files = Vec::new();
        let (mut hot, mut cold) = (Vec::new(), Vec::new());
        for (i, mut pages) in by_slot {
            let Some(slot) = seg.slot(i) else { continue };
            let Ok(path) = slot_path(seg, i, slot) else {
                continue;
            };
            let file = files.len() as u32;
            files.push(ListedFile {
                path,
                dev: slot.dev.load(Ordering::Relaxed),
                ino: slot.ino.load(Ordering::Relaxed),
            });
            pages.sort_unstable();
            pages.dedup_by_key(|p| p.0);
            let mut at = 0;
            while at < pages.len() {
                let first = pages[at].0;
                let mut end = at + 1;
                while end < pages.len()
                    && pages[end - 1].0.checked_add(1) == Some(pages[end].0)
                    && end - at < u32::MAX as usize
                {
                    end += 1;
                }
                let run = (file, first, (end - at) as u32);
                if pages[at..end].iter().any(|p| p.1) {
                    hot.push(run);
                } else {
                    cold.push(run);
                }
                at = end;
            }
        }
        hot.extend(cold);
        (files, hot)
    }
}
