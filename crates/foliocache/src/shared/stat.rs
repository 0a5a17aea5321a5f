//! What the group holds of one file: its pages in a range and the dirty
//! ones among them, from the page descriptors (`cachestat(2)` for the
//! group's cache: `CachedFile::cachestat`).

use std::io;
use std::sync::atomic::Ordering;

use super::index;
use super::seg::F_DIRTY;
use super::SharedFile;

impl SharedFile {
    /// The group's pages of this file at file pages `first..=last`, and
    /// how many of them are dirty: a walk of every descriptor without a
    /// lock, so a snapshot that a racing load, eviction or writeback may
    /// leave a page off (as `cachestat(2)` is, under RCU). The group keeps
    /// no shadows of evicted pages.
    ///
    /// # Errors
    /// When the file's slot cannot be found.
    pub(crate) fn pages_in(&self, first: u64, last: u64) -> io::Result<(u64, u64)> {
        let (_, i, generation) = self.current()?;
        let seg = self.seg();
        let (mut cached, mut dirty) = (0, 0);
        for (_, p) in index::pages_of(seg, i, generation, false)
            .into_iter()
            .filter(|&(index, _)| (first..=last).contains(&index))
        {
            cached += 1;
            let d = seg.desc(p);
            dirty += u64::from(d.is_some_and(|d| d.flags.load(Ordering::Relaxed) & F_DIRTY != 0));
        }
        Ok((cached, dirty))
    }
}
