//! Pages another cache held of a file, taken in as the group's clean
//! pages: the interposer moving a process's own cache into its group's at
//! the process's first fork (`foliocache run`), so the group starts with
//! what the process had read rather than cold.

use std::io;

use super::index::{self, Key};
use super::seg::PAGE;
use super::{Fill, SharedFile};
use crate::arena::collapse::Collapsed;
use crate::sync::Ordering;

impl SharedFile {
    /// Caches `bytes` as the file's clean page at `offset` if the cache
    /// holds none there, and returns whether it did. `offset` is a
    /// multiple of 4 KiB; `bytes` is a whole page, or the file's last
    /// page up to its size. The caller promises they are the file's bytes
    /// now (another cache's uptodate page, that cache's dirty data written
    /// to the file first, as [`Mapping::cached_pages`] gives them out):
    /// the group serves them as the file's.
    ///
    /// [`Mapping::cached_pages`]: crate::filemap::Mapping::cached_pages
    ///
    /// # Errors
    /// `InvalidInput` for an offset not page-aligned, bytes past the
    /// file's size or not a whole page before it; as a read's miss
    /// otherwise (every page dirty or in use, the segment's locks).
    pub fn cache_clean(&self, offset: u64, bytes: &[u8]) -> io::Result<bool> {
        let (_inode, slot, i, generation) = self.inode_lock()?;
        let size = slot.size.load(Ordering::Acquire);
        let end = offset.checked_add(bytes.len() as u64);
        let whole = bytes.len() as u64 == PAGE || end == Some(size);
        if !offset.is_multiple_of(PAGE)
            || bytes.is_empty()
            || !whole
            || end.is_none_or(|e| e > size)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cache_clean: {} bytes at {offset}: not a page of the file (size {size})",
                    bytes.len()
                ),
            ));
        }
        let key = Key {
            slot: i,
            generation,
            index: offset / PAGE,
        };
        if let Some(held) = index::hold_key(self.seg(), key, self.me()?)? {
            drop(held);
            return Ok(false);
        }
        drop(self.load(key, slot, Fill::Bytes(bytes))?);
        Ok(true)
    }
}

impl super::SharedCache {
    /// Before a bulk fill of about `pages` pages ([`SharedFile::cache_clean`]
    /// of a file's cached pages): makes the 2 MiB blocks holding the next
    /// pages the cache will give out 2 MiB pages now, in this process, so
    /// that the fill copies into them without a fault a page, and the
    /// creator's collapse (`start_huge_pages`) finds them done rather than
    /// copying them again. Nothing when the cache has given out all its
    /// pages once (its next pages are then reclaim's choice), or where the
    /// kernel refuses. A hint: a fill meanwhile by another process only
    /// moves which pages those are.
    pub fn prepare_fill(&self, pages: u64) {
        let seg = &self.inner.seg;
        let first = seg.header().hand.load(Ordering::Relaxed);
        let Some(end) = first
            .checked_add(pages)
            .filter(|&e| pages > 0 && e <= seg.pages)
        else {
            return;
        };
        for b in seg.block_of_page(first)..=seg.block_of_page(end - 1) {
            // (None: the last pages, in no whole block.)
            let Some(done) = seg.collapse_block(b) else {
                return;
            };
            if let Collapsed::Refused(_) = done {
                return;
            }
        }
    }
}
