//! A file's writes in the group's cache: each page held while its bytes
//! change, marked dirty before they do, the file's size moved after
//! (docs/design.md, section 13).

use std::fs::File;
use std::io;

use super::crash::point;
use super::index::{self, Key};
use super::read::Fill;
use super::seg::{Slot, F_DIRTY, F_UPTODATE, PAGE};
use super::slots::saw;
use super::{SharedFile, MAX_OFFSET};
use std::sync::atomic::Ordering;

/// The offset past `buf` written at `offset`, or an error past
/// [`MAX_OFFSET`].
fn end_of(offset: u64, buf: &[u8]) -> io::Result<u64> {
    offset
        .checked_add(buf.len() as u64)
        .filter(|&e| e <= MAX_OFFSET)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared cache: write past the largest offset",
            )
        })
}

impl SharedFile {
    /// Writes `buf` at `offset`: every process's next read sees it; it
    /// reaches the file at the next writeback ([`sync_data`](Self::sync_data),
    /// or when the cache needs its page).
    ///
    /// # Errors
    /// `PermissionDenied` if its descriptor was not opened for writing (as
    /// for [`append`](Self::append), [`set_len`](Self::set_len) and
    /// [`change_file`](Self::change_file)); the inode lock's.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.check_writable()?;
        let end = end_of(offset, buf)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let (_inode, slot, i, generation) = self.inode_lock()?;
        self.write_locked(slot, i, generation, buf, offset, end)
    }

    /// Writes `buf` at the end of the file, atomically for every process
    /// (`O_APPEND`: the size read and moved in one hold of the inode
    /// lock). Returns the offset written at.
    pub fn append(&self, buf: &[u8]) -> io::Result<u64> {
        self.check_writable()?;
        let (_inode, slot, i, generation) = self.inode_lock()?;
        let offset = slot.size.load(Ordering::Acquire);
        let end = end_of(offset, buf)?;
        if !buf.is_empty() {
            self.write_locked(slot, i, generation, buf, offset, end)?;
        }
        Ok(offset)
    }

    /// Changes the file itself with `change` (a hole punched, a range
    /// allocated, collapsed or inserted: what moves or drops data behind
    /// the cache), in one hold of the inode lock: the file's dirty pages
    /// are written back and its pages dropped from the cache first, and
    /// the size is the file's afterwards (`filemap_write_and_wait_range`
    /// then `truncate_pagecache_range`, as the kernel's `fallocate` does).
    /// A writeback that fails leaves the file unchanged.
    pub fn change_file<T>(&self, change: impl FnOnce(&File) -> io::Result<T>) -> io::Result<T> {
        self.check_writable()?;
        let (_inode, slot, i, generation) = self.inode_lock()?;
        self.write_back_locked(slot, i, generation)?;
        if !self.dirty_pages(slot, i, generation)?.is_empty() {
            return Err(io::Error::other(
                "shared cache: dirty pages left after a writeback",
            ));
        }
        self.cut_cache(i, generation, 0)?;
        // Sized from the file whatever `change` did, even on its error.
        let r = change(&self.file);
        let meta = self.file.metadata()?;
        slot.size.store(meta.len(), Ordering::Release);
        saw(slot, &meta);
        r
    }

    /// [`write_at`](Self::write_at)'s body, `end` the offset past `buf`,
    /// the inode lock held.
    fn write_locked(
        &self,
        slot: &Slot,
        i: u32,
        generation: u32,
        buf: &[u8],
        offset: u64,
        end: u64,
    ) -> io::Result<usize> {
        let seg = self.seg();
        if seg.header().dirty.load(Ordering::Relaxed) > seg.pages / 2 {
            self.write_back_locked(slot, i, generation)?;
        }
        let me = self.me()?;
        let mut at = offset;
        while at < end {
            let in_page = (at % PAGE) as usize;
            let len = (PAGE as usize - in_page).min((end - at) as usize);
            let key = Key {
                slot: i,
                generation,
                index: at / PAGE,
            };
            let hold = match index::hold_key(seg, key, me)? {
                Some(hold) => hold,
                None => {
                    let whole = in_page == 0 && len == PAGE as usize;
                    let past_end = at - in_page as u64 >= slot.size.load(Ordering::Relaxed);
                    let fill = if whole || past_end {
                        Fill::Zero
                    } else {
                        Fill::File
                    };
                    self.load(key, slot, fill)?
                }
            };
            // In the file's dirty range before dirty (see `Slot::dirty_lo`;
            // page by page: a load above may have written back and
            // emptied the range), and dirty before the copy: a writer
            // killed part-way leaves a page that is written back, never
            // one dropped half-new.
            slot.dirty_lo.fetch_min(key.index, Ordering::AcqRel);
            slot.dirty_hi.fetch_max(key.index, Ordering::AcqRel);
            if hold.d.flags.fetch_or(F_DIRTY, Ordering::Relaxed) & F_DIRTY == 0 {
                point();
                seg.header().dirty.fetch_add(1, Ordering::Relaxed);
            }
            point();
            hold.page(seg)?
                .copy_in(in_page, &buf[(at - offset) as usize..][..len])?;
            point();
            hold.d.flags.fetch_or(F_UPTODATE, Ordering::Relaxed);
            drop(hold);
            point();
            at += len as u64;
            slot.size.fetch_max(at, Ordering::AcqRel);
        }
        Ok(buf.len())
    }
}
