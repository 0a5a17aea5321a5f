//! A file's size changes in the group's cache: the size moved first for a
//! cut, the pages past it dropped and the last one's tail zeroed, then the
//! file's own length (docs/design.md, section 13).

use std::io;

use super::crash::point;
use super::index::{self, Key};
use super::seg::PAGE;
use super::slots::saw;
use super::{SharedFile, MAX_OFFSET};
use std::sync::atomic::Ordering;

impl SharedFile {
    /// Sets the file's size: pages past it leave the cache, the last
    /// one's tail is zeroed, the file is truncated or extended.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        if len > MAX_OFFSET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared cache: size past the largest offset",
            ));
        }
        let (_inode, slot, i, generation) = self.inode_lock()?;
        // A cut moves the size first: from then on the truncation has
        // happened for every reader, and a process killed part-way leaves
        // the rest (pages past the size, the file's length) to the inode
        // lock's next holder (`inode_lock`). A growth moves it last.
        if len < slot.size.load(Ordering::Relaxed) {
            slot.size.store(len, Ordering::Release);
            point();
        }
        self.cut_cache(i, generation, len)?;
        point();
        self.file.set_len(len)?;
        point();
        slot.size.store(len, Ordering::Release);
        saw(slot, &self.file.metadata()?);
        Ok(())
    }

    /// Drops the cached pages of (slot `i`, `generation`) wholly past
    /// `len` and zeroes the rest of the page holding `len`. The inode lock
    /// is held.
    pub(super) fn cut_cache(&self, i: u32, generation: u32, len: u64) -> io::Result<()> {
        let seg = self.seg();
        let me = self.me()?;
        let first_gone = len.div_ceil(PAGE);
        for (index, _) in index::pages_of(seg, i, generation, false) {
            if index < first_gone {
                continue;
            }
            let key = Key {
                slot: i,
                generation,
                index,
            };
            if let Some(hold) = index::hold_key(seg, key, me)? {
                let _index = index::index_lock(seg, me)?;
                index::forget(seg, &hold);
                point();
            }
        }
        if !len.is_multiple_of(PAGE) {
            let key = Key {
                slot: i,
                generation,
                index: len / PAGE,
            };
            if let Some(hold) = index::hold_key(seg, key, me)? {
                hold.page(seg)?.zero_from((len % PAGE) as usize)?;
            }
        }
        Ok(())
    }
}
